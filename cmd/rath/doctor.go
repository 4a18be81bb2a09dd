package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/doctor"
	toolrunner "github.com/openrath/rath/services/tool-runner/service"
)

// doctorReport is what doctor --json prints.
type doctorReport struct {
	Sandboxes toolrunner.Sandboxes `json:"sandboxes"`
	NATS      busReport            `json:"nats"`
}

// busReport is doctor's view of the NATS deployment.
type busReport struct {
	URL      string           `json:"url"`
	Creds    string           `json:"creds,omitempty"`
	Reached  bool             `json:"reached"`
	Error    string           `json:"error,omitempty"`
	Findings []doctor.Finding `json:"findings,omitempty"`
	// cause is why it was not reached, for the exit status.
	cause error
}

// err is the bus's part of doctor's exit status: 6 when nothing answered,
// 8 when NATS refused the identity (as every command), 1 when the
// deployment has a failure.
func (b busReport) err() error {
	switch {
	case !b.Reached:
		return &causedError{fmt.Sprintf("doctor: NATS at %s %s (above)", b.URL, b.failure()), b.cause}
	case doctor.Failed(b.Findings):
		return errors.New("doctor: the NATS deployment has problems (FAIL above)")
	}
	return nil
}

// failure says why nothing was checked: NATS refused the identity, or
// nothing answered.
func (b busReport) failure() string {
	if exitCode(b.cause) == exitDenied {
		return "refused the connection"
	}
	return "not reachable"
}

// checkBus checks the NATS deployment at --nats, as admin when rath up's
// data directory (here or in a parent, findCreds) holds admin.nk and no
// identity was named.
func (a *app) checkBus(cmd *cobra.Command) busReport {
	r := busReport{URL: a.url}
	if a.credsFrom == "" && a.creds == defaultCreds {
		if admin := findCreds(auth.RoleAdmin); admin != "" {
			a.creds = admin
		}
	}
	nc, err := a.connect()
	if _, serr := os.Stat(a.creds); serr == nil {
		r.Creds = a.creds // the file it used (or tried)
	}
	if err != nil {
		r.Error, r.cause = err.Error(), err
		return r
	}
	a.nc = nc // closed with the app
	r.Reached = true
	if r.Findings, err = doctor.Run(cmd.Context(), nc, doctor.Options{}); err != nil {
		r.Reached, r.Error = false, err.Error()
	}
	return r
}

// writeBus prints the deployment's findings, problems with their fix.
func writeBus(w io.Writer, r busReport) {
	fmt.Fprintf(w, "NATS deployment at %s", r.URL)
	if r.Creds != "" {
		fmt.Fprintf(w, " (as %s)", r.Creds)
	}
	fmt.Fprintln(w, ":")
	if !r.Reached {
		fmt.Fprintf(w, "  FAIL  %s, nothing checked: %s\n", r.failure(), r.Error)
		return
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %-5s %s: %s\n", f.Level, f.Check, f.Detail)
		if f.Fix != "" && f.Level >= doctor.Warn {
			fmt.Fprintf(w, "        fix: %s\n", f.Fix)
		}
	}
}
