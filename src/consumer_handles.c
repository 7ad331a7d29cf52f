/* What a run uses, opened and closed (consumer.h: consumer_handles_open):
 * the store, the changelog's check and restore consumer, the results
 * producer (its topics' leaders learned first), the HTTP listeners, the
 * fetch engine and the jobs topic's Kafka consumer, which refuses the
 * cooperative assignors.  See consumer_internal.h. */
#include "consumer_internal.h"

#include <ctype.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "changelog.h"
#include "config.h"
#include "dd.h"
#include "fetch.h"
#include "job.h"
#include "kconf.h"
#include "producer.h"
#include "store.h"

#define PRODUCER_WARM_MS 10000 /* producer_warm's bound at start-up */

void consumer_job_conf(const struct cfg *cfg, struct job_conf *jc)
{
    memset(jc, 0, sizeof(*jc));
    jc->variance_headers =
        (const char *const *)cfg->identity_variance_headers.v;
    jc->n_variance_headers = cfg->identity_variance_headers.n;
    jc->credential_headers =
        (const char *const *)cfg->identity_credential_headers.v;
    jc->n_credential_headers = cfg->identity_credential_headers.n;
    jc->max_job_bytes = (size_t)cfg->limits_max_job_bytes;
}

/* ---- handles -------------------------------------------------------------- */

/* Is kafka.partition.assignment.strategy a cooperative assignor (alone or
 * in a list)?  Then fill \p errstr with why it is refused (one line, within
 * DD_ERRSTR_SIZE). */
static bool strategy_refused(const rd_kafka_conf_t *kc, char *errstr,
                             size_t errstr_size)
{
    size_t vsz = 0;
    if (rd_kafka_conf_get(kc, "partition.assignment.strategy", NULL, &vsz) !=
            RD_KAFKA_CONF_OK || !vsz)
        return false;
    char *val = dd_xcalloc(1, vsz + 1, "assignment strategy");
    rd_kafka_conf_get(kc, "partition.assignment.strategy", val, &vsz);
    for (char *q = val; *q; q++)
        *q = (char)tolower((unsigned char)*q);
    bool refused = strstr(val, "cooperative") != NULL;
    free(val);
    if (refused)
        dd_errstr_set(errstr, errstr_size,
                      "config: kafka.partition.assignment.strategy: "
                      "cooperative-sticky is refused: dedupd's rebalance "
                      "(drain, release, changelog restore) is built for the "
                      "eager protocol; librdkafka 2.0.2 has cooperative bugs "
                      "(duplicates fixed in 2.4.0, rebalance loop in 2.6.1)");
    return refused;
}

/* The jobs topic's consumer: group consumer.group_id, offsets stored by the
 * pipeline only and auto-committed, eager assignors, subscribed. */
static dd_err_t consumer_new(const struct cfg *cfg, struct consumer **out,
                             char *errstr, size_t errstr_size)
{
    /* exactly_once: offsets go with the transactions only, and the jobs
     * re-routed in an aborted transaction are never read (pinned: kafka.*
     * cannot override them) */
    bool eos = cfg_exactly_once(cfg);
    const char *fixed[] = {
        "group.id", cfg->group_id,
        "enable.auto.offset.store", "false",
        "enable.auto.commit", eos ? "false" : "true",
        "auto.commit.interval.ms", "1000",
        "auto.offset.reset", "earliest",
        "enable.partition.eof", "true",
        eos ? "isolation.level" : NULL, "read_committed",
        NULL, NULL, NULL};
    rd_kafka_conf_t *kc = NULL;
    dd_err_t err = kconf_new(cfg, KCONF_CONSUMER, fixed, &kc, errstr, errstr_size);
    if (err)
        return err;
    /* Eager assignors only (DESIGN.md section 6): a cooperative one is
     * refused whatever the librdkafka version. */
    if (strategy_refused(kc, errstr, errstr_size)) {
        rd_kafka_conf_destroy(kc);
        return DD_ERR_INVAL;
    }
    struct consumer *c = dd_xcalloc(1, sizeof(*c), "consumer");
    rd_kafka_conf_set_rebalance_cb(kc, consumer_rebalance_cb);
    rd_kafka_conf_set_opaque(kc, c);
    char ke[512];
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, ke, sizeof(ke));
    if (!c->rk) {
        rd_kafka_conf_destroy(kc);
        free(c);
        dd_errstr_set(errstr, errstr_size, "rd_kafka_new(consumer): %s", ke);
        return DD_ERR_FATAL;
    }
    *out = c; /* from here on consumer_handles_close destroys it */
    rd_kafka_poll_set_consumer(c->rk);
    rd_kafka_topic_partition_list_t *topics =
        rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, cfg->topic_jobs,
                                      RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t ke2 = rd_kafka_subscribe(c->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (ke2) {
        dd_errstr_set(errstr, errstr_size, "subscribe %s: %s",
                      cfg->topic_jobs, rd_kafka_err2str(ke2));
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

void consumer_store_conf(const struct cfg *cfg, const char *path,
                         const char *run_id, struct store_conf *sc)
{
    *sc = (struct store_conf){
        .path = path,
        .instance = cfg->instance_id,
        .run_id = run_id,
        .ops_ttl_ms = cfg->store_ops_ttl_ms,
        .failed_ttl_ms = cfg->store_failed_ttl_ms,
        .lease_ms = cfg->store_lease_ms,
        .block_cache_bytes = (size_t)cfg->store_block_cache_bytes,
        .max_wal_bytes = (size_t)cfg->store_max_wal_bytes,
        .sync = cfg->store_sync,
        /* the pipeline never waits for an fsync: results go out at once,
         * offsets wait for store_durable() */
        .group_commit = true,
        .index_max_bytes = (size_t)cfg->store_index_max_bytes,
        .validators_ttl_ms = cfg->store_validators_ttl_ms,
        .max_body_bytes = (size_t)cfg->store_max_body_bytes,
    };
}

dd_err_t consumer_handles_open(const struct cfg *cfg, bool shadow,
                               struct consumer_handles *h, char *errstr,
                               size_t errstr_size)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->run_id, sizeof(h->run_id), "%llx%04x",
             (unsigned long long)dd_now_ms(), (unsigned)getpid() & 0xffff);
    struct store_conf sc;
    consumer_store_conf(cfg, cfg->store_path, h->run_id, &sc);
    struct job_conf jc;
    consumer_job_conf(cfg, &jc);
    h->exactly_once = cfg_exactly_once(cfg);
    dd_err_t err = h->exactly_once
                       ? consumer_txn_store_open(&sc, &h->store,
                                                 &h->eos_marker, errstr,
                                                 errstr_size)
                       : store_open(&sc, &h->store, errstr, errstr_size);
    if (!err)
        err = changelog_ensure(cfg, &h->changelog, errstr, errstr_size);
    if (!err)
        err = changelog_restorer_new(cfg, &h->restorer, errstr, errstr_size);
    if (!err && h->exactly_once)
        err = consumer_txn_producer_new(cfg, &h->producer, errstr,
                                        errstr_size);
    else if (!err)
        err = producer_new(cfg, consumer_out_dr, &h->producer, errstr,
                           errstr_size);
    if (!err) {
        /* every topic the run produces to, its changelog (created a moment
         * ago on a group's first run) included: the first records are not
         * held back for a metadata refresh */
        char clog[CHANGELOG_TOPIC_MAX];
        changelog_topic_of(cfg, clog, sizeof(clog));
        const char *out[] = {clog, cfg->topic_results, cfg->topic_conflicts,
                             cfg->topic_dlq};
        producer_warm(h->producer, out, sizeof(out) / sizeof(out[0]),
                      PRODUCER_WARM_MS);
    }
    if (!err)
        err = api_new(cfg, &jc, h->store, &h->api, errstr, errstr_size);
    if (!err && !shadow)
        err = fetch_new(cfg, &h->fetch, errstr, errstr_size);
    if (!err)
        err = consumer_new(cfg, &h->consumer, errstr, errstr_size);
    return err;
}

void consumer_handles_close(struct consumer_handles *h)
{
    if (h->consumer) {
        rd_kafka_destroy(h->consumer->rk);
        free(h->consumer);
        h->consumer = NULL;
    }
    changelog_restorer_destroy(h->restorer);
    h->restorer = NULL;
    fetch_destroy(h->fetch);
    h->fetch = NULL;
    api_destroy(h->api);
    h->api = NULL;
    producer_destroy(h->producer);
    h->producer = NULL;
    store_close(h->store);
    h->store = NULL;
    consumer_txn_store_closed(h->eos_marker, h->clean);
    h->eos_marker = NULL;
}

