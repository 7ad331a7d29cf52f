#!/usr/bin/env bash
# The hot index past its bound (store.index_max_bytes; DESIGN.md section 4):
# a store with more live ops than the index holds decides every job as one
# with room would.  20,000 distinct shadow jobs (100 of them keyed) go through
# an index of 256 KiB (8,192 slots, about 6,500 op_ids), then every job again
# (the keyed ones with another URL) through a new run on the same store:
#   - the first run (premise: its index ends with fewer entries than ops):
#     20,000 new ops, 20,000 results; /metrics says dedupd_index_complete 0
#     at its end and the log warns once, naming store.index_max_bytes
#   - the second run (premise: its index rebuilt from the store, lossy; it
#     warns once too): 0 new, 19,900 duplicates and 100 conflicts, decided by
#     RocksDB reads for the op_ids the index lacks
# How often a full segment purges is tested in unit_store_index.
source "$(dirname "$0")/lib.sh"
export DEDUPD_STORE__INDEX_MAX_BYTES=262144
N=20000 K=100
base="${ORIGIN_URL%/}/bound/$T"
seq 1 $((N - K)) | jq -Rc --arg b "$base" '{url: ($b + "/" + .)}' > "$WORK/wave1"
seq 1 $K | jq -Rc --arg b "$base" '{url: ($b + "/keyed/" + .), job_key: ("k-" + .)}' >> "$WORK/wave1"
seq 1 $((N - K)) | jq -Rc --arg b "$base" '{url: ($b + "/" + .)}' > "$WORK/wave2"
seq 1 $K | jq -Rc --arg b "$base" '{url: ($b + "/other/" + .), job_key: ("k-" + .)}' >> "$WORK/wave2"
"$DEDUPD" topics -c "$CFG" --shadow --partitions 4 >/dev/null
submit "$WORK/wave1" > /dev/null

from=$(( $(wc -l < "$WORK/run.log" 2>/dev/null || echo 0) + 1 ))
"$DEDUPD" run -c "$CFG" --shadow --exit-when-idle 2500 --stats-json \
  > "$WORK/stats1.json" 2>>"$WORK/run.log" &
pid=$!
watch_metrics "$pid" "$WORK/run.log" "$from"
wait "$pid" || { tail -n 20 "$WORK/run.log" >&2; fail "the first run failed"; }
stats=$(cat "$WORK/stats1.json")
echo "first run: $stats"
entries=$(metric dedupd_index_entries "$WORK/metrics.last")
[ "$entries" != absent ] && [ "$entries" -lt "$N" ] ||
  nothing_tested "index entries $entries at the end: the bound was not reached"
ok "index entries $entries < $N (the bound was reached)"
expect_eq "$(metric dedupd_index_complete "$WORK/metrics.last")" 0 "dedupd_index_complete at the end"
expect_eq "$(tail -n +"$from" "$WORK/run.log" | grep -c 'hot index is past store.index_max_bytes' || true)" 1 \
  "warnings naming store.index_max_bytes in the first run"
expect_eq "$(jq .new <<<"$stats")" "$N" "new ops"
expect_eq "$(jq .results <<<"$stats")" "$N" "shadow results"
expect_eq "$(jq '.duplicates + .duplicates_inflight + .conflicts' <<<"$stats")" 0 "duplicates and conflicts"

submit "$WORK/wave2" > /dev/null
from=$(( $(wc -l < "$WORK/run.log") + 1 ))
stats=$(run_until_idle --shadow)
tail -n +"$from" "$WORK/run.log" | grep -q 'index rebuilt .*a cache only (lossy)' ||
  nothing_tested "the second run's index was rebuilt complete (not past its bound)"
ok "the second run's index rebuilt past its bound (lossy)"
expect_eq "$(tail -n +"$from" "$WORK/run.log" | grep -c 'hot index is past store.index_max_bytes' || true)" 1 \
  "the second run warns once too (its rebuild ended past the bound)"
echo "second run: $stats"
expect_eq "$(jq .new <<<"$stats")" 0 "second run: new ops"
expect_eq "$(jq '.duplicates + .duplicates_inflight' <<<"$stats")" $((N - K)) "second run: duplicates"
expect_eq "$(jq .conflicts <<<"$stats")" "$K" "second run: conflicts (job_key, another URL)"
expect_eq "$(jq .results <<<"$stats")" 0 "second run: results"
