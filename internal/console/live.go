package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/events"
)

// heartbeat keeps an idle live stream's connection open through proxies.
const heartbeat = 15 * time.Second

// live streams a session's events as Server-Sent Events, each with its
// sequence as the event ID, from the one after ?after or after the
// Last-Event-ID a reconnecting browser sends: the stream resumes where it
// broke, without a gap or a repeat. It reads the ledger's log up to the
// head and then follows the session live (client.Watch), showing only the
// ledger's own events.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validID(id); err != nil {
		s.fail(w, r, "live", err)
		return
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	var from uint64 = 1
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			s.fail(w, r, "live", fmt.Errorf("%w: after must be a sequence", errBadRequest))
			return
		}
		from = n + 1
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "live: the connection cannot stream", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	ctx := r.Context()
	evs := make(chan events.Stored, 64)
	deltas := make(chan events.Delta, 256)
	done := make(chan error, 1)
	go func() {
		done <- s.client(r).Watch(ctx, id, func(ev events.Stored) error {
			select {
			case evs <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, client.From(from), client.WithWarnings(func(wn client.Warning) {
			s.log.Warn("console: live message skipped", "warning", wn.String())
		}), client.WithDeltas(func(d events.Delta) {
			select {
			case deltas <- d:
			default: // a hint: dropped rather than holding the watch back
			}
		}))
	}()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	names := s.named(ctx, s.client(r), id)
	for {
		select {
		case ev := <-evs:
			if ev.Type == events.TypeSessionClosed || ev.Type == events.TypeSessionMerged {
				names = s.named(ctx, s.client(r), id) // it may name a fork made since
			}
			b, err := json.Marshal(toRow(ev, names))
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: event\ndata: %s\n\n", ev.Seq, b); err != nil {
				return
			}
			flusher.Flush()
		case d := <-deltas:
			// A hint, with no ID: a reconnecting browser resumes after the
			// last stored event, never after a delta.
			b, err := json.Marshal(d)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: delta\ndata: %s\n\n", b); err != nil {
				return
			}
			flusher.Flush()
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				s.log.Warn("console: live stream ended", "session", id, "err", err)
				fmt.Fprintf(w, "event: failure\ndata: %q\n\n", err.Error())
				flusher.Flush()
			}
			return
		case <-ctx.Done():
			return
		case <-s.closed.Done():
			return
		}
	}
}
