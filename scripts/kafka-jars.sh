#!/usr/bin/env bash
# Fetches Apache Kafka brokers (Scala 2.13 build) and their runtime dependencies
# from Maven Central with Maven into a cache folder, once per version.  Prints
# nothing when a version's cache is already complete.
#   kafka-jars.sh [VERSION...]
# Without arguments: the local stack's broker (KAFKA_VERSION, default 3.9.1) and
# the broker of the Kafka 4.x smoke run (KAFKA4_VERSION, default 4.4.0: the
# newest 4.x the registry serves; scripts/smoke-kafka4.sh).
#   DEDUPD_CACHE    (default ~/.cache/dedupd): jars in $DEDUPD_CACHE/kafka-VERSION/libs
set -euo pipefail
CACHE=${DEDUPD_CACHE:-$HOME/.cache/dedupd}
# Kafka 4.x logs through log4j 2 (KIP-653) and ships no SLF4J binding in its
# Maven dependencies: this one routes the broker's SLF4J (1.7) calls to the
# log4j-core 2.x that kafka_2.13 4.4.0 depends on (same version).
LOG4J2_VERSION=${LOG4J2_VERSION:-2.25.5}

if [ "$#" -gt 0 ]; then versions=("$@")
else versions=("${KAFKA_VERSION:-3.9.1}" "${KAFKA4_VERSION:-4.4.0}"); fi

fetch() { # version
  local v=$1 dest work binding rc=0
  dest="$CACHE/kafka-$v/libs"
  [ -f "$dest/.complete" ] && return 0
  mkdir -p "$dest"
  case "$v" in
    [0-3].*) binding="<groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version>" ;;
    *) binding="<groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J2_VERSION</version>" ;;
  esac
  work=$(mktemp -d)
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.dedupd</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$v</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$v</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>$v</version></dependency>
    <dependency>$binding</dependency>
  </dependencies>
</project>
POM
  echo "kafka-jars: fetching Apache Kafka $v jars with Maven" >&2
  ( cd "$work" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$dest" -DincludeScope=runtime ) >&2 || rc=$?
  rm -rf "$work"
  [ "$rc" = 0 ] || { echo "kafka-jars: Maven could not fetch Apache Kafka $v" >&2; return "$rc"; }
  touch "$dest/.complete"
}

for v in "${versions[@]}"; do fetch "$v"; done
