#!/usr/bin/env bash
# The retryable state across a crash (DESIGN.md section 4, issue 3).
#
# One job whose origin answers 429 with Retry-After: $RA (10), fetched direct
# (one session, so the op has to wait the 10 s out).  dedupd is killed with SIGKILL
# while the op waits.  Then:
#   - while it waits, GET /v1/ops/{op_id} shows it retryable; after the kill
#     `dedupd inspect --json` shows the op retryable, its not_before about 10 s
#     after the 429, one attempt recorded (status 429, category throttled);
#   - the restarted dedupd reclaims the op (generation 2) and sends its next
#     request no earlier than not_before (the origin's log says when), although
#     it started seconds before that time;
#   - the op ends failed/throttled (the origin never stops answering 429) with
#     every attempt of both generations in its record, numbered in order, and
#     one result.
source "$(dirname "$0")/lib.sh"
pin_dedupd
RA=10 # seconds: the kill, inspect and restart fit before not_before on a loaded machine

direct_origin_setup
export DEDUPD_FETCH__MAX_ATTEMPTS=2
export DEDUPD_FETCH__DEADLINE_MS=60000

jq -cn --arg u "$O/status/429?ra=$RA&c=$T" '{url: $u}' >"$WORK/job.ndjson"
opid=$(submit "$WORK/job.ndjson" | jq -r .op_id)
[ -n "$opid" ] && [ "$opid" != null ] || fail "submit printed no op_id"

requests() { grep -c "c=$T" "$WORK/origin.log" 2>/dev/null || true; }

# First run: until the 429 is in, then half a second for the record, then kill.
"$DEDUPD" run -c "$CFG" 2>"$WORK/run1.log" &
DPID=$!
for _ in $(seq 150); do [ "$(requests)" -ge 1 ] && break; sleep 0.1; done
expect_eq "$(requests)" 1 "requests before the kill"
sleep 0.5
# the live view while it waits: GET /v1/ops/{op_id} on the api listener
api=$(grep -o 'api listener on port [0-9]*' "$WORK/run1.log" | grep -o '[0-9]*$' | head -1)
live=$(curl -fsS "http://127.0.0.1:$api/v1/ops/$opid") || fail "GET /v1/ops/$opid"
expect_eq "$(jq -r '"\(.state)/\(.category)/\(.attempts)"' <<<"$live")" retryable/throttled/1 \
  "live op while it waits"
[ "$(jq -r .not_before_ms <<<"$live")" -gt "$(date +%s%3N)" ] || fail "live not_before not ahead: $live"
admin=$(grep -o 'admin listener on port [0-9]*' "$WORK/run1.log" | grep -o '[0-9]*$' | head -1)
expect_eq "$(curl -fsS "http://127.0.0.1:$admin/metrics" | awk '$1 == "dedupd_retry_waits_total" {print $2}')" 1 \
  "dedupd_retry_waits_total while it waits"
kill -9 "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
t1=$(grep "c=$T" "$WORK/origin.log" | head -1 | cut -d' ' -f1)

"$DEDUPD" inspect -c "$CFG" "$opid" --json >"$WORK/inspect1.json" ||
  fail "inspect after the kill: $(cat "$WORK/inspect1.json")"
expect_eq "$(jq -r .state "$WORK/inspect1.json")" retryable "state after the kill"
expect_eq "$(jq -r .category "$WORK/inspect1.json")" throttled "category of the wait"
expect_eq "$(jq -r .attempts "$WORK/inspect1.json")" 1 "attempts recorded"
expect_eq "$(jq -r '.attempt_log | map("\(.number):\(.status):\(.category)") | join(",")' "$WORK/inspect1.json")" \
  "1:429:throttled" "attempt log"
nb=$(jq -r .not_before_ms "$WORK/inspect1.json")
# not_before = the 429's arrival + Retry-After (the origin stamps the request;
# dedupd reads the answer a few ms later)
d=$(( nb - t1 ))
[ "$d" -ge $(( RA * 1000 - 100 )) ] && [ "$d" -le $(( RA * 1000 + 1500 )) ] ||
  fail "not_before is $d ms after the 429, expected about $(( RA * 1000 ))"
ok "not_before = 429 + $d ms"

# Second run, started well before not_before: the next request waits for it.
restart_at=$(date +%s%3N)
[ "$restart_at" -lt $(( nb - 2000 )) ] || fail "restart came too late to test the wait"
"$DEDUPD" run -c "$CFG" --exit-when-idle 2500 --stats-json >"$WORK/stats2.json" 2>"$WORK/run.log" &
DPID=$!
watch_metrics "$DPID" "$WORK/run.log"   # -> $WORK/metrics.last
wait "$DPID" || { tail -n 30 "$WORK/run.log" >&2; fail "the second dedupd run failed"; }
DPID=
stats=$(cat "$WORK/stats2.json")
echo "stats: $stats"
n=$(requests)
[ "$n" -ge 2 ] || fail "only $n requests: the op was not retried"
t2=$(grep "c=$T" "$WORK/origin.log" | sed -n 2p | cut -d' ' -f1)
[ "$t2" -ge "$nb" ] || fail "request 2 at $t2, $(( nb - t2 )) ms before not_before $nb"
ok "restart at not_before - $(( nb - restart_at )) ms; request 2 at not_before + $(( t2 - nb )) ms"
# the reclaim, counted (the log line alone proves nothing)
expect_eq "$(metric dedupd_lease_recoveries_total "$WORK/metrics.last")" 1 "second run: dedupd_lease_recoveries_total"
expect_eq "$(metric 'dedupd_jobs_total{outcome="reclaimed"}' "$WORK/metrics.last")" 1 "second run: dedupd_jobs_total{outcome=reclaimed}"

"$DEDUPD" inspect -c "$CFG" "$opid" --json >"$WORK/inspect2.json" || fail "inspect at the end"
expect_eq "$(jq -r '"\(.state)/\(.category)/\(.generation)"' "$WORK/inspect2.json")" \
  failed/throttled/2 "final record"
expect_eq "$(jq -r '.not_before_ms // "none"' "$WORK/inspect2.json")" none "not_before once final"
expect_eq "$(jq -r .attempts "$WORK/inspect2.json")" "$n" "attempts recorded = requests"
expect_eq "$(jq -r '[.attempt_log[] | .number] | join(",")' "$WORK/inspect2.json")" \
  "$(seq -s, 1 "$n")" "attempt numbers"
expect_eq "$(jq -r '[.attempt_log[] | .generation] | unique | join(",")' "$WORK/inspect2.json")" \
  "1,2" "generations in the attempt log"
topic_dump "$DEDUPD_TOPICS__RESULTS" >"$WORK/results.ndjson"
expect_eq "$(wc -l <"$WORK/results.ndjson")" 1 "results"
expect_eq "$(jq -r '.payload | fromjson | "\(.outcome)/\(.category)"' "$WORK/results.ndjson")" \
  failed/throttled "result"
