// Command syscalls tries the system calls the isolating backend's seccomp
// filter denies and prints, for each one named on its command line, how it
// ended: "name ok" or "name <errno name>". The sandbox tests build it and
// run it in a sandbox.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

var calls = map[string]func() error{
	"unshare": func() error { return unix.Unshare(unix.CLONE_NEWUSER) },
	"mount":   func() error { return unix.Mount("none", os.TempDir(), "tmpfs", 0, "") },
	"keyctl": func() error {
		_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 1, 0, 0)
		return err
	},
	"add_key": func() error {
		_, err := unix.AddKey("user", "rath-test", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		return err
	},
	"bpf": func() error {
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		return errno(e)
	},
	"io_uring_setup": func() error {
		var params [120]byte
		_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
		return errno(e)
	},
	"personality": func() error {
		_, _, e := unix.Syscall(unix.SYS_PERSONALITY, 0x0400000, 0, 0) // READ_IMPLIES_EXEC
		return errno(e)
	},
	// ptrace attaches to a sibling it starts: a process of the same user,
	// which the kernel alone would let it trace.
	"ptrace": func() error {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			return err
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
		return unix.PtraceAttach(c.Process.Pid)
	},
	// cgroup tries to leave the call's control group for its parent.
	"cgroup": func() error {
		return os.WriteFile("/sys/fs/cgroup/memory/cgroup.procs", []byte("0"), 0)
	},
}

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func main() {
	for _, name := range os.Args[1:] {
		f, ok := calls[name]
		if !ok {
			fmt.Println(name, "unknown")
			continue
		}
		err := f()
		var e syscall.Errno
		switch {
		case err == nil:
			fmt.Println(name, "ok")
		case errors.As(err, &e):
			fmt.Println(name, unix.ErrnoName(e))
		default:
			fmt.Println(name, err)
		}
	}
}
