#!/usr/bin/env bash
# Rotate the ledgers' signing key without a moment where one ledger refuses
# what another signed (docs/operations.md, "Signing keys"). Two steps, each
# followed by a restart of every ledger:
#
#   scripts/rotate-ledger-key.sh prepare KEYDIR
#       writes KEYDIR/ledger-next.key and .pub. Restart every ledger still
#       signing with the old key but trusting the next one:
#       --trust .../ledger-next.pub
#   scripts/rotate-ledger-key.sh commit KEYDIR
#       retires the old key (its .pub stays in KEYDIR as ledger-<time>.pub, the
#       private key moves to KEYDIR/../retired-keys/), makes the next key
#       ledger.key. Restart every ledger signing with the new key and trusting
#       every retired one: --trust .../ledger-<time>.pub[,...]
#
# KEYDIR is the directory session-ledger --key points into: ./rath-creds/keys
# for docker-compose.yml (mounted at /etc/rath/keys), the Secret
# rath-ledger-key for deploy/kubernetes/ (the script prints the commands).
# Old public keys stay trusted forever: events they signed keep verifying.
set -euo pipefail

usage() { echo "usage: scripts/rotate-ledger-key.sh prepare|commit KEYDIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
step=$1 keys=${2%/}
command -v openssl >/dev/null 2>&1 || {
  echo "rotate-ledger-key: openssl not found: it makes the ed25519 key (apt-get install openssl)" >&2
  exit 1
}
[ -r "$keys/ledger.key" ] || { echo "rotate-ledger-key: no $keys/ledger.key: not a ledger key directory" >&2; exit 1; }
umask 077

# trust lists the retired public keys as the ledgers see them (compose mounts
# KEYDIR at /etc/rath/keys, and so does the Kubernetes Secret).
trust() {
  local list="" f
  for f in "$keys"/ledger-*.pub; do
    [ -e "$f" ] || continue
    list="${list:+$list,}/etc/rath/keys/$(basename "$f")"
  done
  echo "$list"
}
secret_cmd() {
  local args=() f
  for f in "$keys"/ledger.key "$keys"/ledger*.pub; do args+=(--from-file="$f"); done
  echo "kubectl create secret generic rath-ledger-key -n NAMESPACE --dry-run=client -o yaml ${args[*]} | kubectl apply -f -"
}

case "$step" in
prepare)
  if [ -e "$keys/ledger-next.key" ]; then
    echo "rotate-ledger-key: $keys/ledger-next.key exists: a rotation is under way; run commit" >&2
    exit 1
  fi
  openssl genpkey -algorithm ed25519 -out "$keys/ledger-next.key.tmp"
  openssl pkey -in "$keys/ledger-next.key.tmp" -pubout -out "$keys/ledger-next.pub"
  mv "$keys/ledger-next.key.tmp" "$keys/ledger-next.key"
  chmod 0644 "$keys/ledger-next.pub"
  t=$(trust)
  cat <<MSG
Next key: $keys/ledger-next.pub. Restart every ledger trusting it (still signing with ledger.key):
  docker compose:  RATH_LEDGER_TRUST=$t docker compose up -d session-ledger-1 session-ledger-2
  kubernetes:      $(secret_cmd)
                   kubectl -n NAMESPACE set env deployment/session-ledger RATH_LEDGER_TRUST=$t
Then: scripts/rotate-ledger-key.sh commit $keys
MSG
  ;;
commit)
  [ -r "$keys/ledger-next.key" ] || { echo "rotate-ledger-key: no $keys/ledger-next.key: run prepare first" >&2; exit 1; }
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  retired="$(dirname "$keys")/retired-keys"
  mkdir -p "$retired"
  cp "$keys/ledger.pub" "$keys/ledger-$stamp.pub"
  chmod 0644 "$keys/ledger-$stamp.pub"
  mv "$keys/ledger.key" "$retired/ledger-$stamp.key"
  mv "$keys/ledger-next.key" "$keys/ledger.key"
  mv "$keys/ledger-next.pub" "$keys/ledger.pub"
  t=$(trust)
  cat <<MSG
ledger.key is the new key; the old one is $retired/ledger-$stamp.key (take it offline).
Restart every ledger with the new key, trusting the retired ones:
  docker compose:  RATH_LEDGER_TRUST=$t docker compose up -d session-ledger-1 session-ledger-2
  kubernetes:      $(secret_cmd)
                   kubectl -n NAMESPACE set env deployment/session-ledger RATH_LEDGER_TRUST=$t
Keep RATH_LEDGER_TRUST from now on. "rath verify --show-key" lists both keys; give auditors $keys/ledger.pub.
MSG
  ;;
*) usage ;;
esac
