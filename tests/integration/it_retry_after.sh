#!/usr/bin/env bash
# With a single exit, and that one throttled, dedupd cannot rotate: it waits out
# Retry-After (nginx sends 1 s) in the session cooldown and still fetches every
# job once.  No job fails, none is fetched twice.
source "$(dirname "$0")/lib.sh"
throttled=${THROTTLED_EXIT:-127.0.0.2}
export DEDUPD_PROXY__EXITS=$(tr " " "\n" <<<"$PROXY_EXITS" | grep -F "//$throttled:")
COOLDOWN_MS=30000   # the default cooldown: a single use of it fails the bound below
export DEDUPD_FETCH__COOLDOWN_DEFAULT_MS=$COOLDOWN_MS
pages 60 | jq -Rc '{url: .}' > "$WORK/jobs.ndjson"
mark=$(log_mark)
submit "$WORK/jobs.ndjson" > /dev/null
start=$(date +%s%3N)
stats=$(run_until_idle)
ms=$(( $(date +%s%3N) - start ))
echo "stats: $stats ($ms ms)"
log_since "$mark" > "$WORK/access.log"
n429=$(awk '$(NF-1) == 429' "$WORK/access.log" | wc -l)
[ "$n429" -gt 0 ] || fail "no 429 seen: nothing was tested"
ok "$n429 answers 429"
expect_eq "$(awk '$(NF-1) == 200' "$WORK/access.log" | wc -l)" 60 "origin 200s"
expect_eq "$(awk '$1 != "'"$throttled"'"' "$WORK/access.log" | wc -l)" 0 "requests through other exits"
expect_eq "$(jq .failed <<<"$stats")" 0 "failed ops"
# Retry-After: 1 was honoured, not the 30 s default cooldown: with at least
# one 429 (above), a run that waited the default even once takes more than
# COOLDOWN_MS (plus start-up and the 2.5 s idle end), so the bound stays 5 s
# below it (the right behaviour takes about 8 s).
bound=$(( COOLDOWN_MS - 5000 ))
[ "$ms" -lt "$bound" ] || fail "took $ms ms (bound $bound ms, below the $COOLDOWN_MS ms default cooldown): Retry-After not used"
ok "finished in $ms ms with Retry-After 1 s (bound $bound ms, below the $COOLDOWN_MS ms default cooldown)"
