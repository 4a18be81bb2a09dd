package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/rerun"
	"github.com/openrath/rath/internal/runtime"
	api "github.com/openrath/rath/pkg/ledgerapi"
	"github.com/openrath/rath/pkg/memoryapi"
)

// Exit codes of rath.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitRefused     = 4
	exitBroken      = 5
	exitUnavailable = 6
	exitDiverged    = 7
	exitDenied      = 8
	exitNotPending  = 9
	exitQuota       = 10
	exitRegressed   = 11
)

// usageError marks a bad command line: an unknown command or flag, a wrong
// number of arguments, a flag value rath cannot use.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// unreachableError reports that nothing answered: no NATS server, or no
// ledger on it. The message says what to check; err is the cause.
type unreachableError struct {
	msg string
	err error
}

func (e *unreachableError) Error() string { return fmt.Sprintf("%s (%v)", e.msg, e.err) }

func (e *unreachableError) Unwrap() error { return e.err }

// deniedError reports that NATS refused the identity rath used: no
// credentials, credentials it does not know, or a permission the identity
// lacks. The message names the file or the permission; err is the cause.
type deniedError struct {
	msg string
	err error
}

func (e *deniedError) Error() string { return fmt.Sprintf("%s (%v)", e.msg, e.err) }

func (e *deniedError) Unwrap() error { return e.err }

// causedError is an error whose message says everything the user needs
// (a failure printed in full already, or the cause rephrased for people);
// err, its cause, sets the exit status.
type causedError struct {
	msg string
	err error
}

func (e *causedError) Error() string { return e.msg }

func (e *causedError) Unwrap() error { return e.err }

// brokenError is returned by verify when a session's hash chain does not hold.
type brokenError struct {
	session string
	fault   *api.Fault
}

func (e *brokenError) Error() string {
	if e.fault == nil {
		return "chain of session " + e.session + " is broken"
	}
	if e.fault.Seq == 0 {
		return fmt.Sprintf("%s does not verify: %s", e.session, e.fault.Reason)
	}
	return fmt.Sprintf("chain of session %s is broken at %d: %s", e.session, e.fault.Seq, e.fault.Reason)
}

// regressedError is returned by rath eval --baseline when the candidate
// regressed: its report is printed already, with the tasks and why.
type regressedError struct {
	baseline string
	tasks    []string
}

func (e *regressedError) Error() string {
	return fmt.Sprintf("regressed against baseline %s: %d task(s): %s", e.baseline, len(e.tasks), strings.Join(e.tasks, ", "))
}

// exitCode maps an error to rath's exit code. It is the only place that does:
//
//	0  ok
//	1  any other error
//	2  usage error: unknown command or flag, wrong arguments, unusable value
//	3  not found: session_not_found, out_of_range, item_not_found,
//	   version_not_found
//	4  refused by the ledger: malformed, unknown_type, schema,
//	   invalid_session, session_exists, session_closed, stale_sequence,
//	   bad_transition, use_operation, nothing_to_merge, too_large,
//	   duplicate_id, invalid_scope, unknown_event; or refused by a service
//	   and recorded in the session (a sandbox move: rath.sandbox.refused)
//	5  verify found a broken chain or a forged event, or the ledger refused
//	   a damaged session (damaged)
//	6  unavailable: nothing answered (no NATS, no ledger), or the ledger
//	   answered unavailable or conflict; retrying later may succeed
//	7  replay diverged: a re-execution did not reproduce the original
//	8  not authorized: no credentials file, credentials NATS refuses, or a
//	   permission the identity lacks
//	9  the approval is not pending: the session never requested it
//	   (unknown_approval) or it was granted or rejected already
//	   (approval_settled)
//	10 over quota: the ledger refused because the tenant is at one of its
//	   quotas (quota_exceeded); the message names the quota, its limit and
//	   the flag that raises it
//	11 regressed: rath eval --baseline found a task whose pass rate dropped,
//	   or whose cost rose, beyond the thresholds
func exitCode(err error) int {
	var (
		usage     usageError
		broken    *brokenError
		diverged  *divergedError
		unreached *unreachableError
		denied    *deniedError
		refusal   *api.Error
		refused   *refusedError
		regressed *regressedError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage), errors.Is(err, rerun.ErrUsage):
		return exitUsage
	case errors.As(err, &broken):
		return exitBroken
	case errors.As(err, &diverged):
		return exitDiverged
	case errors.As(err, &regressed):
		return exitRegressed
	case errors.As(err, &denied), errors.Is(err, runtime.ErrDenied), errors.Is(err, auth.ErrNoCredentials), errors.Is(err, auth.ErrBadCredentials):
		return exitDenied
	case errors.As(err, &unreached), errors.Is(err, runtime.ErrUnreachable):
		return exitUnavailable
	case errors.As(err, &refused):
		return exitRefused
	case errors.As(err, &refusal):
		switch refusal.Code {
		case api.CodeNotFound, api.CodeBlobNotFound, api.CodeOutOfRange, memoryapi.CodeItemNotFound, memoryapi.CodeVersionNotFound:
			return exitNotFound
		case api.CodeMalformed, api.CodeUnknownType, api.CodeSchema, api.CodeInvalidSession,
			api.CodeExists, api.CodeClosed, api.CodeStale, api.CodeTransition,
			api.CodeUseOperation, api.CodeNothingToMerge, api.CodeTooLarge, api.CodeDuplicateID,
			memoryapi.CodeInvalidScope, memoryapi.CodeUnknownEvent:
			return exitRefused
		case api.CodeUnavailable, api.CodeConflict:
			return exitUnavailable
		case api.CodeDamaged:
			return exitBroken
		case api.CodeApprovalUnknown, api.CodeApprovalSettled, api.CodeApprovalExpired:
			return exitNotPending
		case api.CodeNotApprover:
			return exitDenied
		case api.CodeQuotaExceeded:
			return exitQuota
		}
	case noAnswer(err):
		return exitUnavailable
	}
	return exitError
}

// noAnswer reports whether err means nobody answered in time: no NATS
// server, no ledger subscribed, or a request that timed out.
func noAnswer(err error) bool {
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}
