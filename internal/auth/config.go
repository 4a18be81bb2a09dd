package auth

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Account is the NATS account of every Rath identity on an external server.
const Account = "RATH"

// EnvVar names the environment variable that carries a role's public user
// nkey into the deploy configuration (RATH_NKEY_AGENT_WORKER, ...).
func EnvVar(r Role) string {
	return "RATH_NKEY_" + strings.ToUpper(strings.ReplaceAll(string(r), "-", "_"))
}

// Env returns the public keys of the set as an environment file
// (VAR=value lines) for the deploy configuration. It holds no secret.
func (s *Set) Env() []byte {
	var b bytes.Buffer
	b.WriteString("# Public user nkeys of the Rath identities in this directory (no secrets).\n")
	b.WriteString("# nats-server reads them as variables of deploy/nats-server.conf.\n")
	for _, id := range s.Identities() {
		fmt.Fprintf(&b, "%s=%s\n", EnvVar(id.Role), id.PublicKey)
	}
	return b.Bytes()
}

// ServerConfig returns a nats-server configuration that enforces the
// permission table on an external server: one account with JetStream, one
// user per role whose nkey comes from the environment (EnvVar). The file in
// deploy/ is this text; a test keeps them equal.
func ServerConfig() []byte {
	var b bytes.Buffer
	b.WriteString(`# nats-server configuration for Rath on an external NATS server.
# GENERATED from the permission table in internal/auth: do not edit by hand;
# "go test ./internal/auth -update" rewrites it (docs/security.md).
#
# Mint the identities, load their public keys, run the server:
#   go run ./cmd/rath creds mint --out ./rath-creds
#   set -a; . ./rath-creds/nkeys.env; set +a
#   nats-server -c deploy/nats-server.conf
# and give each service its own file: session-ledger --creds ./rath-creds/ledger.nk, ...

port: 4222
server_name: rath-1
# Snapshots and state replies reach 8 MiB (docs/operations.md).
max_payload: 8MB
jetstream {
  store_dir: "./nats-data"
}

accounts {
  ` + Account + ` {
    jetstream: enabled
    users: [
`)
	for i, r := range Roles() {
		p := r.Permissions()
		fmt.Fprintf(&b, "      # %s\n", r)
		fmt.Fprintf(&b, "      {\n        nkey: $%s\n        permissions: {\n", EnvVar(r))
		writeSubjects(&b, "publish", p.Publish)
		writeSubjects(&b, "subscribe", p.Subscribe)
		if p.Respond {
			b.WriteString("          allow_responses: true\n")
		}
		b.WriteString("        }\n      }")
		if i < len(Roles())-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString(`    ]
  }
}

# A three-node cluster: the same file on each node with its own server_name,
# store_dir and the routes of the others; streams then take --replicas 3.
# cluster {
#   name: rath
#   listen: 0.0.0.0:6222
#   routes: [
#     nats-route://rath-1:6222
#     nats-route://rath-2:6222
#     nats-route://rath-3:6222
#   ]
# }
`)
	return b.Bytes()
}

// UserBlock is the user entry of an identity for the users list of a
// nats-server configuration such as deploy/nats-server.conf: its public key
// and permissions.
func UserBlock(id Identity) []byte {
	var b bytes.Buffer
	p := id.Permissions()
	fmt.Fprintf(&b, "      # %s (%s)\n", id.Principal, id.Role)
	fmt.Fprintf(&b, "      {\n        nkey: %s\n        permissions: {\n", id.PublicKey)
	writeSubjects(&b, "publish", p.Publish)
	writeSubjects(&b, "subscribe", p.Subscribe)
	if p.Respond {
		b.WriteString("          allow_responses: true\n")
	}
	b.WriteString("        }\n      }\n")
	return b.Bytes()
}

func writeSubjects(b *bytes.Buffer, name string, s Subjects) {
	fmt.Fprintf(b, "          %s: {\n", name)
	writeList(b, "allow", s.Allow)
	writeList(b, "deny", s.Deny)
	b.WriteString("          }\n")
}

func writeList(b *bytes.Buffer, name string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(b, "            %s: [\n", name)
	for _, s := range subjects {
		// Quoted: an unquoted $JS.API... would be read as a variable.
		fmt.Fprintf(b, "              %s\n", strconv.Quote(s))
	}
	b.WriteString("            ]\n")
}

// MarkdownTable returns the permission table as Markdown, one section per
// role, for docs/security.md (a test keeps the doc equal to it).
func MarkdownTable() []byte {
	var b bytes.Buffer
	list := func(name string, s []string) {
		if len(s) == 0 {
			return
		}
		q := make([]string, len(s))
		for i, v := range s {
			q[i] = "`" + v + "`"
		}
		fmt.Fprintf(&b, "- %s: %s\n", name, strings.Join(q, ", "))
	}
	for _, r := range Roles() {
		p := r.Permissions()
		fmt.Fprintf(&b, "\n#### %s (`%s`)\n\n", r, FileName(r))
		list("publish", p.Publish.Allow)
		list("publish denied", p.Publish.Deny)
		list("subscribe", p.Subscribe.Allow)
		list("subscribe denied", p.Subscribe.Deny)
		if p.Respond {
			b.WriteString("- replies to the requests it receives (allow_responses)\n")
		}
		if d := Durables(r); len(d) > 0 {
			fmt.Fprintf(&b, "- its durable consumers on %s: %s\n", events.StreamSessions, "`"+strings.Join(d, "`, `")+"`")
		}
	}
	b.WriteString("\n")
	return b.Bytes()
}
