#!/usr/bin/env bash
# The README's Commands, as a user meets them (each promise its own check):
#   key      prints canonical, normalized_url, op_id, request_hash, event_key;
#            the op_id is the one submit gives the same job; query order does
#            not matter; exit 3 with the reason on an invalid job, 2 on no file
#   submit   exit 3 when a line is not a valid job, and sends none of those
#            lines (the valid ones are sent, one receipt each); with the
#            producer's queue full it waits for room and loses no line
#   topics   defaults: 4 partitions, the broker's replication factor
#   inspect  exit 4 with no store, exit 4 for an op not in the store, the op
#            record and its attempts for one that is, and the message naming
#            `run` when run holds the store
#   forget   exit 0 once the control message is acknowledged; the run drops
#            the op, the next job is fetched again (one more origin request)
#            and its result has the same event_key and a newer fetched_at
#   redrive  --dry-run sends nothing and counts what it would do; without
#            --all still-invalid records stay; --all sends those too
#   run      exit 2 with the reason when kafka.* picks a cooperative assignor,
#            and when an output topic does not exist (naming it)
source "$(dirname "$0")/lib.sh"
IDLE_MS=1500 # each run ends 1.5 s after its last message

# count_topic TOPIC: messages on TOPIC (kcat's own failure fails the test, so
# an unreadable topic is never "0 messages").
count_topic() {
  local out
  out=$(kcat -b "$KAFKA_BOOTSTRAP" -C -t "$1" -o beginning -e -q -f 'x\n' 2>"$WORK/kcat.err") ||
    fail "kcat -C -t $1: $(cat "$WORK/kcat.err")"
  [ -z "$out" ] && echo 0 || wc -l <<<"$out"
}

# ---- key -------------------------------------------------------------------
u=$(pages 1)
printf '{"url":"%s&b=1&a=2"}\n' "$u" > "$WORK/k1.json"
printf '{"url":"%s&a=2&b=1"}\n' "$u" > "$WORK/k2.json"
"$DEDUPD" key "$WORK/k1.json" > "$WORK/key1.out" || fail "key exit $?"
expect_eq "$(jq -r 'keys_unsorted | join(",")' "$WORK/key1.out")" \
  canonical,normalized_url,op_id,request_hash,event_key "key's fields"
sorted="${u%%\?*}?a=2&b=1&t=$T"
expect_eq "$(jq -r .normalized_url "$WORK/key1.out")" "$sorted" "key: query sorted in the normalized URL"
expect_eq "$(jq -r '.canonical | fromjson | .url' "$WORK/key1.out")" "$sorted" "key: the canonical request holds that URL"
"$DEDUPD" key "$WORK/k2.json" > "$WORK/key2.out" || fail "key exit $?"
expect_eq "$(jq -r .op_id "$WORK/key2.out")" "$(jq -r .op_id "$WORK/key1.out")" "key: the same op_id for both query orders"
[[ "$(jq -r .op_id "$WORK/key1.out")" =~ ^[0-9a-f]{64}$ ]] || fail "key: op_id is not 64 hex digits"
printf '{"url":"ftp://127.0.0.1/x"}\n' > "$WORK/bad.json"
rc=0; "$DEDUPD" key "$WORK/bad.json" >"$WORK/keybad.out" 2>"$WORK/keybad.err" || rc=$?
expect_eq "$rc" 3 "key exit status on an invalid job"
expect_eq "$(cat "$WORK/keybad.err")" "dedupd: key: field 'url': scheme 'ftp' is not http or https" "key's reason"
expect_eq "$(wc -c <"$WORK/keybad.out")" 0 "key prints nothing on stdout for an invalid job"
rc=0; "$DEDUPD" key "$WORK/absent.json" >/dev/null 2>&1 || rc=$?
expect_eq "$rc" 2 "key exit status with no such file"

# ---- topics ----------------------------------------------------------------
# lib.sh made this test's topics with --partitions 4; a fresh name shows the
# defaults.
DEDUPD_TOPICS__JOBS=$T.defaults "$DEDUPD" topics -c "$CFG" >/dev/null 2>"$WORK/topics.err" ||
  fail "topics: $(cat "$WORK/topics.err")"
kcat -b "$KAFKA_BOOTSTRAP" -L -J -t "$T.defaults" > "$WORK/meta.json" || fail "kcat -L"
expect_eq "$(jq '.topics[0].partitions | length' "$WORK/meta.json")" 4 "topics: default partitions"
expect_eq "$(jq '[.topics[0].partitions[].replicas | length] | unique | join(",")' -r "$WORK/meta.json")" \
  "$(jq '.brokers | length' "$WORK/meta.json")" "topics: replication factor = the broker's default (one broker here)"

# ---- submit ----------------------------------------------------------------
pages 3 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
{ head -n 1 "$WORK/jobs.ndjson"; echo '{"url":"ftp://127.0.0.1/never"}'; tail -n 2 "$WORK/jobs.ndjson"; } \
  > "$WORK/mixed.ndjson"
rc=0; submit "$WORK/mixed.ndjson" > "$WORK/receipts.ndjson" || rc=$?
expect_eq "$rc" 3 "submit exit status with an invalid line"
expect_eq "$(jq -r .line "$WORK/receipts.ndjson" | sort -n | paste -sd,)" 1,3,4 "receipts: the valid lines only"
expect_eq "$(count_topic "$T.jobs")" 3 "messages on the jobs topic (none of the invalid line)"
dump=$(topic_dump "$T.jobs")
grep -q never <<<"$dump" && fail "the invalid line reached the jobs topic"
ok "the invalid line was not sent"
op=$(jq -r 'select(.line == 1) | .op_id' "$WORK/receipts.ndjson")
printf '%s\n' "$(head -n 1 "$WORK/jobs.ndjson")" > "$WORK/one.json"
expect_eq "$("$DEDUPD" key "$WORK/one.json" | jq -r .op_id)" "$op" "key's op_id = submit's receipt op_id"

# ---- submit with librdkafka's queue full: lines wait, none is lost ----------
# (queue.buffering.max.messages 5: the 6th line in a row finds the queue full;
# submit serves delivery reports until there is room instead of dropping it)
for i in $(seq 200); do echo "{\"url\":\"http://127.0.0.1:1/q?t=$T&n=$i\"}"; done > "$WORK/qfull.ndjson"
DEDUPD_TOPICS__JOBS=$T.qfull "$DEDUPD" topics -c "$CFG" >/dev/null 2>>"$WORK/submit.log" ||
  fail "dedupd topics for $T.qfull failed"
rc=0; DEDUPD_TOPICS__JOBS=$T.qfull DEDUPD_KAFKA__QUEUE__BUFFERING__MAX__MESSAGES=5 \
  "$DEDUPD" submit -c "$CFG" "$WORK/qfull.ndjson" > "$WORK/qfull.receipts" 2>"$WORK/qfull.err" || rc=$?
expect_eq "$rc" 0 "submit exit status with a 5-message producer queue ($(tail -n 1 "$WORK/qfull.err"))"
expect_eq "$(wc -l < "$WORK/qfull.receipts")" 200 "receipts with a 5-message producer queue"
expect_eq "$(count_topic "$T.qfull")" 200 "messages on the topic with a 5-message producer queue"

# ---- inspect before any run: no store --------------------------------------
rc=0; "$DEDUPD" inspect -c "$CFG" "$op" >/dev/null 2>"$WORK/i0.err" || rc=$?
expect_eq "$rc" 4 "inspect exit status with no store"
[ ! -e "$DEDUPD_STORE__PATH" ] || fail "inspect created a store at $DEDUPD_STORE__PATH"
ok "inspect created no store"

mark=$(log_mark)
stats=$(run_until_idle)
expect_eq "$(jq .results <<<"$stats")" 3 "results of the first run"
path=$(jq -r 'select(.line == 1) | .op_id' "$WORK/receipts.ndjson" >/dev/null; head -n 1 "$WORK/jobs.ndjson" | jq -r .url)
path=${path#"$ORIGIN_URL"}
expect_eq "$(log_since "$mark" | grep -cF "GET $path ")" 1 "origin requests for the first job"

# ---- inspect ---------------------------------------------------------------
"$DEDUPD" inspect -c "$CFG" "$op" --json > "$WORK/i1.json" 2>/dev/null || fail "inspect exit $?"
expect_eq "$(jq -r '"\(.op_id) \(.state) \(.generation) \(.outbox) \(.attempts)"' "$WORK/i1.json")" \
  "$op complete 1 sent 1" "inspect --json: op_id state generation outbox attempts"
expect_eq "$(jq -r '.attempt_log | map("\(.number):\(.status)") | join(",")' "$WORK/i1.json")" 1:200 "inspect: the attempt"
"$DEDUPD" inspect -c "$CFG" "$op" > "$WORK/i1.txt" 2>/dev/null || fail "inspect (text) exit $?"
expect_eq "$(awk '$1 == "state" {print $2}' "$WORK/i1.txt")" complete "inspect (text): state"
rc=0; "$DEDUPD" inspect -c "$CFG" "0000$op" >/dev/null 2>"$WORK/i2.err" || rc=$?
expect_eq "$rc" 4 "inspect exit status for an op not in the store"
grep -qF "op 0000$op is not in the store" "$WORK/i2.err" || fail "inspect's message: $(cat "$WORK/i2.err")"
ok "inspect names the missing op"

# ---- forget ----------------------------------------------------------------
fetched1=$(topic_dump "$T.results" | jq -r --arg op "$op" '.payload | fromjson | select(.op_id == $op) | .fetched_at')
ek1=$(jq -r .event_key "$WORK/i1.json")
out=$("$DEDUPD" forget -c "$CFG" "$op" 2>"$WORK/forget.err") || fail "forget: $(cat "$WORK/forget.err")"
like "$out" "forget $op sent to $T.jobs partition <n>: its owner drops the op" || fail "forget's output: $out"
ok "forget: a control message to the op's partition"
submit "$WORK/one.json" > /dev/null
mark=$(log_mark)
stats=$(run_until_idle)
expect_eq "$(jq -r '"\(.new) \(.results)"' <<<"$stats")" "1 1" "after forget: new ops and results"
expect_eq "$("$DEDUPD" inspect -c "$CFG" --json "$op" | jq -r '"\(.state) \(.generation)"')" "complete 3" \
  "after forget: the op's state and generation (forgotten at 2, fetched at 3)"
expect_eq "$(log_since "$mark" | grep -cF "GET $path ")" 1 "after forget: the job was fetched again"
topic_dump "$T.results" | jq -c --arg op "$op" '.payload | fromjson | select(.op_id == $op) | {event_key, fetched_at}' \
  > "$WORK/forgot.ndjson"
expect_eq "$(wc -l < "$WORK/forgot.ndjson")" 2 "results of the forgotten op"
expect_eq "$(jq -r .event_key "$WORK/forgot.ndjson" | sort -u | paste -sd,)" "$ek1" "both under the same event_key"
fetched2=$(tail -n 1 "$WORK/forgot.ndjson" | jq -r .fetched_at)
[[ "$fetched2" > "$fetched1" ]] || fail "fetched_at not newer: $fetched1 then $fetched2"
ok "newer fetched_at ($fetched1 -> $fetched2)"

# ---- inspect while run holds the store --------------------------------------
"$DEDUPD" run -c "$CFG" 2>"$WORK/held.log" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do grep -q 'admin listener on port' "$WORK/held.log" && break; sleep 0.1; done
grep -q 'admin listener on port' "$WORK/held.log" || fail "run did not start"
for cmd in inspect; do
  rc=0; "$DEDUPD" "$cmd" -c "$CFG" "$op" >/dev/null 2>"$WORK/held.err" || rc=$?
  expect_eq "$rc" 1 "$cmd exit status while run holds the store"
  grep -qF 'the store is in use, most likely by `dedupd run`; while it runs, ask it: GET /v1/ops/{op_id}' "$WORK/held.err" ||
    fail "$cmd's message while run holds the store: $(cat "$WORK/held.err")"
  ok "$cmd says run holds the store"
done
kill -TERM "$pid"; wait "$pid" || fail "run exit $? after SIGTERM"

# ---- redrive ---------------------------------------------------------------
# Two DLQ records: a valid job whose op-id header contradicts it (redriven),
# and a still-invalid one (kept unless --all).
u4=$(pages 4 | tail -n 1)
printf '{"url":"%s"}' "$u4" | kcat -b "$KAFKA_BOOTSTRAP" -P -t "$T.jobs" -k wrong -H dedupd-op-id=wrong
echo 'still not json' | kcat -b "$KAFKA_BOOTSTRAP" -P -t "$T.jobs"
stats=$(run_until_idle)
expect_eq "$(jq .invalid <<<"$stats")" 2 "DLQ records to redrive"
jobs_before=$(count_topic "$T.jobs")
"$DEDUPD" redrive -c "$CFG" --dry-run > "$WORK/dry.out" 2> "$WORK/dry.err" || fail "redrive --dry-run exit $?"
grep -qF "redrive: 2 DLQ records, 1 would be redriven, 1 kept (still invalid), 0 failed" "$WORK/dry.err" ||
  fail "redrive --dry-run summary: $(cat "$WORK/dry.err")"
ok "redrive --dry-run counts what it would do"
expect_eq "$(count_topic "$T.jobs")" "$jobs_before" "jobs topic after --dry-run (nothing sent)"
"$DEDUPD" redrive -c "$CFG" --dry-run > /dev/null 2>&1 || fail "second --dry-run"
"$DEDUPD" redrive -c "$CFG" --all > "$WORK/all.out" 2> "$WORK/all.err" || fail "redrive --all exit $?"
expect_eq "$(grep -c '"redriven":true' "$WORK/all.out")" 2 "redrive --all sends both records (the dry runs consumed nothing)"
expect_eq "$(count_topic "$T.jobs")" "$((jobs_before + 2))" "jobs topic after --all"
# (topic_dump reads partition by partition: count, do not rely on order)
expect_eq "$(topic_dump "$T.jobs" | jq -r .payload | grep -c '^still not json$')" 2 \
  "the still-invalid record was sent as it was (the original and the redriven copy)"

# ---- run refuses a cooperative assignor ------------------------------------
rc=0; DEDUPD_KAFKA__PARTITION__ASSIGNMENT__STRATEGY=cooperative-sticky DEDUPD_STORE__PATH=$WORK/coop \
  DEDUPD_ADMIN__LISTEN=127.0.0.1:0 DEDUPD_API__LISTEN= "$DEDUPD" run -c "$CFG" >/dev/null 2>"$WORK/coop.err" || rc=$?
expect_eq "$rc" 2 "run exit status with kafka.partition.assignment.strategy=cooperative-sticky"
grep -qF "config: kafka.partition.assignment.strategy: cooperative-sticky is refused: dedupd's rebalance (drain, release, changelog restore) is built for the eager protocol" "$WORK/coop.err" ||
  fail "run's reason for refusing cooperative-sticky: $(cat "$WORK/coop.err")"
ok "run says why cooperative-sticky is refused"

# ---- run refuses a missing output topic --------------------------------------
# (before: every result was retried every 5 s for ever, the process looking
# alive; issue 15)
rc=0; DEDUPD_TOPICS__RESULTS=$T.no-such-results DEDUPD_STORE__PATH=$WORK/missing \
  DEDUPD_ADMIN__LISTEN=127.0.0.1:0 DEDUPD_API__LISTEN= timeout 60 "$DEDUPD" run -c "$CFG" >/dev/null 2>"$WORK/missing.err" || rc=$?
expect_eq "$rc" 2 "run exit status with a results topic that does not exist"
grep -qF "topics.results: topic $T.no-such-results does not exist (create it: dedupd topics -c FILE)" "$WORK/missing.err" ||
  fail "run's reason for a missing results topic: $(cat "$WORK/missing.err")"
ok "run names the missing results topic and dedupd topics"
