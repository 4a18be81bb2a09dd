package bind

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()

	err = Check(addr)
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Check(%s) with a listener there = %v, want an *InUseError matching EADDRINUSE", addr, err)
	}
	if !strings.Contains(err.Error(), addr+": address in use") {
		t.Errorf("Check(%s) = %q, want it to name the address and say it is in use", addr, err)
	}
	// The listener is this test's: /proc names this process.
	if _, err := os.Stat("/proc/net/tcp"); err == nil {
		if want := "pid " + strconv.Itoa(os.Getpid()) + " ("; !strings.HasPrefix(inUse.Holder, want) {
			t.Errorf("holder of %s = %q, want it to start with %q", addr, inUse.Holder, want)
		}
		wd, _ := os.Getwd()
		p, found := Find(ln.Addr().(*net.TCPAddr).Port)
		if !found || p.PID != os.Getpid() || p.Dir != wd || len(p.Args) == 0 || p.Args[0] != os.Args[0] {
			t.Errorf("Find(port of %s) = %+v, %v; want this process (pid %d, dir %s, args %q)", addr, p, found, os.Getpid(), wd, os.Args)
		}
	}

	// Freed, the same address is free; port 0 always is.
	ln.Close()
	if err := Check(addr); err != nil {
		t.Errorf("Check(%s) once closed = %v, want nil", addr, err)
	}
	if err := Check("127.0.0.1:0"); err != nil {
		t.Errorf("Check(127.0.0.1:0) = %v, want nil", err)
	}
	// An address no interface has is an error, but not "in use".
	if err := Check("192.0.2.1:0"); err == nil || errors.As(err, &inUse) {
		t.Errorf("Check(192.0.2.1:0) = %v, want a listen error that is not *InUseError", err)
	}
}
