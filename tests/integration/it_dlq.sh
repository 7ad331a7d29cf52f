#!/usr/bin/env bash
# Malformed jobs land in the DLQ with their reason and their original bytes, the
# consumer's offset moves on, and valid jobs around them are processed.
source "$(dirname "$0")/lib.sh"
{
  pages 2 | jq -Rc '{url: .}'
  echo 'this is not json'
  echo '{"url":"ftp://127.0.0.1/file"}'
  echo '{"url":"http://user:pw@127.0.0.1:18080/x"}'
  echo '{"method":"GET"}'
} > "$WORK/jobs.ndjson"
submit --allow-invalid "$WORK/jobs.ndjson" > /dev/null
stats=$(run_until_idle)
echo "stats: $stats"
expect_eq "$(jq .invalid <<<"$stats")" 4 "jobs to the DLQ"
expect_eq "$(jq .results <<<"$stats")" 2 "results of the valid jobs"
topic_dump "$T.dlq" > "$WORK/dlq.json"
expect_eq "$(wc -l < "$WORK/dlq.json")" 4 "DLQ messages"
# each invalid job's own reason, exactly (several reasons name 'url': a grep
# for a word across all of them would pass on another record's reason)
reason_of() { # reason_of PAYLOAD: the dedupd-error header of that DLQ record
  jq -r --arg p "$1" 'select(.payload == $p) | .headers as $h | ($h | index("dedupd-error")) as $i | $h[$i + 1]' "$WORK/dlq.json"
}
r=$(reason_of 'this is not json')
[[ $r == "payload is not valid JSON: "* ]] || fail "not JSON: reason '$r'"
ok "not JSON: reason '$r'"
expect_eq "$(reason_of '{"url":"ftp://127.0.0.1/file"}')" "field 'url': scheme 'ftp' is not http or https" "ftp URL: reason"
expect_eq "$(reason_of '{"url":"http://user:pw@127.0.0.1:18080/x"}')" \
  "field 'url': userinfo (user:pass@) is refused: credentials go in headers" "URL with credentials: reason"
expect_eq "$(reason_of '{"method":"GET"}')" "field 'url': required (or give 'steps')" "job without url: reason"
# each record names its source topic/partition/offset, and the jobs topic
# holds the same bytes there
topic_dump "$T.jobs" > "$WORK/jobs.json"
n=0
while IFS=$'\t' read -r src payload; do
  [[ $src =~ ^$T\.jobs/([0-9]+)/([0-9]+)$ ]] || fail "DLQ record '$payload': dedupd-source '$src'"
  orig=$(jq -r --argjson p "${BASH_REMATCH[1]}" --argjson o "${BASH_REMATCH[2]}" \
    'select(.partition == $p and .offset == $o) | .payload' "$WORK/jobs.json")
  expect_eq "$orig" "$payload" "the job at $src is the DLQ record's original bytes"
  n=$((n + 1))
done < <(jq -r '.headers as $h | ($h | index("dedupd-source")) as $i | [$h[$i + 1], .payload] | @tsv' "$WORK/dlq.json")
expect_eq "$n" 4 "DLQ records checked against their source"
# The offsets moved on: a second run has nothing to consume.
stats=$(run_until_idle)
expect_eq "$(jq .consumed <<<"$stats")" 0 "messages consumed again by a second run"

# A valid job whose dedupd-op-id header contradicts it lands in the DLQ; once
# "fixed", `dedupd redrive` sends it back keyed by its op_id (still-invalid
# records stay), and it is processed.
u=$(pages 3 | tail -n 1)
printf '{"url":"%s"}' "$u" | kcat -b "$KAFKA_BOOTSTRAP" -P -t "$T.jobs" -k wrong -H dedupd-op-id=wrong
stats=$(run_until_idle)
expect_eq "$(jq .invalid <<<"$stats")" 1 "inconsistent op-id header to the DLQ"
"$DEDUPD" redrive -c "$CFG" > "$WORK/redrive.out" 2> "$WORK/redrive.err"
expect_eq "$(grep -c '"redriven":true' "$WORK/redrive.out")" 1 "records redriven"
expect_eq "$(grep -c '"kept":true' "$WORK/redrive.out")" 4 "still-invalid records kept"
stats=$(run_until_idle)
expect_eq "$(jq .new <<<"$stats")" 1 "redriven job processed"
expect_eq "$(jq .invalid <<<"$stats")" 0 "redriven job valid"
