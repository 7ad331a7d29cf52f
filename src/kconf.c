#include "kconf.h"

#include <stdbool.h>
#include <string.h>

#include "config.h"
#include "log.h"

/* librdkafka's log callback: one JSON line through log.h.
 * @locality librdkafka's internal threads (and the thread of any rd_kafka_*
 * call that logs). */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac,
                   const char *buf)
{
    (void)rk;
    if (log_enabled(level, "kafka"))
        log_write(level, "kafka", NULL, "%s: %s", fac, buf);
}

/* Is \p name in \p names (NULL-terminated)?  @locality any thread; pure. */
static bool in_names(const char *const *names, const char *name)
{
    for (size_t i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return true;
    return false;
}

/* The properties librdkafka 2.0.2's CONFIGURATION.md marks C (consumer) and
 * P (producer), callbacks left out (kafka.* sets strings): one kafka.* table
 * serves both clients, and librdkafka warns (CONFWARN) for each property of
 * the other side. */
static bool is_consumer_only(const char *name)
{
    static const char *const names[] = {
        "group.id", "group.instance.id", "partition.assignment.strategy",
        "session.timeout.ms", "heartbeat.interval.ms", "group.protocol.type",
        "coordinator.query.interval.ms", "max.poll.interval.ms",
        "enable.auto.commit", "auto.commit.enable", "auto.commit.interval.ms",
        "enable.auto.offset.store", "queued.min.messages",
        "queued.max.messages.kbytes", "fetch.wait.max.ms",
        "fetch.message.max.bytes", "max.partition.fetch.bytes",
        "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms",
        "offset.store.method", "isolation.level", "enable.partition.eof",
        "check.crcs", "auto.offset.reset", "offset.store.path",
        "offset.store.sync.interval.ms", "consume.callback.max.messages", NULL};
    return in_names(names, name);
}

static bool is_producer_only(const char *name)
{
    static const char *const names[] = {
        "transactional.id", "transaction.timeout.ms", "enable.idempotence",
        "enable.gapless.guarantee", "queue.buffering.max.messages",
        "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms",
        "message.send.max.retries", "retries", "retry.backoff.ms",
        "queue.buffering.backpressure.threshold", "compression.codec",
        "compression.type", "compression.level", "batch.num.messages",
        "batch.size", "delivery.report.only.error",
        "sticky.partitioning.linger.ms", "request.required.acks", "acks",
        "request.timeout.ms", "message.timeout.ms", "delivery.timeout.ms",
        "queuing.strategy", "produce.offset.report", "partitioner", NULL};
    return in_names(names, name);
}

/* @locality kconf_new's caller. */
static dd_err_t set1(rd_kafka_conf_t *c, const char *name, const char *value,
                     const char *shown_src, char *errstr, size_t errstr_size)
{
    char e[512];
    if (rd_kafka_conf_set(c, name, value, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
        dd_errstr_set(errstr, errstr_size, "config: %s%s: %s", shown_src, name, e);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

dd_err_t kconf_new(const struct cfg *cfg, enum kconf_client client,
                   const char *const *fixed, rd_kafka_conf_t **out,
                   char *errstr, size_t errstr_size)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    dd_err_t err = set1(c, "bootstrap.servers", cfg->bootstrap_servers,
                        "broker.bootstrap_servers -> ", errstr, errstr_size);
    if (!err && cfg->sasl_username[0]) {
        err = set1(c, "sasl.username", cfg->sasl_username, "", errstr, errstr_size);
        if (!err)
            err = set1(c, "sasl.password", cfg->sasl_password, "", errstr,
                       errstr_size);
    }
    /* A producer's default codec, before kafka.* (which may name another:
     * compression.codec is the same property): lz4.  On 14 KB HTML pages
     * (bench row 2a, 10,000 jobs, two interleaved runs each) zstd's default
     * level cost the process about 100 us more CPU a page than lz4
     * (4.45-4.83 s against 3.66-3.70 s) for 2,760-3,110 against
     * 3,910-3,950 results/s, and stored the results topic in 30.4 MB
     * against lz4's 50.4 MB (150 MB of JSON); zstd at compression.level 1
     * sat between (3,340-3,450 results/s, 32.6 MB). */
    if (!err && client == KCONF_PRODUCER)
        err = set1(c, "compression.type", "lz4", "", errstr, errstr_size);
    for (size_t i = 0; !err && i < cfg->kafka_names.n; i++) {
        /* One kafka.* table serves both clients: each gets the properties
         * of its side and the common ones (librdkafka would warn on each
         * of the other side's) */
        const char *name = cfg->kafka_names.v[i];
        if ((client != KCONF_CONSUMER && is_consumer_only(name))
            || (client != KCONF_PRODUCER && is_producer_only(name)))
            continue;
        err = set1(c, cfg->kafka_names.v[i], cfg->kafka_values.v[i], "kafka.",
                   errstr, errstr_size);
    }
    for (size_t i = 0; !err && fixed && fixed[i]; i += 2)
        err = set1(c, fixed[i], fixed[i + 1], "", errstr, errstr_size);
    if (err) {
        rd_kafka_conf_destroy(c);
        return err;
    }
    rd_kafka_conf_set_log_cb(c, log_cb);
    *out = c;
    return DD_OK;
}
