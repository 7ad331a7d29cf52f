#!/usr/bin/env bash
# POST /v1/jobs answers 409 only while a submit with the same Idempotency-Key
# can still be in flight, and 422 for another payload as long as the key's
# receipt lives (README "api.listen", include/api.h, issue 15).  The API's
# HTTP server handles one request at a time, so a second submit cannot
# arrive while the first waits in the same process; the pending receipt
# outlives a crash between accepting and acknowledging instead:
#   run 1: the job API produces to a topic that does not exist (the failpoint
#          DEDUPD_FAILPOINT_API_TOPIC; the broker does not create topics; run
#          itself needs its jobs topic), so the first POST's produce is never
#          acknowledged and the handler waits (up to 15 s) with its receipt
#          pending; kill -9 during that wait;
#   run 2: same store, producing to the jobs topic: inside the pending
#          receipt's in-flight window the same key and payload is 409 at
#          once and another payload 422, nothing produced; past the window
#          another payload is still 422 (the first submit may have been
#          produced: its op may live), the same payload is a new submit (202,
#          produced once, op_id api:<key>), then replayed (202,
#          Idempotent-Replayed), never 409; another payload 422.
# The window is the handler's 15 s wait + 5 s; DEDUPD_FAILPOINT_RECEIPT_PENDING_MS
# shortens it to $WINDOW_MS here so the test stays short.
source "$(dirname "$0")/lib.sh"
pid="" cpid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; [ -n "$cpid" ] && kill "$cpid" 2>/dev/null; rm -rf "$WORK"' EXIT
export DEDUPD_FAILPOINT_API_TOPIC=$T.absent   # never created (run 1)
WINDOW_MS=15000
export DEDUPD_FAILPOINT_RECEIPT_PENDING_MS=$WINDOW_MS
now_ms() { date +%s%3N; }
api_port() { # api_port LOG: the api listener's port, once run logged it
  local p=""
  for _ in $(seq 1 100); do
    p=$(sed -nE 's/.*api listener on port ([0-9]+).*/\1/p' "$1" | head -n 1)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  fail "no api listener line in $1"
}
key="k-$T"
body=$(jq -nc --arg u "$(pages 1)" '{url: $u}')
other=$(jq -nc --arg u "$(pages 2 | tail -n 1)" '{url: $u}')
post() { # post PORT OUTFILE [BODY]: status code on stdout, headers in OUTFILE.h
  curl -s -o "$2" -D "$2.h" -w '%{http_code}' -m 30 -H 'Content-Type: application/json' \
    -H "Idempotency-Key: $key" --data-binary "${3:-$body}" "http://127.0.0.1:$1/v1/jobs"
}
replayed() { grep -ci '^Idempotent-Replayed: true' "$1.h" || true; }

# ---- run 1: the first POST waits for an acknowledgement that never comes ----
"$DEDUPD" run -c "$CFG" 2>"$WORK/run1.log" &
pid=$!
api=$(api_port "$WORK/run1.log")
t0=$(now_ms)
post "$api" "$WORK/b1" > "$WORK/code1" &
cpid=$!
sleep 1.5
# premise: the first POST is in the handler, waiting: unanswered, the api
# listener busy with it (another request gets no answer), no produce error
# logged yet (the handler logs one when its 15 s wait ends)
kill -0 "$cpid" 2>/dev/null || fail "nothing was tested: the first POST was answered before the kill ($(cat "$WORK/code1"): $(cat "$WORK/b1"))"
probe=$(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$api/v1/ops/probe" || true)
[ "$probe" = 000 ] || fail "nothing was tested: the api listener answered another request ($probe) while the first POST should be waiting"
grep -q 'POST /v1/jobs' "$WORK/run1.log" && fail "nothing was tested: the first POST already ended: $(grep 'POST /v1/jobs' "$WORK/run1.log")"
kill -9 "$pid"
killed_at=$(now_ms)
rc=0; wait "$pid" || rc=$?
pid=""
expect_eq "$rc" 137 "run 1 killed (SIGKILL) while the first POST waited"
[ $((killed_at - t0)) -lt 15000 ] || fail "nothing was tested: the kill came $((killed_at - t0)) ms after the POST, past the handler's 15 s wait"
crc=0; wait "$cpid" || crc=$?
cpid=""
expect_eq "$(cat "$WORK/code1") $crc" "000 52" "the first POST got no answer (curl: empty reply)"
ok "premise: the first POST was in progress when run 1 was killed ($((killed_at - t0)) ms after it was sent)"

# ---- run 2: same store; inside the window 409 and 422 -----------------------
unset DEDUPD_FAILPOINT_API_TOPIC
"$DEDUPD" run -c "$CFG" 2>"$WORK/run2.log" &
pid=$!
api=$(api_port "$WORK/run2.log")
t1=$(now_ms)
code=$(post "$api" "$WORK/b2")
code_other=$(post "$api" "$WORK/b3" "$other")
t2=$(now_ms)
# the receipt was written after t0: its window ends after t0 + WINDOW_MS
[ "$t2" -lt $((t0 + WINDOW_MS)) ] || nothing_tested "run 2 answered $((t2 - t0)) ms after the first POST, past the $WINDOW_MS ms window"
expect_eq "$code" 409 "POST with the key of the unacknowledged submit, inside its window ($((t1 - t0)) ms after it)"
expect_eq "$(jq -c . "$WORK/b2")" '{"error":"a request with this Idempotency-Key is in progress"}' "409 body"
[ $((t2 - t1)) -lt 5000 ] || fail "the 409 and 422 took $((t2 - t1)) ms: they waited for a produce"
ok "409 at once"
expect_eq "$code_other" 422 "POST with the key and another payload, inside the window"
expect_eq "$(grep -c 'POST /v1/jobs' "$WORK/run2.log" || true)" 0 "run 2 produced nothing inside the window (no produce logged)"

# ---- run 2, past the window: 422, then a new submit, never 409 ---------------
now=$(now_ms)
wait_ms=$((killed_at + WINDOW_MS + 300 - now))
[ "$wait_ms" -le 0 ] || sleep "$(awk -v m="$wait_ms" 'BEGIN{printf "%.3f", m/1000}')"
expect_eq "$(post "$api" "$WORK/b4" "$other")" 422 "POST with another payload past the window (the first may have been produced)"
expect_eq "$(jq -c . "$WORK/b4")" '{"error":"Idempotency-Key reused with a different payload"}' "422 body"
expect_eq "$(post "$api" "$WORK/b5")" 202 "POST with the same payload past the window: a new submit"
expect_eq "$(replayed "$WORK/b5")" 0 "the new submit is not a replay"
expect_eq "$(jq -r .op_id "$WORK/b5")" "api:$key" "its receipt's op_id"
expect_eq "$(post "$api" "$WORK/b6")" 202 "the same payload again"
expect_eq "$(replayed "$WORK/b6")" 1 "replayed (Idempotent-Replayed: true)"
expect_eq "$(jq -c . "$WORK/b6")" "$(jq -c . "$WORK/b5")" "the replay is the stored receipt"
expect_eq "$(post "$api" "$WORK/b7" "$other")" 422 "another payload once the receipt is done"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
expect_eq "$rc" 0 "run 2 exit status after SIGTERM"
expect_eq "$(topic_dump "$T.jobs" | jq -r .key | sort | uniq -c | awk '{print $1, $2}')" "1 api:$key" "the jobs topic holds the key's job once"
