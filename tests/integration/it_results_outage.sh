#!/usr/bin/env bash
# A long outage of the results topic under load (issue 15): the topic is
# deleted after start-up (the Admin API; the broker does not create topics),
# so no result can be acknowledged, for three times
# kafka.max.poll.interval.ms.  Before, the pipeline counted the ops that only
# awaited an acknowledgement as in flight and stopped polling its consumer:
# past max.poll.interval.ms the member was evicted and its partitions moved.
# Now, at capacity for over a second, the partitions are paused and the poll
# goes on.
#   - no eviction: librdkafka never reports the poll interval exceeded and
#     the run is assigned its partitions once, for the whole outage;
#   - SIGTERM during the outage ends the process within shutdown.grace_ms
#     (+ the short drain of the close);
#   - after the outage (the topic created again), the next run publishes
#     every job once: one distinct event_key per logical job, and no op
#     fetched twice (nginx log).
PARTITIONS=2
source "$(dirname "$0")/lib.sh"
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$WORK"' EXIT
RAW=$(dirname "$DEDUPD")/bench/raw_consumer
[ -x "$RAW" ] || fail "no $RAW (built with the bench tools)"
POLL_MS=6000
export DEDUPD_KAFKA__MAX__POLL__INTERVAL__MS=$POLL_MS
export DEDUPD_KAFKA__SESSION__TIMEOUT__MS=6000 DEDUPD_KAFKA__HEARTBEAT__INTERVAL__MS=1000
export DEDUPD_FETCH__TIMEOUT_MS=2000 DEDUPD_KAFKA__REQUEST__TIMEOUT__MS=3000
export DEDUPD_REBALANCE__GRACE_MS=5000 DEDUPD_SHUTDOWN__GRACE_MS=3000
export DEDUPD_FETCH__MAX_INFLIGHT=16

"$DEDUPD" run -c "$CFG" 2>"$WORK/run1.log" &
pid=$!
port=$(admin_port "$WORK/run1.log")
for _ in $(seq 1 150); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && break
  sleep 0.1
done
# the outage begins: the results topic is gone
"$RAW" -b "$KAFKA_BOOTSTRAP" --delete "$T.results" >/dev/null 2>"$WORK/delete.err" ||
  fail "could not delete $T.results: $(cat "$WORK/delete.err")"
n=80
pages "$n" | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
submit "$WORK/jobs.ndjson" > /dev/null
mark=$(log_mark)
t0=$(date +%s%3N)
sleep $((3 * POLL_MS / 1000))
kill -0 "$pid" 2>/dev/null || fail "run 1 ended during the outage: $(tail -n 3 "$WORK/run1.log")"
grep -q '"backpressure: ' "$WORK/run1.log" ||
  nothing_tested "the pipeline never stayed at its capacity ($(grep -c . "$WORK/run1.log") log lines)"
grep -qi 'maximum poll interval\|MAXPOLL' "$WORK/run1.log" &&
  fail "the member exceeded max.poll.interval.ms: $(grep -i 'poll interval' "$WORK/run1.log" | head -n 1)"
expect_eq "$(grep -c '"assigned ' "$WORK/run1.log")" 1 \
  "assignments of run 1 through $((3 * POLL_MS)) ms of outage (no eviction, no rebalance)"
grep -q '"stopping: ' "$WORK/run1.log" && fail "run 1 stopped during the outage"

# SIGTERM during the outage: leaves within shutdown.grace_ms + the close
t1=$(date +%s%3N)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
took=$(( $(date +%s%3N) - t1 ))
(( took <= 3000 + 1000 + 2000 + 1000 )) ||
  fail "SIGTERM during the outage took $took ms (shutdown.grace_ms 3000, its flush 1000, the close's drain 2000)"
grep -qi 'maximum poll interval\|MAXPOLL' "$WORK/run1.log" &&
  fail "the member exceeded max.poll.interval.ms while stopping: $(grep -i 'poll interval' "$WORK/run1.log" | head -n 1)"
ok "SIGTERM during the outage: exit $rc after $took ms"

# the outage ends: the topic is back; the next run publishes every job once
"$DEDUPD" topics -c "$CFG" --partitions "$PARTITIONS" >/dev/null
stats=$(run_until_idle)
echo "run 2: $stats"
topic_dump "$T.results" > "$WORK/results.json"
with=$(jq -r '.payload | fromjson | .op_id' "$WORK/results.json" | sort -u | wc -l)
expect_eq "$with" "$n" "logical jobs with a result after the outage"
multi=$(jq -r '.payload | fromjson | "\(.op_id) \(.event_key)"' "$WORK/results.json" | sort -u |
  awk '{c[$1]++} END {m = 0; for (k in c) if (c[k] > 1) m++; print m}')
expect_eq "$multi" 0 "logical jobs with more than one event_key"
# (successful answers only: an attempt the throttled exit answered 429 is
# retried, which is not a second fetch)
twice=$(log_since "$mark" | grep "?t=$T " | awk '$5 == 200 {print $3}' | sort | uniq -d | wc -l)
expect_eq "$twice" 0 "URLs fetched more than once across the outage, the stop and the restart"
ok "every job once after an outage of $(( $(date +%s%3N) - t0 )) ms in all"
