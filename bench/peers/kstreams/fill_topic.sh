#!/usr/bin/env bash
# bench/peers/kstreams/fill_topic.sh TOPIC [N] [PARTITIONS]: a benchmark input topic
# as BENCH-PEERS.md wants it: N jobs (default 200000) from bench/gen_jobs.sh in
# `mixed` mode (50% duplicates, interleaved), produced by `dedupd submit` (key = op_id,
# hex), in a topic of PARTITIONS partitions (default 4) created here; then the topic
# is read once with kcat (warm page cache). Prints "jobs=N distinct=D".
# Needs the stack (scripts/stack.sh up) and build/dedupd of the repo.
set -euo pipefail
t=${1:?usage: fill_topic.sh TOPIC [N] [PARTITIONS]}
n=${2:-200000}
parts=${3:-4}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
dedupd=${DEDUPD:-$root/build/dedupd}
eval "$("$root/scripts/stack.sh" env)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
java -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BOOTSTRAP" \
  --create --if-not-exists --topic "$t" --partitions "$parts" >&2 2>/dev/null
"$root/bench/gen_jobs.sh" "$n" "$t" mixed "$ORIGIN_PAGES" >"$work/jobs.ndjson"
DEDUPD_BROKER__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP DEDUPD_TOPICS__JOBS=$t DEDUPD_LOG__LEVEL=warn \
  "$dedupd" submit -c "$root/config/dedupd.json" "$work/jobs.ndjson" >"$work/receipts" 2>"$work/submit.log" ||
  { tail -n 5 "$work/submit.log" >&2; exit 1; }
distinct=$(sort -u "$work/jobs.ndjson" | wc -l)
got=$(kcat -C -b "$KAFKA_BOOTSTRAP" -t "$t" -e -q -f '%k\n' | sort | uniq | wc -l)
[ "$got" = "$distinct" ] || { echo "fill_topic.sh: $got distinct keys in $t, expected $distinct" >&2; exit 1; }
echo "jobs=$n distinct=$distinct"
