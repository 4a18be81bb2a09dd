package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	api "github.com/openrath/rath/pkg/ledgerapi"
)

// replay serves POST /replay/<session>/v1/chat/completions: the session's
// recorded answers, for an agent run again against its record. A request
// the session recorded is answered as it was; any other is refused, naming
// the first message and field where it differs from the recorded request it
// is closest to. Nothing is recorded and no provider is asked.
func (g *Gateway) replay(w http.ResponseWriter, r *http.Request, wi wire) {
	k, req, ok := g.begin(w, r, wi)
	if !ok {
		return
	}
	fail := wi.fail
	defer g.convos.lock(k.key())()
	ctx := r.Context()
	asked := digests(req.Messages)
	answers := func(cv *convo) *recorded {
		if c := cv.calls[key(asked)]; c != nil && c.kind == wi.kind() && c.stream == req.Stream {
			return c
		}
		return nil
	}
	// What this gateway knows of the session answers without a read; a
	// call it does not know of may have been recorded since.
	if cv := g.convos.get(k.key()); cv != nil {
		if c := answers(cv); c != nil {
			g.again(ctx, w, k, c, req)
			return
		}
	}
	st, err := k.c.State(ctx, k.session)
	if errors.Is(err, api.ErrNotFound) {
		fail(w, http.StatusNotFound, "session_not_found", fmt.Sprintf("session %s does not exist: there is no record to replay", k.session))
		return
	}
	if err != nil {
		g.refuse(w, k, fmt.Errorf("read session %s: %w", k.session, err))
		return
	}
	cv, err := g.convo(ctx, k, st)
	if err != nil {
		g.refuse(w, k, err)
		return
	}
	g.convos.put(k.key(), cv)
	if c := answers(cv); c != nil {
		g.again(ctx, w, k, c, req)
		return
	}
	if len(cv.calls) == 0 {
		fail(w, http.StatusConflict, "replay_diverged", fmt.Sprintf("session %s recorded no model call through the gateway: there is nothing to answer from", k.session))
		return
	}
	// The recorded request closest to this one: the longest common
	// prefix of messages, the earliest of equals.
	var near *recorded
	best := -1
	for _, c := range cv.calls {
		n := common(asked, c.request)
		if n > best || n == best && c.seq < near.seq {
			near, best = c, n
		}
	}
	recordedReq, err := g.recordedRequest(ctx, k, near.kind, near.reqRef)
	if err != nil {
		g.refuse(w, k, err)
		return
	}
	fail(w, http.StatusConflict, "replay_diverged", fmt.Sprintf("this request differs from the one session %s recorded at event %d: %s",
		k.session, near.seq, difference(recordedReq, req)))
}

// difference names the first place where got differs from the recorded
// request was: which message, which field, both values (cut short).
func difference(was, got *request) string {
	for i := range min(len(was.Messages), len(got.Messages)) {
		a, b := was.Messages[i], got.Messages[i]
		if digest(a) == digest(b) {
			continue
		}
		at := "messages[" + strconv.Itoa(i) + "]"
		ta, tb := a.Text, b.Text
		switch {
		case a.Role != b.Role:
			return fmt.Sprintf("%s.role: recorded %q, got %q", at, a.Role, b.Role)
		case ta != tb:
			return fmt.Sprintf("%s.content: recorded %s, got %s", at, quote(ta), quote(tb))
		case a.ToolCallID != b.ToolCallID:
			return fmt.Sprintf("%s.tool_call_id: recorded %q, got %q", at, a.ToolCallID, b.ToolCallID)
		default:
			ca, _ := json.Marshal(a.Calls)
			cb, _ := json.Marshal(b.Calls)
			return fmt.Sprintf("%s.tool_calls: recorded %s, got %s", at, quote(string(ca)), quote(string(cb)))
		}
	}
	if len(was.Messages) != len(got.Messages) {
		return fmt.Sprintf("messages: recorded %d, got %d", len(was.Messages), len(got.Messages))
	}
	return fmt.Sprintf("stream: recorded %v, got %v", was.Stream, got.Stream)
}

// quote is s quoted, cut to 200 bytes.
func quote(s string) string {
	const max = 200
	if len(s) > max {
		return strconv.Quote(string(bytes.ToValidUTF8([]byte(s[:max]), nil))) + "…"
	}
	return strconv.Quote(s)
}
