package main

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/openrath/rath/internal/auth"
	"github.com/openrath/rath/internal/bind"
)

// defaultData is rath up's data directory unless --data says otherwise,
// relative to the directory it runs in.
var defaultData = filepath.Join(".rath", "data")

// defaultCredsDir is where rath up writes its credentials files unless
// --data or --creds-dir says otherwise.
var defaultCredsDir = filepath.Join(defaultData, "creds")

// findCreds returns the credentials file of role in the nearest data
// directory of rath up: ./.rath/data/creds, else the first that a parent of
// the working directory holds, as git finds .git; "" when none does. A
// command run in a subdirectory of rath up's then connects as rath up's
// identities without being told.
func findCreds(role auth.Role) string {
	rel := filepath.Join(defaultCredsDir, auth.FileName(role))
	if _, err := os.Stat(rel); err == nil {
		return rel
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := filepath.Dir(wd); ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if dir == filepath.Dir(dir) {
			return ""
		}
	}
}

// findCredsDir is the credentials directory of the nearest data directory
// of rath up (findCreds), or "" when there is none.
func findCredsDir() string {
	if f := findCreds(auth.RoleClient); f != "" {
		return filepath.Dir(f)
	}
	return ""
}

// runningUp describes the rath up that listens at the NATS URL u on this
// host, as this user may see it in /proc: its process, and its
// credentials directory (from its working directory and its --data or
// --creds-dir), "" when it cannot tell: another host, another user's
// process, or not a rath up.
func runningUp(u string) (bind.Process, string) {
	pu, err := url.Parse(u)
	if err != nil || pu.Port() == "" {
		return bind.Process{}, ""
	}
	if ip := net.ParseIP(pu.Hostname()); pu.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return bind.Process{}, ""
	}
	port, err := strconv.Atoi(pu.Port())
	if err != nil {
		return bind.Process{}, ""
	}
	p, ok := bind.Find(port)
	if !ok || p.PID == 0 {
		return bind.Process{}, ""
	}
	return p, upCredsDir(p)
}

// upCredsDir is the credentials directory of the rath up process p, read
// from its command line and working directory; "" when p is not a rath up
// or the directory is not there.
func upCredsDir(p bind.Process) string {
	if p.Dir == "" || !runsUp(p.Args) {
		return ""
	}
	data, creds := defaultData, ""
	for i := 0; i < len(p.Args); i++ {
		for _, f := range []struct {
			name string
			to   *string
		}{{"--data", &data}, {"--creds-dir", &creds}} {
			if v, ok := strings.CutPrefix(p.Args[i], f.name+"="); ok {
				*f.to = v
			} else if p.Args[i] == f.name && i+1 < len(p.Args) {
				*f.to = p.Args[i+1]
			}
		}
	}
	if creds == "" {
		creds = filepath.Join(data, "creds")
	}
	if !filepath.IsAbs(creds) {
		creds = filepath.Join(p.Dir, creds)
	}
	if _, err := os.Stat(filepath.Join(creds, auth.FileName(auth.RoleClient))); err != nil {
		return ""
	}
	return creds
}

// runsUp reports whether a command line runs "rath up": the word up
// after the program and its global flags.
func runsUp(args []string) bool {
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "up":
			return true
		case a == "--nats" || a == "--creds" || a == "--timeout":
			i++ // its value
		case !strings.HasPrefix(a, "-"):
			return false // another command
		}
	}
	return false
}
