#!/usr/bin/env bash
# The README's five-minute tour as a script. Needs a running `rath up`
# (or RATH_NATS_URL pointing at a NATS server with a session ledger).
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o ./bin/rath ./cmd/rath
rath=./bin/rath
id="tour-$(date +%s)"

$rath start --id "$id" --task "fix the failing test"
$rath emit "$id" rath.conversation.chunk.appended --data '{"role":"user","content":"TestParse fails on empty input"}'
$rath emit "$id" rath.model.called --data '{"agent":"coder","provider":"scripted","model":"m1","tokens_in":812,"tokens_out":64,"latency_ms":20}'
$rath log "$id"
$rath state "$id"
$rath fork "$id" --at 2 --id "$id-b" --reason "try another strategy"
$rath emit "$id-b" rath.conversation.chunk.appended --data '{"role":"assistant","content":"plan B"}'
$rath merge "$id" "$id-b"
$rath graph "$id"
$rath verify "$id"
$rath verify "$id-b"
if $rath emit "$id" rath.conversation.chunk.appended --data '{"role":"robot"}'; then
  echo "expected a refusal" >&2; exit 1
fi
$rath rejects "$id"
