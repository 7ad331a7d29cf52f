#!/usr/bin/env bash
# Workflow jobs ("steps", DESIGN.md section 5), checked on the wire:
#   A. nginx: 3-step workflows over /docs/ pages: in nginx's log each
#      workflow's steps arrive in order, all from one exit (client address)
#   B. cookies (tests/fixtures/wf_origin.c, which logs the Cookie header
#      it receives): a cookie set by step 1 reaches steps 2 and 3, and no
#      request of any of the 8 workflows carries another op's cookie
#   C. a safe workflow whose step 2 keeps answering 503 on its session:
#      one same-session retry (fetch.workflow_step_retries), then a restart
#      from step 1 on the other exit with a fresh cookie jar
#   D. a safe workflow meeting a 429 mid-way restarts at once on the other exit
#   E. an unsafe workflow (POST step, not replayable) meeting a 503 mid-way
#      fails with server_error; its POST is never sent twice
#   F. the same with "replayable": true restarts on the other exit
#   G. an unsafe workflow meeting a 429 (Retry-After: 2) mid-way waits it out
#      on the same exit and goes on; its POST is sent once
# (D and G are timed against fetch.cooldown_default_ms = 1 s: D restarts
# within it, not after its Retry-After of 3 s; G waits 2 s, more than the
# default, so waiting the default instead of Retry-After fails)
# and the results carry one record per step.
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
O="http://127.0.0.1:$PORT"
export DEDUPD_FETCH__MAX_INFLIGHT=64 DEDUPD_FETCH__WORKFLOW_STEP_RETRIES=1
export DEDUPD_FETCH__COOLDOWN_DEFAULT_MS=1000

# ---- jobs, in four batches (one dedupd run each): a 429 cools its exit down
# for every op of a run, so the cases that provoke one run alone.
{
  # A: nginx pages, 4 workflows x 3 steps
  mapfile -t P < <(pages 12)
  for w in 0 1 2 3; do
    jq -nc --arg a "${P[w*3]}&wf=A$w&step=0" --arg b "${P[w*3+1]}&wf=A$w&step=1" \
      --arg c "${P[w*3+2]}&wf=A$w&step=2" --arg k "A$w-$T" \
      '{job_key: $k, steps: [{url: $a}, {url: $b}, {url: $c}]}'
  done
} > "$WORK/jobs.A"
{
  # B: cookies, 3 workflows
  for w in 0 1 2; do
    k="B$w-$T"
    jq -nc --arg o "$O" --arg k "$k" \
      '{job_key: $k, steps: [{url: ($o + "/login?k=" + $k)}, {url: ($o + "/account?k=" + $k)}, {url: ($o + "/orders?k=" + $k)}]}'
  done
  k="C-$T"; jq -nc --arg o "$O" --arg k "$k" \
    '{job_key: $k, steps: [{url: ($o + "/login?k=" + $k)}, {url: ($o + "/flaky?n=2&code=503&k=" + $k)}, {url: ($o + "/account?k=" + $k)}]}'
  k="E-$T"; jq -nc --arg o "$O" --arg k "$k" \
    '{job_key: $k, steps: [{url: ($o + "/login?k=" + $k), method: "POST", body: "user=a"}, {url: ($o + "/flaky?n=1&code=503&k=" + $k)}, {url: ($o + "/account?k=" + $k)}]}'
  k="F-$T"; jq -nc --arg o "$O" --arg k "$k" \
    '{job_key: $k, replayable: true, steps: [{url: ($o + "/login?k=" + $k), method: "POST", body: "user=a"}, {url: ($o + "/flaky?n=1&code=503&k=" + $k)}, {url: ($o + "/account?k=" + $k)}]}'
} > "$WORK/jobs.B"
k="D-$T"; jq -nc --arg o "$O" --arg k "$k" \
  '{job_key: $k, steps: [{url: ($o + "/login?k=" + $k)}, {url: ($o + "/flaky?n=1&code=429&ra=10&k=" + $k)}, {url: ($o + "/account?k=" + $k)}]}' > "$WORK/jobs.D"
k="G-$T"; jq -nc --arg o "$O" --arg k "$k" \
  '{job_key: $k, steps: [{url: ($o + "/login?k=" + $k), method: "POST", body: "user=a"}, {url: ($o + "/flaky?n=1&code=429&ra=2&k=" + $k)}, {url: ($o + "/account?k=" + $k)}]}' > "$WORK/jobs.G"
mark=$(log_mark)
total_invalid=0 total_results=0
for b in A B D G; do
  submit "$WORK/jobs.$b" > /dev/null
  # D: the waits a restart must not take (a 5 s cooldown, a 10 s
  # Retry-After) far above the check's 4 s
  cool=$DEDUPD_FETCH__COOLDOWN_DEFAULT_MS
  [ "$b" != D ] || cool=5000
  stats=$(DEDUPD_FETCH__COOLDOWN_DEFAULT_MS=$cool IDLE_MS=1500 run_until_idle)
  echo "batch $b stats: $stats"
  total_invalid=$((total_invalid + $(jq .invalid <<<"$stats")))
  total_results=$((total_results + $(jq .results <<<"$stats")))
done
expect_eq "$total_invalid" 0 "no workflow job refused (DLQ)"
expect_eq "$total_results" 12 "one result per workflow"
tail_results > "$WORK/results.ndjson"
res() { jq -c --arg k "$1-$T" 'select(.job_key == $k)' "$WORK/results.ndjson"; }
# olog KEY: origin log lines of that key: "ip port METHOD path status cookie"
olog() { grep -F "k=$1-$T" "$ORIGIN_LOG" | awk '{print $2, $3, $4, $5, $6, $7}' | sed 's/?.*k=[^ ]*//'; }
echo "--- origin log"; cat "$ORIGIN_LOG"

# ---- A: nginx saw each workflow's steps in order, from one exit
log_since "$mark" > "$WORK/access.log"
for w in 0 1 2 3; do
  r=$(res "A$w")
  expect_eq "$(jq -r .outcome <<<"$r")" fetched "A$w: outcome"
  expect_eq "$(jq -c '[.steps[].status]' <<<"$r")" "[200,200,200]" "A$w: step statuses"
  # the last run: the final 3 requests of this workflow, all 200, in step order
  grep -F "wf=A$w&" "$WORK/access.log" | awk '{print $1, $3, $(NF-1)}' > "$WORK/a$w"
  tail -n 3 "$WORK/a$w" | sed -E 's/.*step=([0-9]).* ([0-9]+)$/\1 \2/' | tr '\n' ' ' > "$WORK/a$w.seq"
  expect_eq "$(cat "$WORK/a$w.seq")" "0 200 1 200 2 200 " "A$w: nginx saw steps 0,1,2 in order"
  expect_eq "$(tail -n 3 "$WORK/a$w" | awk '{print $1}' | sort -u | wc -l)" 1 "A$w: one exit for every step"
  exit_seen=$(tail -n 3 "$WORK/a$w" | awk '{print $1}' | sort -u)
  expect_eq "$(jq -r '[.steps[].exit] | unique | length' <<<"$r")" 1 "A$w: result names one session"
  jq -r '.steps[0].exit' <<<"$r" | grep -qF "$exit_seen" || fail "A$w: result session $(jq -r '.steps[0].exit' <<<"$r") is not nginx's client $exit_seen"
  [ "$(wc -l < "$WORK/a$w")" = 3 ] || [ "$(jq .restarts <<<"$r")" -gt 0 ] ||
    fail "A$w: nginx saw $(wc -l < "$WORK/a$w") requests but the result shows no restart"
  body_sha=$(jq -r .body_sha256 <<<"$r")
  expect_eq "$(jq -r '.steps[2].body_sha256' <<<"$r")" "$body_sha" "A$w: body is the last step's"
done

# ---- B: cookies go to later steps of the same op only (the last run: a
# restart, which only another op's trouble could cause here, starts a new jar)
for w in 0 1 2; do
  k="B$w"
  olog "$k" > "$WORK/$k"
  r=$(res "$k")
  n=$(wc -l < "$WORK/$k")
  [ "$n" = 3 ] || [ "$(jq .restarts <<<"$r")" -gt 0 ] || fail "$k: origin saw $n requests without a restart"
  logins=$(grep -c '/login' "$WORK/$k")
  tail -n 3 "$WORK/$k" > "$WORK/$k.last"
  expect_eq "$(awk '{print $1}' "$WORK/$k.last" | sort -u | wc -l)" 1 "$k: one exit for every step"
  expect_eq "$(awk '{print $4 ":" $6}' "$WORK/$k.last" | tr '\n' ' ')" \
    "/login:cookie=- /account:cookie=sid=$k-$T-$logins /orders:cookie=sid=$k-$T-$logins " \
    "$k: step 1 sent no cookie, steps 2 and 3 the cookie step 1 got"
  expect_eq "$(jq -r .outcome <<<"$r")" fetched "$k: outcome"
done
# No op ever received another op's cookie: every request of every workflow
# (B0-B2, C, E and F ran together, D and G alone), its whole Cookie header.
# "KEY COOKIE" per request; each workflow's later steps carried its own
# cookie (else its isolation was not tested).
awk '{k = $5; sub(/.*[?&]k=/, "", k); sub(/&.*/, "", k)
      c = $0; sub(/.* cookie=/, "", c); sub(/ t0=[0-9]+$/, "", c); print k "\t" c}' "$ORIGIN_LOG" > "$WORK/cookies"
for k in B0 B1 B2 C D E F G; do
  own=$(awk -F'\t' -v k="$k-$T" '$1 == k && $2 ~ ("^sid=" k "-[0-9]+$")' "$WORK/cookies" | wc -l)
  [ "$own" -ge 1 ] || nothing_tested "$k: no request carried its own cookie"
done
expect_eq "$(awk -F'\t' '$2 != "-" && $2 !~ ("^sid=" $1 "-[0-9]+$")' "$WORK/cookies")" "" \
  "requests of the 8 workflows whose Cookie header is not their own op's cookie"

# ---- C: 503 mid-way: one retry on the same exit, then restart on the other
olog C > "$WORK/C"
awk '{print $1, $4, $5, $6}' "$WORK/C" > "$WORK/C.s"
a=$(head -n1 "$WORK/C.s" | cut -d' ' -f1)
b=$(tail -n1 "$WORK/C.s" | cut -d' ' -f1)
[ "$a" != "$b" ] || fail "C: restarted on the same exit $a"
expect_eq "$(awk '{print $2, $3}' "$WORK/C.s" | tr '\n' ' ')" \
  "/login 200 /flaky 503 /flaky 503 /login 200 /flaky 200 /account 200 " "C: origin saw login, 503, retry 503, restart"
expect_eq "$(sed -n 1,3p "$WORK/C.s" | cut -d' ' -f1 | sort -u)" "$a" "C: first run on one exit ($a)"
expect_eq "$(sed -n 4,6p "$WORK/C.s" | cut -d' ' -f1 | sort -u)" "$b" "C: restart on the other exit ($b)"
expect_eq "$(tail -n1 "$WORK/C.s" | cut -d' ' -f4)" "cookie=sid=C-$T-2" "C: after the restart the new cookie, not the old one"
r=$(res C)
expect_eq "$(jq -c '[.outcome, .restarts, [.steps[].status]]' <<<"$r")" "[\"fetched\",1,[200,200,200]]" "C: result"
echo "C result: $(jq -c "del(.body)" <<<"$r")"

# ---- D: 429 mid-way in a safe workflow: restart at once on the other exit
olog D > "$WORK/D"
expect_eq "$(awk '{print $4, $5}' "$WORK/D" | tr '\n' ' ')" \
  "/login 200 /flaky 429 /login 200 /flaky 200 /account 200 " "D: origin saw login, 429, restart"
[ "$(sed -n 2p "$WORK/D" | cut -d' ' -f1)" != "$(sed -n 3p "$WORK/D" | cut -d' ' -f1)" ] || fail "D: restart on the same exit"
ok "D: restart on the other exit"
# at once: not after the 429's Retry-After (10 s), nor the default cooldown (5 s in this run)
gap=$(( $(grep -F "k=D-$T" "$ORIGIN_LOG" | sed -n 3p | cut -d' ' -f1) - $(grep -F "k=D-$T" "$ORIGIN_LOG" | sed -n 2p | cut -d' ' -f1) ))
[ "$gap" -lt 4000 ] || fail "D: restarted $gap ms after the 429, not at once (Retry-After 10 s, default cooldown 5 s in this run)"
ok "D: restarted ${gap} ms after the 429"
expect_eq "$(jq -c '[.outcome, .restarts]' <<<"$(res D)")" '["fetched",1]' "D: result"

# ---- E: unsafe, not replayable: fails, the POST is never repeated
olog E > "$WORK/E"
expect_eq "$(awk '{print $3, $4, $5}' "$WORK/E" | tr '\n' ' ')" "POST /login 200 GET /flaky 503 " "E: origin saw one POST and one 503, nothing more"
r=$(res E)
expect_eq "$(jq -c '[.outcome, .category, .status, .restarts, [.steps[].status]]' <<<"$r")" \
  '["failed","server_error",503,0,[200,503]]' "E: result"

# ---- F: unsafe but replayable: restarts on the other exit
olog F > "$WORK/F"
expect_eq "$(awk '{print $3, $4, $5}' "$WORK/F" | tr '\n' ' ')" \
  "POST /login 200 GET /flaky 503 POST /login 200 GET /flaky 200 GET /account 200 " "F: origin saw the restart"
[ "$(sed -n 1p "$WORK/F" | cut -d' ' -f1)" != "$(sed -n 3p "$WORK/F" | cut -d' ' -f1)" ] || fail "F: restart on the same exit"
ok "F: restart on the other exit"
expect_eq "$(jq -c '[.outcome, .restarts]' <<<"$(res F)")" '["fetched",1]' "F: result"

# ---- G: unsafe, 429 mid-way: wait out Retry-After on the same exit
grep -F "k=G-$T" "$ORIGIN_LOG" > "$WORK/G.raw"
olog G > "$WORK/G"
expect_eq "$(awk '{print $3, $4, $5}' "$WORK/G" | tr '\n' ' ')" \
  "POST /login 200 GET /flaky 429 GET /flaky 200 GET /account 200 " "G: origin saw one POST, the 429, the same step again"
expect_eq "$(awk '{print $1}' "$WORK/G" | sort -u | wc -l)" 1 "G: every request from one exit"
gap=$(( $(sed -n 3p "$WORK/G.raw" | cut -d' ' -f1) - $(sed -n 2p "$WORK/G.raw" | cut -d' ' -f1) ))
[ "$gap" -ge 1900 ] || fail "G: step retried after $gap ms, before Retry-After (2 s; the default cooldown is 1 s)"
[ "$gap" -lt 5000 ] || fail "G: step retried after $gap ms, long after Retry-After (2 s)"
ok "G: step retried ${gap} ms after the 429 (Retry-After: 2, default cooldown 1 s)"
expect_eq "$(jq -c '[.outcome, .restarts, [.steps[].status]]' <<<"$(res G)")" '["fetched",0,[200,200,200]]' "G: result"
