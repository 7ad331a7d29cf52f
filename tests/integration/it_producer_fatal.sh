#!/usr/bin/env bash
# A fatal producer error mid-run (DESIGN.md section 6: librdkafka's idempotent
# producer before 2.3.0 can hit one after a broker disconnect, librdkafka issue
# 4438).  The failpoint DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER=N raises one with
# rd_kafka_test_fatal_error once N results were acknowledged; dedupd must purge
# the producer, create a new one and send what it held again:
#   - the run ends by itself (no producer stuck refusing everything)
#   - every logical job has exactly one result after downstream dedup
#   - the origin saw one request per job (nothing fetched again)
#   - the reset is logged and counted
source "$(dirname "$0")/lib.sh"
N=300 AFTER=40
pages "$N" | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null
stats=$(DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER=$AFTER run_until_idle)
echo "stats: $stats"
grep -q 'fatal producer error: producer recreated' "$WORK/run.log" ||
  fail "no producer reset logged: $(grep -i producer "$WORK/run.log" | tail -n 3)"
ok "$(grep -o 'producer recreated[^"]*' "$WORK/run.log" | head -1)"
expect_eq "$(grep -c 'producer recreated' "$WORK/run.log")" 1 "producer resets"
held=$(grep -o 'producer recreated; [0-9]* messages' "$WORK/run.log" | grep -o '[0-9]*' | head -1)
[ "${held:-0}" -gt 0 ] || fail "the reset held no message: nothing was sent again"
ok "$held messages in flight at the error were sent again"
tail_results > "$WORK/results.ndjson"
expect_eq "$(jq -r .op_id "$WORK/results.ndjson" | sort -u | wc -l)" "$N" "logical jobs with a result after dedup"
expect_eq "$(jq -r 'select(.outcome != "fetched") | .op_id' "$WORK/results.ndjson" | wc -l)" 0 "results not fetched"
raw=$(topic_dump "$DEDUPD_TOPICS__RESULTS" | wc -l)
echo "results on the topic (before dedup): $raw"
[ "$raw" -ge "$N" ] || fail "fewer results on the topic ($raw) than jobs ($N)"
expect_eq "$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)" "$N" "origin fetches"
