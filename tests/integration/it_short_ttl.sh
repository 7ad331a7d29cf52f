#!/usr/bin/env bash
# TTLs never end before a lease or a deadline (issue 15):
#   1. store.ops_ttl_ms below store.lease_ms is refused at start-up (exit 2,
#      naming the key); before, 1000 ms was accepted with the 60 s default
#      lease, and a fetch longer than 1 s lost its record, its result
#      dropped and its offset committed;
#   2. a fetch that outlasts the ops TTL (4 s against 2 s, the job's own
#      deadline_s longer) still publishes its result: the running record
#      lives as long as its lease, which the fetch renews.
# (The store's rule itself, a running record never expiring before its
# lease, is tests/test_store.c's test_store_running_record_outlives_a_short_ttl.)
source "$(dirname "$0")/lib.sh"
trap 'stop_fixtures; rm -rf "$WORK"' EXIT

rc=0
DEDUPD_STORE__OPS_TTL_MS=1000 timeout 30 "$DEDUPD" run -c "$CFG" >/dev/null 2>"$WORK/refused.log" || rc=$?
expect_eq "$rc" 2 "run exit status with store.ops_ttl_ms below the lease"
grep -qF "store.ops_ttl_ms: 1000 ms ends before a lease (store.lease_ms 60000)" "$WORK/refused.log" ||
  fail "run's reason: $(tail -n 1 "$WORK/refused.log")"
ok "a TTL below the lease is refused, naming store.ops_ttl_ms"

hostile_start slow 127.0.0.1:0
hport=$(head -n 1 "$WORK/slow.port")
printf '{"url":"http://127.0.0.1:%s/slow-headers?s=4&t=%s","deadline_s":20}\n' "$hport" "$T" > "$WORK/job.json"
export DEDUPD_STORE__OPS_TTL_MS=2000 DEDUPD_STORE__LEASE_MS=1000 DEDUPD_FETCH__DEADLINE_MS=2000
export DEDUPD_FETCH__TIMEOUT_MS=10000 DEDUPD_REBALANCE__GRACE_MS=45000
submit "$WORK/job.json" > /dev/null
stats=$(run_until_idle)
expect_eq "$(jq -r '"\(.new) \(.results) \(.failed)"' <<<"$stats")" "1 1 0" "new ops, results, failed"
res=$(topic_dump "$T.results" | jq -r '.payload | fromjson | "\(.outcome) \(.status)"')
expect_eq "$res" "fetched 200" "the result of a 4 s fetch under a 2 s ops TTL"
expect_eq "$(grep -c '/slow-headers' "$WORK/slow.log")" 1 "origin requests"
