package ledgerapi_test

import (
	"errors"
	"fmt"
	"testing"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

// sentinels lists every code with its sentinel; a code added without one
// fails TestSentinels' count.
var sentinels = map[api.Code]error{
	api.CodeMalformed:      api.ErrMalformed,
	api.CodeUnknownType:    api.ErrUnknownType,
	api.CodeSchema:         api.ErrSchema,
	api.CodeInvalidSession: api.ErrInvalidSession,
	api.CodeNotFound:       api.ErrNotFound,
	api.CodeBlobNotFound:   api.ErrBlobNotFound,
	api.CodeExists:         api.ErrExists,
	api.CodeClosed:         api.ErrClosed,
	api.CodeStale:          api.ErrStale,
	api.CodeTransition:     api.ErrTransition,
	api.CodeUseOperation:   api.ErrUseOperation,
	api.CodeOutOfRange:     api.ErrOutOfRange,
	api.CodeNothingToMerge: api.ErrNothingToMerge,
	api.CodeTooLarge:       api.ErrTooLarge,
	api.CodeDuplicateID:    api.ErrDuplicateID,
	api.CodeConflict:       api.ErrConflict,
	api.CodeDamaged:        api.ErrDamaged,
	api.CodeQuotaExceeded:  api.ErrQuotaExceeded,
	api.CodeUnavailable:    api.ErrUnavailable,
}

func TestSentinels(t *testing.T) {
	if len(sentinels) != 19 {
		t.Fatalf("%d sentinels, want one for each of the 19 codes", len(sentinels))
	}
	for code, sentinel := range sentinels {
		err := fmt.Errorf("append e1 to session s: %w", api.Errorf(code, "session s: something about %s", code))
		for other, s := range sentinels {
			if got, want := errors.Is(err, s), other == code; got != want {
				t.Errorf("errors.Is(%s refusal, Err for %s) = %v, want %v", code, other, got, want)
			}
		}
		if api.CodeOf(sentinel) != code {
			t.Errorf("CodeOf(sentinel of %s) = %s", code, api.CodeOf(sentinel))
		}
	}
	if errors.Is(errors.New("session_not_found: s"), api.ErrNotFound) {
		t.Error("a plain error with the code's text matched ErrNotFound")
	}
	var nilErr *api.Error
	if errors.Is(nilErr, api.ErrNotFound) {
		t.Error("a nil *Error matched ErrNotFound")
	}
}

func ExampleError_Is() {
	err := fmt.Errorf("fork p at 9: %w", api.Errorf(api.CodeOutOfRange, "session p has no sequence 9 (head 4)"))
	fmt.Println(errors.Is(err, api.ErrOutOfRange), errors.Is(err, api.ErrNotFound))
	var e *api.Error
	if errors.As(err, &e) {
		fmt.Println(e.Message)
	}
	// Output:
	// true false
	// session p has no sequence 9 (head 4)
}
