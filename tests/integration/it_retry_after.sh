#!/usr/bin/env bash
# With a single exit, and that one throttled, dedupd cannot rotate: it waits out
# Retry-After (nginx sends 1 s) in the session cooldown and still fetches every
# job once.  No job fails, none is fetched twice.
source "$(dirname "$0")/lib.sh"
throttled=${THROTTLED_EXIT:-127.0.0.2}
export DEDUPD_PROXY__EXITS=$(tr " " "\n" <<<"$PROXY_EXITS" | grep -F "//$throttled:")
export DEDUPD_FETCH__COOLDOWN_DEFAULT_MS=30000   # would fail the run if used
pages 60 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null
start=$(date +%s)
stats=$(run_until_idle)
secs=$(( $(date +%s) - start ))
echo "stats: $stats ($secs s)"
log_since "$mark" > "$WORK/access.log"
n429=$(awk '$(NF-1) == 429' "$WORK/access.log" | wc -l)
[ "$n429" -gt 0 ] || fail "no 429 seen: nothing was tested"
ok "$n429 answers 429"
expect_eq "$(awk '$(NF-1) == 200' "$WORK/access.log" | wc -l)" 60 "origin 200s"
expect_eq "$(awk '$1 != "'"$throttled"'"' "$WORK/access.log" | wc -l)" 0 "requests through other exits"
expect_eq "$(jq .failed <<<"$stats")" 0 "failed ops"
# Retry-After: 1 was honoured, not the 30 s default cooldown.
[ "$secs" -lt 60 ] || fail "took $secs s: Retry-After not used"
ok "finished in $secs s with Retry-After 1 s"
