package service

import (
	"path/filepath"
)

// PassEnvDefault are the variables a sandboxed command sees from the
// runner's environment by default: what `go test` needs to build offline
// with the runner's caches. Nothing else of the runner's environment (API
// keys included) reaches a command.
var PassEnvDefault = []string{"GOCACHE", "GOPATH", "GOMODCACHE", "GOROOT"}

// SandboxEnv builds the KEY=VALUE list given to sandboxed commands from the
// names to pass through. Go's caches default to where the runner's own go
// would find them (the sandbox has a HOME of its own), the module proxy is
// off and the toolchain local: a tool call never downloads anything.
func SandboxEnv(names []string, getenv func(string) string) []string {
	set := map[string]string{}
	for _, n := range names {
		if v := getenv(n); n != "" && v != "" {
			set[n] = v
		}
	}
	if home := getenv("HOME"); home != "" {
		if set["GOCACHE"] == "" {
			set["GOCACHE"] = filepath.Join(home, ".cache", "go-build")
		}
		if set["GOPATH"] == "" {
			set["GOPATH"] = filepath.Join(home, "go")
		}
	}
	set["GOPROXY"] = "off"
	set["GOTOOLCHAIN"] = "local"
	set["GOFLAGS"] = "-mod=mod"
	out := make([]string, 0, len(set))
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}
