package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	Required bool             `json:"-"` // --nats was named: not reaching it fails
	Findings []doctor.Finding `json:"findings,omitempty"`
}

func (b busReport) err() error {
	switch {
	case !b.Reached && b.Required:
		return fmt.Errorf("doctor: NATS at %s: %s", b.URL, b.Error)
	case doctor.Failed(b.Findings):
		return errors.New("doctor: the NATS deployment has problems (FAIL above)")
	}
	return nil
}

// checkBus checks the NATS deployment at --nats, as admin when the default
// data directory holds admin.creds and no identity was named.
func (a *app) checkBus(cmd *cobra.Command) busReport {
	r := busReport{URL: a.url, Required: cmd.Flag("nats").Changed || a.NATSURL != ""}
	if a.creds == defaultCreds && a.Creds == "" && !cmd.Flag("creds").Changed {
		admin := filepath.Join(filepath.Dir(defaultCreds), auth.FileName(auth.RoleAdmin))
		if _, err := os.Stat(admin); err == nil {
			a.creds = admin
		}
	}
	r.Creds = a.creds
	nc, err := a.connect()
	if err != nil {
		r.Error = err.Error()
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
		if r.Required {
			fmt.Fprintf(w, "  FAIL  not reachable: %s\n", r.Error)
		} else {
			fmt.Fprintf(w, "  info  not reachable, nothing checked: %s\n", r.Error)
			fmt.Fprintln(w, "        start one (rath up) or name it with --nats URL")
		}
		return
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %-5s %s: %s\n", f.Level, f.Check, f.Detail)
		if f.Fix != "" && f.Level >= doctor.Warn {
			fmt.Fprintf(w, "        fix: %s\n", f.Fix)
		}
	}
}
