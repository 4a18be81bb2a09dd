package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/openrath/rath/pkg/events"
	api "github.com/openrath/rath/pkg/ledgerapi"
)

// forPeople rephrases the ledger's refusals whose message is written for
// protocol clients ("start it with a rath.session.started event") as what a
// person does on the command line (rath start), and leaves out what only
// the protocol knows (the ID of the start event the CLI proposed). The
// refusal stays the cause: the exit status and errors.Is still see it.
func (a *app) forPeople(err error) error {
	var (
		refusal *api.Error
		worded  *causedError
	)
	if !errors.As(err, &refusal) || errors.As(err, &worded) {
		return err // not the ledger's, or worded for people already
	}
	self := a.self()
	switch refusal.Code {
	case api.CodeNotFound:
		rest, ok := strings.CutPrefix(refusal.Message, "session ")
		if !ok {
			return err
		}
		id, ok := strings.CutSuffix(rest, " does not exist: start it with a "+events.TypeSessionStarted+" event")
		if !ok {
			return err
		}
		return &causedError{fmt.Sprintf("session %s does not exist (%s): start it with '%s start --id %s'; '%s ls' lists the sessions there are",
			id, refusal.Code, self, id, self), err}
	case api.CodeExists:
		id := existing(refusal.Message)
		if id == "" {
			return err
		}
		return &causedError{fmt.Sprintf("session %s exists already (%s): choose another --id, or leave --id out and the ledger names one", id, refusal.Code), err}
	}
	return err
}

// existing is the session ID a session_exists refusal of the ledger names
// ("" when its message is none of the ledger's).
func existing(msg string) string {
	for _, f := range []struct{ prefix, suffix string }{
		{"session ", " already exists"},           // a start (head N follows)
		{"cannot fork onto ", ": session exists"}, // a fork
		{"session ID ", " is taken"},              // another tenant's
	} {
		rest, ok := strings.CutPrefix(msg, f.prefix)
		if !ok {
			continue
		}
		if id, _, ok := strings.Cut(rest, f.suffix); ok && id != "" && !strings.Contains(id, " ") {
			return id
		}
	}
	return ""
}
