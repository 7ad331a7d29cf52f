#!/usr/bin/env bash
# Issue 14 (1): an op never waits past its deadline (DESIGN.md section 5).
#
# One session (direct), a scripted origin answering 429 with "Retry-After: 600",
# jobs with a 2 s deadline ("deadline_s": 2):
#   A. default clamp (fetch.retry_after_max_ms 300 s): the op fails at once,
#      category throttled, one attempt, the asked wait (600000 ms) in its
#      attempt record, no retry recorded (dedupd_retry_waits_total 0), its
#      result published long before the deadline;
#   B. dedupd killed (SIGKILL) after that and restarted, the job delivered
#      once more: a duplicate of the failed op, not reclaimed, nothing
#      fetched again, nothing waited out;
#   C. a shorter clamp (fetch.retry_after_max_ms 4 s, still past the 2 s
#      deadline): throttled at once too, not "timeout" after 4 s; and the
#      session's cooldown is still honoured for that session: a job with a
#      10 s deadline submitted right after waits it out and is fetched no
#      earlier than the 429 + 4 s.
# Asserted on what the origin saw (request times) and on the results.
source "$(dirname "$0")/lib.sh"
pin_dedupd

direct_origin_setup
export DEDUPD_FETCH__MAX_ATTEMPTS=3
export DEDUPD_FETCH__RETRY_AFTER_MAX_MS=300000

job() { jq -cn --arg u "$1" --arg k "$2" --argjson d "$3" '{url: $u, job_key: $k, deadline_s: $d}'; }
reqs() { grep -F "c=$T-$1" "$WORK/origin.log" 2>/dev/null || true; }
nreqs() { reqs "$1" | wc -l; }
results() { topic_dump "$DEDUPD_TOPICS__RESULTS" | jq -c '.payload | fromjson'; }
result_of() { results | jq -c --arg k "$1" 'select(.job_key == $k)'; }
ms_of() { date -d "$1" +%s%3N; }
metric() { # metric RUNLOG NAME
  local port
  port=$(grep -o 'admin listener on port [0-9]*' "$1" | grep -o '[0-9]*$' | head -1)
  curl -fsS "http://127.0.0.1:$port/metrics" | awk -v n="$2" '$1 == n {print $2}'
}
# wait_result KEY SECONDS: until KEY has a result (prints it), else fails.
wait_result() {
  local r end=$(( $(date +%s%3N) + $2 * 1000 ))
  while [ "$(date +%s%3N)" -lt "$end" ]; do
    r=$(result_of "$1")
    [ -n "$r" ] && { echo "$r"; return 0; }
    sleep 0.2
  done
  return 1
}

# ---- A: Retry-After 600 s, clamp 300 s, deadline 2 s
job "$O/status/429?ra=600&c=$T-a" a 2 >"$WORK/a.ndjson"
opa=$(submit "$WORK/a.ndjson" | jq -r .op_id)
"$DEDUPD" run -c "$CFG" 2>"$WORK/run1.log" &
DPID=$!
ra=$(wait_result a 8) || fail "A: no result 8 s after the start, the deadline being 2 s (origin saw $(nreqs a) request(s); the op waits out the session's cooldown)"
echo "A result: $(jq -c '{outcome, category, status, attempts, error}' <<<"$ra")"
t429=$(reqs a | head -1 | cut -d' ' -f1)
tres=$(ms_of "$(jq -r .fetched_at <<<"$ra")")
expect_eq "$(jq -r '"\(.outcome)/\(.category)/\(.status)/\(.attempts)"' <<<"$ra")" \
  failed/throttled/429/1 "A: result (outcome/category/status/attempts)"
[ $(( tres - t429 )) -lt 1000 ] || fail "A: result $(( tres - t429 )) ms after the 429"
ok "A: result $(( tres - t429 )) ms after the 429 (deadline 2000 ms)"
expect_eq "$(metric "$WORK/run1.log" dedupd_retry_waits_total)" 0 "A: retry waits recorded"
sleep 1
expect_eq "$(nreqs a)" 1 "A: requests the origin saw"

# ---- B: crash and restart: not reclaimed, not waited out again
kill -9 "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
"$DEDUPD" inspect -c "$CFG" "$opa" --json >"$WORK/inspect-a.json" 2>/dev/null || fail "inspect A"
expect_eq "$(jq -r '"\(.state)/\(.category)/\(.attempts)/\(.not_before_ms // "none")"' "$WORK/inspect-a.json")" \
  failed/throttled/1/none "A: op record (state/category/attempts/not_before)"
err=$(jq -r '.attempt_log[0].error' "$WORK/inspect-a.json")
echo "A attempt 1: $(jq -c '.attempt_log[0] | {status, category, error}' "$WORK/inspect-a.json")"
[[ $err == *"the server asked to wait 600000 ms (Retry-After: 600)"* ]] ||
  fail "A: the attempt record does not keep the asked wait: $err"
ok "A: the attempt record keeps the asked wait (600000 ms)"
# the job once more (a redelivery, as after a crash before the commit)
submit "$WORK/a.ndjson" >/dev/null
t0=$(date +%s%3N)
stats=$(run_until_idle)
echo "restart: $stats ($(( $(date +%s%3N) - t0 )) ms)"
expect_eq "$(jq -r '"\(.new)/\(.reclaimed)/\(.duplicates)"' <<<"$stats")" 0/0/1 \
  "B: the redelivered job at the restart (new/reclaimed/duplicates)"
expect_eq "$(nreqs a)" 1 "B: requests the origin saw after the restart"
expect_eq "$(results | jq -r .job_key | grep -cx a)" 1 "B: results of A"

# ---- C: clamp 4 s (past the deadline): throttled at once; the cooldown holds
export DEDUPD_FETCH__RETRY_AFTER_MAX_MS=4000
job "$O/status/429?ra=600&c=$T-c" c 2 >"$WORK/c.ndjson"
submit "$WORK/c.ndjson" >/dev/null
"$DEDUPD" run -c "$CFG" 2>"$WORK/run3.log" &
DPID=$!
rc=$(wait_result c 8) || fail "C: no result 8 s after the start, the deadline being 2 s"
echo "C result: $(jq -c '{outcome, category, status, attempts, error}' <<<"$rc")"
t429=$(reqs c | head -1 | cut -d' ' -f1)
tres=$(ms_of "$(jq -r .fetched_at <<<"$rc")")
expect_eq "$(jq -r '"\(.outcome)/\(.category)/\(.attempts)"' <<<"$rc")" failed/throttled/1 \
  "C: result (outcome/category/attempts)"
[ $(( tres - t429 )) -lt 1000 ] || fail "C: result $(( tres - t429 )) ms after the 429"
ok "C: result $(( tres - t429 )) ms after the 429 (deadline 2000 ms, cooldown 4000 ms)"
# the session still cools down 4 s: a job that can wait, waits
job "$O/ok?c=$T-d" d 10 >"$WORK/d.ndjson"
submit "$WORK/d.ndjson" >/dev/null
rd=$(wait_result d 12) || fail "D: no result"
td=$(reqs d | head -1 | cut -d' ' -f1)
expect_eq "$(jq -r '"\(.outcome)/\(.status)/\(.attempts)"' <<<"$rd")" fetched/200/1 "D: result"
[ $(( td - t429 )) -ge 3950 ] || fail "D: fetched $(( td - t429 )) ms after the 429: the cooldown was not honoured"
ok "D: fetched $(( td - t429 )) ms after C's 429 (cooldown 4000 ms honoured)"
kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
expect_eq "$(nreqs c)" 1 "C: requests the origin saw"
