#!/usr/bin/env bash
# Issue 14 (2): SOCKS5 replies about the target are the target's failure
# (DESIGN.md section 5, RFC 1928 section 6).
#
# Three sessions of one provider on the stack's dante exit (socks5h, no auth),
# fetch.cooldown_default_ms 60 s, fetch.session_max_errors 2.  dante answers
# reply 4 (host unreachable) to a name it cannot resolve, reply 5 (connection
# refused) to a closed port, reply 2 (not allowed by its ruleset) to an
# address outside 127.0.0.0/8.
#   X. a name dante cannot resolve: category dns, every attempt (3) through
#      the same session, no rotation; dante's log names the name 3 times;
#   Y. a closed port on an address: category connect, likewise;
#   E. right after, plain jobs (5 s deadline) are fetched through the same
#      exit at once: no session cooled down (a cooldown would outlast their
#      deadline), none retired;
#   Z. reply 2 stays the proxy's failure: proxy_connect, the op rotates.
# Asserted on dante's log (which target the exit tried), the origin's log
# (requests and their peer: 127.0.0.4 is dante's exit address), the results
# and the run log.
source "$(dirname "$0")/lib.sh"
pin_dedupd
SOCKS_LOG=${SOCKS_LOG:-$STACK_DIR/dante/danted.log} # from stack.sh env
[ -r "$SOCKS_LOG" ] || fail "dante's log $SOCKS_LOG is not readable"
sx=${SOCKS_EXITS%% *}; sx=${sx#*://}; sx_host=${sx%:*}; sx_port=${sx##*:}

prov=$(jq -nc --arg h "$sx_host" --argjson p "$sx_port" \
  '[{name: "dante", gateway: $h, socks_port: $p, sessions: 3}]')
jq --argjson p "$prov" '.proxy = {providers: $p}' "$CFG" >"$WORK/dedupd.json"
CFG=$WORK/dedupd.json
export DEDUPD_PROXY__EXITS=
export DEDUPD_FETCH__ALLOW_TARGETS=127.0.0.1/32,203.0.113.7/32
export DEDUPD_FETCH__MAX_ATTEMPTS=3
export DEDUPD_FETCH__BACKOFF_BASE_MS=50 DEDUPD_FETCH__BACKOFF_MAX_MS=200
export DEDUPD_FETCH__COOLDOWN_DEFAULT_MS=60000
export DEDUPD_FETCH__SESSION_MAX_ERRORS=2

cleanup() {
  [ -n "${DPID:-}" ] && kill "$DPID" 2>/dev/null
  stop_fixtures
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
hostile_start origin 127.0.0.1:0
P=$(head -1 "$WORK/origin.port")
O=http://127.0.0.1:$P
# A closed local port: where an origin listened a moment ago.
"$HOSTILE" --listen 127.0.0.1:0 >"$WORK/closed.port" 2>/dev/null &
cpid=$!
for _ in $(seq 100); do [ -s "$WORK/closed.port" ] && break; sleep 0.1; done
CLOSED=$(head -1 "$WORK/closed.port")
kill "$cpid"; wait "$cpid" 2>/dev/null || true

dead=dead-$$-$(date +%s).invalid
job() { jq -cn --arg u "$1" --arg k "$2" --argjson d "$3" '{url: $u, job_key: $k, deadline_s: $d}'; }
results() { topic_dump "$DEDUPD_TOPICS__RESULTS" | jq -c '.payload | fromjson'; }
wait_results() { # wait_results N SECONDS: until N results, for SECONDS at most
  local end=$(( $(date +%s%3N) + $2 * 1000 ))
  while [ "$(date +%s%3N)" -lt "$end" ]; do
    [ "$(results | wc -l)" -ge "$1" ] && return 0
    sleep 0.2
  done
  return 1
}
res() { results | jq -r --arg k "$1" "select(.job_key == \$k) | $2"; }
socks_mark=$(wc -l <"$SOCKS_LOG")
socks_new() { tail -n +"$(( socks_mark + 1 ))" "$SOCKS_LOG"; }

"$DEDUPD" run -c "$CFG" 2>"$WORK/run.log" &
DPID=$!

# ---- X and Y: replies 4 and 5
{ job "http://$dead/?c=$T-x" x 10; job "http://127.0.0.1:$CLOSED/?c=$T-y" y 10; } >"$WORK/xy.ndjson"
submit "$WORK/xy.ndjson" >/dev/null
wait_results 2 15 || fail "X, Y: no results in 15 s (deadline 10 s)"
for k in x y; do
  echo "$k: $(results | jq -c --arg k $k 'select(.job_key == $k) | {outcome, category, attempts, rotations, session, error}')"
done
expect_eq "$(res x '"\(.outcome)/\(.category)/\(.attempts)/\(.rotations)"')" failed/dns/3/0 \
  "X (reply 4, a name): outcome/category/attempts/rotations"
expect_eq "$(res y '"\(.outcome)/\(.category)/\(.attempts)/\(.rotations)"')" failed/connect/3/0 \
  "Y (reply 5, an address): outcome/category/attempts/rotations"
# what the exit tried: the dead name 3 times, the closed port 3 times
# (dante writes two lines per request, tcp/connect and tcp/accept)
expect_eq "$(socks_new | grep -F 'tcp/connect ]' | grep -cF "could not resolve hostname \"$dead\"" || true)" 3 \
  "X: dante's resolution failures for $dead"
# dante writes an address and port as 127.0.0.1.PORT
expect_eq "$(socks_new | grep -F "127.0.0.1.$CLOSED " | grep -cF 'tcp/connect ]' || true)" 3 \
  "Y: dante's refused connects to port $CLOSED"

# ---- E: the exit is healthy: plain jobs with a 5 s deadline go through at once
for i in 1 2 3; do job "$O/ok?c=$T-e$i" "e$i" 5; done >"$WORK/e.ndjson"
submit "$WORK/e.ndjson" >/dev/null
t_sub=$(date +%s%3N) # after the submit CLI's own start-up
wait_results 5 15 || fail "E: no results in 15 s"
for i in 1 2 3; do
  expect_eq "$(res "e$i" '"\(.outcome)/\(.status)/\(.attempts)"')" fetched/200/1 "E$i: result"
done
peers=$(grep -F "c=$T-e" "$WORK/origin.log" | awk '{print $2}' | sort | uniq -c | awk '{print $2 "x" $1}' | paste -sd,)
expect_eq "$peers" "$sx_host"x3 "E: origin requests by peer (dante's exit address)"
last=$(grep -F "c=$T-e" "$WORK/origin.log" | awk '{print $1}' | sort -n | tail -1)
[ $(( last - t_sub )) -lt 3000 ] || fail "E: fetched $(( last - t_sub )) ms after the submit: a session cooled down"
ok "E: fetched within $(( last - t_sub )) ms of the submit (no cooldown)"
grep -q 'renewed' "$WORK/run.log" && fail "a session was retired: $(grep renewed "$WORK/run.log" | head -2)"
ok "no session retired"

# ---- Z: reply 2 (not allowed by the exit's ruleset) is the proxy's failure
job "http://203.0.113.7/?c=$T-z" z 20 >"$WORK/z.ndjson"
submit "$WORK/z.ndjson" >/dev/null
wait_results 6 20 || fail "Z: no result in 20 s"
echo "z: $(results | jq -c 'select(.job_key == "z") | {outcome, category, attempts, rotations, error}')"
expect_eq "$(res z '"\(.outcome)/\(.category)"')" failed/proxy_connect "Z (reply 2): outcome/category"
[ "$(res z .rotations)" -ge 1 ] || fail "Z: no rotation after the proxy's own refusal"
ok "Z: rotated $(res z .rotations) time(s) away from the refusing session"
kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
# X and Y: every attempt through one session (the op stayed on it)
for k in x y; do
  "$DEDUPD" inspect -c "$CFG" "$(res $k .op_id)" --json >"$WORK/inspect-$k.json" 2>/dev/null ||
    fail "inspect $k"
  echo "$k attempts: $(jq -c '[.attempt_log[] | {session, category}]' "$WORK/inspect-$k.json")"
  expect_eq "$(jq -r '[.attempt_log[].session] | unique | length' "$WORK/inspect-$k.json")" 1 \
    "${k^^}: sessions its attempts went through"
done
