#!/usr/bin/env bash
# Fetches the Apache Kafka broker (Scala 2.13 build) and its runtime dependencies
# from Maven Central with Maven into a cache folder, once.  Prints nothing when the
# cache is already complete.
#   KAFKA_VERSION   (default 3.9.1)
#   DEDUPD_CACHE    (default ~/.cache/dedupd)
set -euo pipefail
KAFKA_VERSION=${KAFKA_VERSION:-3.9.1}
CACHE=${DEDUPD_CACHE:-$HOME/.cache/dedupd}
dest="$CACHE/kafka-$KAFKA_VERSION/libs"
[ -f "$dest/.complete" ] && exit 0
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.dedupd</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
POM
echo "kafka-jars: fetching Apache Kafka $KAFKA_VERSION jars with Maven" >&2
( cd "$work" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$dest" -DincludeScope=runtime ) >&2
touch "$dest/.complete"
