#!/usr/bin/env bash
# A second instance joins mid-run (issue 12): instance a works through a batch
# of slow jobs (/slow/, 1..2 s each); b joins the group while a is busy,
# takes over half of the partitions, and then a copy of every job arrives.
# The partitions that moved were restored from the changelog before b
# processed them, and a's fetches still in flight at the revoke were drained
# (or released) before they were given up, so:
#   - origin fetches == logical jobs (nginx access log, this test's tag)
#   - every logical job has exactly one event_key on the results topic
source "$(dirname "$0")/lib.sh"
multi_setup
export DEDUPD_FETCH__MAX_INFLIGHT=16
L=${JOIN_JOBS:-160}

slow_pages "$L" | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
# the copies: an exact re-send and a form that normalizes alike
{ cat "$WORK/jobs.ndjson"; sed 's|"http://|"HTTP://|' "$WORK/jobs.ndjson"; } > "$WORK/copies.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
inst_start a
inst_ready a
# b joins once a has fetched a quarter of the jobs
for _ in $(seq 1 300); do (( $(origin_200s "$mark") >= L / 4 )) && break; sleep 0.1; done
at_join=$(origin_200s "$mark")
inst_start b
inst_ready b
at_ready=$(origin_200s "$mark")
echo "b joined after $at_join of $L fetches; $at_ready done when b was ready ($(inst_assigned a) + $(inst_assigned b) partitions)"
(( at_ready < L )) || nothing_tested "a had fetched every job before b was ready"
(( $(inst_assigned b) > 0 )) || nothing_tested "b got no partition"
submit "$WORK/copies.ndjson" > "$WORK/receipts2.ndjson"
multi_wait_idle "${PARTITIONS:-4}" a b
inst_stop a
inst_stop b

fetches=$(origin_200s "$mark")
log_since "$mark" | awk '$(NF-1) == 200 {print $3}' | sort | uniq -c | awk '$1 > 1' > "$WORK/refetched"
topic_dump "$T.results" | jq -r '.payload | fromjson | "\(.op_id) \(.event_key)"' | sort -u > "$WORK/keys"
logical=$(jq -r .op_id "$WORK/receipts.ndjson" | sort -u | wc -l)
echo "logical jobs $logical, copies $((2 * L)), origin fetches $fetches, URLs fetched more than once $(wc -l < "$WORK/refetched"), results (distinct op_id event_key) $(wc -l < "$WORK/keys")"
expect_eq "$logical" "$L" "logical jobs (distinct op_ids of the receipts)"
expect_eq "$(awk '{print $1}' "$WORK/keys" | sort -u | wc -l)" "$L" "logical jobs with a result"
expect_eq "$(awk '{print $1}' "$WORK/keys" | uniq -d | wc -l)" 0 "logical jobs with more than one event_key"
[ "$fetches" = "$L" ] || fail "origin fetches $fetches != logical jobs $L: $((fetches - L)) jobs fetched again after b joined ($(wc -l < "$WORK/refetched") URLs more than once, e.g. $(head -n 2 "$WORK/refetched" | tr -s ' ' | paste -sd ';'))"
ok "origin fetches = logical jobs = $L"
