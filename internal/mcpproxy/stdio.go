package mcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopAfter is how long a server has to exit once its stdin is closed,
// and again after SIGTERM, before it is killed.
const stopAfter = 2 * time.Second

// maxObserved bounds a line the proxy reads for calls: a longer one is
// relayed whole and not recorded.
const maxObserved = 64 << 20

// errGone is relay's error when the side it writes to has gone.
var errGone = errors.New("the reader has gone")

// stderrTail bounds what is kept of the server's stderr, to say why it
// exited.
const stderrTail = 2 << 10

// RunStdio runs cmd, an MCP server of the stdio transport, between the
// host's in and out: each line the host writes goes to the server's stdin,
// each line the server writes to out, byte for byte, and the server's
// stderr to stderr. It notes each line in r on its way (the host's before
// the server can answer it). It returns when either side ends: the host
// closed in (the server's stdin is closed, and it is given stopAfter to
// exit before SIGTERM, then SIGKILL), or the server exited; or when ctx is
// done (the server is stopped the same way). Calls left without an answer
// are recorded as failed, saying why. A read of in may still be pending
// when it returns.
func RunStdio(ctx context.Context, r *Recorder, cmd *exec.Cmd, in io.Reader, out io.Writer, stderr io.Writer) error {
	toServer, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("MCP server %s: %w", cmd.Path, err)
	}
	fromServer, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("MCP server %s: %w", cmd.Path, err)
	}
	tail := &tail{}
	cmd.Stderr = io.MultiWriter(stderr, tail)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true // stop what it started, too
	cmd.WaitDelay = stopAfter
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the MCP server %s: %w", strings.Join(cmd.Args, " "), err)
	}
	pid := cmd.Process.Pid

	hostDone := make(chan error, 1)
	go func() {
		err := relay(in, toServer, func(line []byte) { r.FromHost("", line) })
		_ = toServer.Close() // the server reads EOF: its cue to exit
		hostDone <- err
	}()
	serverDone := make(chan error, 1)
	go func() { serverDone <- relay(fromServer, out, func(line []byte) { r.FromServer("", line) }) }()

	var hostErr error
	var why string
	select {
	case hostErr = <-hostDone:
		why = "the host closed the connection before the server answered"
		// The server may still answer what it was asked: its answers
		// are relayed and recorded until it exits.
		end(ctx, pid, serverDone)
	case err := <-serverDone:
		why = "the MCP server closed its output before answering"
		if errors.Is(err, errGone) {
			why = "the host stopped reading before the server answered"
		}
	case <-ctx.Done():
		why = "the proxy was stopped before the server answered"
		end(ctx, pid, serverDone)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // after the last read of its output
	waitErr := end(ctx, pid, waited)
	if waitErr != nil && why == "the MCP server closed its output before answering" {
		why = "the MCP server exited before answering: " + waitErr.Error()
		if t := tail.String(); t != "" {
			why += "; its stderr ends: " + t
		}
	}
	r.FailOpen("", why)
	switch {
	case hostErr != nil && !errors.Is(hostErr, errGone):
		return fmt.Errorf("read from the host: %w", hostErr)
	case waitErr != nil && ctx.Err() == nil && !killed(waitErr):
		return fmt.Errorf("the MCP server %s: %w", strings.Join(cmd.Args, " "), waitErr)
	}
	return nil
}

// relay copies lines from src to dst, noting each complete line (without
// its newline) unless it is longer than maxObserved. A line is written
// whole before the next is read; a last line without a newline is relayed
// too. It returns nil at the end of src, errGone when dst is closed.
func relay(src io.Reader, dst io.Writer, note func([]byte)) error {
	br := bufio.NewReaderSize(src, 64<<10)
	var long bool // the line under way is longer than maxObserved
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			switch {
			case long:
			case len(line)+len(chunk) > maxObserved:
				long, line = true, nil
			default:
				line = append(line, chunk...)
			}
			if chunk[len(chunk)-1] == '\n' || err == io.EOF {
				if !long {
					note(bytes.TrimRight(line, "\r\n"))
					// Written after noting: a request is open before its
					// answer can come back.
					if _, werr := dst.Write(line); werr != nil {
						return errGone
					}
				} else if _, werr := dst.Write(chunk); werr != nil {
					return errGone
				}
				long, line = false, line[:0]
			} else if long {
				if _, werr := dst.Write(chunk); werr != nil {
					return errGone
				}
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrClosedPipe), errors.Is(err, syscall.EPIPE):
			return nil
		default:
			return err
		}
	}
}

// end waits for done, the end of the server's output or of its process:
// up to stopAfter (none once ctx is done), then it sends SIGTERM to the
// server's process group, waits stopAfter again, then sends SIGKILL.
func end(ctx context.Context, pid int, done <-chan error) error {
	t := time.NewTimer(stopAfter)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t.Reset(stopAfter)
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return <-done
}

// killed reports whether the server died of a signal the proxy sends.
func killed(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGKILL
		}
	}
	return false
}

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = t.buf[len(t.buf)-stderrTail:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(string(t.buf), ""))
}
