#!/usr/bin/env bash
# Scale-out (issue 12): one consumer group on a 12-partition jobs topic whose
# members come and go while jobs with duplicates and conflicts keep arriving.
# Three instances (a b c) start; then, as the origin's fetch count passes 15%,
# 35%, 55% and 70% of the logical jobs: d joins, a is stopped (SIGTERM), b is
# killed (-9), and b2 (another instance.id, an empty store: a replaced pod)
# joins.  Every partition that moves is restored from the changelog before its
# messages are processed, and revokes drain or release what was in flight, so,
# counted independently of dedupd (nginx's access log; the results and
# conflicts topics read with kcat; the group's committed offsets):
#   - every logical job (distinct op_id) has exactly one event_key on the
#     results topic, and no result is a failure
#   - every conflict (a job_key reused with another request) is reported
#   - origin fetches - logical jobs <= 16, fetch.max_inflight of the killed
#     instance (its fetches in flight may be made again; nothing else may)
#   - the group's committed offsets reach the end of all 12 partitions
#
# Workload: jobs in rounds of 200 logical jobs, one round every 2 s (`dedupd
# submit`); each round also carries a copy of its own jobs, a copy of the
# previous round's in another URL form that normalizes alike, a copy of the
# round before that, and the conflicting requests of that round's job_keys
# (every 40th job has one).  A third of the jobs are slow (/slow/ pages of
# 17..34 KiB: 1..2 s each), the rest are fast, so fetches are in flight at
# every membership change.
#
# Short form by default (2000 logical jobs, about a minute on 2 cores);
# SCALEOUT_JOBS=50000 for the long form (about 10 minutes; not in the suite).
PARTITIONS=12
source "$(dirname "$0")/lib.sh"
multi_setup
pin_dedupd
export DEDUPD_FETCH__MAX_INFLIGHT=16
export DEDUPD_STORE__LEASE_MS=5000 # ops of the killed instance are taken over after 5 s
L=${SCALEOUT_JOBS:-2000}
CHUNK=200
MULTI_IDLE_LIMIT_S=$(( 120 + L / 20 ))

# ---- the jobs ---------------------------------------------------------------
logical_jobs "$L" 3 40 so > "$WORK/logical.ndjson"
split -l $CHUNK -d -a 4 "$WORK/logical.ndjson" "$WORK/chunk."
chunks=("$WORK"/chunk.????)
R=${#chunks[@]}
for (( r = 0; r < R + 2; r++ )); do
  {
    (( r < R )) && cat "${chunks[$r]}" "${chunks[$r]}"
    (( r >= 1 && r - 1 < R )) && sed 's|"url":"http://|"url":"HTTP://|' "${chunks[$((r - 1))]}"
    if (( r >= 2 && r - 2 < R )); then
      cat "${chunks[$((r - 2))]}"
      jq -c 'select(.job_key) | .url += "&v=2"' "${chunks[$((r - 2))]}"
    fi
  } > "$WORK/round.$r"
done
total=$(cat "$WORK"/round.* | wc -l)
nconf=$(jq -r 'select(.job_key) | .job_key' "$WORK/logical.ndjson" | wc -l)
echo "$L logical jobs, $total messages in $((R + 2)) rounds, $nconf conflicts"

# ---- the run ----------------------------------------------------------------
for n in a b c; do inst_start "$n"; done
for n in a b c; do inst_ready "$n"; done
mark=$(log_mark)
(
  for (( r = 0; r < R + 2; r++ )); do
    submit "$WORK/round.$r" >> "$WORK/receipts.ndjson" || exit 1
    sleep 2
  done
) &
SUBMITTER=$!
FIXTURE_PIDS+=("$SUBMITTER")
progress() { origin_200s "$mark"; }
at() { # at PERCENT: waits until the origin's fetches pass PERCENT of L
  local end=$(( $(date +%s) + MULTI_IDLE_LIMIT_S ))
  until (( $(progress) * 100 >= $1 * L )); do
    (( $(date +%s) < end )) || fail "fetches stuck at $(progress) of $L: $(multi_status "${live[@]}")"
    sleep 0.3
  done
  echo "at $(progress) fetches of $L: $2"
}
live=(a b c)
at 15 "d joins"; inst_start d; live+=(d)
at 35 "a stops (SIGTERM)"; inst_stop a; live=(b c d)
at 55 "b is killed (-9)"
# the kill must find ops in flight (the gauge is refreshed once a second;
# right after a rebalance b may be restoring): wait up to 10 s for some
for _ in $(seq 1 100); do
  b_inflight=$(inst_metric b dedupd_ops_inflight)
  [[ $b_inflight =~ ^[0-9]+$ ]] && (( b_inflight > 0 )) && break
  sleep 0.1
done
inst_kill b; live=(c d)
at 70 "b2 joins (another instance.id, an empty store)"
inst_start b2 DEDUPD_INSTANCE__ID="$T-b-replaced"; live+=(b2)
chaos_done=$(progress)
wait "$SUBMITTER" || fail "dedupd submit failed: $(tail -n 3 "$WORK/submit.log")"
multi_wait_idle "$PARTITIONS" c d b2
for n in c d b2; do inst_stop "$n"; done
echo "events: $(cut -c1-8,13- "$WORK/events" | paste -sd ';')"

# ---- the counts -------------------------------------------------------------
fetches=$(progress)
jq -r .op_id "$WORK/receipts.ndjson" | sort -u > "$WORK/logical.ops"
logical=$(wc -l < "$WORK/logical.ops")
topic_dump "$T.results" | jq -r '.payload | fromjson | "\(.op_id) \(.event_key) \(.outcome)"' > "$WORK/results"
sort -u -k1,2 "$WORK/results" | awk '{print $1}' | uniq -c | awk '$1 > 1 {print $2}' > "$WORK/ops.multi"
awk '{print $1}' "$WORK/results" | sort -u | comm -23 "$WORK/logical.ops" - > "$WORK/ops.missing"
failed=$(awk '$3 != "fetched"' "$WORK/results" | wc -l)
topic_dump "$T.conflicts" | jq -r '.payload | fromjson | .op_id' | sort -u > "$WORK/conflict.ops"
jq -r 'select(.job_key) | "default:" + .job_key' "$WORK/logical.ndjson" | sort -u | comm -23 - "$WORK/conflict.ops" > "$WORK/conflicts.missing"
log_since "$mark" | awk '$(NF-1) == 200 {print $3}' | sort | uniq -c | awk '$1 > 1' > "$WORK/refetched"
read -r lag_parts lag < <(committed_lag "$T")
extra=$((fetches - logical))
echo "messages $total, logical jobs $logical, origin fetches $fetches (extra $extra; URLs fetched more than once $(wc -l < "$WORK/refetched")), b's ops in flight at its kill $b_inflight"
echo "results $(wc -l < "$WORK/results"), logical jobs with more than one event_key $(wc -l < "$WORK/ops.multi"), without a result $(wc -l < "$WORK/ops.missing"), failed results $failed"
echo "conflicts $nconf, reported $(wc -l < "$WORK/conflict.ops"), never reported $(wc -l < "$WORK/conflicts.missing"); committed offsets on $lag_parts of $PARTITIONS partitions, $lag messages past them"

# the premise: the membership changed while fetches were still to be made
(( chaos_done < logical )) || nothing_tested "every job was fetched before the last membership change"
[[ $b_inflight =~ ^[0-9]+$ ]] && (( b_inflight > 0 )) || nothing_tested "b had no op in flight when it was killed ($b_inflight)"
for n in d b2; do
  grep -qE '"(assigned [1-9][0-9]* partitions)' "${INST_LOG[$n]}" || nothing_tested "$n never got a partition"
done

failures=()
(( logical == L )) || failures+=("logical jobs (distinct op_ids of the receipts) $logical, not $L")
[ -s "$WORK/ops.multi" ] && failures+=("$(wc -l < "$WORK/ops.multi") logical jobs have more than one event_key on the results topic (e.g. $(head -n 1 "$WORK/ops.multi"))")
[ -s "$WORK/ops.missing" ] && failures+=("$(wc -l < "$WORK/ops.missing") logical jobs have no result (e.g. $(head -n 1 "$WORK/ops.missing"))")
(( failed == 0 )) || failures+=("$failed results are not outcome fetched")
[ -s "$WORK/conflicts.missing" ] && failures+=("$(wc -l < "$WORK/conflicts.missing") of $nconf conflicts never reported (e.g. $(head -n 1 "$WORK/conflicts.missing"))")
(( extra >= 0 )) || failures+=("fewer origin fetches ($fetches) than logical jobs ($logical)")
(( extra <= 16 )) || failures+=("origin fetches $fetches - logical jobs $logical = $extra > 16 (fetch.max_inflight of the killed instance)")
(( lag_parts == PARTITIONS && lag == 0 )) || failures+=("committed offsets on $lag_parts of $PARTITIONS partitions, $lag messages past them")
(( ${#failures[@]} == 0 )) || fail "$(printf '%s; ' "${failures[@]}")"
ok "every logical job once, every conflict reported, $extra extra origin fetches (<= 16)"
