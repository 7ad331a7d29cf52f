#!/usr/bin/env bash
# proxy_auth (DESIGN.md section 5), checked on the proxies' and nginx's logs:
#   1. a provider whose password is wrong (squid, basic auth) next to a good one
#      (dante with username auth): the first 407 suspends the bad credential
#      set; that op moves to the good provider, and no later op is sent to
#      squid (squid logs exactly one 407 for the run: requests go one at a
#      time, fetch.per_host_max_inflight=1); nginx sees every page once, all
#      from the dante exit
#   2. the bad provider alone: the op that meets the 407 fails with proxy_auth,
#      the others fail with proxy_auth without being sent (squid logs one 407,
#      nginx nothing)
#   3. a SOCKS5 authentication rejection (dante, wrong password) next to a good
#      squid provider: every page fetched through squid (nginx's client
#      address), dante logged the rejection
#   4. no password (good or wrong) in logs or results
# Each suspension is counted once: dedupd_proxy_auth_suspensions_total of the
# run's /metrics (read until it exits).
source "$(dirname "$0")/lib.sh"
export DEDUPD_PROXY__EXITS= DEDUPD_FETCH__PER_HOST_MAX_INFLIGHT=1
export DEDUPD_FETCH__PROXY_AUTH_COOLDOWN_MS=60000
hostport() { local x=${1#*://}; echo "${x%%/*}"; }
sq=$(hostport "$SQUID_EXIT"); sq_host=${sq%:*}; sq_port=${sq##*:}
sx=$(hostport "$SOCKS_AUTH_EXIT"); sx_host=${sx%:*}; sx_port=${sx##*:}
printf 'not-the-password-%s\n' "$$" > "$WORK/wrong-password"
chmod 600 "$WORK/wrong-password"
wrong=$(head -n1 "$WORK/wrong-password")

squid_prov() { # squid_prov NAME PASSWORD_FILE
  jq -nc --arg n "$1" --arg u "$SQUID_USER" --arg pf "$2" --arg h "$sq_host" --argjson p "$sq_port" \
    '{name: $n, gateway: $h, http_port: $p, username: "{user}", user: $u, password_file: $pf, sessions: 2}'
}
dante_prov() { # dante_prov NAME PASSWORD_FILE
  jq -nc --arg n "$1" --arg u "$SOCKS_AUTH_USER" --arg pf "$2" --arg h "$sx_host" --argjson p "$sx_port" \
    '{name: $n, gateway: $h, socks_port: $p, username: "{user}", user: $u, password_file: $pf}'
}
# run_with PROVIDERS_JSON N TAG: N pages through these providers; stats JSON
run_with() {
  jq --argjson p "$1" '.proxy = {providers: $p} | .fetch.allow_targets = ["127.0.0.1/32"]' "$CFG" > "$WORK/cfg.json"
  awk -v n="$2" -v t="$T-$3" '/\.html$/ && k++ < n {print $0 "?t=" t}' "$ORIGIN_PAGES" | jq -Rc '{url: .}' > "$WORK/jobs.$3"
  "$DEDUPD" submit -c "$WORK/cfg.json" "$WORK/jobs.$3" > /dev/null 2>>"$WORK/submit.log"
  local from pid rc=0
  from=$(( $(wc -l < "$WORK/run.log") + 1 ))
  "$DEDUPD" run -c "$WORK/cfg.json" --exit-when-idle 2000 --stats-json > "$WORK/stats.$3" 2>>"$WORK/run.log" &
  pid=$!
  watch_metrics "$pid" "$WORK/run.log" "$from"   # -> $WORK/metrics.last
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || { tail -n 30 "$WORK/run.log" >&2; fail "dedupd run failed ($rc)"; }
  cp "$WORK/metrics.last" "$WORK/metrics.$3"
  cat "$WORK/stats.$3"
}
touch "$WORK/run.log"
suspensions() { metric dedupd_proxy_auth_suspensions_total "$WORK/metrics.$1"; }
results_of() { # results_of TAG: the results of that run
  "$DEDUPD" tail -c "$WORK/cfg.json" --exit-when-idle 1500 2>>"$WORK/tail.log" |
    jq -c --arg t "$T-$1" 'select(.url | contains($t))' | tee -a "$WORK/results.all"
}
# (no line is an answer; an unreadable log fails)
nginx_of() { grep -F "t=$T-$1 " "$ORIGIN_ACCESS_LOG" || [ $? = 1 ] || fail "cannot read $ORIGIN_ACCESS_LOG"; }
squid_of() { grep -F "t=$T-$1" "$SQUID_ACCESS_LOG" || [ $? = 1 ] || fail "cannot read $SQUID_ACCESS_LOG"; }

# ---- 1. wrong squid password next to a good dante provider
prov=$(jq -nc --argjson a "$(squid_prov badsquid "$WORK/wrong-password")" \
  --argjson b "$(dante_prov dante "$SOCKS_AUTH_PASSWORD_FILE")" '[$a, $b]')
stats=$(run_with "$prov" 12 mixed)
echo "mixed: $stats"
results_of mixed > "$WORK/r.mixed"
expect_eq "$(jq -r 'select(.outcome == "fetched") | .op_id' "$WORK/r.mixed" | sort -u | wc -l)" 12 "mixed: fetched results"
expect_eq "$(squid_of mixed | awk '$4 == 407' | wc -l)" 1 "mixed: squid refused one request (407), then was never asked again"
expect_eq "$(squid_of mixed | awk '$4 != 407' | wc -l)" 0 "mixed: squid forwarded nothing"
nginx_of mixed > "$WORK/n.mixed"
expect_eq "$(awk '$(NF-1) == 200' "$WORK/n.mixed" | wc -l)" 12 "mixed: nginx served every page once"
expect_eq "$(awk '{print $1}' "$WORK/n.mixed" | sort -u)" "$sx_host" "mixed: every page came from the dante exit"
moved=$(jq -c 'select(.attempts == 2)' "$WORK/r.mixed")
expect_eq "$(jq -s length <<<"$moved")" 1 "mixed: one op needed a second attempt"
expect_eq "$(jq -r '.session.exit' <<<"$moved")" "dante:s1" "mixed: it moved to the good provider's session"
[ "$(jq -r '.rotations' <<<"$moved")" -ge 1 ] || fail "mixed: the move is not counted as a rotation"
ok "mixed: the move counts as a rotation"
expect_eq "$(suspensions mixed)" 1 "mixed: credential sets suspended (dedupd_proxy_auth_suspensions_total)"

# ---- 2. the bad provider alone: proxy_auth, and only one request sent
prov=$(jq -nc --argjson a "$(squid_prov badsquid "$WORK/wrong-password")" '[$a]')
stats=$(run_with "$prov" 5 alone)
echo "alone: $stats"
results_of alone > "$WORK/r.alone"
expect_eq "$(jq -r 'select(.outcome == "failed" and .category == "proxy_auth") | .op_id' "$WORK/r.alone" | sort -u | wc -l)" 5 "alone: every op failed with proxy_auth"
expect_eq "$(squid_of alone | awk '$4 == 407' | wc -l)" 1 "alone: squid saw one request (407); the others were not sent"
expect_eq "$(nginx_of alone | wc -l)" 0 "alone: nginx saw nothing"
expect_eq "$(jq -s 'map(.attempts) | add' "$WORK/r.alone")" 1 "alone: one attempt in all"
expect_eq "$(jq -s 'map(select(.body or .body_base64)) | length' "$WORK/r.alone")" 0 "alone: the proxy's 407 page is not published as a body"
expect_eq "$(suspensions alone)" 1 "alone: credential sets suspended (dedupd_proxy_auth_suspensions_total)"

# ---- 3. SOCKS5 authentication rejected (dante) next to a good squid provider
t0=$(date +%s)
prov=$(jq -nc --argjson a "$(dante_prov baddante "$WORK/wrong-password")" \
  --argjson b "$(squid_prov squid "$SQUID_PASSWORD_FILE")" '[$a, $b]')
stats=$(run_with "$prov" 8 socks)
echo "socks: $stats"
results_of socks > "$WORK/r.socks"
expect_eq "$(jq -r 'select(.outcome == "fetched") | .op_id' "$WORK/r.socks" | sort -u | wc -l)" 8 "socks: fetched results"
nginx_of socks > "$WORK/n.socks"
expect_eq "$(awk '$(NF-1) == 200' "$WORK/n.socks" | wc -l)" 8 "socks: nginx served every page once"
expect_eq "$(awk '{print $1}' "$WORK/n.socks" | sort -u)" "$sq_host" "socks: every page came from the squid exit"
expect_eq "$(squid_of socks | awk -v u="$SQUID_USER" '$3 == u && $4 == 200' | wc -l)" 8 "socks: squid forwarded all 8 for $SQUID_USER"
n=$(awk -F'[()]' -v t0="$t0" '$2 + 0 >= t0' "$SOCKS_AUTH_LOG" | grep -c "authentication failed for user \"$SOCKS_AUTH_USER\"" || true)
[ "$n" -ge 1 ] || fail "socks: dante logged no authentication failure"
ok "socks: dante logged $n authentication failure(s)"
expect_eq "$(jq -s 'map(select(.attempts == 2)) | length' "$WORK/r.socks")" 1 "socks: one op moved after the rejection"
expect_eq "$(suspensions socks)" 1 "socks: credential sets suspended (dedupd_proxy_auth_suspensions_total)"

# ---- 4. no password anywhere we write
pw=$(cat "$SQUID_PASSWORD_FILE"); spw=$(cat "$SOCKS_AUTH_PASSWORD_FILE")
for f in "$WORK/run.log" "$WORK/submit.log" "$WORK/tail.log" "$WORK/results.all"; do
  for secret in "$wrong" "$pw" "$spw"; do
    if grep -qF -- "$secret" "$f"; then fail "a password appears in $(basename "$f")"; fi
  done
done
ok "no password in logs or results"
