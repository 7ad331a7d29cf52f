#!/usr/bin/env bash
# Identity settings are fixed per consumer group (issue 12, DESIGN.md sections
# 2 and 6): the settings that feed the canonical request are written to every
# changelog partition (record __identity) and checked while a partition is
# restored.  Instance A runs with the defaults; an instance B that joins the
# same group with other identity.variance_headers, then one with other
# identity.credential_headers, exits 2 naming the setting (else the two would
# give the same job two op_ids and fetch it twice).  A keeps running.
# kafka.partition.assignment.strategy=cooperative-sticky exits 2 with its
# reason (librdkafka 2.0.2's cooperative bugs, section 6).
source "$(dirname "$0")/lib.sh"
multi_setup
LIMIT_S=${IDENTITY_LIMIT_S:-15}

# cooperative-sticky: refused at start-up with its reason
rc=0
DEDUPD_KAFKA__PARTITION__ASSIGNMENT__STRATEGY=cooperative-sticky DEDUPD_STORE__PATH=$WORK/store.coop \
  DEDUPD_INSTANCE__ID=$T-coop timeout 20 "$DEDUPD" run -c "$CFG" 2>"$WORK/coop.log" || rc=$?
expect_eq "$rc" 2 "exit status with cooperative-sticky"
grep -q 'cooperative-sticky.*librdkafka' "$WORK/coop.log" || fail "no reason given for refusing cooperative-sticky: $(tail -n 3 "$WORK/coop.log")"
ok "cooperative-sticky refused: $(tail -n 1 "$WORK/coop.log")"

pages 8 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
submit "$WORK/jobs.ndjson" > /dev/null
inst_start a
inst_ready a

# mismatch NAME SETTING VAR VALUE: instance NAME with VAR=VALUE must exit 2
# within LIMIT_S seconds, its log naming SETTING.
mismatch() {
  local n=$1 setting=$2 pid rc
  inst_start "$n" "$3=$4"
  pid=${INST_PID[$n]}
  for _ in $(seq 1 $((LIMIT_S * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    failures+=("instance $n ($setting = $4, other than instance a's) still runs after $LIMIT_S s in the same group, holding $(inst_assigned "$n") partitions and having consumed $(inst_metric "$n" 'dedupd_jobs_total{outcome="new"}') new + $(inst_metric "$n" 'dedupd_jobs_total{outcome="duplicate"}') duplicate jobs; expected exit 2 naming $setting")
    echo "FAIL (counted): ${failures[-1]}" >&2
    inst_stop "$n"
    return 0
  fi
  rc=0; wait "$pid" || rc=$?; unset "INST_PID[$n]"
  expect_eq "$rc" 2 "exit status of instance $n ($setting differs)"
  grep -qF "$setting" "${INST_LOG[$n]}" || fail "instance $n's stderr does not name $setting: $(tail -n 3 "${INST_LOG[$n]}")"
  ok "instance $n names $setting: $(grep -F "$setting" "${INST_LOG[$n]}" | tail -n 1 | jq -r '.message // .msg // .' 2>/dev/null || true)"
}
failures=()
mismatch b identity.variance_headers DEDUPD_IDENTITY__VARIANCE_HEADERS accept,accept-language,user-agent
mismatch c identity.credential_headers DEDUPD_IDENTITY__CREDENTIAL_HEADERS x-session-token
kill -0 "${INST_PID[a]}" 2>/dev/null || fail "instance a exited: $(tail -n 3 "${INST_LOG[a]}")"
ok "instance a still runs"

inst_stop a
(( ${#failures[@]} == 0 )) || fail "$(printf '%s; ' "${failures[@]}")"
