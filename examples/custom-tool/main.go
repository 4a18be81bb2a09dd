// Command custom-tool serves a word_count tool to the agents of a Rath
// runtime: it registers the tool and runs the calls sessions request of it.
// Start `rath up`, run this program in the same directory, and list
// word_count in an agent's tools. It connects with the tool runner's identity,
// which custom tool servers use (docs/security.md):
//
//	go run ./examples/custom-tool -nats nats://127.0.0.1:4222 -creds .rath/data/creds/tool-runner.nk
//
// A tool server in another language follows the protocol in docs/tools.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/openrath/rath/pkg/client"
	"github.com/openrath/rath/pkg/toolserver"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server of the Rath runtime")
	creds := flag.String("creds", ".rath/data/creds/tool-runner.nk", "credentials file of the tool runner's identity (empty: none, for a server without authentication)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, *url, *creds, log); err != nil {
		log.Error("custom-tool", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, creds string, log *slog.Logger) error {
	opts := []nats.Option{nats.Name("custom-tool"), nats.MaxReconnects(-1)}
	if creds != "" {
		auth, _, err := client.Credentials(creds)
		if err != nil {
			return err
		}
		opts = append(opts, auth...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Drain()
	log.Info("serving word_count", "nats", url)
	return toolserver.Serve(ctx, nc, toolserver.Tool{
		Name:        "word_count",
		Description: "Count the words of a text (runs of non-space characters).",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"The text to count."}},"required":["text"],"additionalProperties":false}`),
		Handle:      countWords,
	}, toolserver.WithLogger(log))
}

// countWords is the tool: arguments in, the text for the model out.
func countWords(_ context.Context, args json.RawMessage) (string, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return "", err
	}
	return fmt.Sprint(len(strings.Fields(in.Text))), nil
}
