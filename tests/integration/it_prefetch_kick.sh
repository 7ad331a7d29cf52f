#!/usr/bin/env bash
# The prefetch kick (consumer.prefetch_kick_ms, include/prefetch_kick.h):
# while a backlog drains, dedupd wakes librdkafka 2.0.2's fetcher, which
# otherwise stops at queued.min.messages and looks again only up to 1 s later.
#   - a backlog of 20,000 jobs read through a tiny prefetch queue
#     (kafka.queued.min.messages=500, 16 KB fetches: the fetcher stops and
#     starts again dozens of times): every job decided once, one shadow
#     result each, the kick answered by the brokers at least 3 times and at
#     most once per drained queue (a drain takes at least 250 messages: <= 80)
#   - a trickle (jobs submitted 40 at a time while dedupd runs) never fills
#     the queue: no kick
#   - consumer.prefetch_kick_ms=0 turns it off: the same jobs again, all
#     duplicates, no kick
# How much sooner the backlog drains is a benchmark (bench row 1 prints the
# replay with the kick off beside it), not asserted here.
source "$(dirname "$0")/lib.sh"
N=20000
"$DEDUPD" topics -c "$CFG" --shadow --partitions 4 >/dev/null
pages 1 | awk -v n=$N '{for (i = 1; i <= n; i++) printf "{\"url\":\"%s&n=%d\"}\n", $0, i}' \
  > "$WORK/jobs.ndjson"
expect_eq "$(wc -l < "$WORK/jobs.ndjson")" $N "jobs generated"
submit "$WORK/jobs.ndjson" > /dev/null

# 16 KB per partition per fetch (about 100 jobs): the queue fills and drains
# in steps of a few fetches, each a stop of librdkafka's fetcher
stats=$(DEDUPD_KAFKA__QUEUED__MIN__MESSAGES=500 DEDUPD_KAFKA__MAX__PARTITION__FETCH__BYTES=16384 \
  run_until_idle --shadow)
echo "kick on: $stats"
expect_eq "$(jq .consumed <<<"$stats")" $N "consumed"
expect_eq "$(jq .new <<<"$stats")" $N "new ops"
expect_eq "$(jq .results <<<"$stats")" $N "shadow results"
kicks=$(jq .prefetch_kicks <<<"$stats")
# about 400 jobs a fetch round, 250 a drain: the queue fills and drains
# again and again (8 to 31 kicks in five runs here); a rule that looked at
# the queue only after a poll (which takes up to 1,024) saw it full at most
# once
[ "$kicks" -ge 3 ] || fail "$kicks prefetch kicks while $N jobs drained through a 500-message queue in 16 KB fetches"
[ "$kicks" -le $((N / 250)) ] || fail "$kicks prefetch kicks: more than one per drained queue"
ok "prefetch kicks: $kicks"
expect_eq "$(topic_dump "shadow.$T.results" | jq -r .key | sort -u | wc -l)" $N \
  "distinct event_keys on shadow.$T.results"

submit "$WORK/jobs.ndjson" > /dev/null
stats=$(DEDUPD_KAFKA__QUEUED__MIN__MESSAGES=500 DEDUPD_CONSUMER__PREFETCH_KICK_MS=0 \
  run_until_idle --shadow)
echo "kick off: $stats"
expect_eq "$(jq .duplicates <<<"$stats")" $N "duplicates"
expect_eq "$(jq .prefetch_kicks <<<"$stats")" 0 "prefetch kicks with consumer.prefetch_kick_ms=0"
expect_eq "$(topic_dump "shadow.$T.results" | wc -l)" $N "shadow results after the replay"

# A trickle: 15 rounds of 40 new jobs, 150 ms apart, to a running dedupd.
pages 1 | awk '{for (i = 1; i <= 600; i++) printf "{\"url\":\"%s&trickle=%d\"}\n", $0, i}' \
  > "$WORK/trickle.ndjson"
split -l 40 -d "$WORK/trickle.ndjson" "$WORK/trickle."
mark_run=$(wc -l < "$WORK/run.log")
DEDUPD_KAFKA__QUEUED__MIN__MESSAGES=500 IDLE_MS=3000 run_until_idle --shadow > "$WORK/trickle.stats" &
runpid=$!
# submitted only once the partitions are read: nothing piles up before
for _ in $(seq 1 150); do
  tail -n +"$((mark_run + 1))" "$WORK/run.log" | grep -q '"assigned 4 partitions"' && break
  sleep 0.1
done
tail -n +"$((mark_run + 1))" "$WORK/run.log" | grep -q '"assigned 4 partitions"' ||
  fail "the trickle's dedupd run was not assigned its partitions in 15 s"
sleep 0.5
for f in "$WORK"/trickle.[0-9]*; do submit "$f" > /dev/null; sleep 0.15; done
wait $runpid || fail "dedupd run (trickle) failed"
stats=$(cat "$WORK/trickle.stats")
echo "trickle: $stats"
expect_eq "$(jq .new <<<"$stats")" 600 "trickle: new ops"
expect_eq "$(jq .prefetch_kicks <<<"$stats")" 0 "trickle: prefetch kicks"
