package provider

import (
	"context"
	"fmt"
	"sync"
)

// Recorded is a Provider that replays responses recorded from an earlier run,
// in order, whatever the request: re-executing a session must see the
// model's original answers, not new ones.
type Recorded struct {
	mu        sync.Mutex
	responses []Response
	next      int
}

// FromRecorded returns a Provider that answers the Nth Complete with
// responses[N].
func FromRecorded(responses []Response) *Recorded {
	return &Recorded{responses: append([]Response(nil), responses...)}
}

// Name returns "recorded".
func (r *Recorded) Name() string { return "recorded" }

// Complete returns the next recorded response, or an error wrapping
// ErrRecordingExhausted.
func (r *Recorded) Complete(ctx context.Context, _ Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next >= len(r.responses) {
		return Response{}, fmt.Errorf("recorded: call %d of %d: %w", r.next+1, len(r.responses), ErrRecordingExhausted)
	}
	resp := r.responses[r.next]
	r.next++
	return resp, nil
}
