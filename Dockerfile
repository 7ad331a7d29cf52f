# syntax=docker/dockerfile:1
#
# dedupd's image: built on Debian 12 with its -dev packages, run on debian:12-slim
# with the runtime libraries only, as the non-root user 10001 (what the Helm chart
# in helm/dedupd expects: runAsUser 10001, read-only root filesystem, the store on a
# volume at /var/lib/dedupd, the config at /etc/dedupd/dedupd.json).
#
#   docker build -t dedupd:0.1.0 .
#   docker run --rm -p 9464:9464 -e DEDUPD_BROKER__BOOTSTRAP_SERVERS=kafka:9092 dedupd:0.1.0
#
# The image ships an empty config ({} = every default; DEDUPD_* variables override);
# the chart mounts its ConfigMap over /etc/dedupd.

ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

# ---- build ---------------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# check/libsubunit-dev and zlib1g-dev: CMakeLists.txt also configures the unit tests
# and the test fixtures (only the dedupd target is built).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      librdkafka-dev librocksdb-dev libcurl4-openssl-dev libssl-dev \
      libjansson-dev libmicrohttpd-dev zlib1g-dev \
      check libsubunit-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY CMakeLists.txt ./
COPY include/ include/
COPY src/ src/
COPY tests/ tests/
COPY bench/ bench/
# RelWithDebInfo (-O2 -g, asserts on) is what the test suite runs; the debug
# symbols are stripped from the installed binary.
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build build --target dedupd -j"$(nproc)" \
 && install -D -m 0755 -s build/dedupd /out/usr/local/bin/dedupd \
 && /out/usr/local/bin/dedupd version

# ---- runtime --------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      librdkafka1 librocksdb7.8 libcurl4 libssl3 libjansson4 libmicrohttpd12 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log

# The user 10001 (numeric in USER, so that runAsNonRoot can be verified), its
# store directory, and a default config of every default.
RUN groupadd --system --gid 10001 dedupd \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /var/lib/dedupd --shell /usr/sbin/nologin dedupd \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/dedupd \
 && install -d -m 0755 /etc/dedupd \
 && printf '{}\n' > /etc/dedupd/dedupd.json \
 && chmod 0644 /etc/dedupd/dedupd.json

COPY --from=build /out/usr/local/bin/dedupd /usr/local/bin/dedupd

USER 10001:10001
WORKDIR /var/lib/dedupd
# Every shared library resolves, and the default config loads.
RUN dedupd version && dedupd config -c /etc/dedupd/dedupd.json --dump >/dev/null

LABEL org.opencontainers.image.title="dedupd" \
      org.opencontainers.image.description="Exactly-once Kafka sidecar for scraping fleets" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:12-slim"

# admin.listen: /healthz, /readyz, /metrics. The job API (api.listen,
# 127.0.0.1:9465) is for containers of the same pod and is not exposed.
EXPOSE 9464
# The first SIGTERM drains within shutdown.grace_ms (docker stop -t / Kubernetes'
# terminationGracePeriodSeconds must be longer); a second one exits at once.
STOPSIGNAL SIGTERM
ENTRYPOINT ["dedupd"]
CMD ["run", "-c", "/etc/dedupd/dedupd.json"]
