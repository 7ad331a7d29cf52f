#!/usr/bin/env bash
# Shadow mode (DESIGN.md section 7): `dedupd run --shadow` claims, records and
# publishes `shadow` results without fetching, under its own store, consumer
# group and `shadow.` topics, so that the live run afterwards still fetches
# everything once.
source "$(dirname "$0")/lib.sh"

pages 10 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
pages 10 | jq -Rc '{url: .}' >> "$WORK/jobs.ndjson"          # duplicates
pages 5 | jq -Rc '{url: ., job_key: ("k-" + .)}' >> "$WORK/jobs.ndjson"
"$DEDUPD" topics -c "$CFG" --shadow --partitions 4 >/dev/null
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null

stats=$(run_until_idle --shadow)
echo "shadow stats: $stats"
expect_eq "$(jq .consumed <<<"$stats")" 25 "consumed"
expect_eq "$(jq .new <<<"$stats")" 15 "new ops (10 URLs + 5 keyed)"
expect_eq "$(jq '.duplicates + .duplicates_inflight' <<<"$stats")" 10 "duplicates"
expect_eq "$(jq .results <<<"$stats")" 15 "shadow results"
expect_eq "$(jq .fetch_attempts <<<"$stats")" 0 "fetch attempts"
expect_eq "$(log_since "$mark" | wc -l)" 0 "origin requests (nginx log)"
topic_dump "shadow.$T.results" > "$WORK/shadow.json"
expect_eq "$(wc -l < "$WORK/shadow.json")" 15 "messages on shadow.$T.results"
expect_eq "$(jq -r '.payload | fromjson | .outcome' "$WORK/shadow.json" | sort -u)" shadow "outcome"
expect_eq "$(topic_dump "$T.results" | wc -l)" 0 "messages on the live results topic"

# The live run: its own store and group see every op as new and fetch it once.
stats=$(run_until_idle)
echo "live stats: $stats"
expect_eq "$(jq .new <<<"$stats")" 15 "live new ops"
# the 5 keyed jobs name 5 of the same pages: single-flight serves those in
# flight together from one transfer, and conditional refetch sends the others'
# requests with validators (nginx answers 304); how many of each depends on
# poll timing
sf=$(jq .single_flight <<<"$stats")
nm=$(jq .not_modified <<<"$stats")
expect_eq "$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)" 10 "origin 200s after the live run (10 pages)"
expect_eq "$(( $(log_since "$mark" | awk '$(NF-1) == 304' | wc -l) + sf ))" 5 "origin 304s + single-flight waiters (the 5 keyed jobs)"
expect_eq "$nm" "$(log_since "$mark" | awk '$(NF-1) == 304' | wc -l)" "not_modified results = origin 304s"
# And a second shadow run decides everything from its own store.
submit "$WORK/jobs.ndjson" > /dev/null
stats=$(run_until_idle --shadow)
expect_eq "$(jq .new <<<"$stats")" 0 "shadow re-run: new ops"
expect_eq "$(jq '.duplicates + .duplicates_inflight' <<<"$stats")" 25 "shadow re-run: duplicates"
