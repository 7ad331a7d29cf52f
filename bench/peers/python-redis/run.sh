#!/usr/bin/env bash
# bench/peers/python-redis/run.sh [--setup | --redis-up | --redis-down]
#
# The Python + Redis peer (README.md beside this file):
#   1. once: Debian's redis-server and python3-venv (apt-get, as scripts/deps.sh
#      installs packages), and a venv with requirements.txt (confluent-kafka,
#      redis-py, hiredis) in $PEER_VENV;
#   2. a Redis to claim in: $REDIS_URL when it is set (used as it is), else this
#      peer's own redis-server on 127.0.0.1:$PEER_REDIS_PORT, started when it does
#      not answer, with appendonly yes, appendfsync everysec, no RDB snapshots, its
#      files in $PEER_REDIS_DIR;
#   3. peer.py with the environment passed through (KAFKA_BOOTSTRAP, IN_TOPIC,
#      OUT_TOPIC, GROUP, MAX_MESSAGES, IDLE_MS, PIPELINE, PREFIX, TTL_S,
#      FLUSH_BEFORE_COMMIT, ...): its one JSON line on stdout, logs on stderr,
#      its exit status.
#
#   --setup       step 1 only
#   --redis-up    steps 1 and 2 only (prints the REDIS_URL)
#   --redis-down  stop the redis-server this script started in $PEER_REDIS_DIR
#                 (by its pid file); its files stay
#
# Environment (defaults):
#   DEDUPD_CACHE=~/.cache/dedupd   PEER_VENV=$DEDUPD_CACHE/peers/python-redis/venv
#   PEER_PYTHON=/usr/bin/python3 (Debian's; python3 on PATH when it is missing)
#   PEER_REDIS_PORT=16379          PEER_REDIS_DIR=/tmp/dedupd-peer-redis
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${DEDUPD_CACHE:-$HOME/.cache/dedupd}
VENV=${PEER_VENV:-$CACHE/peers/python-redis/venv}
REDIS_PORT=${PEER_REDIS_PORT:-16379}
REDIS_DIR=${PEER_REDIS_DIR:-/tmp/dedupd-peer-redis}
case "$REDIS_DIR" in /*) ;; *) REDIS_DIR="$PWD/$REDIS_DIR" ;; esac

log() { printf 'python-redis: %s\n' "$*" >&2; }
die() { printf 'python-redis: error: %s\n' "$*" >&2; exit 1; }

apt_install() { # the Debian packages this peer uses, when missing
  local missing=() p
  for p in redis-server redis-tools python3-venv; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  log "installing ${missing[*]}"
  local SUDO="" policy=/usr/sbin/policy-rc.d created=0
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  # Debian's redis-server starts a system-wide service on install: this peer runs
  # its own instance on loopback instead (as scripts/deps.sh does for nginx).
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    created=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local rc=0
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/dedupd-peer-apt.log 2>&1; then
    $SUDO apt-get update -qq >>/tmp/dedupd-peer-apt.log 2>&1
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/dedupd-peer-apt.log 2>&1 || rc=$?
  fi
  [ "$created" = 1 ] && $SUDO rm -f "$policy"
  [ $rc = 0 ] || { tail -n 30 /tmp/dedupd-peer-apt.log >&2; die "apt-get install failed"; }
}

venv_setup() { # the venv, (re)made when requirements.txt changed
  local stamp=$VENV/.requirements.sha256 want py
  want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  py=${PEER_PYTHON:-/usr/bin/python3}
  [ -x "$py" ] || py=$(command -v python3) || die "no python3"
  log "venv $VENV ($("$py" --version 2>&1))"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$py" -m venv "$VENV" || die "$py -m venv failed"
  "$VENV/bin/pip" install -q -r "$here/requirements.txt" >&2 || die "pip install -r requirements.txt failed"
  echo "$want" >"$stamp"
  log "installed: $("$VENV/bin/pip" freeze 2>/dev/null | paste -sd' ')"
}

setup() { apt_install; venv_setup; }

redis_answers() { # URL
  [ "$(timeout 5 redis-cli -u "$1" ping 2>/dev/null)" = PONG ]
}

redis_up() { # prints the REDIS_URL to use
  if [ -n "${REDIS_URL:-}" ]; then
    redis_answers "$REDIS_URL" || die "REDIS_URL $REDIS_URL does not answer"
    echo "$REDIS_URL"
    return 0
  fi
  local url=redis://127.0.0.1:$REDIS_PORT/0 i
  if ! redis_answers "$url"; then
    mkdir -p "$REDIS_DIR"
    log "starting redis-server 127.0.0.1:$REDIS_PORT (appendonly yes, appendfsync everysec) in $REDIS_DIR"
    # No config file: Redis's built-in defaults plus these, so what runs is
    # what is written here, whatever /etc/redis/redis.conf holds.  RDB
    # snapshots are off (save ""): the AOF is the persistence, and a snapshot's
    # fork in the middle of one run and not of another would make noise.
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
      --dir "$REDIS_DIR" --appendonly yes --appendfsync everysec --save "" \
      --daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" \
      >/dev/null || die "redis-server failed: $(tail -n 5 "$REDIS_DIR/redis.log" 2>/dev/null)"
    for ((i = 0; i < 100; i++)); do
      redis_answers "$url" && break
      sleep 0.1
    done
    redis_answers "$url" || die "redis-server does not answer on $REDIS_PORT: $(tail -n 5 "$REDIS_DIR/redis.log")"
  fi
  echo "$url"
}

redis_down() {
  local pf=$REDIS_DIR/redis.pid pid i
  [ -s "$pf" ] || return 0
  pid=$(tr -dc '0-9' <"$pf")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server.*:$REDIS_PORT"; then
    kill -TERM "$pid"
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { log "redis-server $pid did not stop, killing"; kill -KILL "$pid"; }
    log "redis-server $pid stopped"
  fi
  rm -f "$pf"
}

case "${1:-}" in
  --setup) setup; exit 0 ;;
  --redis-up) setup; redis_up; exit 0 ;;
  --redis-down) redis_down; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument $1" ;;
esac

[ -n "${KAFKA_BOOTSTRAP:-}" ] || die "KAFKA_BOOTSTRAP is required"
setup
REDIS_URL=$(redis_up) || exit 1
export REDIS_URL
exec "$VENV/bin/python" "$here/peer.py"
