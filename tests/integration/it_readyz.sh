#!/usr/bin/env bash
# /readyz (the Kubernetes readiness probe, README "Watching it") is 200 once
# the start-up restore of the assigned partitions is done, also with no
# partition assigned (a pod beyond the partition count: a sidecar's readiness
# gates its whole pod), and 503 with its reason once stopping; /healthz stays
# 200 throughout.
#   1. a jobs topic that does not exist: run refuses to start (exit 2, naming
#      topics.jobs and the command that creates it), never Ready
#   2. the topic has one partition and instance A holds it: instance B joins
#      the group (its own: static members linger after they stop), one of
#      them is assigned nothing, and it is Ready (200)
#   3. a job whose fetch takes 4 s (hostile origin /slow-headers): /readyz 200
#      once assigned, then SIGTERM while the fetch is in flight: 503 while the
#      process finishes that op, exit 0, and the op's result is published
PARTITIONS=1
source "$(dirname "$0")/lib.sh"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; stop_fixtures; rm -rf "$WORK"' EXIT

code() { curl -s -o "$WORK/body" -w '%{http_code}' "http://127.0.0.1:$1$2"; }
# ---- 1. no jobs topic ---------------------------------------------------------
rc=0; DEDUPD_TOPICS__JOBS=$T.absent timeout 60 "$DEDUPD" run -c "$CFG" 2>"$WORK/absent.log" || rc=$?
expect_eq "$rc" 2 "run exit status without its jobs topic"
grep -qF "topics.jobs: topic $T.absent does not exist (create it: dedupd topics -c FILE --partitions N)" "$WORK/absent.log" ||
  fail "run's reason for a missing jobs topic: $(tail -n 2 "$WORK/absent.log")"
grep -q 'admin listener on port' "$WORK/absent.log" && fail "run without its jobs topic opened its listeners (it could have looked Ready)"
ok "run names the missing jobs topic and never listens"

# ---- 2. an instance beyond the partition count is Ready --------------------------
DEDUPD_CONSUMER__GROUP_ID=$T-p2 DEDUPD_KAFKA__GROUP__INSTANCE__ID=$T-a DEDUPD_STORE__PATH=$WORK/store.a \
  "$DEDUPD" run -c "$CFG" 2>"$WORK/a.log" &
pids+=($!)
porta=$(admin_port "$WORK/a.log")
for _ in $(seq 1 150); do [ "$(code "$porta" /readyz)" = 200 ] && break; sleep 0.1; done
expect_eq "$(code "$porta" /readyz)" 200 "instance a Ready with the one partition"
DEDUPD_CONSUMER__GROUP_ID=$T-p2 DEDUPD_KAFKA__GROUP__INSTANCE__ID=$T-b DEDUPD_STORE__PATH=$WORK/store.b DEDUPD_API__LISTEN= \
  "$DEDUPD" run -c "$CFG" 2>"$WORK/b.log" &
pids+=($!)
portb=$(admin_port "$WORK/b.log")
expect_eq "$(code "$portb" /healthz)" 200 "/healthz of instance b"
# the range assignor gives the one partition to one of them: the other has
# none
idle=""
for _ in $(seq 1 150); do
  for i in a b; do grep -q '"assigned 0 partitions"' "$WORK/$i.log" && idle=$i; done
  [ -n "$idle" ] && break
  sleep 0.1
done
[ -n "$idle" ] || nothing_tested "neither instance was assigned an empty share"
[ "$idle" = a ] && pidle=$porta || pidle=$portb
for _ in $(seq 1 30); do [ "$(code "$pidle" /readyz)" = 200 ] && break; sleep 0.1; done
expect_eq "$(code "$pidle" /readyz)" 200 "instance $idle Ready with no partition (beyond the partition count)"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p" || fail "run exit $? on SIGTERM"; done
pids=()
ok "both instances stop on SIGTERM"

# ---- 3. while stopping ------------------------------------------------------
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
for _ in $(seq 1 60); do # the fetch holds the stop for 4 s
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
