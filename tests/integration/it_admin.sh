#!/usr/bin/env bash
# The admin and api listeners of a running dedupd: /healthz, /readyz, /metrics
# (Prometheus text, checked by promtool when present, with the job counters of
# this run), GET /v1/ops/{op_id} with the bearer token, and a clean, quick
# shutdown on SIGTERM.
source "$(dirname "$0")/lib.sh"
token="tok-$RANDOM-secret"
export DEDUPD_API__TOKEN=$token
pages 5 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
pages 5 | jq -Rc '{url: .}' >> "$WORK/jobs.ndjson"
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
"$DEDUPD" run -c "$CFG" 2> "$WORK/run.log" &
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
if command -v promtool >/dev/null; then
  out=$(promtool check metrics < "$WORK/metrics.txt" 2>&1) || fail "promtool: $out"
  [ -z "$out" ] || fail "promtool: $out"
  ok "promtool check metrics"
fi
grep -q -- "$token" "$WORK/metrics.txt" && fail "the api token appears in /metrics"
op=$(jq -r 'select(.line == 1) | .op_id' "$WORK/receipts.ndjson")
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$api/v1/ops/$op")" 401 "GET /v1/ops without the token"
body=$(curl -s -H "Authorization: Bearer $token" "http://127.0.0.1:$api/v1/ops/$op")
expect_eq "$(jq -r .state <<<"$body")" complete "GET /v1/ops/{op_id} state"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$api/v1/ops/nope")" 404 "unknown op"
# SIGTERM: leaves within the grace period, cleanly.
start=$(date +%s%N)
kill -TERM "$pid"
wait "$pid"; rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_eq "$rc" 0 "exit status after SIGTERM"
[ "$ms" -lt 15000 ] || fail "shutdown took $ms ms"
ok "shutdown in $ms ms"
grep -q -- "$token" "$WORK/run.log" && fail "the api token appears in the log"
ok "token absent from the log"
