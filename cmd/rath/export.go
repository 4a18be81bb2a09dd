package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/dossier"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

func (a *app) exportCmd() *cobra.Command {
	var (
		out      string
		force    bool
		swebench bool
		model    string
		labelf   []string
	)
	cmd := &cobra.Command{
		Use:   "export SESSION --out DIR | export --swebench [--model NAME] [--out FILE] (SESSION... | --label key=value)",
		Short: "Write the dossier of SESSION's session tree to DIR, verifiable offline; or SWE-bench predictions",
		Long: `export reads SESSION's tree from the ledger (its root, every fork, every
session a merge took events from) and writes to DIR:

  dossier.json         the evidence, machine-readable (schema: dossier.schema.json)
  dossier.schema.json  its JSON Schema
  dossier.md           the story of the run for people
  graph.svg, graph.html  the session graph (self-contained, renders offline)
  events/<branch>.jsonl  each branch's own events, exactly as stored
  blobs/<sha256>       full results and diffs the events reference

It then checks the written dossier as "rath verify --dossier DIR" does. DIR
may hold an earlier dossier (it is overwritten); any other non-empty DIR is
refused unless --force. See docs/dossier.md.

With --swebench it writes instead a SWE-bench predictions file, one JSON
line per session (the SESSION arguments, and the sessions with every
--label key=value, e.g. --label eval=ID for the sessions of a rath eval
run) to stdout or --out FILE: instance_id (the session's label instance_id,
else eval_task, else its ID), model_name_or_path (--model, else the
provider/model names of the session's usage, joined with ",") and
model_patch (the diff of the session's workspace from its seed to its last
tool call, rebuilt from the recorded diffs). See docs/eval.md, SWE-bench.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if swebench {
				return nil
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if swebench {
				c, err := a.client()
				if err != nil {
					return err
				}
				return a.exportSWEBench(cmd.Context(), c, args, labelf, model, out)
			}
			if model != "" || len(labelf) > 0 {
				return usageError{errors.New("--model and --label go with --swebench")}
			}
			if out == "" {
				return usageError{errors.New("--out DIR is required")}
			}
			if err := checkOutDir(out, force); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			d, err := dossier.Build(cmd.Context(), c, args[0], dossier.Options{Blobs: a.blobReader(c), Log: a.warnLog()})
			if err != nil {
				return err
			}
			if err := d.Write(out); err != nil {
				return err
			}
			rep, err := dossier.Verify(out, nil)
			if err != nil {
				return fmt.Errorf("check the written dossier: %w", err)
			}
			if !rep.OK {
				return fmt.Errorf("the written dossier does not verify: %s", rep.Fault)
			}
			final := ""
			if d.Final != nil {
				final = d.Final.Branch
			}
			if a.json {
				return a.printJSON(struct {
					Dir      string `json:"dir"`
					Session  string `json:"session"`
					Root     string `json:"root"`
					Branches int    `json:"branches"`
					Events   int    `json:"events"`
					Final    string `json:"final,omitempty"`
				}{out, d.Session, d.Root, rep.Branches, rep.Events, final})
			}
			answer := "no final answer"
			if final != "" {
				answer = "final answer " + namesOf(d).full(final)
			}
			_, err = fmt.Fprintf(a.Stdout, "wrote %s: %s, %s, %s\n  %s\n", out, plural(rep.Branches, "branch", "branches"), plural(rep.Events, "event", "events"),
				answer, filepath.Join(out, dossier.FileMarkdown))
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write the dossier to (with --swebench: the predictions file; default stdout)")
	cmd.Flags().BoolVar(&force, "force", false, "write into a non-empty directory that holds no dossier")
	cmd.Flags().BoolVar(&swebench, "swebench", false, "write SWE-bench predictions (JSON lines) instead of a dossier")
	cmd.Flags().StringVar(&model, "model", "", "with --swebench: the model_name_or_path of every prediction")
	cmd.Flags().StringArrayVar(&labelf, "label", nil, "with --swebench: also export the sessions with label key=value (repeatable; all must match)")
	return cmd
}

// checkOutDir refuses a non-empty directory that holds no dossier.
func checkOutDir(dir string, force bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || force {
		return nil
	}
	if err != nil {
		return usageError{fmt.Errorf("--out %s: %w", dir, err)}
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, dossier.FileJSON)); err == nil {
		return nil
	}
	return usageError{fmt.Errorf("--out %s is not empty and holds no dossier (use --force to write into it)", dir)}
}

// blobReader reads blobs through the ledger, or is nil without a client
// (the dossier then keeps the cut results and diffs).
func (a *app) blobReader(c *client.Client) func(context.Context, string) ([]byte, error) {
	if c == nil {
		return nil
	}
	return c.GetBlob
}

func (a *app) warnLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// verifyDossier is "rath verify --dossier DIR": offline, no NATS.
func (a *app) verifyDossier(dir string, pinned events.Keyring) error {
	rep, err := dossier.Verify(dir, pinned)
	if err != nil {
		return err
	}
	switch {
	case a.json:
		err = a.printJSON(rep)
	case rep.OK:
		// One level of brackets: what the keys are trusted as, and how to
		// trust less.
		trust := "named by the dossier itself: pin the ledger's key with --key"
		if rep.Pinned {
			trust = "pinned keys"
		}
		_, err = fmt.Fprintf(a.Stdout, "OK dossier %s: root %s, %s, %s, every event signed by %s (%s)\n", dir, rep.Root, plural(rep.Branches, "branch", "branches"), plural(rep.Events, "event", "events"), strings.Join(rep.Keys, ", "), trust)
		for _, h := range rep.Heads {
			if err == nil {
				_, err = fmt.Fprintf(a.Stdout, "  %s head %d %s\n", h.Session, h.Seq, h.Hash)
			}
		}
	default:
		_, err = fmt.Fprintf(a.Stdout, "BROKEN %s\n", rep.Fault)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return dossierBroken(dir, *rep.Fault)
	}
	return nil
}

func dossierBroken(dir string, f dossier.Fault) error {
	session := f.Session
	if session == "" {
		session = "dossier " + dir
	}
	return &brokenError{session: session, fault: &api.Fault{Seq: f.Seq, Session: f.Session, Reason: f.Reason}}
}
