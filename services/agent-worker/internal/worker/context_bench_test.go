package worker_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/events"
	"github.com/openrath/rath/pkg/session"
	"github.com/openrath/rath/services/agent-worker/internal/worker"
)

// BenchmarkTranscript is the cost of one turn's context at the start of a
// session and after 10k events (section L1's prefix: user and assistant
// chunks of 64 bytes and a model call every tenth event, here with a tool
// call and its result every twentieth). A turn folds three events (the
// agent's answer, its tool call, the result) and builds the agent's
// messages: from scratch with Transcript, or on from the last turn's with
// Contexts. "first" is a context built from scratch by Contexts, as on an
// agent's first turn in a process.
func BenchmarkTranscript(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		prefix := benchPrefix(b, n)
		b.Run(fmt.Sprintf("events=%d/scratch", n), func(b *testing.B) {
			benchTurns(b, prefix, func(st *session.State) int { return len(worker.Transcript(st, "coder")) })
		})
		b.Run(fmt.Sprintf("events=%d/incremental", n), func(b *testing.B) {
			c := worker.NewContexts(0)
			benchTurns(b, prefix, func(st *session.State) int { return len(c.Messages("s", st, "coder")) })
		})
		b.Run(fmt.Sprintf("events=%d/first", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				worker.NewContexts(0).Messages("s", prefix, "coder")
			}
		})
	}
}

// benchPrefix folds a session of n events.
func benchPrefix(b *testing.B, n int) *session.State {
	pad := strings.Repeat("x", 48)
	st := &session.State{}
	session.Apply(st, stored(b, "s", 1, &events.SessionStarted{Workflow: "wf", Task: "the task"}))
	for seq := uint64(2); seq <= uint64(n); seq++ {
		var d any
		switch {
		case seq%20 == 0:
			d = toolCall("coder", fmt.Sprintf("p%d", seq), "run", `{"cmd":"go test"}`)
		case seq%20 == 1:
			d = toolResult("coder", fmt.Sprintf("p%d", seq-1), "ok "+pad)
		case seq%10 == 9:
			d = &events.ModelCalled{Agent: "filler", Provider: "bench", Model: "m", TokensIn: 10, TokensOut: 5}
		case seq%2 == 0:
			d = chunk(events.RoleUser, "", fmt.Sprintf("filler %d %s", seq, pad))
		default:
			d = chunk(events.RoleAssistant, "filler", fmt.Sprintf("filler %d %s", seq, pad))
		}
		session.Apply(st, stored(b, "s", seq, d))
	}
	return st
}

// benchTurns times turns from the prefix on; every 16 turns the state
// starts again from the prefix, untimed, so that it does not grow with b.N.
func benchTurns(b *testing.B, prefix *session.State, turn func(*session.State) int) {
	var st *session.State
	restart := func() {
		st = prefix.View()
		st.Chunks = slices.Grow(st.Chunks, 2*16) // no copy while timed
		turn(st)
	}
	restart()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%16 == 15 {
			b.StopTimer()
			restart()
			b.StartTimer()
		}
		id := "t" + strconv.Itoa(i)
		for _, d := range []any{chunk(events.RoleAssistant, "coder", "running the tests"),
			toolCall("coder", id, "run", `{"cmd":"go test"}`), toolResult("coder", id, "ok")} {
			session.Apply(st, stored(b, "s", st.Seq+1, d))
		}
		turn(st)
	}
}
