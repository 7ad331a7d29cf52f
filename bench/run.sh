#!/usr/bin/env bash
# bench/run.sh [--quick] [--no-build] [--keep-topics] [--only 1,2,...] [--peers]
#
# The benchmarks of issue 6: each scenario measures dedupd and, in the same
# run on the same machine, the physical ceiling it is compared with, and prints
# one Markdown table (id | scenario | dedupd | ceiling | ratio | target |
# inputs) on stdout; the same rows go as JSON to bench/results/<UTC stamp>.json
# and bench/results/latest.json ($BENCH_RESULTS_DIR overrides the directory).
# Progress goes to stderr.
#
#   1   replay storm: N jobs already complete in the store are delivered again
#       (produced again by `dedupd submit`, so they carry the dedupd-op-id /
#       dedupd-request-hash headers): dedupd run --shadow decisions/s vs
#       raw_consumer draining the same topic, medians of BENCH_ROUNDS1 (3)
#       rounds in rotating order, each on a fresh copy of the jobs.
#       Target 0.6.  Row 1k: the same replays with consumer.prefetch_kick_ms=0.
#   1b  the same replay produced by `kcat -P` (no headers: every copy takes
#       the full parse path).  Also: submit vs kcat -P produce rates.
#   2a  new-claim path: N new jobs fetched from the local nginx origin
#       (direct): results/s end to end vs curl_multi_bench on the same URLs.
#   2b  the same vs raw_consumer draining the jobs topic.
#   3a  through the HTTP exit (tinyproxy 127.0.0.3, not rate-limited) vs
#       curl_multi_bench through the same exit.  Target 0.9.
#   3b  through the SOCKS5 exit (dante 127.0.0.4, socks5h).  Target 0.9.
#   4a..4d  store: build/bench/store_bench (claims/s new and duplicate at each
#       size against raw RocksDB with the same options; RSS).
#   5   latency at a fixed offered load the new-claim path sustains
#       (bench/latency: produced -> result visible), vs one Kafka hop
#       (produce -> consume) at the same load.
#   5b  the same at 2k jobs/s (the issue's example load).
#   6   shadow mode on 50% new / 50% duplicate jobs vs raw_consumer (6b
#       store.sync=false, 6c processing.guarantee=exactly_once: same topic,
#       fresh store and group each).
#   6b  the same with store.sync=false (what the per-op fsync costs).
#   7   changelog restore (issue 12): one changelog partition filled with N
#       op records (bench/changelog_fill), restored into a fresh store by
#       bench/restore_bench (dedupd's changelog_restore), records/s vs
#       raw_consumer draining the same changelog topic.  Target 0.5.  The
#       restore is run twice: the second, from the checkpoint, reads nothing.
#   7b  time to ready: `dedupd run` (fresh store, the same group, its empty
#       1-partition jobs topic) from process start to the first 200 of
#       /readyz, next to restore_bench's restore time of the same partition.
#   13p (only with --peers; alone unless --only names others too) dedupd
#       against the benchmark peers of bench/peers/ (what a team would build
#       instead), on one topic filled once by `dedupd submit` (50% duplicates,
#       4 partitions, keyed by op_id) and read through once to warm the page
#       cache: BENCH_PEER_ROUNDS (3) rounds, the order reversed every other
#       round, of raw_consumer (the ceiling), raw_consumer --produce (the
#       consume-and-produce ceiling: one small record per message read, a
#       group as dedupd's, no dedup, no store), `dedupd run --shadow`
#       (at_least_once, then processing.guarantee=exactly_once; fresh group and
#       store each run), the Python + Redis peer (bench/peers/python-redis,
#       PIPELINE=1 and 0; its own redis-server, AOF everysec, in the work dir)
#       and, when bench/peers/kstreams/run.sh exists, the Kafka Streams peer
#       (GUARANTEE=at_least_once and exactly_once_v2).  Every run reads the whole
#       topic (MAX_MESSAGES = its size); rows give the medians and dedupd/peer;
#       a row any of whose runs decided a `new` count other than the topic's
#       distinct op_ids is marked WRONG (no ratio, exit status 1).
#
# Sizes (full / --quick): replay 1M / 20k jobs; new-claim 10k / 2k; proxy 5k
# / 1k each; store 1M / 100k keys (10M: see STORE_SIZES below); latency
# 100 jobs/s x 30 s / 5 s and 2000 jobs/s x 3 s / 1 s; shadow 50k / 20k;
# changelog restore 1M / 100k records; peers 200k / 20k jobs (BENCH_NP).
# (The new-claim path runs at a few hundred jobs/s here: see the note of
# issue 6; the sizes keep the full run under 20 minutes.)  Override with BENCH_N1, BENCH_N2,
# BENCH_N3, BENCH_N6, BENCH_N7, BENCH_STORE_SIZES, BENCH_STORE_DUPS, BENCH_LAT_RATE,
# BENCH_LAT_SECONDS, BENCH_LAT2_SECONDS, BENCH_NP, BENCH_ROUNDS1, BENCH_PEER_ROUNDS (BENCH_KSTREAMS_PEER:
# another bench/peers/kstreams/run.sh; BENCH_PEER_REDIS_PORT: the first port tried);
# BENCH_IDLE_MS (1500) is the idle time after which a scenario's `dedupd run` exits.
#
# Every scenario has its own topics (bench.<run>.<scenario>.*, 4 partitions,
# made by `dedupd topics`), consumer groups and stores (in a temporary
# directory), deleted at its end (raw_consumer --delete) unless --keep-topics.
# Exit status: 0 when every row was measured (targets missed are reported, not
# failed), 1 when a scenario failed (its rows carry "error").
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
CFG=$ROOT/config/dedupd.json
RESULTS_DIR=${BENCH_RESULTS_DIR:-$ROOT/bench/results}
QUICK=0 DO_BUILD=1 KEEP_TOPICS=0 ONLY="" PEERS=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --no-build) DO_BUILD=0 ;;
    --keep-topics) KEEP_TOPICS=1 ;;
    --only) ONLY=${2:?--only needs a list}; shift ;;
    --peers) PEERS=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$QUICK" = 1 ]; then
  N1=${BENCH_N1:-20000} N2=${BENCH_N2:-2000} N3=${BENCH_N3:-1000} N6=${BENCH_N6:-20000}
  N7=${BENCH_N7:-30000} NP=${BENCH_NP:-20000}
  STORE_SIZES=${BENCH_STORE_SIZES:-100000} STORE_DUPS=${BENCH_STORE_DUPS:-200000}
  LAT_SECONDS=${BENCH_LAT_SECONDS:-5} LAT2_SECONDS=${BENCH_LAT2_SECONDS:-1}
else
  N1=${BENCH_N1:-1000000} N2=${BENCH_N2:-10000} N3=${BENCH_N3:-5000} N6=${BENCH_N6:-50000}
  N7=${BENCH_N7:-1000000} NP=${BENCH_NP:-200000}
  # 10M keys take store_bench over half an hour here (its complete phase runs at
  # ~9k ops/s), which the 20-minute budget cannot hold: BENCH_STORE_SIZES=1000000,10000000
  STORE_SIZES=${BENCH_STORE_SIZES:-1000000} STORE_DUPS=${BENCH_STORE_DUPS:-1000000}
  LAT_SECONDS=${BENCH_LAT_SECONDS:-30} LAT2_SECONDS=${BENCH_LAT2_SECONDS:-3}
fi
LAT_RATE=${BENCH_LAT_RATE:-100}
LAT2_RATE=2000
PEER_ROUNDS=${BENCH_PEER_ROUNDS:-3}
ROUNDS1=${BENCH_ROUNDS1:-3}
[[ $ROUNDS1 =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: BENCH_ROUNDS1 must be a positive number" >&2; exit 2; }
PEER_IDLE_MS=5000
PARTS=4
IDLE_MS=${BENCH_IDLE_MS:-1500} # how long a `dedupd run` stays idle (all at the end, nothing in flight) before it exits
CONC=256      # = dedupd's fetch.max_inflight default
MAX_HOST=64   # = dedupd's CURLMOPT_MAX_HOST_CONNECTIONS

log() { echo "[bench $(date +%T)] $*" >&2; }
now() { date +%s.%N; }

log "stack up"
"$ROOT/scripts/stack.sh" up >&2 || { log "scripts/stack.sh up failed"; exit 1; }
eval "$("$ROOT/scripts/stack.sh" env)"
if [ "$DO_BUILD" = 1 ]; then
  log "build ($BUILD)"
  { cmake -S "$ROOT" -B "$BUILD" >/dev/null &&
    cmake --build "$BUILD" -j2 --target dedupd store_bench raw_consumer \
      curl_multi_bench latency changelog_fill restore_bench >/dev/null; } || { log "build failed"; exit 1; }
fi
for b in dedupd bench/raw_consumer bench/curl_multi_bench bench/latency; do
  [ -x "$BUILD/$b" ] || { log "missing $BUILD/$b (build it, or drop --no-build)"; exit 1; }
done
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD -- src include bench 2>/dev/null || echo "+uncommitted")
read -r -a _exits <<<"$PROXY_EXITS"
HTTP_EXIT=${BENCH_HTTP_EXIT:-${_exits[1]:-http://127.0.0.3:18888}}
SOCKS_EXIT=${BENCH_SOCKS_EXIT:-${SOCKS_EXITS%% *}}

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RUN=bench.${STAMP}.$$
WORK=$(mktemp -d "/tmp/dedupd-bench.XXXXXX")
# The build tree is shared: every scenario runs copies taken now, so a rebuild
# by someone else during the run cannot mix two binaries into one table.
mkdir -p "$WORK/bin"
for b in dedupd bench/raw_consumer bench/curl_multi_bench bench/latency bench/store_bench \
  bench/changelog_fill bench/restore_bench; do
  [ -x "$BUILD/$b" ] && cp "$BUILD/$b" "$WORK/bin/"
done
DEDUPD=$WORK/bin/dedupd
RAW=$WORK/bin/raw_consumer
CURLB=$WORK/bin/curl_multi_bench
LAT=$WORK/bin/latency
STOREB=$WORK/bin/store_bench
FILL=$WORK/bin/changelog_fill
RESTB=$WORK/bin/restore_bench
DEDUPD_SHA=$(sha256sum "$DEDUPD" | cut -c1-12)
ROWS=$WORK/rows.ndjson
: >"$ROWS"
cleanup() {
  if [ "$KEEP_TOPICS" = 0 ] && [ -s "$WORK/topics" ]; then
    "$RAW" -b "$KAFKA_BOOTSTRAP" --delete "$(sort -u "$WORK/topics" | paste -sd,)" \
      >/dev/null 2>&1 || true
  fi
  [ -n "${BENCH_KEEP_WORK:-}" ] && { log "work dir kept: $WORK"; return; }
  rm -rf "$WORK"
}
trap cleanup EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u +%FT%TZ)
T_START=$(now)
log "run $RUN (quick=$QUICK), load $LOAD_BEFORE, work $WORK"

export DEDUPD_BROKER__BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP
export DEDUPD_ADMIN__LISTEN=127.0.0.1:0 DEDUPD_API__LISTEN=127.0.0.1:0
export DEDUPD_LOG__LEVEL=info
export DEDUPD_PROXY__EXITS=   # direct unless a scenario sets an exit

# ---- helpers ------------------------------------------------------------------

# use_topics NAME: this scenario's topics (created), group, instance and store.
use_topics() {
  local t=$RUN.$1
  export DEDUPD_TOPICS__JOBS=$t.jobs DEDUPD_TOPICS__RESULTS=$t.results
  export DEDUPD_TOPICS__CONFLICTS=$t.conflicts DEDUPD_TOPICS__DLQ=$t.dlq
  export DEDUPD_CONSUMER__GROUP_ID=$t DEDUPD_TAIL__GROUP_ID=$t.tail
  export DEDUPD_KAFKA__GROUP__INSTANCE__ID=$t DEDUPD_INSTANCE__ID=$t
  export DEDUPD_STORE__PATH=$WORK/$1/store DEDUPD_TAIL__STORE_PATH=$WORK/$1/tail
  mkdir -p "$WORK/$1"
  printf '%s\n' "$t.jobs" "$t.results" "$t.conflicts" "$t.dlq" \
    "shadow.$t.results" "shadow.$t.conflicts" "shadow.$t.dlq" >>"$WORK/topics"
  "$DEDUPD" topics -c "$CFG" --partitions $PARTS >/dev/null 2>>"$WORK/$1/topics.log" &&
    "$DEDUPD" topics -c "$CFG" --partitions $PARTS --shadow >/dev/null 2>>"$WORK/$1/topics.log" ||
    die "dedupd topics failed: $(tail -n 3 "$WORK/$1/topics.log")"
}
# extra_topic NAME: one more topic (4 partitions) through `dedupd topics`.
extra_topic() {
  echo "$1" >>"$WORK/topics"
  DEDUPD_TOPICS__JOBS=$1 "$DEDUPD" topics -c "$CFG" --partitions $PARTS >/dev/null 2>&1 ||
    die "dedupd topics ($1) failed"
}
drop_topics() { # drop_topics NAME...: delete these scenarios' topics now
  [ "$KEEP_TOPICS" = 1 ] && return 0
  local list=""
  for s in "$@"; do list+=$(grep -F "$RUN.$s." "$WORK/topics" | paste -sd, -),; done
  "$RAW" -b "$KAFKA_BOOTSTRAP" --delete "${list%,}" >/dev/null 2>&1 || true
}
die() { echo "$*" >"$WORK/error"; log "ERROR: $*"; exit 1; }
jget() { jq -er "$1" <<<"$2" 2>/dev/null || echo null; }
num() { [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; }
# run_dd LOG [args]: dedupd run until idle; prints the stats JSON line.
run_dd() {
  local lg=$1; shift
  "$DEDUPD" run -c "$CFG" --exit-when-idle "$IDLE_MS" --stats-json "$@" 2>>"$lg" ||
    die "dedupd run $* failed: $(grep -v '"info"' "$lg" | tail -n 3)"
}
submit() { # submit FILE LOG: prints seconds taken
  local t0 t1
  t0=$(now)
  "$DEDUPD" submit -c "$CFG" "$1" >/dev/null 2>>"$2" || die "dedupd submit failed: $(tail -n 2 "$2")"
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
raw_drain() { # raw_drain TOPIC: raw_consumer JSON
  local out
  out=$("$RAW" -b "$KAFKA_BOOTSTRAP" -t "$1") || die "raw_consumer $1 failed: $out"
  echo "$out"
}
avg_len() { awk '{s += length($0)} END {printf "%.0f", NR ? s / NR : 0}' "$1"; }
urls_of() { awk -F'"' '{print $4}' "$1"; }
# row ID SCENARIO DEDUPD CEILING RATIO_MODE TARGET DD_DISPLAY CEIL_DISPLAY INPUTS_JSON DETAIL_JSON [EXTRA_JSON]
#   RATIO_MODE: up (dedupd/ceiling: higher is better) | down (ceiling/dedupd) |
#   peer (dedupd/peer: a benchmark peer in the ceiling column).  EXTRA_JSON is
#   merged into the row last (13p's WRONG rows: {"wrong": true, "ratio": null}).
row() {
  local ratio=null det=${10:-} ex=${11:-}
  [ -n "$det" ] || det='{}'
  [ -n "$ex" ] || ex='{}'
  if num "$3" && num "$4"; then
    # three significant digits
    if [ "$5" = up ] || [ "$5" = peer ]; then ratio=$(awk -v a="$3" -v b="$4" 'BEGIN { if (b > 0) printf "%.3g", a / b; else print "null" }')
    else ratio=$(awk -v a="$3" -v b="$4" 'BEGIN { if (a > 0) printf "%.3g", b / a; else print "null" }'); fi
    ratio=$(jq -n "$ratio")
  fi
  jq -nc --arg id "$1" --arg sc "$2" --argjson d "$(num "$3" && echo "$3" || echo null)" \
    --argjson c "$(num "$4" && echo "$4" || echo null)" --argjson r "$ratio" \
    --arg mode "$5" --argjson tg "${6:-null}" --arg dd "$7" --arg cd "$8" \
    --argjson in "$9" --argjson det "$det" --argjson ex "$ex" \
    '{id: $id, scenario: $sc, dedupd: $d, ceiling: $c, ratio: $r, ratio_is:
      (if $mode == "up" then "dedupd/ceiling" elif $mode == "peer" then "dedupd/peer" else "ceiling/dedupd" end),
      target: $tg, meets_target: (if $tg == null or $r == null then null else $r >= $tg end),
      dedupd_display: $dd, ceiling_display: $cd, inputs: $in, detail: $det} + $ex' >>"$ROWS"
  log "row $1: $7 vs $8 (ratio $ratio)"
}
fmt() { printf '%.0f' "$1"; }

# ---- 1: replay storm ----------------------------------------------------------
s1() {
  use_topics s1
  local d=$WORK/s1 t=$RUN.s1
  log "1: $N1 jobs"
  "$ROOT/bench/gen_jobs.sh" "$N1" "$t" unique "$ORIGIN_PAGES" >"$d/jobs.ndjson" || die "gen_jobs failed"
  local jb sub1 sub2 kc st setup replay rawj rep_b raw_b
  jb=$(avg_len "$d/jobs.ndjson")
  sub1=$(submit "$d/jobs.ndjson" "$d/submit.log")
  log "1: submitted in $sub1 s; kcat -P copy"
  extra_topic "$t.kcat"
  st=$(now)
  kcat -b "$KAFKA_BOOTSTRAP" -P -t "$t.kcat" -X compression.type=lz4 -X linger.ms=5 \
    -X enable.idempotence=true -X acks=all <"$d/jobs.ndjson" 2>>"$d/kcat.log" || die "kcat -P failed"
  kc=$(echo "$(now) - $st" | bc -l)
  log "1: kcat -P in $kc s; setup pass (shadow, sync off, 20000 in flight: completes the ops)"
  setup=$(DEDUPD_STORE__SYNC=false DEDUPD_FETCH__MAX_INFLIGHT=20000 run_dd "$d/setup.log" --shadow)
  [ "$(jget .new "$setup")" = "$N1" ] || die "setup pass: expected $N1 new ops, got: $setup"
  # BENCH_ROUNDS1 rounds (3), each on its own topic holding one copy of the
  # jobs (submitted again, so with the identity headers) read by its own
  # group (as 1b), so that every replay and every raw drain reads the same N
  # messages; the order of the runs rotates (below); the row takes the
  # medians (one round moved the ratio from 0.46 to 1.01 between sessions)
  # Each round also replays with consumer.prefetch_kick_ms=0 (row 1k: the
  # same copy under another group, librdkafka 2.0.2's fetch pauses left as
  # they are; include/prefetch_kick.h)
  local r tr reps=() raws=() nks=() rs ws ns rr rw nk
  replay_round() { # replay_round [GROUP_SUFFIX KICK_MS]
    DEDUPD_TOPICS__JOBS=$tr DEDUPD_CONSUMER__GROUP_ID=$tr${1:-} \
      DEDUPD_CONSUMER__PREFETCH_KICK_MS=${2:-20} run_dd "$d/replay.log" --shadow
  }
  for ((r = 1; r <= ROUNDS1; r++)); do
    tr=$t.r$r
    extra_topic "$tr"
    # its groups' changelogs (run --shadow creates them)
    printf '%s\n' "shadow.$tr-changelog" "shadow.$tr.nokick-changelog" >>"$WORK/topics"
    log "1: round $r: submit again to $tr, replay, replay without the kick, raw drain"
    sub2=$(DEDUPD_TOPICS__JOBS=$tr submit "$d/jobs.ndjson" "$d/submit.log")
    # the order rotates: over three rounds each run takes each place once
    case $((r % 3)) in
      1) replay=$(replay_round); nk=$(replay_round .nokick 0); rawj=$(raw_drain "$tr") ;;
      2) nk=$(replay_round .nokick 0); rawj=$(raw_drain "$tr"); replay=$(replay_round) ;;
      0) rawj=$(raw_drain "$tr"); replay=$(replay_round); nk=$(replay_round .nokick 0) ;;
    esac
    [ "$(jget .duplicates "$replay")" = "$N1" ] || die "replay: expected $N1 duplicates, got: $replay"
    [ "$(jget .duplicates "$nk")" = "$N1" ] || die "replay (kick off): expected $N1 duplicates, got: $nk"
    [ "$(jget .prefetch_kicks "$nk")" = 0 ] || die "replay (kick off): kicked: $nk"
    [ "$(jget .messages "$rawj")" = "$N1" ] || die "raw drain of $tr: expected $N1 messages, got: $rawj"
    reps+=("$replay"); raws+=("$rawj"); nks+=("$nk")
  done
  # rounds_sum: the rounds' stats lines -> {median: the (lower) median round,
  # all: "a / b / c" in round order, runs: [...]}
  rounds_sum() {
    jq -sc '{median: (sort_by(.messages_per_second) | .[(length - 1) / 2 | floor]),
             all: (map(.messages_per_second | round | tostring) | join(" / ")), runs: .}'
  }
  rs=$(printf '%s\n' "${reps[@]}" | rounds_sum); ws=$(printf '%s\n' "${raws[@]}" | rounds_sum)
  ns=$(printf '%s\n' "${nks[@]}" | rounds_sum)
  replay=$(jq -c .median <<<"$rs"); rawj=$(jq -c .median <<<"$ws")
  rr=$(jget .messages_per_second "$replay"); rw=$(jget .messages_per_second "$rawj")
  local sr kr
  sr=$(echo "$N1 / $sub1" | bc -l); kr=$(echo "$N1 / $kc" | bc -l)
  row 1 "replay storm: complete jobs redelivered (submit-tagged: fast path)" \
    "$rr" "$rw" up 0.6 \
    "$(fmt "$rr") decisions/s median of $ROUNDS1 ($(jget .all "$rs"); fast path $(jget .fast_path "$replay")/$N1; prefetch kicks $(jget .prefetch_kicks "$replay"))" \
    "$(fmt "$rw") msg/s raw_consumer median of $ROUNDS1 ($(jget .all "$ws"); $N1 msgs each)" \
    "$(jq -nc --argjson n "$N1" --argjson jb "$jb" --argjson p $PARTS \
        --argjson sr "$(fmt "$sr")" --argjson kr "$(fmt "$kr")" --argjson s2 "$(fmt "$(echo "$N1 / $sub2" | bc -l)")" \
        '{jobs: $n, job_bytes: $jb, partitions: $p, mode: "run --shadow (own store/group/topics)",
          produce_submit_per_s: $sr, produce_submit_again_per_s: $s2, produce_kcat_per_s: $kr}')" \
    "$(jq -nc --argjson a "$setup" --argjson b "$replay" --argjson c "$rawj" --argjson rs "$rs" --argjson ws "$ws" \
        '{setup: $a, replay: $b, raw: $c, replays: $rs.runs, raws: $ws.runs}')"
  local nkm
  nkm=$(jq -c .median <<<"$ns")
  row 1k "replay storm as row 1, consumer.prefetch_kick_ms=0 (librdkafka 2.0.2's fetch pauses)" \
    "$(jget .messages_per_second "$nkm")" "$rw" up null \
    "$(fmt "$(jget .messages_per_second "$nkm")") decisions/s median of $ROUNDS1 ($(jget .all "$ns"))" \
    "$(fmt "$rw") msg/s raw_consumer (row 1's)" \
    "$(jq -nc --argjson n "$N1" --argjson p $PARTS '{jobs: $n, partitions: $p, prefetch_kick_ms: 0}')" \
    "$(jq -nc --argjson b "$nkm" --argjson ns "$ns" '{replay: $b, replays: $ns.runs}')"
  log "1b: replay of the kcat -P copies (no headers)"
  rep_b=$(DEDUPD_TOPICS__JOBS=$t.kcat DEDUPD_CONSUMER__GROUP_ID=$t.kcat run_dd "$d/replay_b.log" --shadow)
  [ "$(jget .duplicates "$rep_b")" = "$N1" ] || die "1b replay: expected $N1 duplicates, got: $rep_b"
  raw_b=$(raw_drain "$t.kcat")
  row 1b "replay storm, kcat -P copies (no headers: full parse path)" \
    "$(jget .messages_per_second "$rep_b")" "$(jget .messages_per_second "$raw_b")" up null \
    "$(fmt "$(jget .messages_per_second "$rep_b")") decisions/s (fast path $(jget .fast_path "$rep_b"))" \
    "$(fmt "$(jget .messages_per_second "$raw_b")") msg/s raw_consumer" \
    "$(jq -nc --argjson n "$N1" --argjson jb "$jb" --argjson p $PARTS '{jobs: $n, job_bytes: $jb, partitions: $p, keys: "none"}')" \
    "$(jq -nc --argjson b "$rep_b" --argjson c "$raw_b" '{replay: $b, raw: $c}')"
  drop_topics s1
}

# ---- 2 / 3: new claims fetched (direct, HTTP exit, SOCKS exit) ------------------
# fetch_case NAME N EXIT(empty = direct) -> sets FC_* variables
fetch_case() {
  local name=$1 n=$2 ex=$3
  use_topics "$name"
  local d=$WORK/$name t=$RUN.$name
  "$ROOT/bench/gen_jobs.sh" "$n" "$t" unique "$ORIGIN_PAGES" >"$d/jobs.ndjson" || die "gen_jobs failed"
  urls_of "$d/jobs.ndjson" >"$d/urls"
  FC_JB=$(avg_len "$d/jobs.ndjson")
  submit "$d/jobs.ndjson" "$d/submit.log" >/dev/null
  log "$name: dedupd run, $n new jobs, exit ${ex:-direct}"
  FC_STATS=$(DEDUPD_PROXY__EXITS=$ex run_dd "$d/run.log")
  [ "$(jget .results "$FC_STATS")" = "$n" ] || die "$name: expected $n results, got: $FC_STATS"
  [ "$(jget .failed "$FC_STATS")" = 0 ] || die "$name: failed fetches: $FC_STATS"
  FC_RES=$(raw_drain "$t.results")
  # end to end: results / (last result's CreateTime - first's)
  FC_E2E=$(jq -n --argjson r "$FC_RES" \
    'if $r.ts_last_ms > $r.ts_first_ms then $r.messages / (($r.ts_last_ms - $r.ts_first_ms) / 1000) else null end')
  log "$name: curl_multi_bench, same URLs"
  local px=()
  [ -n "$ex" ] && px=(--proxy "$ex")
  FC_CURL=$("$CURLB" --urls "$d/urls" -c $CONC --max-host $MAX_HOST "${px[@]}" 2>>"$d/curl.log") ||
    die "$name: curl_multi_bench failed: $FC_CURL $(tail -n 3 "$d/curl.log")"
  FC_CURL_NOCAP=$("$CURLB" --urls "$d/urls" -c 64 "${px[@]}" 2>>"$d/curl.log" || true)
  jq -e . <<<"$FC_CURL_NOCAP" >/dev/null 2>&1 || FC_CURL_NOCAP=null
  FC_PAGE=$(jq -n --argjson s "$FC_STATS" --argjson n "$n" '$s.bytes / $n | round')
}

s2() {
  fetch_case s2 "$N2" ""
  local rawj
  rawj=$(raw_drain "$RUN.s2.jobs")
  local in
  in=$(jq -nc --argjson n "$N2" --argjson jb "$FC_JB" --argjson pg "$FC_PAGE" --argjson p $PARTS \
    --argjson c $CONC --argjson mh $MAX_HOST \
    '{jobs: $n, job_bytes: $jb, page_bytes_avg: $pg, partitions: $p, exit: "direct",
      curl: "\($c) transfers, max \($mh) per host (dedupd fetch.max_inflight, host cap)", store_sync: false}')
  local det
  det=$(jq -nc --argjson s "$FC_STATS" --argjson r "$FC_RES" --argjson c "$FC_CURL" \
    --argjson c64 "$FC_CURL_NOCAP" --argjson j "$rawj" \
    '{dedupd: $s, results_topic: $r, curl: $c, curl_64_nocap: $c64, raw_jobs: $j}')
  row 2a "new-claim path, direct fetch vs bare libcurl multi" "$FC_E2E" "$(jget .requests_per_second "$FC_CURL")" up null \
    "$(fmt "$FC_E2E") jobs/s end to end, pipeline CPU $(fmt "$(jget .pipeline_cpu_us_per_message "$FC_STATS")") us/job" "$(fmt "$(jget .requests_per_second "$FC_CURL")") req/s curl_multi_bench" "$in" "$det"
  row 2b "new-claim path, direct fetch vs raw consumer" "$FC_E2E" "$(jget .messages_per_second "$rawj")" up null \
    "$(fmt "$FC_E2E") jobs/s end to end" "$(fmt "$(jget .messages_per_second "$rawj")") msg/s raw_consumer" "$in" "$det"
  drop_topics s2
}

s3() {
  local id name ex what
  for id in 3a 3b; do
    if [ $id = 3a ]; then name=s3http ex=$HTTP_EXIT what="HTTP exit (tinyproxy $HTTP_EXIT)"
    else name=s3socks ex=$SOCKS_EXIT what="SOCKS5 exit (dante $SOCKS_EXIT)"; fi
    fetch_case "$name" "$N3" "$ex"
    local tun=null
    if [ $id = 3a ]; then
      tun=$("$CURLB" --urls "$WORK/$name/urls" -c $CONC --max-host $MAX_HOST --proxy "$ex" --tunnel 2>>"$WORK/$name/curl.log" || true)
      jq -e . <<<"$tun" >/dev/null 2>&1 || tun=null
    fi
    row $id "through a proxy: $what" "$FC_E2E" "$(jget .requests_per_second "$FC_CURL")" up 0.9 \
      "$(fmt "$FC_E2E") jobs/s end to end, pipeline CPU $(fmt "$(jget .pipeline_cpu_us_per_message "$FC_STATS")") us/job" "$(fmt "$(jget .requests_per_second "$FC_CURL")") req/s curl_multi_bench, same exit" \
      "$(jq -nc --argjson n "$N3" --argjson jb "$FC_JB" --argjson pg "$FC_PAGE" --argjson p $PARTS \
          --arg ex "$ex" --argjson c $CONC --argjson mh $MAX_HOST \
          '{jobs: $n, job_bytes: $jb, page_bytes_avg: $pg, partitions: $p, exit: $ex,
            proxy_mode: (if ($ex | startswith("http")) then "forward (http:// URLs, no CONNECT: as dedupd sends them)" else "socks5h" end),
            curl: "\($c) transfers, max \($mh) per host", store_sync: false}')" \
      "$(jq -nc --argjson s "$FC_STATS" --argjson r "$FC_RES" --argjson c "$FC_CURL" \
          --argjson c64 "$FC_CURL_NOCAP" --argjson tun "$tun" \
          '{dedupd: $s, results_topic: $r, curl: $c, curl_64_nocap: $c64, curl_connect_tunnel: $tun}')"
    drop_topics "$name"
  done
}

# ---- 4: store (store_bench, another engineer's tool) -----------------------------
s4() {
  local d=$WORK/s4
  mkdir -p "$d"
  [ -x "$STOREB" ] || die "build/bench/store_bench is not built"
  log "4: store_bench --sizes $STORE_SIZES --dups $STORE_DUPS"
  "$STOREB" --sizes "$STORE_SIZES" --dups "$STORE_DUPS" --dir "$d" >"$d/out" 2>"$d/err" ||
    die "store_bench failed (rc $?): $(tail -n 5 "$d/err" "$d/out" | tr '\n' ' ')"
  # the Markdown table: columns found by their header names
  local tbl
  tbl=$(awk -F'|' '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    function col(i) { return i ? trim($i) : "-" }
    /^\| *keys *\|/ { for (i = 2; i < NF; i++) { h = trim($i)
        if (h ~ /^store new/) cn = i; else if (h ~ /^store dup.*claim_batch/) cd = i
        else if (h ~ /^RocksDB new/) rn = i; else if (h ~ /^RocksDB dup/) rd = i
        else if (h ~ /^store RSS/) sr = i; else if (h ~ /^RocksDB RSS/) rr = i
        else if (h ~ /^index MiB/) ix = i }
      next }
    /^\| *[0-9]+ *\|/ && cn && cd && rn && rd {
      printf "{\"keys\":%s,\"new\":%s,\"dup\":%s,\"raw_new\":%s,\"raw_dup\":%s,\"rss\":\"%s\",\"raw_rss\":\"%s\",\"index\":\"%s\"}\n",
        trim($2), trim($cn), trim($cd), trim($rn), trim($rd), col(sr), col(rr), col(ix) }' "$d/out")
  [ -n "$tbl" ] || die "store_bench printed no table I can read: $(head -c 600 "$d/out")"
  local ids=(4a 4b 4c 4d 4e 4f 4g 4h) k=0 line keys kl head
  head=$(grep -m1 '^store_bench:' "$d/out" || true)
  while read -r line; do
    keys=$(jq -r .keys <<<"$line")
    kl=$(jq -rn --argjson k "$keys" 'if $k >= 1000000 then "\($k / 1000000)M" elif $k >= 1000 then "\($k / 1000)k" else "\($k)" end')
    local in
    in=$(jq -nc --argjson l "$line" \
      '{keys: $l.keys, key_bytes: 32, batch: 1000, store_rss_mib_hwm: $l.rss, rocksdb_rss_mib: $l.raw_rss,
        index_mib_bytes_per_op: $l.index}')
    row "${ids[$k]}" "store: new claims at $kl keys (WAL write per batch; fsync by the completions' group commit)" \
      "$(jq .new <<<"$line")" "$(jq .raw_new <<<"$line")" up null \
      "$(jq -r .new <<<"$line") claims/s, RSS $(jq -r .rss <<<"$line") MiB" \
      "$(jq -r .raw_new <<<"$line") RocksDB MultiGet+Put/s, RSS $(jq -r .raw_rss <<<"$line") MiB" "$in" \
      "$(jq -c --arg h "$head" '. + {store_bench: $h}' <<<"$line")"
    row "${ids[$((k + 1))]}" "store: duplicate claims at $kl keys" \
      "$(jq .dup <<<"$line")" "$(jq .raw_dup <<<"$line")" up null \
      "$(jq -r .dup <<<"$line") decisions/s" "$(jq -r .raw_dup <<<"$line") RocksDB MultiGet/s" "$in" \
      "$(jq -c --arg h "$head" '. + {store_bench: $h}' <<<"$line")"
    k=$((k + 2))
  done <<<"$tbl"
  cp "$d/out" "$WORK/store_bench.out"
}

# ---- 5: latency ---------------------------------------------------------------------
# lat_case NAME RATE SECONDS -> LC_DD (dedupd), LC_HOP (one Kafka hop), LC_STATS
lat_case() {
  local name=$1 rate=$2 secs=$3
  use_topics "$name"
  local d=$WORK/$name t=$RUN.$name count
  count=$(jq -n "$rate * $secs | floor")
  awk '/\.html$/' "$ORIGIN_PAGES" >"$d/pages"
  log "$name: dedupd run + latency at $rate jobs/s x $secs s"
  "$DEDUPD" run -c "$CFG" --exit-when-idle 5000 --stats-json >"$d/stats" 2>"$d/run.log" &
  local pid=$! i=0
  until grep -q '"assigned [0-9]* partitions' "$d/run.log" 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 $pid 2>/dev/null; then
      kill $pid 2>/dev/null; die "$name: dedupd never got its partitions: $(tail -n 3 "$d/run.log")"
    fi
  done
  sleep 0.5
  local drain
  drain=$(jq -n "$count / 200 + 60 | floor")
  local rc=0
  LC_DD=$("$LAT" -b "$KAFKA_BOOTSTRAP" --jobs "$t.jobs" --results "$t.results" --pages "$d/pages" \
    --tag "$t" --rate "$rate" --count "$count" --drain-s "$drain" 2>>"$d/latency.log") || rc=$?
  # every result is back (or latency gave up): stop the run now rather than
  # after its 5 s of idleness (it stops on SIGTERM with exit status 0 and
  # prints its stats; --exit-when-idle still ends it should it be gone)
  kill -TERM $pid 2>/dev/null || true
  wait $pid || die "$name: dedupd run failed: $(grep -v '"info"' "$d/run.log" | tail -n 3)"
  LC_STATS=$(cat "$d/stats")
  [ $rc = 0 ] || die "$name: latency: not every result came back: $LC_DD $(tail -n 3 "$d/latency.log")"
  log "$name: one Kafka hop at the same load"
  extra_topic "$t.hop"
  LC_HOP=$("$LAT" -b "$KAFKA_BOOTSTRAP" --jobs "$t.hop" --results "$t.hop" --pages "$d/pages" \
    --tag "$t.hop" --rate "$rate" --count "$count" --drain-s 60 2>>"$d/latency.log") ||
    die "$name: latency (Kafka hop) failed: $LC_HOP"
}
lat_row() { # lat_row ID RATE SECS TITLE
  local d3 h3
  d3="p50 $(jget .p50_ms "$LC_DD") / p99 $(jget .p99_ms "$LC_DD") / max $(jget .max_ms "$LC_DD") ms"
  h3="p50 $(jget .p50_ms "$LC_HOP") / p99 $(jget .p99_ms "$LC_HOP") / max $(jget .max_ms "$LC_HOP") ms (one Kafka hop)"
  row "$1" "$4" "$(jget .p99_ms "$LC_DD")" "$(jget .p99_ms "$LC_HOP")" down null "$d3" "$h3" \
    "$(jq -nc --argjson r "$2" --argjson s "$3" --argjson l "$LC_DD" --argjson p $PARTS \
      '{offered_jobs_per_s: $r, seconds: $s, jobs: $l.sent, achieved_rate: $l.achieved_rate,
        job_bytes: $l.job_bytes_avg, result_bytes: $l.result_bytes_avg, partitions: $p, exit: "direct",
        measured: "produce call -> result polled from the results topic; ratio on p99"}')" \
    "$(jq -nc --argjson a "$LC_DD" --argjson b "$LC_HOP" --argjson s "$LC_STATS" '{dedupd: $a, kafka_hop: $b, dedupd_stats: $s}')"
}
s5() {
  lat_case s5 "$LAT_RATE" "$LAT_SECONDS"
  lat_row 5 "$LAT_RATE" "$LAT_SECONDS" "latency, new jobs fetched, at $LAT_RATE jobs/s"
  drop_topics s5
  lat_case s5b "$LAT2_RATE" "$LAT2_SECONDS"
  lat_row 5b "$LAT2_RATE" "$LAT2_SECONDS" "latency at $LAT2_RATE jobs/s (above the new-claim capacity: queueing)"
  drop_topics s5b
}

# ---- 6: shadow mode on mixed jobs ---------------------------------------------------
s6() {
  use_topics s6
  local d=$WORK/s6 t=$RUN.s6
  "$ROOT/bench/gen_jobs.sh" "$N6" "$t" mixed "$ORIGIN_PAGES" >"$d/jobs.ndjson" || die "gen_jobs failed"
  local jb uniq st st_b rawj
  jb=$(avg_len "$d/jobs.ndjson")
  uniq=$(sort -u "$d/jobs.ndjson" | wc -l)
  submit "$d/jobs.ndjson" "$d/submit.log" >/dev/null
  log "6: shadow run on $N6 jobs ($uniq distinct)"
  st=$(DEDUPD_STORE__SYNC=true run_dd "$d/run.log" --shadow)
  [ "$(jget .new "$st")" = "$uniq" ] || die "6: expected $uniq new, got: $st"
  rawj=$(raw_drain "$t.jobs")
  local in
  in=$(jq -nc --argjson n "$N6" --argjson u "$uniq" --argjson jb "$jb" --argjson p $PARTS \
    '{jobs: $n, distinct: $u, duplicate_share: (1 - $u / $n | . * 100 | round / 100), job_bytes: $jb,
      partitions: $p, produced_by: "dedupd submit (headers)"}')
  row 6 "shadow mode, 50% new / 50% duplicate jobs" "$(jget .messages_per_second "$st")" \
    "$(jget .messages_per_second "$rawj")" up null \
    "$(fmt "$(jget .messages_per_second "$st")") msg/s (new $(jget .new "$st"), dup $(jget .duplicates "$st"), fast path $(jget .fast_path "$st"))" \
    "$(fmt "$(jget .messages_per_second "$rawj")") msg/s raw_consumer" "$(jq -c '. + {store_sync: true}' <<<"$in")" \
    "$(jq -nc --argjson s "$st" --argjson r "$rawj" '{dedupd: $s, raw: $r}')"
  log "6b: same topic, fresh store and group, store.sync=false"
  st_b=$(DEDUPD_STORE__SYNC=false DEDUPD_STORE__PATH=$d/store-nosync DEDUPD_CONSUMER__GROUP_ID=$t.nosync \
    run_dd "$d/run_b.log" --shadow)
  [ "$(jget .new "$st_b")" = "$uniq" ] || die "6b: expected $uniq new, got: $st_b"
  row 6b "shadow mode, mixed, store.sync=false" "$(jget .messages_per_second "$st_b")" \
    "$(jget .messages_per_second "$rawj")" up null \
    "$(fmt "$(jget .messages_per_second "$st_b")") msg/s" \
    "$(fmt "$(jget .messages_per_second "$rawj")") msg/s raw_consumer" "$(jq -c '. + {store_sync: false}' <<<"$in")" \
    "$(jq -nc --argjson s "$st_b" --argjson r "$rawj" '{dedupd: $s, raw: $r}')"
  log "6c: same topic, fresh store and group, processing.guarantee=exactly_once"
  local st_c
  st_c=$(DEDUPD_PROCESSING__GUARANTEE=exactly_once DEDUPD_STORE__PATH=$d/store-eos \
    DEDUPD_CONSUMER__GROUP_ID=$t.eos run_dd "$d/run_c.log" --shadow)
  [ "$(jget .new "$st_c")" = "$uniq" ] || die "6c: expected $uniq new, got: $st_c"
  row 6c "shadow mode, mixed, exactly_once (transactions every ${DEDUPD_PROCESSING__COMMIT_INTERVAL_MS:-500} ms)" \
    "$(jget .messages_per_second "$st_c")" "$(jget .messages_per_second "$rawj")" up null \
    "$(fmt "$(jget .messages_per_second "$st_c")") msg/s ($(echo "scale=2; $(jget .messages_per_second "$st_c") / $(jget .messages_per_second "$st_b")" | bc -l) of 6b's at_least_once)" \
    "$(fmt "$(jget .messages_per_second "$rawj")") msg/s raw_consumer" \
    "$(jq -c '. + {store_sync: false, processing_guarantee: "exactly_once"}' <<<"$in")" \
    "$(jq -nc --argjson s "$st_c" --argjson r "$rawj" '{dedupd: $s, raw: $r}')"
  drop_topics s6
}

# ---- 7: changelog restore ------------------------------------------------------------
# ready_ms PID LOG T0: ms from T0 (now) to the first 200 of the /readyz of the
# dedupd run PID writing LOG (its admin port from its "admin listener" line).
ready_ms() {
  local pid=$1 lg=$2 t0=$3 port="" i
  for i in $(seq 3000); do
    kill -0 "$pid" 2>/dev/null || return 1
    [ -n "$port" ] || port=$(awk 'match($0, /admin listener on port [0-9]+/) {
      s = substr($0, RSTART, RLENGTH); sub(/.* /, "", s); print s; exit}' "$lg" 2>/dev/null)
    if [ -n "$port" ] && curl -fs --max-time 1 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then
      echo "($(now) - $t0) * 1000" | bc -l
      return 0
    fi
    sleep 0.01
  done
  return 1
}
s7() {
  local d=$WORK/s7 t=$RUN.7
  mkdir -p "$d"
  [ -x "$FILL" ] && [ -x "$RESTB" ] || die "bench/changelog_fill or bench/restore_bench is not built"
  export DEDUPD_TOPICS__JOBS=$t.jobs DEDUPD_TOPICS__RESULTS=$t.results
  export DEDUPD_TOPICS__CONFLICTS=$t.conflicts DEDUPD_TOPICS__DLQ=$t.dlq
  export DEDUPD_CONSUMER__GROUP_ID=$t DEDUPD_TAIL__GROUP_ID=$t.tail
  export DEDUPD_KAFKA__GROUP__INSTANCE__ID=$t DEDUPD_INSTANCE__ID=$t
  export DEDUPD_STORE__PATH=$d/store DEDUPD_TAIL__STORE_PATH=$d/tail
  printf '%s\n' "$t.jobs" "$t.results" "$t.conflicts" "$t.dlq" "$t-changelog" >>"$WORK/topics"
  "$DEDUPD" topics -c "$CFG" --partitions 1 >/dev/null 2>>"$d/topics.log" ||
    die "dedupd topics failed: $(tail -n 3 "$d/topics.log")"
  log "7: filling $t-changelog [0] with $N7 op records"
  local fill rawj rb st
  # --ensure: the changelog made by dedupd's own start-up check (co-partitioned)
  fill=$("$FILL" -c "$CFG" -n "$N7" -p 0 --ensure 2>>"$d/fill.log") ||
    die "changelog_fill failed: $fill $(tail -n 3 "$d/fill.log")"
  rawj=$(raw_drain "$t-changelog")
  log "7: restore_bench"
  rb=$("$RESTB" -c "$CFG" -p 0 --dir "$d" --again 2>>"$d/restore.log") ||
    die "restore_bench failed: $rb $(grep -v '"info"' "$d/restore.log" | tail -n 3)"
  [ "$(jget .records "$rb")" = "$(jget .records "$fill")" ] ||
    die "7: restore_bench read $(jget .records "$rb") records, the fill produced $(jget .records "$fill")"
  local in
  in=$(jq -nc --argjson f "$fill" '{records: $f.records, op_value_bytes: $f.value_bytes_avg,
    partitions: 1, op_id: "bench:<n>", state: "complete", produced_per_s: ($f.records_per_second | round),
    restore: "changelog_restore() into a fresh store (sync per config), batches of 512"}')
  row 7 "changelog restore: one partition into a fresh store" \
    "$(jget .records_per_second "$rb")" "$(jget .messages_per_second "$rawj")" up 0.5 \
    "$(fmt "$(jget .records_per_second "$rb")") records/s ($(jget .records "$rb") in $(jget .seconds "$rb") s; again from the checkpoint: $(jget .again.records "$rb") records)" \
    "$(fmt "$(jget .messages_per_second "$rawj")") msg/s raw_consumer (wall $(jget .wall_seconds "$rawj") s)" "$in" \
    "$(jq -nc --argjson f "$fill" --argjson r "$rawj" --argjson b "$rb" '{fill: $f, raw: $r, restore_bench: $b}')"
  log "7k: restore_bench with consumer.prefetch_kick_ms=0"
  local rk
  mkdir -p "$d/nokick"
  rk=$(DEDUPD_CONSUMER__PREFETCH_KICK_MS=0 "$RESTB" -c "$CFG" -p 0 --dir "$d/nokick" 2>>"$d/restore.log") ||
    die "restore_bench (kick off) failed: $rk $(grep -v '"info"' "$d/restore.log" | tail -n 3)"
  [ "$(jget .records "$rk")" = "$(jget .records "$fill")" ] && [ "$(jget .prefetch_kicks "$rk")" = 0 ] ||
    die "7k: restore_bench (kick off): $rk"
  rm -rf "$d/nokick"
  row 7k "changelog restore as row 7, consumer.prefetch_kick_ms=0 (librdkafka 2.0.2's fetch pauses)" \
    "$(jget .records_per_second "$rk")" "$(jget .messages_per_second "$rawj")" up null \
    "$(fmt "$(jget .records_per_second "$rk")") records/s ($(jget .records "$rk") in $(jget .seconds "$rk") s; row 7's kicks: $(jget .prefetch_kicks "$rb"))" \
    "$(fmt "$(jget .messages_per_second "$rawj")") msg/s raw_consumer (row 7's)" "$in" \
    "$(jq -nc --argjson b "$rk" '{restore_bench: $b}')"
  log "7b: dedupd run: time to ready"
  local t0 pid ms rl
  t0=$(now)
  "$DEDUPD" run -c "$CFG" 2>"$d/run.log" &
  pid=$!
  ms=$(ready_ms "$pid" "$d/run.log" "$t0") || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    die "7b: dedupd run never ready: $(grep -v '"info"' "$d/run.log" | tail -n 3)"; }
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  rl=$(grep -m1 '"restore".*restored' "$d/run.log" | jq -r .message 2>/dev/null || echo "")
  st=$(jq -n --arg m "$rl" '($m | capture("(?<r>[0-9]+) records .* in (?<ms>[0-9]+) ms") // {}) |
    {records: (.r // null | if . then tonumber else null end), ms: (.ms // null | if . then tonumber else null end)}')
  local rbms
  rbms=$(jq -n --argjson b "$rb" '$b.seconds * 1000 | round')
  row 7b "time to ready: dedupd run, fresh store, $(jget .records "$fill") changelog records" \
    "$(fmt "$ms")" "$rbms" down null \
    "$(fmt "$ms") ms process start -> /readyz 200 (its restore: $(jget .records "$st") records in $(jget .ms "$st") ms)" \
    "$rbms ms restore_bench (restore alone)" "$in" \
    "$(jq -nc --argjson s "$st" --arg l "$rl" '{dedupd_restore: $s, dedupd_log: $l}')"
  if [ "$KEEP_TOPICS" = 0 ]; then
    "$RAW" -b "$KAFKA_BOOTSTRAP" --delete "$t.jobs,$t.results,$t.conflicts,$t.dlq,$t-changelog" >/dev/null 2>&1 || true
  fi
}

# ---- 13p: benchmark peers (only with --peers) ----------------------------------------
# The peers of bench/peers/ against dedupd on one topic, as the peers' contract
# (BENCH-PEERS.md) sets the fairness rules: filled once, read whole by every
# run, fresh group and store each run, page cache warm, rounds in alternating
# order, medians, ratios.  Each system's runs: $d/runs/<sys>.<round>.json, one
# normalized line {sys, round, rc, consumed, new, msgs_per_s, load, out}.
PY_PEER=$ROOT/bench/peers/python-redis/run.sh
KS_PEER=${BENCH_KSTREAMS_PEER:-$ROOT/bench/peers/kstreams/run.sh}
free_port() { # free_port FROM: the first port from FROM no one listens on (127.0.0.1)
  local p=$1
  while port_used "$p"; do p=$((p + 1)); done
  echo "$p"
}
port_used() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
# CPU time, in clock ticks (getconf CLK_TCK): the machine's busy time (user,
# nice, system, irq, softirq of /proc/stat's cpu line: proc(5)) and the Kafka
# broker's (utime + stime of its /proc/PID/stat), so that each run says what
# the machine and the broker spent on it, not only how fast it went.
machine_ticks() { awk '/^cpu /{printf "%.0f\n", $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
broker_ticks() {
  local p
  p=$(tr -dc '0-9' <"${DEDUPD_STACK_DIR:-/tmp/dedupd-stack}/kafka/kafka.pid" 2>/dev/null)
  [ -n "$p" ] || p=$(pgrep -f 'kafka\.Kafka ' | head -n 1)
  [ -n "$p" ] && awk '{printf "%.0f\n", $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo null
}
# peer_run SYS ROUND: one run of one system; appends its line to $SP_D/runs.ndjson
peer_run() {
  local sys=$1 r=$2 d=$SP_D t=$SP_T out rc=0 lg load m0 b0 w0 cpu
  lg=$d/logs/$sys.$r.log
  load=$(cut -d' ' -f1 /proc/loadavg)
  log "13p: round $r: $sys"
  m0=$(machine_ticks) b0=$(broker_ticks) w0=$(now)
  case $sys in
    raw)
      out=$("$RAW" -b "$KAFKA_BOOTSTRAP" -t "$t.jobs" 2>>"$lg") || rc=$?
      out=$(jq -c '. + {consumed: .messages, msgs_per_s: .messages_per_second}' <<<"$out" 2>/dev/null) || true ;;
    relay) # the consume-and-produce ceiling: one small record per message read
      out=$("$RAW" -b "$KAFKA_BOOTSTRAP" -t "$t.jobs" --group "$t.relay.$r" --produce "$t.relay.results" 2>>"$lg") || rc=$?
      out=$(jq -c '. + {consumed: .messages, msgs_per_s: .messages_per_second}' <<<"$out" 2>/dev/null) || true ;;
    dd|dd_eos)
      local g=at_least_once
      [ "$sys" = dd_eos ] && g=exactly_once
      out=$(DEDUPD_PROCESSING__GUARANTEE=$g DEDUPD_STORE__PATH=$d/store/$sys.$r \
        DEDUPD_CONSUMER__GROUP_ID=$t.$sys.$r DEDUPD_KAFKA__GROUP__INSTANCE__ID=$t.$sys.$r \
        timeout 900 "$DEDUPD" run -c "$CFG" --shadow --exit-when-idle "$IDLE_MS" --stats-json 2>>"$lg") || rc=$?
      out=$(jq -c '. + {msgs_per_s: .messages_per_second}' <<<"$out" 2>/dev/null) || true ;;
    py_pipe|py_msg)
      local pl=1
      [ "$sys" = py_msg ] && pl=0
      out=$(KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP IN_TOPIC=$t.jobs OUT_TOPIC=$t.peer.results \
        GROUP=$t.$sys.$r MAX_MESSAGES=$SP_N IDLE_MS=$PEER_IDLE_MS PIPELINE=$pl \
        REDIS_URL=$SP_REDIS PREFIX="$t.$sys.$r:" FLUSH_BEFORE_COMMIT=1 \
        timeout 900 "$PY_PEER" 2>>"$lg") || rc=$? ;;
    ks_alos|ks_eos)
      local g=at_least_once
      [ "$sys" = ks_eos ] && g=exactly_once_v2
      out=$(KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP IN_TOPIC=$t.jobs OUT_TOPIC=$t.peer.results \
        GROUP=$t.$sys.$r MAX_MESSAGES=$SP_N IDLE_MS=$PEER_IDLE_MS GUARANTEE=$g \
        STATE_DIR=$d/state/$sys.$r timeout 900 "$KS_PEER" 2>>"$lg") || rc=$? ;;
  esac
  # the run's CPU, start-up and idle tail included (a JVM's start-up counts)
  cpu=$(jq -nc --argjson m0 "$m0" --argjson m1 "$(machine_ticks)" --argjson b0 "$b0" \
    --argjson b1 "$(broker_ticks)" --argjson w "$(awk -v a="$w0" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}')" \
    --argjson hz "$(getconf CLK_TCK)" --argjson n "$SP_N" '
    {wall_s: $w, machine_cpu_s: (($m1 - $m0) / $hz),
     broker_cpu_s: (if $b0 == null or $b1 == null then null else ($b1 - $b0) / $hz end)}
    | . + {machine_cpu_us_per_msg: (.machine_cpu_s * 1e6 / $n | round),
           broker_cpu_us_per_msg: (if .broker_cpu_s == null then null else .broker_cpu_s * 1e6 / $n | round end),
           busy_cores: (if $w > 0 then .machine_cpu_s / $w * 100 | round / 100 else null end)}')
  rm -rf "$d/store/$sys.$r" "$d/state/$sys.$r" # after the CPU's end sample
  out=$(tail -n 1 <<<"$out")
  jq -e . <<<"$out" >/dev/null 2>&1 || { [ $rc = 0 ] && rc=1; out=null; }
  [ $rc = 0 ] || log "13p: $sys round $r failed (rc $rc): $(grep -v '"info"' "$lg" | tail -n 2 | tr '\n' ' ')"
  jq -nc --arg s "$sys" --argjson r "$r" --argjson rc "$rc" --argjson o "$out" --arg load "$load" \
    --argjson cpu "$cpu" \
    '{sys: $s, round: $r, rc: $rc, consumed: ($o.consumed // null), new: ($o.new // null),
      msgs_per_s: ($o.msgs_per_s // null), load1: ($load | tonumber), cpu: $cpu, out: $o}' >>"$d/runs.ndjson"
}
# peer_sum SYS: {sys, runs, median, ok_runs, errors, wrong: [...]} over its runs
peer_sum() {
  jq -sc --arg s "$1" --argjson n "$SP_N" --argjson u "$SP_UNIQ" '
    def lmed: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end; # lower median
    [.[] | select(.sys == $s)] as $runs
    | ($runs | map(select(.rc == 0 and .msgs_per_s != null) | .msgs_per_s) | sort) as $v
    | {sys: $s, runs: ($runs | length), ok_runs: ($v | length),
       median: (if ($v | length) == 0 then null
                elif ($v | length) % 2 == 1 then $v[($v | length - 1) / 2]
                else ($v[($v | length) / 2 - 1] + $v[($v | length) / 2]) / 2 end
                | if . then . * 10 | round / 10 else . end),
       all: ($runs | map(.msgs_per_s)),
       cpu_us_per_msg: ($runs | map(select(.rc == 0) | .cpu.machine_cpu_us_per_msg // empty) | lmed),
       broker_cpu_us_per_msg: ($runs | map(select(.rc == 0) | .cpu.broker_cpu_us_per_msg // empty) | lmed),
       errors: ($runs | map(select(.rc != 0) | "\($s) round \(.round): rc \(.rc)")),
       wrong: ($runs | map(select(.rc == 0 and (.consumed != $n or
                 ($s != "raw" and $s != "relay" and .new != $u)))
               | "\($s) round \(.round): consumed \(.consumed) of \($n), new \(.new) (distinct \($u))"))}' \
    "$SP_D/runs.ndjson"
}
# cpu_text SUM: the CPU a message cost the machine (both cores, every
# process) and the broker, lower medians over the runs
cpu_text() {
  jq -r '"CPU \(.cpu_us_per_msg // "-") us/msg (broker \(.broker_cpu_us_per_msg // "-"))"' <<<"$1"
}
# peer_row ID TITLE DD_SYS PEER_SYS PEER_MODE_TEXT
peer_row() {
  local id=$1 title=$2 a b ex='{}' dd pd wr
  a=$(peer_sum "$3"); b=$(peer_sum "$4")
  wr=$(jq -nc --argjson a "$a" --argjson b "$b" '$a.wrong + $b.wrong')
  if [ "$wr" != "[]" ]; then
    ex=$(jq -nc --argjson w "$wr" '{wrong: true, wrong_runs: $w, ratio: null, meets_target: null}')
  fi
  dd="$(jq -r '.median // "-" | if type == "number" then (. | round | tostring) else . end' <<<"$a") msg/s median of $(jq -r .ok_runs <<<"$a") ($(jq -r '.all | map(if . then (round | tostring) else "err" end) | join(" / ")' <<<"$a"))"
  pd="$(jq -r '.median // "-" | if type == "number" then (. | round | tostring) else . end' <<<"$b") msg/s median of $(jq -r .ok_runs <<<"$b") ($(jq -r '.all | map(if . then (round | tostring) else "err" end) | join(" / ")' <<<"$b"))"
  dd="$dd; $(cpu_text "$a")" pd="$pd; $(cpu_text "$b")"
  if [ "$wr" != "[]" ]; then dd="WRONG ($(jq -r 'join("; ")' <<<"$wr")) $dd"; fi
  local errs
  errs=$(jq -nc --argjson a "$a" --argjson b "$b" '$a.errors + $b.errors | length')
  [ "$errs" = 0 ] || dd="$dd, $errs failed run(s): see detail"
  if jq -e '.median == null' <<<"$a" >/dev/null || jq -e '.median == null' <<<"$b" >/dev/null; then
    ex=$(jq -c --argjson a "$a" --argjson b "$b" \
      '. + {error: ("no successful run: " + ($a.errors + $b.errors | join(", ")))}' <<<"$ex")
  fi
  row "$id" "$title" "$(jq -r '.median // "null"' <<<"$a")" "$(jq -r '.median // "null"' <<<"$b")" peer null \
    "$dd" "$pd" \
    "$(jq -c --arg m "$5" '. + {peer_mode: $m}' <<<"$SP_IN")" \
    "$(jq -nc --argjson a "$a" --argjson b "$b" --slurpfile runs "$SP_D/runs.ndjson" --arg x "$3" --arg y "$4" \
        --argjson su "$SP_SETUP" '{dedupd: $a, peer: $b, setup: $su, runs: [$runs[] | select(.sys == $x or .sys == $y)]}')" "$ex"
}
s13p() {
  use_topics sp
  SP_D=$WORK/sp SP_T=$RUN.sp
  local d=$SP_D t=$SP_T
  mkdir -p "$d/logs" "$d/store" "$d/state"
  extra_topic "$t.peer.results"
  extra_topic "$t.relay.results"
  [ -x "$PY_PEER" ] || die "$PY_PEER is missing"
  log "13p: $NP jobs (50% duplicates) into $t.jobs"
  "$ROOT/bench/gen_jobs.sh" "$NP" "$t" mixed "$ORIGIN_PAGES" >"$d/jobs.ndjson" || die "gen_jobs failed"
  "$DEDUPD" submit -c "$CFG" "$d/jobs.ndjson" >"$d/receipts" 2>>"$d/submit.log" ||
    die "dedupd submit failed: $(tail -n 2 "$d/submit.log")"
  SP_N=$(wc -l <"$d/receipts")
  SP_UNIQ=$(jq -r .op_id "$d/receipts" | sort -u | wc -l)
  [ "$SP_N" = "$NP" ] || die "13p: $SP_N of $NP jobs acknowledged"
  log "13p: $SP_N messages, $SP_UNIQ distinct op_ids; warming the page cache"
  kcat -C -b "$KAFKA_BOOTSTRAP" -t "$t.jobs" -e -q >/dev/null 2>&1 || die "kcat -C (warm-up) failed"
  # the Python peer's own redis-server, its files in the work dir
  local rport
  rport=$(free_port "${BENCH_PEER_REDIS_PORT:-16380}")
  SP_REDIS_DIR=$d/redis SP_REDIS_PORT=$rport
  trap 'PEER_REDIS_DIR=$SP_REDIS_DIR PEER_REDIS_PORT=$SP_REDIS_PORT "$PY_PEER" --redis-down >/dev/null 2>&1 || true' EXIT
  SP_REDIS=$(env -u REDIS_URL PEER_REDIS_DIR="$d/redis" PEER_REDIS_PORT="$rport" "$PY_PEER" --redis-up 2>>"$d/logs/redis-up.log") ||
    die "13p: python-redis setup / redis-server failed: $(tail -n 3 "$d/logs/redis-up.log")"
  local systems=(raw relay dd dd_eos py_pipe py_msg) ks=0
  if [ -x "$KS_PEER" ]; then systems+=(ks_alos ks_eos); ks=1
  else log "13p: $KS_PEER is not there: the Kafka Streams rows are skipped"; fi
  SP_IN=$(jq -nc --argjson n "$SP_N" --argjson u "$SP_UNIQ" --argjson p $PARTS \
    --argjson jb "$(avg_len "$d/jobs.ndjson")" --argjson r "$PEER_ROUNDS" \
    '{jobs: $n, distinct: $u, duplicate_share: (1 - $u / $n | . * 100 | round / 100), job_bytes: $jb,
      partitions: $p, rounds: $r}')
  SP_SETUP=$(jq -nc --arg o "${systems[*]}" --arg rv "$(redis-server --version 2>/dev/null)" '{
      topic: "filled once by dedupd submit (headers), keyed by op_id; every run reads it whole (MAX_MESSAGES = its size)",
      order: "\($o), reversed every other round", page_cache: "warm (kcat -C once)",
      dedupd: "run --shadow, default settings (store.sync false, the changelog on), fresh store and group per run; dd_eos: processing.guarantee exactly_once",
      relay: "raw_consumer --group --produce: one 64-byte record per message read, producer as dedupd (idempotent, acks=all, linger 5 ms, lz4), no dedup, no store",
      python_redis: "bench/peers/python-redis: confluent-kafka consume(1000), SET NX EX, producer idempotent acks=all linger 5 ms lz4, flushed before each async commit; fresh group and key prefix per run",
      redis: "\($rv); appendonly yes, appendfsync everysec, no RDB snapshots; 127.0.0.1 TCP",
      kstreams: "bench/peers/kstreams (its README: JVM options, commit intervals, store)"}')
  : >"$d/runs.ndjson"
  local r i order=("${systems[@]}")
  for ((r = 1; r <= PEER_ROUNDS; r++)); do
    if [ $((r % 2)) = 0 ]; then
      order=(); for ((i = ${#systems[@]} - 1; i >= 0; i--)); do order+=("${systems[$i]}"); done
    else order=("${systems[@]}"); fi
    for s in "${order[@]}"; do peer_run "$s" "$r"; done
  done
  ks_row_skip() { # ID TITLE
    row "$1" "$2" null null peer null "skipped" "$KS_PEER is not there" "$SP_IN" "$SP_SETUP" \
      "$(jq -nc --arg p "$KS_PEER" '{skipped: "\($p) is not there"}')"
  }
  peer_row 13p-0 "peers: dedupd shadow vs raw consumer (the ceiling)" dd raw "raw_consumer"
  peer_row 13p-0b "peers: dedupd shadow exactly_once vs raw consumer" dd_eos raw "raw_consumer"
  peer_row 13p-0c "peers: dedupd shadow vs consume-and-produce (the second ceiling)" dd relay "raw_consumer --produce"
  if [ $ks = 1 ]; then
    peer_row 13p-1 "dedupd shadow vs kstreams at_least_once" dd ks_alos "Kafka Streams at_least_once"
    peer_row 13p-2 "dedupd shadow exactly_once vs kstreams exactly_once_v2" dd_eos ks_eos "Kafka Streams exactly_once_v2"
  else
    ks_row_skip 13p-1 "dedupd shadow vs kstreams at_least_once"
    ks_row_skip 13p-2 "dedupd shadow exactly_once vs kstreams exactly_once_v2"
  fi
  peer_row 13p-3 "dedupd shadow vs python-redis pipelined" dd py_pipe "python-redis PIPELINE=1"
  peer_row 13p-4 "dedupd shadow vs python-redis per-message" dd py_msg "python-redis PIPELINE=0"
  drop_topics sp
}

# ---- run ------------------------------------------------------------------------------
declare -A ROWS_OF=([1]="1 1k 1b" [2]="2a 2b" [3]="3a 3b" [4]="4a 4b" [5]="5 5b" [6]="6 6b 6c" [7]="7 7k 7b"
  [13p]="13p-0 13p-0b 13p-0c 13p-1 13p-2 13p-3 13p-4")
if [ "$QUICK" = 0 ] && [[ $STORE_SIZES == *,* ]]; then ROWS_OF[4]="4a 4b 4c 4d"; fi
declare -A TITLE=([1]="replay storm" [2]="new-claim path" [3]="through a proxy" [4]="store"
  [5]="latency" [6]="shadow mode" [7]="changelog restore" [13p]="benchmark peers")
FAILED=0
SCENARIOS=(1 2 3 4 5 6 7)
# --peers: the peers scenario, alone unless --only names others as well
if [ "$PEERS" = 1 ]; then
  if [ -n "$ONLY" ]; then SCENARIOS+=(13p); else SCENARIOS=(13p); fi
fi
for s in "${SCENARIOS[@]}"; do
  if [ -n "$ONLY" ] && [ "$s" != 13p ] && [[ ",$ONLY," != *",$s,"* ]]; then continue; fi
  rm -f "$WORK/error"
  ts=$(now)
  ( set -e; "s$s" )
  rc=$?
  log "scenario $s: $(printf '%.0f' "$(echo "$(now) - $ts" | bc -l)") s, rc $rc"
  # rows the scenario did not write (it failed): an error row each
  for id in ${ROWS_OF[$s]}; do
    if [ -z "$(jq -c --arg id "$id" 'select(.id == $id)' "$ROWS" 2>/dev/null)" ]; then
      FAILED=1
      err=$(cat "$WORK/error" 2>/dev/null || echo "scenario $s failed (rc $rc)")
      jq -nc --arg id "$id" --arg sc "${TITLE[$s]}" --arg e "$err" \
        '{id: $id, scenario: $sc, dedupd: null, ceiling: null, ratio: null, target: null,
          dedupd_display: "ERROR", ceiling_display: "", inputs: {}, detail: {}, error: $e}' >>"$ROWS"
    fi
  done
done

# a benchmark peer row marked WRONG (fairness rule 2) is not a measurement
# (or with no successful run of one side)
if jq -se 'any(.wrong == true or ((.id | startswith("13p")) and .error != null))' "$ROWS" >/dev/null 2>&1; then
  FAILED=1
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(printf '%.0f' "$(echo "$(now) - $T_START" | bc -l)")
mkdir -p "$RESULTS_DIR"
OUT=$RESULTS_DIR/$STAMP.json
jq -s --arg run "$RUN" --argjson quick "$([ $QUICK = 1 ] && echo true || echo false)" \
  --arg started "$STARTED" --arg lb "$LOAD_BEFORE" --arg la "$LOAD_AFTER" \
  --argjson el "$ELAPSED" --argjson cpus "$(nproc)" \
  --arg git "$GIT_REV" --arg sha "$DEDUPD_SHA" \
  --arg ver "$("$DEDUPD" version 2>/dev/null | tr '\n' ' ')" \
  --arg sb "$(cat "$WORK/store_bench.out" 2>/dev/null)" \
  '{run: $run, quick: $quick, started: $started, elapsed_s: $el, cpus: $cpus,
    load_before: $lb, load_after: $la, git: $git, dedupd_sha256: $sha, versions: $ver, rows: .,
    store_bench_output: $sb}' \
  "$ROWS" >"$OUT.tmp" && mv "$OUT.tmp" "$OUT" && cp "$OUT" "$RESULTS_DIR/latest.json"

{
  echo "dedupd bench $RUN ($([ $QUICK = 1 ] && echo quick || echo full)), git $GIT_REV, dedupd sha256 $DEDUPD_SHA, $(nproc) CPUs, load $LOAD_BEFORE -> $LOAD_AFTER, ${ELAPSED} s"
  echo
  echo "| id | scenario | dedupd | ceiling (same run) | ratio | target | inputs |"
  echo "|---|---|---|---|---:|---:|---|"
  jq -r '.rows[] | "| \(.id) | \(.scenario) | \(.dedupd_display)\(if .error then ": " + .error else "" end) | \(.ceiling_display) | \(.ratio // "-") | \(if .target then (.target | tostring) + (if .meets_target then " ok" else " MISSED" end) else "-" end) | \(.inputs | to_entries | map("\(.key)=\(.value)") | join(", ")) |"' "$OUT"
  echo
  echo "JSON: $OUT"
} 2>/dev/null
[ $FAILED = 0 ]
