#!/usr/bin/env bash
# A full disk under the store (issue 15): the store lives on a 16 MB tmpfs,
# which a filler file fills mid-run.  The first failed write stops the run:
# dedupd exits 1 within seconds (not SIGABRT, RocksDB's assertion on a WAL
# fsync after a failed write), with one log line naming the cause and the ops
# abandoned.  Started again while the disk is still full, it says so and
# exits 1.  Once the filler is deleted, a run on the same store completes
# every job: one distinct event_key per logical job on the results topic, and
# origin fetches minus logical jobs <= the ops abandoned.
# Needs root (mount -t tmpfs; the CI runs as root): without it the test
# fails saying so.  The tmpfs is unmounted in the EXIT trap.
# First the premise: ops were in flight and results were published before
# the disk filled, and jobs were left (else "nothing was tested").
source "$(dirname "$0")/lib.sh"
JOBS=${DISK_FULL_JOBS:-160}
MNT=$WORK/mnt
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT"; }
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$MNT"
mount -t tmpfs -o size=16m,mode=0700 dedupd-disk-full "$MNT" 2>"$WORK/mount.err" ||
  fail "cannot mount a 16 MB tmpfs at $MNT (this test needs root): $(cat "$WORK/mount.err")"
export DEDUPD_STORE__PATH=$MNT/store
export DEDUPD_FETCH__MAX_INFLIGHT=32
export DEDUPD_FETCH__TIMEOUT_MS=20000

# Pages of 17..34 KB from /slow/: 1..2 s each, 32 at a time: the run takes
# about 8 s, and the disk fills in its middle.
slow_pages "$JOBS" | jq -Rc '{url: .}' > "$WORK/jobs"
submit "$WORK/jobs" > /dev/null
mark=$(log_mark)

"$DEDUPD" run -c "$CFG" 2>"$WORK/run1.log" &
pid=$!
port=$(admin_port "$WORK/run1.log")
inflight=$(wait_inflight "$port" 16)
[[ $inflight =~ ^[0-9]+$ ]] && (( inflight >= 16 )) || nothing_tested "only '$inflight' ops in flight"
sleep 2.5
done0=$(topic_dump "$T.results" | jq -r .key | sort -u | wc -l)
(( done0 > 0 )) || nothing_tested "no result published before the disk filled"
echo "$done0 results published, $(du -sk "$MNT/store" | cut -f1) KB of store, before the filler"
dd if=/dev/zero of="$MNT/filler" bs=64k status=none 2>/dev/null || true
t0=$(date +%s%N)
echo "disk filled: $(df -k --output=avail "$MNT" | tail -n 1 | tr -d ' ') KB left"
for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
rc=0
if kill -0 "$pid" 2>/dev/null; then
  fail "dedupd still runs 15 s after the disk filled: $(tail -n 5 "$WORK/run1.log")"
fi
wait "$pid" || rc=$?
pid=""
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "exit status $rc, $ms ms after the disk filled"
expect_eq "$rc" 1 "exit status after a failed store write"
line=$(grep -F 'store write failed, stopped' "$WORK/run1.log" | grep -F 'ops abandoned' || true)
[ -n "$line" ] || fail "no log line naming the cause and the ops abandoned: $(tail -n 5 "$WORK/run1.log")"
echo "$line"
grep -q 'No space left on device' <<<"$line" || fail "the line does not name the cause (No space left on device)"
ok "the log line names the cause"
abandoned=$(sed -nE 's/.*store write failed, stopped: ([0-9]+) ops abandoned.*/\1/p' <<<"$line")
[[ $abandoned =~ ^[0-9]+$ ]] || fail "no count of ops abandoned in: $line"
ok "$abandoned ops abandoned"
done1=$(topic_dump "$T.results" | jq -r .key | sort -u | wc -l)
(( done1 < JOBS )) || nothing_tested "every job was done when the disk filled"

# Started again on the full disk: it says so, exits 1.  (The first run's
# exit and RocksDB's recovery at the open may free a little: fill that too.)
dd if=/dev/zero of="$MNT/filler2" bs=4k status=none 2>/dev/null || true
rc=0
timeout 30 "$DEDUPD" run -c "$CFG" --exit-when-idle 2000 2>"$WORK/run2.log" || rc=$?
expect_eq "$rc" 1 "exit status of a start on the full disk"
grep -E '"level":"(err|error|crit)".*No space left on device' "$WORK/run2.log" | tail -n 1 | cut -c1-300
grep -qE '"level":"(err|error|crit)".*No space left on device' "$WORK/run2.log" ||
  fail "the start on the full disk did not name the cause: $(tail -n 3 "$WORK/run2.log")"
ok "a start on the full disk names the cause"
# what that start claimed and gave up counts too
more=$(sed -nE 's/.*store write failed, stopped: ([0-9]+) ops abandoned.*/\1/p' "$WORK/run2.log")
abandoned=$(( abandoned + ${more:-0} ))

rm -f "$MNT/filler" "$MNT/filler2"
stats=$(IDLE_MS=3000 run_until_idle)
echo "after the space was freed: $stats"
topic_dump "$T.results" > "$WORK/results.json"
expect_eq "$(jq -r '.payload | fromjson | .op_id' "$WORK/results.json" | sort -u | wc -l)" "$JOBS" "logical jobs with a result"
expect_eq "$(jq -r .key "$WORK/results.json" | sort -u | wc -l)" "$JOBS" "distinct event_keys on the results topic"
expect_eq "$(jq -r '(.payload | fromjson | .op_id) + " " + .key' "$WORK/results.json" | sort -u | wc -l)" "$JOBS" "distinct (op_id, event_key) pairs"
expect_eq "$(jq -r 'select((.payload | fromjson | .outcome) != "fetched") | .key' "$WORK/results.json" | wc -l)" 0 "results that are not fetched"
fetches=$(origin_200s "$mark")
extra=$(( fetches - JOBS ))
echo "origin fetches $fetches, logical jobs $JOBS, extra $extra, ops abandoned $abandoned, results on the topic $(wc -l < "$WORK/results.json")"
(( extra >= 0 )) || fail "fewer fetches than logical jobs"
(( extra <= abandoned )) || fail "$extra extra origin fetches but only $abandoned ops were abandoned"
ok "extra origin fetches ($extra) <= ops abandoned ($abandoned)"
