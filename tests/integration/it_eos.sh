#!/usr/bin/env bash
# Exactly-once (issue 16, DESIGN.md section 6: processing.guarantee
# exactly_once): three instances (a b c) of one consumer group on a 6-partition
# jobs topic, each with its own transactional producer (transactional.id
# <group>-<instance.id>), while jobs with duplicates and conflicts arrive in
# waves, one wave per phase:
#   abort   c starts alone, with DEDUPD_FAILPOINT_TXN_ABORT_AFTER=3: its third
#           transaction aborts; c drops its copy and restarts its pipeline in
#           the same process ("transaction aborted"); then a and b join
#   kill    a is killed (-9) with ops in flight and started again at once like a
#           supervisor would (same instance.id, same store dir: "unclean exit",
#           its copy dropped and restored from the changelog)
#   broker  the broker is stopped cleanly, left down 3 s and started again
#           (scripts/stack.sh kafka-restart) with ops in flight
#   zombie  b is stopped (SIGSTOP) past the session timeout (6 s) with ops in
#           flight; a and c take its partitions and publish results of new
#           jobs of every partition; b stays stopped for 16 s, until its
#           coordinator has aborted its open transaction if it had one
#           (transaction.timeout.ms 5 s, checked every 10 s); then b is
#           continued (SIGCONT): its producer is fenced (exit 1, "fenced" or
#           "fatal"; started again like a supervisor would), or it rejoins
# Each phase ends when the three are idle (every partition held, nothing in
# flight or in an outbox, every job and conflict submitted so far with its
# committed result or report), so what a disruption strands is redone within
# its phase.  An instance that exits 1 with a "fenced" or "fatal" line
# is started again at once, as a supervisor would (any other end fails).  Then
# the last copies and conflicts arrive, and all three run until idle and stop
# (SIGTERM, exit 0).  Counted independently of dedupd (kcat reading the
# results and conflicts topics with isolation.level=read_committed, nginx's
# access log, the group's committed offsets), with no downstream dedup:
#   - every event_key (the record key) has exactly one result record, and the
#     distinct event_keys are as many as the logical jobs: each logical job
#     (distinct op_id) has exactly one result, under one event_key, "fetched"
#   - every conflict is reported exactly once
#   - the URLs fetched again (origin fetches - logical jobs, counted per
#     phase in the access log from that phase's start to the next one's) are
#     at most the phase's aborted results (read_uncommitted records that
#     read_committed skips, by their timestamps: an aborted transaction's
#     decisions are redone, and bodies are not kept across it) plus
#     fetch.max_inflight (8) per instance whose ops in flight (at most
#     fetch.max_inflight: beyond it consumption pauses) the phase's
#     disruption may strand: the abort and the kill one each; the broker restart three (down longer than the
#     session timeout: every member's assignment is lost, every open
#     transaction aborted); the zombie two (its ops are fetched again by their
#     new owners, and once more by the zombie itself when it goes on: their
#     fetch timeout passed while it was stopped, so it retries them at once,
#     before it notices that it lost its partitions; at_least_once does the
#     same); the last phase none; a supervisor's restart other than the
#     zombie's adds one to its phase
#   - an instance started again after kill -9 or exit 1 logs "unclean exit"
#   - c logged "transaction aborted" and counts it in
#     dedupd_transactions_aborted_total
#   - the group's committed offsets (sent in the transactions) reach the end
#     of all 6 partitions
# A read_uncommitted reader of the results topic may see more records than the
# read_committed one (the aborted transactions' results): both counts are
# printed, not asserted.
#
# Workload: 5 chunks of logical jobs, half of them slow (/slow/ pages of
# 17..34 KiB: 1..2 s each), so ops are in flight at every disruption; wave r
# carries chunk r twice, chunk r-1 again in another URL form that normalizes
# alike (HTTP://) and the conflicting requests of chunk r-2's job_keys (every
# 25th job has one): each logical job is submitted 3 times, across phases.
#
# Short form by default (300 logical jobs, 100..120 s on 2 cores);
# EOS_JOBS=1000 (about 2 minutes) or more for a longer run (not in the suite).
PARTITIONS=6
source "$(dirname "$0")/lib.sh"
multi_setup
# a stopped or killed member leaves the group after 6 s
export DEDUPD_KAFKA__SESSION__TIMEOUT__MS=6000 DEDUPD_KAFKA__HEARTBEAT__INTERVAL__MS=1000
pin_dedupd
export DEDUPD_PROCESSING__GUARANTEE=exactly_once
MAXIN=8
export DEDUPD_FETCH__MAX_INFLIGHT=$MAXIN
export DEDUPD_STORE__LEASE_MS=5000 # ops of a killed or stopped instance are taken over after 5 s
# the coordinator aborts a transaction open longer than 5 s (it looks every
# 10 s, the broker's transaction.abort.timed.out.transaction.cleanup.interval.ms):
# a zombie stopped for 16 s finds its open transaction, if it had one,
# aborted and its producer fenced
TXN_TIMEOUT_MS=5000 ZOMBIE_S=16
export DEDUPD_PROCESSING__TRANSACTION_TIMEOUT_MS=$TXN_TIMEOUT_MS
# rebalance.grace_ms stays at its default (60 s): at least fetch.timeout_ms
# (15 s) + kafka.request.timeout.ms (30 s), below kafka.max.poll.interval.ms
L=${EOS_JOBS:-300}
W=5
CHUNK=$(( (L + W - 1) / W ))
MULTI_IDLE_LIMIT_S=$(( 120 + L / 20 ))

# dump ISOLATION TOPIC: lib.sh's topic_dump with kcat's consumer at
# isolation.level ISOLATION (read_committed: only committed transactions'
# records, up to the last stable offset; read_uncommitted: aborted ones too).
dump() {
  local out err
  out=$(mktemp "$WORK/kcat.out.XXXX") err=$(mktemp "$WORK/kcat.err.XXXX")
  kcat -b "$KAFKA_BOOTSTRAP" -X isolation.level="$1" -C -t "$2" -o beginning -e -q -J >"$out" 2>"$err" ||
    fail "kcat ($1) could not read topic $2: $(tail -n 3 "$err")"
  cat "$out" 2>/dev/null || true
  rm -f "$out" "$err"
}
# event NAME...: a line of $WORK/events (printed at the end)
event() { echo "$(date +%T.%N | cut -c1-12) $*" >>"$WORK/events"; }
# phase NAME: the next phase begins (its start in the origin's access log)
PH_NAME=() PH_MARK=() PH_MS=()
phase() { PH_NAME+=("$1"); PH_MARK+=("$(log_mark)"); PH_MS+=("$(date +%s%3N)"); event "phase $1"; echo "phase $1"; }
# wave R: submits wave R; its receipts go to $WORK/receipts.R
wave() { submit "$WORK/wave.$1" > "$WORK/receipts.$1" || fail "dedupd submit of wave $1 failed: $(tail -n 3 "$WORK/submit.log")"; }
# inflight_sum NAME...: ops in flight of the named instances together
inflight_sum() {
  local n v s=0
  for n in "$@"; do
    v=$(inst_metric "$n" dedupd_ops_inflight)
    [[ $v =~ ^[0-9]+$ ]] && s=$(( s + v ))
  done
  echo "$s"
}
# inst_port NAME: lib.sh's, but the admin port of the last start of NAME's
# pipeline (an aborted transaction starts the pipeline again in the same
# process, with new listeners: another port when they bind port 0)
inst_port() {
  local from
  from=$(awk -v f="${INST_FROM[$1]}" 'NR >= f && /admin listener on port/ {n = NR} END {print n + 0}' "${INST_LOG[$1]}")
  (( from > 0 )) || from=${INST_FROM[$1]}
  admin_port "${INST_LOG[$1]}" "$from"
}
# inst_ready NAME [TRIES]: lib.sh's, but asking the port of the pipeline's
# last start at every try (c's abort may come while it waits)
inst_ready() {
  for _ in $(seq 1 "${2:-300}"); do
    kill -0 "${INST_PID[$1]}" 2>/dev/null || fail "instance $1 exited before it was ready: $(tail -n 5 "${INST_LOG[$1]}")"
    curl -fs --max-time 1 "http://127.0.0.1:$(inst_port "$1")/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "instance $1 not ready (/readyz) after $(( ${2:-300} / 10 )) s: $(tail -n 5 "${INST_LOG[$1]}")"
}
# log_has NAME REGEX [FROM]: NAME's log from line FROM (its current run's
# first line) on has a line matching REGEX
log_has() { tail -n +"${3:-${INST_FROM[$1]}}" "${INST_LOG[$1]}" | grep -qE "$2"; }
# wait_log NAME REGEX TENTHS: until log_has NAME REGEX (0.1 s steps)
wait_log() {
  for _ in $(seq "$3"); do
    log_has "$1" "$2" && return 0
    sleep 0.1
  done
  return 1
}
# supervise NAME...: what a supervisor (Kubernetes) does: an instance that
# exited 1 with a "fenced" or "fatal" line in its log is started again (same
# instance.id, same store dir), and must log "unclean exit" (its copy dropped
# and restored); any other end fails the test.  The restarts are listed in
# RESTARTS; a start without "unclean exit" in NO_UNCLEAN.
RESTARTS=() RESTART_PHASES=() NO_UNCLEAN=()
supervise() {
  local n rc
  for n in "$@"; do
    [ -n "${INST_PID[$n]:-}" ] || continue
    kill -0 "${INST_PID[$n]}" 2>/dev/null && continue
    rc=0; wait "${INST_PID[$n]}" 2>/dev/null || rc=$?
    unset "INST_PID[$n]"
    event "$n exited $rc"
    (( rc == 1 )) || fail "instance $n exited $rc in phase ${PH_NAME[-1]}, not 1: $(tail -n 5 "${INST_LOG[$n]}")"
    log_has "$n" 'fenced|fatal' || fail "instance $n exited 1 in phase ${PH_NAME[-1]} without a \"fenced\" or \"fatal\" line: $(tail -n 5 "${INST_LOG[$n]}")"
    RESTART_PHASES+=("${PH_NAME[-1]}")
    RESTARTS+=("$n in phase ${PH_NAME[-1]} ($(tail -n +"${INST_FROM[$n]}" "${INST_LOG[$n]}" | grep -E 'fenced|fatal' | head -n 1 | cut -c1-160))")
    echo "supervisor: $n exited 1, started again: ${RESTARTS[-1]}"
    inst_start "$n"
    inst_ready "$n"
    wait_log "$n" "unclean exit" 50 || NO_UNCLEAN+=("$n (phase ${PH_NAME[-1]})")
  done
}
# supervise_for SECONDS NAME...: supervise every 0.2 s for SECONDS
supervise_for() {
  local end=$(( $(date +%s) + $1 ))
  shift
  while (( $(date +%s) < end )); do supervise "$@"; sleep 0.2; done
}
# wait_idle: until a b c hold every partition between them, none has an op in
# flight or an outbox entry (/metrics, refreshed once a second), every job
# submitted so far has a committed result and every conflict submitted so
# far a committed report (read_committed), twice in a row 1 s apart;
# supervising them.  Fails after MULTI_IDLE_LIMIT_S.  (Not lib.sh's
# multi_wait_idle: dedupd_consumer_lag_messages counts a partition assigned
# since its last message as lagging by all its messages, the consumer's
# position being unknown until one is consumed; printed, not waited for.)
wait_idle() {
  local n s busy calm=0 sum miss=0 cmiss=0 end=$(( $(date +%s) + MULTI_IDLE_LIMIT_S ))
  cat "$WORK"/receipts.? | jq -r .op_id | sort -u > "$WORK/idle.ops"
  for n in "$WORK"/receipts.?; do cat "$WORK/wave.${n##*.}"; done |
    jq -r 'select(.job_key and (.url | endswith("&v=2"))) | "default:" + .job_key' | sort -u > "$WORK/idle.conflicts"
  while (( calm < 2 )); do
    (( $(date +%s) < end )) || fail "the instances were not idle within $MULTI_IDLE_LIMIT_S s (phase ${PH_NAME[-1]}): $miss of $(wc -l < "$WORK/idle.ops") jobs without a committed result, $cmiss of $(wc -l < "$WORK/idle.conflicts") conflicts not reported; $(multi_status a b c)"
    sleep 1
    supervise a b c
    sum=0 busy=0
    for n in a b c; do sum=$(( sum + $(inst_assigned "$n") )); done
    if (( sum != PARTITIONS )); then calm=0; continue; fi
    for n in a b c; do
      for s in dedupd_ops_inflight dedupd_outbox_pending; do
        [ "$(inst_metric "$n" "$s")" = 0 ] || busy=1
      done
    done
    if (( busy )); then calm=0; continue; fi
    miss=$(dump read_committed "$T.results" | jq -r '.payload | fromjson | .op_id' | sort -u | comm -23 "$WORK/idle.ops" - | wc -l)
    cmiss=$(dump read_committed "$T.conflicts" | jq -r '.payload | fromjson | .op_id' | sort -u | comm -23 "$WORK/idle.conflicts" - | wc -l)
    if (( miss || cmiss )); then calm=0; else calm=$(( calm + 1 )); fi
  done
  echo "idle: $(wc -l < "$WORK/idle.ops") jobs with a committed result; dedupd_consumer_lag_messages a $(inst_metric a dedupd_consumer_lag_messages), b $(inst_metric b dedupd_consumer_lag_messages), c $(inst_metric c dedupd_consumer_lag_messages)"
}

# ---- the jobs ---------------------------------------------------------------
logical_jobs "$L" 2 25 eos > "$WORK/logical.ndjson"
split -l "$CHUNK" -d -a 4 "$WORK/logical.ndjson" "$WORK/chunk."
chunks=("$WORK"/chunk.????)
(( ${#chunks[@]} == W )) || fail "$L jobs split into ${#chunks[@]} chunks, not $W"
for (( r = 0; r < W + 2; r++ )); do
  {
    (( r < W )) && cat "${chunks[$r]}" "${chunks[$r]}"
    (( r >= 1 && r - 1 < W )) && sed 's|"url":"http://|"url":"HTTP://|' "${chunks[$((r - 1))]}"
    (( r >= 2 && r - 2 < W )) && jq -c 'select(.job_key) | .url += "&v=2"' "${chunks[$((r - 2))]}"
    true
  } > "$WORK/wave.$r"
done
total=$(cat "$WORK"/wave.* | wc -l)
nconf=$(jq -r 'select(.job_key) | .job_key' "$WORK/logical.ndjson" | wc -l)
echo "$L logical jobs, $total messages in $((W + 2)) waves, $nconf conflicts"

# ---- abort: c's third transaction aborts --------------------------------------
# The first wave is on the topic before the instances start, so the aborted
# transaction carries results; c restarts its pipeline and rejoins the group.
# c starts alone and holds every partition until its abort, so it has work
# for three transactions; a and b join after it.  Started together, on a
# slow machine a and b had done the whole wave before c got a partition, and
# c's third transaction came in a later phase (CI, 2026-12-02: "no
# transaction aborted within 30 s", then its refetches counted against the
# kill phase's bound).
phase abort
wave 0
inst_start c DEDUPD_FAILPOINT_TXN_ABORT_AFTER=3
inst_ready c
c_abort_log=0 c_aborted=absent
if wait_log c "transaction aborted" 300; then
  c_abort_log=1
  event "c: transaction aborted"
  for _ in $(seq 30); do # the counter of c's process (its first run)
    c_aborted=$(inst_metric c dedupd_transactions_aborted_total)
    [[ $c_aborted =~ ^[0-9]+$ ]] && (( c_aborted >= 1 )) && break
    sleep 0.1
  done
fi
echo "abort: c logged \"transaction aborted\": $c_abort_log, dedupd_transactions_aborted_total $c_aborted"
inst_start a
inst_start b
for n in a b c; do inst_ready "$n"; done
wait_idle

# ---- kill: a is killed -9 with ops in flight, started again -----------------
phase kill
wave 1
a_inflight=$(wait_inflight "$(inst_port a)" 4 100)
inst_kill a
[[ $a_inflight =~ ^[0-9]+$ ]] && (( a_inflight > 0 )) || nothing_tested "a had no op in flight when it was killed ($a_inflight)"
inst_start a
inst_ready a
wait_log a "unclean exit" 50 || NO_UNCLEAN+=("a (after its kill -9)")
echo "kill: a had $a_inflight ops in flight at its kill; started again"
wait_idle

# ---- broker: a broker restart with ops in flight ------------------------------
phase broker
wave 2
for _ in $(seq 100); do
  broker_inflight=$(inflight_sum a b c)
  (( broker_inflight > 0 )) && break
  sleep 0.1
done
t0=$(date +%s)
event "kafka-restart"
"$ROOT/scripts/stack.sh" kafka-restart 3 2>>"$WORK/stack.log" ||
  fail "kafka restart: $(tail -n 3 "$WORK/stack.log")"
event "kafka back"
echo "broker: $broker_inflight ops in flight at the stop; down and back in $(( $(date +%s) - t0 )) s"
wait_idle

# ---- zombie: b stopped past the session timeout, then continued ---------------
# a and c must take b's partitions and publish results of new jobs (wave 4,
# submitted after the stop) of every partition before b goes on: b's open
# transaction is then aborted by its coordinator and b may not publish.
phase zombie
wave 3
b_inflight=$(wait_inflight "$(inst_port b)" 2 150)
kill -STOP "${INST_PID[b]}" || fail "instance b was gone before its SIGSTOP: $(tail -n 5 "${INST_LOG[b]}")"
event "SIGSTOP b"
t_stop=$(date +%s)
wave 4
cat "$WORK"/receipts.[0-3] | jq -r .op_id | sort -u > "$WORK/ops.before4"
jq -r '"\(.op_id) \(.partition)"' "$WORK/receipts.4" | sort -u | join -v1 - "$WORK/ops.before4" > "$WORK/ops.new4"
cut -d' ' -f2 "$WORK/ops.new4" | sort -u > "$WORK/parts.new4"
: > "$WORK/parts.covered"
end=$(( t_stop + 90 ))
while :; do
  (( $(date +%s) < end )) || fail "90 s after b's SIGSTOP, a and c hold $(( $(inst_assigned a) + $(inst_assigned c) )) of $PARTITIONS partitions and published new jobs of $(wc -l < "$WORK/parts.covered") of $(wc -l < "$WORK/parts.new4") partitions: $(multi_status a c)"
  supervise a c
  if (( $(inst_assigned a) + $(inst_assigned c) == PARTITIONS )); then
    dump read_committed "$T.results" | jq -r '.payload | fromjson | .op_id' | sort -u |
      join - "$WORK/ops.new4" | cut -d' ' -f2 | sort -u > "$WORK/parts.covered"
    cmp -s "$WORK/parts.covered" "$WORK/parts.new4" && break
  fi
  sleep 1
done
event "a and c hold every partition, new jobs of all published"
echo "zombie: b had $b_inflight ops in flight at its SIGSTOP; $(( $(date +%s) - t_stop )) s after it a and c held every partition and had published new jobs of all $(wc -l < "$WORK/parts.covered")"
# and b stays stopped until its open transaction has been aborted by the
# coordinator (transaction.timeout.ms + its cleanup interval)
while (( $(date +%s) < t_stop + ZOMBIE_S )); do supervise a c; sleep 0.5; done
b_from=$(( $(wc -l < "${INST_LOG[b]}") + 1 )) b_pid=${INST_PID[b]}
kill -CONT "$b_pid"
event "SIGCONT b"
# b's end: exit 1 (fenced or fatal: supervise starts it again), or a new
# assignment after which it is still there 3 s later (it rejoined)
b_end=""
for _ in $(seq 400); do
  supervise a b c
  if [ "${INST_PID[b]}" != "$b_pid" ]; then b_end="exited 1 and was started again"; break; fi
  if log_has b '"assigned [0-9]+ partitions' "$b_from"; then
    supervise_for 3 a b c
    if [ "${INST_PID[b]}" != "$b_pid" ]; then b_end="rejoined, then exited 1 and was started again"
    else b_end="rejoined the group"; fi
    break
  fi
  sleep 0.1
done
[ -n "$b_end" ] || fail "40 s after its SIGCONT the zombie b neither exited nor rejoined: $(tail -n 5 "${INST_LOG[b]}")"
echo "zombie: b $b_end"
wait_idle

# ---- the last copies and conflicts, then until idle -------------------------
phase tail
wave 5
wave 6
wait_idle
# until the group's committed offsets (sent in the transactions) reach the
# end of every partition: the last copies are consumed too
for _ in $(seq 20); do
  read -r lag_parts lag < <(committed_lag "$T")
  (( lag_parts == PARTITIONS && lag == 0 )) && break
  sleep 1
done
declare -A TX_C=() TX_A=()
for n in a b c; do
  TX_C[$n]=$(inst_metric "$n" dedupd_transactions_committed_total)
  TX_A[$n]=$(inst_metric "$n" dedupd_transactions_aborted_total)
done
for n in a b c; do inst_stop "$n"; done
echo "events: $(cut -c1-8,13- "$WORK/events" | paste -sd ';')"

# ---- the counts -------------------------------------------------------------
cat "$WORK"/receipts.? > "$WORK/receipts.ndjson"
jq -r .op_id "$WORK/receipts.ndjson" | sort -u > "$WORK/logical.ops"
logical=$(wc -l < "$WORK/logical.ops")
dump read_committed "$T.results" | jq -r '"\(.key) \(.payload | fromjson | "\(.op_id) \(.event_key) \(.outcome)")"' > "$WORK/results"
# the aborted results: read_uncommitted records that read_committed skips
# ("partition offset timestamp", the producer's time)
dump read_committed "$T.results" | jq -r '"\(.partition) \(.offset)"' | sort > "$WORK/results.committed"
dump read_uncommitted "$T.results" | jq -r '"\(.partition) \(.offset) \(.ts)"' | sort > "$WORK/results.uncommitted"
uncommitted=$(wc -l < "$WORK/results.uncommitted")
join -v1 -j1 <(awk '{print $1 ":" $2, $3}' "$WORK/results.uncommitted" | sort) \
  <(awk '{print $1 ":" $2}' "$WORK/results.committed" | sort) > "$WORK/results.aborted"
records=$(wc -l < "$WORK/results")
keys=$(awk '{print $1}' "$WORK/results" | sort -u | wc -l)
awk '{print $1}' "$WORK/results" | sort | uniq -c | awk '$1 > 1 {print $2 " x" $1}' > "$WORK/keys.multi"
awk '$1 != $3' "$WORK/results" > "$WORK/keys.mismatch"
awk '{print $2, $3}' "$WORK/results" | sort -u | awk '{print $1}' | uniq -c | awk '$1 > 1 {print $2}' > "$WORK/ops.multi"
awk '{print $2}' "$WORK/results" | sort -u | comm -23 "$WORK/logical.ops" - > "$WORK/ops.missing"
failed=$(awk '$4 != "fetched"' "$WORK/results" | wc -l)
dump read_committed "$T.conflicts" | jq -r '.payload | fromjson | "\(.op_id) \(.conflicting_request_hash)"' > "$WORK/conflicts"
sort "$WORK/conflicts" | uniq -d > "$WORK/conflicts.multi"
awk '{print $1}' "$WORK/conflicts" | sort -u > "$WORK/conflict.ops"
jq -r 'select(.job_key) | "default:" + .job_key' "$WORK/logical.ndjson" | sort -u | comm -23 - "$WORK/conflict.ops" > "$WORK/conflicts.missing"
dlq=$(dump read_committed "$T.dlq" | wc -l)
# origin fetches (200s of this test), and per phase the URLs fetched again
# (fetched before, anywhere in the run) in that phase's part of the access log
m0=${PH_MARK[0]}
bounds=""
for (( i = 0; i < ${#PH_MARK[@]}; i++ )); do bounds+="$(( PH_MARK[i] - m0 )) "; done
read -r -a per_phase < <(tail -n +"$(( m0 + 1 ))" "$ORIGIN_ACCESS_LOG" | awk -v t="t=$T" -v b="$bounds" '
  BEGIN {n = split(b, lo, " ")}
  index($0, t) && $(NF-1) == 200 {
    fetches++
    if (seen[$3]++) {p = 1; for (i = 2; i <= n; i++) if (NR > lo[i]) p = i; again[p]++}
  }
  END {printf "%d", fetches; for (i = 1; i <= n; i++) printf " %d", again[i]; print ""}')
fetches=${per_phase[0]}
extra=$(( fetches - logical ))
# each phase's bound: fetch.max_inflight per instance whose ops in flight
# its disruption may strand (the broker restart: all
# three; the zombie's: twice, by their new owners and by the zombie going
# on), and per supervisor restart other than the zombie's own
declare -A STRANDS=([abort]=1 [kill]=1 [broker]=3 [zombie]=2 [tail]=0)
for ph in "${RESTART_PHASES[@]}"; do [ "$ph" = zombie ] || STRANDS[$ph]=$(( STRANDS[$ph] + 1 )); done
# plus the phase's aborted results (produced in it): an aborted
# transaction's decisions are redone, their fetches too
phases="" over=()
for (( i = 0; i < ${#PH_NAME[@]}; i++ )); do
  ph=${PH_NAME[i]} again=${per_phase[i + 1]}
  ab=$(awk -v lo="${PH_MS[i]}" -v hi="${PH_MS[i + 1]:-99999999999999}" '$2 >= lo && $2 < hi' "$WORK/results.aborted" | wc -l)
  bound=$(( STRANDS[$ph] * MAXIN + ab ))
  phases+="$ph $again (<= $bound: ${STRANDS[$ph]} x $MAXIN + $ab aborted), "
  (( again <= bound )) || over+=("$ph $again > $bound")
done
echo "messages $total, logical jobs $logical, origin fetches $fetches (extra $extra; fetched again per phase: ${phases%, }; URLs fetched 3 times or more: $(log_since "$m0" | awk '$(NF-1) == 200 {print $3}' | sort | uniq -c | awk '$1 >= 3' | wc -l))"
echo "results read_committed $records records, $keys distinct event_keys ($(wc -l < "$WORK/keys.multi") with more than one record, $(wc -l < "$WORK/keys.mismatch") keyed otherwise than their event_key); read_uncommitted $uncommitted records"
echo "logical jobs with more than one event_key $(wc -l < "$WORK/ops.multi"), without a result $(wc -l < "$WORK/ops.missing"), failed results $failed; DLQ records $dlq"
echo "conflicts $nconf, reported $(wc -l < "$WORK/conflict.ops") ($(wc -l < "$WORK/conflicts") records, $(wc -l < "$WORK/conflicts.multi") reported more than once), never reported $(wc -l < "$WORK/conflicts.missing")"
echo "supervisor restarts (exit 1): ${#RESTARTS[@]}${RESTARTS[*]:+: ${RESTARTS[*]}}"
echo "transactions committed/aborted (the last run of each): a ${TX_C[a]}/${TX_A[a]}, b ${TX_C[b]}/${TX_A[b]}, c ${TX_C[c]}/${TX_A[c]}; committed offsets on $lag_parts of $PARTITIONS partitions, $lag messages past them"

failures=()
(( logical == L )) || failures+=("logical jobs (distinct op_ids of the receipts) $logical, not $L")
[ -s "$WORK/keys.multi" ] && failures+=("$(wc -l < "$WORK/keys.multi") event_keys have more than one committed result record (e.g. $(head -n 1 "$WORK/keys.multi"))")
(( keys == logical )) || failures+=("$keys distinct event_keys on the results topic (read_committed), not $logical (the logical jobs)")
[ -s "$WORK/keys.mismatch" ] && failures+=("$(wc -l < "$WORK/keys.mismatch") result records keyed otherwise than their event_key (e.g. $(head -n 1 "$WORK/keys.mismatch"))")
[ -s "$WORK/ops.multi" ] && failures+=("$(wc -l < "$WORK/ops.multi") logical jobs have more than one event_key on the results topic (e.g. $(head -n 1 "$WORK/ops.multi"))")
[ -s "$WORK/ops.missing" ] && failures+=("$(wc -l < "$WORK/ops.missing") logical jobs have no committed result (e.g. $(head -n 1 "$WORK/ops.missing"))")
(( failed == 0 )) || failures+=("$failed results are not outcome fetched")
[ -s "$WORK/conflicts.missing" ] && failures+=("$(wc -l < "$WORK/conflicts.missing") of $nconf conflicts never reported (e.g. $(head -n 1 "$WORK/conflicts.missing"))")
[ -s "$WORK/conflicts.multi" ] && failures+=("$(wc -l < "$WORK/conflicts.multi") conflicts reported more than once (e.g. $(head -n 1 "$WORK/conflicts.multi"))")
(( extra >= 0 )) || failures+=("fewer origin fetches ($fetches) than logical jobs ($logical)")
(( ${#over[@]} == 0 )) || failures+=("URLs fetched again beyond fetch.max_inflight ($MAXIN) per stranding instance, in phase ${over[*]} (origin fetches $fetches - logical jobs $logical = $extra)")
(( c_abort_log )) || failures+=("c (DEDUPD_FAILPOINT_TXN_ABORT_AFTER=3) logged no \"transaction aborted\" within 30 s")
[[ $c_aborted =~ ^[0-9]+$ ]] && (( c_aborted >= 1 )) || failures+=("c's dedupd_transactions_aborted_total after its abort is $c_aborted, not >= 1")
(( ${#NO_UNCLEAN[@]} == 0 )) || failures+=("started again after an unclean end without an \"unclean exit\" line: ${NO_UNCLEAN[*]}")
(( lag_parts == PARTITIONS && lag == 0 )) || failures+=("committed offsets on $lag_parts of $PARTITIONS partitions, $lag messages past them")
(( ${#failures[@]} == 0 )) || fail "$(printf '%s; ' "${failures[@]}")"
ok "each of $logical logical jobs has one committed result under one event_key, every conflict reported once, $extra extra origin fetches (${phases%, }), c's abort counted ($c_aborted)"
