#!/usr/bin/env bash
# Timed rotation (provider rotation "timed", rotate_every_s; DESIGN.md section
# 5): the provider changes a session's exit every N s, so no connection
# (tunnel) of an earlier interval may carry a later request.  Measured on the
# test origin (tests/fixtures/wf_origin.c logs each request's peer port: a
# new SOCKS tunnel through dante is a new port) and on dante's own log:
#   - sticky control: 28 requests, one at a time, over ~7 s: one or two tunnels
#   - timed, rotate_every_s=3, same load: no tunnel carries requests of two
#     intervals (interval of a request = the result's session.rotates_at),
#     the run spans several intervals, tunnels are still reused inside one
#   - every timed result says when its exit rotates (session.rotates_at), and
#     dante's log shows as many tunnels to the origin as the origin saw
source "$(dirname "$0")/lib.sh"
WF_ORIGIN=${WF_ORIGIN_BIN:-$(dirname "$DEDUPD")/tests/fixtures/wf_origin}
[ -x "$WF_ORIGIN" ] || fail "test origin not built: $WF_ORIGIN (cmake --build build)"
ORIGIN_LOG=$WORK/origin.log
"$WF_ORIGIN" "$ORIGIN_LOG" > "$WORK/origin.port" &
ORIGIN_PID=$!
trap 'kill $ORIGIN_PID 2>/dev/null || true; wait $ORIGIN_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do [ -s "$WORK/origin.port" ] && break; sleep 0.1; done
PORT=$(head -n1 "$WORK/origin.port")
[ -n "$PORT" ] || fail "test origin did not start"
export DEDUPD_PROXY__EXITS= DEDUPD_FETCH__PER_HOST_MAX_INFLIGHT=1
export DEDUPD_FETCH__PER_HOST_RATE_PER_MIN=240 DEDUPD_FETCH__PER_HOST_BURST=1
hostport() { local x=${1#*://}; echo "${x%%/*}"; }
sx=$(hostport "$SOCKS_AUTH_EXIT"); sx_host=${sx%:*}; sx_port=${sx##*:}
N=28

# run_mode ROTATION: N requests through a one-session dante provider
run_mode() {
  prov=$(jq -nc --arg r "$1" --arg u "$SOCKS_AUTH_USER" --arg pf "$SOCKS_AUTH_PASSWORD_FILE" \
    --arg h "$sx_host" --argjson p "$sx_port" \
    '[{name: "timed", gateway: $h, socks_port: $p, username: "{user}", user: $u, password_file: $pf, rotation: $r, rotate_every_s: 3}]')
  jq --argjson p "$prov" '.proxy = {providers: $p} | .fetch.allow_targets = ["127.0.0.1/32"]' "$CFG" > "$WORK/cfg.json"
  for i in $(seq "$N"); do echo "{\"url\": \"http://127.0.0.1:$PORT/page?k=$T-$1-$i\"}"; done > "$WORK/jobs.$1"
  "$DEDUPD" submit -c "$WORK/cfg.json" "$WORK/jobs.$1" > /dev/null 2>>"$WORK/submit.log"
  "$DEDUPD" run -c "$WORK/cfg.json" --exit-when-idle 1500 --stats-json 2>>"$WORK/run.log" > "$WORK/stats.$1" ||
    { tail -n 30 "$WORK/run.log" >&2; fail "dedupd run failed"; }
  "$DEDUPD" tail -c "$WORK/cfg.json" --exit-when-idle 1500 2>>"$WORK/tail.log" |
    jq -c --arg t "$T-$1-" 'select(.url | contains($t))' > "$WORK/results.$1"
  # origin: "k port"
  grep -F "k=$T-$1-" "$ORIGIN_LOG" | awk '{k = $5; sub(/.*k=/, "", k); print k, $3, $2}' > "$WORK/conn.$1"
}

# ---- sticky control
run_mode sticky
expect_eq "$(jq -r 'select(.outcome == "fetched") | .op_id' "$WORK/results.sticky" | sort -u | wc -l)" "$N" "sticky: fetched"
expect_eq "$(awk '{print $3}' "$WORK/conn.sticky" | sort -u)" "$sx_host" "sticky: every request from the dante exit"
sticky_conns=$(awk '{print $2}' "$WORK/conn.sticky" | sort -u | wc -l)
echo "sticky: $N requests on $sticky_conns connection(s)"
[ "$sticky_conns" -le 2 ] || fail "sticky: $sticky_conns tunnels for $N sequential requests (a kept-alive tunnel expected)"
ok "sticky: $sticky_conns tunnel(s)"
expect_eq "$(jq -s 'map(select(.session.rotates_at)) | length' "$WORK/results.sticky")" 0 "sticky: no rotates_at"

# ---- timed, every 3 s
t0=$(date +%s)
run_mode timed
expect_eq "$(jq -r 'select(.outcome == "fetched") | .op_id' "$WORK/results.timed" | sort -u | wc -l)" "$N" "timed: fetched"
expect_eq "$(jq -s 'map(select(.session.rotates_at == null)) | length' "$WORK/results.timed")" 0 "timed: every result has session.rotates_at"
# k -> interval (rotates_at)
jq -r '[(.url | sub(".*k="; "")), .session.rotates_at] | @tsv' "$WORK/results.timed" | sort > "$WORK/k2iv"
sort "$WORK/conn.timed" | join - "$WORK/k2iv" > "$WORK/joined" # k port ip interval
expect_eq "$(wc -l < "$WORK/joined")" "$N" "timed: every origin request matched to its result"
intervals=$(awk '{print $4}' "$WORK/joined" | sort -u | wc -l)
conns=$(awk '{print $2}' "$WORK/joined" | sort -u | wc -l)
spanning=$(awk '{print $2, $4}' "$WORK/joined" | sort -u | awk '{print $1}' | uniq -d | wc -l)
reused=$(awk '{print $2}' "$WORK/joined" | sort | uniq -c | awk '$1 > 1' | wc -l)
echo "timed: $N requests, $intervals intervals, $conns tunnels, $spanning spanning two intervals, $reused reused"
[ "$intervals" -ge 2 ] || fail "timed: the run stayed in one interval: nothing was tested"
ok "timed: the run spanned $intervals intervals"
expect_eq "$spanning" 0 "timed: tunnels that carried requests of two intervals"
[ "$conns" -ge "$intervals" ] || fail "timed: $conns tunnels for $intervals intervals"
ok "timed: $conns tunnels for $intervals intervals"
[ "$reused" -ge 1 ] || fail "timed: no tunnel reused within an interval (per-request behaviour)"
ok "timed: $reused tunnel(s) reused within their interval"
# fetched within the interval its result names
late=$(jq -s 'map(select((.fetched_at | sub("\\.[0-9]+Z$"; "Z") | fromdate) > (.session.rotates_at | sub("\\.[0-9]+Z$"; "Z") | fromdate) + 1)) | length' "$WORK/results.timed")
expect_eq "$late" 0 "timed: results fetched after their exit rotated"
# dante saw the same tunnels
dconns=$(awk -F'[()]' -v t0="$t0" '$2 + 0 >= t0' "$SOCKS_AUTH_LOG" | grep -F "tcp/connect [" | grep -cF "127.0.0.1.$PORT" || true)
expect_eq "$dconns" "$conns" "timed: dante's log shows the tunnels the origin saw"
