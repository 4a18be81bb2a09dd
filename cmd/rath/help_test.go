package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// rath --help lists every command in a group, the main commands have
// examples, and every example line is a command line rath accepts: its
// command exists, its flags parse and its arguments are as many as the
// command takes.
func TestHelp(t *testing.T) {
	root := (&app{}).root()
	groups := map[string]bool{}
	for _, g := range helpGroups {
		groups[g.ID] = true
	}
	names := map[string]bool{}
	for _, c := range root.Commands() {
		names[c.Name()] = true
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if !groups[c.GroupID] {
			t.Errorf("rath %s is in no group of rath --help (groupOf)", c.Name())
		}
	}
	for name := range groupOf {
		if !names[name] {
			t.Errorf("groupOf names %s, which is no command", name)
		}
	}
	for _, name := range []string{"up", "demo", "start", "state", "log", "watch", "verify", "fork", "export", "doctor", "creds"} {
		if c, _, err := root.Find([]string{name}); err != nil || c.Example == "" {
			t.Errorf("rath %s has no Example section (%v)", name, err)
		}
	}

	help := ok(t, "nats://127.0.0.1:1", "--help")
	for _, g := range helpGroups {
		if !strings.Contains(help, "\n"+g.Title+"\n") {
			t.Errorf("rath --help lacks the group %q:\n%s", g.Title, help)
		}
	}
	if !strings.Contains(help, "\nExamples:\n  rath demo") {
		t.Errorf("rath --help lacks its examples:\n%s", help)
	}

	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range strings.Split(c.Example, "\n") {
			if strings.TrimSpace(line) != "" {
				checkHelpExample(t, c.CommandPath(), strings.TrimSpace(line))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// checkHelpExample fails the test unless the example line of the command path
// is a command line rath parses.
func checkHelpExample(t *testing.T, path, line string) {
	t.Helper()
	ex, err := parseShell(line)
	if err != nil || !strings.HasPrefix(line, "rath ") {
		t.Errorf("%s: example %q is not a rath command line (%v)", path, line, err)
		return
	}
	c, rest, err := (&app{}).root().Find(ex.args)
	if err != nil || c.HasSubCommands() && !c.Runnable() {
		t.Errorf("%s: example %q names no command (%v)", path, line, err)
		return
	}
	if err := c.ParseFlags(rest); err != nil {
		t.Errorf("%s: example %q: %v", path, line, err)
		return
	}
	if err := c.ValidateArgs(c.Flags().Args()); err != nil {
		t.Errorf("%s: example %q: %v", path, line, err)
	}
	if slices.Contains(ex.args, "--help") {
		t.Errorf("%s: example %q shows --help, not a use", path, line)
	}
}
