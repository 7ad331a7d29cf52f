#!/usr/bin/env bash
# The whole test suite, in stages:
#   1. deps, build (build/), the local stack
#   2. ctest in build/: Check unit tests (label unit) and integration tests
#      (label integration, against the stack), two entries at a time but the
#      RUN_SERIAL ones (tests/CMakeLists.txt)
#   3. asan: build-asan/ (clang, -DDEDUPD_SANITIZE=ON: ASan + UBSan on every
#      target; built in the background at nice 19 during stage 2) and the same
#      ctest entries there but DEDUPD_ASAN_EXCLUDE: the integration scripts run
#      build-asan/dedupd (ctest passes DEDUPD_BIN).  Any sanitizer report fails
#      the stage, also one from a dedupd whose exit code a test does not check.
#   4. valgrind: each Check unit test binary of build/ under
#      valgrind --leak-check=full (CK_FORK=no).  It takes about 19 minutes (RocksDB
#      under memcheck), so it starts right after the build, in the background at
#      nice 19 (CPU the other stages leave idle: the integration tests mostly
#      wait on the broker), and the script waits for it at the end.
#   5. fuzz: tests/fuzz/run.sh (libFuzzer smoke run, regressions replayed)
# At exit the topics this run's integration tests created (and only those)
# are dropped from the broker (drop_test_topics), which goes on running when
# it was up before.
# Every stage runs even when an earlier test stage failed; a summary with each
# stage's time closes the run, and the exit code is non-zero if any failed.
#
#   DEDUPD_TEST_FAST=1     stages 1-2 only (local iteration)
#   DEDUPD_TEST_JOBS=N     ctest entries run at once in stages 2 and 3 (default
#                          2; entries marked RUN_SERIAL always run alone)
#   DEDUPD_TEST_SKIP=LIST  skip some of: asan valgrind fuzz (comma or space separated)
#   DEDUPD_FUZZ_SECONDS=N  seconds of fuzzing per target (default 5)
#   DEDUPD_ASAN_CC=CC      compiler of build-asan (default clang; with gcc, UBSan
#                          reports go to stderr only: exit codes still fail tests)
#   DEDUPD_ASAN_EXCLUDE=RE ctest -E regex of entries left out of the asan pass, for
#                          time (default: it_crash, 10 kill -9 restarts, ~40 s;
#                          it_broker_restart, ~50 s waiting on the broker's
#                          restart, its producer paths run under ASan in
#                          it_producer_fatal; the scale-out tests it_scaleout,
#                          it_join, it_restore, it_misrouted, it_identity and
#                          it_eos, several instances whose timing under ASan outgrows
#                          the pass's budget; helm_chart, helm itself;
#                          smoke_kafka4, a JVM broker of its own, ~20 s, and
#                          the same dedupd paths as it_flow; the timing tests
#                          it_timed, it_host_limits, it_conditional_lastmod,
#                          it_single_flight_deadline, it_deadline_throttle,
#                          it_last_modified, it_retryable, it_providers (its
#                          429 depends on the origin's rate, which ASan
#                          slows), it_results_outage and it_short_ttl, and
#                          it_bad_input and it_dlq (job parsing: the fuzz
#                          targets and unit tests cover it), ~280 s under
#                          ASan, whose code paths run under ASan in
#                          it_conditional, it_single_flight, it_retry_after,
#                          it_fetch_categories and it_flow: the suite's
#                          25-minute budget on 2 cores; unit_consumer, ~30 s
#                          under ASan, two thirds of it the mock cluster's
#                          waits: the pipeline it drives runs under ASan in
#                          it_flow (fetch, fast path), it_shadow (shadow),
#                          it_cli (DLQ, the cooperative assignor refused)
#                          and it_secrets, and the binary under valgrind;
#                          stack_verify, which runs no dedupd); empty runs
#                          every entry
#   DEDUPD_KEEP_STACK=1    leave the stack running afterwards (default: stop it
#                          if this script started it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

skip=" ${DEDUPD_TEST_SKIP:-} "; skip=${skip//,/ }
[ "${DEDUPD_TEST_FAST:-0}" = 1 ] && skip="$skip asan valgrind fuzz "
want() { [[ "$skip" != *" $1 "* ]]; }

t_start=$(date +%s)
stage_names=() stage_secs=() stage_results=()
n_pass=0 n_fail=0
record() { # record NAME SECONDS RESULT
  stage_names+=("$1") stage_secs+=("$2") stage_results+=("$3")
}
# ctest_counts LOG EXPECTED: add the counts of ctest's closing line to
# n_pass/n_fail/n_skip.  A skipped entry (SKIP_RETURN_CODE, "***Skipped") is a
# skip, not a pass; a run that did not end with ctest's closing line, or ran
# another number of entries than EXPECTED (what `ctest -N` lists for the same
# selection), fails: the stage must run what it meant to run.
n_skip=0
ctest_counts() {
  local line total failed skipped
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n1 || true)
  if [ -z "$line" ]; then
    echo "test.sh: $1: no ctest summary line: nothing was tested" >&2
    n_fail=$((n_fail + 1)); return 1
  fi
  failed=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  skipped=$(grep -c -E '\*\*\*Skipped' "$1" || true)
  n_pass=$((n_pass + total - failed - skipped)) n_fail=$((n_fail + failed))
  n_skip=$((n_skip + skipped))
  if [ "$total" != "$2" ]; then
    echo "test.sh: $1: ran $total entries, expected $2" >&2
    n_fail=$((n_fail + 1)); return 1
  fi
  [ "$failed" = 0 ] && [ "$skipped" = 0 ]
}
# ctest_listed DIR [ARGS...]: how many entries `ctest -N` lists with ARGS.
ctest_listed() {
  local d=$1; shift
  ctest --test-dir "$d" -N "$@" | sed -nE 's/^Total Tests: ([0-9]+)$/\1/p'
}

t=$(date +%s)
echo "==> dependencies"
./scripts/deps.sh
record deps $(( $(date +%s) - t )) ok

t=$(date +%s)
echo "==> build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
record build $(( $(date +%s) - t )) ok

logs=$root/build/test-logs
rm -rf "$logs"; mkdir -p "$logs"

# Background jobs (valgrind, the asan build), ended with their children if the
# script stops early.
bg_pids=()
kill_tree() { # kill_tree PID: PID and its descendants
  local c
  for c in $(pgrep -P "$1" 2>/dev/null || true); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}

# valgrind_units: runs in the background; one line "NAME ok|FAILED SECONDS" per
# binary in $logs/valgrind/results.
valgrind_units() {
  local bin name t1 rc
  for name in "$@"; do
    bin=build/tests/$name
    t1=$(date +%s) rc=0
    # CK_FORK=no: the tests run in this process, where valgrind sees them.
    # Definite and indirect leaks fail; "possibly lost" (e.g. the TLS of a test's
    # detached server thread still blocked in accept() at exit) is only logged.
    CK_FORK=no nice -n 19 valgrind --error-exitcode=1 --leak-check=full \
      --errors-for-leak-kinds=definite,indirect --num-callers=40 \
      --log-file="$logs/valgrind/$name.log" "$bin" >"$logs/valgrind/$name.out" 2>&1 || rc=$?
    echo "$name $([ $rc = 0 ] && echo ok || echo FAILED) $(( $(date +%s) - t1 ))" \
      >>"$logs/valgrind/results"
  done
}
vg_pid= vg_t0=
if want valgrind; then
  echo "==> valgrind: unit test binaries, in the background (results at the end)"
  mkdir -p "$logs/valgrind"
  : >"$logs/valgrind/results"
  vg_t0=$(date +%s)
  # The binaries to check are the unit_* entries ctest registers (one
  # tests/test_<module>.c each), not whatever a glob happens to match.
  vg_names=()
  for n in $(ctest --test-dir build -N -L unit | sed -nE 's/^ *Test +#[0-9]+: unit_(.*)$/test_\1/p'); do
    vg_names+=("$n")
  done
  valgrind_units "${vg_names[@]}" &
  vg_pid=$!
  bg_pids+=("$vg_pid")
fi

asan_pid=
if want asan; then
  echo "==> asan: build (build-asan, ASan + UBSan), in the background"
  # A tree configured before with another compiler: cmake deletes its cache
  # and drops the -D options of that run, so configure again and check.
  asan_configure() {
    cmake -S . -B build-asan -DCMAKE_C_COMPILER="${DEDUPD_ASAN_CC:-clang}" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEDUPD_SANITIZE=ON
  }
  ( asan_configure \
      && { grep -q '^DEDUPD_SANITIZE:BOOL=ON$' build-asan/CMakeCache.txt || asan_configure; } \
      && grep -q '^DEDUPD_SANITIZE:BOOL=ON$' build-asan/CMakeCache.txt \
      && nice -n 19 cmake --build build-asan -j"$(nproc)" ) >"$logs/asan-build.log" 2>&1 &
  asan_pid=$!
  bg_pids+=("$asan_pid")
fi

t=$(date +%s)
echo "==> local stack"
started_stack=0
if ! ./scripts/stack.sh status >/dev/null 2>&1; then
  started_stack=1
fi
# The topics of this run's integration tests, dropped when the suite ends: a
# broker left with hundreds of them ran later runs and benchmarks slower
# (issue 13's notes).  Each test names its topics after its tag
# <test>-<pid>-<epoch seconds> (some with a "shadow." twin or a suffix) and
# lists the tag in $DEDUPD_TOPICS_LOG (tests/integration/lib.sh), so another
# suite's topics on the same broker are left alone.  DRY=1 lists them.
export DEDUPD_TOPICS_LOG=$logs/topics
: >"$DEDUPD_TOPICS_LOG"
drop_test_topics() {
  local bs names chunk
  bs=$(./scripts/stack.sh env 2>/dev/null | sed -n 's/^KAFKA_BOOTSTRAP="\(.*\)"$/\1/p')
  [ -n "$bs" ] && [ -x build/bench/raw_consumer ] && [ -s "$DEDUPD_TOPICS_LOG" ] || return 0
  names=$(timeout 20 kcat -L -b "$bs" 2>/dev/null |
    sed -nE 's/^ *topic "(([a-z]+\.)?(it_[a-z0-9_]+-[0-9]+-[0-9]+)[^"]*)".*/\3 \1/p' |
    awk 'NR == FNR { tag[$1] = 1; next } ($1 in tag) { print $2 }' "$DEDUPD_TOPICS_LOG" -)
  [ -n "$names" ] || return 0
  if [ "${DRY:-0}" = 1 ]; then echo "$names"; return 0; fi
  for chunk in $(echo "$names" | xargs -n 100 | tr ' ' ','); do
    timeout 60 build/bench/raw_consumer -b "$bs" --delete "$chunk" >/dev/null 2>&1 || true
  done
  echo "==> dropped $(echo "$names" | wc -l) topics of this run's tests"
}
cleanup() {
  local p
  drop_test_topics || true
  for p in "${bg_pids[@]}"; do
    kill -0 "$p" 2>/dev/null && kill_tree "$p"
  done
  if [ "$started_stack" = 1 ] && [ "${DEDUPD_KEEP_STACK:-0}" != 1 ]; then
    ./scripts/stack.sh down || true
  fi
}
trap cleanup EXIT
./scripts/stack.sh up
record stack $(( $(date +%s) - t )) ok

# Two entries at a time: the integration tests mostly wait on the broker, and
# those that must run alone (a broker restart, time bounds, counts of the
# throttled exit's 429s) say so with RUN_SERIAL (tests/CMakeLists.txt gives
# each reason).
ctest_jobs=${DEDUPD_TEST_JOBS:-2}

t=$(date +%s)
echo "==> unit and integration tests"
# One ctest run: unit tests (label unit) and integration tests (label
# integration, against the stack).  ctest's closing line gives the counts.
rc=0
expected=$(ctest_listed build)
ctest --test-dir build --output-on-failure --no-tests=error -j"$ctest_jobs" --timeout 600 2>&1 | tee "$logs/ctest.log" || rc=$?
ctest_counts "$logs/ctest.log" "$expected" || rc=1
record ctest $(( $(date +%s) - t )) "$([ $rc = 0 ] && echo ok || echo FAILED)"

if want asan; then
  t=$(date +%s)
  echo "==> asan: build (build-asan): waiting for it"
  rc=0
  wait "$asan_pid" || rc=$?
  if [ $rc != 0 ]; then
    tail -n 40 "$logs/asan-build.log" >&2
    n_fail=$((n_fail + 1))
    record asan $(( $(date +%s) - t )) "FAILED (build)"
  else
    asan_exclude=${DEDUPD_ASAN_EXCLUDE-^(it_crash|it_broker_restart|it_scaleout|it_join|it_restore|it_misrouted|it_identity|it_eos|helm_chart|smoke_kafka4|it_timed|it_host_limits|it_conditional_lastmod|it_single_flight_deadline|it_deadline_throttle|it_last_modified|it_retryable|it_providers|it_results_outage|it_short_ttl|it_bad_input|it_dlq|unit_consumer|stack_verify)\$}
    echo "==> asan: unit and integration tests (build-asan/dedupd)${asan_exclude:+, all but /$asan_exclude/}"
    # A report aborts the process (SIGABRT: exit 134, never one of dedupd's own
    # codes) and goes to a file <dir>/san.PID instead of stderr: a report from a
    # dedupd that a test runs in the background, or whose stderr and status it
    # does not look at, still fails the stage.
    sanlogs=$root/build-asan/sanitizer-logs
    rm -rf "$sanlogs"; mkdir -p "$sanlogs"
    rc=0
    expected=$(ctest_listed build-asan ${asan_exclude:+-E "$asan_exclude"})
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$sanlogs/san${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$sanlogs/san${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
      ctest --test-dir build-asan --output-on-failure --no-tests=error -j"$ctest_jobs" --timeout 900 \
        ${asan_exclude:+-E "$asan_exclude"} 2>&1 \
      | tee "$logs/asan-ctest.log" || rc=$?
    ctest_counts "$logs/asan-ctest.log" "$expected" || rc=1
    if [ -n "$(ls -A "$sanlogs")" ]; then
      rc=1
      n_fail=$((n_fail + 1))
      echo "asan: sanitizer reports (all in $sanlogs):" >&2
      for f in "$sanlogs"/*; do
        echo "--- $f" >&2
        head -n 60 "$f" >&2
      done
      echo "(stacks end at libraries built without frame pointers, e.g. libcurl: for" \
        "full ones run again with ASAN_OPTIONS=fast_unwind_on_malloc=0)" >&2
    fi
    record asan $(( $(date +%s) - t )) "$([ $rc = 0 ] && echo ok || echo FAILED)"
  fi
fi

if want fuzz; then
  t=$(date +%s)
  echo "==> fuzz smoke run"
  rc=0
  ./tests/fuzz/run.sh "${DEDUPD_FUZZ_SECONDS:-5}" || rc=$?
  if [ $rc = 0 ]; then n_pass=$((n_pass + 1)); else n_fail=$((n_fail + 1)); fi
  record fuzz $(( $(date +%s) - t )) "$([ $rc = 0 ] && echo ok || echo FAILED)"
fi

if [ -n "$vg_pid" ]; then
  t=$(date +%s)
  echo "==> valgrind: unit test binaries (build/tests/test_*)"
  rc=0
  wait "$vg_pid" || { echo "test.sh: the valgrind job failed (status $?)" >&2; rc=1 n_fail=$((n_fail + 1)); }
  vg_pid=
  if [ "${#vg_names[@]}" = 0 ] || [ "$(wc -l <"$logs/valgrind/results")" != "${#vg_names[@]}" ]; then
    echo "test.sh: valgrind checked $(wc -l <"$logs/valgrind/results") of ${#vg_names[@]} unit test binaries" >&2
    rc=1 n_fail=$((n_fail + 1))
  fi
  while read -r name result secs; do
    echo "    $name $result ($secs s)"
    if [ "$result" = ok ]; then
      n_pass=$((n_pass + 1))
    else
      rc=1 n_fail=$((n_fail + 1))
      tail -n 20 "$logs/valgrind/$name.out" >&2
      grep -E -A30 '^==[0-9]+== (Invalid|Conditional|Use of|Syscall|Mismatched|Source and|Argument|[0-9,]+ bytes in [0-9,]+ blocks are (definitely|possibly))' \
        "$logs/valgrind/$name.log" | head -n 80 >&2 || true
      echo "    (full log: $logs/valgrind/$name.log)" >&2
    fi
  done <"$logs/valgrind/results"
  record valgrind $(( $(date +%s) - vg_t0 )) \
    "$([ $rc = 0 ] && echo ok || echo FAILED) (background; waited $(( $(date +%s) - t )) s)"
fi

echo "==> summary"
status=0
for i in "${!stage_names[@]}"; do
  printf '    %-9s %5d s  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" "${stage_results[$i]}"
  [ "${stage_results[$i]%% *}" = ok ] || status=1
done
printf '    %-9s %5d s\n' total $(( $(date +%s) - t_start ))
[ -z "${skip// /}" ] || echo "    skipped:$skip" | tr -s ' '
# Each ctest entry (both trees), each binary under valgrind and the fuzz run
# count as one.
echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped"
# The exit status follows the counts too: a failure counted anywhere, or a
# skip (every tool a test needs is installed by scripts/deps.sh), fails.
[ "$n_fail" = 0 ] && [ "$n_skip" = 0 ] || status=1
exit "$status"
