package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/services/agent-worker/internal/provider"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// streaming is a model that says its answer in pieces, failing its first
// attempt halfway.
type streaming struct{ model }

func (s *streaming) Complete(ctx context.Context, req provider.Request) (provider.Response, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	n := len(s.reqs)
	s.mu.Unlock()
	req.Deltas(provider.Delta{Text: "Running "})
	if n == 1 {
		return provider.Response{}, &provider.Error{Provider: "fake", Status: 503, Retryable: true, Message: "overloaded"}
	}
	req.Deltas(provider.Delta{Text: "the tests."})
	req.Deltas(provider.Delta{Call: &provider.CallDelta{ID: "call_a", Name: "run", Arguments: `{"cmd":"go test ./..."}`}})
	return toolUse, nil
}

// The agent worker publishes a turn's answer as it streams on the
// session's delta subject: numbered pieces, each attempt an answer of its
// own ended by a done delta; the stored answer is the same as without.
func TestWorkerPublishesTheAnswersDeltas(t *testing.T) {
	r := setup(t, "")
	sub, err := r.nc.SubscribeSync(events.DeltaFilter("", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	m := &streaming{}
	r.run(t, r.newWorker(t, worker.Config{Override: override(m), Retry: fastRetry}, quiet), quiet)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	r.end(t, req)
	var got []string
	for {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		var d events.Delta
		if err := json.Unmarshal(msg.Data, &d); err != nil {
			t.Fatal(err)
		}
		s := d.Answer + " " + d.Agent + " " + string(rune('0'+d.N)) + " " + d.Text
		if d.Tool != nil {
			s += d.Tool.Name + d.Tool.Arguments
		}
		if d.Done {
			s += "done"
		}
		got = append(got, s)
		if d.Done && d.Answer != "turn-1" {
			break
		}
	}
	want := []string{
		"turn-1 coder 0 Running ", "turn-1 coder 1 done",
		"turn-1#2 coder 0 Running ", "turn-1#2 coder 1 the tests.", `turn-1#2 coder 2 run{"cmd":"go test ./..."}`, "turn-1#2 coder 3 done",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("deltas:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A live provider streams too: the worker publishes the pieces an
// OpenAI-compatible endpoint sends as they come, then the done delta.
func TestWorkerPublishesALiveProvidersDeltas(t *testing.T) {
	srv, _ := openAIServer(t)
	r := setup(t, srv.URL+"/v1/")
	sub, err := r.nc.SubscribeSync(events.DeltaFilter("", "s1"))
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, r.newWorker(t, worker.Config{Keys: map[string]string{"openai": "sk-rath-deltas"}, Retry: fastRetry,
		Endpoints: provider.Endpoints{Loopback: true}}, quiet), quiet)
	r.start(t, "s1")
	req := r.request(t, "s1", "turn-1", "coder")
	if end := r.end(t, req); end.Type != events.TypeTurnCompleted {
		t.Fatalf("turn ended with %s: %s", end.Type, end.Data)
	}
	var got []events.Delta
	for len(got) == 0 || !got[len(got)-1].Done {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("after %+v: %v", got, err)
		}
		var d events.Delta
		if err := json.Unmarshal(msg.Data, &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if len(got) != 2 || got[0].Answer != "turn-1" || got[0].Text != "Done." || got[0].N != 0 || got[1].N != 1 {
		t.Fatalf("deltas %+v, want Done. then done", got)
	}
}
