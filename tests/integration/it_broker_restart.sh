#!/usr/bin/env bash
# A broker outage mid-run: dedupd keeps running while the broker is stopped
# cleanly, left down 3 s and started again (scripts/stack.sh kafka-restart),
# with fetches in flight and results waiting for acknowledgement.  Jobs keep
# arriving after the restart.  Then:
#   - every job's result reaches the results topic, then dedupd stops on SIGTERM
#     with exit status 0 (no --exit-when-idle: its end-of-partition state from
#     before the outage would end the run before the second wave)
#   - every logical job has exactly one result after downstream dedup
#   - the origin saw one request per job: nothing fetched twice although
#     uncommitted messages may be redelivered after the outage
source "$(dirname "$0")/lib.sh"
pin_dedupd
export DEDUPD_FETCH__MAX_INFLIGHT=32
export DEDUPD_FETCH__TIMEOUT_MS=60000   # the largest page takes ~28 s from /slow/
# First wave from /slow/ (16 KiB/s), so fetches are in flight at the stop.
awk '/\.html$/ && k++ < 40 {sub("/docs/", "/slow/"); print}' "$ORIGIN_PAGES" |
  sed "s|\$|?t=$T|" | jq -Rc '{url: .}' > "$WORK/wave1"
awk '/\.html$/ && k++ >= 40 && k <= 240 {print}' "$ORIGIN_PAGES" |
  sed "s|\$|?t=$T|" | jq -Rc '{url: .}' > "$WORK/wave2"
mark=$(log_mark)
submit "$WORK/wave1" > /dev/null
"$DEDUPD" run -c "$CFG" --stats-json > "$WORK/stats.json" 2>>"$WORK/run.log" &
pid=$!
sleep 3
t0=$(date +%s)
"$ROOT/scripts/stack.sh" kafka-restart 3 2>>"$WORK/stack.log" ||
  fail "kafka restart: $(tail -n 3 "$WORK/stack.log")"
ok "broker down and back in $(( $(date +%s) - t0 )) s"
submit "$WORK/wave2" > /dev/null
ok "second wave submitted $(( $(date +%s) - t0 )) s after the stop"
n=$(cat "$WORK/wave1" "$WORK/wave2" | wc -l)
for _ in $(seq 1 180); do
  [ "$(topic_dump "$DEDUPD_TOPICS__RESULTS" | jq -r .key | sort -u | wc -l)" -ge "$n" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
ok "results of all $n jobs on the topic $(( $(date +%s) - t0 )) s after the stop"
kill -TERM "$pid" 2>/dev/null || true
rc=0; wait "$pid" || rc=$?
expect_eq "$rc" 0 "dedupd exit status after SIGTERM"
echo "stats: $(cat "$WORK/stats.json")"
tail_results > "$WORK/results.ndjson"
expect_eq "$(jq -r .op_id "$WORK/results.ndjson" | sort -u | wc -l)" "$n" "logical jobs with a result after dedup"
expect_eq "$(jq -r 'select(.outcome != "fetched") | "\(.op_id) \(.category) \(.error)"' "$WORK/results.ndjson")" "" "results not fetched"
expect_eq "$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)" "$n" "origin fetches"
