#!/usr/bin/env bash
# Prove that a kafkajs client can produce commands (structured and binary
# CloudEvents mode) and read their outcomes: starts `onceflight broker` and
# `onceflight serve` from the given binary on free ports, installs kafkajs
# 2.2.4 with npm into a temporary directory and runs
# scripts/kafkajs/produce-consume.js against the broker.
#
# Usage: scripts/kafkajs-check.sh [path/to/onceflight]   (default bin/onceflight)
# Needs node and npm. The executor's records are snappy-compressed (franz-go's
# default), so kafkajs-snappy is installed and registered too; KAFKAJS_SNAPPY=0
# runs without it (a plain kafkajs consumer then cannot read the outcomes). Exit 0 when both outcomes arrived with status succeeded.
set -euo pipefail

BIN=${1:-bin/onceflight}
[[ -x $BIN ]] || { echo "kafkajs-check: $BIN is not an executable (run 'make build')" >&2; exit 2; }
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
	command -v "$tool" >/dev/null || { echo "kafkajs-check: $tool not installed" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/onceflight-kafkajs.XXXXXX")
PIDS=()
cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [[ $rc -ne 0 ]]; then
		for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT

free_port() {
	node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# wait_for FILE REGEX SECONDS: wait until FILE has a line matching REGEX.
wait_for() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -Eq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "kafkajs-check: timed out waiting for /$2/ in $1" >&2
	return 1
}

ADDR=127.0.0.1:$(free_port)
"$BIN" broker --listen "$ADDR" --data-dir "$WORK/broker" >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/broker.log" 'broker listening on' 30

cat >"$WORK/onceflight.yaml" <<YAML
actions:
  noop.ping:
    connector: noop
    effects_file: $WORK/effects.log
    timeout: 500ms
YAML
"$BIN" serve --brokers "$ADDR" --config "$WORK/onceflight.yaml" --data-dir "$WORK/serve" \
	--http 127.0.0.1:0 --group kafkajs-check --partitions 3 --session-timeout 6s \
	--executor-id kafkajs-check >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/serve.log" 'executor starting.*http=' 60
HTTP=$(grep -Eo 'executor starting.*http=[^ ]+' "$WORK/serve.log" | sed 's/.*http=//')
for ((i = 0; ; i++)); do
	node -e 'require("http").get(process.argv[1],r=>process.exit(r.statusCode===200?0:1)).on("error",()=>process.exit(1))' \
		"http://$HTTP/readyz" && break
	((i < 600)) || { echo "kafkajs-check: executor not ready after 60s" >&2; exit 1; }
	sleep 0.1
done
echo "broker $ADDR, executor ready (http $HTTP)"

mkdir -p "$WORK/node"
cp "$HERE/kafkajs/produce-consume.js" "$WORK/node/"
(cd "$WORK/node" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error kafkajs@2.2.4 kafkajs-snappy@1.1.0 >"$WORK/npm.log" 2>&1) ||
	{ echo "kafkajs-check: npm install kafkajs@2.2.4 kafkajs-snappy@1.1.0 failed" >&2; cat "$WORK/npm.log" >&2; exit 1; }

KAFKAJS_NO_PARTITIONER_WARNING=1 node "$WORK/node/produce-consume.js" "$ADDR" noop.ping
echo "kafkajs-check: OK"
