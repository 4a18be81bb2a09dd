#!/usr/bin/env bash
# Mint the identities of a Rath deployment on an external NATS server into DIR:
# one nkey per role (<role>.nk) and nkeys.env, which deploy/nats-server.conf
# reads. The ledger's signing key is created by the ledger itself at its first
# start (session-ledger --key FILE). See docs/security.md.
#
#   scripts/mint-identities.sh ./rath-identities
set -euo pipefail
dir=${1:?usage: scripts/mint-identities.sh DIR}
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
cd "$(dirname "$0")/.."
go run ./cmd/rath creds mint --out "$dir"
cat <<MSG

Next:
  set -a; . "$dir/nkeys.env"; set +a
  nats-server -c deploy/nats-server.conf
  session-ledger --nats nats://HOST:4222 --creds "$dir/ledger.nk" --key ./keys/ledger.key
  selector       --nats nats://HOST:4222 --creds "$dir/selector.nk"    (and so on for each role)
  rath --nats nats://HOST:4222 --creds "$dir/client.nk" ls
Give auditors keys/ledger.pub (written beside the key at the ledger's first start).
MSG
