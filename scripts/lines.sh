#!/usr/bin/env bash
# Count the non-test Go lines of the repository (ADR 0038's O4): every
# tracked *.go file but *_test.go, outside bench/ and e2e/ (and any vendor/
# or testdata/ directory), counted as wc -l counts them.
#
#   scripts/lines.sh            # the total
#   scripts/lines.sh --by-dir   # per top-level directory, then the total
set -euo pipefail

by_dir=false
case "${1:-}" in
"") ;;
--by-dir) by_dir=true ;;
*)
	echo "usage: $0 [--by-dir]" >&2
	exit 2
	;;
esac

cd "$(dirname "$0")/.."
files() {
	git ls-files -z -- '*.go' |
		tr '\0' '\n' |
		grep -v -E '_test\.go$|^(bench|e2e)/|(^|/)(vendor|testdata)/'
}

if $by_dir; then
	files | while IFS= read -r f; do
		dir=${f%%/*}
		[ "$dir" = "$f" ] && dir=.
		printf '%s %s\n' "$dir" "$(wc -l <"$f")"
	done | awk '{n[$1] += $2; t += $2} END {for (d in n) printf "%8d %s\n", n[d], d; printf "%8d total\n", t}' | sort -k2,2 | awk '$2 != "total"; $2 == "total" {last = $0} END {print last}'
else
	files | tr '\n' '\0' | xargs -0 cat | wc -l | tr -d ' '
fi
