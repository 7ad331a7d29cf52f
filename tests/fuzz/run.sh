#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] [TARGET...]
#
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/, replays
# tests/fuzz/regressions/<target>/*, then fuzzes each target for SECONDS
# (default 5), one at a time, starting from tests/fuzz/corpus/<target>/ plus the
# working corpus that earlier runs grew in build-fuzz/corpus/<target>/.  Prints
# per target: executions, exec/s, crashes.  Exits non-zero on any crash, leak,
# timeout, out-of-memory or failed regression.
#
#   tests/fuzz/run.sh               # smoke run for scripts/test.sh (~5 s each)
#   tests/fuzz/run.sh 600           # long run: 10 minutes per target
#   tests/fuzz/run.sh 60 url job    # some targets only
#
# Environment:
#   FUZZ_BUILD_DIR  build directory (default build-fuzz)
#   FUZZ_ARGS       extra libFuzzer flags (e.g. "-max_len=65536")
#   FUZZ_SKIP_KNOWN 1 = do not check properties on inputs of a known, reported
#                   bug class (see fuzz_common.h, README.md), for long runs
#                   that must look past it; regressions are replayed strictly
#
# A crash leaves its input in build-fuzz/artifacts/<target>/; reproduce with
#   build-fuzz/fuzz_<target> build-fuzz/artifacts/<target>/crash-...
# minimize with -minimize_crash=1 -runs=100000, then keep it as
# tests/fuzz/regressions/<target>/<name> (replayed by every run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

secs=${1:-5}
shift || true
all_targets=(job api_submit url retry_after config record)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
case "$secs" in ''|*[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2;; esac
bdir=${FUZZ_BUILD_DIR:-$root/build-fuzz}

command -v clang >/dev/null || { echo "fuzz: clang not found (scripts/deps.sh installs clang libclang-rt-14-dev)" >&2; exit 1; }

echo "==> fuzz build ($bdir)"
t0=$(date +%s)
mkdir -p "$bdir/logs"
if [ ! -f "$bdir/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$bdir" -DCMAKE_C_COMPILER=clang >"$bdir/logs/cmake.log" 2>&1 \
    || { cat "$bdir/logs/cmake.log" >&2; exit 1; }
fi
if ! cmake --build "$bdir" -j"$(nproc)" >"$bdir/logs/build.log" 2>&1; then
  tail -n 40 "$bdir/logs/build.log" >&2
  exit 1
fi
echo "    built in $(( $(date +%s) - t0 )) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
summary=()
for t in "${targets[@]}"; do
  bin="$bdir/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target '$t' (have: ${all_targets[*]})" >&2; exit 2; }
  seeds="$here/corpus/$t"
  work="$bdir/corpus/$t"
  arts="$bdir/artifacts/$t"
  log="$bdir/logs/$t.log"
  mkdir -p "$work" "$arts" "$(dirname "$log")"

  # 1. regressions: every saved crash input must now run clean
  reg_n=0 reg_bad=0
  if [ -d "$here/regressions/$t" ]; then
    for f in "$here/regressions/$t"/*; do
      [ -f "$f" ] || continue
      reg_n=$((reg_n + 1))
      # strict: FUZZ_SKIP_KNOWN never applies to a saved regression
      if ! env -u FUZZ_SKIP_KNOWN "$bin" "$f" </dev/null \
          >"$bdir/logs/$t.regression.log" 2>&1; then
        reg_bad=$((reg_bad + 1))
        echo "fuzz: $t: regression $(basename "$f") still fails:" >&2
        grep -a -E -A1 "ERROR|violated|runtime error" \
          "$bdir/logs/$t.regression.log" | head -n 4 >&2 || true
      fi
    done
  fi

  # 2. fuzz for $secs seconds
  before=$(find "$arts" -type f | wc -l)
  rc=0
  # shellcheck disable=SC2086
  "$bin" "$work" "$seeds" -max_total_time="$secs" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$arts/" \
    ${FUZZ_ARGS:-} </dev/null >"$log" 2>&1 || rc=$?
  after=$(find "$arts" -type f | wc -l)
  crashes=$((after - before))
  [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  # (no "cov:" line when an input of the corpus crashes before INITED)
  cov=$(grep -a -oE 'cov: [0-9]+' "$log" | tail -n1 | cut -d' ' -f2 || true)
  line=$(printf '%-12s %12s executions %8s exec/s  cov %5s  crashes %d  regressions %d/%d ok' \
    "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$crashes" "$((reg_n - reg_bad))" "$reg_n")
  echo "$line"
  summary+=("$line")
  if [ "$crashes" -ne 0 ]; then
    failed=1
    echo "fuzz: $t: crash (exit $rc); log $log, inputs in $arts:" >&2
    grep -a -E -A1 "ERROR:|violated|runtime error" "$log" | head -n 6 >&2 || true
    grep -a -E "^    #[0-9]+ .* in " "$log" | grep -v -E "libFuzzer|fuzzer::|libc\.so|__sanitizer|_start|raise|abort" \
      | head -n 12 >&2 || true
    ls -t "$arts" | head -n 3 | sed "s|^|    $arts/|" >&2
  fi
  [ "$reg_bad" -eq 0 ] || failed=1
done

echo "==> fuzz summary (${secs} s per target${FUZZ_SKIP_KNOWN:+, FUZZ_SKIP_KNOWN=$FUZZ_SKIP_KNOWN})"
printf '    %s\n' "${summary[@]}"
exit "$failed"
