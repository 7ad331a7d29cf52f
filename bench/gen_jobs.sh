#!/usr/bin/env bash
# gen_jobs.sh N TAG [unique|mixed] [PAGES_FILE]: N scrape jobs, one JSON object
# a line, on stdout, made by one awk process (1M jobs in a couple of seconds).
#
#   {"url":"http://127.0.0.1:18080/docs/PAGE.html?t=TAG&i=I","meta":{"bench":"TAG","seq":J}}
#
# about 150 bytes each.  PAGE cycles through the origin's pages (PAGES_FILE,
# default $ORIGIN_PAGES of `scripts/stack.sh env`), so the fetch sizes are
# those of the real documentation pages.  `t=TAG&i=I` makes every I a distinct
# logical job (op_id).
#   unique  I = J: N distinct jobs.
#   mixed   even lines are new jobs (I = J/2), odd lines re-send an earlier job
#           (I = int(J/4), first sent at line 2I, about half-way back; each of
#           the first N/4 jobs is re-sent twice): 50% duplicates interleaved
#           with the new ones, as a redelivering fleet sends them.  A copy is
#           byte-identical to its first send (same meta).
set -euo pipefail
n=${1:?usage: gen_jobs.sh N TAG [unique|mixed] [PAGES_FILE]}
tag=${2:?usage: gen_jobs.sh N TAG [unique|mixed] [PAGES_FILE]}
mode=${3:-unique}
pages=${4:-${ORIGIN_PAGES:-}}
if [ -z "$pages" ]; then
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  eval "$("$root/scripts/stack.sh" env)"
  pages=$ORIGIN_PAGES
fi
case $mode in unique|mixed) ;; *) echo "gen_jobs.sh: mode unique or mixed" >&2; exit 2 ;; esac
awk -v n="$n" -v t="$tag" -v mode="$mode" '
  NR == FNR { if ($0 ~ /\.html$/) p[k++] = $0; next }
  END {
    if (k == 0) { print "gen_jobs.sh: no .html pages" > "/dev/stderr"; exit 1 }
    for (j = 0; j < n; j++) {
      if (mode == "unique") i = j
      else if (j % 2 == 0) i = j / 2
      else i = int(j / 4)
      printf "{\"url\":\"%s?t=%s&i=%d\",\"meta\":{\"bench\":\"%s\",\"seq\":%d}}\n",
        p[i % k], t, i, t, i
    }
  }' "$pages" /dev/null
