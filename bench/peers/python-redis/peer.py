#!/usr/bin/env python3
"""The Python + Redis benchmark peer of dedupd (see README.md beside this file).

What a Python team would build instead of dedupd, cut down to dedupd's shadow
work: consume a job keyed by its op_id, decide new or duplicate with Redis
`SET <prefix><op_id> 1 NX EX <ttl>`, produce one small result for a new op_id
(key = hex SHA-256("result:v1:" + op_id)), flush the producer, then commit the
batch's offsets asynchronously.

Environment (the peers' contract):
  KAFKA_BOOTSTRAP      required
  IN_TOPIC             default scrape.jobs
  OUT_TOPIC            default peer.results
  GROUP                default: fresh per run
  MAX_MESSAGES         stop after this many messages (default 0: no limit)
  IDLE_MS              stop when nothing came for this long, counted from the
                       first message (default 5000)
  START_TIMEOUT_MS     give up when no first message came (default 120000)
and this peer's own knobs:
  PIPELINE             1 (default): one Redis pipeline per consume batch;
                       0: one round trip per message
  REDIS_URL            default redis://127.0.0.1:16379/0
  PREFIX               Redis key prefix, default fresh per run
  TTL_S                the claims' EX, default 86400
  FLUSH_BEFORE_COMMIT  1 (default): flush the producer before each commit
  BATCH                consume(num_messages=...), default 1000
  COMPRESSION          the producer's compression.type, default lz4 (dedupd's)

Stdout: one JSON line {"peer", "consumed", "new", "duplicates", "seconds",
"msgs_per_s", ...}; `seconds` runs from the return of the first non-empty
consume() to the end of the last batch (its results flushed, its commit
requested).  Logs go to stderr.  Exit status 0 only when the line is a valid
result (no delivery error, no Kafka or Redis error).
"""
import hashlib
import json
import os
import sys
import time
import uuid

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import libversion as rdk_version
import redis


def log(msg):
    print(f"[python-redis {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def redis_version(r):
    try:
        return r.info("server").get("redis_version")
    except redis.RedisError:
        return None


def env_int(name, default):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        return int(v)
    except ValueError:
        sys.exit(f"peer.py: {name}={v!r} is not an integer")


def main():
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP") or sys.exit("peer.py: KAFKA_BOOTSTRAP is required")
    in_topic = os.environ.get("IN_TOPIC") or "scrape.jobs"
    out_topic = os.environ.get("OUT_TOPIC") or "peer.results"
    run_id = uuid.uuid4().hex[:12]
    group = os.environ.get("GROUP") or f"peer-python-redis-{run_id}"
    max_messages = env_int("MAX_MESSAGES", 0)
    idle_s = env_int("IDLE_MS", 5000) / 1000.0
    start_timeout_s = env_int("START_TIMEOUT_MS", 120000) / 1000.0
    pipeline = env_int("PIPELINE", 1) != 0
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:16379/0"
    prefix = os.environ.get("PREFIX") or f"peer:{run_id}:"
    ttl_s = env_int("TTL_S", 86400)
    flush_before_commit = env_int("FLUSH_BEFORE_COMMIT", 1) != 0
    batch = env_int("BATCH", 1000)
    compression = os.environ.get("COMPRESSION") or "lz4"
    name = "python-redis-pipelined" if pipeline else "python-redis-per-message"

    r = redis.Redis.from_url(redis_url)
    r.ping()
    try:
        cfg = r.config_get("append*")
        aof = {"appendonly": cfg.get(b"appendonly", cfg.get("appendonly")),
               "appendfsync": cfg.get(b"appendfsync", cfg.get("appendfsync"))}
        aof = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in aof.items()}
    except redis.RedisError as e:  # CONFIG may be renamed away on a shared server
        aof = {"appendonly": None, "appendfsync": None, "error": str(e)}
    if aof.get("appendonly") != "yes":
        log(f"warning: Redis persistence is {aof} (not appendonly yes): a separate, named row")

    delivery_errors = []

    def on_delivery(err, _msg):
        if err is not None:
            delivery_errors.append(str(err))

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": compression,
    })
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    })
    consumer.subscribe([in_topic])
    log(f"{name}: {in_topic} -> {out_topic}, group {group}, prefix {prefix}, "
        f"max {max_messages or '-'}, redis {redis_url} {aof}")

    consumed = new = dups = 0
    t_first = t_last = None
    t_start = time.monotonic()
    last_msg_at = None
    ok = True
    sha256 = hashlib.sha256
    try:
        while True:
            want = batch
            if max_messages:
                want = min(batch, max_messages - consumed)
                if want <= 0:
                    break
            msgs = consumer.consume(num_messages=want, timeout=0.2)
            now = time.monotonic()
            if not msgs:
                if last_msg_at is None:
                    if now - t_start > start_timeout_s:
                        log(f"no message in {start_timeout_s:.0f} s: giving up")
                        ok = False
                        break
                elif now - last_msg_at >= idle_s:
                    break
                continue
            if t_first is None:
                t_first = now
            last_msg_at = now
            keys = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                k = m.key()
                keys.append(k.decode() if k is not None else "")
            consumed += len(keys)
            if pipeline:
                p = r.pipeline(transaction=False)
                for op_id in keys:
                    p.set(prefix + op_id, 1, nx=True, ex=ttl_s)
                claimed = p.execute()
            else:
                claimed = [r.set(prefix + op_id, 1, nx=True, ex=ttl_s) for op_id in keys]
            for op_id, c in zip(keys, claimed):
                if c:
                    new += 1
                    producer.produce(
                        out_topic,
                        key=sha256(b"result:v1:" + op_id.encode()).hexdigest(),
                        value=b'{"op_id":"' + op_id.encode() + b'","outcome":"new"}',
                        on_delivery=on_delivery)
                else:
                    dups += 1
            if flush_before_commit:
                left = producer.flush(30)
                if left:
                    raise RuntimeError(f"producer flush: {left} results not delivered in 30 s")
                if delivery_errors:
                    raise RuntimeError(f"delivery failed: {delivery_errors[0]}")
            else:
                producer.poll(0)
            consumer.commit(asynchronous=True)
            t_last = time.monotonic()
    except (KafkaException, redis.RedisError, RuntimeError) as e:
        log(f"error: {e}")
        ok = False
    finally:
        left = producer.flush(30)
        if left or delivery_errors:
            log(f"at exit: {left} results undelivered, {len(delivery_errors)} delivery errors "
                f"{delivery_errors[:1]}")
            ok = False
        try:
            if consumed:
                consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                log(f"final commit: {e}")
        consumer.close()

    secs = (t_last - t_first) if (t_first is not None and t_last is not None) else 0.0
    out = {
        "peer": name,
        "consumed": consumed,
        "new": new,
        "duplicates": dups,
        "seconds": round(secs, 3),
        "msgs_per_s": round(consumed / secs, 1) if secs > 0 else None,
        "mode": {"pipeline": pipeline, "batch": batch, "flush_before_commit": flush_before_commit,
                 "ttl_s": ttl_s, "compression": compression, "linger_ms": 5, "acks": "all",
                 "idempotence": True, "redis": aof},
        "versions": {"python": sys.version.split()[0], "confluent_kafka": confluent_kafka.__version__,
                     "librdkafka": rdk_version()[0], "redis_py": redis.__version__,
                     "redis_server": redis_version(r)},
        "group": group,
        "prefix": prefix,
    }
    print(json.dumps(out), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
