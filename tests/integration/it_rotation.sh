#!/usr/bin/env bash
# One exit is throttled by the origin (nginx limit_req -> 429 + Retry-After):
# a 429 puts that session into cooldown and rotates the op to the other exit,
# which fetches it (asserted on nginx's access log: client address per request).
source "$(dirname "$0")/lib.sh"
throttled=${THROTTLED_EXIT:-127.0.0.2}
export DEDUPD_FETCH__MAX_INFLIGHT=64
pages 150 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null
stats=$(run_until_idle)
echo "stats: $stats"
log_since "$mark" > "$WORK/access.log"
n429=$(awk -v ip="$throttled" '$1 == ip && $(NF-1) == 429' "$WORK/access.log" | wc -l)
[ "$n429" -gt 0 ] || fail "no 429 from the throttled exit $throttled: nothing was tested"
ok "$n429 answers 429 to $throttled"
[ "$(jq .rotations <<<"$stats")" -gt 0 ] || fail "no rotation counted"
ok "rotations $(jq .rotations <<<"$stats")"
expect_eq "$(awk '$(NF-1) == 200' "$WORK/access.log" | wc -l)" 150 "origin 200s: one per job"
# Every URL that got a 429 through the throttled exit was then fetched through
# another exit.
awk -v ip="$throttled" '$1 == ip && $(NF-1) == 429 {print $3}' "$WORK/access.log" | sort -u > "$WORK/throttled_urls"
awk -v ip="$throttled" '$1 != ip && $(NF-1) == 200 {print $3}' "$WORK/access.log" | sort -u > "$WORK/other_ok"
expect_eq "$(comm -23 "$WORK/throttled_urls" "$WORK/other_ok" | wc -l)" 0 "throttled URLs fetched through the other exit"
tail_results > "$WORK/results.ndjson"
expect_eq "$(jq -r 'select(.outcome == "fetched")' "$WORK/results.ndjson" | jq -s length)" 150 "fetched results"
[ "$(jq -s 'map(.rotations) | add' "$WORK/results.ndjson")" -gt 0 ] || fail "results do not show the rotations"
ok "results report rotations"
