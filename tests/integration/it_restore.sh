#!/usr/bin/env bash
# Changelog restore (issue 12, DESIGN.md sections 4 and 6): the durable record
# of every dedup decision is the changelog topic, the local RocksDB only a copy.
# A pod replaced with an empty store (emptyDir) restores its partitions from the
# changelog before it processes their messages, so duplicates of jobs fetched
# before are not fetched again:
#   1. N jobs fetched, dedupd stopped cleanly (SIGTERM), the store deleted,
#      dedupd started again and fed two copies of each: 0 origin requests;
#   2. the same after kill -9 (the store deleted again): M other jobs fetched
#      (their results acknowledged), kill -9, store deleted, copies: 0 origin
#      requests;
#   3. K other jobs, then a restart on the same store: its restore reads 0
#      changelog records (the owner's checkpoints followed its own records),
#      the K jobs sent again are not fetched again, and a restart with other
#      identity settings still exits 2 (checked against the store's copy).
# Counted from nginx's access log (this test's ?t= tag).
source "$(dirname "$0")/lib.sh"
export DEDUPD_FETCH__MAX_INFLIGHT=16

# start_bg: a `dedupd run` in the background ($pid), its log run.N.log
runs=0
start_bg() {
  runs=$((runs + 1)); log=$WORK/run.$runs.log
  "$DEDUPD" run -c "$CFG" 2>"$log" &
  pid=$!
}
trap '[ -n "${pid:-}" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
# wait_results N: until the run reports N results published (its /metrics)
wait_results() {
  local port v
  port=$(admin_port "$log")
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || fail "dedupd exited: $(tail -n 3 "$log")"
    v=$(curl -s --max-time 1 "http://127.0.0.1:$port/metrics" | awk '$1 ~ /^dedupd_results_total/ {s += $2} END {print s + 0}')
    [ "$v" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "only $v of $1 results after 30 s"
}

# replaced_pod SET COUNT WHAT STATS_LABEL NOTE: the pod comes back with an
# empty store; every job of $WORK/SET.ndjson is submitted twice more and run
# until idle: none may be fetched again (counted, not failed at once, so both
# parts run and report).
replaced_pod() {
  local set=$1 n=$2 what=$3 label=$4 note=$5 stats refetched
  rm -rf "$DEDUPD_STORE__PATH"
  cat "$WORK/$set.ndjson" "$WORK/$set.ndjson" > "$WORK/${set}2.ndjson"
  submit "$WORK/${set}2.ndjson" > /dev/null
  mark=$(log_mark)
  stats=$(run_until_idle)
  echo "after $label: $stats"
  refetched=$(origin_200s "$mark")
  if [ "$refetched" = 0 ]; then ok "$what: 0 of $n jobs fetched again"
  else
    failures+=("$what, $refetched of $n jobs were fetched again ($((2 * n)) duplicate copies submitted$note; new ops $(jq .new <<<"$stats"))")
    echo "FAIL (counted): ${failures[-1]}" >&2
  fi
}

# ---- 1. clean stop, store deleted -------------------------------------------
N=40
pages $N | jq -Rc '{url: .}' > "$WORK/a.ndjson"
submit "$WORK/a.ndjson" > /dev/null
mark=$(log_mark)
start_bg
wait_results $N
kill -TERM "$pid"; rc=0; wait "$pid" || rc=$?; pid=
expect_eq "$rc" 0 "exit status after SIGTERM"
expect_eq "$(origin_200s "$mark")" $N "origin fetches of the first run"
failures=()
replaced_pod a $N "after a clean stop and an empty store" "SIGTERM + empty store" ""

# ---- 2. kill -9, store deleted ----------------------------------------------
# M other jobs; the kill comes once their results are acknowledged (outbox
# empty) and 3 s more have passed (the changelog records follow the results'
# acknowledgements): what the kill loses is only the local store.
M=40
awk -v n=$M '/\.html$/ && k++ >= 100 && k <= 100 + n' "$ORIGIN_PAGES" | sed "s|\$|?t=$T\&r=2|" | jq -Rc '{url: .}' > "$WORK/b.ndjson"
submit "$WORK/b.ndjson" > /dev/null
mark=$(log_mark)
start_bg
wait_results $M
port=$(admin_port "$log")
for _ in $(seq 1 50); do
  [ "$(scrape "$port" | metric dedupd_outbox_pending)" = 0 ] && break
  sleep 0.2
done
sleep 3
kill -9 "$pid"; rc=0; wait "$pid" 2>/dev/null || rc=$?; pid=
expect_eq "$rc" 137 "killed with -9"
expect_eq "$(origin_200s "$mark")" $M "origin fetches before the kill"
replaced_pod b $M "after kill -9 and an empty store" "kill -9 + empty store" \
  ", and the originals again if their offsets were not committed"

# ---- 3. a restart with the local store kept ---------------------------------
# The owner's own records (claims, completions, the identity record) advance
# its checkpoints as they are acknowledged one after the other, so a restart
# on the same store restores nothing it already holds (before: every record
# written since the last assignment was read again).
K=20
awk -v n=$K '/\.html$/ && k++ >= 200 && k <= 200 + n' "$ORIGIN_PAGES" | sed "s|\$|?t=$T\&r=3|" | jq -Rc '{url: .}' > "$WORK/c.ndjson"
submit "$WORK/c.ndjson" > /dev/null
mark=$(log_mark)
stats=$(run_until_idle)
expect_eq "$(jq .new <<<"$stats")" $K "new ops of the run before the restart"
expect_eq "$(origin_200s "$mark")" $K "origin fetches before the restart"
restores() { grep -c '"restored ' "$WORK/run.log"; }
before=$(restores)
stats=$(run_until_idle)
expect_eq "$(restores)" $((before + 1)) "restore lines of the restart"
line=$(grep '"restored ' "$WORK/run.log" | tail -n 1 | jq -r .message)
echo "restart: $line"
expect_eq "$(sed -E 's/.*: ([0-9]+) records .*/\1/' <<<"$line")" 0 \
  "changelog records read again by a restart on its own store"
# what it did not read back it holds: the K jobs again are duplicates
submit "$WORK/c.ndjson" > /dev/null
mark=$(log_mark)
stats=$(run_until_idle)
expect_eq "$(jq .new <<<"$stats")" 0 "new ops among the K jobs sent again"
expect_eq "$(origin_200s "$mark")" 0 "origin fetches of the K jobs sent again"
# and a restart that reads nothing still checks the identity settings (the
# store keeps the identity record it was checked against)
rc=0
DEDUPD_IDENTITY__VARIANCE_HEADERS=accept,accept-language,user-agent \
  "$DEDUPD" run -c "$CFG" --exit-when-idle 2500 2>"$WORK/identity.log" >/dev/null || rc=$?
expect_eq "$rc" 2 "exit status of a restart with other identity.variance_headers"
grep -q 'identity.variance_headers' "$WORK/identity.log" ||
  fail "the refusal does not name identity.variance_headers: $(grep -v '"info"' "$WORK/identity.log" | tail -n 3)"

# Downstream: one result per logical job, under its event_key.
topic_dump "$T.results" | jq -r '.payload | fromjson | "\(.op_id) \(.event_key)"' | sort -u > "$WORK/keys"
expect_eq "$(awk '{print $1}' "$WORK/keys" | sort -u | wc -l)" $((N + M + K)) "logical jobs with a result"
expect_eq "$(wc -l < "$WORK/keys")" $((N + M + K)) "distinct (op_id, event_key) pairs on the results topic"
(( ${#failures[@]} == 0 )) || fail "$(printf '%s; ' "${failures[@]}")"
