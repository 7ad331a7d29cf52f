#!/usr/bin/env bash
# Single-flight's deadline rule (README "Single-flight"): an op only waits
# behind a fetch whose deadline is not later than its own.  Three ops (other
# job_keys, so other op_ids) of one resource, one at a time into one run:
#   A  deadline_s 30: the leader; the origin holds its answer 8 s
#   B  deadline_s 60 (later than A's): waits behind A and takes A's answer
#   C  deadline_s 20 (earlier than A's): does not wait, fetches on its own
# Premise, proven before each op's check: B and C were each claimed
# (dedupd_jobs_total{outcome="new"}) while A's fetch was still in flight, i.e.
# before the origin's answer to A could have left it.  Asserted on what the origin
# saw (tests/fixtures/hostile_origin, route /slow-headers), /metrics, the
# stats JSON and the results.
source "$(dirname "$0")/lib.sh"
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; stop_fixtures; rm -rf "$WORK"' EXIT

HOLD_S=8
hostile_start origin 127.0.0.1:0
url="http://127.0.0.1:$(head -n 1 "$WORK/origin.port")/slow-headers?s=$HOLD_S&t=$T"
job() { jq -nc --arg u "$url" --arg k "$1" --argjson d "$2" '{url: $u, job_key: $k, deadline_s: $d}'; }
# requests: the origin's log lines of this test (one per request received)
requests() { grep -cF "t=$T" "$WORK/origin.log" || true; }
# req_ms N: when the origin received request N (ms since the epoch)
req_ms() { grep -F "t=$T" "$WORK/origin.log" | sed -n "${1}p" | awk '{print $1}'; }
metric() { curl -s "http://127.0.0.1:$admin/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
now_ms() { date +%s%3N; }

job a 30 | submit - > "$WORK/receipts.ndjson"
"$DEDUPD" run -c "$CFG" --exit-when-idle 2500 --stats-json >"$WORK/stats.json" 2>"$WORK/run.log" &
pid=$!
admin=$(admin_port "$WORK/run.log")

# A reaches the origin (and stays there HOLD_S seconds)
for _ in $(seq 1 150); do [ "$(requests)" -ge 1 ] && break; sleep 0.1; done
expect_eq "$(requests)" 1 "A: its request reached the origin"
t1=$(req_ms 1)
a_answer=$(( t1 + HOLD_S * 1000 ))   # the origin's answer to A leaves no earlier

# claimed N: wait until the run has claimed N new ops; fail unless that
# happened while A's fetch was still in flight (the premise of this test)
claimed() {
  local n=""
  for _ in $(seq 1 200); do
    n=$(metric 'dedupd_jobs_total{outcome="new"}')
    [ "${n:-0}" -ge "$1" ] && break
    sleep 0.05
  done
  local at; at=$(now_ms)
  [ "${n:-0}" = "$1" ] && [ "$at" -lt "$a_answer" ] ||
    fail "nothing was tested: op $1 not claimed while A was in flight (dedupd_jobs_total{outcome=\"new\"} '$n' at $((at - t1)) ms after A's request; A's answer at $((HOLD_S * 1000)) ms)"
  ok "premise: op $1 claimed $((at - t1)) ms after A's request, while A's fetch was in flight"
}

# B (later deadline than A's): waits behind A
job b 60 | submit - >> "$WORK/receipts.ndjson"
claimed 2
shared=""
for _ in $(seq 1 20); do
  shared=$(metric dedupd_single_flight_shared_total)
  [ "${shared:-0}" -ge 1 ] && break
  sleep 0.05
done
expect_eq "${shared:-0}" 1 "B waits behind A (dedupd_single_flight_shared_total while A is in flight)"

# C (earlier deadline than A's): does not wait, fetches on its own while A's
# fetch is still in flight
job c 20 | submit - >> "$WORK/receipts.ndjson"
claimed 3
while [ "$(requests)" -lt 2 ] && [ "$(now_ms)" -lt "$a_answer" ]; do sleep 0.05; done
t2=$(req_ms 2)
[ -n "$t2" ] && [ "$t2" -lt "$a_answer" ] ||
  fail "C did not fetch on its own while A was in flight (origin requests: $(requests), the 2nd at '${t2:-none}', A's answer at $a_answer)"
ok "C's request reached the origin $((t2 - t1)) ms after A's, while A's fetch was in flight"
expect_eq "$(metric dedupd_single_flight_shared_total)" 1 "C did not join A (dedupd_single_flight_shared_total)"

rc=0; wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || { tail -n 20 "$WORK/run.log" >&2; fail "dedupd run exit $rc"; }
stats=$(cat "$WORK/stats.json")
echo "stats: $stats"
expect_eq "$(jq -r '"\(.new) \(.single_flight) \(.fetch_attempts)"' <<<"$stats")" "3 1 2" \
  "stats: new ops, single_flight waiters (B), fetch attempts (A, C)"
expect_eq "$(requests)" 2 "origin requests (A and C; none for B)"

tail_results > "$WORK/results.ndjson"
r() { jq -r --arg k "$1" "select(.job_key == \$k) | $2" "$WORK/results.ndjson"; }
expect_eq "$(wc -l < "$WORK/results.ndjson")" 3 "results"
for k in a b c; do
  expect_eq "$(r "$k" '"\(.outcome) \(.status)"')" "fetched 200" "$k: outcome and status"
  expect_eq "$(r "$k" .event_key)" "$(jq -r --arg k "default:$k" 'select(.op_id == $k) | .event_key' "$WORK/receipts.ndjson")" "$k: its own event_key"
done
expect_eq "$(r b .body_sha256)" "$(r a .body_sha256)" "B's body is A's"
expect_eq "$(r b .fetched_at)" "$(r a .fetched_at)" "B took A's answer (same fetched_at)"
[ "$(r c .fetched_at)" != "$(r a .fetched_at)" ] || fail "C has A's fetched_at: it did not fetch on its own"
ok "C's fetched_at is its own"
