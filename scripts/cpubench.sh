#!/bin/bash
# CPU time per op of Go benchmarks, A/B, for a machine too loaded for
# ns/op: wall time per op swings several-fold with the other processes,
# the CPU time the benchmark's process spends (perf's task-clock, every
# thread, GC included) far less. Each benchmark runs alone, N times, on
# one P (-test.cpu 1); its task-clock less the binary's start (a run with
# no benchmark), divided by N, is written as ns/op in Go's benchmark
# format. The two binaries alternate, count times; benchstat compares.
#
# Usage, from the package's directory (benchmarks read testdata):
#   go test -c -o /tmp/old.test .   # at the base tree
#   go test -c -o /tmp/new.test .   # at the changed tree
#   scripts/cpubench.sh /tmp/old.test /tmp/new.test 'BenchmarkSealRecord' 300000 6 /tmp/seal
# writes /tmp/seal.old.txt and /tmp/seal.new.txt and prints benchstat.
# Needs perf (task-clock is a software counter: no hardware counters).
set -eu
old=$1 new=$2 re=$3 n=$4 count=$5 out=$6

clock() { # task-clock in ms of one run of the test binary with args
	perf stat -x, -e task-clock "$@" 2>&1 >/dev/null | awk -F, '/task-clock/ {print $1}'
}

# one binary, every benchmark matching re, once
run() {
	local bin=$1 start names name pat t
	start=$(clock "$bin" -test.run '^$' -test.bench '^$' -test.cpu 1)
	names=$("$bin" -test.run '^$' -test.bench "$re" -test.benchtime 1x -test.cpu 1 | awk '/^Benchmark/ {print $1}')
	for name in $names; do
		pat="^$(echo "$name" | sed 's/-1$//; s#/#$/^#g')\$"
		t=$(clock "$bin" -test.run '^$' -test.bench "$pat" -test.benchtime "${n}x" -test.cpu 1)
		echo "$name $n $(echo "($t - $start) * 1000000 / $n" | bc -l | xargs printf '%.1f') ns/op"
	done
}

: >"$out.old.txt"
: >"$out.new.txt"
for _ in $(seq "$count"); do
	run "$old" >>"$out.old.txt"
	run "$new" >>"$out.new.txt"
done
go run golang.org/x/perf/cmd/benchstat@latest "$out.old.txt" "$out.new.txt"
