#!/usr/bin/env bash
# Restore the streams that scripts/backup-streams.sh saved in DIR, in the order
# of DIR/streams.txt, each with its durable consumers, onto a NATS server or
# cluster whose RATH account holds none of them (a stream that exists is
# refused by the server: remove it first, deliberately, with nats stream rm).
#
#   docker compose stop selector agent-worker tool-runner memory-svc session-ledger-1 session-ledger-2
#   NATS_URL=nats://localhost:4222 RATH_ADMIN_CREDS=./rath-creds/admin.nk \
#     scripts/restore-streams.sh ./backups/20261127T120000Z
#   docker compose start session-ledger-1 session-ledger-2 memory-svc selector agent-worker tool-runner
#
# REPLICAS (optional) overrides the replicas the backup recorded, e.g. 3 when
# restoring an R1 backup onto the cluster. Start the ledgers with the signing
# key (or --trust the public key) that signed the restored sessions, or they
# are reported damaged; then run "rath verify" on a few sessions.
set -euo pipefail

dir=${1:?usage: scripts/restore-streams.sh DIR}
url=${NATS_URL:-nats://127.0.0.1:4222}
creds=${RATH_ADMIN_CREDS:-./rath-creds/admin.nk}

command -v nats >/dev/null 2>&1 || {
  echo "restore-streams: the nats CLI is not installed: get it from https://github.com/nats-io/natscli/releases (or: go install github.com/nats-io/natscli/nats@latest)" >&2
  exit 1
}
[ -r "$creds" ] || {
  echo "restore-streams: cannot read the admin credentials $creds: set RATH_ADMIN_CREDS" >&2
  exit 1
}
[ -r "$dir/streams.txt" ] || {
  echo "restore-streams: $dir/streams.txt missing: not a directory written by scripts/backup-streams.sh" >&2
  exit 1
}

n() { nats --server "$url" --nkey "$creds" "$@"; }
extra=()
if [ -n "${REPLICAS:-}" ]; then extra+=(--replicas "$REPLICAS"); fi

while IFS= read -r s; do
  [ -n "$s" ] || continue
  [ -r "$dir/$s/backup.json" ] || { echo "restore-streams: $dir/$s/backup.json missing" >&2; exit 1; }
  echo "restore-streams: $s"
  n stream restore "$dir/$s" --no-progress "${extra[@]}"
done <"$dir/streams.txt"
echo "restore-streams: done; start the ledgers first, then the other services"
