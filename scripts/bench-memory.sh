#!/bin/sh
# Peak RSS of `onceflight serve` draining noop backlogs of several sizes
# (issue 24: memory must not grow with the backlog). One executor phase per
# size, each on a fresh broker and data dir; prints the phase's rows.
#
#   scripts/bench-memory.sh                      # 50 000, 200 000, 400 000
#   SIZES="50000 1000000" scripts/bench-memory.sh
#   SERVE_ARGS="--memory-limit 134217728 --max-buffered 4096" scripts/bench-memory.sh
set -eu
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"50000 200000 400000"}
SERVE_ARGS=${SERVE_ARGS:-}
go build -o bin/onceflight ./cmd/onceflight
go build -o bin/onceflight-bench ./cmd/onceflight-bench
for n in $SIZES; do
	./bin/onceflight-bench -bin bin/onceflight -phases executor -audit=false -n "$n" \
		${SERVE_ARGS:+-serve-args "$SERVE_ARGS"} | grep '^executor'
done
