package main_test

// These tests run the session-ledger binary as real OS processes against an
// embedded JetStream in the test process: two ledgers racing on the same
// sessions, a ledger killed with SIGKILL while it works through the inbox,
// and one stopped with SIGTERM. They take seconds to tens of seconds (a
// killed ledger's unacked deliveries only come back on the server's clock),
// so they are skipped with -short.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/testrig"
	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// TestTwoLedgerProcessesRace races request/reply appends and inbox proposals
// to the same sessions through two ledger processes. The queue group spreads
// the requests over both, so their caches go stale under each other and the
// conditional append has to keep every session's log linear; both ledgers
// also consume the inbox, whose proposals must keep their publish order.
func TestTwoLedgerProcessesRace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ledger processes; skipped with -short")
	}
	t.Parallel()
	b := startBus(t)
	startLedger(t, b.url, "ledger-a")
	// A tiny cache on the second ledger also exercises eviction while appends
	// to the evicted session are in flight.
	startLedger(t, b.url, "ledger-b", "--cache-sessions", "4")

	const (
		sessions  = 20
		writers   = 4  // request/reply goroutines per session
		perWriter = 10 // appends per writer
		proposals = 9  // inbox proposals per session
		probes    = 40 // stale proposals, all refused
		perLog    = 1 + writers*perWriter + proposals
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	ids := make([]string, sessions)
	var (
		mu       sync.Mutex
		acked    = map[string]api.Ack{}  // event ID → ack
		inbox    = map[string][]string{} // session → proposed event IDs
		probeIDs = map[string]bool{}     // refused on purpose
		byID     = map[string]string{}   // event ID → session, for messages
		record   = func(a api.Ack) { mu.Lock(); acked[a.ID] = a; byID[a.ID] = a.Session; mu.Unlock() }
	)
	for i := range ids {
		ids[i] = fmt.Sprintf("race-%02d", i)
		a, err := b.c.Start(ctx, ids[i], events.SessionStarted{Task: "race " + ids[i], Workflow: "wf"})
		if err != nil {
			t.Fatalf("start %s: %v", ids[i], err)
		}
		record(a)
	}

	var wg sync.WaitGroup
	errs := make(chan error, sessions*(writers+1)+probes)
	for _, id := range ids {
		for w := range writers {
			wg.Go(func() {
				for k := range perWriter {
					a, err := b.c.Emit(ctx, id, chunk(fmt.Sprintf("w%d-%d", w, k)))
					if err != nil {
						errs <- fmt.Errorf("emit to %s: %w", id, err)
						return
					}
					if a.Session != id || a.Seq == 0 || a.Hash == "" {
						errs <- fmt.Errorf("emit to %s: odd ack %+v", id, a)
					}
					record(a)
				}
			})
		}
		wg.Go(func() {
			for k := range proposals {
				ev, err := events.New(id, chunk(fmt.Sprintf("inbox-%d", k)))
				if err != nil {
					errs <- err
					return
				}
				if err := b.c.Propose(ctx, ev); err != nil {
					errs <- fmt.Errorf("propose to %s: %w", id, err)
					return
				}
				mu.Lock()
				inbox[id] = append(inbox[id], ev.ID())
				byID[ev.ID()] = id
				mu.Unlock()
			}
		})
	}
	// Stale proposals race along: each is refused, and the refusal records
	// which ledger decided it. That is the side channel showing both
	// processes served requests.
	wg.Go(func() {
		for k := range probes {
			id := ids[k%sessions]
			ev, err := events.New(id, chunk("stale"), events.WithExpectedSeq(0))
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			probeIDs[ev.ID()] = true
			mu.Unlock()
			_, err = b.c.Append(ctx, ev)
			var le *api.Error
			if !errors.As(err, &le) || le.Code != api.CodeStale {
				errs <- fmt.Errorf("stale probe to %s: want %s, got %v", id, api.CodeStale, err)
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	took := b.waitInboxDecided(t, 60*time.Second)
	t.Logf("%d request/reply appends and %d inbox proposals over %d sessions; inbox settled %s after the last request",
		sessions*(1+writers*perWriter), sessions*proposals, sessions, took.Round(time.Millisecond))

	positions := map[string]map[string]uint64{} // session → event ID → seq
	for _, id := range ids {
		log := b.readLog(t, id)
		pos := b.checkChain(t, id, log)
		positions[id] = pos
		if len(log) != perLog {
			t.Errorf("session %s: %d events stored, want %d (1 start + %d acked appends + %d inbox proposals)",
				id, len(log), perLog, writers*perWriter, proposals)
		}
		var last uint64
		for k, evID := range inbox[id] {
			at, ok := pos[evID]
			if !ok {
				t.Errorf("session %s: inbox proposal #%d %s is not in the log", id, k, evID)
				continue
			}
			if at < last {
				t.Errorf("session %s: inbox proposal #%d stored at seq %d, before the proposal published ahead of it (seq %d)", id, k, at, last)
			}
			last = at
		}
		for _, ev := range log {
			mu.Lock()
			owner, known := byID[ev.ID]
			a, wasAcked := acked[ev.ID]
			mu.Unlock()
			switch {
			case probeIDs[ev.ID]:
				t.Errorf("session %s: refused stale proposal %s was stored at seq %d", id, ev.ID, ev.Seq)
			case !known || owner != id:
				t.Errorf("session %s: event %s at seq %d was never proposed to this session", id, ev.ID, ev.Seq)
			case wasAcked && (a.Seq != ev.Seq || a.Hash != ev.Hash):
				t.Errorf("session %s: event %s acked as seq %d hash %s, stored as seq %d hash %s",
					id, ev.ID, a.Seq, a.Hash, ev.Seq, ev.Hash)
			}
		}
	}
	for evID, a := range acked {
		if _, ok := positions[a.Session][evID]; !ok {
			t.Errorf("acked event %s (session %s, seq %d) is not in the log", evID, a.Session, a.Seq)
		}
	}

	deciders := map[string]int{}
	for _, r := range b.rejections(t) {
		if !probeIDs[r.EventID] {
			t.Errorf("unexpected rejection of %s (session %s) by %s: %s: %s", r.EventID, r.Session, r.Ledger, r.Code, r.Message)
			continue
		}
		deciders[r.Ledger]++
	}
	t.Logf("stale probes refused per ledger process: %v", deciders)
	if deciders["ledger-a"] == 0 || deciders["ledger-b"] == 0 {
		t.Errorf("requests did not reach both ledger processes: refusals per ledger %v", deciders)
	}
	if n := deciders["ledger-a"] + deciders["ledger-b"]; n != probes {
		t.Errorf("%d stale probes recorded as refused, want %d", n, probes)
	}
}

// TestLedgerKill9WhileInboxInFlight kills a ledger with SIGKILL while it works
// through an inbox backlog, publishes more proposals while no ledger runs,
// and starts a new ledger process: every proposal must be stored exactly
// once, in each session's publish order.
func TestLedgerKill9WhileInboxInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ledger processes; skipped with -short")
	}
	t.Parallel()
	inboxOutage(t, "SIGKILL", false, func(t *testing.T, p *ledgerProc) { p.kill9(t) })
}

// TestLedgerGracefulShutdownLosesNothing stops a ledger with SIGTERM while it
// works through an inbox backlog; a new ledger process must decide every
// proposal exactly once, in each session's publish order.
func TestLedgerGracefulShutdownLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ledger processes; skipped with -short")
	}
	t.Parallel()
	inboxOutage(t, "SIGTERM", true, func(t *testing.T, p *ledgerProc) { p.terminate(t, 30*time.Second) })
}

// inboxOutage publishes a backlog of inbox proposals (a session start, then
// chunks, each session's in order), lets a ledger process decide part of it,
// stops the process with stop, publishes the rest while no ledger runs, and
// starts another ledger process to finish. A graceful stop must leave no
// proposal delivered to the stopped process and unacked: those would wait
// out the consumer's AckWait before anyone decides them.
func inboxOutage(t *testing.T, how string, graceful bool, stop func(*testing.T, *ledgerProc)) {
	b := startBus(t)
	const (
		sessions = 50
		before   = 25 // per session, published before the outage
		after    = 15 // per session, published while no ledger runs
		stopAt   = 100
	)
	plan := make([][]event.Event, sessions)
	for i := range plan {
		id := fmt.Sprintf("%s-%02d", strings.ToLower(how), i)
		start, err := events.New(id, &events.SessionStarted{Task: "outage " + id, Workflow: "wf"})
		if err != nil {
			t.Fatal(err)
		}
		plan[i] = append(plan[i], start)
		for k := 1; k < before+after; k++ {
			ev, err := events.New(id, chunk(fmt.Sprintf("%s #%d", id, k)))
			if err != nil {
				t.Fatal(err)
			}
			plan[i] = append(plan[i], ev)
		}
	}
	b.publish(t, plan, 0, before)

	first := startLedger(t, b.url, "ledger-first")
	var stored uint64
	testrig.Eventually(t, 60*time.Second, "ledger decided part of the backlog", func() (bool, string) {
		stored = b.storedCount(t)
		return stored >= stopAt, fmt.Sprintf("%d of %d stored", stored, sessions*before)
	})
	if stored >= uint64(sessions*before) {
		t.Fatalf("the ledger had decided the whole backlog (%d) before it was signalled: the test exercised no outage; raise the load", stored)
	}
	signalled := time.Now()
	stop(t, first)
	stoppedAt := time.Now()
	storedAtStop := b.storedCount(t)
	msgs, ci := b.inboxState(t)
	t.Logf("%s with %d of %d proposals stored; process gone %s later with %d stored; inbox then: %d messages, %d undelivered, %d delivered and unacked",
		how, stored, sessions*before, stoppedAt.Sub(signalled).Round(time.Millisecond), storedAtStop, msgs, ci.NumPending, ci.NumAckPending)
	if graceful && ci.NumAckPending != 0 {
		t.Errorf("after a clean exit on %s, %d proposals delivered to the stopped ledger are still unacked", how, ci.NumAckPending)
	}

	b.publish(t, plan, before, before+after)
	startLedger(t, b.url, "ledger-second")
	took := b.waitInboxDecided(t, 60*time.Second)
	t.Logf("recovery after %s: the new ledger decided the rest %s after it started (%s after the outage began)",
		how, took.Round(time.Millisecond), time.Since(stoppedAt).Round(time.Millisecond))

	b.checkPlan(t, plan)
}

// publish proposes events [from, to) of every session through the inbox,
// sessions in parallel, each session's in order (each publish awaits its
// JetStream ack before the next).
func (b *bus) publish(t *testing.T, plan [][]event.Event, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(plan))
	for _, evs := range plan {
		wg.Go(func() {
			for _, ev := range evs[from:to] {
				if err := b.c.Propose(ctx, ev); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
}

// checkPlan asserts each session's log is exactly its proposals in publish
// order, stored once each. Failures name the first few sessions in detail
// (with the order proposals were stored in) and then sum up.
func (b *bus) checkPlan(t *testing.T, plan [][]event.Event) {
	t.Helper()
	rejected := map[string]string{}
	for _, r := range b.rejections(t) {
		rejected[r.EventID] = fmt.Sprintf("%s by %s: %s", r.Code, r.Ledger, r.Message)
	}
	const detail = 5
	var lost, reordered []string
	var reorderedSessions, shortSessions, missingN, rejectedN int
	for _, evs := range plan {
		id := evs[0].Subject()
		log := b.readLog(t, id)
		pos := b.checkChain(t, id, log)
		var missing []string
		for k, ev := range evs {
			if _, ok := pos[ev.ID()]; !ok {
				why := "no rejection recorded"
				if r, ok := rejected[ev.ID()]; ok {
					why = "rejected: " + r
					rejectedN++
				}
				missing = append(missing, fmt.Sprintf("#%d %s (%s)", k, ev.ID(), why))
			}
		}
		if len(missing) > 0 {
			shortSessions++
			missingN += len(missing)
			lost = append(lost, fmt.Sprintf("session %s: %d of %d proposals not stored: %s",
				id, len(missing), len(evs), strings.Join(firstN(missing, 2), "; ")))
		}
		if len(log) > len(evs) {
			t.Errorf("session %s: %d events stored for %d proposals", id, len(log), len(evs))
		}
		want := map[string]int{}
		for k, ev := range evs {
			want[ev.ID()] = k
		}
		// Publish order: the stored events' proposal indexes must increase.
		order := make([]int, 0, len(log))
		inOrder := true
		for _, ev := range log {
			k, ok := want[ev.ID]
			if !ok {
				t.Errorf("session %s: seq %d holds event %s that was never proposed", id, ev.Seq, ev.ID)
				continue
			}
			if len(order) > 0 && k < order[len(order)-1] {
				inOrder = false
			}
			order = append(order, k)
		}
		if !inOrder {
			reorderedSessions++
			reordered = append(reordered, fmt.Sprintf("session %s: stored out of publish order; proposal numbers in log order: %s",
				id, ranges(order)))
		}
	}
	problems := append(lost, reordered...) // lost proposals first: the worse outcome
	if len(problems) == 0 {
		return
	}
	for _, p := range firstN(problems, detail) {
		t.Error(p)
	}
	t.Errorf("summary: %d of %d sessions stored out of publish order; %d sessions lost %d proposals (%d of them recorded as rejected)",
		reorderedSessions, len(plan), shortSessions, missingN, rejectedN)
}

// ranges renders 0 1 2 3 7 8 4 as "0-3 7-8 4".
func ranges(ns []int) string {
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, fmt.Sprint(ns[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, " ")
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// TestHelpNamesTheLedgersCredsFile: --help's --creds example is the file
// rath up writes for the ledger (ledger.nk; it once said session-ledger.creds).
func TestHelpNamesTheLedgersCredsFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the session-ledger binary")
	}
	out, _ := exec.Command(ledgerBinary(t), "--help").CombinedOutput()
	want := "<data>/creds/" + auth.FileName(auth.RoleLedger) + " "
	if !strings.Contains(string(out), want) {
		t.Fatalf("--help does not name %q:\n%s", want, out)
	}
}
