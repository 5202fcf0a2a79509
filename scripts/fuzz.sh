#!/usr/bin/env bash
# Runs every fuzz target of the module, one after the other, for $1 each
# (a duration such as 2m, or a count such as 1000000x). Targets are found
# in the sources, so a target added anywhere is fuzzed without a Makefile
# change (the hand-kept list had fallen 14 targets behind).
#
# Go 1.26's fuzz coordinator can fail a run at its -fuzztime deadline with
# "context deadline exceeded" and no failing input (golang/go#75804, fixed
# in go1.27). Such a run is reported as a warning, not a failure; a run
# that wrote a failing input, or failed any other way, fails the script.
set -u
cd "$(dirname "$0")/.."
time=${1:-2m}
go=${GO:-go}
only=${2:-.}
failed=()
warned=()
n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	[[ "$pkg $name" =~ $only ]] || continue
	n=$((n + 1))
	echo "== $pkg $name ($time)"
	log=$(mktemp)
	if "$go" test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$time" 2>&1 | tee "$log"; [[ ${PIPESTATUS[0]} -eq 0 ]]; then
		:
	elif ! grep -q 'Failing input written to' "$log" && grep -q 'context deadline exceeded' "$log"; then
		warned+=("$pkg $name")
	else
		failed+=("$pkg $name")
	fi
	rm -f "$log"
done < <(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]+\(' . | sed -E 's#^\./##; s#:func (Fuzz[A-Za-z0-9_]+)\($#:\1#' | sort)
echo "fuzz: $n targets, ${#failed[@]} failed, ${#warned[@]} ended on go1.26's deadline report (golang/go#75804)"
for t in "${warned[@]}"; do echo "  deadline report: $t"; done
for t in "${failed[@]}"; do echo "  FAILED: $t"; done
[[ $n -gt 0 && ${#failed[@]} -eq 0 ]]
