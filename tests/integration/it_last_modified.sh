#!/usr/bin/env bash
# Issue 14 (3): only an HTTP-date Last-Modified becomes If-Modified-Since
# (DESIGN.md section 5 conditional refetch; RFC 9110 sections 5.6.7, 13.1.3).
#
# The scripted origin's /lastmod route answers 200 with the Last-Modified it is
# given (and an ETag when asked), and 304 to any conditional request; its log
# shows the If-None-Match / If-Modified-Since each request carried.  Run 1
# fetches each resource once (validators stored), run 2 fetches it again as a
# new op:
#   imf, rfc850, asctime: the three HTTP-date forms: If-Modified-Since is sent
#     as IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the 304 is answered
#     from the stored body (not_modified);
#   iso (ISO 8601), zone (a numeric zone), locale (a German date): not
#     HTTP-dates: no If-Modified-Since; without an ETag nothing conditional is
#     sent and the page is fetched (200); with an ETag ("locale") only
#     If-None-Match goes out and the 304 is used.
source "$(dirname "$0")/lib.sh"

jq 'del(.proxy.providers)' "$CFG" >"$WORK/dedupd.json"
CFG=$WORK/dedupd.json
export DEDUPD_PROXY__EXITS=
export DEDUPD_FETCH__ALLOW_TARGETS=127.0.0.1/32
trap 'stop_fixtures; rm -rf "$WORK"' EXIT
hostile_start origin 127.0.0.1:0
O=http://127.0.0.1:$(head -1 "$WORK/origin.port")

IMF='Sun, 06 Nov 1994 08:49:37 GMT'
IMF_LOGGED='Sun,%2006%20Nov%201994%2008:49:37%20GMT'
# name | Last-Modified | ETag | run 2: inm | ims | status | outcome
CASES=(
  "imf|$IMF||-|$IMF_LOGGED|304|not_modified"
  "rfc850|Sunday, 06-Nov-94 08:49:37 GMT||-|$IMF_LOGGED|304|not_modified"
  "asctime|Sun Nov  6 08:49:37 1994||-|$IMF_LOGGED|304|not_modified"
  "iso|2024-05-01T10:00:00Z||-|-|200|fetched"
  "zone|Wed, 01 May 2024 10:00:00 +0000||-|-|200|fetched"
  "locale|Mittwoch, 01. Mai 2024 10:00:00|e5|\"e5\"|-|304|not_modified"
)
url_of() { # url_of NAME LM ETAG
  local u
  u="$O/lastmod?c=$T-$1&lm=$(jq -rn --arg v "$2" '$v|@uri')"
  [ -z "$3" ] || u+="&etag=$3"
  echo "$u"
}
runjobs() { # runjobs N: one job per case, job_key NAME-N
  local c name lm etag
  for c in "${CASES[@]}"; do
    IFS='|' read -r name lm etag _ <<<"$c"
    jq -cn --arg u "$(url_of "$name" "$lm" "$etag")" --arg k "$name-$1" '{url: $u, job_key: $k}'
  done >"$WORK/run$1.ndjson"
  submit "$WORK/run$1.ndjson" >/dev/null
  run_until_idle
}
stats=$(runjobs 1); echo "run 1: $stats"
expect_eq "$(jq .new <<<"$stats")" ${#CASES[@]} "run 1: new ops"
stats2=$(runjobs 2); echo "run 2: $stats2"
sleep 0.3
tail_results >"$WORK/results.ndjson"

# field NAME KEY: the value of " KEY=..." on request 2 of NAME, "-" when absent
cond() {
  grep -F "c=$T-$1&" "$WORK/origin.log" | sed -n 2p | tr ' ' '\n' |
    awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print; found = 1 } END { if (!found) print "-" }'
}
for c in "${CASES[@]}"; do
  IFS='|' read -r name lm etag inm ims status outcome <<<"$c"
  expect_eq "$(grep -cF "c=$T-$name&" "$WORK/origin.log")" 2 "$name: requests"
  expect_eq "$(cond "$name" ims)" "$ims" "$name ('$lm'): If-Modified-Since of the refetch"
  expect_eq "$(cond "$name" inm)" "$inm" "$name: If-None-Match of the refetch"
  expect_eq "$(jq -r --arg k "$name-2" 'select(.job_key == $k) | "\(.outcome)/\(.status)"' "$WORK/results.ndjson")" \
    "$outcome/$status" "$name: refetch result"
done
expect_eq "$(jq .not_modified <<<"$stats2")" 4 "run 2: 304s answered from the stored body"
# and no request ever carried anything but an IMF-fixdate as If-Modified-Since
bad=$(grep -F "c=$T-" "$WORK/origin.log" | grep -o ' ims=[^ ]*' | grep -vxF " ims=$IMF_LOGGED" || true)
[ -z "$bad" ] || fail "If-Modified-Since values that are not IMF-fixdate: $bad"
ok "every If-Modified-Since sent was an IMF-fixdate"
