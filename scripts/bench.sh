#!/bin/sh
# Throughput benchmark of the executor (see BENCHMARKS.md): kfake in process,
# 12 partitions, 10,000 entities, an http action whose server takes 20 ms.
# Usage: scripts/bench.sh [N per run, default 2000] [count, default 3]
# Raw output goes to $BENCH_OUT (default /tmp/onceflight-bench-throughput.txt).
set -eu
cd "$(dirname "$0")/.."
n=${1:-2000}
count=${2:-3}
out=${BENCH_OUT:-/tmp/onceflight-bench-throughput.txt}
go test ./consumer -run '^$' -bench BenchmarkThroughput -benchtime "${n}x" -count "$count" -timeout 30m | tee "$out"
go run golang.org/x/perf/cmd/benchstat@latest "$out"
