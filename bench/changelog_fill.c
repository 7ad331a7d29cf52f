/*
 * changelog_fill: fills one partition of a changelog topic with realistic op
 * records, as fast as a producer can (issue 12: the restore benchmark).
 *
 *   changelog_fill [-c config/dedupd.json] [-n 1000000] [-p 0] [-t TOPIC]
 *                  [--hex-ids] [--no-identity] [--ensure]
 *
 * The configuration is loaded as dedupd loads it (the file, then the
 * DEDUPD_*__* environment): the brokers, the kafka.* options and
 * consumer.group_id, which names the topic "<group>-changelog" unless -t
 * gives another.  --ensure first runs dedupd's own start-up check
 * (changelog_ensure: the jobs topic must exist; the changelog is created
 * like dedupd creates it, co-partitioned, cleanup.policy=compact,delete).
 *
 * Records: first the identity record (CHANGELOG_IDENTITY_KEY, this config's
 * identity value, so a restore checks it) unless --no-identity, then N op
 * records keyed by op_id ("bench:<n>", or with --hex-ids the hex SHA-256 of
 * it), each the store's changelog value (store_changelog_encode) of a
 * complete op: generation 1, request_hash and event_key 64 hex, a lease
 * owner, source "<jobs topic>/<p>/<n>", created/updated now, expires_at
 * now + 72 h, one attempt, outbox sent.  All go to partition P.
 *
 * The producer is configured as dedupd's (kconf_new with enable.idempotence,
 * acks=all, linger.ms=5, lz4) plus big batches (batch.size 1 MB,
 * batch.num.messages 10000, a queue of 1M messages).  Prints one JSON line:
 *
 *   {"topic":T,"partition":P,"records":N+1,"ops":N,"bytes":B,
 *    "value_bytes_avg":V,"seconds":S,"records_per_second":R,"errors":E}
 *
 * seconds: from the first produce call to the end of the flush (every
 * record acknowledged).  Exit status 0 when every record was acknowledged.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "changelog.h"
#include "config.h"
#include "dd.h"
#include "kconf.h"
#include "key.h"
#include "log.h"
#include "store.h"

#include "bench_ops.h"

extern char **environ;

static atomic_ulong dr_errors;

/** @returns the monotonic clock in seconds. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/** @brief Print the usage and exit 2. */
static void usage(void)
{
    fprintf(stderr, "usage: changelog_fill [-c CONFIG] [-n N] [-p PARTITION] "
                    "[-t TOPIC] [--hex-ids] [--no-identity] [--ensure]\n");
    exit(2);
}

/** @brief Delivery report: counts the records that failed. */
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err && atomic_fetch_add(&dr_errors, 1) < 5)
        fprintf(stderr, "changelog_fill: delivery: %s\n",
                rd_kafka_err2str(m->err));
}

/** @brief Produce one record to \p topic [\p part] (copied: librdkafka's
 *         key and value macros take non-const pointers), waiting while the
 *         queue is full.  @returns 0, or -1 on another error. */
static int produce(rd_kafka_t *rk, const char *topic, int32_t part,
                   void *key, size_t klen, void *val, size_t vlen)
{
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(key, klen), RD_KAFKA_V_VALUE(val, vlen),
            RD_KAFKA_V_END);
        if (!e)
            return 0;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "changelog_fill: produce: %s\n",
                    rd_kafka_err2str(e));
            return -1;
        }
        rd_kafka_poll(rk, 10);
    }
}

/** @brief A producer configured as dedupd's, with big batches. */
static rd_kafka_t *producer_of(const struct cfg *cfg)
{
    static const char *const fixed[] = {
        "enable.idempotence", "true", "acks", "all", "linger.ms", "5",
        "batch.size", "1000000", "batch.num.messages", "10000",
        "queue.buffering.max.messages", "1000000",
        "queue.buffering.max.kbytes", "1048576", NULL};
    char e[512];
    rd_kafka_conf_t *c = NULL;
    if (kconf_new(cfg, KCONF_PRODUCER, fixed, &c, e, sizeof(e))) {
        fprintf(stderr, "changelog_fill: %s\n", e);
        exit(1);
    }
    rd_kafka_conf_set_dr_msg_cb(c, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, e, sizeof(e));
    if (!rk) {
        fprintf(stderr, "changelog_fill: %s\n", e);
        exit(1);
    }
    return rk;
}

/** @brief Parse the arguments, produce, print the JSON line. */
int main(int argc, char **argv)
{
    const char *path = "config/dedupd.json", *topic_arg = NULL;
    long n = 1000000;
    int32_t part = 0;
    bool hex_ids = false, identity = true, ensure = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--hex-ids"))
            hex_ids = true;
        else if (!strcmp(a, "--no-identity"))
            identity = false;
        else if (!strcmp(a, "--ensure"))
            ensure = true;
        else if (!v)
            usage();
        else if (!strcmp(a, "-c"))
            path = argv[++i];
        else if (!strcmp(a, "-n"))
            n = atol(argv[++i]);
        else if (!strcmp(a, "-p"))
            part = (int32_t)atoi(argv[++i]);
        else if (!strcmp(a, "-t"))
            topic_arg = argv[++i];
        else
            usage();
    }
    char e[1024];
    struct cfg *cfg = NULL;
    if (cfg_load(path, environ, &cfg, e, sizeof(e))) {
        fprintf(stderr, "changelog_fill: %s\n", e);
        return 2;
    }
    log_configure(LOG_WARNING, NULL);
    char topic[CHANGELOG_TOPIC_MAX];
    changelog_topic_of(cfg, topic, sizeof(topic));
    if (topic_arg)
        snprintf(topic, sizeof(topic), "%s", topic_arg);
    if (ensure) {
        struct changelog_info info;
        if (changelog_ensure(cfg, &info, e, sizeof(e))) {
            fprintf(stderr, "changelog_fill: %s\n", e);
            return 1;
        }
        fprintf(stderr, "changelog_fill: %s: %d partitions%s\n", topic,
                (int)info.partitions, info.created ? " (created)" : "");
    }
    rd_kafka_t *rk = producer_of(cfg);
    int64_t now = dd_now_ms();
    uint64_t bytes = 0, vbytes = 0;
    int rc = 0;
    double t0 = now_s();
    if (identity) {
        char *idv = changelog_identity_value(cfg);
        char idk[] = CHANGELOG_IDENTITY_KEY;
        rc |= produce(rk, topic, part, idk, strlen(idk), idv, strlen(idv));
        bytes += strlen(CHANGELOG_IDENTITY_KEY) + strlen(idv);
        free(idv);
    }
    for (long i = 0; i < n && !rc; i++) {
        struct store_op op;
        char op_id[KEY_HEX_LEN + 1];
        unsigned char val[STORE_CHANGELOG_VALUE_MAX];
        bench_op_of(i, hex_ids, cfg->topic_jobs, part, now, &op, op_id,
              sizeof(op_id));
        size_t vl = store_changelog_encode(&op, val);
        rc |= produce(rk, topic, part, op_id, strlen(op_id), val, vl);
        bytes += strlen(op_id) + vl;
        vbytes += vl;
        if ((i & 1023) == 0)
            rd_kafka_poll(rk, 0);
    }
    rd_kafka_resp_err_t fe = rd_kafka_flush(rk, 300000);
    double secs = now_s() - t0;
    unsigned long errs = atomic_load(&dr_errors);
    long recs = n + (identity ? 1 : 0);
    printf("{\"topic\":\"%s\",\"partition\":%d,\"records\":%ld,\"ops\":%ld,"
           "\"bytes\":%" PRIu64 ",\"value_bytes_avg\":%.0f,\"seconds\":%.3f,"
           "\"records_per_second\":%.1f,\"errors\":%lu}\n",
           topic, (int)part, recs, n, bytes, n ? (double)vbytes / n : 0.0,
           secs, secs > 0 ? recs / secs : 0.0, errs);
    rd_kafka_destroy(rk);
    cfg_destroy(cfg);
    return rc || fe || errs ? 1 : 0;
}
