#!/usr/bin/env bash
# The admin and api listeners of a running dedupd: /healthz, /readyz, /metrics
# (Prometheus text, checked by promtool, which scripts/deps.sh installs, with
# the job counters of this run), GET /v1/ops/{op_id} with the bearer token,
# POST /v1/jobs (its producer starting in a fatal state: recreated, counted by
# dedupd_producer_resets_total), and a clean, quick shutdown on SIGTERM.
source "$(dirname "$0")/lib.sh"
token="tok-$RANDOM-secret"
export DEDUPD_API__TOKEN=$token
pages 5 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
pages 5 | jq -Rc '{url: .}' >> "$WORK/jobs.ndjson"
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
# The job API's producer starts in a fatal state (failpoint): the first POST
# /v1/jobs must recreate it and succeed.
DEDUPD_FAILPOINT_API_PRODUCER_FATAL=1 "$DEDUPD" run -c "$CFG" 2> "$WORK/run.log" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
admin="" api=""
for _ in $(seq 1 100); do
  line=$(grep -m1 'admin listener on port' "$WORK/run.log" || true)
  if [ -n "$line" ]; then
    admin=$(sed -E 's/.*admin listener on port ([0-9]+).*/\1/' <<<"$line")
    api=$(sed -E 's/.*api listener on port ([0-9]+).*/\1/' <<<"$line")
    break
  fi
  sleep 0.1
done
[ -n "$admin" ] || fail "no listener line in the log"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/healthz")" 200 "/healthz"
ready=""
for _ in $(seq 1 150); do
  ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/readyz")
  [ "$ready" = 200 ] && break
  sleep 0.1
done
expect_eq "$ready" 200 "/readyz once partitions are assigned"
# Wait until the 5 logical jobs have results.
for _ in $(seq 1 150); do
  curl -s "http://127.0.0.1:$admin/metrics" > "$WORK/metrics.txt"
  n=$(awk '/^dedupd_results_total\{outcome="fetched"\}/ {print $2}' "$WORK/metrics.txt")
  [ "${n:-0}" = 5 ] && break
  sleep 0.2
done
expect_eq "$(awk '/^dedupd_results_total\{outcome="fetched"\}/ {print $2}' "$WORK/metrics.txt")" 5 "dedupd_results_total{outcome=fetched}"
expect_eq "$(awk '/^dedupd_jobs_total\{outcome="new"\}/ {print $2}' "$WORK/metrics.txt")" 5 "dedupd_jobs_total{outcome=new}"
dups=$(awk '/^dedupd_jobs_total\{outcome="duplicate(_inflight)?"\}/ {s += $2} END {print s}' "$WORK/metrics.txt")
expect_eq "$dups" 5 "dedupd_jobs_total{outcome=duplicate*}"
grep -q '^dedupd_fetch_attempts_total{category="ok"} [1-9]' "$WORK/metrics.txt" || fail "no ok fetch attempts in /metrics"
ok "fetch attempts by category"
command -v promtool >/dev/null || fail "promtool not found (scripts/deps.sh installs it)"
out=$(promtool check metrics < "$WORK/metrics.txt" 2>&1) || fail "promtool: $out"
[ -z "$out" ] || fail "promtool: $out"
ok "promtool check metrics"
expect_eq "$(metric dedupd_producer_resets_total "$WORK/metrics.txt")" 0 "dedupd_producer_resets_total before the first POST /v1/jobs"
grep -q -- "$token" "$WORK/metrics.txt" && fail "the api token appears in /metrics"
op=$(jq -r 'select(.line == 1) | .op_id' "$WORK/receipts.ndjson")
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$api/v1/ops/$op")" 401 "GET /v1/ops without the token"
body=$(curl -s -H "Authorization: Bearer $token" "http://127.0.0.1:$api/v1/ops/$op")
expect_eq "$(jq -r .state <<<"$body")" complete "GET /v1/ops/{op_id} state"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$api/v1/ops/nope")" 404 "unknown op"
# POST /v1/jobs with Idempotency-Key (IETF httpapi draft semantics).
u=$(pages 6 | tail -n 1)
post() { # post KEY BODY -> "status body" (headers in $WORK/h)
  local args=(-s -D "$WORK/h" -o "$WORK/b" -w '%{http_code}' -H "Authorization: Bearer $token"
              -H 'Content-Type: application/json' --data-binary "$2")
  [ -n "$1" ] && args+=(-H "Idempotency-Key: $1")
  curl "${args[@]}" "http://127.0.0.1:$api/v1/jobs"
}
expect_eq "$(post "k-$T" "{\"url\":\"$u\"}")" 202 "POST /v1/jobs"
expect_eq "$(jq -r .op_id "$WORK/b")" "api:k-$T" "receipt op_id is scope:key"
# the producer started in a fatal state was replaced, once (the metric, not a
# log line: a reset that did not happen cannot count)
expect_eq "$(scrape "$admin" | metric dedupd_producer_resets_total)" 1 \
  "dedupd_producer_resets_total after the first POST (the job API's producer recreated)"
first=$(cat "$WORK/b")
expect_eq "$(post "k-$T" "{\"url\":\"$u\"}")" 202 "same key, same payload: replay"
expect_eq "$(cat "$WORK/b")" "$first" "the replay is the stored receipt"
grep -qi '^Idempotent-Replayed: true' "$WORK/h" || fail "no Idempotent-Replayed header on the replay"
ok "Idempotent-Replayed header"
expect_eq "$(post "k-$T" "{\"url\":\"$u&other=1\"}")" 422 "same key, other payload"
expect_eq "$(post 'bad"key' "{\"url\":\"$u\"}")" 400 "malformed key"
expect_eq "$(post "k2-$T" "{\"url\":\"$u\",\"job_key\":\"other\"}")" 400 "body job_key differs from the key"
expect_eq "$(post "k3-$T" 'not json')" 400 "malformed job"
# The submitted job is processed once: its result appears.
ek=$(jq -r .event_key <<<"$first")
for _ in $(seq 1 100); do
  code=$(curl -s -o "$WORK/op" -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$api/v1/ops/api:k-$T")
  [ "$code" = 200 ] && [ "$(jq -r .state "$WORK/op")" = complete ] && break
  sleep 0.2
done
expect_eq "$(jq -r .state "$WORK/op")" complete "the API's job was fetched"
expect_eq "$(jq -r .event_key "$WORK/op")" "$ek" "its event_key is the receipt's"
expect_eq "$(scrape "$admin" | metric dedupd_producer_resets_total)" 1 "dedupd_producer_resets_total after every POST"

# SIGTERM: leaves within the grace period, cleanly.
start=$(date +%s%N)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_eq "$rc" 0 "exit status after SIGTERM"
[ "$ms" -lt 15000 ] || fail "shutdown took $ms ms"
ok "shutdown in $ms ms"
grep -q -- "$token" "$WORK/run.log" && fail "the api token appears in the log"
ok "token absent from the log"
