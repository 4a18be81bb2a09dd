package replay

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Sources of the events Rath's services append.
const (
	SourceSelector = "rath/selector"
	SourceWorker   = "rath/agent-worker"
	SourceRunner   = "rath/tool-runner"
	SourceLedger   = "rath/session-ledger"
	// SourceTimer records what Rath's durable timers fire (ADR 0026): a
	// replay's own timers fire again, after the same timeouts.
	SourceTimer  = "rath/timer"
	SourceMemory = "rath/memory-svc"
	// SourceToolPrefix starts the source of a tool served over the bus
	// (pkg/toolserver).
	SourceToolPrefix = "rath/tool/"
)

// Input is an external input of a tree: an event no Rath service produced
// (a user's `rath memory add`, `rath emit`, `rath pause`…), which a replay
// re-applies at the same place instead of expecting its services to
// produce it.
type Input struct {
	Branch *Branch
	Event  events.Stored
}

// External lists the tree's external inputs, in tree order and sequence.
// The root's start and the forks' fork events are not inputs: a replay
// creates them itself (a fork by the selector) and compares them.
//
// An event is produced by Rath when its source is one of the services'
// (selector, agent worker, tool runner, ledger, a tool server), or when the
// memory service appended it on a service's behalf:
//   - rath.memory.recalled with a turn ID: the agent worker's recall
//     before a turn (a recall without one is a user's `rath memory recall`);
//   - rath.memory.written of a new item whose ID derives from one of its
//     provenance event IDs the way the selector's memory rules
//     (request selector/<trigger>/memory) and the remember tool
//     (memory.remember/<call event>) derive theirs; any other write (a
//     user's add, a restore, a version of a named item) is external;
//   - rath.memory.retracted by the memory service itself (a write its
//     session refused).
//
// Everything else is external.
func External(t *Tree) []Input {
	var out []Input
	for _, b := range t.Branches {
		for i, e := range b.Events {
			if i == 0 || Produced(e) {
				continue
			}
			out = append(out, Input{Branch: b, Event: e})
		}
	}
	return out
}

// Produced reports whether a Rath service produced the event (see External).
func Produced(e events.Stored) bool {
	switch {
	case slices.Contains([]string{SourceSelector, SourceWorker, SourceRunner, SourceLedger, SourceTimer}, e.Source),
		strings.HasPrefix(e.Source, SourceToolPrefix):
		return true
	case e.Source != SourceMemory:
		return false
	}
	switch e.Type {
	case events.TypeMemoryRecalled:
		var d events.MemoryRecalled
		return json.Unmarshal(e.Data, &d) == nil && d.TurnID != ""
	case events.TypeMemoryWritten:
		var d events.MemoryWritten
		if json.Unmarshal(e.Data, &d) != nil || d.Version != 1 {
			return false
		}
		for _, id := range d.Provenance.EventIDs {
			if d.ItemID == itemID(events.DerivedID("selector", id, "memory")) ||
				d.ItemID == itemID(events.DerivedID("memory.remember", id)) {
				return true
			}
		}
		return false
	case events.TypeMemoryRetracted:
		var d events.MemoryRetracted
		return json.Unmarshal(e.Data, &d) == nil && d.By == SourceMemory
	}
	return false
}

// itemID is the memory service's ID of a new item added by request id.
func itemID(request string) string { return "mem-" + events.DerivedID("memory.item", request) }
