#!/usr/bin/env bash
# A broker outage mid-run: dedupd keeps running while the broker is stopped
# cleanly, left down 3 s and started again (scripts/stack.sh kafka-restart),
# with fetches in flight and results waiting for acknowledgement.  Jobs keep
# arriving after the restart.  Then:
#   - every job's result reaches the results topic, then dedupd stops on SIGTERM
#     with exit status 0 (no --exit-when-idle: its end-of-partition state from
#     before the outage would end the run before the second wave)
#   - every logical job has exactly one result after downstream dedup
#   - the origin saw one request per job: nothing fetched twice although
#     uncommitted messages may be redelivered after the outage
# First the premise (dedupd's /metrics sampled through the outage, else
# "nothing was tested"): fetches completed while the broker's port was closed
# (dedupd_fetch_attempts_total: they were in flight at the stop), and results
# waited for their acknowledgement then (dedupd_outbox_pending).
#
# The broker is one of the test's own (scripts/stack.sh kafka-up with its own run
# dir and ports, beside the stack, whose origin and proxies it uses): a broker
# loads every partition it holds before it serves again, and the stack's
# broker, holding the topics of every test run before this one, took over a
# minute to come back (71 of this test's 90 s in a suite run); restarting it
# also took the broker away from whatever else ran against the stack.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stack=${DEDUPD_ROOT:-$(cd "$here/../.." && pwd)}/scripts/stack.sh
BR_DIR=$(mktemp -d /tmp/dedupd-it-broker-restart.XXXX)
br_port() { # a port nothing is bound to now, other than $1, below the kernel's
  # range for port-0 binds and outgoing connections (ip_local_port_range), as
  # lib.sh's free_port (not yet sourced here): a port in that range can be taken
  # by any outgoing connection on the machine between this pick and the bind
  local p lo=32768 span
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
  span=$(( lo - 20000 ))
  (( span >= 1000 )) || span=40000
  for _ in $(seq 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % span ))
    [ "$p" != "${1:-}" ] && ! ss -Htan "sport = :$p" 2>/dev/null | grep -q . && { echo "$p"; return 0; }
  done
  echo "it_broker_restart: no free port" >&2; return 1
}
br() { # stack.sh on the test's own broker
  DEDUPD_STACK_DIR=$BR_DIR KAFKA_PORT=$BR_PORT KAFKA_CONTROLLER_PORT=$BR_CPORT "$stack" "$@"
}
br_cleanup() { br kafka-down >/dev/null 2>&1 || true; rm -rf "$BR_DIR"; }
trap br_cleanup EXIT
# The small race of any picked port remains: a bind that lost it is tried again
# on two new ports (the broker's log names the cause), up to three times.
# (the broker's own logs: $BR_DIR/kafka/logs, emptied before each try so that a
# bind error of an earlier try is not read again)
for try in 1 2 3; do
  BR_PORT=$(br_port) || exit 1
  BR_CPORT=$(br_port "$BR_PORT") || exit 1
  rm -f "$BR_DIR"/kafka/logs/*.log
  br kafka-up 2>"$BR_DIR/up.log" && break
  br kafka-down >/dev/null 2>&1 || true
  if [ "$try" -lt 3 ] && grep -qsE "Address already in use|is in use by another process" \
       "$BR_DIR/up.log" "$BR_DIR"/kafka/logs/*.log; then
    echo "it_broker_restart: port $BR_PORT or $BR_CPORT was taken; trying two others" >&2
    continue
  fi
  tail -n 20 "$BR_DIR/up.log" >&2; echo "FAIL: the test's broker did not start" >&2; exit 1
done
# lib.sh (its topics made on this broker: KAFKA_PORT) sets an EXIT trap of its
# own: its errors must not end this shell while it is sourced (the broker would
# be left running); the topics are made again, checked, below.
export KAFKA_PORT=$BR_PORT
source "$here/lib.sh" || true
trap 'br_cleanup; rm -rf "$WORK"' EXIT
# (lib.sh's fail() ends this shell with SIGTERM: exit 1, so the EXIT trap runs)
trap 'exit 1' TERM INT
[ "$KAFKA_BOOTSTRAP" = "127.0.0.1:$BR_PORT" ] || fail "bootstrap $KAFKA_BOOTSTRAP is not the test's broker"
"$DEDUPD" topics -c "$CFG" --partitions 4 >/dev/null || fail "dedupd topics on the test's broker failed"
pin_dedupd
export DEDUPD_FETCH__MAX_INFLIGHT=32
export DEDUPD_FETCH__TIMEOUT_MS=60000   # the largest page takes ~28 s from /slow/
export DEDUPD_REBALANCE__GRACE_MS=90000 # at least fetch.timeout_ms + request.timeout.ms
# First wave from /slow/ (16 KiB/s), so fetches are in flight at the stop.
awk '/\.html$/ && k++ < 40 {sub("/docs/", "/slow/"); print}' "$ORIGIN_PAGES" |
  sed "s|\$|?t=$T|" | jq -Rc '{url: .}' > "$WORK/wave1"
awk '/\.html$/ && k++ >= 40 && k <= 240 {print}' "$ORIGIN_PAGES" |
  sed "s|\$|?t=$T|" | jq -Rc '{url: .}' > "$WORK/wave2"
mark=$(log_mark)
submit "$WORK/wave1" > /dev/null
pid="" watch=""
trap 'kill $watch $pid 2>/dev/null || true; br_cleanup; rm -rf "$WORK"' EXIT
"$DEDUPD" run -c "$CFG" --stats-json > "$WORK/stats.json" 2>>"$WORK/run.log" &
pid=$!
admin=$(admin_port "$WORK/run.log")
# until fetches are in flight (the first wave's slow pages take 0.5..28 s)
for _ in $(seq 100); do
  inflight=$(scrape "$admin" | metric dedupd_ops_inflight)
  [ "$inflight" != absent ] && [ "$inflight" -ge 10 ] && break
  sleep 0.2
done
# Every 0.3 s through the outage: "ms broker_up fetch_attempts outbox_pending"
# (broker_up: its port accepts; fetch_attempts: completed ones, all categories)
bport=${KAFKA_BOOTSTRAP##*:}
( while :; do
    up=0; (exec 3<>"/dev/tcp/127.0.0.1/$bport") 2>/dev/null && up=1
    m=$(curl -s --max-time 1 "http://127.0.0.1:$admin/metrics") &&
      echo "$(date +%s%3N) $up $(awk '/^dedupd_fetch_attempts_total\{/ {s += $2} END {print s + 0}' <<<"$m") $(metric dedupd_outbox_pending <<<"$m")"
    sleep 0.3
  done > "$WORK/watch" ) &
watch=$!
inflight=$(scrape "$admin" | metric dedupd_ops_inflight)
[ "$inflight" != absent ] && [ "$inflight" -gt 0 ] || nothing_tested "no op in flight when the broker stop began ($inflight)"
ok "$inflight ops in flight when the broker stop begins"
t0=$(date +%s)
br kafka-restart 3 2>>"$WORK/stack.log" ||
  fail "kafka restart: $(tail -n 3 "$WORK/stack.log")"
kill "$watch"; wait "$watch" 2>/dev/null || true; watch=""
ok "broker down and back in $(( $(date +%s) - t0 )) s"
# fetches completed while the broker was down (since the last sample with it
# up: they were in flight at the stop) and results then waiting for their
# acknowledgement
read -r down fetched pending < <(awk '
  $2 == 1 && !down {before = $3}
  $2 == 0 {down++; last = $3; if ($4 ~ /^[0-9]+$/ && $4 > p) p = $4}
  END {print down + 0, (down ? last - before : 0), p + 0}' "$WORK/watch")
echo "broker down in $down samples of /metrics: $fetched fetches completed, at most $pending results waiting for acknowledgement"
[ "$down" -gt 0 ] || nothing_tested "the broker's port never closed"
[ "$fetched" -gt 0 ] || nothing_tested "no fetch was in flight through the outage"
[ "$pending" -gt 0 ] || nothing_tested "no result waited for acknowledgement during the outage"
ok "$fetched fetches were in flight through the outage, $pending results waited for acknowledgement"
submit "$WORK/wave2" > /dev/null
ok "second wave submitted $(( $(date +%s) - t0 )) s after the stop"
n=$(cat "$WORK/wave1" "$WORK/wave2" | wc -l)
got=0
for _ in $(seq 1 180); do
  got=$(topic_dump "$DEDUPD_TOPICS__RESULTS" | jq -r .key | sort -u | wc -l)
  [ "$got" -ge "$n" ] && break
  kill -0 "$pid" 2>/dev/null || fail "dedupd ended before all results were out: $(tail -n 3 "$WORK/run.log")"
  sleep 0.5
done
[ "$got" -ge "$n" ] || fail "results of $got of $n jobs on the topic $(( $(date +%s) - t0 )) s after the stop"
ok "results of all $n jobs on the topic $(( $(date +%s) - t0 )) s after the stop"
kill -TERM "$pid" || fail "dedupd was no longer running at the SIGTERM"
rc=0; wait "$pid" || rc=$?
pid=""
expect_eq "$rc" 0 "dedupd exit status after SIGTERM"
echo "stats: $(cat "$WORK/stats.json")"
tail_results > "$WORK/results.ndjson"
expect_eq "$(jq -r .op_id "$WORK/results.ndjson" | sort -u | wc -l)" "$n" "logical jobs with a result after dedup"
expect_eq "$(jq -r 'select(.outcome != "fetched") | "\(.op_id) \(.category) \(.error)"' "$WORK/results.ndjson")" "" "results not fetched"
expect_eq "$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)" "$n" "origin fetches"
