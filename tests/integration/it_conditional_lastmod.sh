#!/usr/bin/env bash
# Conditional refetch (README "Conditional refetch") of a resource with
# Last-Modified and no ETag (tests/fixtures/hostile_origin, route /lastmod,
# whose log shows the conditional headers each request carried):
#  1. If-Modified-Since alone: a new op for the resource sends
#     If-Modified-Since (the stored Last-Modified, byte for byte) and no
#     If-None-Match; the origin's 304 is answered from the stored body
#     (outcome not_modified, status 304, the first op's body and body_sha256).
#  2. A 304 whose stored body has expired is not trusted: fetched again once
#     without validators.  The body expires with its validator
#     (store.validators_ttl_ms, here 5 s): an op loads the validator while it
#     is live (its request carries If-Modified-Since), the origin holds its
#     304 for 6 s, so when the 304 comes the body's expiry (stored_at + 5 s,
#     stored_at before the request) has passed.  Premise, proven: x2's
#     request carried If-Modified-Since, and it reached the origin late
#     enough that the held 304 left after x1's completion (when its validator
#     and body were stored; dedupd inspect) + the TTL.
source "$(dirname "$0")/lib.sh"
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; stop_fixtures; rm -rf "$WORK"' EXIT

hostile_start origin 127.0.0.1:0
O="http://127.0.0.1:$(head -n 1 "$WORK/origin.port")"
LM="Tue, 03 Nov 2026 10:00:00 GMT"
LM_LOGGED=${LM// /%20}   # the origin's log percent-encodes spaces
job() { jq -nc --arg u "$1" --arg k "$2" '{url: $u, job_key: $k}'; }
# lines TAG: the origin's log lines of the requests of resource TAG
lines() { grep -F "t=$T&r=$1" "$WORK/origin.log" || true; }
# conds TAG: per request, "inm=... ims=..." or "none"
conds() { lines "$1" | awk '{c = ""; for (i = 6; i <= NF; i++) c = c (c ? " " : "") $i; print (c ? c : "none")}'; }
result() { jq -c --arg k "$1" 'select(.job_key == $k)' "$WORK/results.ndjson"; }

# ---- 1. If-Modified-Since alone ---------------------------------------------
u1="$O/lastmod?lm=${LM// /%20}&t=$T&r=1"
job "$u1" m1 | submit - > /dev/null
export IDLE_MS=1500
stats=$(run_until_idle)
expect_eq "$(jq -r '"\(.new) \(.not_modified)"' <<<"$stats")" "1 0" "run 1: new, not_modified"
job "$u1" m2 | submit - > /dev/null
stats=$(run_until_idle)
echo "run 2: $stats"
tail_results > "$WORK/results.ndjson"
# premise: the first op fetched the resource, which has Last-Modified and no
# ETag (so that the only validator is If-Modified-Since)
[ "$(result m1 | jq -r '"\(.outcome) \(.status) \(.headers."last-modified") \(.headers.etag)"')" = "fetched 200 $LM null" ] ||
  fail "nothing was tested: m1 was not a 200 with Last-Modified and no ETag: $(result m1 | jq -c '{outcome, status, headers}')"
ok "premise: m1 fetched, with Last-Modified and no ETag"
expect_eq "$(conds 1 | paste -sd'|')" "none|ims=$LM_LOGGED" \
  "origin: m1 plain, m2 If-Modified-Since (the stored Last-Modified) and no If-None-Match"
expect_eq "$(jq -r '"\(.new) \(.not_modified) \(.fetch_attempts)"' <<<"$stats")" "1 1 1" \
  "run 2: new, not_modified, fetch attempts"
expect_eq "$(result m2 | jq -r '"\(.outcome) \(.status)"')" "not_modified 304" "m2: outcome and status"
expect_eq "$(result m2 | jq -r .body_sha256)" "$(result m1 | jq -r .body_sha256)" "m2's body_sha256 is the stored one (m1's)"
expect_eq "$(result m2 | jq -r .body)" "$(result m1 | jq -r .body)" "m2's body is the stored one (m1's)"
expect_eq "$(result m2 | jq -r .body)" "<html><body><p>last modified $LM</p></body></html>" "the stored body"

# ---- 2. a 304 whose stored body has expired ---------------------------------
TTL_MS=5000 HOLD_S=6
u2="$O/lastmod?lm=${LM// /%20}&hold304=$HOLD_S&t=$T&r=2"
export DEDUPD_STORE__VALIDATORS_TTL_MS=$TTL_MS
job "$u2" x1 | submit - > /dev/null
"$DEDUPD" run -c "$CFG" --exit-when-idle 2500 --stats-json >"$WORK/stats.json" 2>"$WORK/run3.log" &
pid=$!
admin=$(admin_port "$WORK/run3.log")
# x1 complete (its validator and body stored): submit x2 at once, within the TTL
done1=""
for _ in $(seq 1 600); do
  done1=$(curl -s "http://127.0.0.1:$admin/metrics" | awk '$1 == "dedupd_results_total{outcome=\"fetched\"}" {print $2}')
  [ "${done1:-0}" -ge 1 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
[ "${done1:-0}" = 1 ] || { tail -n 20 "$WORK/run3.log" >&2; fail "x1 not fetched (dedupd_results_total{outcome=\"fetched\"} '$done1')"; }
ok "x1 fetched (its validator and body stored)"
job "$u2" x2 | submit - > /dev/null
rc=0; wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || { tail -n 20 "$WORK/run3.log" >&2; fail "dedupd run exit $rc"; }
stats=$(cat "$WORK/stats.json")
echo "run 3: $stats"
# premise: x2 loaded the validator while it was live (its request carried
# If-Modified-Since), and the 304 came once the stored body had expired (the
# 304 attempt ended after x1's completion + the TTL)
[ "$(conds 2 | sed -n 2p)" = "ims=$LM_LOGGED" ] ||
  fail "nothing was tested: x2's request did not carry If-Modified-Since (validator expired before x2 loaded it?): $(conds 2 | paste -sd'|')"
"$DEDUPD" inspect -c "$CFG" default:x1 --json > "$WORK/x1.json" 2>>"$WORK/inspect.log" || fail "inspect x1 exit $?"
"$DEDUPD" inspect -c "$CFG" default:x2 --json > "$WORK/x2.json" 2>>"$WORK/inspect.log" || fail "inspect x2 exit $?"
stored_at=$(jq -r .updated_at_ms "$WORK/x1.json")
t2=$(lines 2 | sed -n 2p | awk '{print $1}')
sent304=$((t2 + HOLD_S * 1000))   # the origin sends the 304 no earlier
[ "$sent304" -gt $((stored_at + TTL_MS)) ] ||
  fail "nothing was tested: x2's 304 left the origin at $((sent304 - stored_at)) ms after the body was stored, within its TTL of $TTL_MS ms"
ok "premise: x2 sent If-Modified-Since with a live validator $((t2 - stored_at)) ms after x1's body was stored; its 304 left $((sent304 - stored_at)) ms after (TTL $TTL_MS ms)"
expect_eq "$(conds 2 | paste -sd'|')" "none|ims=$LM_LOGGED|none" \
  "origin: x1 plain, x2 conditional, then x2 once more without validators"
t3=$(lines 2 | sed -n 3p | awk '{print $1}')
[ $((t3 - t2)) -ge $((HOLD_S * 1000)) ] || fail "the refetch came $((t3 - t2)) ms after the conditional request, before its 304"
ok "the refetch came after the 304 ($((t3 - t2)) ms after the conditional request)"
expect_eq "$(jq -r '"\(.new) \(.not_modified) \(.fetch_attempts)"' <<<"$stats")" "2 0 3" \
  "run 3: new, not_modified, fetch attempts (x1, x2 conditional, x2 again)"
tail_results > "$WORK/results.ndjson"
expect_eq "$(result x2 | jq -r '"\(.outcome) \(.status)"')" "fetched 200" "x2: fetched again, not not_modified"
expect_eq "$(result x2 | jq -r .body)" "<html><body><p>last modified $LM</p></body></html>" "x2's body (from the refetch)"
# (the 304's own attempt record is not kept today, only its count: x2's
# attempt_log holds #2 only)
expect_eq "$(jq -r '"\(.state) \(.attempts)"' "$WORK/x2.json")" "complete 2" "x2 in the store: complete after 2 attempts (the 304, the refetch)"
