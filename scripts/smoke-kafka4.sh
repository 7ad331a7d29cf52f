#!/usr/bin/env bash
# Smoke run of dedupd (librdkafka 2.0.2 of Debian 12) against an Apache Kafka 4.x
# broker (DESIGN.md section 8: the local stack's 3.9 still accepts every protocol
# version librdkafka 2.0.2 uses; 4.0 removed the oldest ones, KIP-896).
#
# Starts a single-node KRaft 4.x broker on loopback beside the local stack
# (scripts/stack.sh kafka-up with its own run dir, ports and log), then the main
# flow against it, with the stack's origin and proxy exits: `dedupd topics`,
# `dedupd submit` of scripts/gen-jobs.sh's jobs (duplicates, conflicts, malformed
# jobs), `dedupd run --exit-when-idle`, `dedupd tail`, and the counts of
# scripts/demo.sh (every logical job fetched once and published once).  Fails
# when a count is off, or when a dedupd log or the broker's log mentions an
# unsupported version or a compression/codec error (UNSUPPORTED_VERSION,
# "unsupported version", "Unsupported compression", CORRUPT_MESSAGE, "codec"),
# and prints what happened.  About 40 s once the jars are there.
#
# Needs: build/dedupd (or DEDUPD_BIN), the local stack up (scripts/stack.sh up:
# origin and proxies; its 3.9 broker is not used), the 4.x jars
# (scripts/kafka-jars.sh, run by scripts/deps.sh; fetched here when missing).
# Environment (defaults):
#   KAFKA4_VERSION=4.4.0  KAFKA4_PORT=19192  KAFKA4_CONTROLLER_PORT=19193
#   KAFKA4_STACK_DIR=/tmp/dedupd-kafka4   the broker's run dir (data, logs; the
#                         dedupd logs of the last run are kept in dedupd-logs/)
#   SMOKE_JOBS=60         logical jobs (one origin page each)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${DEDUPD_ROOT:-$(cd "$here/.." && pwd)}
KAFKA4_VERSION=${KAFKA4_VERSION:-4.4.0}
KAFKA4_PORT=${KAFKA4_PORT:-19192}
KAFKA4_CONTROLLER_PORT=${KAFKA4_CONTROLLER_PORT:-19193}
KAFKA4_STACK_DIR=${KAFKA4_STACK_DIR:-/tmp/dedupd-kafka4}
SMOKE_JOBS=${SMOKE_JOBS:-60}
t_start=$(date +%s.%N)

say() { printf 'smoke-kafka4: %s\n' "$*"; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# stack.sh on the 4.x broker's run dir (a broker of its own, from empty data).
k4() {
  DEDUPD_STACK_DIR=$KAFKA4_STACK_DIR KAFKA_VERSION=$KAFKA4_VERSION \
    KAFKA_LIBS=${DEDUPD_CACHE:-$HOME/.cache/dedupd}/kafka-$KAFKA4_VERSION/libs \
    KAFKA_PORT=$KAFKA4_PORT KAFKA_CONTROLLER_PORT=$KAFKA4_CONTROLLER_PORT \
    KAFKA_KEEP_DATA=0 "$root/scripts/stack.sh" "$@"
}
broker_log=$KAFKA4_STACK_DIR/kafka/logs/server.log
broker_out=$KAFKA4_STACK_DIR/kafka/logs/stdout.log
kept=$KAFKA4_STACK_DIR/dedupd-logs
topics_log=$KAFKA4_STACK_DIR/topics.log

# What must not appear in a log: a request version the broker refuses, a batch
# it cannot decompress or read.
BAD_RE='unsupported[ _-]?version|unsupported[ _-]?compression|unsupported_for_message_format|corrupt[ _-]?message|codec'
scan_logs() { # prints the offending lines; returns 1 when there are any
  local f n bad=0
  for f in "$@"; do
    [ -f "$f" ] || continue
    n=$(grep -Eic -- "$BAD_RE" "$f" || true)
    [ "$n" -gt 0 ] || continue
    bad=1
    say "FAIL: $n line(s) of $f mention an unsupported version or a codec error:"
    grep -Ei -- "$BAD_RE" "$f" | head -n 10 | cut -c1-400 | sed 's/^/    /'
  done
  [ "$bad" = 1 ] || say "log scan: no unsupported version or codec error in $(cat "$@" 2>/dev/null | wc -l) lines (dedupd's and the broker's logs)"
  return "$bad"
}

# The local stack's origin and proxy exits (its own broker is not used).
eval "$("$root/scripts/stack.sh" env)"
curl -fsS -o /dev/null --max-time 3 "$ORIGIN_URL/__health" 2>/dev/null ||
  { say "FAIL: the local stack's origin $ORIGIN_URL does not answer: run scripts/stack.sh up"; exit 1; }
for p in $PROXY_EXITS; do
  curl -fsS -o /dev/null --max-time 3 -x "$p" "$ORIGIN_URL/__health" 2>/dev/null ||
    { say "FAIL: proxy exit $p does not answer: run scripts/stack.sh up"; exit 1; }
done

"$root/scripts/kafka-jars.sh" "$KAFKA4_VERSION"
t=$(date +%s.%N)
broker_up=0
rm -f "$topics_log"
cleanup() {
  local rc=$? logs=()
  trap - EXIT
  [ -n "${WORK:-}" ] && logs=("$WORK"/*.log)
  if [ "$broker_up" = 1 ]; then
    scan_logs "${logs[@]}" "$topics_log" "$broker_log" "$broker_out" || rc=1
    k4 kafka-down 2>/dev/null || true
    rm -rf "$KAFKA4_STACK_DIR/kafka/data"
  fi
  if [ -n "${WORK:-}" ] && [ -d "$WORK" ]; then
    rm -rf "$kept"; mkdir -p "$kept"
    cp "${logs[@]}" "$kept/" 2>/dev/null || true
    rm -rf "$WORK"
  fi
  if [ "$rc" = 0 ]; then say "PASS in $(since "$t_start")s"
  else
    say "FAIL after $(since "$t_start")s; broker log $broker_log, dedupd logs $kept/"
  fi
  exit "$rc"
}
trap cleanup EXIT
# (lib.sh's fail() ends this shell with SIGTERM: exit 1, so the trap sees a failure)
trap 'exit 1' TERM INT
broker_up=1
rm -f "$broker_log"*   # (the scan reads this run's broker log only)
k4 kafka-up
version=$(grep -o 'Kafka version: [^ ]*' "$broker_log" | head -n1 || true)
say "Apache Kafka $KAFKA4_VERSION broker (KRaft, one node) on 127.0.0.1:$KAFKA4_PORT in $(since "$t")s${version:+ ($version)}"

# The integration tests' set-up against this broker: own topics (created with
# `dedupd topics`), consumer groups and store; it fails the run on its own.
export KAFKA_PORT=$KAFKA4_PORT
t=$(date +%s.%N)
# lib.sh sets an EXIT trap of its own (rm -rf $WORK) before it creates the
# topics, so its errors must not end this shell there (the broker would be left
# running): they are ignored while it is sourced and its outcome checked below.
# shellcheck source-path=SCRIPTDIR/..
# shellcheck source=tests/integration/lib.sh
source "$root/tests/integration/lib.sh" 2>"$topics_log" || true
trap cleanup EXIT
[ "$KAFKA_BOOTSTRAP" = "127.0.0.1:$KAFKA4_PORT" ] || fail "bootstrap $KAFKA_BOOTSTRAP is not the 4.x broker"
for s in jobs results conflicts dlq; do
  n=$(timeout 15 kcat -b "$KAFKA_BOOTSTRAP" -L -J -t "$T.$s" 2>/dev/null |
        jq --arg t "$T.$s" '[.topics[] | select(.topic == $t and (.error // "") == "")][0].partitions | length' 2>/dev/null || true)
  [ "$n" = 4 ] || fail "dedupd topics did not create $T.$s with 4 partitions (found ${n:-none}): $(tail -n 5 "$topics_log")"
done
say "topics $T.{jobs,results,conflicts,dlq} created by dedupd topics in $(since "$t")s"

# The demo's jobs over SMOKE_JOBS pages, tagged so that the origin's log tells
# this run's requests (t=$T, as lib.sh's log_since expects).
"$root/scripts/gen-jobs.sh" "$ORIGIN_PAGES" "$SMOKE_JOBS" "$T" >"$WORK/jobs.ndjson"
jobs_submitted=$(wc -l <"$WORK/jobs.ndjson")
mark=$(log_mark)
t=$(date +%s.%N)
submit --allow-invalid "$WORK/jobs.ndjson" >"$WORK/receipts.ndjson" || fail "dedupd submit failed: $(tail -n 3 "$WORK/submit.log")"
logical_jobs=$(jq -r 'select(.op_id) | .op_id' "$WORK/receipts.ndjson" | sort -u | wc -l)
malformed=$(grep -c '"invalid":true' "$WORK/receipts.ndjson" || true)
jq -r 'select(.event_key) | .event_key' "$WORK/receipts.ndjson" | sort -u >"$WORK/event_keys"
say "submitted $jobs_submitted jobs ($logical_jobs logical, $malformed malformed) in $(since "$t")s"

t=$(date +%s.%N)
# shellcheck disable=SC2119 # (no extra arguments for dedupd run)
stats=$(IDLE_MS=2500 run_until_idle)
say "dedupd run --exit-when-idle 2500 in $(since "$t")s: $stats"

t=$(date +%s.%N)
tail_results >"$WORK/results.ndjson"
results_after_dedup=$(jq -r '.event_key' "$WORK/results.ndjson" | sort -u | comm -12 - "$WORK/event_keys" | wc -l)
origin_fetches=$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)
dlq=$(topic_dump "$T.dlq" | wc -l)
conflict_records=$(topic_dump "$T.conflicts" | wc -l)
say "dedupd tail (results produced with lz4, dedupd's default) in $(since "$t")s: $(wc -l <"$WORK/results.ndjson") results; origin fetches $origin_fetches; DLQ records $dlq; conflict records $conflict_records"

expect_eq "$origin_fetches" "$logical_jobs" "origin fetches (nginx log) = logical jobs"
expect_eq "$results_after_dedup" "$logical_jobs" "results after dedup = logical jobs"
expect_eq "$(jq .new <<<"$stats")" "$logical_jobs" "new ops"
expect_eq "$(jq .invalid <<<"$stats")" "$malformed" "invalid jobs"
expect_eq "$dlq" "$malformed" "records on the DLQ topic"
expect_eq "$conflict_records" "$(jq .conflicts <<<"$stats")" "records on the conflicts topic = conflicts"
