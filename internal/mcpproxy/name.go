package mcpproxy

import (
	"net"
	"net/url"
	"path"
	"strings"
)

// launchers run the program their first argument names: a server launched
// through one is named after that argument.
var launchers = map[string]bool{
	"npx": true, "node": true, "bunx": true, "bun": true, "deno": true, "pnpm": true, "yarn": true,
	"uvx": true, "uv": true, "python": true, "python3": true, "pipx": true, "docker": true, "podman": true,
}

// generic are names of files and directories that say nothing of the
// server they hold.
var generic = map[string]bool{"index": true, "main": true, "server": true, "cli": true, "__main__": true,
	"dist": true, "build": true, "src": true, "lib": true, "bin": true, "out": true}

// NameOf derives a server's name from its command: the program's base name,
// or, for a launcher (npx, uvx, node, python, docker, …), its first argument
// that is not a flag or a subcommand such as "run"; a file of an installed
// package is named by the package, a generic file (dist/index.js) by its
// directory; scope, version, extension and the "server-"/"mcp-server-"
// affixes are left out: npx -y @modelcontextprotocol/server-filesystem /tmp
// and node node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
// are both "filesystem". The result is made a valid name ("mcp" when
// nothing is left).
func NameOf(command []string) string {
	if len(command) == 0 {
		return "mcp"
	}
	prog := path.Base(command[0])
	if launchers[prog] {
		for _, a := range command[1:] {
			if strings.HasPrefix(a, "-") || a == "run" || a == "exec" || a == "dlx" || a == "tool" {
				continue
			}
			prog = a
			break
		}
	}
	if _, pkg, ok := strings.Cut(prog, "node_modules/"); ok {
		// An installed package: its name, not the file's.
		if strings.HasPrefix(pkg, "@") {
			_, pkg, _ = strings.Cut(pkg, "/")
		}
		prog, _, _ = strings.Cut(pkg, "/")
	}
	if i := strings.LastIndex(prog, "@"); i > 0 && i > strings.LastIndex(prog, "/") {
		prog = prog[:i] // a version
	}
	// A generic file (dist/index.js) is named by its directory.
	parts := strings.Split(strings.Trim(prog, "/"), "/")
	for len(parts) > 1 && generic[strings.TrimSuffix(parts[len(parts)-1], path.Ext(parts[len(parts)-1]))] {
		parts = parts[:len(parts)-1]
	}
	prog = parts[len(parts)-1]
	prog = strings.TrimSuffix(prog, path.Ext(prog))
	for _, p := range []string{"mcp-server-", "server-", "mcp-"} {
		prog = strings.TrimPrefix(prog, p)
	}
	for _, s := range []string{"-mcp-server", "-server", "-mcp"} {
		prog = strings.TrimSuffix(prog, s)
	}
	return clean(prog)
}

// NameOfURL derives a server's name from its URL: the first label of its
// host name (weather for https://weather.example.com/mcp), or "mcp" for an
// address or localhost.
func NameOfURL(u *url.URL) string {
	host := u.Hostname()
	if host == "localhost" || net.ParseIP(host) != nil {
		return "mcp"
	}
	first, _, _ := strings.Cut(host, ".")
	return clean(first)
}

// clean makes s a valid name: other characters become -, and one that
// does not start with a letter or _ is prefixed "mcp-".
func clean(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	s = strings.Trim(string(b), "-")
	if s == "" {
		return "mcp"
	}
	if c := s[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
		s = "mcp-" + s
	}
	if len(s) > 64 {
		s = strings.TrimRight(s[:64], "-")
	}
	return s
}
