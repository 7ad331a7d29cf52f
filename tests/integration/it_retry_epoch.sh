#!/usr/bin/env bash
# A failed op retried after store.failed_ttl_ms reaches downstream under a new
# event_key (DESIGN.md section 2, retry_epoch; issue 15).
#
# One job to a port where nothing listens yet, one attempt: the op fails
# (connection refused) and its result is published under the epoch-0
# event_key.  Then an origin starts on that port, store.failed_ttl_ms (1000,
# its minimum) passes and the same job is submitted again: the failed op is
# claimed again at retry_epoch 1 (generation 2), fetched, and its result is
# published under the epoch-1 event_key, SHA-256 of
# "result:v1:" + op_id + "\n" + request_hash + "\n1".  `dedupd tail` (its own
# group, dropping event_keys it has seen) prints both results: the failure
# and the recovery.  Before retry epochs the recovery carried the failure's
# event_key and the tail printed only the failure.
source "$(dirname "$0")/lib.sh"
pin_dedupd

direct_origin_setup
export DEDUPD_FETCH__MAX_ATTEMPTS=1
export DEDUPD_STORE__FAILED_TTL_MS=1000
IDLE_MS=1500

P=$(free_port 127.0.0.1)
jq -cn --arg u "http://127.0.0.1:$P/ok?t=$T" '{url: $u}' >"$WORK/job.ndjson"
submit "$WORK/job.ndjson" >"$WORK/receipt1.json"
opid=$(jq -r .op_id "$WORK/receipt1.json")
ek0=$(jq -r .event_key "$WORK/receipt1.json")
[ -n "$opid" ] && [ "$opid" != null ] || fail "submit printed no op_id"

stats=$(run_until_idle)
expect_eq "$(jq .new <<<"$stats")" 1 "new ops, first run"
"$DEDUPD" inspect -c "$CFG" "$opid" --json >"$WORK/inspect1.json" || fail "inspect after the failure"
expect_eq "$(jq -r '"\(.state)/\(.generation)/\(.retry_epoch)/\(.event_key)"' "$WORK/inspect1.json")" \
  "failed/1/0/$ek0" "op after the failure"
rh=$(jq -r .request_hash "$WORK/inspect1.json")

# the target works now; the failure is older than store.failed_ttl_ms
hostile_start fixed 127.0.0.1:$P
sleep 1.2
submit "$WORK/job.ndjson" >"$WORK/receipt2.json"
expect_eq "$(jq -r .event_key "$WORK/receipt2.json")" "$ek0" "submit's event_key (epoch 0)"
stats=$(run_until_idle)
expect_eq "$(jq '"\(.new)/\(.reclaimed)"' -r <<<"$stats")" 0/1 "new/reclaimed ops, second run"
expect_eq "$(grep -c "t=$T" "$WORK/fixed.log" || true)" 1 "requests to the working origin"
ek1=$(printf 'result:v1:%s\n%s\n1' "$opid" "$rh" | sha256sum | cut -d' ' -f1)
"$DEDUPD" inspect -c "$CFG" "$opid" --json >"$WORK/inspect2.json" || fail "inspect after the retry"
expect_eq "$(jq -r '"\(.state)/\(.generation)/\(.retry_epoch)/\(.event_key)"' "$WORK/inspect2.json")" \
  "complete/2/1/$ek1" "op after the retry"

# downstream: a consumer that drops replays keeps both (keyed by event_key,
# the two may sit in different partitions: sorted by epoch)
tail_results >"$WORK/results.ndjson"
expect_eq "$(jq -r '"\(.retry_epoch) \(.outcome) \(.event_key) \(.op_id)"' "$WORK/results.ndjson" | sort)" \
  "0 failed $ek0 $opid
1 fetched $ek1 $opid" "results printed by dedupd tail"
# on the topic: keyed by each epoch's event_key, idempotency-key header the same
topic_dump "$T.results" >"$WORK/raw.json"
expect_eq "$(jq -r '(.headers // []) as $h
  | [range(0; $h | length; 2) | select($h[.] == "idempotency-key") | $h[. + 1]] as $ik
  | "\(.payload | fromjson | .retry_epoch) \(.key) \($ik | join(","))"' "$WORK/raw.json" | sort)" \
  "0 $ek0 $ek0
1 $ek1 $ek1" "results topic: retry_epoch, key, idempotency-key"
ok "a failed op retried after its TTL reaches dedupd tail under its epoch-1 event_key"
