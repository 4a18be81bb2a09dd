package main

import (
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/openrath/rath/pkg/events"
)

// source is the CloudEvents source of every event the harness builds.
const source = "rath/bench"

// payloads builds the chunk events every measurement uses, so that the ledger
// and the raw runs handle the same bytes.
type payloads struct {
	content string
	// key signs the raw reference chains like the ledger signs its events,
	// so both store bodies of the same size.
	key *events.SigningKey
}

func newPayloads(chunkBytes int) payloads {
	const text = "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. "
	key, err := events.GenerateSigningKey()
	if err != nil {
		panic(err) // crypto/rand failed: nothing can run
	}
	return payloads{content: strings.Repeat(text, chunkBytes/len(text)+1)[:chunkBytes], key: key}
}

// chunk is a chunk proposal for a session, as a client sends it.
func (p payloads) chunk(sessionID string) (event.Event, error) {
	return events.New(sessionID, &events.ChunkAppended{Role: events.RoleAssistant, Agent: "bench", Content: p.content},
		events.WithSource(source))
}

// chunks builds n chunk proposals for a session.
func (p payloads) chunks(sessionID string, n int) ([]event.Event, error) {
	out := make([]event.Event, n)
	for i := range out {
		ev, err := p.chunk(sessionID)
		if err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

// rawMsg is one message a raw JetStream run publishes: a sealed event body as
// the ledger would store it, on its own subject.
type rawMsg struct {
	subject string
	id      string
	body    []byte
}

// sealedChain seals n chunk events of one session into a valid hash chain
// (sequences from 1) and puts them on prefix.<session>.conversation: the
// bytes the ledger stores, without the ledger.
func (p payloads) sealedChain(prefix, sessionID string, n int) ([]rawMsg, error) {
	out := make([]rawMsg, n)
	prev := ""
	for i := range out {
		ev, err := p.chunk(sessionID)
		if err != nil {
			return nil, err
		}
		body, hash, err := events.Seal(&ev, uint64(i+1), prev, p.key)
		if err != nil {
			return nil, err
		}
		out[i] = rawMsg{subject: prefix + "." + sessionID + "." + events.TokenConversation, id: ev.ID(), body: body}
		prev = hash
	}
	return out, nil
}

// sizes returns the byte size of one chunk proposal and of its stored body.
func (p payloads) sizes() (proposal, stored int, err error) {
	ev, err := p.chunk(sessionID("size", 0))
	if err != nil {
		return 0, 0, err
	}
	b, err := events.Marshal(ev)
	if err != nil {
		return 0, 0, err
	}
	body, _, err := events.Seal(&ev, 12345, strings.Repeat("0", 64), p.key)
	if err != nil {
		return 0, 0, err
	}
	return len(b), len(body), nil
}

// sessionID names the i-th session of a group; IDs are valid subject tokens.
func sessionID(group string, i int) string { return fmt.Sprintf("bench-%s-%06d", group, i) }
