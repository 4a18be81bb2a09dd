// Package rerun runs a recorded session again: Reexecute runs its whole
// tree in a private runtime and compares the two trees (rath replay);
// WhatIf forks it between two turns in its own system and continues the
// fork live, perhaps on another model, then contrasts the two branches
// (rath replay --fork). internal/replay reads, normalises and compares trees;
// this package drives the runs.
package rerun

import (
	"errors"
)

// Source is the CloudEvents source of what a rerun appends itself.
const Source = "rath/replay"

// ErrUsage is matched (errors.Is) by the errors of a caller's input that
// cannot work: a seed directory not found, a workflow that does not
// bundle, a what-if point inside a turn or with no turn after it. rath
// exits with its usage code for them.
var ErrUsage = errors.New("unusable input")

// usageError marks err as one of ErrUsage, keeping its message.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func (e usageError) Unwrap() error { return e.err }

func (e usageError) Is(target error) bool { return target == ErrUsage }
