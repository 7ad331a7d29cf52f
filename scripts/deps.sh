#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the local stack need
# (clang, libclang-rt-14-dev, llvm: the ASan/UBSan build and the libFuzzer targets;
# valgrind: the unit tests under memcheck; see scripts/test.sh).
# Idempotent: quiet when everything is already installed.  Also fetches the Apache
# Kafka broker jars (see scripts/kafka-jars.sh: 3.9 for the local stack, 4.x for
# scripts/smoke-kafka4.sh) unless DEDUPD_SKIP_KAFKA_JARS=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

PKGS=(
  build-essential cmake pkg-config
  librdkafka-dev librocksdb-dev libcurl4-openssl-dev libssl-dev libjansson-dev
  check libsubunit-dev libmicrohttpd-dev zlib1g-dev
  nginx-light tinyproxy dante-server squid apache2-utils openssl passwd
  postgresql-doc-15
  kcat jq yq curl procps iproute2 psmisc
  maven openjdk-17-jre-headless
  prometheus
  clang libclang-rt-14-dev llvm valgrind
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# openjdk/maven may come from outside Debian's packages on this kind of machine:
# accept a working `java` and `mvn` on PATH instead.
filtered=()
for p in "${missing[@]}"; do
  case "$p" in
    prometheus) command -v promtool >/dev/null 2>&1 && continue ;;
    maven) command -v mvn >/dev/null 2>&1 && continue ;;
    openjdk-17-jre-headless) command -v java >/dev/null 2>&1 && continue ;;
  esac
  filtered+=("$p")
done
missing=("${filtered[@]}")

if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  # Packages such as nginx, squid and tinyproxy try to start a system-wide service
  # on install; the project runs its own instances on loopback instead.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/dedupd-apt.log 2>&1; then
    $SUDO apt-get update -qq >>/tmp/dedupd-apt.log 2>&1
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/dedupd-apt.log 2>&1 \
      || { tail -n 30 /tmp/dedupd-apt.log >&2; echo "deps: apt-get install failed" >&2; exit 1; }
  fi
  if [ "$created_policy" = 1 ]; then $SUDO rm -f "$policy"; fi
fi

# helm, for the chart tests (tests/helm): built from the Go module proxy, cached
# (about 9 minutes the first time on 2 cores, then instant).
if [ "${DEDUPD_SKIP_HELM:-0}" != 1 ]; then
  "$here/install-helm.sh" >/dev/null
fi

if [ "${DEDUPD_SKIP_KAFKA_JARS:-0}" != 1 ]; then
  "$here/kafka-jars.sh"
fi
