#!/usr/bin/env bash
# Misrouted jobs (issue 12, DESIGN.md section 2): the Kafka key is a routing
# hint.  Copies of the same jobs arrive keyed by op_id (`dedupd submit`), with
# no key and keyed by URL (kcat: librdkafka's default partitioner, not
# murmur2 of the op_id), on a 12-partition jobs topic shared by three
# instances.  A job on another partition than its op_id's is re-produced to
# the jobs topic keyed by op_id (dedupd_jobs_misrouted_total), so every copy
# meets one owner:
#   - origin fetches == logical jobs (nginx access log)
#   - every logical job has exactly one event_key on the results topic
#   - dedupd_jobs_misrouted_total > 0, and kcat's copies did land on other
#     partitions than their op_id's (counted from the jobs topic against the
#     partitions of submit's receipts): misrouting happened
PARTITIONS=12
source "$(dirname "$0")/lib.sh"
multi_setup
export DEDUPD_FETCH__MAX_INFLIGHT=16
L=${MISROUTED_JOBS:-150}

slow_pages "$L" 0 12288 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
for n in a b c; do inst_start "$n"; done
for n in a b c; do inst_ready "$n"; done
for _ in $(seq 1 100); do
  (( $(inst_assigned a) + $(inst_assigned b) + $(inst_assigned c) == PARTITIONS )) && break
  sleep 0.2
done
echo "partitions: a $(inst_assigned a), b $(inst_assigned b), c $(inst_assigned c)"
mark=$(log_mark)
# no key; keyed by op_id (submit); keyed by URL
kcat -b "$KAFKA_BOOTSTRAP" -P -t "$T.jobs" < "$WORK/jobs.ndjson" || fail "kcat -P (no key)"
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
jq -r '[.url, tojson] | join("\t")' "$WORK/jobs.ndjson" |
  kcat -b "$KAFKA_BOOTSTRAP" -P -t "$T.jobs" -K $'\t' || fail "kcat -P (keyed by URL)"
multi_wait_idle "$PARTITIONS" a b c
misrouted=0
for n in a b c; do
  v=$(inst_metric "$n" dedupd_jobs_misrouted_total)
  [[ $v =~ ^[0-9]+$ ]] && misrouted=$((misrouted + v))
  echo "instance $n: dedupd_jobs_misrouted_total $v, dedupd_jobs_total{outcome=\"misrouted\"} $(inst_metric "$n" 'dedupd_jobs_total{outcome="misrouted"}')"
done
for n in a b c; do inst_stop "$n"; done

# kcat's copies on another partition than submit's copy of the same line
jq -r '"\(.line)\t\(.partition)"' "$WORK/receipts.ndjson" | sort > "$WORK/line.part"
awk '{print NR "\t" $0}' "$WORK/jobs.ndjson" | sort > "$WORK/line.job"
topic_dump "$T.jobs" | jq -r '(.headers // []) as $h
  | select([range(0; $h | length; 2) | $h[.]] | index("dedupd-op-id") | not)
  | "\(.partition)\t\(.payload)"' > "$WORK/kcat.copies"
elsewhere=$(join -t $'\t' "$WORK/line.part" "$WORK/line.job" | awk -F'\t' 'NR == FNR {p[$3] = $2; next} $2 in p && p[$2] != $1' - "$WORK/kcat.copies" | wc -l)
echo "kcat copies $(wc -l < "$WORK/kcat.copies") (of $((2 * L)) sent), on another partition than their op_id's: $elsewhere"
(( elsewhere > 0 )) || nothing_tested "no kcat copy landed on another partition than its op_id's"

fetches=$(origin_200s "$mark")
topic_dump "$T.results" | jq -r '.payload | fromjson | "\(.op_id) \(.event_key)"' | sort -u > "$WORK/keys"
log_since "$mark" | awk '$(NF-1) == 200 {print $3}' | sort | uniq -c | awk '$1 > 1' > "$WORK/refetched"
echo "logical jobs $L, copies $((3 * L)), origin fetches $fetches, URLs fetched more than once $(wc -l < "$WORK/refetched"), misrouted (metric) $misrouted"
expect_eq "$(awk '{print $1}' "$WORK/keys" | sort -u | wc -l)" "$L" "logical jobs with a result"
expect_eq "$(awk '{print $1}' "$WORK/keys" | uniq -d | wc -l)" 0 "logical jobs with more than one event_key"
failures=()
[ "$fetches" = "$L" ] || failures+=("origin fetches $fetches != logical jobs $L ($((fetches - L)) extra; $(wc -l < "$WORK/refetched") URLs fetched more than once)")
(( misrouted > 0 )) || failures+=("dedupd_jobs_misrouted_total is $misrouted summed over the instances, though $elsewhere copies arrived on another partition than their op_id's")
(( ${#failures[@]} == 0 )) || fail "$(printf '%s; ' "${failures[@]}")"
ok "origin fetches = logical jobs = $L; $misrouted jobs re-routed"
