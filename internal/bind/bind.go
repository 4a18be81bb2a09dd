// Package bind checks that a TCP address is free before a server listens on
// it, and names the process that holds it when it is not, so that a taken
// port is reported as such at once instead of as a server that never
// becomes ready.
package bind

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// InUseError reports that another socket listens on Addr already. Holder
// names the process that holds it ("pid 4242 (nats-server -js)") when this
// process may see it, and is empty otherwise. It matches
// syscall.EADDRINUSE with errors.Is.
type InUseError struct {
	Addr   string
	Holder string
	Err    error
}

func (e *InUseError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("%s: address in use", e.Addr)
	}
	return fmt.Sprintf("%s: address in use by %s", e.Addr, e.Holder)
}

func (e *InUseError) Unwrap() error { return e.Err }

// Check listens on the TCP address addr and closes the listener at once. It
// returns nil when addr is free (or its port is 0, any free one), an
// *InUseError when another socket listens there, and the listen error
// otherwise (a host this machine does not have, a port it may not bind).
// The port may of course be taken between Check and the real listen: a
// server still reports its own failure, Check only makes the common case
// quick and clear.
func Check(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	e := &InUseError{Addr: addr, Err: err}
	if _, p, perr := net.SplitHostPort(addr); perr == nil {
		if port, perr := strconv.Atoi(p); perr == nil {
			e.Holder = Holder(port)
		}
	}
	return e
}

// Holder names the process listening on the TCP port: "pid N (its command
// line)", or "a process of uid N" when the socket is there but its process
// is not this user's to read, or "" when it cannot tell (see Find).
func Holder(port int) string {
	p, ok := Find(port)
	switch {
	case !ok:
		return ""
	case p.PID == 0:
		return "a process of uid " + p.UID + " (not this user's to name)"
	case p.Command == "":
		return "pid " + strconv.Itoa(p.PID)
	}
	return "pid " + strconv.Itoa(p.PID) + " (" + p.Command + ")"
}

// Process is a process listening on a TCP port, as Find sees it.
type Process struct {
	// PID is 0 when the socket is there but its process is not this
	// user's to read.
	PID int
	// UID owns the socket.
	UID string
	// Command is its command line, shortened, or its name.
	Command string
	// Args is its whole command line, and Dir its working directory
	// ("" when not readable).
	Args []string
	Dir  string
}

// Find returns the process listening on the TCP port, reading /proc only:
// the listening socket's inode in /proc/net/tcp{,6}, then the process with
// a descriptor on that inode. It reports false when it cannot tell (no
// /proc, nothing listening, another network namespace).
func Find(port int) (Process, bool) {
	inodes := map[string]string{} // socket inode → owner's uid
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listening(f, port, inodes)
	}
	if len(inodes) == 0 {
		return Process{}, false
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue // not ours to read, or gone
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			uid, ok := inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")]
			if !ok {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(dir))
			p := Process{PID: pid, UID: uid}
			if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
				p.Args = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
			}
			p.Dir, _ = os.Readlink(filepath.Join(dir, "cwd"))
			p.Command = command(dir, p.Args)
			return p, true
		}
	}
	for _, uid := range inodes {
		return Process{UID: uid}, true
	}
	return Process{}, false
}

// listening adds to inodes the sockets of the /proc/net/tcp-format file
// that listen on port, with their owners' uids.
func listening(file string, port int, inodes map[string]string) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || int(p) != port {
			continue
		}
		if fields[9] != "0" {
			inodes[fields[9]] = fields[7]
		}
	}
}

// command is the command line args of the process in dir, on one line and
// shortened, or its name when the command line is not readable.
func command(dir string, args []string) string {
	const limit = 80
	cmd := strings.Join(strings.Fields(strings.Join(args, " ")), " ")
	if cmd == "" {
		if b, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
			cmd = strings.TrimSpace(string(b))
		}
	}
	if r := []rune(cmd); len(r) > limit {
		cmd = string(r[:limit]) + "…"
	}
	return cmd
}
