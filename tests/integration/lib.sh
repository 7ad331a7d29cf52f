# Shared set-up of the integration tests (sourced).  Each test gets its own
# topics, consumer groups and store, so tests never see each other's messages;
# URLs carry ?t=$T so the origin's access log can be read per test.
set -euo pipefail
ROOT=${DEDUPD_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
DEDUPD=${DEDUPD_BIN:-$ROOT/build/dedupd}
CFG=$ROOT/config/dedupd.json
eval "$("$ROOT/scripts/stack.sh" env)"
T="$(basename "$0" .sh)-$$-$(date +%s)"
# scripts/test.sh drops the topics of the tests it ran, listed here
[ -n "${DEDUPD_TOPICS_LOG:-}" ] && echo "$T" >>"$DEDUPD_TOPICS_LOG"
WORK=$(mktemp -d "/tmp/dedupd-$T.XXXX")
trap 'rm -rf "$WORK"' EXIT
export DEDUPD_BROKER__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP
export DEDUPD_PROXY__EXITS=${PROXY_EXITS// /,}
export DEDUPD_TOPICS__JOBS=$T.jobs DEDUPD_TOPICS__RESULTS=$T.results
export DEDUPD_TOPICS__CONFLICTS=$T.conflicts DEDUPD_TOPICS__DLQ=$T.dlq
export DEDUPD_CONSUMER__GROUP_ID=$T DEDUPD_TAIL__GROUP_ID=$T-tail
export DEDUPD_KAFKA__GROUP__INSTANCE__ID=$T
export DEDUPD_INSTANCE__ID=$T
export DEDUPD_STORE__PATH=$WORK/store DEDUPD_TAIL__STORE_PATH=$WORK/tail
export DEDUPD_LOG__LEVEL=info
# PARTITIONS (set before sourcing): partitions of the test's topics (default 4).
"$DEDUPD" topics -c "$CFG" --partitions "${PARTITIONS:-4}" >/dev/null

# fail WHY: the test fails.  Called inside $( ) or a pipeline, it ends the
# test's own shell too (else a failing helper would only end its subshell and
# the test would go on with its empty output, e.g. "0 messages").
fail() {
  echo "FAIL: $*" >&2
  [ "$BASHPID" = "$$" ] || kill -TERM "$$" 2>/dev/null
  exit 1
}
# nothing_tested WHAT: the situation the test is about did not occur (no 429
# seen, no op in flight at a kill...): a pass would prove nothing.
nothing_tested() { fail "$*: nothing was tested"; }
ok() { echo "ok: $*"; }
expect_eq() { # expect_eq ACTUAL EXPECTED WHAT
  [ "$1" = "$2" ] || fail "$3: got '$1', expected '$2'"
  ok "$3 = $2"
}

# like ACTUAL EXPECTED: ACTUAL is EXPECTED exactly, but for <n> in EXPECTED,
# which stands for a number (a position or size that depends on the test's
# tag or files), and a trailing "..." (a library's own wording follows).
like() {
  local pat=$2 rest=""
  [[ $pat != *... ]] || { pat=${pat%...}; rest="*"; }
  pat=$(sed 's/[][\\*?+@!()|]/\\&/g' <<<"$pat")
  pat=${pat//<n>/+([0-9])}
  # shellcheck disable=SC2053
  [[ $1 == $pat$rest ]]
}
shopt -s extglob

# pages N: N page URLs of the origin, tagged with this test's id.
pages() { awk -v n="$1" -v t="$T" '/\.html$/ && k++ < n {print $0 "?t=" t}' "$ORIGIN_PAGES"; }

log_mark() { wc -l < "$ORIGIN_ACCESS_LOG"; }
# log_since MARK: access log lines of this test written after MARK.
# (no line is an answer; an unreadable log is a failure, not "no request")
log_since() {
  { tail -n +"$(( $1 + 1 ))" "$ORIGIN_ACCESS_LOG" || fail "cannot read $ORIGIN_ACCESS_LOG"; } |
    { grep -F "t=$T" || [ $? = 1 ] || fail "grep of $ORIGIN_ACCESS_LOG failed"; }
}

submit() { "$DEDUPD" submit -c "$CFG" "$@" 2>>"$WORK/submit.log"; }
run_until_idle() { # prints the stats JSON
  "$DEDUPD" run -c "$CFG" --exit-when-idle "${IDLE_MS:-2500}" --stats-json "$@" \
    2>>"$WORK/run.log" || { tail -n 30 "$WORK/run.log" >&2; fail "dedupd run failed"; }
}
tail_results() {
  "$DEDUPD" tail -c "$CFG" --exit-when-idle 2000 2>>"$WORK/tail.log"
}
# topic_dump TOPIC: every message as one JSON line {key, payload, headers...}.
# A topic kcat cannot read fails the test (not "0 messages").  The dump is
# read whole first, so a reader that stops early (| head -1) is no failure.
topic_dump() {
  local out err
  out=$(mktemp "$WORK/kcat.out.XXXX") err=$(mktemp "$WORK/kcat.err.XXXX")
  kcat -b "$KAFKA_BOOTSTRAP" -C -t "$1" -o beginning -e -q -J >"$out" 2>"$err" ||
    fail "kcat could not read topic $1: $(tail -n 3 "$err")"
  cat "$out" 2>/dev/null || true
  rm -f "$out" "$err"
}
# Each run binds free ports (tests may overlap with a demo or another run).
export DEDUPD_ADMIN__LISTEN=127.0.0.1:0 DEDUPD_API__LISTEN=127.0.0.1:0

# admin_port LOG [FROM]: the admin listener port that a dedupd run writing its
# log to LOG announced (in LOG's lines from line FROM on: LOG may hold earlier
# runs; waits for the line up to 15 s).
admin_port() {
  local port
  for _ in $(seq 150); do
    port=$(awk -v from="${2:-1}" 'NR >= from && match($0, /admin listener on port [0-9]+/) {
      s = substr($0, RSTART, RLENGTH); sub(/.* /, "", s); print s; exit}' "$1" 2>/dev/null || true)
    [ -z "$port" ] || { echo "$port"; return 0; }
    sleep 0.1
  done
  fail "no admin listener line in $1"
}
# watch_metrics PID LOG [FROM]: reads the /metrics of the dedupd run PID (its
# log: LOG from line FROM) every 0.2 s until it exits, and leaves the last good
# scrape in $WORK/metrics.last: a run with --exit-when-idle is idle before it
# exits, so that scrape holds its final counts.  Then `wait PID` for its status.
# A run still there after WATCH_LIMIT_S (300) seconds is killed: a failure.
watch_metrics() {
  local port end=$(( $(date +%s) + ${WATCH_LIMIT_S:-300} ))
  rm -f "$WORK/metrics.last"
  port=$(admin_port "$2" "${3:-1}")
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$end" ]; then
      kill -9 "$1" 2>/dev/null
      fail "the run did not end by itself within ${WATCH_LIMIT_S:-300} s"
    fi
    curl -s --max-time 1 "http://127.0.0.1:$port/metrics" > "$WORK/metrics.tmp" && [ -s "$WORK/metrics.tmp" ] &&
      mv "$WORK/metrics.tmp" "$WORK/metrics.last"
    sleep 0.2
  done
  [ -s "$WORK/metrics.last" ] || fail "no /metrics read from the run (admin port $port)"
}
# scrape PORT: the /metrics text of the dedupd whose admin listener is PORT.
scrape() {
  curl -fsS --max-time 5 "http://127.0.0.1:$1/metrics" || fail "GET /metrics on port $1 failed"
}
# metric SERIES [FILE]: the value of one series of a /metrics text (name and
# labels exactly as printed, e.g. 'dedupd_results_total{outcome="fetched"}'),
# "absent" when it is not there.
metric() {
  awk -v s="$1" '$1 == s {v = $2} END {print (v == "" ? "absent" : v)}' "${2:--}"
}

# free_port ADDR: a TCP port nothing listens on at ADDR now (for helpers that
# cannot bind port 0 and report it; the usual small race applies).  Picked
# below the kernel's range for port-0 binds (ip_local_port_range), so a test
# running beside (ctest -j2) cannot be given it for a port-0 listener or an
# outgoing connection meanwhile.
free_port() {
  local p lo=32768 span
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
  span=$(( lo - 20000 ))
  (( span >= 1000 )) || span=40000 # an unusual range: take the old one
  for _ in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % span ))
    if ! (exec 3<>"/dev/tcp/$1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  fail "no free port on $1"
}
# wait_port ADDR PORT [TRIES]: until something accepts on ADDR:PORT (0.1 s steps).
wait_port() {
  for _ in $(seq 1 "${3:-100}"); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# pin_dedupd: run a private copy of $DEDUPD from here on (a shared build tree
# may be relinked while a long test runs: exec then fails, EACCES/ETXTBSY).
pin_dedupd() {
  for _ in $(seq 1 40); do
    if cp "$DEDUPD" "$WORK/dedupd.bin" 2>/dev/null && chmod 755 "$WORK/dedupd.bin" &&
      "$WORK/dedupd.bin" version >/dev/null 2>&1; then
      DEDUPD=$WORK/dedupd.bin
      return 0
    fi
    sleep 0.5
  done
  fail "cannot copy a working $DEDUPD"
}

# The hostile origin fixture (tests/fixtures/hostile_origin, from the build tree
# of the dedupd under test).  hostile_start NAME ADDR starts one on ADDR, logging
# to $WORK/NAME.log, and waits until it wrote its port (first line of
# $WORK/NAME.port); its pid goes to FIXTURE_PIDS, which stop_fixtures ends (call
# it from a test's own EXIT trap).
HOSTILE=${HOSTILE_ORIGIN_BIN:-$(dirname "$DEDUPD")/tests/fixtures/hostile_origin}
FIXTURE_PIDS=()
hostile_start() {
  [ -x "$HOSTILE" ] || fail "hostile origin not built: $HOSTILE (cmake --build build)"
  "$HOSTILE" --listen "$2" --log "$WORK/$1.log" >"$WORK/$1.port" 2>"$WORK/$1.err" &
  FIXTURE_PIDS+=($!)
  local i
  for i in $(seq 100); do
    [ -s "$WORK/$1.port" ] && return 0
    sleep 0.1
  done
  cat "$WORK/$1.err" >&2
  fail "hostile origin $1 did not start"
}
stop_fixtures() {
  local p
  for p in "${FIXTURE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${FIXTURE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}

# direct_origin_setup: one session (direct: no proxy exits, no providers) to a
# hostile origin started on 127.0.0.1 ($O its URL), where a 429 is a blocked
# status, retries back off 50..200 ms and leases last 30 s; a dedupd whose pid
# the test keeps in DPID is killed at exit with the fixtures.  Tests then set
# their own attempts, deadlines and clamps.
direct_origin_setup() {
  jq 'del(.proxy.providers)' "$CFG" >"$WORK/dedupd.json"
  CFG=$WORK/dedupd.json
  export DEDUPD_PROXY__EXITS=
  export DEDUPD_FETCH__ALLOW_TARGETS=127.0.0.1/32
  export DEDUPD_FETCH__BLOCKED_STATUSES=429
  export DEDUPD_FETCH__BACKOFF_BASE_MS=50 DEDUPD_FETCH__BACKOFF_MAX_MS=200
  export DEDUPD_STORE__LEASE_MS=30000
  trap direct_origin_cleanup EXIT
  hostile_start origin 127.0.0.1:0
  O=http://127.0.0.1:$(head -1 "$WORK/origin.port")
}
direct_origin_cleanup() {
  [ -n "${DPID:-}" ] && kill -9 "$DPID" 2>/dev/null
  stop_fixtures
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

# ---- several instances in one consumer group (the scale-out tests) ----------
# multi_setup: from here on `dedupd run`s are members of one group that leave it
# on SIGTERM (no static membership: the local config's kafka.group.instance.id
# is dropped from a copy of it, and lib.sh's DEDUPD_KAFKA__GROUP__INSTANCE__ID
# unset; a static member sends no LeaveGroup, KIP-345), and a member killed
# with -9 is dropped after 6 s (session.timeout.ms, the broker's minimum).
# Instances still running at exit are killed.
declare -A INST_PID=() INST_FROM=() INST_LOG=()
multi_setup() {
  jq 'del(.kafka["group.instance.id"])' "$CFG" >"$WORK/multi.json"
  CFG=$WORK/multi.json
  unset DEDUPD_KAFKA__GROUP__INSTANCE__ID
  export DEDUPD_KAFKA__SESSION__TIMEOUT__MS=${MULTI_SESSION_TIMEOUT_MS:-6000}
  export DEDUPD_KAFKA__HEARTBEAT__INTERVAL__MS=1000
  trap multi_cleanup EXIT
}
multi_cleanup() {
  local n
  for n in "${!INST_PID[@]}"; do kill -9 "${INST_PID[$n]}" 2>/dev/null || true; done
  stop_fixtures
  wait 2>/dev/null || true
  if [ -n "${KEEP_WORK:-}" ]; then echo "work dir kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
# inst_start NAME [VAR=VALUE...]: starts `dedupd run` instance NAME in the
# background with instance.id $T-NAME, its store $WORK/store.NAME and its log
# $WORK/NAME.log (appended: a restart of NAME adds to it), plus the given
# environment (e.g. DEDUPD_INSTANCE__ID=other to restart NAME under another
# id); extra run arguments in INST_ARGS.  Admin and api listeners bind port 0
# (inst_port reads the admin port from the log).
inst_start() {
  local n=$1; shift
  local log=$WORK/$n.log
  touch "$log"
  INST_LOG[$n]=$log
  INST_FROM[$n]=$(( $(wc -l <"$log") + 1 ))
  # shellcheck disable=SC2086
  env DEDUPD_INSTANCE__ID="$T-$n" DEDUPD_STORE__PATH="$WORK/store.$n" "$@" \
    "$DEDUPD" run -c "$CFG" ${INST_ARGS:-} 2>>"$log" &
  INST_PID[$n]=$!
  echo "$(date +%T.%N | cut -c1-12) start $n (pid ${INST_PID[$n]}${*:+, $*})" >>"$WORK/events"
}
# inst_port NAME: admin port of NAME's current run (waits for it up to 15 s).
inst_port() { admin_port "${INST_LOG[$1]}" "${INST_FROM[$1]}"; }
# inst_metric NAME SERIES: one series of NAME's /metrics ("absent" if not
# there; "down" if /metrics does not answer).
inst_metric() {
  local m
  m=$(curl -fsS --max-time 2 "http://127.0.0.1:$(inst_port "$1")/metrics" 2>/dev/null) || { echo down; return 0; }
  metric "$2" <<<"$m"
}
# inst_ready NAME [TRIES]: until NAME's /readyz answers 200 (0.1 s steps,
# default 300); fails the test with its log's tail if it never does or NAME
# exited.
inst_ready() {
  local port
  port=$(inst_port "$1")
  for _ in $(seq 1 "${2:-300}"); do
    kill -0 "${INST_PID[$1]}" 2>/dev/null || fail "instance $1 exited before it was ready: $(tail -n 5 "${INST_LOG[$1]}")"
    curl -fs --max-time 1 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "instance $1 not ready (/readyz) after $(( ${2:-300} / 10 )) s: $(tail -n 5 "${INST_LOG[$1]}")"
}
# inst_stop NAME: SIGTERM, wait for its exit; it must exit 0.
inst_stop() {
  local pid=${INST_PID[$1]} rc=0
  echo "$(date +%T.%N | cut -c1-12) SIGTERM $1" >>"$WORK/events"
  kill -TERM "$pid" 2>/dev/null || fail "instance $1 was gone before its SIGTERM: $(tail -n 5 "${INST_LOG[$1]}")"
  wait "$pid" 2>/dev/null || rc=$?
  unset "INST_PID[$1]"
  [ "$rc" = 0 ] || fail "instance $1 exited $rc after SIGTERM: $(tail -n 5 "${INST_LOG[$1]}")"
}
# inst_kill NAME: SIGKILL; it must have been alive (status 137).
inst_kill() {
  local pid=${INST_PID[$1]} rc=0
  echo "$(date +%T.%N | cut -c1-12) SIGKILL $1" >>"$WORK/events"
  kill -9 "$pid" 2>/dev/null || fail "instance $1 was gone before its kill: $(tail -n 5 "${INST_LOG[$1]}")"
  wait "$pid" 2>/dev/null || rc=$?
  unset "INST_PID[$1]"
  [ "$rc" = 137 ] || fail "instance $1 ended with status $rc, not by the SIGKILL (137)"
}
# inst_assigned NAME: partitions NAME holds now, by its log (the last
# "assigned N partitions" / "revoked N partitions" line of its current run).
inst_assigned() {
  awk -v from="${INST_FROM[$1]}" 'NR >= from && match($0, /"(assigned|revoked) [0-9]+ partitions/) {
    s = substr($0, RSTART + 1, RLENGTH - 1); split(s, w, " "); n = (w[1] == "assigned") ? w[2] : 0}
    END {print n + 0}' "${INST_LOG[$1]}"
}
# multi_wait_idle NPARTS NAME...: until the named running instances hold all
# NPARTS partitions between them (by their logs) and each reports no consumer
# lag, no op in flight and no outbox entry (/metrics, updated once a second)
# three times in a row, 1 s apart.  Fails after MULTI_IDLE_LIMIT_S (180) s.
multi_wait_idle() {
  local nparts=$1 n sum busy calm=0 end=$(( $(date +%s) + ${MULTI_IDLE_LIMIT_S:-180} ))
  shift
  while (( calm < 3 )); do
    (( $(date +%s) < end )) || fail "the instances ($*) were not idle within ${MULTI_IDLE_LIMIT_S:-180} s: $(multi_status "$@")"
    sleep 1
    sum=0 busy=0
    for n in "$@"; do
      kill -0 "${INST_PID[$n]}" 2>/dev/null || fail "instance $n exited: $(tail -n 5 "${INST_LOG[$n]}")"
      sum=$(( sum + $(inst_assigned "$n") ))
    done
    if (( sum != nparts )); then calm=0; continue; fi
    for n in "$@"; do
      for s in dedupd_consumer_lag_messages dedupd_ops_inflight dedupd_outbox_pending; do
        [ "$(inst_metric "$n" "$s")" = 0 ] || busy=1
      done
    done
    if (( busy )); then calm=0; else calm=$(( calm + 1 )); fi
  done
}
# multi_status NAME...: one line per instance: partitions, lag, in flight.
multi_status() {
  local n
  for n in "$@"; do
    printf '%s: %s partitions, lag %s, in flight %s, outbox %s; ' "$n" "$(inst_assigned "$n")" \
      "$(inst_metric "$n" dedupd_consumer_lag_messages)" "$(inst_metric "$n" dedupd_ops_inflight)" \
      "$(inst_metric "$n" dedupd_outbox_pending)"
  done
}
# committed_lag GROUP: "PARTITIONS LAG": the partitions for which GROUP has a
# committed offset and the messages past those offsets (the broker's answer,
# kafka-consumer-groups --describe; run it once the members have left).
committed_lag() {
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Dlog4j.configuration="file:$STACK_DIR/kafka/tools-log4j.properties" -cp "$KAFKA_LIBS/*" \
    org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$KAFKA_BOOTSTRAP" \
    --describe --group "$1" >"$WORK/describe.out" 2>"$WORK/describe.err" ||
    fail "kafka-consumer-groups --describe $1: $(tail -n 3 "$WORK/describe.err")"
  awk -v g="$1" '$1 == g && $4 ~ /^[0-9]+$/ {n++; lag += $6} END {print n + 0, lag + 0}' "$WORK/describe.out"
}
# origin_200s MARK: successful origin answers to this test since MARK.
origin_200s() { log_since "$1" | awk '$(NF-1) == 200' | wc -l; }
# slow_pages N [MIN MAX]: N distinct URLs of the origin's /slow/ location
# over its pages of MIN..MAX bytes (default 17000..34000), tagged with this
# test's id and a sequence number (&n=I, so N may exceed the pages; OFFSET
# starts the numbers elsewhere).  nginx sends 16 KiB/s per request after a first
# 16 KiB at once: a default page takes 1..2 s, one under 16 KiB no time.
slow_pages() {
  local min=${2:-17000} max=${3:-34000}
  local dir=${ORIGIN_DOCROOT:-/usr/share/doc/postgresql-doc-15/html}
  [ -d "$dir" ] || fail "the origin's docroot $dir is missing (ORIGIN_DOCROOT)"
  awk '/\.html$/ {sub(".*/docs/", ""); print}' "$ORIGIN_PAGES" | (cd "$dir" && xargs -r stat -c '%s %n') |
    awk -v o="$ORIGIN_URL" -v min="$min" -v max="$max" '$1 >= min && $1 <= max {print o "/slow/" $2}' > "$WORK/slow.pages" ||
    fail "cannot read the page sizes under $dir"
  [ -s "$WORK/slow.pages" ] || fail "no page of $min..$max bytes under $dir"
  awk -v n="$1" -v t="$T" -v o="${OFFSET:-0}" '{p[NR] = $0}
    END {for (i = o; i < o + n; i++) print p[i % NR + 1] "?t=" t "&n=" i}' "$WORK/slow.pages"
}

# logical_jobs N SLOW_EVERY KEY_EVERY PREFIX: N logical jobs, one JSON line
# each, on stdout: every SLOW_EVERY-th a slow page of the origin (else a
# fast one, under 12 KiB), every KEY_EVERY-th with job_key PREFIX-<i> (a
# conflict can be sent later under that key); the URL lists stay in
# $WORK/fast.urls and $WORK/slow.urls.
logical_jobs() {
  slow_pages "$1" 0 12288 > "$WORK/fast.urls"
  slow_pages "$1" > "$WORK/slow.urls"
  awk -v se="$2" -v ke="$3" -v kp="$4" 'NR == FNR {f[FNR] = $0; next} {s[FNR] = $0}
    END {for (i = 1; i <= length(f); i++) {
      u = (i % se == 0) ? s[i] : f[i]
      if (i % ke == 0) printf "{\"url\":\"%s\",\"job_key\":\"%s-%d\"}\n", u, kp, i
      else printf "{\"url\":\"%s\"}\n", u }}' "$WORK/fast.urls" "$WORK/slow.urls"
}

# wait_inflight PORT N [TENTHS]: wait (up to TENTHS x 0.1 s, default 100) until
# the run on admin port PORT has at least N ops in flight
# (dedupd_ops_inflight, refreshed once a second); prints the last reading.
wait_inflight() {
  local v=0
  for _ in $(seq "${3:-100}"); do
    v=$({ curl -s --max-time 1 "http://127.0.0.1:$1/metrics" || true; } | metric dedupd_ops_inflight)
    [[ $v =~ ^[0-9]+$ ]] && (( v >= $2 )) && break
    sleep 0.1
  done
  echo "$v"
}
