#!/usr/bin/env bash
# Conditional refetch (DESIGN.md section 5): a new op for a resource with
# stored validators sends If-None-Match / If-Modified-Since; a 304 reuses the
# stored body (outcome not_modified); a 304 whose ETag does not weakly match
# is not trusted and the page is fetched again once without validators.
# Asserted on what nginx and a scripted origin (tests/fixtures/hostile_origin,
# route /etag) saw.
source "$(dirname "$0")/lib.sh"

HOSTILE=${HOSTILE_ORIGIN_BIN:-$(dirname "$DEDUPD")/tests/fixtures/hostile_origin}
[ -x "$HOSTILE" ] || fail "hostile origin not built: $HOSTILE"
"$HOSTILE" --listen 127.0.0.1:0 --log "$WORK/origin2.log" >"$WORK/origin2.port" 2>/dev/null &
OPID=$!
trap 'kill $OPID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 50); do [ -s "$WORK/origin2.port" ] && break; sleep 0.1; done
O2="http://127.0.0.1:$(head -n 1 "$WORK/origin2.port")"

page=$(pages 1)
honest="$O2/etag?tag=h1&t=$T"
liar="$O2/etag?tag=a1&reply=zz&t=$T"
weak="$O2/etag?tag=w1&weak=1&t=$T"
job() { jq -nc --arg u "$1" --arg k "$2" '{url: $u, job_key: $k}'; }

# Run 1: first fetch of each resource (validators stored).
{ job "$page" n1; job "$honest" h1; job "$liar" l1; job "$weak" w1; } > "$WORK/run1.ndjson"
mark=$(log_mark)
submit "$WORK/run1.ndjson" > /dev/null
stats=$(run_until_idle)
echo "run 1: $stats"
expect_eq "$(jq .new <<<"$stats")" 4 "run 1: new ops"
expect_eq "$(jq .not_modified <<<"$stats")" 0 "run 1: not_modified"

# Run 2: new ops (other job_keys) for the same resources.
{ job "$page" n2; job "$honest" h2; job "$liar" l2; job "$weak" w2; } > "$WORK/run2.ndjson"
submit "$WORK/run2.ndjson" > /dev/null
stats=$(run_until_idle)
echo "run 2: $stats"
expect_eq "$(jq .new <<<"$stats")" 4 "run 2: new ops"
expect_eq "$(jq .not_modified <<<"$stats")" 3 "run 2: 304s answered from the stored body (nginx, honest, weak)"

# nginx: 200 then 304 for the page
expect_eq "$(log_since "$mark" | awk '{print $(NF-1)}' | tr '\n' ' ')" "200 304 " "nginx statuses for the page"
# the scripted origin: honest 200 304; weak 200 304; liar 200 304 200
expect_eq "$(grep -c 'tag=h1' "$WORK/origin2.log")" 2 "honest: requests"
expect_eq "$(grep -c 'tag=w1' "$WORK/origin2.log")" 2 "weak: requests"
expect_eq "$(grep -c 'tag=a1' "$WORK/origin2.log")" 3 "liar: requests (304 not trusted: fetched again)"

tail_results > "$WORK/results.ndjson"
expect_eq "$(wc -l < "$WORK/results.ndjson")" 8 "results"
r() { jq -c --arg k "$1" 'select(.job_key == $k) | {outcome, status, body_sha256, bytes}' "$WORK/results.ndjson"; }
for pair in "n1 n2" "h1 h2" "w1 w2"; do
  set -- $pair
  expect_eq "$(r "$1" | jq -r .outcome)/$(r "$2" | jq -r .outcome)" "fetched/not_modified" "$1/$2 outcomes"
  expect_eq "$(r "$2" | jq -r .status)" 304 "$2 status"
  expect_eq "$(r "$2" | jq -r .body_sha256)" "$(r "$1" | jq -r .body_sha256)" "$2 body is $1's (stored)"
  expect_eq "$(jq -r --arg k "$2" 'select(.job_key == $k) | .body | length > 0' "$WORK/results.ndjson")" true "$2 carries the body"
done
expect_eq "$(r l2 | jq -r .outcome)/$(r l2 | jq -r .status)" "fetched/200" "liar: the second op fetched the page again"
