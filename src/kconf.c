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

/* @locality any thread; pure. */
static bool is_consumer_only(const char *name)
{
    static const char *const names[] = {
        "group.id", "group.instance.id", "partition.assignment.strategy",
        "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
        "auto.offset.reset", "enable.auto.commit", "auto.commit.interval.ms",
        "enable.auto.offset.store", "fetch.min.bytes", "fetch.max.bytes",
        "fetch.wait.max.ms", "queued.min.messages", "isolation.level",
        "enable.partition.eof", "check.crcs", "group.protocol.type",
        "max.partition.fetch.bytes", "queued.max.messages.kbytes", NULL};
    for (size_t i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return true;
    return false;
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

dd_err_t kconf_new(const struct cfg *cfg, bool consumer,
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
    for (size_t i = 0; !err && i < cfg->kafka_names.n; i++) {
        /* One kafka.* table serves both clients: consumer-only properties are
         * not given to producers (librdkafka would warn on each). */
        if (!consumer && is_consumer_only(cfg->kafka_names.v[i]))
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
