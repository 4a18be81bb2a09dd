package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/openrath/rath/pkg/memoryapi"
	"github.com/openrath/rath/pkg/natstest"
	memory "github.com/openrath/rath/services/memory-svc/service"
)

// startMemory runs the ledger and the memory service on one embedded
// JetStream and returns its URL.
func startMemory(t *testing.T) string {
	t.Helper()
	url := startLedger(t)
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- memory.Run(ctx, nc, memory.DefaultConfig(), slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("memory service stopped with %v", err)
		}
	})
	return url
}

func TestMemoryCommands(t *testing.T) {
	url := startMemory(t)
	ok(t, url, "start", "--id", "s1", "--task", "t")
	var w memoryapi.WriteReply
	if err := json.Unmarshal([]byte(ok(t, url, "--json", "memory", "add", "config defaults go before flag parsing",
		"--session", "s1", "--scope", "project:rath", "--tag", "config", "--evidence", "tool_result")), &w); err != nil {
		t.Fatal(err)
	}
	item := w.Record.ItemID
	if w.Record.Version != 1 || w.Ack.Session != "s1" {
		t.Fatalf("add = %+v", w)
	}
	if out := ok(t, url, "memory", "add", "config defaults go before flag parsing, in main", "--item", item, "--session", "s1", "--scope", "project:rath"); !strings.HasPrefix(out, item+" 2 ") {
		t.Fatalf("add version 2: %q", out)
	}
	if out := ok(t, url, "memory", "search", "flag parsing", "--session", "s1", "--agent", "coder"); !strings.Contains(out, item) || !strings.Contains(out, "recorded in s1") {
		t.Fatalf("search --session: %q", out)
	}
	if out := ok(t, url, "memory", "search", "flag parsing", "--scope", "project:other"); strings.Contains(out, item) {
		t.Fatalf("search in another scope found the item: %q", out)
	}
	if out := ok(t, url, "memory", "show", item); !strings.Contains(out, "in main") {
		t.Fatalf("show: %q", out)
	}
	ok(t, url, "memory", "retract", item, "--version", "2", "--session", "s1", "--by", "ana", "--reason", "too specific")
	if out := ok(t, url, "memory", "restore", item, "2", "--session", "s1", "--by", "ana"); !strings.HasPrefix(out, item+" 3 restored from 2") {
		t.Fatalf("restore: %q", out)
	}
	if out := ok(t, url, "memory", "history", item); strings.Count(out, "\n") != 5 || !strings.Contains(out, "by ana: too specific") {
		t.Fatalf("history: %q", out)
	}
	if out := ok(t, url, "memory", "readers", item); !strings.Contains(out, "s1") || !strings.Contains(out, "own") {
		t.Fatalf("readers: %q", out)
	}
	if out := ok(t, url, "memory", "justify", item, "--version", "1"); !strings.Contains(out, "tool_result in session s1") {
		t.Fatalf("justify: %q", out)
	}
	if out := ok(t, url, "memory", "present", "s1", "--at", "2"); !strings.Contains(out, item) || !strings.Contains(out, "written@2 (tool_result)") {
		t.Fatalf("present: %q", out)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"memory", "show", "mem-nope"}, exitNotFound},
		{[]string{"memory", "add", "x", "--session", "s1", "--scope", "team:x"}, exitRefused},
		{[]string{"memory", "add", "", "--session", "s1", "--scope", "project:rath"}, exitRefused},
		{[]string{"memory", "add", "x", "--session", "nope", "--scope", "project:rath"}, exitNotFound},
		{[]string{"memory", "restore", item, "zero", "--session", "s1"}, exitUsage},
	} {
		if r := rath(t, url, tc.args...); r.code != tc.code || r.stderr == "" {
			t.Errorf("rath %s: exit %d (%q), want %d", strings.Join(tc.args, " "), r.code, r.stderr, tc.code)
		}
	}
}
