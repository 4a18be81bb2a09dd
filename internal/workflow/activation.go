package workflow

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
)

// Activation builds the variables of a rule's expression: event (the event
// being routed) and state (the session folded up to and including that
// event). Every number is an int64, except JSON numbers with a fraction in
// event.data, which are float64; maps are map[string]any so that the values a
// decision records marshal as plain JSON.
//
//	event: type, id, session (string), seq (int), data (map: the event's JSON data)
//	state: status, last_agent, parent, task (string); turn_in_flight (bool);
//	       turns, turns_failed, tool_calls, model_calls, events, tokens_in,
//	       tokens_out, tokens, validations_failed, validations_passed,
//	       fork_seq, fork_depth, seq (int); labels (map of string); agent_turns (map of int);
//	       decisions (list of maps: seq (int), rule, route (string)), oldest first;
//	       open_work (list of maps: id, kind, description, assignee (string), seq (int)), oldest first;
//	       experiments (list of maps: seq, exit_code (int), name, agent, commit, problem (string),
//	       ok (bool), metrics (map of double), config (map)), oldest first
//
// It fails only on event data that is not a JSON object.
func Activation(st *session.State, ev events.Stored) (map[string]any, error) {
	data, err := decodeData(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("activation for event %s (%s): %w", ev.ID, ev.Type, err)
	}
	return map[string]any{
		"event": map[string]any{
			"type":    ev.Type,
			"id":      ev.ID,
			"seq":     int64(ev.Seq),
			"session": ev.Session,
			"data":    data,
		},
		"state": stateMap(st),
	}, nil
}

func stateMap(st *session.State) map[string]any {
	labels := make(map[string]any, len(st.Labels))
	for k, v := range st.Labels {
		labels[k] = v
	}
	return map[string]any{
		"status":             string(st.Status),
		"turns":              int64(st.Counts.Turns),
		"turns_failed":       int64(st.Counts.TurnsFailed),
		"tool_calls":         int64(st.Counts.ToolCalls),
		"model_calls":        int64(st.Counts.ModelCalls),
		"events":             int64(st.Counts.Events),
		"last_agent":         st.LastAgent,
		"turn_in_flight":     st.Turn != nil,
		"tokens_in":          st.Usage.Total.In,
		"tokens_out":         st.Usage.Total.Out,
		"tokens":             st.Usage.Total.In + st.Usage.Total.Out,
		"validations_failed": int64(st.Counts.ValidationsFailed),
		"validations_passed": int64(st.Counts.ValidationsPassed),
		"parent":             st.Lineage.Parent,
		"fork_seq":           int64(st.Lineage.ForkSeq),
		"fork_depth":         forkDepth(st),
		"seq":                int64(st.Seq),
		"labels":             labels,
		"agent_turns":        agentTurns(st),
		"decisions":          decisions(st),
		"task":               st.Task,
		"open_work":          openWork(st),
		"experiments":        experiments(st),
	}
}

// experiments lists the experiments recorded (rath.experiment.recorded),
// oldest first, each {seq, name, agent, ok, exit_code, metrics, config,
// commit, problem}: metrics are doubles whatever their JSON form, so
// state.experiments.exists(x, x.ok && x.metrics.val_r2 >= 0.9) compares
// doubles. A config that is not a JSON object is an empty map.
func experiments(st *session.State) []any {
	out := make([]any, len(st.Experiments))
	for i, x := range st.Experiments {
		metrics := make(map[string]any, len(x.Metrics))
		for k, v := range x.Metrics {
			metrics[k] = v
		}
		config, err := decodeData(x.Config)
		if err != nil {
			config = map[string]any{}
		}
		out[i] = map[string]any{"seq": int64(x.Seq), "name": x.Name, "agent": x.Agent, "ok": x.OK(), "exit_code": int64(x.ExitCode),
			"metrics": metrics, "config": config, "commit": x.Commit, "problem": x.Problem}
	}
	return out
}

// openWork lists the work the session owes (rath.work.pending not yet
// done: the todo tool's items, among others), oldest first, each {id, kind,
// description, assignee, seq}: size(state.open_work) == 0 says none is left.
func openWork(st *session.State) []any {
	ids := make([]string, 0, len(st.Pending))
	for id := range st.Pending {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y string) int {
		return cmp.Or(cmp.Compare(st.Pending[x].Seq, st.Pending[y].Seq), strings.Compare(x, y))
	})
	out := make([]any, len(ids))
	for i, id := range ids {
		w := st.Pending[id]
		out[i] = map[string]any{"id": id, "kind": w.Kind, "description": w.Description, "assignee": w.Assignee, "seq": int64(w.Seq)}
	}
	return out
}

// forkDepth counts the forks between the session and its root: 0 for a
// root, 1 for a fork of a root, and so on (its logical log's runs, less one).
func forkDepth(st *session.State) int64 {
	return int64(max(len(st.Lineage.Path)-1, 0))
}

// decisions lists the routing decisions in the session's logical log, so a
// rule can find where something was routed, for instance to fork before the
// coder's first turn: state.decisions.filter(d, d.route == "agent:coder")[0].seq - 1.
func decisions(st *session.State) []any {
	out := make([]any, len(st.Decisions))
	for i, d := range st.Decisions {
		out[i] = map[string]any{"seq": int64(d.Seq), "rule": d.Rule, "route": d.Route}
	}
	return out
}

// agentTurns counts completed turns by agent.
func agentTurns(st *session.State) map[string]any {
	out := make(map[string]any, len(st.Counts.TurnsByAgent))
	for agent, n := range st.Counts.TurnsByAgent {
		out[agent] = int64(n)
	}
	return out
}

// decodeData decodes event data into plain values, keeping whole numbers
// as int64 so that event.data.exit_code == 1 compares ints.
func decodeData(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode data: %w", err)
	}
	m, ok := numbers(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("data is not a JSON object")
	}
	return m, nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}
