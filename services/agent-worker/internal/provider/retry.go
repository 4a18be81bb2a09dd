package provider

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Retry is the policy of WithRetry. Zero fields take DefaultRetry's values.
type Retry struct {
	MaxAttempts int           // attempts in all, the first included
	Base        time.Duration // backoff before the second attempt, doubled after each failure
	Max         time.Duration // longest wait, also capping the provider's Retry-After
}

// DefaultRetry is the policy for fields left zero.
var DefaultRetry = Retry{MaxAttempts: 4, Base: 500 * time.Millisecond, Max: 30 * time.Second}

// Attempt describes one failed call, for the caller to record (the agent
// worker appends a rath.model.call.failed event per attempt).
type Attempt struct {
	N       int           // 1 for the first attempt
	Status  int           // HTTP status, 0 when none arrived or the error is not an *Error
	Err     error         // the attempt's error
	RetryIn time.Duration // wait before the next attempt; 0 when this failure is final
}

// WithRetry returns a Provider that retries p's retryable *Error failures
// with exponential backoff and jitter, waiting the provider's Retry-After
// instead when one is given (capped at policy.Max). onAttempt, when not nil,
// is called synchronously for every failed attempt, before the wait; the last
// call of a failed Complete has RetryIn 0, unless ctx ends during a wait. The
// error returned says how many attempts were made and wraps the last
// attempt's error, so errors.As finds its *Error.
func WithRetry(p Provider, policy Retry, onAttempt func(Attempt)) Provider {
	if policy.MaxAttempts <= 0 {
		policy.MaxAttempts = DefaultRetry.MaxAttempts
	}
	if policy.Base <= 0 {
		policy.Base = DefaultRetry.Base
	}
	if policy.Max <= 0 {
		policy.Max = DefaultRetry.Max
	}
	return &retrying{next: p, policy: policy, onAttempt: onAttempt}
}

type retrying struct {
	next      Provider
	policy    Retry
	onAttempt func(Attempt)
}

func (r *retrying) Name() string { return r.next.Name() }

func (r *retrying) Complete(ctx context.Context, req Request) (Response, error) {
	for n := 1; ; n++ {
		resp, err := r.next.Complete(ctx, req)
		if err == nil {
			return resp, nil
		}
		var perr *Error
		isProvider := errors.As(err, &perr)
		var wait time.Duration
		retry := isProvider && perr.Retryable && n < r.policy.MaxAttempts && ctx.Err() == nil
		if retry {
			wait = r.policy.delay(n, perr.RetryAfter)
		}
		if r.onAttempt != nil {
			a := Attempt{N: n, Err: err, RetryIn: wait}
			if isProvider {
				a.Status = perr.Status
			}
			r.onAttempt(a)
		}
		if !retry {
			return Response{}, fmt.Errorf("model call failed after %s: %w", attempts(n), err)
		}
		if werr := sleep(ctx, wait); werr != nil {
			return Response{}, fmt.Errorf("model call abandoned after %s: %w", attempts(n), errors.Join(werr, err))
		}
	}
}

// delay is the wait after failed attempt n: the provider's Retry-After when
// given, else Base·2^(n-1) with equal jitter (half fixed, half random, so
// workers hitting the same limit spread out); both capped at Max.
func (p Retry) delay(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, p.Max)
	}
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
