package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// verifyEvalReport is rath verify --eval-report: a report checked offline
// against pinned keys (eval.VerifyReport). Without --key there is nothing
// to trust offline, so it is refused.
func (a *app) verifyEvalReport(path string, pinned events.Keyring) error {
	if pinned == nil {
		return usageError{errors.New("--eval-report needs --key: the ledger's public key files (<data>/keys/ledger.pub) the report's heads must be signed with")}
	}
	rep, err := eval.LoadReport(path)
	if err != nil {
		return usageError{fmt.Errorf("--eval-report: %w", err)}
	}
	v := eval.VerifyReport(rep, pinned)
	switch {
	case a.json:
		err = a.printJSON(v)
	case v.OK:
		_, err = fmt.Fprintf(a.Stdout, "OK eval %s: %d runs, %d heads signed by the pinned key, every summary what its runs give\n", v.ID, v.Runs, v.Heads)
	default:
		_, err = fmt.Fprintf(a.Stdout, "BROKEN eval %s:\n  %s\n", v.ID, strings.Join(v.Problems, "\n  "))
	}
	if err != nil {
		return err
	}
	if !v.OK {
		return &brokenError{session: "eval report " + path, fault: &api.Fault{Reason: fmt.Sprintf("%d problem(s), the first: %s", len(v.Problems), v.Problems[0])}}
	}
	return nil
}
