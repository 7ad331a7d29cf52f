#!/usr/bin/env bash
# Writes the demo's jobs as NDJSON on stdout, from the origin's page list:
#   gen-jobs.sh PAGES_FILE [LOGICAL_JOBS] [TAG]
# Deterministic (same input, same output), so a re-run re-submits the same jobs.
# With TAG ([A-Za-z0-9._-]), every URL's src=demo becomes src=demo&t=TAG, so
# that the origin's log tells one run's requests from another's on a shared
# stack (the demo's, the smoke run's).
# Each logical job is one page of its own (?src=demo&lang=en added); 60% of them
# get a duplicate and 30% a second one, in URL forms that normalize alike:
# re-sent copies, scheme and host case, parameter order, a fragment,
# percent-encoding of unreserved characters in lower- and upper-case hex.
# Every fourth logical job carries a job_key (scope "demo").  Then 6 conflicts
# (a job_key reused with another request) and 10 malformed jobs.
set -euo pipefail
pages=$1
want=${2:-1100}
tag=${3:-}
[[ $tag =~ ^[A-Za-z0-9._-]*$ ]] || { echo "gen-jobs.sh: TAG must be [A-Za-z0-9._-]: $tag" >&2; exit 2; }
awk -v n="$want" '/\.html$/ && k++ < n' "$pages" | awk '
function job(u, i,   k) {
  if (i % 4 == 0)
    return sprintf("{\"url\":\"%s\",\"job_key\":\"page-%d\",\"scope\":\"demo\",\"meta\":{\"n\":%d}}", u, i, i)
  return sprintf("{\"url\":\"%s\",\"meta\":{\"n\":%d}}", u, i)
}
function variant(u, v,   s, p, q, h) {
  # u = scheme://host:port/path?src=demo&lang=en
  if (v == 0) return u
  if (v == 1) { sub(/^http:/, "HTTP:", u); return u }
  if (v == 2) { sub(/\?src=demo&lang=en$/, "?lang=en\\&src=demo", u); return u }
  if (v == 3) return u "#section"
  if (v == 4) { if (!sub(/-/, "%2d", u)) sub(/\.html/, "%2Ehtml", u); return u }
  if (v == 5) { if (!sub(/-/, "%2D", u)) sub(/\.html/, "%2ehtml", u); return u }
  if (v == 6) { if (!sub(/^http:\/\/localhost/, "http://LocalHost", u)) sub(/^http:/, "HTTP:", u); return u }
  return u
}
{
  i = NR
  u = $0 "?src=demo&lang=en"
  print job(u, i)
  if (i % 10 < 6) print job(variant(u, i % 7), i)
  if (i % 10 < 3) print job(variant(u, (i + 3) % 7), i)
  if (i % 4 == 0 && i <= 24) {
    # conflict: same job_key, another request (sent after the others)
    c = $0 "?src=demo&lang=de"
    conflicts[++nc] = sprintf("{\"url\":\"%s\",\"job_key\":\"page-%d\",\"scope\":\"demo\"}", c, i)
  }
}
END {
  for (k = 1; k <= nc; k++) print "LAST\t" conflicts[k]
  print "this is not json"
  print "{\"url\": \"http://127.0.0.1/\", \"url\": \"http://127.0.0.1/x\"}"
  print "{\"method\":\"GET\"}"
  print "{\"url\":\"ftp://127.0.0.1/file\"}"
  print "{\"url\":\"http://user:secret@127.0.0.1/\"}"
  print "{\"url\":\"http://127.0.0.1/\",\"headers\":{\"X-A\":\"a\\r\\nInjected: 1\"}}"
  print "{\"url\":12}"
  print "[\"http://127.0.0.1/\"]"
  print "{\"url\":\"http://127.0.0.1/\",\"parser_version\":\"two\"}"
  print "{\"url\":\"http://127.0.0.1/\",\"scope\":\"has space\",\"job_key\":\"k\"}"
}' | awk 'BEGIN{srand(42)} /^LAST\t/ {print "2\t" substr($0, 6); next} {printf "1%.8f\t%s\n", rand(), $0}' \
  | sort -s -k1,1 | cut -f2- | sed "s/src=demo/src=demo${tag:+\\&t=$tag}/g"
