#!/usr/bin/env bash
# A fatal producer error mid-run (DESIGN.md section 6: librdkafka's idempotent
# producer before 2.3.0 can hit one after a broker disconnect, librdkafka issue
# 4438).  The failpoint DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER=N raises one with
# rd_kafka_test_fatal_error once N results were acknowledged; dedupd must purge
# the producer, create a new one and send what it held again:
#   - the run ends by itself (no producer stuck refusing everything)
#   - every logical job has exactly one result after downstream dedup
#   - the origin saw one request per job (nothing fetched again)
#   - the reset happened once: dedupd_producer_resets_total of the run's
#     /metrics (read until it exits), and results were in flight at the error
#     (else nothing was tested)
#   - every result acknowledged once: dedupd_results_total{outcome="fetched"}
source "$(dirname "$0")/lib.sh"
N=300 AFTER=40
pages "$N" | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null
pid=""
trap '[ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true; rm -rf "$WORK"' EXIT
DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER=$AFTER "$DEDUPD" run -c "$CFG" --exit-when-idle 2500 --stats-json \
  > "$WORK/stats.json" 2>>"$WORK/run.log" &
pid=$!
# (a producer stuck refusing everything would keep the run from its end)
WATCH_LIMIT_S=120 watch_metrics "$pid" "$WORK/run.log"
rc=0; wait "$pid" || rc=$?
pid=""
echo "stats: $(cat "$WORK/stats.json")"
expect_eq "$rc" 0 "dedupd run exit status (it ended by itself)"
cp "$WORK/metrics.last" "$WORK/metrics.txt"
expect_eq "$(metric dedupd_producer_resets_total "$WORK/metrics.txt")" 1 "dedupd_producer_resets_total"
# the failpoint strikes with results in flight: how many, only the log says
held=$(grep -o 'producer recreated; [0-9]* messages' "$WORK/run.log" | grep -o '[0-9]*' | head -1 || true)
[ "${held:-0}" -gt 0 ] || nothing_tested "no result was in flight at the fatal error"
ok "$held messages in flight at the fatal error"
expect_eq "$(metric 'dedupd_results_total{outcome="fetched"}' "$WORK/metrics.txt")" "$N" \
  "dedupd_results_total{outcome=fetched}: every result acknowledged once, those held at the error too"
tail_results > "$WORK/results.ndjson"
expect_eq "$(jq -r .op_id "$WORK/results.ndjson" | sort -u | wc -l)" "$N" "logical jobs with a result after dedup"
expect_eq "$(jq -r 'select(.outcome != "fetched") | .op_id' "$WORK/results.ndjson" | wc -l)" 0 "results not fetched"
raw=$(topic_dump "$DEDUPD_TOPICS__RESULTS" | wc -l)
echo "results on the topic (before dedup): $raw"
[ "$raw" -ge "$N" ] || fail "fewer results on the topic ($raw) than jobs ($N)"
expect_eq "$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)" "$N" "origin fetches"
