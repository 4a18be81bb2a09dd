package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/openrath/rath/internal/eval"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// Prediction is one line of a SWE-bench predictions file.
type Prediction struct {
	InstanceID string `json:"instance_id"`
	Model      string `json:"model_name_or_path"`
	Patch      string `json:"model_patch"`
}

// LabelInstanceID is the session label a SWE-bench export takes the
// instance ID from (else eval.LabelTask, else the session ID).
const LabelInstanceID = "instance_id"

// exportSWEBench writes one prediction per session, as JSON lines, to out
// ("" for stdout).
func (a *app) exportSWEBench(ctx context.Context, c *client.Client, ids []string, labelf []string, model, out string) error {
	if len(labelf) > 0 {
		sel, err := labels(labelf)
		if err != nil {
			return err
		}
		list, err := c.List(ctx, api.ListRequest{Labels: sel})
		if err != nil {
			return err
		}
		for _, s := range list {
			if _, grading := s.Labels[eval.LabelGrades]; grading {
				// A grading fork (rath eval's command or state grader)
				// inherits its run's labels but is not the agent's
				// work: its run is the prediction.
				continue
			}
			if !slices.Contains(ids, s.ID) {
				ids = append(ids, s.ID)
			}
		}
		if len(ids) == 0 {
			return fmt.Errorf("no session has the labels %s", strings.Join(labelf, ", "))
		}
	}
	if len(ids) == 0 {
		return usageError{errors.New("--swebench needs SESSION arguments or --label key=value")}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	seen := map[string]string{}
	for _, id := range ids {
		p, err := a.predict(ctx, c, id, model)
		if err != nil {
			return err
		}
		if first, ok := seen[p.InstanceID]; ok {
			// A fork inherits its parent's labels; the harness expects one
			// prediction per instance.
			fmt.Fprintf(a.Stderr, "warning: sessions %s and %s are both instance %s\n", first, id, p.InstanceID)
		} else {
			seen[p.InstanceID] = id
		}
		if err := enc.Encode(p); err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
	}
	if out == "" {
		_, err := a.Stdout.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write predictions: %w", err)
	}
	_, err := fmt.Fprintf(a.Stdout, "wrote %s: %s\n", out, plural(len(ids), "prediction", "predictions"))
	return err
}

// predict builds the prediction of session id: its instance ID, its
// model, and the cumulative diff of its workspace.
func (a *app) predict(ctx context.Context, c *client.Client, id, model string) (Prediction, error) {
	st, err := c.State(ctx, id)
	if err != nil {
		return Prediction{}, err
	}
	p := Prediction{InstanceID: st.Labels[LabelInstanceID], Model: model}
	if p.InstanceID == "" {
		p.InstanceID = st.Labels[eval.LabelTask]
	}
	if p.InstanceID == "" {
		p.InstanceID = st.ID
	}
	if p.Model == "" {
		models := make([]string, 0, len(st.Usage.ByModel))
		for m := range st.Usage.ByModel {
			models = append(models, m)
		}
		slices.Sort(models)
		p.Model = strings.Join(models, ",")
	}
	if p.Model == "" {
		return Prediction{}, fmt.Errorf("session %s: its usage names no model: name one with --model", id)
	}
	w, err := readWorkspaceHistory(ctx, c, id)
	if err != nil {
		return Prediction{}, err
	}
	switch {
	case !w.placed:
		fmt.Fprintf(a.Stderr, "warning: session %s: its workspace was never placed: empty model_patch\n", id)
		return p, nil
	case len(w.diffs) == 0:
		fmt.Fprintf(a.Stderr, "warning: session %s: its tool calls changed nothing in its workspace: empty model_patch\n", id)
		return p, nil
	}
	var seed []byte
	if w.seed != "" {
		if seed, err = c.GetBlob(ctx, w.seed); err != nil {
			return Prediction{}, fmt.Errorf("session %s: workspace seed: %w", id, err)
		}
	}
	if p.Patch, err = cumulativeDiff(ctx, seed, w.diffs); err != nil {
		return Prediction{}, fmt.Errorf("session %s: %w", id, err)
	}
	if p.Patch == "" {
		fmt.Fprintf(a.Stderr, "warning: session %s: its tool calls left its workspace as it was seeded: empty model_patch\n", id)
	}
	return p, nil
}

// workspaceHistory is what a session's logical log records about its
// workspace: the seed, and each change in order.
type workspaceHistory struct {
	placed bool
	seed   string // blob reference of the root's seed; "" for an empty workspace
	diffs  []callDiff
}

type callDiff struct {
	callID, diff string
}

// readWorkspaceHistory reads the logical log of session id (a fork's
// ancestry included) and checks that its workspace commits form one chain:
// the first placement's commit, then each completed call from its
// commit_before to its commit_after, each later placement (a fork's, a
// move's) at the commit the chain had reached. Only then does applying the
// calls' diffs in order reproduce the workspace.
func readWorkspaceHistory(ctx context.Context, c *client.Client, id string) (workspaceHistory, error) {
	var w workspaceHistory
	commit := ""
	err := c.Events(ctx, id, client.Range{}, func(ev events.Stored) error {
		data, err := ev.Decode()
		if err != nil {
			return nil // a kind this build does not know changes no workspace
		}
		switch d := data.(type) {
		case *events.SessionStarted:
			if w.seed == "" && !w.placed {
				w.seed = d.Labels[client.LabelWorkspace]
			}
		case *events.SandboxPlaced:
			if !w.placed {
				w.placed, commit = true, d.Commit
				return nil
			}
			if d.Commit != commit {
				return fmt.Errorf("session %s: event %d places the workspace at commit %s, but its calls had reached %s: the changes between are not recorded", id, ev.Seq, d.Commit, commit)
			}
		case *events.ToolCompleted:
			if d.CommitBefore == "" && d.CommitAfter == "" {
				return nil // a correction, or a call that ran outside a workspace
			}
			if d.CommitBefore != commit {
				return fmt.Errorf("session %s: call %s (event %d) started at commit %s, but the workspace was at %s: the changes between are not recorded", id, d.CallID, ev.Seq, d.CommitBefore, commit)
			}
			if d.CommitAfter == d.CommitBefore {
				return nil
			}
			diff := d.Diff
			if d.DiffRef != "" {
				b, err := c.GetBlob(ctx, d.DiffRef)
				if err != nil {
					return fmt.Errorf("session %s: diff of call %s: %w", id, d.CallID, err)
				}
				diff = string(b)
			}
			if diff == "" {
				return fmt.Errorf("session %s: call %s (event %d) moved the workspace from %s to %s but recorded no diff", id, d.CallID, ev.Seq, d.CommitBefore, d.CommitAfter)
			}
			w.diffs = append(w.diffs, callDiff{d.CallID, diff})
			commit = d.CommitAfter
		}
		return nil
	})
	if err != nil {
		return w, err
	}
	return w, nil
}

// cumulativeDiff rebuilds the workspace in a temporary git repository:
// the seed (a PackWorkspace archive, or nothing) committed as the tool
// runner commits it, each call's diff applied in order, and returns the
// diff from the seed to the result. git apply refuses a diff whose
// preimage does not match, and a binary change the record holds only as
// "Binary files differ" is refused too: the patch is exact or not written.
func cumulativeDiff(ctx context.Context, seed []byte, diffs []callDiff) (string, error) {
	dir, err := os.MkdirTemp("", "rath-swebench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return "", err
	}
	if seed != nil {
		if err := client.UnpackWorkspace(seed, work); err != nil {
			return "", fmt.Errorf("workspace seed: %w", err)
		}
	}
	git := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.autocrlf=false", "-c", "user.name=rath", "-c", "user.email=rath@localhost", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+dir)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
		}
		return out.String(), nil
	}
	for _, args := range [][]string{
		{"init", "--quiet", "--initial-branch=session"},
		{"add", "--all"},
		{"commit", "--quiet", "--no-verify", "--allow-empty", "--message", "seed"},
	} {
		if _, err := git("", args...); err != nil {
			return "", fmt.Errorf("rebuild the workspace seed: %w", err)
		}
	}
	for _, d := range diffs {
		if strings.Contains(d.diff, "\nBinary files ") || strings.HasPrefix(d.diff, "Binary files ") {
			return "", fmt.Errorf("call %s changed a binary file, and its recorded diff does not hold the change", d.callID)
		}
		if _, err := git(d.diff, "apply", "--index", "--whitespace=nowarn", "-"); err != nil {
			return "", fmt.Errorf("apply the diff of call %s: %w", d.callID, err)
		}
	}
	return git("", "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--full-index", "HEAD", "--")
}
