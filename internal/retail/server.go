package retail

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/openrath/rath/internal/domainstate"
	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/pkg/toolserver"
)

// Validators are the names the shop records its grade under.
const (
	ValidatorState  = "domain-state"
	ValidatorPolicy = "policy"
)

// LargeRefund is the amount over which a refund needs a supervisor's
// approval: the example's workflow gates refund_order on it, and the
// policy check counts a larger refund that ran without a granted approval
// as a violation.
const LargeRefund = 200

// Server serves the shop's tools over the bus (pkg/toolserver). It keeps no
// database of its own: each call reads its session's state, and the shop a
// call sees is the session's workspace seed (its db.json) changed by the
// session's earlier calls (Fold), so forks and replays of the log see the
// shop as it was.
type Server struct {
	c     *client.Client
	tasks map[string]Task
	log   *slog.Logger

	mu       sync.Mutex
	sessions map[string]*sync.Mutex
	// applied are the calls this process applied that the log may not show
	// completed yet (the tool server appends the completion after the
	// handler returns), by session.
	applied map[string]map[string]bool
	seeds   map[string]*DB
}

// NewServer returns the shop of tasks, reading sessions and appending its
// grades with c, which must act as the tool runner's principal (as tool
// servers do).
func NewServer(c *client.Client, tasks []Task, log *slog.Logger) *Server {
	s := &Server{c: c, tasks: map[string]Task{}, log: log, sessions: map[string]*sync.Mutex{},
		applied: map[string]map[string]bool{}, seeds: map[string]*DB{}}
	for _, t := range tasks {
		s.tasks[t.ID] = t
	}
	return s
}

// Tools are the shop's tools, ready for toolserver.Serve.
func (s *Server) Tools() []toolserver.Tool {
	var out []toolserver.Tool
	for _, name := range sortedKeys(Specs) {
		spec := Specs[name]
		out = append(out, toolserver.Tool{Name: name, Description: spec.Description,
			Parameters: json.RawMessage(spec.Parameters), Handle: s.handler(name)})
	}
	return out
}

// Serve serves every tool of the shop on nc until ctx ends.
func (s *Server) Serve(ctx context.Context, nc *nats.Conn, opts ...toolserver.Option) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, t := range s.Tools() {
		g.Go(func() error { return toolserver.Serve(ctx, nc, t, opts...) })
	}
	return g.Wait()
}

func (s *Server) lock(session string) func() {
	s.mu.Lock()
	m := s.sessions[session]
	if m == nil {
		m = &sync.Mutex{}
		s.sessions[session] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (s *Server) handler(tool string) func(context.Context, json.RawMessage) (string, error) {
	return func(ctx context.Context, args json.RawMessage) (string, error) {
		call, ok := toolserver.CallFrom(ctx)
		if !ok {
			return "", errors.New("retail: a call without its session")
		}
		defer s.lock(call.Session)()
		st, err := s.c.State(ctx, call.Session)
		if err != nil {
			return "", fmt.Errorf("read session %s: %w", call.Session, err)
		}
		if tool == ToolEndConversation {
			return s.end(ctx, call, st)
		}
		shop, err := s.Fold(ctx, st, call.CallID)
		if err != nil {
			return "", err
		}
		r, err := shop.Apply(tool, args)
		if err != nil {
			return "", err
		}
		if Changes(tool) {
			s.mu.Lock()
			if s.applied[call.Session] == nil {
				s.applied[call.Session] = map[string]bool{}
			}
			s.applied[call.Session][call.CallID] = true
			s.mu.Unlock()
		}
		return r.Text(), nil
	}
}

// Fold returns the shop as a session's state leaves it: its workspace
// seed's database changed by its completed calls of the shop's tools (and
// those this server applied whose completion is not in st yet), in the
// order they were requested; the call skip is left out. A call that does
// not apply again is an error: the shop after it is unknown.
func (s *Server) Fold(ctx context.Context, st *session.State, skip string) (*Shop, error) {
	shop, problems, err := s.replay(ctx, st, skip)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("session %s: %s", st.ID, strings.Join(problems, "; "))
	}
	return shop, nil
}

func (s *Server) replay(ctx context.Context, st *session.State, skip string) (*Shop, []string, error) {
	db, err := s.seed(ctx, st)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	applied := s.applied[st.ID]
	var calls []*session.Tool
	for _, t := range st.Tools {
		if !Changes(t.Tool) || t.CallID == skip || len(t.Seqs) == 0 {
			continue
		}
		if t.Status == session.ToolCompleted || (applied[t.CallID] && t.Status != session.ToolFailed) {
			calls = append(calls, t)
		}
	}
	s.mu.Unlock()
	shop, problems := Replay(db, calls)
	return shop, problems, nil
}

// Replay applies calls that ran (completed calls of the shop's tools) to a
// new shop on db, in the order they were requested, and returns the shop
// and, for each call that does not apply again, why: a call the policy
// refuses now ran anyway (a violation, or a policy changed since), or the
// log holds a change the shop cannot make. Such a call changes nothing.
func Replay(db *DB, calls []*session.Tool) (*Shop, []string) {
	calls = slices.Clone(calls)
	slices.SortFunc(calls, func(a, b *session.Tool) int { return cmp.Compare(a.Seqs[0], b.Seqs[0]) })
	shop := NewShop(db)
	var problems []string
	for _, t := range calls {
		if _, err := shop.Apply(t.Tool, t.Arguments); err != nil {
			problems = append(problems, fmt.Sprintf("call %s (%s, requested at %d) ran, but does not apply to the shop again: %v", t.CallID, t.Tool, t.Seqs[0], err))
		}
	}
	return shop, problems
}

// seed reads the database of a session's workspace seed.
func (s *Server) seed(ctx context.Context, st *session.State) (*DB, error) {
	ref := st.Labels[client.LabelWorkspace]
	if ref == "" {
		return nil, fmt.Errorf("session %s has no workspace seed: the shop's database is the %s of its workspace", st.ID, FileDB)
	}
	s.mu.Lock()
	db := s.seeds[ref]
	s.mu.Unlock()
	if db != nil {
		return db, nil
	}
	archive, err := s.c.GetBlob(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("workspace seed %s: %w", ref, err)
	}
	data, err := seedFile(archive, FileDB)
	if err != nil {
		return nil, fmt.Errorf("workspace seed %s: %w", ref, err)
	}
	if db, err = ParseDB(data); err != nil {
		return nil, fmt.Errorf("workspace seed %s: %w", ref, err)
	}
	s.mu.Lock()
	s.seeds[ref] = db
	s.mu.Unlock()
	return db, nil
}

// seedFile reads one file of a workspace seed (client.PackWorkspace's
// gzip-compressed tar), at most 8 MiB.
func seedFile(archive []byte, name string) ([]byte, error) {
	z, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, err
	}
	r := tar.NewReader(z)
	for {
		h, err := r.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("no %s in the workspace", name)
		}
		if err != nil {
			return nil, err
		}
		if path.Clean(strings.TrimPrefix(h.Name, "./")) != name || h.Typeflag != tar.TypeReg {
			continue
		}
		const limit = 8 << 20
		data, err := io.ReadAll(io.LimitReader(r, limit+1))
		if err != nil {
			return nil, err
		}
		if len(data) > limit {
			return nil, fmt.Errorf("%s is over %d bytes", name, limit)
		}
		return data, nil
	}
}

// end grades the conversation when the customer ends it, records the
// grade as two validations and answers it.
func (s *Server) end(ctx context.Context, call toolserver.Call, st *session.State) (string, error) {
	id := st.Labels[LabelTask]
	task, ok := s.tasks[id]
	if !ok {
		return "", fmt.Errorf("session %s: label %s names task %q, which this shop does not have", st.ID, LabelTask, id)
	}
	g, err := s.Grade(ctx, st, task)
	if err != nil {
		return "", err
	}
	details, err := json.Marshal(g)
	if err != nil {
		return "", err
	}
	target := "task:" + task.ID
	var verdicts []string
	for _, v := range []struct {
		name   string
		failed string
	}{
		{ValidatorState, stateFailure(g)},
		{ValidatorPolicy, policyFailure(g)},
	} {
		var data any = &events.ValidationPassed{Validator: v.name, Target: target, Details: details}
		verdict := v.name + " passed"
		if v.failed != "" {
			data = &events.ValidationFailed{Validator: v.name, Target: target, Reason: v.failed, Details: details}
			verdict = v.name + " failed: " + v.failed
		}
		// The ID derives from the call's cause: a second attempt records
		// each verdict once.
		if _, err := s.c.Emit(ctx, st.ID, data, events.WithID(events.DerivedID("retail", call.EventID, v.name)),
			events.WithCausation(call.EventID)); err != nil {
			return "", fmt.Errorf("record %s: %w", v.name, err)
		}
		verdicts = append(verdicts, verdict)
	}
	return Result{Message: "Conversation ended; graded: " + strings.Join(verdicts, "; ") + "."}.Text(), nil
}

func stateFailure(g Grade) string {
	if len(g.Differences) == 0 {
		return ""
	}
	var parts []string
	for _, d := range g.Differences {
		parts = append(parts, d.Text)
	}
	return fmt.Sprintf("the final state differs from task %s's in %d places: %s", g.Task, len(parts), strings.Join(parts, "; "))
}

func policyFailure(g Grade) string {
	if len(g.Violations) == 0 {
		return ""
	}
	return strings.Join(g.Violations, "; ")
}

// Grade compares the session's final shop with the task's expected
// database and reviews the policy's decisions about every call of the
// shop's tools.
func (s *Server) Grade(ctx context.Context, st *session.State, task Task) (Grade, error) {
	shop, problems, err := s.replay(ctx, st, "")
	if err != nil {
		return Grade{}, err
	}
	final := shop.DB.JSON()
	diffs, err := domainstate.Compare(task.Expected, final)
	if err != nil {
		return Grade{}, fmt.Errorf("task %s: %w", task.ID, err)
	}
	g := Grade{Task: task.ID, Final: final, Policy: []PolicyDecision{}}
	for _, d := range diffs {
		g.Differences = append(g.Differences, DifferenceText{Path: d.Path, Expected: d.Expected, Actual: d.Actual, Text: d.String()})
	}
	g.Policy, g.Violations = Review(st)
	g.Violations = append(problems, g.Violations...)
	return g, nil
}

// Review lists the policy's decision about each call of the shop's tools
// in a session, in request order, and the violations among them: a large
// refund that ran without a granted approval.
func Review(st *session.State) ([]PolicyDecision, []string) {
	var calls []*session.Tool
	for _, t := range st.Tools {
		if _, ok := Specs[t.Tool]; ok && t.Tool != ToolEndConversation && len(t.Seqs) > 0 {
			calls = append(calls, t)
		}
	}
	slices.SortFunc(calls, func(a, b *session.Tool) int { return cmp.Compare(a.Seqs[0], b.Seqs[0]) })
	decisions := []PolicyDecision{}
	var violations []string
	for _, t := range calls {
		d := PolicyDecision{CallID: t.CallID, Tool: t.Tool, Seq: t.Seqs[0]}
		gate := st.GateOf(t.CallID)
		switch {
		case gate.Refused():
			d.Decision, d.Rule, d.Detail = DecisionNotApproved, RuleApproval, gate.Rejection()
		case t.Status == session.ToolCompleted:
			d.Decision = DecisionAllowed
			if t.Tool == ToolRefundOrder && refundAmount(t.Arguments) > LargeRefund {
				if gate.Outcome == session.ApprovalGranted {
					d.Rule, d.Detail = RuleApproval, "approved by "+gate.Actor
				} else {
					violations = append(violations, fmt.Sprintf("call %s refunded $%d without a supervisor's approval (policy %s)", t.CallID, refundAmount(t.Arguments), RuleApproval))
				}
			}
		case t.Status == session.ToolFailed && strings.HasPrefix(t.Error, "policy "):
			d.Decision = DecisionRefused
			d.Rule, d.Detail, _ = strings.Cut(strings.TrimPrefix(t.Error, "policy "), ": ")
		case t.Status == session.ToolFailed:
			d.Decision, d.Detail = "failed", t.Error
		default:
			d.Decision = "not finished"
		}
		decisions = append(decisions, d)
	}
	return decisions, violations
}

func refundAmount(args json.RawMessage) int {
	var a struct {
		Amount int `json:"amount"`
	}
	_ = json.Unmarshal(args, &a)
	return a.Amount
}
