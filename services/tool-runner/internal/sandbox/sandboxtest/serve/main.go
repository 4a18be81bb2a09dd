// Command serve runs the tests' remote sandbox service (sandboxtest: the
// subset of OpenSandbox's API the remote backend speaks, on bwrap) on a
// loopback port, for the bench's S1 row of the remote backend. It prints
// the service's base URL on its first line and serves until SIGTERM; the
// API key is read from RATH_REMOTE_SANDBOX_KEY. Not for production.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/openrath/rath/services/tool-runner/internal/sandbox"
	"github.com/openrath/rath/services/tool-runner/internal/sandbox/sandboxtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox service:", err)
		os.Exit(1)
	}
}

func run() error {
	key := os.Getenv("RATH_REMOTE_SANDBOX_KEY")
	if key == "" || len(os.Args) != 2 {
		return fmt.Errorf("usage: RATH_REMOTE_SANDBOX_KEY=KEY serve ROOT")
	}
	cfg := sandbox.DefaultConfig()
	cfg.Root, cfg.Path = os.Args[1], os.Getenv("PATH")
	iso := sandbox.DefaultIsolation()
	iso.UIDBase = 400000 // apart from the runners' sandbox users
	b, err := sandbox.NewIsolated(cfg, iso)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: sandboxtest.NewHandler(b, key), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
