package ledger

import (
	"errors"
	"fmt"
)

// Code names why the ledger refused a proposal or a request. Codes are part of
// the protocol (docs/protocol.md): clients branch on them.
type Code string

// Error codes.
const (
	CodeMalformed      Code = "malformed"         // not a conformant CloudEvent, or a bad request body
	CodeUnknownType    Code = "unknown_type"      // type not in the catalog
	CodeSchema         Code = "schema"            // data fails the kind's JSON Schema
	CodeInvalidSession Code = "invalid_session"   // session ID unusable
	CodeNotFound       Code = "session_not_found" // no such session
	CodeExists         Code = "session_exists"    // started twice, or fork onto an existing ID
	CodeClosed         Code = "session_closed"    // session is closed
	CodeStale          Code = "stale_sequence"    // expected sequence is not the head
	CodeTransition     Code = "bad_transition"    // lifecycle event not allowed now
	CodeUseOperation   Code = "use_operation"     // forked/merged events come from the fork/merge operations
	CodeOutOfRange     Code = "out_of_range"      // a sequence beyond the head
	CodeNothingToMerge Code = "nothing_to_merge"  // source has nothing the target lacks
	CodeConflict       Code = "conflict"          // concurrent appenders kept winning; retry
	CodeUnavailable    Code = "unavailable"       // JetStream failed; retry
)

// Error is a refusal with a code and a message naming the problem.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of a ledger error, or CodeUnavailable for others.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnavailable
}

// Permanent reports whether retrying the same proposal can never succeed.
func Permanent(err error) bool {
	switch CodeOf(err) {
	case CodeUnavailable, CodeConflict:
		return false
	}
	return true
}
