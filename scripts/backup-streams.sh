#!/usr/bin/env bash
# Back up every JetStream stream of a Rath deployment (the RATH account:
# RATH_SESSIONS, RATH_SIGS, RATH_INBOX, RATH_REJECTS, RATH_DEAD, RATH_MEMORY, RATH_TIMERS
# and the streams under the KV buckets and the object store) into DIR, one
# "nats stream backup" directory per stream (backup.json + stream.tar.s2, with
# the durable consumers' state), and DIR/streams.txt, the order to restore in.
#
#   NATS_URL=nats://localhost:4222 RATH_ADMIN_CREDS=./rath-creds/admin.nk \
#     scripts/backup-streams.sh ./backups/$(date -u +%Y%m%dT%H%M%SZ)
#
# Needs the nats CLI (github.com/nats-io/natscli) and the admin identity: no
# other role may snapshot streams. Each stream's snapshot is consistent in
# itself, not across streams; the order below makes an online backup
# coherent for verification (a head recorded in rath-heads is never ahead of
# the backed-up log, and every signature record a backed-up event names is in
# the later RATH_SIGS backup). For one point in time, stop the ledgers and the
# memory service first. Not in JetStream, so not here: the ledger's signing key
# (keys/ledger.key) and the tool runner's workspaces; back them up too.
set -euo pipefail

dir=${1:?usage: scripts/backup-streams.sh DIR}
url=${NATS_URL:-nats://127.0.0.1:4222}
creds=${RATH_ADMIN_CREDS:-./rath-creds/admin.nk}

command -v nats >/dev/null 2>&1 || {
  echo "backup-streams: the nats CLI is not installed: get it from https://github.com/nats-io/natscli/releases (or: go install github.com/nats-io/natscli/nats@latest)" >&2
  exit 1
}
[ -r "$creds" ] || {
  echo "backup-streams: cannot read the admin credentials $creds: set RATH_ADMIN_CREDS (scripts/deploy-creds.sh mints admin.nk)" >&2
  exit 1
}
if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
  echo "backup-streams: $dir is not empty; back up into a new directory" >&2
  exit 1
fi
mkdir -p "$dir"

n() { nats --server "$url" --nkey "$creds" "$@"; }

# Heads and the session index first, the log, then what the log names.
first=(KV_rath-heads KV_rath-sessions KV_rath-snapshots RATH_SESSIONS RATH_SIGS OBJ_rath-blobs)
mapfile -t all < <(n stream ls --names | sed '/^$/d' | sort)
if [ ${#all[@]} -eq 0 ]; then
  echo "backup-streams: no streams at $url for this identity" >&2
  exit 1
fi
order=()
for s in "${first[@]}"; do
  for a in "${all[@]}"; do [ "$a" = "$s" ] && order+=("$s"); done
done
for a in "${all[@]}"; do
  case " ${first[*]} " in *" $a "*) ;; *) order+=("$a") ;; esac
done

for s in "${order[@]}"; do
  echo "backup-streams: $s"
  n stream backup "$s" "$dir/$s" --check --no-progress
done
printf '%s\n' "${order[@]}" >"$dir/streams.txt"
echo "backup-streams: ${#order[@]} streams from $url in $dir (restore: scripts/restore-streams.sh $dir)"
