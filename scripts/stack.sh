#!/usr/bin/env bash
# The local test stack of dedupd (DESIGN.md section 8), all on loopback:
#   - Apache Kafka (KRaft, combined broker+controller, one node)  127.0.0.1:$KAFKA_PORT
#   - nginx as the origin, serving the PostgreSQL HTML docs under /docs/,
#     with limit_req -> 429 + Retry-After for the throttled exit       127.0.0.1:$ORIGIN_PORT
#   - one tinyproxy per HTTP exit address (listens and binds outgoing
#     connections on that address, so the origin log shows the exit)   $PROXY_EXIT_ADDRS:$PROXY_PORT
#   - dante SOCKS5 exit (no auth)                                        $SOCKS_ADDR:$SOCKS_PORT
#   - the same origin over TLS, self-signed certificate made once into the
#     run dir (nginx/tls/origin.crt, CN and SAN 127.0.0.1 and localhost)   127.0.0.1:$ORIGIN_TLS_PORT
#   - squid HTTP exit with basic auth (htpasswd, two users whose credentials
#     hold hard bytes), outgoing address = listen address                  $SQUID_ADDR:$SQUID_PORT
#   - dante SOCKS5 exit with username auth (RFC 1929) against a system
#     user that `up` creates if missing (needs root)                       $SOCKS_AUTH_ADDR:$SOCKS_AUTH_PORT
#   - the provider-API stand-in (tests/fixtures/provider_api.c, from the
#     build tree; skipped with a message when not built): sessions s1..sN
#     mapped to the tinyproxy exits, bearer key                            127.0.0.1:$PROVIDER_API_PORT
#
# Credentials never appear in `env` output or logs: `env` names files in
# $STACK_DIR/secrets/ that hold the exact bytes (no trailing newline).
# tests/fixtures/verify_stack.sh checks these parts on the wire.
#
# Usage: scripts/stack.sh up|down [--purge]|status|env|topics-reset
#   up            start whatever is not running yet (idempotent), wait until every
#                 part answers, print a summary
#   down          stop what `up` started (by the pid files in the run dir);
#                 --purge also removes the run dir (Kafka data included)
#   status        up/down of each part (exit 1 if any part is down)
#   env           shell assignments for tests: eval "$(scripts/stack.sh env)"
#   topics-reset  delete and recreate the stack's topics (empty topics).  Tests that
#                 only need isolation can use their own consumer group instead.
#   kafka-restart [SECONDS]  stop the broker cleanly, keep it down SECONDS, start
#                 it again with its data (broker outage tests)
#   kafka-up      start the broker alone (no other part, no topics) and wait until it
#                 answers; kafka-down stops it.  With another run dir, version and
#                 ports this is a second broker beside the stack, e.g. the 4.x one
#                 of scripts/smoke-kafka4.sh:
#                   DEDUPD_STACK_DIR=/tmp/x KAFKA_VERSION=4.4.0 KAFKA_PORT=19192 \
#                   KAFKA_CONTROLLER_PORT=19193 scripts/stack.sh kafka-up
#
# Environment (defaults):
#   DEDUPD_STACK_DIR=/tmp/dedupd-stack   run dir: configs, logs, pid files, Kafka data
#   DEDUPD_CACHE=~/.cache/dedupd         where scripts/kafka-jars.sh put the jars
#   KAFKA_VERSION=3.9.1                  the broker (from 4.0 on it logs through
#                 log4j 2: the run dir then gets log4j2 configurations)
#   KAFKA_LIBS=$DEDUPD_CACHE/kafka-$KAFKA_VERSION/libs
#   KAFKA_PORT=19092 KAFKA_CONTROLLER_PORT=19093 KAFKA_HEAP=512m
#   KAFKA_KEEP_DATA=0                    1: a broker started again keeps its data.  By
#                 default `up` starting the broker (not running) begins from empty
#                 data, a new cluster (new cluster.id: state kept for the old one,
#                 such as the demo's, can tell): after a kill -9 a broker holding the
#                 thousands of partitions a few test runs leave spends minutes in
#                 log recovery.
#   TOPIC_PARTITIONS=4
#   ORIGIN_PORT=18080 THROTTLE_RATE=20 (requests/s) THROTTLE_BURST=10
#   PROXY_PORT=18888 PROXY_EXIT_ADDRS="127.0.0.2 127.0.0.3"
#   THROTTLED_EXIT=<first of PROXY_EXIT_ADDRS>   client address nginx rate-limits
#   SOCKS_ADDR=127.0.0.4 SOCKS_PORT=11080 (SOCKS_ENABLE=0 leaves dante out)
#   ORIGIN_TLS_PORT=18443
#   SQUID_ADDR=127.0.0.5 SQUID_PORT=13128 (SQUID_ENABLE=0 leaves squid out)
#   SQUID_USER=dd-user.1 SQUID_PASSWORD='p@ss:w%rd%41/ é'       (é is UTF-8 c3 a9)
#   SQUID_USER2='acct%41x' SQUID_PASSWORD2='qwerty%4b!'          (case C-19 K2)
#   SOCKS_AUTH_ADDR=127.0.0.6 SOCKS_AUTH_PORT=11081 (SOCKS_AUTH_ENABLE=0 leaves it out)
#   SOCKS_AUTH_USER=dduser SOCKS_AUTH_PASSWORD='s0cks@:%41/ é'  (system users)
#   SOCKS_AUTH_USER2='dd%41x' SOCKS_AUTH_PASSWORD2='qwerty%4b!'  (case C-19 K2)
#   PROVIDER_API_PORT=18090 PROVIDER_API_KEY=dd-local-provider-key PROVIDER_API_SESSIONS=8
#   PROVIDER_API_BIN=<repo>/build/tests/fixtures/provider_api
#   STACK_WAIT=90                        seconds to wait for Kafka to answer
set -euo pipefail

STACK_DIR=${DEDUPD_STACK_DIR:-/tmp/dedupd-stack}
case "$STACK_DIR" in /*) ;; *) STACK_DIR="$PWD/$STACK_DIR" ;; esac
CACHE=${DEDUPD_CACHE:-$HOME/.cache/dedupd}
KAFKA_VERSION=${KAFKA_VERSION:-3.9.1}
KAFKA_LIBS=${KAFKA_LIBS:-$CACHE/kafka-$KAFKA_VERSION/libs}
KAFKA_HOST=127.0.0.1
KAFKA_PORT=${KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-19093}
KAFKA_HEAP=${KAFKA_HEAP:-512m}
TOPIC_PARTITIONS=${TOPIC_PARTITIONS:-4}
ORIGIN_HOST=127.0.0.1
ORIGIN_PORT=${ORIGIN_PORT:-18080}
THROTTLE_RATE=${THROTTLE_RATE:-20}
THROTTLE_BURST=${THROTTLE_BURST:-10}
PROXY_PORT=${PROXY_PORT:-18888}
PROXY_EXIT_ADDRS=${PROXY_EXIT_ADDRS:-127.0.0.2 127.0.0.3}
read -r -a EXITS <<<"$PROXY_EXIT_ADDRS"
THROTTLED_EXIT=${THROTTLED_EXIT:-${EXITS[0]:-127.0.0.2}}
SOCKS_ADDR=${SOCKS_ADDR:-127.0.0.4}
SOCKS_PORT=${SOCKS_PORT:-11080}
SOCKS_ENABLE=${SOCKS_ENABLE:-1}
STACK_WAIT=${STACK_WAIT:-90}
DOCROOT=${ORIGIN_DOCROOT:-/usr/share/doc/postgresql-doc-15/html}
ORIGIN_TLS_PORT=${ORIGIN_TLS_PORT:-18443}
# Credentials with bytes that URL decoding, splitting at ':' or '@', or a
# Latin-1/UTF-8 conversion would alter: '%41' and '%4b' decode to 'A' and 'K'
# (libcurl before 8.8, curl issue 13265), '%rd' and '%/' are not escapes.
SQUID_ADDR=${SQUID_ADDR:-127.0.0.5}
SQUID_PORT=${SQUID_PORT:-13128}
SQUID_ENABLE=${SQUID_ENABLE:-1}
SQUID_USER=${SQUID_USER:-dd-user.1}
SQUID_PASSWORD=${SQUID_PASSWORD:-$'p@ss:w%rd%41/ \xc3\xa9'}
SQUID_USER2=${SQUID_USER2:-acct%41x}
SQUID_PASSWORD2=${SQUID_PASSWORD2:-qwerty%4b!}
SOCKS_AUTH_ADDR=${SOCKS_AUTH_ADDR:-127.0.0.6}
SOCKS_AUTH_PORT=${SOCKS_AUTH_PORT:-11081}
SOCKS_AUTH_ENABLE=${SOCKS_AUTH_ENABLE:-1}
SOCKS_AUTH_USER=${SOCKS_AUTH_USER:-dduser}
SOCKS_AUTH_PASSWORD=${SOCKS_AUTH_PASSWORD:-$'s0cks@:%41/ \xc3\xa9'}
SOCKS_AUTH_USER2=${SOCKS_AUTH_USER2:-dd%41x}
SOCKS_AUTH_PASSWORD2=${SOCKS_AUTH_PASSWORD2:-qwerty%4b!}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROVIDER_API_BIN=${PROVIDER_API_BIN:-$REPO/build/tests/fixtures/provider_api}
PROVIDER_API_HOST=127.0.0.1
PROVIDER_API_PORT=${PROVIDER_API_PORT:-18090}
PROVIDER_API_KEY=${PROVIDER_API_KEY:-dd-local-provider-key}
PROVIDER_API_SESSIONS=${PROVIDER_API_SESSIONS:-8}

NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
TINYPROXY_BIN=${TINYPROXY_BIN:-/usr/bin/tinyproxy}
DANTED_BIN=${DANTED_BIN:-/usr/sbin/danted}
SQUID_BIN=${SQUID_BIN:-/usr/sbin/squid}
SQUID_NCSA=${SQUID_NCSA:-/usr/lib/squid/basic_ncsa_auth}

# Topics created by `up` (TOPIC_PARTITIONS partitions each, replication factor 1);
# topic_config gives the extra --config of a topic.  The changelog
# (<consumer.group_id>-changelog) is created by `dedupd run` itself.
TOPICS=(scrape.jobs scrape.results scrape.conflicts scrape.jobs.dlq)
topic_config() { true; }

log() { printf 'stack: %s\n' "$*" >&2; }
die() { printf 'stack: error: %s\n' "$*" >&2; exit 1; }
# die with the tail of a log file
die_log() { # msg logfile...
  local msg=$1; shift
  printf 'stack: error: %s\n' "$msg" >&2
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    printf -- '---- tail of %s ----\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
  exit 1
}

# ---------------------------------------------------------------- processes
# pid_alive pidfile pattern: the pid in the file runs and its command line
# matches pattern (guards against a reused pid).
pid_of() { [ -s "$1" ] && tr -dc '0-9' <"$1"; }
pid_alive() {
  local pid
  pid=$(pid_of "$1") || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}
# stop_pid pidfile pattern name [timeout]
stop_pid() {
  local pf=$1 pat=$2 name=$3 t=${4:-30} pid i
  if ! pid_alive "$pf" "$pat"; then rm -f "$pf"; return 0; fi
  pid=$(pid_of "$pf")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < t * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) did not exit in ${t}s, killing"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$pf"
  log "$name stopped"
}
# Start a foreground program detached from the caller's session (so that killing
# the caller's process group does not take the stack down); write its pid.
spawn() { # pidfile logfile cmd...
  local pf=$1 lf=$2; shift 2
  setsid nohup "$@" </dev/null >>"$lf" 2>&1 9>&- &
  echo $! >"$pf"
}
port_busy() { # addr port
  ss -Hltn "src $1:$2" 2>/dev/null | grep -q . || ss -Hltn "src 0.0.0.0:$2" 2>/dev/null | grep -q .
}
# write_if_changed file: stdin -> file; returns 0 if the content changed
write_if_changed() {
  local f=$1 tmp
  tmp=$(mktemp "$f.XXXXXX")
  cat >"$tmp"
  if [ -f "$f" ] && cmp -s "$tmp" "$f"; then rm -f "$tmp"; return 1; fi
  mv -f "$tmp" "$f"
  return 0
}

# ---------------------------------------------------------------- probes
HEALTH_URL="http://$ORIGIN_HOST:$ORIGIN_PORT/__health"
kafka_answers() {
  local n
  # (kcat waits its whole -m timeout on a refused connection: check the port first)
  ss -Hltn "src $KAFKA_HOST:$KAFKA_PORT" 2>/dev/null | grep -q . || return 1
  n=$(timeout 10 kcat -b "$KAFKA_HOST:$KAFKA_PORT" -L -J -m 2 2>/dev/null | jq -r '.brokers | length' 2>/dev/null) || return 1
  [ "${n:-0}" -ge 1 ]
}
origin_answers() { curl -fsS -o /dev/null --max-time 3 "$HEALTH_URL" 2>/dev/null; }
proxy_answers() { curl -fsS -o /dev/null --max-time 3 -x "http://$1:$PROXY_PORT" "$HEALTH_URL" 2>/dev/null; }
socks_answers() { curl -fsS -o /dev/null --max-time 3 --socks5-hostname "$SOCKS_ADDR:$SOCKS_PORT" "$HEALTH_URL" 2>/dev/null; }
origin_tls_answers() {
  curl -fsS -o /dev/null --max-time 3 --cacert "$TLS_CRT" "https://$ORIGIN_HOST:$ORIGIN_TLS_PORT/__health" 2>/dev/null
}
# wait_for seconds pidfile pattern probe args...
wait_for() {
  local secs=$1 pf=$2 pat=$3; shift 3
  local start=$SECONDS deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    "$@" && return 0
    # (a daemon may write its pid file a moment after it was started)
    ((SECONDS - start < 2)) || pid_alive "$pf" "$pat" || return 2
    sleep 0.2
  done
  return 1
}

# ---------------------------------------------------------------- kafka
KDIR=$STACK_DIR/kafka
KPID=$KDIR/kafka.pid
KPAT=kafka.Kafka
# Kafka 4.x logs through log4j 2 (KIP-653), earlier versions through reload4j
# (log4j 1).  kafka_log4j_opt tools|server: the JVM option that names the run
# dir's logging configuration for the broker's version.
kafka_log4j2() { [ "${KAFKA_VERSION%%.*}" -ge 4 ]; }
kafka_log4j_opt() {
  local f=log4j
  [ "$1" = tools ] && f=tools-log4j
  if kafka_log4j2; then echo "-Dlog4j2.configurationFile=$KDIR/${f}2.properties"
  else echo "-Dlog4j.configuration=file:$KDIR/$f.properties"; fi
}
java_tool() { # class args... (short-lived JVM tuned for start-up time)
  local cls=$1; shift
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    "$(kafka_log4j_opt tools)" \
    -cp "$KAFKA_LIBS/*" "$cls" "$@"
}
# The same two configurations for log4j 2 (Kafka 4.x).  kafka.network also says
# at INFO why the broker closed a client's connection (a request version it no
# longer supports, a corrupt batch): scripts/smoke-kafka4.sh reads that.
kafka_log4j2_config() {
  cat >"$KDIR/tools-log4j2.properties" <<EOF
status = warn
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
EOF
  cat >"$KDIR/log4j2.properties" <<EOF
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $KDIR/logs/server.log
appender.file.filePattern = $KDIR/logs/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 2
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = INFO
logger.brokerserver.name = kafka.server.BrokerServer
logger.brokerserver.level = INFO
logger.controllerserver.name = kafka.server.ControllerServer
logger.controllerserver.level = INFO
logger.network.name = kafka.network
logger.network.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}
kafka_log4j1_config() {
  cat >"$KDIR/tools-log4j.properties" <<EOF
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
  write_if_changed "$KDIR/log4j.properties" <<EOF || true
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$KDIR/logs/server.log
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
log4j.logger.kafka.server.ControllerServer=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
EOF
}
kafka_config() {
  mkdir -p "$KDIR/data" "$KDIR/logs"
  if kafka_log4j2; then kafka_log4j2_config; else kafka_log4j1_config; fi
  write_if_changed "$KDIR/server.properties" <<EOF
# dedupd test broker: KRaft, combined mode, one node, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KDIR/data
num.partitions=$TOPIC_PARTITIONS
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
group.initial.rebalance.delay.ms=0
num.network.threads=3
num.io.threads=4
log.retention.hours=168
log.segment.bytes=268435456
log.cleaner.enable=true
delete.topic.enable=true
EOF
}
# kafka_start: start the broker unless it runs; kafka_wait: wait until it answers.
kafka_start() {
  [ -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ] ||
    die "Kafka jars not found in $KAFKA_LIBS (run scripts/kafka-jars.sh)"
  local changed=0
  kafka_config && changed=1 || true
  if pid_alive "$KPID" "$KPAT"; then
    [ "$changed" = 1 ] || return 0
    log "kafka configuration changed, restarting"
    stop_pid "$KPID" "$KPAT" kafka 60
  fi
  port_busy "$KAFKA_HOST" "$KAFKA_PORT" &&
    die "port $KAFKA_HOST:$KAFKA_PORT is in use by another process (set KAFKA_PORT)"
  port_busy "$KAFKA_HOST" "$KAFKA_CONTROLLER_PORT" &&
    die "port $KAFKA_HOST:$KAFKA_CONTROLLER_PORT is in use by another process (set KAFKA_CONTROLLER_PORT)"
  if [ "${KAFKA_KEEP_DATA:-0}" != 1 ] && [ -d "$KDIR/data" ] &&
     [ -n "$(ls -A "$KDIR/data" 2>/dev/null)" ]; then
    log "kafka: starting from empty data (was $(du -sh "$KDIR/data" 2>/dev/null | cut -f1); KAFKA_KEEP_DATA=1 keeps it)"
    rm -rf "$KDIR/data" "$KDIR/cluster.id"
    mkdir -p "$KDIR/data"
  fi
  if [ ! -f "$KDIR/data/meta.properties" ]; then
    [ -s "$KDIR/cluster.id" ] || java_tool kafka.tools.StorageTool random-uuid >"$KDIR/cluster.id"
    java_tool kafka.tools.StorageTool format -t "$(cat "$KDIR/cluster.id")" \
      -c "$KDIR/server.properties" --ignore-formatted >"$KDIR/logs/format.log" 2>&1 ||
      die_log "kafka storage format failed" "$KDIR/logs/format.log"
  fi
  : >"$KDIR/logs/stdout.log"
  spawn "$KPID" "$KDIR/logs/stdout.log" \
    java "-Xmx$KAFKA_HEAP" "-Xms$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true "-Dkafka.logs.dir=$KDIR/logs" \
    "$(kafka_log4j_opt server)" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$KDIR/server.properties"
}
kafka_wait() {
  local rc=0
  wait_for "$STACK_WAIT" "$KPID" "$KPAT" kafka_answers || rc=$?
  case $rc in
    0) ;;
    2) die_log "kafka exited during start-up" "$KDIR/logs/stdout.log" "$KDIR/logs/server.log" ;;
    *) die_log "kafka did not answer on $KAFKA_HOST:$KAFKA_PORT within ${STACK_WAIT}s" \
         "$KDIR/logs/stdout.log" "$KDIR/logs/server.log" ;;
  esac
}
existing_topics() {
  timeout 15 kcat -b "$KAFKA_HOST:$KAFKA_PORT" -L -J -m 5 2>/dev/null |
    jq -r '.topics[] | select((.error // "") == "") | .topic'
}
create_topics() { # creates the missing ones, one JVM per topic, in parallel
  local have t i try missing=() pids=() cfg
  for try in 1 2 3; do
    have=$(existing_topics) || have=""
    missing=()
    for t in "${TOPICS[@]}"; do
      grep -qxF "$t" <<<"$have" || missing+=("$t")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    pids=()
    for t in "${missing[@]}"; do
      cfg=$(topic_config "$t")
      java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_HOST:$KAFKA_PORT" \
        --create --if-not-exists --topic "$t" --partitions "$TOPIC_PARTITIONS" \
        --replication-factor 1 ${cfg:+--config "$cfg"} >"$KDIR/logs/topic-$t.log" 2>&1 &
      pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    sleep 0.5
  done
  have=$(existing_topics) || have=""
  for t in "${TOPICS[@]}"; do
    grep -qxF "$t" <<<"$have" || die_log "could not create topic $t" "$KDIR/logs/topic-$t.log"
  done
}
topics_reset() {
  kafka_answers || die "kafka is not running (scripts/stack.sh up)"
  local re t i have left
  re=$(printf '%s|' "${TOPICS[@]}" | sed 's/\./\\./g; s/|$//')
  java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_HOST:$KAFKA_PORT" \
    --delete --if-exists --topic "^($re)\$" >"$KDIR/logs/topics-delete.log" 2>&1 ||
    die_log "topic deletion failed" "$KDIR/logs/topics-delete.log"
  for ((i = 0; i < 150; i++)); do
    have=$(existing_topics) || have=""
    left=0
    for t in "${TOPICS[@]}"; do grep -qxF "$t" <<<"$have" && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.2
  done
  create_topics
  log "topics recreated: ${TOPICS[*]}"
}

# ---------------------------------------------------------------- nginx
NDIR=$STACK_DIR/nginx
NPID=$NDIR/nginx.pid
NPAT=nginx
TLS_CRT=$NDIR/tls/origin.crt
TLS_KEY=$NDIR/tls/origin.key
# The TLS origin's self-signed certificate, made once (kept while both files
# exist); returns 0 if it made one (a running nginx must then reload).
tls_cert() {
  [ -s "$TLS_CRT" ] && [ -s "$TLS_KEY" ] && return 1
  mkdir -p "$NDIR/tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=$ORIGIN_HOST" -addext "subjectAltName=IP:$ORIGIN_HOST,DNS:localhost" \
    -keyout "$TLS_KEY.tmp" -out "$TLS_CRT.tmp" >"$NDIR/tls/openssl.log" 2>&1 ||
    die_log "openssl could not make the origin's certificate" "$NDIR/tls/openssl.log"
  chmod 600 "$TLS_KEY.tmp"
  mv -f "$TLS_KEY.tmp" "$TLS_KEY"
  mv -f "$TLS_CRT.tmp" "$TLS_CRT"
  log "made a self-signed certificate for the TLS origin: $TLS_CRT"
  return 0
}
nginx_config() {
  mkdir -p "$NDIR/tmp" "$NDIR/html"
  printf 'ok\n' >"$NDIR/html/__health"
  printf '<html><body><h1>429 Too Many Requests</h1></body></html>\n' >"$NDIR/html/__429.html"
  local user_line=""
  [ "$(id -u)" = 0 ] && user_line="user root root;"
  write_if_changed "$NDIR/nginx.conf" <<EOF
# dedupd test origin (generated by scripts/stack.sh)
$user_line
daemon on;
worker_processes 2;
pid $NPID;
error_log $NDIR/error.log warn;
worker_rlimit_nofile 16384;
events { worker_connections 8192; }
http {
  types {
    text/html html htm;
    text/css css;
    image/svg+xml svg;
    text/plain txt;
  }
  default_type application/octet-stream;
  client_body_temp_path $NDIR/tmp/body;
  proxy_temp_path $NDIR/tmp/proxy;
  fastcgi_temp_path $NDIR/tmp/fastcgi;
  uwsgi_temp_path $NDIR/tmp/uwsgi;
  scgi_temp_path $NDIR/tmp/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 30;
  keepalive_requests 100000;
  server_tokens off;
  open_file_cache max=4096 inactive=60s;

  # client address, request line, status, body bytes
  log_format dd '\$remote_addr "\$request" \$status \$body_bytes_sent';
  access_log $NDIR/access.log dd;

  # Only the throttled exit gets a non-empty key; empty keys are not limited.
  # The key is the exit's address and the request's t= tag (the test or run
  # that sent it: tests/integration/lib.sh, bench/gen_jobs.sh), so tests that
  # run at once (scripts/test.sh runs ctest two at a time) never share a
  # bucket: each meets the throttle as if it ran alone.
  map \$remote_addr \$dd_throttle_key {
    default "";
    "$THROTTLED_EXIT" "\$binary_remote_addr\$arg_t";
  }
  limit_req_zone \$dd_throttle_key zone=dd_throttle:1m rate=${THROTTLE_RATE}r/s;
  limit_req_status 429;
  limit_req_log_level info;

  server {
    listen $ORIGIN_HOST:$ORIGIN_PORT reuseport backlog=4096;
    # the same locations over TLS (self-signed: clients must trust the cert)
    listen $ORIGIN_HOST:$ORIGIN_TLS_PORT ssl backlog=4096;
    ssl_certificate $TLS_CRT;
    ssl_certificate_key $TLS_KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:dd_tls:1m;
    server_name _;
    root $NDIR/html;

    location /docs/ {
      alias $DOCROOT/;
      index index.html;
      limit_req zone=dd_throttle burst=$THROTTLE_BURST nodelay;
      error_page 429 /__429.html;
    }
    # The same pages, sent slowly (SLOW_RATE bytes/s per request), so that
    # tests can have fetches in flight when they kill dedupd.
    location /slow/ {
      alias $DOCROOT/;
      limit_rate ${SLOW_RATE:-16k};
    }
    location = /__429.html {
      internal;
      add_header Retry-After 1 always;
      add_header Cache-Control no-store always;
    }
    location = /__health {
      access_log off;
      default_type text/plain;
    }
    location / { return 404; }
  }
}
EOF
}
pages_list() {
  (cd "$DOCROOT" && find . -maxdepth 1 -type f -name '*.html' -printf '%f\n') |
    LC_ALL=C sort | sed "s|^|http://$ORIGIN_HOST:$ORIGIN_PORT/docs/|" |
    write_if_changed "$STACK_DIR/pages.txt" || true
}
nginx_up() {
  [ -x "$NGINX_BIN" ] || die "nginx not found at $NGINX_BIN (run scripts/deps.sh)"
  [ -f "$DOCROOT/index.html" ] || die "origin pages not found in $DOCROOT (postgresql-doc-15)"
  local changed=0
  tls_cert && changed=1 || true
  nginx_config && changed=1 || true
  pages_list
  "$NGINX_BIN" -t -q -c "$NDIR/nginx.conf" -p "$NDIR" -e "$NDIR/error.log" 2>"$NDIR/configtest.log" ||
    die_log "nginx configuration test failed" "$NDIR/configtest.log"
  if pid_alive "$NPID" "$NPAT"; then
    if [ "$changed" = 1 ]; then
      log "nginx configuration changed, reloading"
      "$NGINX_BIN" -c "$NDIR/nginx.conf" -p "$NDIR" -e "$NDIR/error.log" -s reload
      sleep 0.3
    fi
  else
    port_busy "$ORIGIN_HOST" "$ORIGIN_PORT" &&
      die "port $ORIGIN_HOST:$ORIGIN_PORT is in use by another process (set ORIGIN_PORT)"
    port_busy "$ORIGIN_HOST" "$ORIGIN_TLS_PORT" &&
      die "port $ORIGIN_HOST:$ORIGIN_TLS_PORT is in use by another process (set ORIGIN_TLS_PORT)"
    "$NGINX_BIN" -c "$NDIR/nginx.conf" -p "$NDIR" -e "$NDIR/error.log" 2>>"$NDIR/error.log" 9>&- ||
      die_log "nginx failed to start" "$NDIR/error.log"
  fi
  wait_for 10 "$NPID" "$NPAT" origin_answers ||
    die_log "origin (nginx) does not answer on $ORIGIN_HOST:$ORIGIN_PORT" "$NDIR/error.log"
  wait_for 10 "$NPID" "$NPAT" origin_tls_answers ||
    die_log "TLS origin (nginx) does not answer on $ORIGIN_HOST:$ORIGIN_TLS_PORT" "$NDIR/error.log"
}

# ---------------------------------------------------------------- tinyproxy
TDIR=$STACK_DIR/tinyproxy
TPAT=tinyproxy
tinyproxy_config() { # addr
  local a=$1 user_lines=""
  [ "$(id -u)" = 0 ] && user_lines=$'User nobody\nGroup nogroup'
  write_if_changed "$TDIR/$a.conf" <<EOF
# dedupd test proxy exit $a (generated by scripts/stack.sh)
$user_lines
Listen $a
Port $PROXY_PORT
Bind $a
Timeout 120
MaxClients 200
Allow 127.0.0.0/8
ConnectPort $ORIGIN_PORT
ConnectPort $ORIGIN_TLS_PORT
ConnectPort 443
DisableViaHeader Yes
LogFile "$TDIR/$a.log"
LogLevel Notice
EOF
}
tinyproxy_up() { # addr
  local a=$1 pf=$TDIR/$1.pid changed=0 rc=0
  [ -x "$TINYPROXY_BIN" ] || die "tinyproxy not found at $TINYPROXY_BIN (run scripts/deps.sh)"
  mkdir -p "$TDIR"
  tinyproxy_config "$a" && changed=1 || true
  # the log file is opened after dropping privileges: let the user write it
  touch "$TDIR/$a.log"
  [ "$(id -u)" = 0 ] && chown nobody:nogroup "$TDIR/$a.log"
  if pid_alive "$pf" "$TPAT"; then
    if [ "$changed" = 1 ]; then
      log "tinyproxy $a configuration changed, restarting"
      stop_pid "$pf" "$TPAT" "tinyproxy $a" 10
    elif proxy_answers "$a"; then
      return 0
    fi
  fi
  if ! pid_alive "$pf" "$TPAT"; then
    port_busy "$a" "$PROXY_PORT" && die "port $a:$PROXY_PORT is in use by another process (set PROXY_PORT)"
    spawn "$pf" "$TDIR/$a.stdout.log" "$TINYPROXY_BIN" -d -c "$TDIR/$a.conf"
  fi
  wait_for 10 "$pf" "$TPAT" proxy_answers "$a" || rc=$?
  [ "$rc" = 0 ] || die_log "tinyproxy exit $a:$PROXY_PORT does not answer" \
    "$TDIR/$a.stdout.log" "$TDIR/$a.log"
}

# ---------------------------------------------------------------- dante
DDIR=$STACK_DIR/dante
DPID=$DDIR/danted.pid
DPAT=danted
dante_config() {
  mkdir -p "$DDIR"
  write_if_changed "$DDIR/danted.conf" <<EOF
# dedupd test SOCKS5 exit (generated by scripts/stack.sh)
logoutput: $DDIR/danted.log
errorlog: $DDIR/danted.log
internal: $SOCKS_ADDR port = $SOCKS_PORT
external: $SOCKS_ADDR
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
timeout.negotiate: 30
timeout.io: 300
client pass {
  from: 127.0.0.0/8 to: 127.0.0.0/8
  log: error
}
socks pass {
  from: 127.0.0.0/8 to: 127.0.0.0/8
  command: connect
  log: error
}
socks block {
  from: 0.0.0.0/0 to: 0.0.0.0/0
  log: connect error
}
EOF
}
dante_up() {
  [ "$SOCKS_ENABLE" = 1 ] || return 0
  [ -x "$DANTED_BIN" ] || die "danted not found at $DANTED_BIN (run scripts/deps.sh)"
  local changed=0 rc=0
  dante_config && changed=1 || true
  if pid_alive "$DPID" "$DPAT"; then
    if [ "$changed" = 1 ]; then
      log "dante configuration changed, restarting"
      stop_pid "$DPID" "$DPAT" dante 10
    elif socks_answers; then
      return 0
    fi
  fi
  if ! pid_alive "$DPID" "$DPAT"; then
    port_busy "$SOCKS_ADDR" "$SOCKS_PORT" &&
      die "port $SOCKS_ADDR:$SOCKS_PORT is in use by another process (set SOCKS_PORT)"
    # foreground (no -D); the pid file is written by danted itself too
    spawn "$DPID" "$DDIR/danted.stdout.log" "$DANTED_BIN" -f "$DDIR/danted.conf" -p "$DDIR/danted.pid.self"
  fi
  wait_for 10 "$DPID" "$DPAT" socks_answers || rc=$?
  [ "$rc" = 0 ] || die_log "dante SOCKS5 exit $SOCKS_ADDR:$SOCKS_PORT does not answer" \
    "$DDIR/danted.stdout.log" "$DDIR/danted.log"
}

# ---------------------------------------------------------------- secrets
# Credential files for tests: exact bytes, no trailing newline, mode 0600.
SECRETS=$STACK_DIR/secrets
secret_file() { # name value; returns 0 if the file changed
  mkdir -p "$SECRETS"
  chmod 700 "$SECRETS"
  printf '%s' "$2" | write_if_changed "$SECRETS/$1" # (mktemp makes it 0600)
}
check_cred() { # what value: 1..255 bytes, no NUL (bash cannot hold one), no newline
  local n
  n=$(printf '%s' "$2" | LC_ALL=C wc -c)
  [ "$n" -ge 1 ] && [ "$n" -le 255 ] || die "$1 must be 1..255 bytes (RFC 1929 limit), has $n"
  case $2 in *$'\n'* | *$'\r'*) die "$1 must not contain CR or LF" ;; esac
}

# ---------------------------------------------------------------- squid
SQDIR=$STACK_DIR/squid
SQPID=$SQDIR/squid.pid
SQPAT=squid
SQUID_PROBE=$SECRETS/squid-probe.header
squid_answers() {
  curl -fsS -o /dev/null --max-time 3 -x "http://$SQUID_ADDR:$SQUID_PORT" -H "@$SQUID_PROBE" \
    "$HEALTH_URL" 2>/dev/null
}
# The htpasswd file, apr1-MD5 (bcrypt would check only the first 72 bytes);
# rewritten only when a user or password changed, so that a running
# basic_ncsa_auth (which reloads the file on change) keeps it.
squid_htpasswd() { # returns 0 if it changed
  local f=$SQDIR/htpasswd
  if [ -f "$f" ] && [ "$(wc -l <"$f")" = 2 ] &&
    htpasswd -v -i "$f" "$SQUID_USER" <"$SECRETS/squid-password" >/dev/null 2>&1 &&
    htpasswd -v -i "$f" "$SQUID_USER2" <"$SECRETS/squid-password2" >/dev/null 2>&1; then
    return 1
  fi
  rm -f "$f.new"
  htpasswd -c -i -m "$f.new" "$SQUID_USER" <"$SECRETS/squid-password" >"$SQDIR/htpasswd.log" 2>&1 &&
    htpasswd -i -m "$f.new" "$SQUID_USER2" <"$SECRETS/squid-password2" >>"$SQDIR/htpasswd.log" 2>&1 ||
    die_log "htpasswd failed" "$SQDIR/htpasswd.log"
  chmod 640 "$f.new"
  [ "$(id -u)" = 0 ] && chgrp proxy "$f.new"
  mv -f "$f.new" "$f"
  return 0
}
squid_config() {
  local user_lines=""
  [ "$(id -u)" = 0 ] && user_lines=$'cache_effective_user proxy\ncache_effective_group proxy'
  write_if_changed "$SQDIR/squid.conf" <<EOF
# dedupd test HTTP exit with basic auth (generated by scripts/stack.sh)
$user_lines
http_port $SQUID_ADDR:$SQUID_PORT
icp_port 0
htcp_port 0
snmp_port 0
pinger_enable off
tcp_outgoing_address $SQUID_ADDR
visible_hostname dedupd-squid
httpd_suppress_version_string on
via off
forwarded_for delete
shutdown_lifetime 0 seconds
pid_filename $SQDIR/squid.pid.self
coredump_dir $SQDIR
netdb_filename none
cache_log $SQDIR/cache.log
logfile_rotate 0
# time, client, authenticated user, status, squid result, method, URL, server
logformat dd %ts.%03tu %>a %un %>Hs %Ss %rm %ru %<a
access_log stdio:$SQDIR/access.log logformat=dd
strip_query_terms off
cache deny all
cache_mem 8 MB

# Credentials go to the helper as they arrived: no lower-casing of the user
# name, no Latin-1 to UTF-8 conversion.
auth_param basic program $SQUID_NCSA $SQDIR/htpasswd
auth_param basic children 4 startup=1 idle=1
auth_param basic realm dedupd-test-exit
auth_param basic credentialsttl 30 seconds
auth_param basic casesensitive on
auth_param basic utf8 off

acl localsrc src 127.0.0.0/8
acl localdst dst 127.0.0.0/8
acl origin_ports port $ORIGIN_PORT $ORIGIN_TLS_PORT
acl CONNECT method CONNECT
acl authed proxy_auth REQUIRED
http_access deny !localsrc
http_access deny !authed
http_access deny !localdst
http_access deny CONNECT !origin_ports
http_access allow authed
http_access deny all
EOF
}
squid_up() {
  [ "$SQUID_ENABLE" = 1 ] || return 0
  [ -x "$SQUID_BIN" ] || die "squid not found at $SQUID_BIN (run scripts/deps.sh)"
  [ -x "$SQUID_NCSA" ] || die "basic_ncsa_auth not found at $SQUID_NCSA (run scripts/deps.sh)"
  command -v htpasswd >/dev/null || die "htpasswd not found (apache2-utils; run scripts/deps.sh)"
  check_cred SQUID_USER "$SQUID_USER"
  check_cred SQUID_PASSWORD "$SQUID_PASSWORD"
  check_cred SQUID_USER2 "$SQUID_USER2"
  check_cred SQUID_PASSWORD2 "$SQUID_PASSWORD2"
  case $SQUID_USER$SQUID_USER2 in *:*) die "squid user names cannot contain ':'" ;; esac
  local changed=0 rc=0 f
  mkdir -p "$SQDIR"
  secret_file squid-password "$SQUID_PASSWORD" || true
  secret_file squid-password2 "$SQUID_PASSWORD2" || true
  secret_file squid-probe.header \
    "Proxy-Authorization: Basic $(printf '%s:%s' "$SQUID_USER" "$SQUID_PASSWORD" | base64 -w0)" || true
  squid_htpasswd || true
  squid_config && changed=1 || true
  chmod 644 "$SQDIR/squid.conf" # (no secrets in it; squid re-reads it as its own user)
  # squid writes its pid file and logs as the effective user
  for f in access.log cache.log; do touch "$SQDIR/$f"; done
  [ "$(id -u)" = 0 ] && chown proxy:proxy "$SQDIR" "$SQDIR/access.log" "$SQDIR/cache.log"
  "$SQUID_BIN" -k parse -f "$SQDIR/squid.conf" >"$SQDIR/parse.log" 2>&1 ||
    die_log "squid configuration test failed" "$SQDIR/parse.log"
  if pid_alive "$SQPID" "$SQPAT"; then
    if [ "$changed" = 1 ]; then
      log "squid configuration changed, restarting"
      stop_pid "$SQPID" "$SQPAT" squid 10
    elif squid_answers; then
      return 0
    fi
  fi
  if ! pid_alive "$SQPID" "$SQPAT"; then
    port_busy "$SQUID_ADDR" "$SQUID_PORT" &&
      die "port $SQUID_ADDR:$SQUID_PORT is in use by another process (set SQUID_PORT)"
    # -N: foreground, one process (no kids), so the pid we record is squid's
    spawn "$SQPID" "$SQDIR/squid.stdout.log" "$SQUID_BIN" -N -f "$SQDIR/squid.conf"
  fi
  wait_for 15 "$SQPID" "$SQPAT" squid_answers || rc=$?
  [ "$rc" = 0 ] || die_log "squid exit $SQUID_ADDR:$SQUID_PORT does not answer (with $SQUID_USER's credentials)" \
    "$SQDIR/squid.stdout.log" "$SQDIR/cache.log"
}

# ---------------------------------------------------------------- dante with username auth
DADIR=$STACK_DIR/dante-auth
DAPID=$DADIR/danted.pid
# socks5_probe addr port user passfile: RFC 1929 sub-negotiation with the exact
# bytes of the password file, then a CONNECT to the origin; 0 if both succeed.
# (curl's own --proxy-user would URL-decode '%41' on libcurl before 8.8.)
socks5_probe() {
  timeout 5 bash -c '
    set -e
    exec 3<>"/dev/tcp/$1/$2"
    hex() { head -c "$1" <&3 | od -An -tx1 | tr -d " \n"; }
    oct() { printf "\\$(printf %03o "$1")"; }
    printf "\005\001\002" >&3
    [ "$(hex 2)" = 0502 ]
    { printf "\001"; oct "$(printf %s "$3" | LC_ALL=C wc -c)"; printf %s "$3"
      oct "$(LC_ALL=C wc -c <"$4")"; cat "$4"; } >&3
    [ "$(hex 2)" = 0100 ]
    { printf "\005\001\000\001\177\000\000\001"; oct $(($5 >> 8)); oct $(($5 & 255)); } >&3
    r=$(hex 10)
    [ "${r:0:4}" = 0500 ]
  ' socks5_probe "$1" "$2" "$3" "$4" "$ORIGIN_PORT" 2>/dev/null
}
socks_auth_answers() {
  socks5_probe "$SOCKS_AUTH_ADDR" "$SOCKS_AUTH_PORT" "$SOCKS_AUTH_USER" "$SECRETS/socks-auth-password"
}
socks_auth_skip() { # why it cannot run here, or nothing
  [ "$SOCKS_AUTH_ENABLE" = 1 ] || { echo "disabled (SOCKS_AUTH_ENABLE=0)"; return 0; }
  [ "$(id -u)" = 0 ] || echo "skipped: needs root (a system user, the shadow file)"
}
socks_auth_password_ok() { # user passfile: the user's password hash matches the file's bytes
  perl -e 'my $h = (getpwnam($ARGV[0]))[1]; local $/; my $p = <STDIN>;
    exit(defined $h && length($h) > 2 && crypt($p, $h) eq $h ? 0 : 1)' "$1" <"$2"
}
# socks_auth_user user passfile: a system user dante checks passwords against,
# created if missing, its password set (chpasswd) only when it does not match.
# chpasswd takes any bytes but NUL and LF in a password.
socks_auth_user() {
  local u=$1 pf=$2
  case $u in -* | *[:,/\ $'\t\n\r']*) die "SOCKS auth user name '$u': no ':', ',', '/', blanks or leading '-'" ;; esac
  if ! getent passwd "$u" >/dev/null; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$u" \
      >"$DADIR/useradd.log" 2>&1 || die_log "useradd $u failed" "$DADIR/useradd.log"
    log "created system user $u (SOCKS5 username auth exit)"
  fi
  socks_auth_password_ok "$u" "$pf" && return 0
  { printf '%s:' "$u"; cat "$pf"; printf '\n'; } |
    chpasswd >"$DADIR/chpasswd.log" 2>&1 || die_log "chpasswd failed" "$DADIR/chpasswd.log"
  socks_auth_password_ok "$u" "$pf" || die "chpasswd did not store the password of $u byte for byte"
  log "set the password of system user $u"
}
dante_auth_config() {
  write_if_changed "$DADIR/danted.conf" <<EOF
# dedupd test SOCKS5 exit with username auth (generated by scripts/stack.sh)
logoutput: $DADIR/danted.log
errorlog: $DADIR/danted.log
internal: $SOCKS_AUTH_ADDR port = $SOCKS_AUTH_PORT
external: $SOCKS_AUTH_ADDR
clientmethod: none
# RFC 1929, checked against the system password database
socksmethod: username
user.privileged: root
user.unprivileged: nobody
timeout.negotiate: 30
timeout.io: 300
client pass {
  from: 127.0.0.0/8 to: 127.0.0.0/8
  log: error
}
# connect/disconnect lines name the authenticated user (username%USER@client)
socks pass {
  from: 127.0.0.0/8 to: 127.0.0.0/8
  command: connect
  socksmethod: username
  log: connect disconnect error
}
socks block {
  from: 0.0.0.0/0 to: 0.0.0.0/0
  log: connect error
}
EOF
}
dante_auth_up() {
  local why changed=0 rc=0
  why=$(socks_auth_skip)
  if [ -n "$why" ]; then
    [ "$SOCKS_AUTH_ENABLE" = 1 ] && log "SOCKS5 auth exit $why"
    return 0
  fi
  [ -x "$DANTED_BIN" ] || die "danted not found at $DANTED_BIN (run scripts/deps.sh)"
  check_cred SOCKS_AUTH_USER "$SOCKS_AUTH_USER"
  check_cred SOCKS_AUTH_PASSWORD "$SOCKS_AUTH_PASSWORD"
  check_cred SOCKS_AUTH_USER2 "$SOCKS_AUTH_USER2"
  check_cred SOCKS_AUTH_PASSWORD2 "$SOCKS_AUTH_PASSWORD2"
  mkdir -p "$DADIR"
  secret_file socks-auth-password "$SOCKS_AUTH_PASSWORD" || true
  secret_file socks-auth-password2 "$SOCKS_AUTH_PASSWORD2" || true
  socks_auth_user "$SOCKS_AUTH_USER" "$SECRETS/socks-auth-password"
  socks_auth_user "$SOCKS_AUTH_USER2" "$SECRETS/socks-auth-password2"
  dante_auth_config && changed=1 || true
  if pid_alive "$DAPID" "$DPAT"; then
    if [ "$changed" = 1 ]; then
      log "dante (auth) configuration changed, restarting"
      stop_pid "$DAPID" "$DPAT" "dante (auth)" 10
    elif socks_auth_answers; then
      return 0
    fi
  fi
  if ! pid_alive "$DAPID" "$DPAT"; then
    port_busy "$SOCKS_AUTH_ADDR" "$SOCKS_AUTH_PORT" &&
      die "port $SOCKS_AUTH_ADDR:$SOCKS_AUTH_PORT is in use by another process (set SOCKS_AUTH_PORT)"
    spawn "$DAPID" "$DADIR/danted.stdout.log" "$DANTED_BIN" -f "$DADIR/danted.conf" -p "$DADIR/danted.pid.self"
  fi
  wait_for 10 "$DAPID" "$DPAT" socks_auth_answers || rc=$?
  [ "$rc" = 0 ] || die_log "dante SOCKS5 auth exit $SOCKS_AUTH_ADDR:$SOCKS_AUTH_PORT does not accept $SOCKS_AUTH_USER" \
    "$DADIR/danted.stdout.log" "$DADIR/danted.log"
}

# ---------------------------------------------------------------- provider API
# Runs a copy of the built binary kept in the run dir: a rebuild (different
# bytes) restarts it, and the build tree can be cleaned while it runs.
PADIR=$STACK_DIR/provider-api
PAPID=$PADIR/provider_api.pid
PAPAT=provider_api
PA_URL="http://$PROVIDER_API_HOST:$PROVIDER_API_PORT"
provider_exits() {
  local a out=""
  for a in "${EXITS[@]}"; do out="$out${out:+,}$a:$PROXY_PORT"; done
  printf '%s' "$out"
}
provider_answers() {
  curl -fsS -o /dev/null --max-time 3 -H "@$SECRETS/provider-api.header" "$PA_URL/sessions" 2>/dev/null
}
provider_skip() { # why it is not started, or nothing
  [ -x "$PROVIDER_API_BIN" ] && return 0
  pid_alive "$PAPID" "$PAPAT" && return 0 # an earlier build's copy runs: keep it
  echo "not built: $PROVIDER_API_BIN is missing; build the project first (cmake --build build), then run up again"
}
provider_up() {
  local why changed=0 rc=0 bin=$PADIR/provider_api
  mkdir -p "$PADIR"
  why=$(provider_skip)
  if [ -n "$why" ]; then log "provider API $why"; return 0; fi
  [ -x "$PROVIDER_API_BIN" ] || return 0 # a copy from an earlier build runs
  check_cred PROVIDER_API_KEY "$PROVIDER_API_KEY"
  secret_file provider-api.key "$PROVIDER_API_KEY" && changed=1 || true
  secret_file provider-api.header "Authorization: Bearer $PROVIDER_API_KEY" || true
  printf '%s\n' "--listen $PROVIDER_API_HOST:$PROVIDER_API_PORT" "--exits $(provider_exits)" \
    "--sessions $PROVIDER_API_SESSIONS" | write_if_changed "$PADIR/args" && changed=1 || true
  if ! cmp -s "$PROVIDER_API_BIN" "$bin"; then
    cp -f "$PROVIDER_API_BIN" "$bin.new"
    mv -f "$bin.new" "$bin"
    changed=1
  fi
  if pid_alive "$PAPID" "$PAPAT"; then
    if [ "$changed" = 1 ]; then
      log "provider API binary or settings changed, restarting"
      stop_pid "$PAPID" "$PAPAT" "provider API" 10
    elif provider_answers; then
      return 0
    fi
  fi
  if ! pid_alive "$PAPID" "$PAPAT"; then
    port_busy "$PROVIDER_API_HOST" "$PROVIDER_API_PORT" &&
      die "port $PROVIDER_API_HOST:$PROVIDER_API_PORT is in use by another process (set PROVIDER_API_PORT)"
    spawn "$PAPID" "$PADIR/stdout.log" "$bin" --listen "$PROVIDER_API_HOST:$PROVIDER_API_PORT" \
      --key-file "$SECRETS/provider-api.key" --exits "$(provider_exits)" \
      --sessions "$PROVIDER_API_SESSIONS" --log "$PADIR/requests.log"
  fi
  wait_for 10 "$PAPID" "$PAPAT" provider_answers || rc=$?
  [ "$rc" = 0 ] || die_log "provider API $PA_URL does not answer" "$PADIR/stdout.log"
}

# ---------------------------------------------------------------- commands
with_lock() {
  mkdir -p "$STACK_DIR"
  exec 9>"$STACK_DIR/.lock"
  # (fd 9 is closed for every daemon started, so only stack.sh itself holds it)
  if ! flock -n 9; then
    log "waiting for another stack.sh on $STACK_DIR"
    flock -w 300 9 || die "another stack.sh holds $STACK_DIR/.lock"
  fi
}
cmd_up() {
  with_lock
  local t0=$SECONDS a
  # Kafka takes longest: start it first, bring the rest up while it boots.
  kafka_start
  nginx_up
  for a in "${EXITS[@]}"; do tinyproxy_up "$a"; done
  dante_up
  dante_auth_up
  squid_up
  provider_up
  kafka_wait
  create_topics
  cmd_status
  echo "stack: up in $((SECONDS - t0))s, run dir $STACK_DIR; eval \"\$($0 env)\" for the addresses"
}
# kafka-restart [SECONDS]: stop the broker cleanly, leave it down SECONDS (0),
# start it again with its data (for outage tests; a clean stop recovers fast).
cmd_kafka_restart() {
  with_lock
  pid_alive "$KPID" "$KPAT" || die "kafka is not running (scripts/stack.sh up)"
  stop_pid "$KPID" "$KPAT" kafka 60
  sleep "${1:-0}"
  KAFKA_KEEP_DATA=1 kafka_start
  kafka_wait
  log "kafka restarted"
}
# kafka-up / kafka-down: the broker alone (see the usage at the top).
cmd_kafka_up() {
  with_lock
  local t0=$SECONDS
  kafka_start
  kafka_wait
  log "kafka $KAFKA_VERSION up on $KAFKA_HOST:$KAFKA_PORT in $((SECONDS - t0))s (logs: $KDIR/logs)"
}
cmd_kafka_down() {
  [ -d "$STACK_DIR" ] || return 0
  with_lock
  stop_pid "$KPID" "$KPAT" kafka 60
}
cmd_down() {
  local purge=0 a f
  [ "${1:-}" = --purge ] && purge=1
  [ -d "$STACK_DIR" ] || { log "nothing to stop ($STACK_DIR does not exist)"; return 0; }
  with_lock
  stop_pid "$PAPID" "$PAPAT" "provider API" 10
  stop_pid "$SQPID" "$SQPAT" squid 15
  stop_pid "$DAPID" "$DPAT" "dante (auth)" 10
  if [ "$SOCKS_ENABLE" = 1 ] || [ -f "$DPID" ]; then stop_pid "$DPID" "$DPAT" dante 10; fi
  for f in "$TDIR"/*.pid; do
    [ -e "$f" ] || continue
    a=$(basename "$f" .pid)
    stop_pid "$f" "$TPAT" "tinyproxy $a" 10
  done
  stop_pid "$NPID" "$NPAT" nginx 10
  stop_pid "$KPID" "$KPAT" kafka 60
  if [ "$purge" = 1 ]; then
    exec 9>&-
    rm -rf "$STACK_DIR"
    log "removed $STACK_DIR"
  fi
}
cmd_status() {
  local bad=0 a state
  show() { printf '%-34s %s\n' "$1" "$2"; }
  if pid_alive "$KPID" "$KPAT" && kafka_answers; then state="up (pid $(pid_of "$KPID"))"; else state=down; bad=1; fi
  show "kafka $KAFKA_HOST:$KAFKA_PORT" "$state"
  if pid_alive "$NPID" "$NPAT" && origin_answers; then state="up (pid $(pid_of "$NPID"))"; else state=down; bad=1; fi
  show "origin $ORIGIN_HOST:$ORIGIN_PORT" "$state"
  if pid_alive "$NPID" "$NPAT" && origin_tls_answers; then state="up (pid $(pid_of "$NPID"))"; else state=down; bad=1; fi
  show "origin tls $ORIGIN_HOST:$ORIGIN_TLS_PORT" "$state"
  for a in "${EXITS[@]}"; do
    if pid_alive "$TDIR/$a.pid" "$TPAT" && proxy_answers "$a"; then
      state="up (pid $(pid_of "$TDIR/$a.pid"))"
      [ "$a" = "$THROTTLED_EXIT" ] && state="$state, throttled by origin"
    else state=down; bad=1; fi
    show "http exit $a:$PROXY_PORT" "$state"
  done
  if [ "$SOCKS_ENABLE" = 1 ]; then
    if pid_alive "$DPID" "$DPAT" && socks_answers; then state="up (pid $(pid_of "$DPID"))"; else state=down; bad=1; fi
    show "socks5 exit $SOCKS_ADDR:$SOCKS_PORT" "$state"
  fi
  state=$(socks_auth_skip)
  if [ -z "$state" ]; then
    if pid_alive "$DAPID" "$DPAT" && socks_auth_answers; then
      state="up (pid $(pid_of "$DAPID")), user $SOCKS_AUTH_USER"
    else state=down; bad=1; fi
  fi
  [ "$SOCKS_AUTH_ENABLE" = 1 ] && show "socks5 auth exit $SOCKS_AUTH_ADDR:$SOCKS_AUTH_PORT" "$state"
  if [ "$SQUID_ENABLE" = 1 ]; then
    if pid_alive "$SQPID" "$SQPAT" && squid_answers; then
      state="up (pid $(pid_of "$SQPID")), basic auth"
    else state=down; bad=1; fi
    show "squid exit $SQUID_ADDR:$SQUID_PORT" "$state"
  fi
  state=$(provider_skip)
  if [ -z "$state" ]; then
    if pid_alive "$PAPID" "$PAPAT" && provider_answers; then state="up (pid $(pid_of "$PAPID"))"; else state=down; bad=1; fi
  fi
  show "provider api $PROVIDER_API_HOST:$PROVIDER_API_PORT" "$state"
  return $bad
}
cmd_env() {
  local a proxies=""
  for a in "${EXITS[@]}"; do proxies="$proxies${proxies:+ }http://$a:$PROXY_PORT"; done
  q() { # KEY="value", safe for eval
    local v=$2
    v=${v//\\/\\\\}; v=${v//\"/\\\"}; v=${v//\$/\\\$}; v=${v//\`/\\\`}
    printf '%s="%s"\n' "$1" "$v"
  }
  q STACK_DIR "$STACK_DIR"
  q KAFKA_BOOTSTRAP "$KAFKA_HOST:$KAFKA_PORT"
  q KAFKA_LIBS "$KAFKA_LIBS"
  q ORIGIN_URL "http://$ORIGIN_HOST:$ORIGIN_PORT"
  q ORIGIN_ACCESS_LOG "$NDIR/access.log"
  q ORIGIN_PAGES "$STACK_DIR/pages.txt"
  q PROXY_EXITS "$proxies"
  if [ "$SOCKS_ENABLE" = 1 ]; then q SOCKS_EXITS "socks5h://$SOCKS_ADDR:$SOCKS_PORT"; else q SOCKS_EXITS ""; fi
  q SOCKS_LOG "$DDIR/danted.log"
  q THROTTLED_EXIT "$THROTTLED_EXIT"
  q THROTTLE_RATE "$THROTTLE_RATE"
  q THROTTLE_BURST "$THROTTLE_BURST"
  q ORIGIN_TLS_URL "https://$ORIGIN_HOST:$ORIGIN_TLS_PORT"
  q ORIGIN_TLS_CA "$TLS_CRT"
  # credentials: user names and files with the exact password bytes, never the passwords
  if [ "$SQUID_ENABLE" = 1 ]; then q SQUID_EXIT "http://$SQUID_ADDR:$SQUID_PORT"; else q SQUID_EXIT ""; fi
  q SQUID_USER "$SQUID_USER"
  q SQUID_PASSWORD_FILE "$SECRETS/squid-password"
  q SQUID_USER2 "$SQUID_USER2"
  q SQUID_PASSWORD2_FILE "$SECRETS/squid-password2"
  q SQUID_ACCESS_LOG "$SQDIR/access.log"
  if [ -z "$(socks_auth_skip)" ]; then
    q SOCKS_AUTH_EXIT "socks5h://$SOCKS_AUTH_ADDR:$SOCKS_AUTH_PORT"
  else q SOCKS_AUTH_EXIT ""; fi
  q SOCKS_AUTH_USER "$SOCKS_AUTH_USER"
  q SOCKS_AUTH_PASSWORD_FILE "$SECRETS/socks-auth-password"
  q SOCKS_AUTH_USER2 "$SOCKS_AUTH_USER2"
  q SOCKS_AUTH_PASSWORD2_FILE "$SECRETS/socks-auth-password2"
  q SOCKS_AUTH_LOG "$DADIR/danted.log"
  q PROVIDER_API_URL "$PA_URL"
  q PROVIDER_API_KEY_FILE "$SECRETS/provider-api.key"
  q PROVIDER_API_LOG "$PADIR/requests.log"
  q PROVIDER_API_SESSIONS "$PROVIDER_API_SESSIONS"
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  topics-reset) with_lock; topics_reset ;;
  kafka-restart) shift; cmd_kafka_restart "$@" ;;
  kafka-up) cmd_kafka_up ;;
  kafka-down) cmd_kafka_down ;;
  *) echo "usage: $0 up|down [--purge]|status|env|topics-reset|kafka-restart [SECONDS]|kafka-up|kafka-down" >&2; exit 2 ;;
esac
