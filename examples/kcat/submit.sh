#!/usr/bin/env bash
# Submit one command with kcat and wait for its outcome: the protocol of
# package client, by hand.
#
# Usage: examples/kcat/submit.sh ACTION ENTITY KEY [DATA_JSON]
# Environment: BROKERS (default 127.0.0.1:9092), TIMEOUT seconds (default 30),
# KCAT_OPTS for connection properties, e.g. KCAT_OPTS="-F client.properties"
# or "-X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 ...".
# Prints the outcome event (one JSON line); exit 0 if it succeeded, 3 if
# not, 4 if none came within TIMEOUT.
set -euo pipefail

[[ $# -ge 3 ]] || { echo "usage: $0 ACTION ENTITY KEY [DATA_JSON]" >&2; exit 2; }
ACTION=$1 ENTITY=$2 KEY=$3 DATA=${4:-'{}'}
BROKERS=${BROKERS:-127.0.0.1:9092}
TIMEOUT=${TIMEOUT:-30}
# shellcheck disable=SC2206 # KCAT_OPTS is a list of options on purpose
OPTS=(-b "$BROKERS" ${KCAT_OPTS:-})
ID=kcat-$(date +%s%N)-$$

# 1. Where to read outcomes from, taken BEFORE producing: an outcome is
#    written after its command, so reading from here misses nothing. kcat
#    starts by timestamp (-o s@MS); a minute of margin covers clock skew
#    between this host and the executor's, and costs only a few extra
#    events, filtered out below by causation id.
FROM=$(($(date +%s%3N) - 60000))

# 2. Produce the command in CloudEvents binary mode: attributes in ce_*
#    headers, data in the value. The Kafka key is the entity, hashed with
#    murmur2 (-X partitioner=murmur2_random, Kafka's and the executor's
#    mapping; kcat's default is CRC32, which would cost a forwarding hop).
printf '%s' "$DATA" | kcat -P "${OPTS[@]}" -t onceflight.commands -k "$ENTITY" -X partitioner=murmur2_random \
	-H ce_specversion=1.0 -H "ce_id=$ID" -H ce_source=kcat -H "ce_type=$ACTION" \
	-H "ce_subject=$ENTITY" -H "ce_idempotencykey=$KEY" -H content-type=application/json
echo "submitted $ID" >&2

# 3. Read committed outcomes only (the executor writes them in
#    transactions; an aborted one is not a result) until the one whose
#    causationid is our command's id.
#    grep stops at the first match; kcat, left without a reader, ends at
#    its next write or at the timeout.
set +e
OUT=$(grep -m1 -F "\"causationid\":\"$ID\"" < <(timeout "$TIMEOUT" kcat -C "${OPTS[@]}" -t onceflight.outcomes \
	-o "s@$FROM" -u -q -X isolation.level=read_committed -f '%s\n'))
rc=$?
set -e
[[ $rc -eq 0 ]] || { echo "no outcome for $ID within ${TIMEOUT}s (is an executor running?)" >&2; exit 4; }
echo "$OUT"
grep -q '"status":"succeeded"' <<<"$OUT" || exit 3
