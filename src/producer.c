#include "producer.h"

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "dd.h"
#include "kconf.h"
#include "log.h"

#define WARM_MAX 8 /* topics producer_warm keeps handles of */

struct producer {
    rd_kafka_t *rk;
    producer_dr_cb *dr;
    atomic_bool fatal;    /* set by error_cb on RD_KAFKA_RESP_ERR__FATAL */
    rd_kafka_topic_t *warm[WARM_MAX]; /* producer_warm's topics */
    size_t n_warm;
};

/* librdkafka's delivery report: hand it to the producer's callback with the
 * message's own opaque (producer_send's \p opaque).
 * @locality the thread serving the producer (producer_poll, producer_flush,
 * producer_purge). */
static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m,
                      void *conf_opaque)
{
    (void)rk;
    struct producer *p = conf_opaque;
    if (m->err)
        p->dr(m->_private, DD_ERR_TRANSIENT, rd_kafka_err2str(m->err), m->partition,
              -1);
    else
        p->dr(m->_private, DD_OK, NULL, m->partition, m->offset);
}

/* @locality the thread serving the producer (producer_poll and the like). */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct producer *p = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_fatal_error(rk, buf, sizeof(buf));
        log_msg(LOG_CRIT, "producer", "fatal producer error: %s", buf);
        atomic_store(&p->fatal, true);
        return;
    }
    log_msg(LOG_WARNING, "producer", "%s: %s",
            rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* The producer of producer_new() (\p txn_id NULL) or producer_new_txn(). */
static dd_err_t producer_create(const struct cfg *cfg, producer_dr_cb *dr,
                                const char *txn_id, struct producer **out,
                                char *errstr, size_t errstr_size)
{
    char txn_timeout[24];
    snprintf(txn_timeout, sizeof(txn_timeout), "%lld",
             (long long)cfg->processing_transaction_timeout_ms);
    const char *const fixed[] = {
        "enable.idempotence", "true",
        "acks", "all",
        "partitioner", "murmur2_random",
        "linger.ms", "5",
        txn_id ? "transactional.id" : NULL, txn_id,
        "transaction.timeout.ms", txn_timeout,
        NULL};
    struct producer *p = dd_xcalloc(1, sizeof(*p), "producer");
    p->dr = dr;
    rd_kafka_conf_t *c = NULL;
    dd_err_t err = kconf_new(cfg, KCONF_PRODUCER, fixed, &c, errstr, errstr_size);
    if (err) {
        free(p);
        return err;
    }
    rd_kafka_conf_set_dr_msg_cb(c, dr_msg_cb);
    rd_kafka_conf_set_error_cb(c, error_cb);
    rd_kafka_conf_set_opaque(c, p);
    char e[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, e, sizeof(e));
    if (!p->rk) {
        rd_kafka_conf_destroy(c);
        dd_errstr_set(errstr, errstr_size, "rd_kafka_new(producer): %s", e);
        free(p);
        return DD_ERR_FATAL;
    }
    *out = p;
    return DD_OK;
}

dd_err_t producer_new(const struct cfg *cfg, producer_dr_cb *dr,
                      struct producer **out, char *errstr, size_t errstr_size)
{
    return producer_create(cfg, dr, NULL, out, errstr, errstr_size);
}

/* librdkafka's transactional error, classified (rd_kafka_error_is_fatal,
 * _txn_requires_abort, _is_retriable; INTRODUCTION.md "Transactional
 * producer error handling") and freed; \p what names the call. */
static dd_err_t txn_err(rd_kafka_error_t *e, const char *what, char *errstr,
                        size_t errstr_size)
{
    if (!e)
        return DD_OK;
    dd_err_t r = rd_kafka_error_is_fatal(e)              ? DD_ERR_FATAL
                 : rd_kafka_error_txn_requires_abort(e) ? DD_ERR_STATE
                 : rd_kafka_error_is_retriable(e)       ? DD_ERR_TIMEOUT
                                                        : DD_ERR_FATAL;
    dd_errstr_set(errstr, errstr_size, "%s: %s (%s)", what,
                  rd_kafka_error_string(e), rd_kafka_error_name(e));
    rd_kafka_error_destroy(e);
    return r;
}

dd_err_t producer_new_txn(const struct cfg *cfg, producer_dr_cb *dr,
                          const char *transactional_id, int timeout_ms,
                          struct producer **out, char *errstr,
                          size_t errstr_size)
{
    struct producer *p = NULL;
    dd_err_t err = producer_create(cfg, dr, transactional_id, &p, errstr,
                                   errstr_size);
    if (err)
        return err;
    err = txn_err(rd_kafka_init_transactions(p->rk, timeout_ms),
                  "init_transactions", errstr, errstr_size);
    if (err) {
        producer_destroy(p);
        return err == DD_ERR_TIMEOUT ? DD_ERR_TIMEOUT : DD_ERR_FATAL;
    }
    *out = p;
    return DD_OK;
}

dd_err_t producer_txn_begin(struct producer *p, char *errstr,
                            size_t errstr_size)
{
    return txn_err(rd_kafka_begin_transaction(p->rk), "begin_transaction",
                   errstr, errstr_size);
}

dd_err_t producer_txn_send_offsets(struct producer *p, rd_kafka_t *consumer,
                                   const rd_kafka_topic_partition_list_t *offsets,
                                   int timeout_ms, char *errstr,
                                   size_t errstr_size)
{
    rd_kafka_consumer_group_metadata_t *md =
        rd_kafka_consumer_group_metadata(consumer);
    if (!md) {
        dd_errstr_set(errstr, errstr_size,
                      "send_offsets_to_transaction: no consumer group "
                      "metadata");
        return DD_ERR_STATE;
    }
    rd_kafka_error_t *e = rd_kafka_send_offsets_to_transaction(
        p->rk, offsets, md, timeout_ms);
    rd_kafka_consumer_group_metadata_destroy(md);
    return txn_err(e, "send_offsets_to_transaction", errstr, errstr_size);
}

dd_err_t producer_txn_commit(struct producer *p, int timeout_ms,
                             char *errstr, size_t errstr_size)
{
    return txn_err(rd_kafka_commit_transaction(p->rk, timeout_ms),
                   "commit_transaction", errstr, errstr_size);
}

dd_err_t producer_txn_abort(struct producer *p, int timeout_ms, char *errstr,
                            size_t errstr_size)
{
    return txn_err(rd_kafka_abort_transaction(p->rk, timeout_ms),
                   "abort_transaction", errstr, errstr_size);
}

dd_err_t producer_send(struct producer *p, const char *topic, const void *key,
                       size_t key_len, const void *value, size_t value_len,
                       const struct producer_header *hdrs, size_t n_hdrs,
                       void *opaque, char *errstr, size_t errstr_size)
{
    return producer_send_to(p, topic, -1, key, key_len, value, value_len,
                            false, hdrs, n_hdrs, opaque, errstr, errstr_size);
}

dd_err_t producer_send_to(struct producer *p, const char *topic,
                          int32_t partition, const void *key, size_t key_len,
                          const void *value, size_t value_len, bool borrowed,
                          const struct producer_header *hdrs, size_t n_hdrs,
                          void *opaque, char *errstr, size_t errstr_size)
{
    /* no list for a record without headers (changelog records): NULL is
     * "no headers" to rd_kafka_producev (librdkafka 2.0.2 rdkafka_msg.c),
     * and the list is two allocations a message, freed at its report */
    rd_kafka_headers_t *h = n_hdrs ? rd_kafka_headers_new(n_hdrs) : NULL;
    for (size_t i = 0; i < n_hdrs; i++)
        rd_kafka_header_add(h, hdrs[i].name, -1, hdrs[i].value, -1);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        p->rk, RD_KAFKA_V_TOPIC(topic),
        RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
        RD_KAFKA_V_KEY(key, key_len),
        RD_KAFKA_V_VALUE((void *)value, value_len),
        RD_KAFKA_V_MSGFLAGS(borrowed ? 0 : RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h),
        RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (e) {
        if (h)
            rd_kafka_headers_destroy(h);
        dd_errstr_set(errstr, errstr_size, "produce to %s: %s", topic,
                      rd_kafka_err2str(e));
        return e == RD_KAFKA_RESP_ERR__QUEUE_FULL ? DD_ERR_TRANSIENT
               : e == RD_KAFKA_RESP_ERR__FATAL    ? DD_ERR_STATE
                                                  : DD_ERR_INVAL;
    }
    return DD_OK;
}

void producer_poll(struct producer *p, int timeout_ms)
{
    rd_kafka_poll(p->rk, timeout_ms);
}

int producer_outq_len(struct producer *p)
{
    return rd_kafka_outq_len(p->rk);
}

dd_err_t producer_flush(struct producer *p, int timeout_ms)
{
    return rd_kafka_flush(p->rk, timeout_ms) ? DD_ERR_TIMEOUT : DD_OK;
}

bool producer_fatal(struct producer *p)
{
    /* the error_cb flag, or librdkafka's state before that event is served */
    return atomic_load(&p->fatal) ||
           rd_kafka_fatal_error(p->rk, NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR;
}

void producer_purge(struct producer *p)
{
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    /* the purged messages' reports (ERR__PURGE_QUEUE / _INFLIGHT) */
    for (int i = 0; i < 100 && rd_kafka_outq_len(p->rk) > 0; i++)
        rd_kafka_poll(p->rk, 10);
    rd_kafka_poll(p->rk, 0);
}

dd_err_t producer_replace(struct producer **pp, const struct cfg *cfg,
                          producer_dr_cb *dr, char *errstr, size_t errstr_size)
{
    producer_purge(*pp);
    int held = rd_kafka_outq_len((*pp)->rk);
    if (held > 0) {
        dd_errstr_set(errstr, errstr_size,
                      "%d messages not purged yet", held);
        return DD_ERR_TRANSIENT;
    }
    struct producer *np = NULL;
    dd_err_t err = producer_new(cfg, dr, &np, errstr, errstr_size);
    if (err)
        return err;
    producer_destroy(*pp);
    *pp = np;
    return DD_OK;
}

dd_err_t producer_test_fatal(struct producer *p, const char *reason)
{
    return rd_kafka_test_fatal_error(p->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     reason)
               ? DD_ERR_STATE
               : DD_OK;
}

/* Whether the metadata of \p rkt names a leader for each of its
 * partitions (false with \p why set otherwise).  One Metadata request. */
static bool leaders_known(struct producer *p, rd_kafka_topic_t *rkt,
                          int timeout_ms, char *why, size_t why_size)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, rkt, &md, timeout_ms);
    bool ok = false;
    if (e)
        snprintf(why, why_size, "%s", rd_kafka_err2str(e));
    else if (md->topic_cnt != 1 || md->topics[0].err)
        snprintf(why, why_size, "%s", md->topic_cnt != 1 ? "not in the "
                 "metadata" : rd_kafka_err2str(md->topics[0].err));
    else if (md->topics[0].partition_cnt <= 0)
        snprintf(why, why_size, "no partitions yet");
    else {
        ok = true;
        for (int i = 0; i < md->topics[0].partition_cnt && ok; i++) {
            const rd_kafka_metadata_partition_t *pm =
                &md->topics[0].partitions[i];
            if (pm->err || pm->leader < 0) {
                ok = false;
                snprintf(why, why_size, "partition %d has no leader yet (%s)",
                         (int)pm->id, rd_kafka_err2str(pm->err));
            }
        }
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    return ok;
}

bool producer_warm(struct producer *p, const char *const *topics, size_t n,
                   int timeout_ms)
{
    int64_t end = dd_now_ms() + timeout_ms;
    bool all = true;
    for (size_t i = 0; i < n; i++) {
        if (!topics[i] || !*topics[i])
            continue;
        if (p->n_warm == WARM_MAX) { /* not tried */
            all = false;
            continue;
        }
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(p->rk, topics[i], NULL);
        if (!rkt) {
            all = false;
            continue;
        }
        p->warm[p->n_warm++] = rkt;
        char why[256] = "not asked: the time was up";
        for (;;) {
            int64_t left = end - dd_now_ms();
            if (left <= 0) {
                log_msg(LOG_WARNING, "producer", "topic %s: %s after %d ms; "
                        "its first records wait in the producer's queue "
                        "until it has a leader", topics[i], why, timeout_ms);
                all = false;
                break;
            }
            if (leaders_known(p, rkt, (int)(left < 2000 ? left : 2000), why,
                              sizeof(why)))
                break;
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return all;
}

void producer_destroy(struct producer *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_warm; i++)
        rd_kafka_topic_destroy(p->warm[i]);
    rd_kafka_destroy(p->rk);
    free(p);
}
