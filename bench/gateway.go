package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/embedded"
	"github.com/openrath/rath/internal/fakeprovider"
	"github.com/openrath/rath/internal/gateway"
	"github.com/openrath/rath/pkg/events"
)

// sectionGateway is the model gateway's section (optional).
const sectionGateway = "gateway"

// runGateway measures the model gateway (ADR 0039, issue 33's A1 and A2):
// the latency it adds to a model call against a local provider, streamed
// and not, and a call answered from the record at sessions of 10 and 1,000
// recorded calls. The provider is examples/fake-provider's handler in this
// process; the direct figure asks it without the gateway.
func (h *harness) runGateway(ctx context.Context) error {
	p := events.Principal{Tenant: "bench", User: "gw"}
	if _, err := h.creds.AddUser(p); err != nil {
		return err
	}
	if err := embedded.SetUsers(h.ns, h.ecfg, h.creds.Identities()); err != nil {
		return err
	}
	token, err := auth.MintToken(h.creds.Dir, p, "bench")
	if err != nil {
		return err
	}
	prov := httptest.NewServer(fakeprovider.Handler())
	defer prov.Close()
	conns := gateway.NewConns(h.ns.ClientURL(), gateway.UserCreds(h.creds.Dir), nil, nats.InProcessServer(h.ns))
	defer conns.Close()
	g, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{Kind: "openai", BaseURL: prov.URL + "/v1"}}},
		auth.OpenTokens(auth.TokensPath(h.creds.Dir)), conns.Client, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	gw := httptest.NewServer(g.Handler())
	defer gw.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	// call sends one Chat Completions request and returns the time to its
	// whole answer, or to the first byte of a streamed one.
	call := func(ctx context.Context, base, session string, body []byte, stream bool) (time.Duration, error) {
		url := base + "/v1/chat/completions"
		if session != "" {
			url = base + "/" + session + "/v1/chat/completions"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		began := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var first time.Duration
		if stream {
			if _, err := bufio.NewReader(resp.Body).ReadByte(); err != nil {
				return 0, err
			}
			first = time.Since(began)
		}
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
		}
		if stream {
			return first, err
		}
		return time.Since(began), err
	}
	// A conversation of the agent's: turn i of a session adds a user
	// message to the history and the answer it got.
	body := func(turn int, stream bool) []byte {
		var b strings.Builder
		b.WriteString(`{"model":"bench","stream":` + fmt.Sprint(stream) + `,"messages":[{"role":"system","content":"You are terse."}`)
		for i := range turn + 1 {
			fmt.Fprintf(&b, `,{"role":"user","content":"question %d"}`, i)
			if i < turn {
				fmt.Fprintf(&b, `,{"role":"assistant","content":"You said: question %d"}`, i)
			}
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	n := h.cfg.n(500, 50)
	const turns = 10 // calls per session
	a, err := h.quietly(ctx, "A1", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		h.logf("A1: %d calls through the gateway and %d direct, each way (streamed and not)", n, n)
		cpu := h.cpuStart()
		var via, direct, viaFirst, directFirst latencies
		for i := range n {
			session := fmt.Sprintf("s/gw-%d-%d", try, i/turns)
			for _, m := range []struct {
				into    *latencies
				base, s string
				stream  bool
			}{
				{&via, gw.URL, session, false}, {&direct, prov.URL, "", false},
				{&viaFirst, gw.URL, session + "-s", true}, {&directFirst, prov.URL, "", true},
			} {
				d, err := call(ctx, m.base, m.s, body(i%turns, m.stream), m.stream)
				if err != nil {
					return a, err
				}
				*m.into = append(*m.into, d)
			}
		}
		a.timed(cpu.stop())
		a.rows = append(a.rows,
			row{id: "A1", what: fmt.Sprintf("model gateway: a Chat Completions call recorded (sessions of %d calls, %d calls)", turns, n),
				rath: via.String(), rawWhat: "the same call to the provider directly", raw: direct.String(),
				ratio: "+" + fmtDur(via.median()-direct.median()), target: "added p50 ≤ 2 ms: " + verdict(via.median()-direct.median() <= 2*time.Millisecond)},
			row{id: "A1s", what: "model gateway: time to the first byte of a streamed answer", rath: viaFirst.String(),
				rawWhat: "the same, directly", raw: directFirst.String(), ratio: "+" + fmtDur(viaFirst.median()-directFirst.median()),
				target: "added p50 ≤ 1 ms: " + verdict(viaFirst.median()-directFirst.median() <= time.Millisecond)},
		)
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)

	// A2: sessions of 10 and 1,000 recorded calls, each call a short
	// conversation of its own (so that the request's size does not grow
	// with the session); then each call again through /replay.
	replays := func(ctx context.Context, session string, calls int) (latencies, error) {
		one := func(i int) []byte {
			return []byte(fmt.Sprintf(`{"model":"bench","messages":[{"role":"user","content":"question %d"}]}`, i))
		}
		for i := range calls {
			if _, err := call(ctx, gw.URL, "s/"+session, one(i), false); err != nil {
				return nil, err
			}
		}
		var l latencies
		for i := range min(calls, 200) {
			d, err := call(ctx, gw.URL, "replay/"+session, one(calls-1-i), false)
			if err != nil {
				return nil, err
			}
			l = append(l, d)
		}
		return l, nil
	}
	big := h.cfg.n(1000, 100)
	a, err = h.quietly(ctx, "A2", func(ctx context.Context, try int) (attempt, error) {
		var a attempt
		small, err := replays(ctx, fmt.Sprintf("replay-small-%d", try), 10)
		if err != nil {
			return a, err
		}
		h.logf("A2: recording %d calls in one session", big)
		large, err := replays(ctx, fmt.Sprintf("replay-large-%d", try), big)
		if err != nil {
			return a, err
		}
		a.rows = append(a.rows, row{id: "A2", what: fmt.Sprintf("model gateway: a call answered from the record, session of %d calls", big),
			rath: large.String(), rawWhat: "the same at a session of 10 calls", raw: small.String(),
			ratio: fmtRatio(latencyRatio(large.median(), small.median())), target: "p50 ≤ 1 ms: " + verdict(large.median() <= time.Millisecond)})
		return a, nil
	})
	if err != nil {
		return err
	}
	h.rep.add(a.rows...)
	return nil
}
