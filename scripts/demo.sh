#!/usr/bin/env bash
# The main job end to end on real input:
#   install what is needed, build, start the local stack, submit real jobs (with
#   duplicates, conflicts and malformed ones), run dedupd until it is idle, read
#   the results back with `dedupd tail`, and print what happened.
# The last line is one JSON object.  Exit status non-zero if the origin was
# fetched other than once per logical job, or if a logical job has no result.
# Running it again against the same stack and store re-submits the same jobs and
# fetches nothing new.
#   DEMO_DIR (default .demo)   demo state: dedupd's store, receipts, logs
#   DEMO_JOBS (default 1100)   logical jobs (one page each)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DEMO_DIR=${DEMO_DIR:-$root/.demo}
DEMO_JOBS=${DEMO_JOBS:-1100}

step() { printf '==> %s\n' "$*" >&2; }

step "installing dependencies"
# (helm is for the chart tests only: the demo does not build it)
DEDUPD_SKIP_HELM=${DEDUPD_SKIP_HELM:-1} ./scripts/deps.sh
step "building"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
step "starting the local stack"
./scripts/stack.sh up >&2
eval "$(./scripts/stack.sh env)"

export DEDUPD_BROKER__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP
export DEDUPD_PROXY__EXITS=${PROXY_EXITS// /,}
export DEDUPD_STORE__PATH=$DEMO_DIR/store
export DEDUPD_TAIL__STORE_PATH=$DEMO_DIR/tail
dedupd=$root/build/dedupd
cfg=$root/config/dedupd.json

# The demo's state belongs to one Kafka cluster: a new cluster (stack purged)
# starts the demo afresh, so results and fetch counts refer to the same world.
cluster=$(sed -n 's/^cluster.id=//p' "$STACK_DIR"/kafka/data/meta.properties 2>/dev/null || true)
if [ -f "$DEMO_DIR/cluster" ] && [ "$(cat "$DEMO_DIR/cluster")" != "$cluster" ]; then
  step "the Kafka cluster changed: resetting the demo state"
  rm -rf "$DEMO_DIR"
fi
first_run=0
if [ ! -d "$DEMO_DIR/store" ]; then
  first_run=1
  mkdir -p "$DEMO_DIR"
  echo "$cluster" > "$DEMO_DIR/cluster"
  # Origin fetches are counted from here on in nginx's access log.
  wc -l < "$ORIGIN_ACCESS_LOG" > "$DEMO_DIR/access_log_start"
  # Its own consumer group, so its own changelog: the dedup record of an
  # earlier demo on this stack (which outlives any store) is not this one's.
  echo "demo-$(date +%s)" > "$DEMO_DIR/group"
  # and its token in every URL it submits (below)
  cp "$DEMO_DIR/group" "$DEMO_DIR/token"
fi
if [ -f "$DEMO_DIR/group" ]; then
  # and its own topics, so its counts are this demo's alone
  group=$(cat "$DEMO_DIR/group")
  export DEDUPD_CONSUMER__GROUP_ID=$group DEDUPD_TAIL__GROUP_ID=$group-tail
  export DEDUPD_TOPICS__JOBS=$group.jobs DEDUPD_TOPICS__RESULTS=$group.results
  export DEDUPD_TOPICS__CONFLICTS=$group.conflicts DEDUPD_TOPICS__DLQ=$group.dlq
  "$dedupd" topics -c "$cfg" >/dev/null
fi
log_start=$(cat "$DEMO_DIR/access_log_start")
run_log_start=$(wc -l < "$ORIGIN_ACCESS_LOG")

step "generating jobs over $DEMO_JOBS of the origin's $(grep -c . "$ORIGIN_PAGES") pages"
# Jobs name the origin "localhost" (the exits resolve it), so host-case
# variants such as "LocalHost" exist among the duplicates.
sed 's|^http://127\.0\.0\.1:|http://localhost:|' "$ORIGIN_PAGES" > "$DEMO_DIR/pages.txt"
# Every URL carries this demo's token (its group, fixed with its store): the
# origin's log then tells its fetches from those of another checkout's demo
# or of the tests' smoke run, which share the stack and the pages.  A demo
# state from before the token keeps its URLs (new ones would conflict with
# its job_keys).
demo_token=$(cat "$DEMO_DIR/token" 2>/dev/null || true)
mark=src=demo${demo_token:+&t=$demo_token}
./scripts/gen-jobs.sh "$DEMO_DIR/pages.txt" "$DEMO_JOBS" "$demo_token" > "$DEMO_DIR/jobs.ndjson"
jobs_submitted=$(wc -l < "$DEMO_DIR/jobs.ndjson")

step "submitting $jobs_submitted jobs to $KAFKA_BOOTSTRAP"
"$dedupd" submit -c "$cfg" --allow-invalid "$DEMO_DIR/jobs.ndjson" \
  > "$DEMO_DIR/receipts.ndjson" 2> "$DEMO_DIR/submit.log" || {
  tail -n 5 "$DEMO_DIR/submit.log" >&2; exit 1; }
logical_jobs=$(jq -r 'select(.op_id) | .op_id' "$DEMO_DIR/receipts.ndjson" | sort -u | wc -l)
jq -r 'select(.event_key) | .event_key' "$DEMO_DIR/receipts.ndjson" | sort -u > "$DEMO_DIR/event_keys"

step "running dedupd until idle (log: $DEMO_DIR/run.log)"
t0=$(date +%s.%N)
"$dedupd" run -c "$cfg" --exit-when-idle 4000 --stats-json \
  > "$DEMO_DIR/stats.json" 2> "$DEMO_DIR/run.log" || {
  tail -n 20 "$DEMO_DIR/run.log" >&2; exit 1; }
t1=$(date +%s.%N)

step "reading results back with dedupd tail (fresh tail store)"
rm -rf "$DEMO_DIR/tail"
DEDUPD_TAIL__GROUP_ID="demo-tail-$(date +%s%N)" \
  "$dedupd" tail -c "$cfg" --exit-when-idle 3000 \
  > "$DEMO_DIR/results.ndjson" 2> "$DEMO_DIR/tail.log"
# Results of this demo's logical jobs (the topic may hold others, e.g. tests').
# A conflicting job has its own request_hash, so its event_key matches none.
results_after_dedup=$(jq -r '.event_key' "$DEMO_DIR/results.ndjson" | sort -u \
  | comm -12 - "$DEMO_DIR/event_keys" | wc -l)
fetched_ok=$(jq -r 'select(.outcome == "fetched") | .event_key' "$DEMO_DIR/results.ndjson" \
  | sort -u | comm -12 - "$DEMO_DIR/event_keys" | wc -l)

# Origin side, from nginx's access log: successful answers to the demo's pages
# (since the demo's store was created, and in this run), and 429s in this run.
origin_fetches=$(tail -n +"$((log_start + 1))" "$ORIGIN_ACCESS_LOG" \
  | awk -v t="$mark" 'index($0, t) && $(NF-1) == 200' | wc -l)
new_origin_fetches=$(tail -n +"$((run_log_start + 1))" "$ORIGIN_ACCESS_LOG" \
  | awk -v t="$mark" 'index($0, t) && $(NF-1) == 200' | wc -l)
throttled=$(tail -n +"$((run_log_start + 1))" "$ORIGIN_ACCESS_LOG" \
  | awk -v t="$mark" 'index($0, t) && $(NF-1) == 429' | wc -l)
by_exit=$(tail -n +"$((run_log_start + 1))" "$ORIGIN_ACCESS_LOG" \
  | awk -v t="$mark" 'index($0, t) {n[$1" "$(NF-1)]++} END {for (k in n) printf "%s=%d ", k, n[k]}')

st=$DEMO_DIR/stats.json
dlq=$(jq .invalid "$st")
conflicts=$(jq .conflicts "$st")
rotations=$(jq .rotations "$st")
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')

cat >&2 <<SUMMARY

dedupd demo summary ($([ $first_run = 1 ] && echo "first run" || echo "re-run against the same store"))
  jobs submitted            $jobs_submitted ($(grep -c '"invalid":true' "$DEMO_DIR/receipts.ndjson") malformed)
  logical jobs              $logical_jobs (distinct valid op_ids)
  consumed by dedupd        $(jq .consumed "$st") in ${secs}s
  new ops / duplicates      $(jq .new "$st") / $(( $(jq .duplicates "$st") + $(jq .duplicates_inflight "$st") ))
  conflicts (reported)      $conflicts ($(jq .conflicts_reported "$st"))
  to the DLQ                $dlq
  fetch attempts            $(jq .fetch_attempts "$st"), 429s $(jq .throttled "$st"), rotations $rotations
  origin answers this run   ${by_exit:-none}
  origin fetches (nginx)    $origin_fetches since the store was created, $new_origin_fetches in this run
  results after dedup       $results_after_dedup ($fetched_ok fetched)
SUMMARY

printf '{"jobs_submitted":%d,"logical_jobs":%d,"origin_fetches":%d,"new_origin_fetches":%d,"throttled":%d,"results_after_dedup":%d,"dlq":%d,"conflicts":%d,"rotations":%d,"first_run":%s}\n' \
  "$jobs_submitted" "$logical_jobs" "$origin_fetches" "$new_origin_fetches" "$throttled" \
  "$results_after_dedup" "$dlq" "$conflicts" "$rotations" \
  "$([ $first_run = 1 ] && echo true || echo false)"

[ "$origin_fetches" -eq "$logical_jobs" ] && [ "$results_after_dedup" -eq "$logical_jobs" ]
