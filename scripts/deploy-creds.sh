#!/usr/bin/env bash
# Mint everything a Rath deployment on an external NATS cluster needs, into
# DIR (which must not hold identities yet):
#   DIR/<role>.nk       one nkey identity per role (rath creds mint; 0600)
#   DIR/nkeys.env       their public keys, read by deploy/nats-server.conf
#   DIR/keys/ledger.key the ledgers' shared ed25519 signing key (PKCS #8 PEM, 0600)
#   DIR/keys/ledger.pub its public key (PKIX PEM): give it to auditors
# and, with --kubernetes NAMESPACE, DIR/kubernetes-secrets.yaml: the Secrets
# deploy/kubernetes/ mounts (rath-creds, rath-nkeys, rath-ledger-key).
#
#   scripts/deploy-creds.sh ./rath-creds                     # docker-compose.yml's default
#   scripts/deploy-creds.sh --kubernetes rath ./rath-creds   # and the Secrets
#   scripts/deploy-creds.sh --owner 65532:65532 ./rath-creds # as root: the containers' uid
#
# --owner gives the files the containers read (the five services' .nk and
# keys/) to UID:GID: docker-compose.yml's containers run as 65532 and the files
# are 0600. admin.nk and client.nk stay the operator's.
#
# RATH names a rath binary to use (default: go run ./cmd/rath). The signing key
# is made here, not by the first ledger, so that two ledgers starting at once
# on separate hosts cannot each create a key of their own.
set -euo pipefail

usage() { echo "usage: scripts/deploy-creds.sh [--kubernetes NAMESPACE] [--owner UID:GID] DIR" >&2; exit 2; }
namespace="" owner=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kubernetes) [ $# -ge 2 ] || usage; namespace=$2; shift 2 ;;
    --owner) [ $# -ge 2 ] || usage; owner=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "deploy-creds: unknown flag $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
dir=$1
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
root="$(cd "$(dirname "$0")/.." && pwd)"

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "deploy-creds: $1 not found: $2" >&2; exit 1; }
}
need openssl "it makes the ledger's ed25519 key (apt-get install openssl)"
if [ -n "${RATH:-}" ]; then
  rath=("$RATH")
else
  need go "it runs ./cmd/rath (or set RATH to a rath binary)"
  rath=(go run ./cmd/rath)
fi
if [ -n "$namespace" ]; then
  need kubectl "--kubernetes writes the Secrets with kubectl create secret --dry-run=client"
fi
if [ -e "$dir/keys/ledger.key" ]; then
  echo "deploy-creds: $dir/keys/ledger.key exists already; to rotate it use scripts/rotate-ledger-key.sh" >&2
  exit 1
fi

# The identities (refuses a directory that holds some already).
(cd "$root" && "${rath[@]}" creds mint --out "$dir")

# The signing key, in the formats session-ledger --key and --trust read.
umask 077
mkdir -p "$dir/keys"
openssl genpkey -algorithm ed25519 -out "$dir/keys/ledger.key.tmp"
openssl pkey -in "$dir/keys/ledger.key.tmp" -pubout -out "$dir/keys/ledger.pub"
mv "$dir/keys/ledger.key.tmp" "$dir/keys/ledger.key"
chmod 0644 "$dir/keys/ledger.pub"

if [ -n "$namespace" ]; then
  out="$dir/kubernetes-secrets.yaml"
  {
    kubectl create secret generic rath-creds --namespace "$namespace" --dry-run=client -o yaml \
      --from-file="$dir/ledger.nk" --from-file="$dir/selector.nk" \
      --from-file="$dir/agent-worker.nk" --from-file="$dir/tool-runner.nk" \
      --from-file="$dir/memory-svc.nk" --from-file="$dir/approvers"
    echo "---"
    kubectl create secret generic rath-nkeys --namespace "$namespace" --dry-run=client -o yaml \
      --from-env-file="$dir/nkeys.env"
    echo "---"
    kubectl create secret generic rath-ledger-key --namespace "$namespace" --dry-run=client -o yaml \
      --from-file="$dir/keys/ledger.key" --from-file="$dir/keys/ledger.pub"
  } >"$out"
  chmod 0600 "$out"
fi

services=(ledger selector agent-worker tool-runner memory-svc)
chown_cmd="chown ${owner:-65532:65532} $(printf "$dir/%s.nk " "${services[@]}")&& chown -R ${owner:-65532:65532} $dir/keys"
if [ -n "$owner" ]; then
  for s in "${services[@]}"; do chown "$owner" "$dir/$s.nk"; done
  chown -R "$owner" "$dir/keys"
fi

cat <<MSG

Minted into $dir. Next:
  docker compose:  $( [ -n "$owner" ] && echo "docker compose up -d --build" || echo "sudo sh -c '$chown_cmd' && docker compose up -d --build" )
                   (RATH_CREDS_DIR=$dir when it is not ./rath-creds)
  kubernetes:      $( [ -n "$namespace" ] && echo "kubectl apply -f $dir/kubernetes-secrets.yaml && kubectl apply -k deploy/kubernetes" || echo "run again into a new directory with --kubernetes NAMESPACE, or create the Secrets by hand (docs/operations.md)" )
  clients:         rath --nats nats://HOST:4222 --creds $dir/client.nk ls
  operators:       $dir/admin.nk (nats --nkey; scripts/backup-streams.sh)
Keep $dir/keys/ledger.key with the backups; give auditors $dir/keys/ledger.pub.
MSG
