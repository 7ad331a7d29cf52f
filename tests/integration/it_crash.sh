#!/usr/bin/env bash
# Crash safety: dedupd is killed with SIGKILL at random moments, 20 times, while
# jobs keep arriving, and restarted each time (static membership lets it rejoin
# at once).  Then it runs to the end and we check, from Kafka and from nginx:
#   - every logical job has exactly one result after downstream dedup (none lost)
#   - every conflict is reported
#   - origin fetches minus logical jobs <= ops that were in flight at the kills
#     (counted as the ops reclaimed after restarts)
#   - the store opens cleanly every time (each restart is a clean open)
# First the premise: every kill hit a live dedupd (kill -9 delivered, exit
# status 137), enough kills hit it with ops in flight (dedupd_ops_inflight of
# its /metrics just before the kill), and the restarts reclaimed ops; else
# "nothing was tested".
source "$(dirname "$0")/lib.sh"
KILLS=${CRASH_KILLS:-10} # the suite's short form; CRASH_KILLS=20 (or more) for the long one
export DEDUPD_FETCH__MAX_INFLIGHT=32
export DEDUPD_STORE__LEASE_MS=30000
export DEDUPD_FETCH__TIMEOUT_MS=60000   # the largest page takes ~28 s from /slow/
export DEDUPD_REBALANCE__GRACE_MS=90000 # at least fetch.timeout_ms + request.timeout.ms

# Workload: 40 logical jobs per round (one page each), each sent twice, and
# every round re-sends 10 jobs of the round before; 4 conflicts at the end.
# Pages come from /slow/ (the origin sends them at 16 KiB/s), so fetches are in
# flight when the kills land.
awk -v n=$(( KILLS * 40 + 40 )) '/\.html$/ && k++ < n {sub("/docs/", "/slow/"); print}' "$ORIGIN_PAGES" > "$WORK/pages"
split -l 40 -d -a 3 "$WORK/pages" "$WORK/round."
rounds=("$WORK"/round.*)
mark=$(log_mark)
RANDOM=7
kills=0
for (( r = 0; r < ${#rounds[@]}; r++ )); do
  { sed "s|\$|?t=$T|" "${rounds[$r]}" | jq -Rc '{url: .}'
    sed "s|\$|?t=$T|" "${rounds[$r]}" | jq -Rc '{url: .}'
    if (( r > 0 )); then head -n 10 "${rounds[$((r - 1))]}" | sed "s|\$|?t=$T|" | jq -Rc '{url: .}'; fi
  } > "$WORK/jobs.$r"
  submit "$WORK/jobs.$r" > /dev/null
  if (( kills < KILLS )); then
    "$DEDUPD" run -c "$CFG" 2>>"$WORK/run.$r.log" &
    pid=$!
    # Kill at a random moment: during start-up, while consuming, mid-fetch.
    sleep "$(awk -v r=$RANDOM 'BEGIN{printf "%.2f", 0.3 + (r % 200) / 100}')"
    # what the kill interrupts: the ops in flight a moment before (its
    # /metrics, once the admin listener is up; "-" during start-up)
    inflight=-
    if port=$(grep -m1 -o 'admin listener on port [0-9]*' "$WORK/run.$r.log"); then
      inflight=$({ curl -s --max-time 1 "http://127.0.0.1:${port##* }/metrics" || true; } | metric dedupd_ops_inflight)
    fi
    kill -9 "$pid" || fail "round $r: dedupd was gone before its kill: $(tail -n 3 "$WORK/run.$r.log")"
    rc=0; wait "$pid" 2>/dev/null || rc=$?
    [ "$rc" = 137 ] || fail "round $r: dedupd ended with status $rc, not by the SIGKILL (137): $(tail -n 3 "$WORK/run.$r.log")"
    echo "$r $inflight" >> "$WORK/kills"
    kills=$((kills + 1))
    if grep -q '"level":"\(error\|crit\)".*store' "$WORK/run.$r.log"; then
      fail "store error after restart $r: $(grep store "$WORK/run.$r.log" | tail -n 1)"
    fi
  fi
done
# Conflicts: same job_key, two different requests.
for i in 1 2 3 4; do
  u=$(sed -n "${i}p" "$WORK/pages")
  printf '{"url":"%s?t=%s&v=1","job_key":"crash-%d"}\n{"url":"%s?t=%s&v=2","job_key":"crash-%d"}\n' \
    "$u" "$T" "$i" "$u" "$T" "$i"
done > "$WORK/conflicts"
submit "$WORK/conflicts" > /dev/null
stats=$(IDLE_MS=3000 run_until_idle)
echo "final run: $stats"
echo "ops in flight at each kill (round ops): $(tr '\n' ' ' < "$WORK/kills")"
expect_eq "$kills" "$KILLS" "kills of a live dedupd (status 137)"
hits=$(awk '$2 ~ /^[0-9]+$/ && $2 > 0' "$WORK/kills" | wc -l)
(( hits * 4 >= KILLS )) || nothing_tested "only $hits of $KILLS kills landed with ops in flight"
ok "$hits of $KILLS kills landed with ops in flight"

cat "$WORK"/jobs.* "$WORK/conflicts" > "$WORK/all"
# Logical jobs: distinct op_ids.
logical=$(jq -r .url "$WORK"/jobs.* | sort -u | wc -l)
logical=$(( logical + 4 ))
tail_results > "$WORK/results.ndjson"
expect_eq "$(jq -r .op_id "$WORK/results.ndjson" | sort -u | wc -l)" "$logical" "logical jobs with a result after dedup"
expect_eq "$(wc -l < "$WORK/results.ndjson")" "$logical" "results after dedup"
jq -c 'select(.outcome != "fetched") | {url, category, error, attempts}' "$WORK/results.ndjson" >&2
expect_eq "$(jq -r 'select(.outcome != "fetched") | .op_id' "$WORK/results.ndjson" | wc -l)" 0 "failed results"
topic_dump "$T.conflicts" > "$WORK/conflicts.json"
expect_eq "$(jq -r '.payload | fromjson | .op_id + " " + .conflicting_request_hash' "$WORK/conflicts.json" | sort -u | wc -l)" 4 "conflicts reported"
echo "conflict records on the topic: $(wc -l < "$WORK/conflicts.json") (4 distinct)"

fetches=$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)
reclaimed=$(cat "$WORK"/run.*.log "$WORK/run.log" | grep -c 'reclaimed op at generation' || true)
extra=$(( fetches - logical ))   # the second request of each conflict is never fetched
echo "origin fetches $fetches, logical jobs $logical, extra fetches $extra, ops in flight at kills (reclaimed) $reclaimed"
(( reclaimed > 0 )) || nothing_tested "no op was reclaimed after a kill"
(( extra >= 0 )) || fail "fewer fetches than logical jobs: a job was never fetched"
(( extra <= reclaimed )) || fail "$extra extra origin fetches but only $reclaimed ops were in flight at the kills"
ok "extra origin fetches ($extra) <= ops in flight at kills ($reclaimed)"
