package memoryapi

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Scope kinds: who an item is visible to.
const (
	ScopeUser     = "user"
	ScopeAgent    = "agent"
	ScopeProject  = "project"
	ScopeWorkflow = "workflow"
	ScopeSession  = "session"
)

// ScopeKinds lists the scope kinds.
var ScopeKinds = []string{ScopeUser, ScopeAgent, ScopeProject, ScopeWorkflow, ScopeSession}

// scopeName is the name part of a scope: a user, agent, project or workflow
// name (letters, digits and . _ @ / + -), or a session ID.
var scopeName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._@/+-]{0,127}$`)

// ParseScope splits a scope "<kind>:<name>" ("project:rath",
// "agent:coder", "user:ana@example.com", "session:<session ID>") and checks
// it: the kind is one of ScopeKinds, the name 1-128 characters of letters,
// digits and . _ @ / + - not starting with . @ / or +, and a session
// scope's name a valid session ID.
func ParseScope(s string) (kind, name string, err error) {
	kind, name, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", fmt.Errorf("scope %q: want <kind>:<name> with kind one of %s", s, strings.Join(ScopeKinds, ", "))
	}
	if !slices.Contains(ScopeKinds, kind) {
		return "", "", fmt.Errorf("scope %q: unknown kind %q, want one of %s", s, kind, strings.Join(ScopeKinds, ", "))
	}
	if !scopeName.MatchString(name) {
		return "", "", fmt.Errorf("scope %q: name %q must be 1-128 characters of letters, digits and . _ @ / + -, not starting with . @ / or +", s, name)
	}
	if kind == ScopeSession {
		if err := events.ValidateSessionID(name); err != nil {
			return "", "", fmt.Errorf("scope %q: %w", s, err)
		}
	}
	return kind, name, nil
}

// ValidateTags checks a tag list: at most MaxTags tags of 1-64 characters
// without spaces.
func ValidateTags(tags []string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%d tags, at most %d", len(tags), MaxTags)
	}
	for _, t := range tags {
		if t == "" || len(t) > 64 || strings.ContainsFunc(t, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }) {
			return fmt.Errorf("tag %q: want 1-64 characters without spaces", t)
		}
	}
	return nil
}

// ValidEvidence reports whether e is one of Evidences.
func ValidEvidence(e string) bool { return slices.Contains(Evidences, e) }

// ValidateItemID checks an item ID: like a session ID, one subject token.
func ValidateItemID(id string) error {
	if err := events.ValidateSessionID(id); err != nil {
		return fmt.Errorf("invalid item ID %q: want 1-128 characters of A-Z a-z 0-9 _ -", id)
	}
	return nil
}
