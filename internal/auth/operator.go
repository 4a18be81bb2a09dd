package auth

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/openrath/rath/pkg/events"
)

// Placeholders of a client's tenant and user in the permission table, for
// templates a shell fills in; no subject of the table contains a brace.
const (
	tenantHole = "{tenant}"
	userHole   = "{user}"
)

// OperatorScript returns a shell script of nsc commands that create Rath's
// account and its users on a NATS deployment in operator mode, each user
// with its role's permissions from the table and the rath-principal tag
// Rath reads its identity from: the templates of deploy/nats-operator
// (a test keeps the committed file equal to it). A user minted with
// UserClaims gets the same permissions.
func OperatorScript() []byte {
	var b bytes.Buffer
	roles := make([]string, 0, len(Roles()))
	for _, r := range Roles() {
		if r != RoleClient {
			roles = append(roles, string(r))
		}
	}
	fmt.Fprintf(&b, `#!/bin/sh
# Rath's account and users on a NATS server in operator mode (decentralized
# auth), minted with nsc. GENERATED from the permission table in
# internal/auth: do not edit by hand; "go test ./internal/auth -update"
# rewrites it. See deploy/nats-operator/README.md.
#
# Usage, with your operator selected (nsc env -o <operator>):
#   rath-nsc.sh account                  Rath's account (%s), with JetStream
#   rath-nsc.sh service <role>           a user for a Rath service, or admin:
#                                        %s
#   rath-nsc.sh client <tenant> <user>   a tenant's user (a person or a program)
# then push the account and write each user's credentials file:
#   nsc push -a %s
#   nsc generate creds -a %s -n <name> -o <name>.creds
# The account is RATH_ACCOUNT if set.
set -eu
account=${RATH_ACCOUNT:-%s}

usage() {
	sed -n '7,15p' "$0" >&2
	exit 2
}

case "${1:-}" in
account)
	[ $# -eq 1 ] || usage
	nsc add account --name "$account"
	nsc edit account --name "$account" --js-mem-storage -1 --js-disk-storage -1 --js-streams -1 --js-consumer -1
	;;
service)
	[ $# -eq 2 ] || usage
	case "$2" in
`, Account, strings.Join(roles, ", "), Account, Account, Account)
	for _, r := range Roles() {
		if r == RoleClient {
			continue
		}
		fmt.Fprintf(&b, "\t%s)\n", r)
		writeUser(&b, "\t\t", shellQuote(string(r)), r.Permissions(), shellQuote(PrincipalTag+r.Principal().String()))
		b.WriteString("\t\t;;\n")
	}
	fmt.Fprintf(&b, `	*)
		echo "rath-nsc.sh: unknown role $2: want one of %s (a tenant's user: rath-nsc.sh client <tenant> <user>)" >&2
		exit 2
		;;
	esac
	;;
client)
	[ $# -eq 3 ] || usage
	tenant=$2
	user=$3
	for name in "$tenant" "$user"; do
		case "$name" in
		'' | [!a-z0-9]* | *[!a-z0-9_-]*)
			echo "rath-nsc.sh: invalid name '$name': want a-z 0-9 _ -, starting with a letter or digit" >&2
			exit 2
			;;
		esac
	done
	if [ "$tenant" = %s ]; then
		echo "rath-nsc.sh: the tenant %s is Rath's own: use rath-nsc.sh service <role>" >&2
		exit 2
	fi
`, strings.Join(roles, ", "), events.ServiceTenant, events.ServiceTenant)
	hole := events.Principal{Tenant: tenantHole, User: userHole}
	writeUser(&b, "\t", `"$tenant-$user"`, ClientPermissions(hole), shellQuote(PrincipalTag+hole.String()))
	b.WriteString(`	;;
*)
	usage
	;;
esac
`)
	return b.Bytes()
}

// writeUser writes the nsc commands that add a user named name (a shell
// word) with permissions p and the principal tag.
func writeUser(b *bytes.Buffer, indent, name string, p Permissions, tag string) {
	fmt.Fprintf(b, "%snsc add user --account \"$account\" --name %s", indent, name)
	flags := func(flag string, subjects []string) {
		for _, s := range subjects {
			fmt.Fprintf(b, " \\\n%s\t%s %s", indent, flag, shellQuote(s))
		}
	}
	flags("--allow-pub", p.Publish.Allow)
	flags("--deny-pub", p.Publish.Deny)
	flags("--allow-sub", p.Subscribe.Allow)
	flags("--deny-sub", p.Subscribe.Deny)
	if p.Respond {
		fmt.Fprintf(b, " \\\n%s\t--allow-pub-response 1", indent)
	}
	fmt.Fprintf(b, "\n%snsc edit user --account \"$account\" --name %s --tag %s\n", indent, name, tag)
}

// shellQuote quotes s for sh, single-quoted (a $ in a subject stays
// literal), with a client's tenant and user placeholders left open for the
// shell to fill in from $tenant and $user.
func shellQuote(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	q = strings.ReplaceAll(q, tenantHole, `'"$tenant"'`)
	q = strings.ReplaceAll(q, userHole, `'"$user"'`)
	return strings.TrimSuffix(strings.TrimPrefix(q, "''"), "''")
}
