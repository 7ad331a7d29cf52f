#!/usr/bin/env bash
# Two promises of README "Guarantees", each across a deterministic kill between
# the broker's acknowledgement of a result and dedupd's own (failpoint
# DEDUPD_FAILPOINT_EXIT_BEFORE_ACK=1: _exit 137 once the first result is on
# the topic, before its outbox entry is deleted):
#   - the outbox: the next start produces that result again, under the same
#     event_key, op_id and body, without fetching again;
#     dedupd_outbox_replayed_total and the stats say 1
#   - a duplicate of an op in flight holds its offset: the copy decided
#     duplicate_inflight (seen in /metrics before the kill) is consumed again
#     by the next run, with the original, because neither offset was committed
source "$(dirname "$0")/lib.sh"
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$WORK"' EXIT

# live_metric PORT SERIES: one series of a run that may be leaving (no
# failure when the run is already gone: the caller checks that itself).
live_metric() { curl -s --max-time 1 "http://127.0.0.1:$1/metrics" | metric "$2"; }

page=$(pages 1 | sed 's/?.*//')
slow=${page/\/docs\//\/slow\/}   # the same page at 16 KiB/s: the fetch lasts ~1 s
url="$slow?t=$T"
path=${url#"$ORIGIN_URL"}
printf '{"url":"%s"}\n{"url":"%s"}\n' "$url" "$url" > "$WORK/jobs.ndjson"
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
expect_eq "$(jq -r .partition "$WORK/receipts.ndjson" | sort -u | wc -l)" 1 "both copies on one partition"
op=$(head -n 1 "$WORK/receipts.ndjson" | jq -r .op_id)
ek=$(head -n 1 "$WORK/receipts.ndjson" | jq -r .event_key)

# ---- run 1: killed by the failpoint -----------------------------------------
mark=$(log_mark)
DEDUPD_FAILPOINT_EXIT_BEFORE_ACK=1 "$DEDUPD" run -c "$CFG" 2>"$WORK/run1.log" &
pid=$!
port=$(admin_port "$WORK/run1.log")
held=""
for _ in $(seq 1 100); do
  held=$(live_metric "$port" 'dedupd_jobs_total{outcome="duplicate_inflight"}')
  [ "${held:-0}" = 1 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
rc=0; wait "$pid" || rc=$?
pid=""
expect_eq "$held" 1 "run 1 held the copy as a duplicate of the op in flight (before the kill)"
expect_eq "$rc" 137 "run 1 ended by the failpoint"
grep -q 'failpoint DEDUPD_FAILPOINT_EXIT_BEFORE_ACK: result 1 acknowledged by the broker' "$WORK/run1.log" ||
  fail "nothing was tested: the failpoint did not fire ($(tail -n 3 "$WORK/run1.log"))"
expect_eq "$(log_since "$mark" | grep -cF "GET $path ")" 1 "origin requests in run 1"
topic_dump "$T.results" > "$WORK/results1.json"
expect_eq "$(wc -l < "$WORK/results1.json")" 1 "results on the topic after run 1 (acknowledged by the broker)"

# ---- run 2: replays the outbox, consumes both copies again -----------------
mark=$(log_mark)
"$DEDUPD" run -c "$CFG" --exit-when-idle 2500 --stats-json >"$WORK/stats.json" 2>"$WORK/run2.log" &
pid=$!
port=$(admin_port "$WORK/run2.log")
replayed=""
for _ in $(seq 1 100); do
  replayed=$(live_metric "$port" dedupd_outbox_replayed_total)
  [ "${replayed:-0}" = 1 ] && break
  sleep 0.05
done
wait "$pid" || fail "run 2 exit $?"
pid=""
expect_eq "$replayed" 1 "dedupd_outbox_replayed_total in run 2"
stats=$(cat "$WORK/stats.json")
echo "run 2: $stats"
expect_eq "$(jq -r '"\(.replayed_outbox) \(.consumed) \(.new) \(.duplicates + .duplicates_inflight)"' <<<"$stats")" \
  "1 2 0 2" "run 2: replayed, consumed (both copies: no offset had been committed), new, duplicates"
expect_eq "$(log_since "$mark" | grep -cF "GET $path " || true)" 0 "origin requests in run 2 (the replay fetches nothing)"
topic_dump "$T.results" > "$WORK/results2.json"
expect_eq "$(wc -l < "$WORK/results2.json")" 2 "results on the topic after run 2 (the replayed copy)"
expect_eq "$(jq -r '.key' "$WORK/results2.json" | sort -u | paste -sd,)" "$ek" "both copies keyed by the receipt's event_key"
expect_eq "$(jq -r '.payload | fromjson | "\(.op_id) \(.event_key) \(.body_sha256)"' "$WORK/results2.json" | sort -u | wc -l)" 1 \
  "the replayed copy is the same result (op_id, event_key, body)"
expect_eq "$(jq -r '.payload | fromjson | .op_id' "$WORK/results2.json" | sort -u)" "$op" "its op_id"
# The page went to the store once: the pending entry named its body (a page
# with an ETag, kept for conditional refetch), and the replay rebuilt the
# result from it, byte for byte.
grep -q 'pending outbox entries (1 naming their body)' "$WORK/run2.log" ||
  fail "run 2 did not open an outbox entry naming its body: $(grep -m1 'pending outbox' "$WORK/run2.log")"
expect_eq "$(jq -c '.payload' "$WORK/results2.json" | sort -u | wc -l)" 1 \
  "the replayed result is byte for byte the first"
# A third run has nothing left to consume: run 2 committed both offsets.
stats=$(run_until_idle)
expect_eq "$(jq .consumed <<<"$stats")" 0 "run 3: messages consumed again"
