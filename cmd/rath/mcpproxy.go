package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/openrath/rath/internal/mcpproxy"
	"github.com/openrath/rath/pkg/events"
)

func (a *app) mcpProxyCmd() *cobra.Command {
	var session, name, listen, upstream string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   "mcp-proxy --session ID [--name NAME] -- COMMAND [ARG...] | --listen ADDR --upstream URL",
		Short: "Sit between an MCP host and an MCP server and record every tool call in a session",
		Long: `mcp-proxy relays an MCP host's messages to an MCP server and back, unchanged,
and records each tools/call it sees in the session --session (started on first
use, labelled rath.mcp-proxy=NAME, as the user of --creds; one that exists is
appended to): rath.tool.call.requested with the arguments, marked as run by its
caller (no Rath runner touches it), rath.tool.call.started naming the server
(sandbox mcp/<name>@<version>, from its initialize answer), then
rath.tool.call.completed with the result and the duration, or
rath.tool.call.failed with the error. Tools are named NAME.<tool>.

Over stdio, configure your MCP host to launch this command in place of the
server's; everything after -- is the server's command line, which mcp-proxy
starts and stops. Its stderr passes through.

Over streamable HTTP, --listen ADDR --upstream URL serves the host at
http://ADDR with URL's path (a loopback address only: whoever reaches the proxy
has calls recorded as the user of --creds), and relays each request, headers
and all, to URL's server.

Recording never holds the relay: a record that fails is logged on stderr and
the messages go on. Calls the server never answers are recorded as failed,
saying why. --name defaults to a name derived from the command (npx -y
@modelcontextprotocol/server-filesystem is "filesystem") or URL's host.
The server runs as this process's user, outside any sandbox.`,
		Example: `  rath mcp-proxy --session notes -- npx -y @modelcontextprotocol/server-filesystem /tmp/notes
  rath mcp-proxy --session notes --name fs -- ./my-mcp-server --verbose
  rath mcp-proxy --session notes --listen 127.0.0.1:8931 --upstream http://127.0.0.1:8930/mcp`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if session == "" {
				return usageError{errors.New("--session is required: the session to record the calls in")}
			}
			if err := events.ValidateSessionID(session); err != nil {
				return usageError{fmt.Errorf("--session: %w", err)}
			}
			var up *url.URL
			switch {
			case listen == "" && upstream == "" && len(args) == 0:
				return usageError{errors.New("name the server: its command after --, or --listen ADDR --upstream URL")}
			case (listen != "" || upstream != "") && len(args) > 0:
				return usageError{errors.New("either a command after -- (stdio) or --listen and --upstream (streamable HTTP), not both")}
			case listen != "" && upstream == "", listen == "" && upstream != "":
				return usageError{errors.New("--listen and --upstream go together")}
			case upstream != "":
				var err error
				if up, err = url.Parse(upstream); err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
					return usageError{fmt.Errorf("--upstream %q: want an http:// or https:// URL of an MCP endpoint", upstream)}
				}
				if err := loopback(listen); err != nil {
					return usageError{err}
				}
			case cmd.ArgsLenAtDash() != 0:
				return usageError{fmt.Errorf("put the server's command after --: rath mcp-proxy --session %s -- %s", session, args[0])}
			}
			if name == "" {
				if up != nil {
					name = mcpproxy.NameOfURL(up)
				} else {
					name = mcpproxy.NameOf(args)
				}
			}
			if err := mcpproxy.ValidateName(name); err != nil {
				return usageError{fmt.Errorf("--name: %w", err)}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(a.Stderr, nil))
			rec, err := mcpproxy.New(mcpproxy.Config{Client: c, Session: session, Name: name, Drain: drain, Log: log})
			if err != nil {
				return usageError{err}
			}
			if err := rec.Open(cmd.Context()); err != nil {
				_ = rec.Close("")
				return err
			}
			if up != nil {
				err = a.serveMCPProxy(cmd.Context(), rec, listen, up, log)
			} else {
				server := exec.Command(args[0], args[1:]...)
				err = mcpproxy.RunStdio(cmd.Context(), rec, server, a.Stdin, a.Stdout, a.Stderr)
			}
			return errors.Join(err, rec.Close("the proxy stopped before the server answered"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "session to record the calls in (started on first use)")
	f.StringVar(&name, "name", "", "the server's name: its tools are recorded as NAME.<tool> (default: derived from the command or URL)")
	f.StringVar(&listen, "listen", "", "serve the streamable HTTP transport at this address (with --upstream)")
	f.StringVar(&upstream, "upstream", "", "the MCP server's streamable HTTP endpoint, e.g. http://127.0.0.1:8930/mcp (with --listen)")
	f.DurationVar(&drain, "drain", 10*time.Second, "at exit, how long to wait for records not yet appended")
	return cmd
}

// serveMCPProxy serves the proxy at listen until ctx is done.
func (a *app) serveMCPProxy(ctx context.Context, rec *mcpproxy.Recorder, listen string, up *url.URL, log *slog.Logger) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen %s: %w", listen, err)}
	}
	srv := &http.Server{Handler: mcpproxy.Handler(rec, up, log), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.Stderr, "rath mcp-proxy: serving http://%s%s for %s, recording in session %s\n", ln.Addr(), up.EscapedPath(), up.Redacted(), rec.Session())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", listen, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		_ = srv.Close() // the event streams of GET requests stay open until cut
	}
	return nil
}

// loopback checks that listen is a loopback address: whoever reaches the
// proxy has calls recorded as the user of --creds.
func loopback(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port: %w", listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %s: the proxy records whatever reaches it as the user of --creds, so it listens on a loopback address only (127.0.0.1:PORT, [::1]:PORT)", listen)
	}
	return nil
}
