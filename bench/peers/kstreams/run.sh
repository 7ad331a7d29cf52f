#!/usr/bin/env bash
# bench/peers/kstreams/run.sh: the Kafka Streams dedup peer (README.md beside this).
# Builds target/kstreams-peer.jar if missing (Maven; offline once the dependencies
# are in ~/.m2: the first build fetches them), then runs it with the environment
# passed through: KAFKA_BOOTSTRAP (required), IN_TOPIC, OUT_TOPIC, GROUP,
# MAX_MESSAGES, IDLE_MS, GUARANTEE, STATE_DIR, STORE_CACHING, STREAMS_PROPS, TTL_MS.
# Stdout: the one JSON result line; stderr: logs.
#
# JVM options (state them with the result row): -Xms1g -Xmx1g -XX:+UseParallelGC
# (PEER_JVM_OPTS replaces them). RocksDB's memory is native, outside the heap.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jar=$here/target/kstreams-peer.jar
: "${KAFKA_BOOTSTRAP:?KAFKA_BOOTSTRAP is required}"
if [ ! -f "$jar" ] || [ "${PEER_REBUILD:-0}" = 1 ]; then
  echo "kstreams run.sh: building $jar" >&2
  # offline first (the cached dependencies), online if something is missing
  (cd "$here" && { mvn -q -B -o -T1 package >&2 || mvn -q -B -T1 package >&2; })
fi
read -r -a jvm <<<"${PEER_JVM_OPTS:--Xms1g -Xmx1g -XX:+UseParallelGC}"
exec java "${jvm[@]}" -jar "$jar"
