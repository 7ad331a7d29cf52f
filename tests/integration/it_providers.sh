#!/usr/bin/env bash
# Proxy providers (DESIGN.md section 5), checked on the wire:
#   - credentials reach the proxy byte for byte whatever they hold (@ : % /
#     space, non-ASCII, "%41" that libcurl < 8.8 would decode to "A"): squid with
#     basic auth (its access log names the user) and dante with a system user
#   - a provider with an API: a 429 rotates the session through the API
#     (POST /session/{id}/rotate, in the stand-in's log) and the job completes
#   - the job's country and rotation select the provider sessions that serve it;
#     a job no session can serve fails at once (proxy_connect) and says why
#   - no credential byte string appears in logs, results or metrics
source "$(dirname "$0")/lib.sh"
export DEDUPD_PROXY__EXITS=
pw1=$(cat "$SQUID_PASSWORD_FILE"); pw2=$(cat "$SQUID_PASSWORD2_FILE")
spw1=$(cat "$SOCKS_AUTH_PASSWORD_FILE"); spw2=$(cat "$SOCKS_AUTH_PASSWORD2_FILE")
apikey=$(cat "$PROVIDER_API_KEY_FILE")
# Gateways from the stack's addresses (scheme://host:port).
hostport() { local x=${1#*://}; echo "${x%%/*}"; }
sq=$(hostport "$SQUID_EXIT"); sq_host=${sq%:*}; sq_port=${sq##*:}
sx=$(hostport "$SOCKS_AUTH_EXIT"); sx_host=${sx%:*}; sx_port=${sx##*:}

# run_with PROVIDERS_JSON N TAG: a config with these providers, N jobs.
run_with() {
  jq --argjson p "$1" '.proxy = {providers: $p} | .fetch.allow_targets = ["127.0.0.1/32"]' "$CFG" > "$WORK/cfg.json"
  awk -v n="$2" -v t="$T-$3" '/\.html$/ && k++ < n {print $0 "?t=" t}' "$ORIGIN_PAGES" | jq -Rc '{url: .}' > "$WORK/jobs.$3"
  "$DEDUPD" submit -c "$WORK/cfg.json" "$WORK/jobs.$3" > /dev/null 2>>"$WORK/submit.log"
  "$DEDUPD" run -c "$WORK/cfg.json" --exit-when-idle 2500 --stats-json 2>>"$WORK/run.log"
}
origin_count() { # origin_count TAG CLIENT_ADDR: 200s for this tag from that address
  grep -F "t=$T-$1" "$ORIGIN_ACCESS_LOG" | awk -v a="$2" '$1 == a && $(NF-1) == 200' | wc -l
}

# 1. squid, user 1 and user 2 (the one with "%41" in its name).
for u in 1 2; do
  if [ $u = 1 ]; then user=$SQUID_USER; pf=$SQUID_PASSWORD_FILE; else user=$SQUID_USER2; pf=$SQUID_PASSWORD2_FILE; fi
  prov=$(jq -nc --arg u "$user" --arg pf "$pf" --arg h "$sq_host" --argjson p "$sq_port" '[{name: "squid", gateway: $h, http_port: $p, username: "{user}", user: $u, password_file: $pf, sessions: 2}]')
  stats=$(run_with "$prov" 5 "squid$u")
  expect_eq "$(jq .results <<<"$stats")" 5 "squid user $u: results"
  expect_eq "$(jq .failed <<<"$stats")" 0 "squid user $u: failed"
  expect_eq "$(origin_count "squid$u" "$sq_host")" 5 "squid user $u: origin 200s from the squid exit"
  # squid's log: "time client user status ...": the user field exactly, answered 200
  n=$(grep -F "t=$T-squid$u" "$SQUID_ACCESS_LOG" | awk -v u="$user" '$3 == u && $4 == 200' | wc -l)
  expect_eq "$n" 5 "squid log names user '$user' exactly, 200s"
done

# 2. dante with a system user (RFC 1929), both users.
for u in 1 2; do
  if [ $u = 1 ]; then user=$SOCKS_AUTH_USER; pf=$SOCKS_AUTH_PASSWORD_FILE; else user=$SOCKS_AUTH_USER2; pf=$SOCKS_AUTH_PASSWORD2_FILE; fi
  prov=$(jq -nc --arg u "$user" --arg pf "$pf" --arg h "$sx_host" --argjson p "$sx_port" '[{name: "dante", gateway: $h, socks_port: $p, username: "{user}", user: $u, password_file: $pf}]')
  stats=$(run_with "$prov" 3 "socks$u")
  expect_eq "$(jq .results <<<"$stats")" 3 "dante user $u: results"
  expect_eq "$(origin_count "socks$u" "$sx_host")" 3 "dante user $u: origin 200s from the SOCKS exit"
done

# 3. A provider with a session API: sessions on the tinyproxy exits, one of them
# throttled by the origin; 429s rotate sessions through the API.
api_mark=$(wc -l < "$PROVIDER_API_LOG")
prov=$(jq -nc --arg url "$PROVIDER_API_URL" --arg kf "$PROVIDER_API_KEY_FILE" '[{name: "api", gateway: "127.0.0.1", http_port: 1, api_url: $url, api_key_file: $kf}]')
stats=$(run_with "$prov" 120 "api")
echo "provider API run: $stats"
expect_eq "$(jq .results <<<"$stats")" 120 "provider API: results"
expect_eq "$(jq .failed <<<"$stats")" 0 "provider API: failed"
n429=$(grep -F "t=$T-api" "$ORIGIN_ACCESS_LOG" | awk '$(NF-1) == 429' | wc -l)
# the stand-in's log since this run began: "POST /session/ID/rotate STATUS"
rot=$(tail -n +"$((api_mark + 1))" "$PROVIDER_API_LOG" | awk '$1 == "POST" && $2 ~ "^/session/[^/]+/rotate$" && $3 == 200' | wc -l)
echo "429 answers: $n429, rotations through the API: $rot"
[ "$n429" -gt 0 ] || nothing_tested "provider API: no 429 from the origin"
[ "$rot" -gt 0 ] || fail "$n429 answers 429 but no rotation through the provider API"
ok "$n429 answers 429 led to $rot rotations through the provider API"
expect_eq "$(grep -c 'rotate .* failed' "$WORK/run.log")" 0 "provider API: failed rotations"
expect_eq "$(grep -F "t=$T-api" "$ORIGIN_ACCESS_LOG" | awk '$(NF-1) == 200' | wc -l)" 120 "provider API: origin 200s, one per job"

# 5. The job's country and rotation select sessions (DESIGN.md section 3):
# squid is a sticky provider for DE, dante a per_request one for DE and US.
prov=$(jq -nc --arg u "$SQUID_USER" --arg pf "$SQUID_PASSWORD_FILE" --arg h "$sq_host" --argjson p "$sq_port" \
  --arg du "$SOCKS_AUTH_USER" --arg dpf "$SOCKS_AUTH_PASSWORD_FILE" --arg dh "$sx_host" --argjson dp "$sx_port" \
  '[{name: "squid", gateway: $h, http_port: $p, username: "{user}", user: $u, password_file: $pf,
     rotation: "sticky", countries: ["DE"]},
    {name: "dante", gateway: $dh, socks_port: $dp, username: "{user}", user: $du, password_file: $dpf,
     rotation: "per_request", countries: ["DE", "US"]}]')
jq --argjson p "$prov" '.proxy = {providers: $p} | .fetch.allow_targets = ["127.0.0.1/32"]' "$CFG" > "$WORK/cfg.json"
sel_jobs() { # sel_jobs CASE N JOB_FIELDS_JSON
  awk -v n="$2" -v t="$T-sel-$1" '/\.html$/ && k++ < n {print $0 "?t=" t}' "$ORIGIN_PAGES" |
    jq -Rc --arg c "$1" --argjson f "$3" '{url: .} + $f + {meta: {case: $c}}'
}
{ sel_jobs per 4 '{"rotation": "per_request"}'; sel_jobs sticky 4 '{"rotation": "sticky"}'
  sel_jobs us 4 '{"country": "US"}'; sel_jobs timed 2 '{"rotation": "timed"}'
  sel_jobs fr 2 '{"country": "FR"}'; } > "$WORK/jobs.sel"
"$DEDUPD" submit -c "$WORK/cfg.json" "$WORK/jobs.sel" > /dev/null 2>>"$WORK/submit.log"
t0=$(date +%s)
stats=$(DEDUPD_FETCH__DEADLINE_MS=60000 "$DEDUPD" run -c "$WORK/cfg.json" --exit-when-idle 2500 --stats-json 2>>"$WORK/run.log")
secs=$(( $(date +%s) - t0 ))
echo "selection run ($secs s): $stats"
expect_eq "$(jq .results <<<"$stats")" 16 "selection: results"
[ "$secs" -lt 30 ] || fail "selection run took $secs s: unservable jobs waited for their deadline"
sel_count() { grep -F "t=$T-sel-$1" "$ORIGIN_ACCESS_LOG" | awk -v a="$2" '$1 == a' | wc -l; }
expect_eq "$(sel_count per "$sx_host")/$(sel_count per "$sq_host")" 4/0 "rotation per_request: requests via dante/squid"
expect_eq "$(sel_count sticky "$sq_host")/$(sel_count sticky "$sx_host")" 4/0 "rotation sticky: requests via squid/dante"
expect_eq "$(sel_count us "$sx_host")/$(sel_count us "$sq_host")" 4/0 "country US: requests via dante/squid"
expect_eq "$(grep -cE "t=$T-sel-(timed|fr)" "$ORIGIN_ACCESS_LOG" || true)" 0 "unservable jobs: requests sent"
"$DEDUPD" tail -c "$WORK/cfg.json" --exit-when-idle 1500 > "$WORK/sel.ndjson" 2>>"$WORK/tail.log"
for c in timed fr; do
  expect_eq "$(jq -r --arg c "$c" 'select(.meta.case == $c) | "\(.outcome)/\(.category)"' "$WORK/sel.ndjson" | sort -u)" \
    failed/proxy_connect "$c: result"
done
jq -r 'select(.meta.case == "timed") | .error' "$WORK/sel.ndjson" | head -1 | grep -q "rotation timed" ||
  fail "timed: the error does not name the rotation: $(jq -r 'select(.meta.case == "timed") | .error' "$WORK/sel.ndjson" | head -1)"
jq -r 'select(.meta.case == "fr") | .error' "$WORK/sel.ndjson" | head -1 | grep -q "country FR" ||
  fail "fr: the error does not name the country"
ok "unservable jobs fail at once with proxy_connect and say why"

# 4. No credential byte string anywhere we write.
"$DEDUPD" tail -c "$WORK/cfg.json" --exit-when-idle 1500 > "$WORK/results.ndjson" 2>>"$WORK/tail.log"
"$DEDUPD" config -c "$WORK/cfg.json" --dump > "$WORK/dump.json"
for f in "$WORK/run.log" "$WORK/submit.log" "$WORK/tail.log" "$WORK/results.ndjson" "$WORK/dump.json"; do
  for secret in "$pw1" "$pw2" "$spw1" "$spw2" "$apikey"; do
    if grep -qF -- "$secret" "$f"; then fail "a credential appears in $(basename "$f")"; fi
  done
done
ok "no credential in logs, results or config --dump"
