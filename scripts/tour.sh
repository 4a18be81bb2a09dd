#!/usr/bin/env bash
# Runs the README's five-minute tour as written, read from README.md, command
# by command, in the repository root: a command whose comment says
# "refused" must exit 4, every other 0; its rm line removes what it wrote.
# It needs a fresh `rath up` running in the repository root (the tour's
# session IDs, demo and demo-b, are fixed; `rm -rf .rath` before starting it
# again), or RATH_NATS_URL and RATH_CREDS naming another. The rath it runs is
# built from this checkout into a temporary directory put first on PATH.
# TestREADMECommands (cmd/rath) runs the same commands, and those of "Agents
# at work", in the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d) || exit 1
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/rath" ./cmd/rath || exit 1
PATH="$bin:$PATH"

# The tour's shell blocks, continuation lines joined.
commands=$(awk '/^## A five-minute tour/{t=1; next} /^### /{t=0} t' README.md |
  awk '/^```sh/{b=1; next} /^```/{b=0} b' |
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta')

failed=0
while IFS= read -r line <&3; do
  [[ $line == "rath "* || $line == "rm "* ]] || continue
  want=0
  [[ $line == *"# refused"* ]] && want=4
  echo "\$ $line"
  eval "$line" </dev/null
  rc=$?
  if [[ $rc != "$want" ]]; then
    echo "tour.sh: exit $rc, want $want" >&2
    failed=1
  fi
done 3<<<"$commands"

# The tour's `rath watch demo &`.
jobs -p | xargs -r kill 2>/dev/null
exit $failed
