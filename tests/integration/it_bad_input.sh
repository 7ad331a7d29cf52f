#!/usr/bin/env bash
# Bad-input corpus replayed through the real flow (issue 7): raw bytes produced
# to the jobs topic with kcat (one message per case, keyed by the case name; NUL
# bytes, invalid UTF-8, empty and null values included), good jobs interleaved
# through `dedupd submit`, then `dedupd run --exit-when-idle --stats-json`.
#
# tests/data/bad_input/cases.tsv says where each case must land:
#   dlq      a DLQ record with the original bytes, a dedupd-error header that
#            is the expected reason (<n> in it stands for a number that
#            depends on the test's tag, a trailing "..." for jansson's or
#            libcurl's wording), and a dedupd-source header
#   failed   a result with outcome failed and the expected category (for
#            forbidden_target: 0 attempts, nothing sent)
#   fetched  a result with outcome fetched and the expected status
# and in which group it runs (own topics, store and config):
#   direct   no proxy, fetch.allow_targets = 127.0.0.1/32 (the local config)
#   proxy    through the stack's tinyproxy exits (literals checked by dedupd,
#            names resolved by the proxy: DESIGN.md section 5)
#   noallow  no proxy, fetch.allow_targets empty: names that resolve to
#            loopback are refused on the resolved address
# A canary (tests/fixtures/hostile_origin) listens on [::]:PORT, so any
# loopback address v4 or v6 with that port reaches it: a refused target that
# was not refused shows in its log.  nginx's access log must not show a
# request of any case that is not "fetched" either.
#
# Also asserted per group: dedupd exits 0; it consumed every message; the end
# offsets of the jobs topic equal the number of inputs; a second run consumes
# nothing (the committed offsets reached the end); DLQ records + results ==
# inputs, each case exactly once; every DLQ reason is clean UTF-8 without
# control characters; every log line is one JSON object.
#
# The results table (case, group, where it landed, reason) is printed and
# written to $WORK/bad_input_table.tsv (and to $BAD_INPUT_TABLE when set).
# A case whose note column starts with "BUG" is a known dedupd bug: it fails
# until dedupd is fixed.
source "$(dirname "$0")/lib.sh"

DATA=$ROOT/tests/data/bad_input
CASES_TSV=$DATA/cases.tsv
HOSTILE=${HOSTILE_ORIGIN_BIN:-$(dirname "$DEDUPD")/tests/fixtures/hostile_origin}
[ -x "$HOSTILE" ] || fail "hostile origin not built: $HOSTILE (cmake --build build)"
pin_dedupd
MAX_JOB_BYTES=262144   # limits.max_job_bytes here (a huge job must fit the broker)

COMMON_ENV=(
  "DEDUPD_LIMITS__MAX_JOB_BYTES=$MAX_JOB_BYTES"
  DEDUPD_FETCH__MAX_ATTEMPTS=2
  DEDUPD_FETCH__BACKOFF_BASE_MS=20
  DEDUPD_FETCH__BACKOFF_MAX_MS=100
  DEDUPD_FETCH__TIMEOUT_MS=5000
  DEDUPD_FETCH__CONNECT_TIMEOUT_MS=2000
  DEDUPD_FETCH__DEADLINE_MS=15000
  DEDUPD_FETCH__COOLDOWN_DEFAULT_MS=200
  DEDUPD_LOG__LEVEL=info
)
declare -A GROUP_ENV
GROUP_ENV[direct]="DEDUPD_PROXY__EXITS="
GROUP_ENV[proxy]="DEDUPD_PROXY__EXITS=${PROXY_EXITS// /,}"
GROUP_ENV[noallow]="DEDUPD_PROXY__EXITS= DEDUPD_FETCH__ALLOW_TARGETS="

# ---- the canary
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
"$HOSTILE" --listen '[::]:0' --log "$WORK/canary.log" >"$WORK/canary.port" 2>"$WORK/canary.err" &
PIDS+=("$!")
for _ in $(seq 100); do [ -s "$WORK/canary.port" ] && break; sleep 0.1; done
[ -s "$WORK/canary.port" ] || { cat "$WORK/canary.err" >&2; fail "canary did not start"; }
CP=$(head -1 "$WORK/canary.port")
ORIGIN_HP=${ORIGIN_URL#*://}; ORIGIN_PORT=${ORIGIN_HP##*:}
# the canary answers on every loopback form (else the "nothing sent" checks prove nothing)
for h in 127.0.0.2 '[::1]' localhost; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://$h:$CP/ok?c=selfcheck")" = 200 ] ||
    fail "canary does not answer on $h:$CP"
done
echo "canary on [::]:$CP, origin $ORIGIN_HP"

# ---- the cases
# cases.tsv: name, group, input, place, reason, note ('#' lines are comments).
# input: a file of $DATA (placeholders @ORIGIN@ @ORIGIN_PORT@ @CP@ @TAG@),
# "submit:FILE" (produced by `dedupd submit`), or "gen:WHAT" (made here).
CASES=() GROUPS_USED=()
declare -A C_GROUP C_INPUT C_PLACE C_REASON C_NOTE
while IFS=$'\t' read -r name group input place reason note; do
  [[ -z $name || $name == \#* ]] && continue
  [ -z "${C_GROUP[$name]:-}" ] || fail "cases.tsv: case $name twice"
  CASES+=("$name")
  C_GROUP[$name]=$group C_INPUT[$name]=$input C_PLACE[$name]=$place
  C_REASON[$name]=$reason C_NOTE[$name]=${note:-}
  [ -n "${GROUP_ENV[$group]+x}" ] || fail "cases.tsv: unknown group $group"
  [[ " ${GROUPS_USED[*]} " == *" $group "* ]] || GROUPS_USED+=("$group")
done <"$CASES_TSV"
echo "${#CASES[@]} cases in ${#GROUPS_USED[@]} groups"

tag() { echo "t=$T&c=$1"; }
tag_sed() { echo "t=$T\\&c=$1"; } # '&' is special in a sed replacement
subst() { # FILE NAME -> bytes on stdout (binary safe)
  LC_ALL=C sed -e "s|@ORIGIN@|$ORIGIN_HP|g; s|@ORIGIN_PORT@|$ORIGIN_PORT|g" \
    -e "s|@CP@|$CP|g; s|@TAG@|$(tag_sed "$2")|g" "$1"
}
gen() { # WHAT NAME -> bytes on stdout
  local u="http://$ORIGIN_HP/docs/acronyms.html?$(tag "$2")"
  case $1 in
    huge_job) # a valid job, over limits.max_job_bytes
      printf '{"url":"%s","meta":{"pad":"%s"}}' "$u" "$(head -c $((MAX_JOB_BYTES + 4096)) /dev/zero | tr '\0' x)" ;;
    huge_header_value) # one 200 kB header value (under the job limit)
      printf '{"url":"%s","headers":{"X-Big":"%s"}}' "$u" "$(head -c 200000 /dev/zero | tr '\0' y)" ;;
    many_headers) # 4000 small headers
      printf '{"url":"%s","headers":{' "$u"
      seq -f 'X-H%05g' 1 4000 | awk '{printf "%s\"%s\":\"v\"", (NR > 1 ? "," : ""), $0}'
      printf '}}' ;;
    huge_url) # a 200 kB path
      printf '{"url":"http://%s/docs/%s.html?%s"}' "$ORIGIN_HP" "$(head -c 200000 /dev/zero | tr '\0' z)" "$(tag "$2")" ;;
    deep_nesting) # meta nested 100000 levels
      printf '{"url":"%s","meta":{"a":' "$u"
      head -c 100000 /dev/zero | tr '\0' '['
      head -c 100000 /dev/zero | tr '\0' ']'
      printf '}}' ;;
    empty | null) ;; # produced by produce()
    *) fail "cases.tsv: unknown generator $1" ;;
  esac
}
mkdir -p "$WORK/in"
for n in "${CASES[@]}"; do
  in=${C_INPUT[$n]}
  case $in in
    gen:*) gen "${in#gen:}" "$n" ;;
    submit:*) subst "$DATA/${in#submit:}" "$n" ;;
    *) [ -f "$DATA/$in" ] || fail "cases.tsv: $n: no file $in"; subst "$DATA/$in" "$n" ;;
  esac >"$WORK/in/$n"
done

# ---- one group: produce its cases in order, run dedupd, run it again
run_group() { # GROUP
  local g=$1 d=$WORK/g-$1 n
  mkdir -p "$d"
  (
    export "${COMMON_ENV[@]}"
    # shellcheck disable=SC2086
    export ${GROUP_ENV[$g]}
    export DEDUPD_TOPICS__JOBS=$T-$g.jobs DEDUPD_TOPICS__RESULTS=$T-$g.results
    export DEDUPD_TOPICS__CONFLICTS=$T-$g.conflicts DEDUPD_TOPICS__DLQ=$T-$g.dlq
    export DEDUPD_CONSUMER__GROUP_ID=$T-$g DEDUPD_TAIL__GROUP_ID=$T-$g-tail
    export DEDUPD_KAFKA__GROUP__INSTANCE__ID=$T-$g DEDUPD_INSTANCE__ID=$T-$g
    export DEDUPD_STORE__PATH=$d/store DEDUPD_TAIL__STORE_PATH=$d/tail
    "$DEDUPD" topics -c "$CFG" --partitions 2 >/dev/null 2>"$d/topics.log"
    : >"$d/produced"
    for n in "${CASES[@]}"; do
      [ "${C_GROUP[$n]}" = "$g" ] || continue
      case ${C_INPUT[$n]} in
        submit:*) "$DEDUPD" submit -c "$CFG" "$WORK/in/$n" >>"$d/receipts" 2>>"$d/submit.log" ;;
        gen:empty) printf '%s\t\n' "$n" | kcat -P -b "$KAFKA_BOOTSTRAP" -t "$T-$g.jobs" -K '\t' ;;
        gen:null) printf '%s\t\n' "$n" | kcat -P -b "$KAFKA_BOOTSTRAP" -t "$T-$g.jobs" -K '\t' -Z ;;
        *) kcat -P -b "$KAFKA_BOOTSTRAP" -t "$T-$g.jobs" -k "$n" "$WORK/in/$n" ;;
      esac || { echo "produce of $n failed" >"$d/produce.err"; }
      echo "$n" >>"$d/produced"
    done
    t0=$(date +%s%3N)
    rc=0
    "$DEDUPD" run -c "$CFG" --exit-when-idle 2500 --stats-json >"$d/stats.json" 2>"$d/run.log" || rc=$?
    echo "$rc $(( $(date +%s%3N) - t0 ))" >"$d/run.rc"
    rc=0
    "$DEDUPD" run -c "$CFG" --exit-when-idle 1500 --stats-json >"$d/stats2.json" 2>"$d/run2.log" || rc=$?
    echo "$rc" >"$d/run2.rc"
  )
}
nginx_mark=$(log_mark)
t0=$(date +%s)
gpids=()
for g in "${GROUPS_USED[@]}"; do run_group "$g" & gpids+=($!); done
for p in "${gpids[@]}"; do wait "$p" || true; done
echo "groups ran in $(( $(date +%s) - t0 )) s"
sleep 0.3 # late canary log lines

# ---- collect: every DLQ record and result of every group
FAILED=0
bad() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
declare -A L_PLACE L_REASON L_COUNT L_DETAIL L_STATUS
# One TSV line per record without @tsv's escapes (reasons are compared as they
# are); "~" stands for an empty field (IFS tab is whitespace: empty fields
# would collapse).
TSV_DEF='def hdr($n): (.headers // []) as $h | ($h | index($n)) as $i | if $i then $h[$i + 1] else null end;
  def tsv: map(if . == null or . == "" then "~" else tostring | gsub("[\t\n\r]"; " ") end) | join("\t");'
untilde() { local v; for v in "$@"; do [ "${!v}" != "~" ] || printf -v "$v" ''; done; }
# Payloads byte for byte: "%K %S\n" then the key and value bytes.
split_payloads() { # TOPIC DIR
  mkdir -p "$2"
  { kcat -C -b "$KAFKA_BOOTSTRAP" -t "$1" -o beginning -e -q -f '%K %S %p %o\n%k%s' 2>"$WORK/kcat.err" ||
      fail "kcat could not read topic $1: $(tail -n 3 "$WORK/kcat.err")"; } |
    perl -e '
      binmode STDIN; my $dir = shift;
      while (defined(my $h = <STDIN>)) {
        my ($kl, $vl, $p, $o) = split " ", $h;
        my ($k, $v) = ("", "");
        read(STDIN, $k, $kl) if $kl > 0;
        read(STDIN, $v, $vl) if $vl > 0;
        open(my $f, ">", "$dir/$p-$o") or die; binmode $f; print $f $v; close $f;
      }' "$2"
}
for g in "${GROUPS_USED[@]}"; do
  d=$WORK/g-$g
  read -r rc ms <"$d/run.rc"
  [ "$rc" = 0 ] || { tail -n 20 "$d/run.log" >&2; bad "group $g: dedupd run exited $rc"; }
  [ "$(cat "$d/run2.rc")" = 0 ] || bad "group $g: second dedupd run exited $(cat "$d/run2.rc")"
  [ ! -s "$d/produce.err" ] || bad "group $g: $(cat "$d/produce.err")"
  echo "group $g: $(cat "$d/stats.json") (${ms} ms)"
  topic_dump "$T-$g.dlq" >"$d/dlq.json"
  topic_dump "$T-$g.results" >"$d/results.json"
  split_payloads "$T-$g.dlq" "$d/dlq"
  # DLQ: key = case name (kcat) or op_id (submit): then the payload's c= tag
  while IFS=$'\t' read -r key p o reason source; do
    untilde key reason source
    n=$key
    [ -n "${C_GROUP[$n]:-}" ] || n=$(LC_ALL=C grep -aoE '[?&]c=[A-Za-z0-9_]+' "$d/dlq/$p-$o" | head -1 | cut -d= -f2 || true)
    n=${n:-"?$g/$p/$o"}
    L_COUNT[$n]=$(( ${L_COUNT[$n]:-0} + 1 ))
    L_PLACE[$n]=dlq L_REASON[$n]=$reason
    L_DETAIL[$n]="$p $o $source"
  done < <(jq -r "$TSV_DEF"'[.key, .partition, .offset, hdr("dedupd-error"), hdr("dedupd-source")] | tsv' "$d/dlq.json")
  # results: the case is the c= tag of the url
  while IFS=$'\t' read -r url outcome category status attempts error; do
    untilde url outcome category status attempts error
    n=$(grep -oE '[?&]c=[A-Za-z0-9_]+' <<<"$url" | head -1 | cut -d= -f2 || true)
    n=${n:-"?$g:$url"}
    L_COUNT[$n]=$(( ${L_COUNT[$n]:-0} + 1 ))
    if [ "$outcome" = fetched ]; then
      L_PLACE[$n]=fetched L_REASON[$n]=$status
    else
      L_PLACE[$n]=$outcome L_REASON[$n]=$category L_STATUS[$n]=$status
    fi
    L_DETAIL[$n]="attempts=$attempts status=$status error=$error"
  done < <(jq -r "$TSV_DEF"'.payload | fromjson | [.url, .outcome, .category, .status, .attempts, .error] | tsv' "$d/results.json")
done

# requests per case seen by nginx (this test's tag) and by the canary
declare -A NGINX CANARY
while read -r k n; do NGINX[$n]=$k; done < <(tail -n +"$((nginx_mark + 1))" "$ORIGIN_ACCESS_LOG" |
  grep -F "t=$T&" | grep -oE '[?&]c=[A-Za-z0-9_]+' | cut -d= -f2 | sort | uniq -c)
while read -r k n; do CANARY[$n]=$k; done < <(grep -oE '[?&]c=[A-Za-z0-9_]+' "$WORK/canary.log" |
  cut -d= -f2 | grep -vx selfcheck | sort | uniq -c)

# ---- per case
declare -A VERDICT
for n in "${CASES[@]}"; do
  g=${C_GROUP[$n]} exp=${C_PLACE[$n]} why=""
  got=${L_PLACE[$n]:-nowhere} cnt=${L_COUNT[$n]:-0}
  if [ "$cnt" != 1 ]; then
    why+="landed $cnt times; "
  elif [ "$got" != "$exp" ]; then
    why+="landed in $got, expected $exp; "
  else
    case $exp in
      dlq)
        # the exact reason (a word such as "url" is in most reasons: a
        # substring would pass on a case refused for another reason)
        like "${L_REASON[$n]}" "${C_REASON[$n]}" || why+="reason '${L_REASON[$n]}', expected '${C_REASON[$n]}'; "
        read -r p o source <<<"${L_DETAIL[$n]}"
        [[ $source =~ ^$T-$g\.jobs/[0-9]+/[0-9]+$ ]] || why+="dedupd-source '$source'; "
        case ${C_INPUT[$n]} in
          gen:null | gen:empty) [ ! -s "$WORK/g-$g/dlq/$p-$o" ] || why+="DLQ payload not empty; " ;;
          submit:*) ;;
          *) cmp -s "$WORK/in/$n" "$WORK/g-$g/dlq/$p-$o" || why+="DLQ payload differs from the input bytes; " ;;
        esac ;;
      failed)
        [ "${L_REASON[$n]}" = "${C_REASON[$n]}" ] || why+="category ${L_REASON[$n]}, expected ${C_REASON[$n]}; "
        # terminal: never retried (0 attempts for a literal, 1 for a name
        # refused on its resolved address; nothing sent either way: below)
        if [ "${C_REASON[$n]}" = forbidden_target ]; then
          [[ ${L_DETAIL[$n]} == attempts=[01]" "* ]] || why+="retried (${L_DETAIL[$n]%% *}); "
        fi ;;
      fetched)
        [ "${L_REASON[$n]}" = "${C_REASON[$n]}" ] || why+="status ${L_REASON[$n]}, expected ${C_REASON[$n]}; " ;;
    esac
  fi
  # requests that reached nginx or the canary: one per fetched case, none for
  # the DLQ and forbidden_target (other failures may have sent something)
  reached=$(( ${NGINX[$n]:-0} + ${CANARY[$n]:-0} ))
  if [ "$exp" = fetched ]; then
    [ "$reached" = 1 ] || why+="origin+canary saw $reached requests, expected 1; "
  elif [ "$exp" = dlq ] || [ "${C_REASON[$n]}" = forbidden_target ]; then
    [ "$reached" = 0 ] || why+="a request reached the target (nginx ${NGINX[$n]:-0}, canary ${CANARY[$n]:-0}); "
  fi
  if [ -n "$why" ]; then
    VERDICT[$n]="FAIL: ${why%; }"
    bad "$n ($g): ${why%; }${C_NOTE[$n]:+ [${C_NOTE[$n]}]}"
  else
    VERDICT[$n]=ok
  fi
done
# anything that landed and is no case of ours
for n in "${!L_COUNT[@]}"; do
  [ -n "${C_GROUP[$n]:-}" ] || bad "unexpected record $n (${L_PLACE[$n]}: ${L_REASON[$n]})"
done

# ---- per group: nothing lost, offsets at the end, clean reasons and logs
for g in "${GROUPS_USED[@]}"; do
  d=$WORK/g-$g
  n_in=$(wc -l <"$d/produced")
  n_dlq=$(wc -l <"$d/dlq.json"); n_res=$(wc -l <"$d/results.json")
  [ "$((n_dlq + n_res))" = "$n_in" ] && ok "group $g: DLQ $n_dlq + results $n_res = inputs $n_in" ||
    bad "group $g: DLQ $n_dlq + results $n_res != inputs $n_in"
  # a valid job on another partition than its op_id's is re-produced there
  # once (DESIGN.md section 2) and consumed again: the topic holds the inputs
  # and those copies
  consumed=$(jq .consumed "$d/stats.json")
  rerouted=$(jq .misrouted "$d/stats.json")
  [ "$consumed" = "$((n_in + rerouted))" ] && ok "group $g: consumed $consumed ($n_in + $rerouted re-routed)" ||
    bad "group $g: consumed $consumed of $n_in + $rerouted re-routed"
  end=$(kcat -Q -b "$KAFKA_BOOTSTRAP" -t "$T-$g.jobs:0:-1" -t "$T-$g.jobs:1:-1" 2>/dev/null |
    awk '/ offset / {s += $NF} END {print s + 0}')
  [ "$end" = "$((n_in + rerouted))" ] && ok "group $g: end offsets of the jobs topic sum to $end" ||
    bad "group $g: end offsets sum to $end, $n_in produced + $rerouted re-routed"
  again=$(jq .consumed "$d/stats2.json" 2>/dev/null || echo "?")
  [ "$again" = 0 ] && ok "group $g: a second run consumed nothing (committed offsets at the end)" ||
    bad "group $g: a second run consumed $again"
  # reasons travel in headers and logs: UTF-8, no control characters
  jq -r '.headers // [] | . as $h | (index("dedupd-error")) as $i | if $i then $h[$i + 1] else "" end' \
    "$d/dlq.json" >"$d/reasons.txt"
  if iconv -f UTF-8 -t UTF-8 "$d/reasons.txt" >/dev/null 2>&1 && ! LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$d/reasons.txt"; then
    ok "group $g: DLQ reasons are clean UTF-8"
  else
    bad "group $g: a DLQ reason is not clean UTF-8: $(LC_ALL=C grep -n $'[\x01-\x08\x0b-\x1f\x7f\x80-\xff]' "$d/reasons.txt" | head -3 | cat -v)"
  fi
  nbadlog=$(cat "$d/run.log" "$d/run2.log" | jq -R 'try (fromjson | type == "object") catch false' | grep -vc true || true)
  [ "$nbadlog" = 0 ] && ok "group $g: every log line is a JSON object" || bad "group $g: $nbadlog log lines are not JSON objects"
done

# ---- the table
TABLE=$WORK/bad_input_table.tsv
{
  printf 'case\tgroup\tinput\tlanded\treason\texpected\tverdict\n'
  for n in "${CASES[@]}"; do
    r=${L_REASON[$n]:-}
    [ "${L_PLACE[$n]:-}" != failed ] || r+=" (status ${L_STATUS[$n]:-}, ${L_DETAIL[$n]%% *})"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "${C_GROUP[$n]}" "${C_INPUT[$n]}" "${L_PLACE[$n]:-nowhere}" \
      "${r:0:150}" "${C_PLACE[$n]}: ${C_REASON[$n]}" "${VERDICT[$n]}${C_NOTE[$n]:+ (${C_NOTE[$n]})}"
  done
} >"$TABLE"
[ -z "${BAD_INPUT_TABLE:-}" ] || cp "$TABLE" "$BAD_INPUT_TABLE"
echo "---- results table ($TABLE)"
column -t -s $'\t' "$TABLE" 2>/dev/null || cat "$TABLE"
echo "cases: ${#CASES[@]}, failed checks: $FAILED"
[ "$FAILED" = 0 ]
