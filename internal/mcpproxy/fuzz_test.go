package mcpproxy

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// The event stream parser notes the same events however the stream is cut
// into reads, and passes every byte through.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("event: message\r\nid: 1\r\ndata: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\n"), uint8(3))
	f.Add([]byte("data:a\r\rdata:b\n\n: comment\n\ndata\n\n"), uint8(1))
	f.Add([]byte("\r\n\r\n\n\r"), uint8(7))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint8) {
		whole := readSSE(t, stream, len(stream)+1)
		parts := readSSE(t, stream, int(cut%16)+1)
		if !slices.EqualFunc(whole, parts, bytes.Equal) {
			t.Fatalf("read whole: %q; in reads of %d: %q", whole, cut%16+1, parts)
		}
	})
}

func readSSE(t *testing.T, stream []byte, n int) [][]byte {
	var noted [][]byte
	r := &sseReader{rc: io.NopCloser(&chunked{b: stream, n: n}), note: func(d []byte) { noted = append(noted, bytes.Clone(d)) }}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("relayed %q (%v), want %q", got, err, stream)
	}
	return noted
}

// chunked reads b n bytes at a time.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// No message, from either side, makes the recorder fail: what it does not
// understand it leaves alone.
func FuzzObserve(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}`), []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"image","data":"AAAA"}]}}`))
	f.Add([]byte(`[{"id":"a","method":"tools/call","params":{"name":"y"}},{"id":null,"method":"tools/call"}]`), []byte(`[{"id":"a","error":{"code":"x"}}]`))
	f.Add([]byte(`{"id":1.5e3,"method":"initialize"}`), []byte(`{"id":1.5e3,"result":{"serverInfo":{"name":"\u0000","version":7}}}`))
	f.Fuzz(func(t *testing.T, host, server []byte) {
		r := &Recorder{cfg: Config{Name: "fz", Session: "s"}, log: slog.New(slog.DiscardHandler), now: time.Now,
			open: map[key]*call{}, inits: map[key]bool{}, wake: make(chan struct{}, 1)}
		r.FromHost("", host)
		r.FromServer("", server)
		if len(r.open) > maxOpen || len(r.queue) > maxQueue {
			t.Fatalf("%d open, %d queued", len(r.open), len(r.queue))
		}
	})
}
