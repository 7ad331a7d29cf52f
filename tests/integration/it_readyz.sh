#!/usr/bin/env bash
# /readyz (the Kubernetes readiness probe, README "Watching it") is 503 with its
# reason while dedupd has no partitions to consume and again once it is
# stopping, and 200 only in between; /healthz stays 200 throughout.
#   1. a jobs topic that does not exist (the broker does not create topics):
#      no assignment can come, so /readyz must stay 503 for the whole wait
#   2. a job whose fetch takes 4 s (hostile origin /slow-headers): /readyz 200
#      once assigned, then SIGTERM while the fetch is in flight: 503 while the
#      process finishes that op, exit 0, and the op's result is published
source "$(dirname "$0")/lib.sh"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; stop_fixtures; rm -rf "$WORK"' EXIT

code() { curl -s -o "$WORK/body" -w '%{http_code}' "http://127.0.0.1:$1$2"; }
# ---- 1. before any assignment -----------------------------------------------
DEDUPD_TOPICS__JOBS=$T.absent "$DEDUPD" run -c "$CFG" 2>"$WORK/absent.log" &
pids+=($!)
port=$(admin_port "$WORK/absent.log")
expect_eq "$(code "$port" /healthz)" 200 "/healthz with no assignment"
n503=0
for _ in $(seq 1 20); do # 2 s: several rebalance attempts' worth
  c=$(code "$port" /readyz)
  [ "$c" = 503 ] || fail "/readyz answered $c with no partitions assigned"
  n503=$((n503 + 1))
  sleep 0.1
done
expect_eq "$n503" 20 "/readyz answers 503 before any assignment"
expect_eq "$(cat "$WORK/body")" "not consuming: waiting for partitions of $T.absent" "/readyz's reason"
kill -TERM "${pids[0]}"
wait "${pids[0]}" || fail "run without partitions exit $? on SIGTERM"
ok "run without partitions stops on SIGTERM"

# ---- 2. while stopping ------------------------------------------------------
hostile_start slow 127.0.0.1:0
hport=$(head -n 1 "$WORK/slow.port")
url="http://127.0.0.1:$hport/slow-headers?s=4&t=$T"
printf '{"url":"%s"}\n' "$url" > "$WORK/job.json"
export DEDUPD_FETCH__TIMEOUT_MS=20000 DEDUPD_SHUTDOWN__GRACE_MS=15000
submit "$WORK/job.json" > "$WORK/receipt.json"
"$DEDUPD" run -c "$CFG" 2>"$WORK/run.log" &
pid=$!
pids+=($pid)
port=$(admin_port "$WORK/run.log")
for _ in $(seq 1 150); do [ "$(code "$port" /readyz)" = 200 ] && break; sleep 0.1; done
expect_eq "$(code "$port" /readyz)" 200 "/readyz once partitions are assigned"
# The premise: the fetch is in flight (the origin got the request) when the
# signal arrives.
for _ in $(seq 1 100); do grep -q "/slow-headers" "$WORK/slow.log" && break; sleep 0.1; done
grep -q "/slow-headers" "$WORK/slow.log" || fail "nothing was tested: the fetch never reached the origin"
kill -TERM "$pid"
seen=""
for _ in $(seq 1 20); do
  kill -0 "$pid" 2>/dev/null || break
  c=$(code "$port" /readyz)
  [ "$c" = 000 ] && break # listener closed: the process is leaving
  seen="$seen $c"
  [ "$c" = 503 ] && break
  sleep 0.05
done
kill -0 "$pid" 2>/dev/null || fail "nothing was tested: run left before /readyz could be read while stopping"
expect_eq "${seen##* }" 503 "/readyz while stopping with an op in flight (answers:$seen)"
expect_eq "$(code "$port" /healthz)" 200 "/healthz while stopping"
wait "$pid" || fail "run exit $? after SIGTERM"
ok "run finished the op in flight and exited 0"
op=$(jq -r .op_id "$WORK/receipt.json")
expect_eq "$(topic_dump "$T.results" | jq -r --arg op "$op" '.payload | fromjson | select(.op_id == $op) | .status')" 200 \
  "the in-flight op's result was published during the shutdown"
