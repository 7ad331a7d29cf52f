#!/usr/bin/env bash
# Issue 6: `bench/run.sh --quick` runs every scenario against the live stack and
# produces every row of the table, each with dedupd's figure, the ceiling's
# figure from the same run and their ratio (figures are printed, not judged:
# the bench is not a timed test).
source "$(dirname "$0")/lib.sh"

# The suite's short form: --quick at smaller sizes (what is checked is that each
# scenario runs and yields its row, not the figures), in about half the
# time.  BENCH_QUICK_SIZES=1 runs --quick's own sizes (the long form); a
# BENCH_* size set by the caller is kept either way.
if [ "${BENCH_QUICK_SIZES:-0}" != 1 ]; then
  export BENCH_N1=${BENCH_N1:-5000} BENCH_N2=${BENCH_N2:-500} BENCH_N3=${BENCH_N3:-300}
  export BENCH_N6=${BENCH_N6:-5000} BENCH_N7=${BENCH_N7:-10000}
  export BENCH_STORE_SIZES=${BENCH_STORE_SIZES:-20000} BENCH_STORE_DUPS=${BENCH_STORE_DUPS:-40000}
  export BENCH_LAT_SECONDS=${BENCH_LAT_SECONDS:-2} BENCH_LAT2_SECONDS=${BENCH_LAT2_SECONDS:-1}
  export BENCH_IDLE_MS=${BENCH_IDLE_MS:-500}
fi

BENCH_RESULTS_DIR=$WORK/results BUILD_DIR=${DEDUPD_BUILD_DIR:-$(dirname "$DEDUPD")} \
  bash "$ROOT/bench/run.sh" --quick --no-build >"$WORK/table.md" 2>"$WORK/bench.log" ||
  { tail -n 40 "$WORK/bench.log" >&2; fail "bench/run.sh --quick failed"; }
cat "$WORK/table.md"
J=$WORK/results/latest.json
[ -s "$J" ] || fail "no $J"
expect_eq "$(jq -r .quick "$J")" true "quick run recorded"
expect_eq "$(jq -r '[.rows[].id] | join(" ")' "$J")" "1 1k 1b 2a 2b 3a 3b 4a 4b 5 5b 6 6b 6c 7 7k 7b" "rows"
# every row: a positive dedupd figure, a positive ceiling, their ratio, inputs
bad=$(jq -r '.rows[] | select((.dedupd | type) != "number" or .dedupd <= 0
  or (.ceiling | type) != "number" or .ceiling <= 0
  or (.ratio | type) != "number" or .ratio <= 0
  or (.inputs | type) != "object" or (.inputs | length) == 0) | .id' "$J")
expect_eq "$bad" "" "rows without a figure, a ceiling, a ratio or inputs"
# the Markdown table printed the same rows
expect_eq "$(grep -cE '^\| (1|1k|1b|2a|2b|3a|3b|4a|4b|5|5b|6|6b|6c|7|7k|7b) \|' "$WORK/table.md")" 17 "table rows on stdout"
