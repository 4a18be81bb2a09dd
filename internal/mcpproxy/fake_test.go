package mcpproxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// fakeEnv makes the test binary a scripted MCP server of the stdio
// transport (fakeServer) instead of running the tests.
const fakeEnv = "RATH_MCPPROXY_FAKE_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		fakeServer()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeServer answers newline-delimited JSON-RPC on stdin, with odd spacing
// in what it writes (a proxy that re-encoded would change it). Its tools:
// echo (the text argument), fail (a JSON-RPC error), broken (an isError
// result), huge (100 KiB of text), hold (no answer), ask_host (asks the
// host roots/list first and answers with what the host said), garble (a
// line that is not JSON, then the answer), die (exits 3 mid-call). A
// tools/call without a name is refused as invalid params; a line that is
// not JSON gets a parse error; a batch gets a batch.
func fakeServer() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := os.Stdout
	var waiting json.RawMessage // the id of an ask_host call
	answer := func(msg map[string]json.RawMessage) string {
		id := string(msg["id"])
		var method string
		_ = json.Unmarshal(msg["method"], &method)
		if method == "" {
			// The host's answer to our roots/list.
			if id == `"srv-1"` && waiting != nil {
				w := waiting
				waiting = nil
				return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content":[{"type":"text","text":"host said %s"}]}}`, w, strings.ReplaceAll(string(msg["result"]), `"`, `'`))
			}
			return ""
		}
		if id == "" {
			return "" // a notification
		}
		switch method {
		case "initialize":
			return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake-server","version":"1.2.3"}}}`, id)
		case "tools/list":
			return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`, id)
		case "tools/call":
			var p struct {
				Name      string `json:"name"`
				Arguments struct {
					Text string `json:"text"`
				} `json:"arguments"`
			}
			_ = json.Unmarshal(msg["params"], &p)
			switch p.Name {
			case "":
				return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "error":{"code":-32602,"message":"no tool named"}}`, id)
			case "echo":
				t, _ := json.Marshal(p.Arguments.Text)
				return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content":[{"type":"text","text":%s}]}}`, id, t)
			case "fail":
				return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "error":{"code":-32000,"message":"failing as asked"}}`, id)
			case "broken":
				return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content":[{"type":"text","text":"it broke"}],"isError":true}}`, id)
			case "huge":
				return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content":[{"type":"text","text":"%s"}]}}`, id, strings.Repeat("é", 50<<10))
			case "hold":
				return ""
			case "ask_host":
				waiting = msg["id"]
				return `{"jsonrpc":"2.0", "id":"srv-1", "method":"roots/list"}`
			case "garble":
				return "this is { not json\n" + fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "result":{"content":[{"type":"text","text":"after garble"}]}}`, id)
			case "die":
				fmt.Fprintln(os.Stderr, "dying as asked")
				os.Exit(3)
			}
			return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "error":{"code":-32602,"message":"unknown tool"}}`, id)
		}
		return fmt.Sprintf(`{"jsonrpc":"2.0", "id":%s, "error":{"code":-32601,"message":"no such method"}}`, id)
	}
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var reply string
			var one map[string]json.RawMessage
			var batch []map[string]json.RawMessage
			switch {
			case json.Unmarshal(line, &one) == nil:
				reply = answer(one)
			case json.Unmarshal(line, &batch) == nil:
				var parts []string
				for _, m := range batch {
					if a := answer(m); a != "" {
						parts = append(parts, a)
					}
				}
				if len(parts) > 0 {
					reply = "[" + strings.Join(parts, ", ") + "]"
				}
			default:
				reply = `{"jsonrpc":"2.0", "id":null, "error":{"code":-32700,"message":"parse error"}}`
			}
			if reply != "" {
				fmt.Fprintln(out, reply)
			}
		}
		if err != nil {
			return
		}
	}
}
