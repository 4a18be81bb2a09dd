package events

// Token deltas (ADR 0039): while a model's answer streams, its pieces are
// published on a live subject of the session, rath.delta.<tenant>.<session>,
// and never stored. The record is unchanged: the answer is stored whole, as
// one chunk and its model call, when it ends; a watcher shows the deltas
// until then, and one that missed them (it connected late, or lost some)
// sees the stored answer all the same. Deltas are hints, not evidence: a
// tenant's users may publish them for their tenant's sessions, and nothing
// checks them.

const deltaPrefix = "rath.delta."

// DeltaWildcard matches the deltas of every session.
const DeltaWildcard = deltaPrefix + ">"

// DeltaSubject is where the deltas of a session of tenant are published.
func DeltaSubject(tenant, sessionID string) string { return deltaPrefix + tenant + "." + sessionID }

// DeltaFilter matches the deltas of one session; an empty tenant matches
// the session in any tenant (for services).
func DeltaFilter(tenant, sessionID string) string {
	if tenant == "" {
		tenant = "*"
	}
	return deltaPrefix + tenant + "." + sessionID
}

// TenantDeltaWildcard matches the deltas of every session of a tenant.
func TenantDeltaWildcard(tenant string) string { return deltaPrefix + tenant + ".>" }

// Delta is one piece of an answer as it streams (the JSON body of a
// message on DeltaSubject).
type Delta struct {
	Session string `json:"session"`
	// Answer names the answer the delta is part of: the turn's ID (the
	// agent worker's answers), or the call's (the model gateway's). Every
	// delta of one answer has the same.
	Answer string `json:"answer"`
	Agent  string `json:"agent,omitempty"`
	// N numbers the answer's deltas from 0: a gap says some were missed.
	N int `json:"n"`
	// Text is text the answer adds.
	Text string `json:"text,omitempty"`
	// Tool is a tool call the answer starts (its ID and name) or adds
	// arguments to.
	Tool *DeltaTool `json:"tool,omitempty"`
	// Done marks the answer's last delta: its stored events follow (the
	// answer, or the model call's failure).
	Done bool `json:"done,omitempty"`
}

// DeltaTool is the part of a tool call a delta adds.
type DeltaTool struct {
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}
