#!/bin/sh
# Rath's account and users on a NATS server in operator mode (decentralized
# auth), minted with nsc. GENERATED from the permission table in
# internal/auth: do not edit by hand; "go test ./internal/auth -update"
# rewrites it. See deploy/nats-operator/README.md.
#
# Usage, with your operator selected (nsc env -o <operator>):
#   rath-nsc.sh account                  Rath's account (RATH), with JetStream
#   rath-nsc.sh service <role>           a user for a Rath service, or admin:
#                                        ledger, selector, agent-worker, tool-runner, memory-svc, admin
#   rath-nsc.sh client <tenant> <user>   a tenant's user (a person or a program)
# then push the account and write each user's credentials file:
#   nsc push -a RATH
#   nsc generate creds -a RATH -n <name> -o <name>.creds
# The account is RATH_ACCOUNT if set.
set -eu
account=${RATH_ACCOUNT:-RATH}

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
	ledger)
		nsc add user --account "$account" --name 'ledger' \
			--allow-pub 'rath.log.>' \
			--allow-pub 'rath.session.>' \
			--allow-pub 'rath.rejects.>' \
			--allow-pub 'rath.sig.>' \
			--allow-pub '$SYS.REQ.USER.INFO' \
			--allow-pub '$JS.API.>' \
			--allow-pub '$JS.ACK.>' \
			--allow-pub '$JS.FC.>' \
			--allow-pub '$KV.>' \
			--allow-pub '$O.>' \
			--deny-pub '$JS.API.STREAM.DELETE.>' \
			--allow-sub 'rath.ledger.>' \
			--allow-sub '_INBOX.>' \
			--allow-pub-response 1
		nsc edit user --account "$account" --name 'ledger' --tag 'rath-principal:rath/ledger'
		;;
	selector)
		nsc add user --account "$account" --name 'selector' \
			--allow-pub 'rath.ledger.rath.selector.>' \
			--allow-pub 'rath.memory.rath.selector.>' \
			--allow-pub 'rath.inbox.rath.selector.>' \
			--allow-pub '$SYS.REQ.USER.INFO' \
			--allow-pub '$JS.API.INFO' \
			--allow-pub '$JS.API.STREAM.NAMES' \
			--allow-pub '$JS.API.STREAM.LIST' \
			--allow-pub '$JS.FC.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SESSIONS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.*' \
			--allow-pub '$JS.ACK.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SIGS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SIGS.*' \
			--allow-pub '$JS.ACK.RATH_SIGS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_REJECTS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_REJECTS.*' \
			--allow-pub '$JS.ACK.RATH_REJECTS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_DEAD' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_DEAD.*' \
			--allow-pub '$JS.ACK.RATH_DEAD.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_MEMORY' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_MEMORY.*' \
			--allow-pub '$JS.ACK.RATH_MEMORY.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-snapshots' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-snapshots.*' \
			--allow-pub '$JS.ACK.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-sessions' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-sessions.*' \
			--allow-pub '$JS.ACK.KV_rath-sessions.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-tools' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-tools.*' \
			--allow-pub '$JS.ACK.KV_rath-tools.>' \
			--allow-pub '$JS.API.STREAM.INFO.OBJ_rath-blobs' \
			--allow-pub '$JS.API.STREAM.MSG.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.LIST.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.OBJ_rath-blobs.*' \
			--allow-pub '$JS.ACK.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_INBOX' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX.>' \
			--allow-pub 'rath.dead.>' \
			--allow-pub 'rath.timer.at.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_TIMERS' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_TIMERS.timers' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_TIMERS.timers' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_TIMERS.timers.>' \
			--allow-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_TIMERS.timers' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_TIMERS.timers' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_TIMERS.timers' \
			--allow-pub '$JS.ACK.RATH_TIMERS.timers.>' \
			--allow-pub 'rath.route.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-runner.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.tool-runner.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.mcp-servers.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.mcp-servers.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-remember.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.tool-remember.>' \
			--allow-sub '_INBOX.>'
		nsc edit user --account "$account" --name 'selector' --tag 'rath-principal:rath/selector'
		;;
	agent-worker)
		nsc add user --account "$account" --name 'agent-worker' \
			--allow-pub 'rath.ledger.rath.agent-worker.>' \
			--allow-pub 'rath.memory.rath.agent-worker.>' \
			--allow-pub 'rath.inbox.rath.agent-worker.>' \
			--allow-pub '$SYS.REQ.USER.INFO' \
			--allow-pub '$JS.API.INFO' \
			--allow-pub '$JS.API.STREAM.NAMES' \
			--allow-pub '$JS.API.STREAM.LIST' \
			--allow-pub '$JS.FC.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SESSIONS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.*' \
			--allow-pub '$JS.ACK.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SIGS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SIGS.*' \
			--allow-pub '$JS.ACK.RATH_SIGS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_REJECTS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_REJECTS.*' \
			--allow-pub '$JS.ACK.RATH_REJECTS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_DEAD' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_DEAD.*' \
			--allow-pub '$JS.ACK.RATH_DEAD.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_MEMORY' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_MEMORY.*' \
			--allow-pub '$JS.ACK.RATH_MEMORY.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-snapshots' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-snapshots.*' \
			--allow-pub '$JS.ACK.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-sessions' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-sessions.*' \
			--allow-pub '$JS.ACK.KV_rath-sessions.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-tools' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-tools.*' \
			--allow-pub '$JS.ACK.KV_rath-tools.>' \
			--allow-pub '$JS.API.STREAM.INFO.OBJ_rath-blobs' \
			--allow-pub '$JS.API.STREAM.MSG.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.LIST.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.OBJ_rath-blobs.*' \
			--allow-pub '$JS.ACK.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_INBOX' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX.>' \
			--allow-pub 'rath.dead.>' \
			--allow-pub '$O.rath-blobs.>' \
			--allow-pub 'rath.delta.>' \
			--allow-pub 'rath.agent.rath.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.selector.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.selector' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.selector.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-runner.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.tool-runner.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.mcp-servers.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.mcp-servers.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-remember.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.tool-remember.>' \
			--allow-sub '_INBOX.>' \
			--allow-sub 'rath.route.>' \
			--allow-sub 'rath.agent.>' \
			--allow-pub-response 1
		nsc edit user --account "$account" --name 'agent-worker' --tag 'rath-principal:rath/agent-worker'
		;;
	tool-runner)
		nsc add user --account "$account" --name 'tool-runner' \
			--allow-pub 'rath.ledger.rath.tool-runner.>' \
			--allow-pub 'rath.memory.rath.tool-runner.>' \
			--allow-pub 'rath.inbox.rath.tool-runner.>' \
			--allow-pub '$SYS.REQ.USER.INFO' \
			--allow-pub '$JS.API.INFO' \
			--allow-pub '$JS.API.STREAM.NAMES' \
			--allow-pub '$JS.API.STREAM.LIST' \
			--allow-pub '$JS.FC.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SESSIONS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.*' \
			--allow-pub '$JS.ACK.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SIGS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SIGS.*' \
			--allow-pub '$JS.ACK.RATH_SIGS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_REJECTS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_REJECTS.*' \
			--allow-pub '$JS.ACK.RATH_REJECTS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_DEAD' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_DEAD.*' \
			--allow-pub '$JS.ACK.RATH_DEAD.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_MEMORY' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_MEMORY.*' \
			--allow-pub '$JS.ACK.RATH_MEMORY.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-snapshots' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-snapshots.*' \
			--allow-pub '$JS.ACK.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-sessions' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-sessions.*' \
			--allow-pub '$JS.ACK.KV_rath-sessions.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-tools' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-tools.*' \
			--allow-pub '$JS.ACK.KV_rath-tools.>' \
			--allow-pub '$JS.API.STREAM.INFO.OBJ_rath-blobs' \
			--allow-pub '$JS.API.STREAM.MSG.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.LIST.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.OBJ_rath-blobs.*' \
			--allow-pub '$JS.ACK.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_INBOX' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX.>' \
			--allow-pub 'rath.dead.>' \
			--allow-pub '$KV.rath-tools.>' \
			--allow-pub '$O.rath-blobs.>' \
			--allow-pub 'rath.toolrunner.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.selector.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.selector' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.selector.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-remember.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.tool-remember' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.tool-remember.>' \
			--allow-sub '_INBOX.>' \
			--allow-sub 'rath.toolrunner.>' \
			--allow-pub-response 1
		nsc edit user --account "$account" --name 'tool-runner' --tag 'rath-principal:rath/tool-runner'
		;;
	memory-svc)
		nsc add user --account "$account" --name 'memory-svc' \
			--allow-pub 'rath.ledger.rath.memory-svc.>' \
			--allow-pub 'rath.memory.rath.memory-svc.>' \
			--allow-pub 'rath.inbox.rath.memory-svc.>' \
			--allow-pub '$SYS.REQ.USER.INFO' \
			--allow-pub '$JS.API.INFO' \
			--allow-pub '$JS.API.STREAM.NAMES' \
			--allow-pub '$JS.API.STREAM.LIST' \
			--allow-pub '$JS.FC.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SESSIONS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SESSIONS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.*' \
			--allow-pub '$JS.ACK.RATH_SESSIONS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_SIGS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_SIGS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_SIGS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SIGS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_SIGS.*' \
			--allow-pub '$JS.ACK.RATH_SIGS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_REJECTS' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_REJECTS.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_REJECTS' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_REJECTS.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_REJECTS.*' \
			--allow-pub '$JS.ACK.RATH_REJECTS.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_DEAD' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_DEAD.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_DEAD' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_DEAD.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_DEAD.*' \
			--allow-pub '$JS.ACK.RATH_DEAD.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_MEMORY' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.CREATE.RATH_MEMORY.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.LIST.RATH_MEMORY' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_MEMORY.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.RATH_MEMORY.*' \
			--allow-pub '$JS.ACK.RATH_MEMORY.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-snapshots' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-snapshots' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-snapshots.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-snapshots.*' \
			--allow-pub '$JS.ACK.KV_rath-snapshots.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-sessions' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-sessions.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-sessions' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-sessions.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-sessions.*' \
			--allow-pub '$JS.ACK.KV_rath-sessions.>' \
			--allow-pub '$JS.API.STREAM.INFO.KV_rath-tools' \
			--allow-pub '$JS.API.STREAM.MSG.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools' \
			--allow-pub '$JS.API.DIRECT.GET.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.CREATE.KV_rath-tools.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.LIST.KV_rath-tools' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_rath-tools.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.KV_rath-tools.*' \
			--allow-pub '$JS.ACK.KV_rath-tools.>' \
			--allow-pub '$JS.API.STREAM.INFO.OBJ_rath-blobs' \
			--allow-pub '$JS.API.STREAM.MSG.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs' \
			--allow-pub '$JS.API.DIRECT.GET.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.CONSUMER.INFO.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.NAMES.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.LIST.OBJ_rath-blobs' \
			--allow-pub '$JS.API.CONSUMER.MSG.NEXT.OBJ_rath-blobs.*' \
			--allow-pub '$JS.API.CONSUMER.DELETE.OBJ_rath-blobs.*' \
			--allow-pub '$JS.ACK.OBJ_rath-blobs.>' \
			--allow-pub '$JS.API.STREAM.INFO.RATH_INBOX' \
			--allow-pub '$JS.API.STREAM.MSG.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX' \
			--allow-pub '$JS.API.DIRECT.GET.RATH_INBOX.>' \
			--allow-pub 'rath.dead.>' \
			--allow-pub 'rath.mem.item.>' \
			--allow-pub '$KV.rath-tools.>' \
			--allow-pub '$O.rath-blobs.>' \
			--allow-pub '$JS.API.STREAM.CREATE.RATH_MEMORY' \
			--allow-pub '$JS.API.STREAM.UPDATE.RATH_MEMORY' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.selector.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.selector' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.selector' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.selector.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.agent-worker' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.agent-worker.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.tool-runner.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.tool-runner' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.tool-runner.>' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.CREATE.RATH_SESSIONS.mcp-servers.>' \
			--deny-pub '$JS.API.CONSUMER.DURABLE.CREATE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.DELETE.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.API.CONSUMER.MSG.NEXT.RATH_SESSIONS.mcp-servers' \
			--deny-pub '$JS.ACK.RATH_SESSIONS.mcp-servers.>' \
			--allow-sub '_INBOX.>' \
			--allow-sub 'rath.memory.>' \
			--allow-pub-response 1
		nsc edit user --account "$account" --name 'memory-svc' --tag 'rath-principal:rath/memory-svc'
		;;
	admin)
		nsc add user --account "$account" --name 'admin' \
			--allow-pub '>' \
			--allow-sub '>'
		nsc edit user --account "$account" --name 'admin' --tag 'rath-principal:rath/admin'
		;;
	*)
		echo "rath-nsc.sh: unknown role $2: want one of ledger, selector, agent-worker, tool-runner, memory-svc, admin (a tenant's user: rath-nsc.sh client <tenant> <user>)" >&2
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
	if [ "$tenant" = rath ]; then
		echo "rath-nsc.sh: the tenant rath is Rath's own: use rath-nsc.sh service <role>" >&2
		exit 2
	fi
	nsc add user --account "$account" --name "$tenant-$user" \
		--allow-pub 'rath.ledger.'"$tenant"'.'"$user"'.>' \
		--allow-pub 'rath.memory.'"$tenant"'.'"$user"'.>' \
		--allow-pub 'rath.inbox.'"$tenant"'.'"$user"'.>' \
		--allow-pub '$SYS.REQ.USER.INFO' \
		--allow-pub 'rath.delta.'"$tenant"'.>' \
		--allow-sub '_INBOX.'"$tenant"'.'"$user"'.>' \
		--allow-sub 'rath.session.'"$tenant"'.>' \
		--allow-sub 'rath.delta.'"$tenant"'.>'
	nsc edit user --account "$account" --name "$tenant-$user" --tag 'rath-principal:'"$tenant"'/'"$user"
	;;
*)
	usage
	;;
esac
