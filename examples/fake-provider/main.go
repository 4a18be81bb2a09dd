// Command fake-provider is a local model provider speaking the OpenAI Chat
// Completions wire format (streaming and not), answering by a fixed rule
// instead of a model: to point the model gateway (docs/gateway.md) and an
// agent framework at on a machine with no provider to reach.
//
// The rule: when the request offers tools and its last message is the
// user's, it calls the first tool with {"input": <what the user said>};
// when the last message is a tool's result, it says "The tool said: <it>";
// otherwise it says "You said: <what the user said>".
//
//	go run ./examples/fake-provider --listen 127.0.0.1:8090
package main

import (
	"flag"
	"log/slog"
	"net/http"
	"os"

	"github.com/openrath/rath/internal/fakeprovider"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "host:port to serve on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("fake provider", "base_url", "http://"+*listen+"/v1")
	if err := http.ListenAndServe(*listen, fakeprovider.Handler()); err != nil {
		log.Error("fake provider", "err", err)
		os.Exit(1)
	}
}
