#!/usr/bin/env bash
# Submit, run, results: every logical job fetched once and published once under
# its event_key with the headers of DESIGN.md section 3; a re-run fetches nothing.
source "$(dirname "$0")/lib.sh"

pages 20 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
# duplicates: re-sent copies and forms that normalize alike
pages 10 | jq -Rc '{url: .}' >> "$WORK/jobs.ndjson"
pages 10 | sed 's|^http://|HTTP://|; s|$|#frag|' | jq -Rc '{url: .}' >> "$WORK/jobs.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > "$WORK/receipts.ndjson"
expect_eq "$(wc -l < "$WORK/receipts.ndjson")" 40 "receipts"
expect_eq "$(jq -r .event_key "$WORK/receipts.ndjson" | sort -u | wc -l)" 20 "distinct event_keys"

stats=$(run_until_idle)
echo "stats: $stats"
expect_eq "$(jq .consumed <<<"$stats")" 40 "consumed"
expect_eq "$(jq .new <<<"$stats")" 20 "new ops"
expect_eq "$(jq '.duplicates + .duplicates_inflight' <<<"$stats")" 20 "duplicates"
expect_eq "$(log_since "$mark" | awk '$(NF-1) == 200' | wc -l)" 20 "origin 200s (nginx log)"

tail_results > "$WORK/results.ndjson"
expect_eq "$(wc -l < "$WORK/results.ndjson")" 20 "results after dedup"
expect_eq "$(jq -r .event_key "$WORK/results.ndjson" | sort | comm -3 - <(jq -r .event_key "$WORK/receipts.ndjson" | sort -u) | wc -l)" 0 "result event_keys == submitted event_keys"
expect_eq "$(jq -r 'select(.outcome == "fetched" and .status == 200 and (.body | length) > 100 and .body_sha256 != null) | .op_id' "$WORK/results.ndjson" | wc -l)" 20 "fetched results with bodies"

# Kafka side: keyed by event_key, with idempotency-key / dedupd-op-id headers.
topic_dump "$T.results" > "$WORK/raw.json"
expect_eq "$(wc -l < "$WORK/raw.json")" 20 "messages on the results topic"
bad=$(jq -r 'select(.key != (.payload | fromjson | .event_key)) | .key' "$WORK/raw.json" | wc -l)
expect_eq "$bad" 0 "results keyed by event_key"
# each header equals the payload's field: idempotency-key = event_key,
# dedupd-op-id = op_id, dedupd-generation = generation (present is not enough)
jq -c '(.headers // []) as $h | (.payload | fromjson) as $p
  | def hdr($n): [range(0; $h | length; 2) | select($h[.] == $n) | $h[. + 1]];
  {key, ik: hdr("idempotency-key"), op: hdr("dedupd-op-id"), gen: hdr("dedupd-generation"),
   event_key: $p.event_key, op_id: $p.op_id, generation: ($p.generation | tostring)}' "$WORK/raw.json" > "$WORK/hdrs.json"
expect_eq "$(jq -r 'select(.ik != [.event_key] or .op != [.op_id] or .gen != [.generation]) | "\(.key): \(.)"' "$WORK/hdrs.json")" "" \
  "results whose idempotency-key, dedupd-op-id or dedupd-generation header differs from the payload's event_key, op_id or generation"
expect_eq "$(jq -r .gen[0] "$WORK/hdrs.json" | sort -u)" 1 "dedupd-generation of first fetches"
expect_eq "$(jq -r .op[0] "$WORK/hdrs.json" | sort -u | comm -3 - <(jq -r .op_id "$WORK/receipts.ndjson" | sort -u) | wc -l)" 0 \
  "dedupd-op-id headers == the submitted op_ids"

# Re-submit everything: nothing new is fetched or published.
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null
stats=$(run_until_idle)
expect_eq "$(jq .new <<<"$stats")" 0 "new ops on re-run"
expect_eq "$(jq .duplicates <<<"$stats")" 40 "duplicates on re-run"
# submit sets the dedupd-op-id / dedupd-request-hash headers, and the hot index
# (rebuilt at start-up) holds every op: the fast path decides all of them.
expect_eq "$(jq .fast_path <<<"$stats")" 40 "fast-path decisions on re-run"
expect_eq "$(log_since "$mark" | wc -l)" 0 "origin requests on re-run"
expect_eq "$(topic_dump "$T.results" | wc -l)" 20 "results topic unchanged"

# A copy of an op in flight: submitted again while the op's slow fetch runs
# (64..96 KiB at 16 KiB/s: 4..6 s), it is decided on the fast path without a
# parse and waits with the op (DESIGN.md section 2, as built): one fetch, one
# result, both messages done.
slow_pages 1 65536 98304 | jq -Rc '{url: .}' > "$WORK/slow.ndjson"
mark=$(log_mark) from=$(( $(wc -l < "$WORK/run.log") + 1 ))
submit "$WORK/slow.ndjson" > /dev/null
run_until_idle > "$WORK/slow.stats" &
runpid=$!
expect_eq "$(wait_inflight "$(admin_port "$WORK/run.log" "$from")" 1)" 1 "the slow op in flight"
submit "$WORK/slow.ndjson" > /dev/null
wait "$runpid" || fail "dedupd run failed"
stats=$(cat "$WORK/slow.stats")
echo "stats: $stats"
expect_eq "$(jq '[.consumed, .new, .duplicates_inflight, .fast_path, .results] | join(" ")' -r <<<"$stats")" \
  "2 1 1 1 1" "consumed, new, duplicates in flight, fast-path decisions, results"
expect_eq "$(log_since "$mark" | grep -c '/slow/')" 1 "origin requests of the slow page"
