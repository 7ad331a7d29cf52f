#!/usr/bin/env bash
# Single-flight (DESIGN.md section 5): concurrent ops (other job_keys, so other
# op_ids) for the same canonical request share one transfer; each gets its own
# result under its own event_key.  Unsafe requests never share; a transient
# failure is never shared (each waiter then fetches for itself).
source "$(dirname "$0")/lib.sh"

page=$(pages 1 | sed 's/?.*//')
slow=${page/\/docs\//\/slow\/}   # the same page at 16 KiB/s: transfers overlap
c_url="http://127.0.0.1:$(free_port 127.0.0.1)/c?t=$T"   # nothing listens
N=12
{
  # A: N ops (N job_keys) of one resource
  for i in $(seq 1 $N); do
    jq -nc --arg u "$slow?t=$T&g=a" --arg k "a-$i" '{url: $u, job_key: $k}'
  done
  # B: N ops of one unsafe request: one POST each
  for i in $(seq 1 $N); do
    jq -nc --arg u "$page?t=$T&g=b" --arg k "b-$i" \
      '{url: $u, job_key: $k, method: "POST", body: "x=1"}'
  done
  # C: 4 ops of one resource whose fetch fails transiently (connection
  # refused): not shared, each fetches for itself
  for i in 1 2 3 4; do
    jq -nc --arg u "$c_url" --arg k "c-$i" '{url: $u, job_key: $k}'
  done
} > "$WORK/jobs.ndjson"

mark=$(log_mark)
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
expect_eq "$(wc -l < "$WORK/receipts.ndjson")" $((2 * N + 4)) "receipts"
export DEDUPD_FETCH__MAX_ATTEMPTS=2 DEDUPD_FETCH__BACKOFF_BASE_MS=50
stats=$(run_until_idle)
echo "stats: $stats"
expect_eq "$(jq .new <<<"$stats")" $((2 * N + 4)) "new ops (one per job_key)"

log_since "$mark" > "$WORK/origin.log"
expect_eq "$(grep -c 'g=a' "$WORK/origin.log" || true)" 1 "A: origin requests for $N ops of one resource (nginx log)"
expect_eq "$(grep -c 'g=b' "$WORK/origin.log" || true)" "$N" "B: origin requests for $N unsafe ops (nginx log)"
# C: every op made its own 2 attempts after the leader's transient failure
expect_eq "$(jq .fetch_attempts <<<"$stats")" $((1 + N + 4 * 2)) "fetch attempts (A 1, B $N, C 4 x 2)"
# waiters: A's N - 1 always (its leader's transfer is slow); C's up to 3, as
# many as were claimed before their leader's connection was refused (the 4
# ops sit on different partitions: under load one may come after; the
# attempts above prove that none shared the failure)
sf=$(jq .single_flight <<<"$stats")
(( sf >= N - 1 && sf <= N - 1 + 3 )) || fail "waiters: got $sf, expected A $((N - 1)) + C 0..3"
ok "waiters $sf (A $((N - 1)), C $((sf - N + 1)))"

tail_results > "$WORK/results.ndjson"
expect_eq "$(wc -l < "$WORK/results.ndjson")" $((2 * N + 4)) "results (one per op)"
expect_eq "$(jq -r 'select(.job_key | startswith("a-")) | select(.outcome == "fetched" and .status == 200) | .op_id' "$WORK/results.ndjson" | sort -u | wc -l)" "$N" "A: a fetched result per op"
expect_eq "$(jq -r 'select(.job_key | startswith("a-")) | .body_sha256' "$WORK/results.ndjson" | sort -u | wc -l)" 1 "A: one body shared"
expect_eq "$(jq -r 'select(.job_key | startswith("a-")) | .event_key' "$WORK/results.ndjson" | sort -u | wc -l)" "$N" "A: own event_key each"
# (through the proxy exits of the local config the refused connection comes
# back as the proxy's 500: server_error, transient like connect)
expect_eq "$(jq -r 'select(.job_key | startswith("c-")) | select(.outcome == "failed" and (.category == "server_error" or .category == "connect")) | .op_id' "$WORK/results.ndjson" | wc -l)" 4 "C: failed results, transient category"
