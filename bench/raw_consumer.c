/*
 * raw_consumer: the Kafka ceiling of the benchmarks (issue 6).  A bare
 * librdkafka consumer that drains a topic as fast as it can and prints one JSON
 * line:
 *
 *   {"messages":N,"bytes":B,"partitions":P,"seconds":S,"messages_per_second":R,
 *    "wall_seconds":W,"ts_first_ms":T0,"ts_last_ms":T1}
 *
 *   raw_consumer -b HOST:PORT -t TOPIC [--group G] [--produce OUT] [-X prop=value ...]
 *   raw_consumer -b HOST:PORT --delete TOPIC[,TOPIC...]
 *
 * --produce OUT makes it the consume-and-produce ceiling (issue 13): for every
 * message read it produces one small record (key: the message's key, value:
 * 64 bytes) to OUT through a producer set up as dedupd's (idempotent,
 * acks=all, linger.ms 5, lz4, murmur2_random), no dedup, no store; it waits
 * for every delivery report, then prints {"messages","produced",
 * "delivery_failed","seconds","messages_per_second","flush_seconds"} instead
 * ("seconds" is first to last message read, as dedupd's; exit 1 when a
 * delivery failed).
 *
 * Default: rd_kafka_assign() of every partition from the beginning (no group
 * join, so no 3 s rebalance wait), until EOF on every partition.  --group G
 * subscribes with a fresh group instead (earliest), as dedupd does.
 *
 * "seconds" runs from the first message polled to the last one, the same
 * window as dedupd's --stats-json "seconds", so the two rates compare; "wall"
 * adds connecting and the first fetch.  bytes = key + value.  ts_first_ms /
 * ts_last_ms are the smallest and largest Kafka message timestamps seen
 * (CreateTime: when the producer made the message), which lets run.sh time
 * the span of a results topic.
 *
 * The consumer uses librdkafka's defaults (as dedupd does) plus what -X sets;
 * it reads with rd_kafka_consumer_poll() per message, the same API as dedupd's
 * pipeline.
 *
 * --delete removes topics with the Admin API (the bench's own per-run topics).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: raw_consumer -b BOOTSTRAP -t TOPIC [--group G] [--produce OUT] [-X prop=val]...\n"
            "       raw_consumer -b BOOTSTRAP --delete TOPIC[,TOPIC...]\n");
    exit(2);
}

static int delete_topics(rd_kafka_conf_t *conf, const char *list)
{
    char e[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof(e));
    if (!rk) {
        fprintf(stderr, "raw_consumer: %s\n", e);
        return 1;
    }
    char *copy = strdup(list);
    rd_kafka_DeleteTopic_t *dt[256];
    size_t n = 0;
    for (char *s = strtok(copy, ","); s && n < 256; s = strtok(NULL, ","))
        if (*s)
            dt[n++] = rd_kafka_DeleteTopic_new(s);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_DeleteTopics(rk, dt, n, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = 0;
    if (!ev) {
        fprintf(stderr, "raw_consumer: delete: no answer in 30 s\n");
        rc = 1;
    } else {
        const rd_kafka_DeleteTopics_result_t *res =
            rd_kafka_event_DeleteTopics_result(ev);
        size_t cnt = 0;
        const rd_kafka_topic_result_t **tr =
            res ? rd_kafka_DeleteTopics_result_topics(res, &cnt) : NULL;
        for (size_t i = 0; i < cnt; i++)
            if (rd_kafka_topic_result_error(tr[i]) &&
                rd_kafka_topic_result_error(tr[i]) !=
                    RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
                fprintf(stderr, "raw_consumer: delete %s: %s\n",
                        rd_kafka_topic_result_name(tr[i]),
                        rd_kafka_topic_result_error_string(tr[i]));
                rc = 1;
            }
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_DeleteTopic_destroy_array(dt, n);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    free(copy);
    printf("{\"deleted\":%zu,\"ok\":%s}\n", n, rc ? "false" : "true");
    return rc;
}

static void setc(rd_kafka_conf_t *c, const char *k, const char *v)
{
    char e[512];
    if (rd_kafka_conf_set(c, k, v, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "raw_consumer: %s=%s: %s\n", k, v, e);
        exit(2);
    }
}

static uint64_t g_delivery_failed;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err)
        g_delivery_failed++;
}

/* The --produce producer: dedupd's producer settings (src/producer.c). */
static rd_kafka_t *relay_new(const char *brokers)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    setc(c, "bootstrap.servers", brokers);
    setc(c, "enable.idempotence", "true");
    setc(c, "acks", "all");
    setc(c, "linger.ms", "5");
    setc(c, "compression.type", "lz4");
    setc(c, "partitioner", "murmur2_random");
    rd_kafka_conf_set_dr_msg_cb(c, dr_cb);
    char e[512];
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, c, e, sizeof(e));
    if (!p) {
        fprintf(stderr, "raw_consumer: producer: %s\n", e);
        exit(1);
    }
    return p;
}

/* One small record for \p m to \p out (retried while the queue is full). */
static void relay(rd_kafka_t *p, const char *out, const rd_kafka_message_t *m)
{
    static const char value[64] = "{\"relay\":1}";
    const void *key = m->key_len ? m->key : (const void *)"k";
    size_t klen = m->key_len ? m->key_len : 1;
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(out), RD_KAFKA_V_KEY(key, klen),
            RD_KAFKA_V_VALUE((void *)value, sizeof(value)),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            if (e)
                g_delivery_failed++;
            break;
        }
        rd_kafka_poll(p, 10);
    }
    rd_kafka_poll(p, 0);
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *topic = NULL, *group = NULL, *del = NULL;
    const char *out = NULL;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "-b"))
            brokers = v;
        else if (!strcmp(a, "-t"))
            topic = v;
        else if (!strcmp(a, "--group"))
            group = v;
        else if (!strcmp(a, "--delete"))
            del = v;
        else if (!strcmp(a, "--produce"))
            out = v;
        else if (!strcmp(a, "-X")) {
            char *kv = strdup(v), *eq = strchr(kv, '=');
            if (!eq)
                usage();
            *eq = '\0';
            setc(conf, kv, eq + 1);
            free(kv);
        } else
            usage();
        i++;
    }
    if (!brokers || (!topic && !del))
        usage();
    setc(conf, "bootstrap.servers", brokers);
    if (del)
        return delete_topics(conf, del);

    char gid[128];
    snprintf(gid, sizeof(gid), "raw-consumer-%d-%ld", (int)getpid(),
             (long)time(NULL));
    setc(conf, "group.id", group ? group : gid);
    setc(conf, "enable.auto.commit", "false");
    setc(conf, "auto.offset.reset", "earliest");
    setc(conf, "enable.partition.eof", "true");

    char e[512];
    double t_start = now_s();
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, e, sizeof(e));
    if (!rk) {
        fprintf(stderr, "raw_consumer: %s\n", e);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);

    /* Partition count from the metadata (retried: a fresh topic may not be
     * known yet). */
    int nparts = 0;
    for (int tries = 0; tries < 50 && nparts == 0; tries++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
        const struct rd_kafka_metadata *md = NULL;
        if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (md->topic_cnt == 1 && !md->topics[0].err)
                nparts = md->topics[0].partition_cnt;
            rd_kafka_metadata_destroy(md);
        }
        rd_kafka_topic_destroy(rkt);
        if (!nparts)
            usleep(100000);
    }
    if (nparts <= 0) {
        fprintf(stderr, "raw_consumer: topic %s: no partitions\n", topic);
        rd_kafka_destroy(rk);
        return 1;
    }
    rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(nparts);
    rd_kafka_resp_err_t err;
    if (group) {
        rd_kafka_topic_partition_list_add(tl, topic, RD_KAFKA_PARTITION_UA);
        err = rd_kafka_subscribe(rk, tl);
    } else {
        for (int p = 0; p < nparts; p++)
            rd_kafka_topic_partition_list_add(tl, topic, p)->offset =
                RD_KAFKA_OFFSET_BEGINNING;
        err = rd_kafka_assign(rk, tl);
    }
    rd_kafka_topic_partition_list_destroy(tl);
    if (err) {
        fprintf(stderr, "raw_consumer: assign/subscribe: %s\n", rd_kafka_err2str(err));
        rd_kafka_destroy(rk);
        return 1;
    }

    rd_kafka_t *prod = out ? relay_new(brokers) : NULL;
    uint64_t produced = 0;
    bool *eof = calloc((size_t)nparts, sizeof(bool));
    int n_eof = 0;
    uint64_t msgs = 0, bytes = 0;
    double t_first = 0, t_last = 0;
    int64_t ts_min = INT64_MAX, ts_max = 0;
    double deadline = now_s() + 600;
    while (n_eof < nparts && now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (m->partition >= 0 && m->partition < nparts && !eof[m->partition]) {
                eof[m->partition] = true;
                n_eof++;
            }
        } else if (m->err) {
            fprintf(stderr, "raw_consumer: %s\n", rd_kafka_message_errstr(m));
        } else {
            double t = now_s();
            if (!msgs)
                t_first = t;
            t_last = t;
            msgs++;
            bytes += m->len + m->key_len;
            if (prod) {
                relay(prod, out, m);
                produced++;
            }
            int64_t ts = rd_kafka_message_timestamp(m, NULL);
            if (ts > 0) {
                if (ts < ts_min)
                    ts_min = ts;
                if (ts > ts_max)
                    ts_max = ts;
            }
            /* a message after an EOF: that partition is not done */
            if (m->partition >= 0 && m->partition < nparts && eof[m->partition]) {
                eof[m->partition] = false;
                n_eof--;
            }
        }
        rd_kafka_message_destroy(m);
    }
    double secs = t_last - t_first;
    double t_flush = now_s();
    if (prod && rd_kafka_flush(prod, 60000))
        fprintf(stderr, "raw_consumer: %d records not delivered in 60 s\n",
                rd_kafka_outq_len(prod));
    double flush_s = now_s() - t_flush;
    double wall = now_s() - t_start;
    if (!prod)
        printf("{\"messages\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"partitions\":%d,"
           "\"seconds\":%.3f,\"messages_per_second\":%.1f,\"wall_seconds\":%.3f,"
           "\"ts_first_ms\":%" PRId64 ",\"ts_last_ms\":%" PRId64 "}\n",
           msgs, bytes, nparts, secs, secs > 0 ? (double)msgs / secs : 0.0, wall,
           ts_min == INT64_MAX ? 0 : ts_min, ts_max);
    else
        printf("{\"messages\":%" PRIu64 ",\"produced\":%" PRIu64
               ",\"delivery_failed\":%" PRIu64 ",\"seconds\":%.3f,"
               "\"messages_per_second\":%.1f,\"flush_seconds\":%.3f}\n",
               msgs, produced, g_delivery_failed, secs,
               secs > 0 ? (double)msgs / secs : 0.0, flush_s);
    fflush(stdout);
    free(eof);
    if (prod)
        rd_kafka_destroy(prod);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return n_eof == nparts && !g_delivery_failed ? 0 : 1;
}
