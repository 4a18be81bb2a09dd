package provider

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// failing fails with errs in turn, then succeeds.
type failing struct {
	errs  []error
	calls int
}

func (f *failing) Name() string { return "failing" }

func (f *failing) Complete(context.Context, Request) (Response, error) {
	f.calls++
	if f.calls <= len(f.errs) {
		return Response{}, f.errs[f.calls-1]
	}
	return Response{Content: "done"}, nil
}

func TestWithRetry(t *testing.T) {
	overloaded := &Error{Provider: "p", Status: 529, Retryable: true, Message: "overloaded"}
	limited := &Error{Provider: "p", Status: 429, Retryable: true, RetryAfter: time.Hour, Message: "slow down"}
	bad := &Error{Provider: "p", Status: 400, Message: "bad request"}
	tests := []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   error // nil: success
		wantRetry []bool
	}{
		{"success", nil, 1, nil, nil},
		{"recovers", []error{overloaded, limited}, 3, nil, []bool{true, true}},
		{"gives up", []error{overloaded, overloaded, overloaded, overloaded}, 3, overloaded, []bool{true, true, false}},
		{"permanent", []error{bad}, 1, bad, []bool{false}},
		{"not an *Error", []error{ErrScriptExhausted}, 1, ErrScriptExhausted, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &failing{errs: tt.errs}
			var attempts []Attempt
			p := WithRetry(f, fastRetry, func(a Attempt) { attempts = append(attempts, a) })
			resp, err := p.Complete(context.Background(), Request{})
			if f.calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", f.calls, tt.wantCalls)
			}
			if tt.wantErr == nil {
				if err != nil || resp.Content != "done" {
					t.Fatalf("Complete() = %+v, %v", resp, err)
				}
			} else if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if len(attempts) != len(tt.wantRetry) {
				t.Fatalf("onAttempt called %d times, want %d", len(attempts), len(tt.wantRetry))
			}
			for i, a := range attempts {
				if a.N != i+1 || a.Err != tt.errs[i] || (a.RetryIn > 0) != tt.wantRetry[i] || a.RetryIn > fastRetry.Max {
					t.Errorf("attempt %d = %+v", i, a)
				}
				var perr *Error
				if errors.As(a.Err, &perr) && a.Status != perr.Status {
					t.Errorf("attempt %d status %d, want %d", i, a.Status, perr.Status)
				}
			}
		})
	}
}

func TestWithRetryContextEndsDuringWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &failing{errs: []error{&Error{Provider: "p", Status: 503, Retryable: true}}}
	p := WithRetry(f, Retry{MaxAttempts: 3, Base: time.Hour, Max: time.Hour}, func(Attempt) { cancel() })
	_, err := p.Complete(ctx, Request{})
	if !errors.Is(err, context.Canceled) || f.calls != 1 {
		t.Fatalf("err = %v after %d calls, want context.Canceled after 1", err, f.calls)
	}
}

func TestRetryDelay(t *testing.T) {
	p := Retry{MaxAttempts: 10, Base: 100 * time.Millisecond, Max: time.Second}
	for n, ceiling := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 60: time.Second} {
		for range 50 {
			if d := p.delay(n, 0); d < ceiling/2 || d > ceiling {
				t.Fatalf("delay(%d) = %v, want within [%v, %v]", n, d, ceiling/2, ceiling)
			}
		}
	}
	if d := p.delay(1, 300*time.Millisecond); d != 300*time.Millisecond {
		t.Errorf("Retry-After 300ms: delay %v", d)
	}
	if d := p.delay(1, time.Minute); d != time.Second {
		t.Errorf("Retry-After above Max: delay %v, want Max", d)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
	}{
		{nil, 0},
		{map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "1"}, 250 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{map[string]string{"Retry-After": "-3"}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.header {
			h.Set(k, v)
		}
		if got := retryAfter(h, now); got != tt.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tt.header, got, tt.want)
		}
	}
}
