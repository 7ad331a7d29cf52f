#!/usr/bin/env bash
# The local test stack of dedupd (DESIGN.md section 8), all on loopback:
#   - Apache Kafka (KRaft, combined broker+controller, one node)  127.0.0.1:$KAFKA_PORT
#   - nginx as the origin, serving the PostgreSQL HTML docs under /docs/,
#     with limit_req -> 429 + Retry-After for the throttled exit       127.0.0.1:$ORIGIN_PORT
#   - one tinyproxy per HTTP exit address (listens and binds outgoing
#     connections on that address, so the origin log shows the exit)   $PROXY_EXIT_ADDRS:$PROXY_PORT
#   - dante SOCKS5 exit (no auth)                                        $SOCKS_ADDR:$SOCKS_PORT
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
#
# Environment (defaults):
#   DEDUPD_STACK_DIR=/tmp/dedupd-stack   run dir: configs, logs, pid files, Kafka data
#   DEDUPD_CACHE=~/.cache/dedupd         where scripts/kafka-jars.sh put the jars
#   KAFKA_LIBS=$DEDUPD_CACHE/kafka-3.9.1/libs
#   KAFKA_PORT=19092 KAFKA_CONTROLLER_PORT=19093 KAFKA_HEAP=512m
#   TOPIC_PARTITIONS=4
#   ORIGIN_PORT=18080 THROTTLE_RATE=20 (requests/s) THROTTLE_BURST=10
#   PROXY_PORT=18888 PROXY_EXIT_ADDRS="127.0.0.2 127.0.0.3"
#   THROTTLED_EXIT=<first of PROXY_EXIT_ADDRS>   client address nginx rate-limits
#   SOCKS_ADDR=127.0.0.4 SOCKS_PORT=11080 (SOCKS_ENABLE=0 leaves dante out)
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

NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
TINYPROXY_BIN=${TINYPROXY_BIN:-/usr/bin/tinyproxy}
DANTED_BIN=${DANTED_BIN:-/usr/sbin/danted}

# Topics created by `up` (TOPIC_PARTITIONS partitions each, replication factor 1);
# topic_config gives the extra --config of a topic.
TOPICS=(scrape.jobs scrape.results scrape.conflicts scrape.jobs.dlq dedupd.changelog)
topic_config() { [ "$1" = dedupd.changelog ] && echo "cleanup.policy=compact" || true; }

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
java_tool() { # class args... (short-lived JVM tuned for start-up time)
  local cls=$1; shift
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Dlog4j.configuration="file:$KDIR/tools-log4j.properties" \
    -cp "$KAFKA_LIBS/*" "$cls" "$@"
}
kafka_config() {
  mkdir -p "$KDIR/data" "$KDIR/logs"
  cat >"$KDIR/tools-log4j.properties" <<EOF
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
  write_if_changed "$KDIR/log4j.properties" <<EOF
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
    "-Dlog4j.configuration=file:$KDIR/log4j.properties" \
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
  map \$remote_addr \$dd_throttle_key {
    default "";
    "$THROTTLED_EXIT" \$binary_remote_addr;
  }
  limit_req_zone \$dd_throttle_key zone=dd_throttle:1m rate=${THROTTLE_RATE}r/s;
  limit_req_status 429;
  limit_req_log_level info;

  server {
    listen $ORIGIN_HOST:$ORIGIN_PORT reuseport backlog=4096;
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
    "$NGINX_BIN" -c "$NDIR/nginx.conf" -p "$NDIR" -e "$NDIR/error.log" 2>>"$NDIR/error.log" 9>&- ||
      die_log "nginx failed to start" "$NDIR/error.log"
  fi
  wait_for 10 "$NPID" "$NPAT" origin_answers ||
    die_log "origin (nginx) does not answer on $ORIGIN_HOST:$ORIGIN_PORT" "$NDIR/error.log"
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
  kafka_wait
  create_topics
  cmd_status
  echo "stack: up in $((SECONDS - t0))s, run dir $STACK_DIR; eval \"\$($0 env)\" for the addresses"
}
cmd_down() {
  local purge=0 a f
  [ "${1:-}" = --purge ] && purge=1
  [ -d "$STACK_DIR" ] || { log "nothing to stop ($STACK_DIR does not exist)"; return 0; }
  with_lock
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
  show() { printf '%-28s %s\n' "$1" "$2"; }
  if pid_alive "$KPID" "$KPAT" && kafka_answers; then state="up (pid $(pid_of "$KPID"))"; else state=down; bad=1; fi
  show "kafka $KAFKA_HOST:$KAFKA_PORT" "$state"
  if pid_alive "$NPID" "$NPAT" && origin_answers; then state="up (pid $(pid_of "$NPID"))"; else state=down; bad=1; fi
  show "origin $ORIGIN_HOST:$ORIGIN_PORT" "$state"
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
  q THROTTLED_EXIT "$THROTTLED_EXIT"
  q THROTTLE_RATE "$THROTTLE_RATE"
  q THROTTLE_BURST "$THROTTLE_BURST"
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  topics-reset) with_lock; topics_reset ;;
  *) echo "usage: $0 up|down [--purge]|status|env|topics-reset" >&2; exit 2 ;;
esac
