/**
 * @file producer.h
 * @brief The Kafka producer of results, conflicts and dead letters.
 *
 * Idempotent (enable.idempotence=true, acks=all), lz4 compression unless
 * kafka.compression.type (or kafka.compression.codec) names another codec
 * (kconf_new), and the murmur2_random partitioner (the Java client's), so a key lands on the partition
 * where a Java producer would put it.  Every message has a non-empty key.
 * Delivery reports are served by producer_poll() on the calling thread, which
 * calls the \p dr callback once per message with its opaque.
 */
#ifndef DEDUPD_PRODUCER_H
#define DEDUPD_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "err.h"

struct producer;
struct cfg;

/** A Kafka header (borrowed). */
struct producer_header {
    const char *name;
    const char *value;   /**< NUL-terminated */
};

/**
 * @brief Delivery report.  \p err is DD_OK when the broker acknowledged the
 *        message (\p partition and \p offset set), else DD_ERR_TRANSIENT with
 *        \p errtext (librdkafka's text).
 * @param opaque  The message's own opaque (producer_send()): whatever the
 *                report needs, the caller's state included, is reached
 *                through it, not through globals.
 * @locality the thread calling producer_poll()/producer_flush()/
 *           producer_purge().
 */
typedef void(producer_dr_cb)(void *opaque, dd_err_t err, const char *errtext,
                             int32_t partition, int64_t offset);

/**
 * @brief Create the producer.
 * @param out  Out: producer; producer_destroy().
 * @returns DD_OK; DD_ERR_INVAL (config: errstr names the key); DD_ERR_FATAL.
 */
dd_err_t producer_new(const struct cfg *cfg, producer_dr_cb *dr,
                      struct producer **out, char *errstr,
                      size_t errstr_size) DD_WUR;

/**
 * @brief Create the transactional producer of processing.guarantee
 *        exactly_once (DESIGN.md section 6): producer_new()'s settings plus
 *        transactional.id \p transactional_id (borrowed; the caller's
 *        `<consumer.group_id>-<instance.id>`) and transaction.timeout.ms
 *        processing.transaction_timeout_ms, then init_transactions, which
 *        fences an earlier producer of the same id and aborts its open
 *        transaction (KIP-98).  Every message it sends belongs to the open
 *        transaction: producer_txn_begin() first.
 * @param timeout_ms  For init_transactions (blocks the calling thread).
 * @returns DD_OK; DD_ERR_INVAL (config: errstr names the key);
 *          DD_ERR_TIMEOUT (the coordinator did not answer: retriable);
 *          DD_ERR_FATAL (errstr: librdkafka's text and error name).
 */
dd_err_t producer_new_txn(const struct cfg *cfg, producer_dr_cb *dr,
                          const char *transactional_id, int timeout_ms,
                          struct producer **out, char *errstr,
                          size_t errstr_size) DD_WUR;

/*
 * Transactions (producer_new_txn() producers only; librdkafka's
 * rd_kafka_*_transaction, whose error classes map to):
 *   DD_OK;
 *   DD_ERR_TIMEOUT  retriable: call the same function again;
 *   DD_ERR_STATE    abortable: producer_txn_abort(), then begin anew (the
 *                   transaction's messages and offsets are void);
 *   DD_ERR_FATAL    fatal (fenced by a newer producer of the same
 *                   transactional.id, or the coordinator timed the
 *                   transaction out): the producer accepts nothing more.
 * errstr then holds librdkafka's text and error name.  All block the
 * calling thread (the pipeline's) for at most \p timeout_ms; the commit and
 * the abort serve the delivery reports of the transaction's messages first
 * (the dr callback runs inside them).
 */

/** @brief Begin a transaction (local; no broker request). */
dd_err_t producer_txn_begin(struct producer *p, char *errstr,
                            size_t errstr_size) DD_WUR;

/**
 * @brief Add the consumed \p offsets (next offset to consume per partition,
 *        borrowed) of \p consumer's group to the open transaction, with the
 *        consumer's group metadata (generation, member id: KIP-447), so a
 *        member fenced by a rebalance cannot commit them: its transaction
 *        becomes abortable.
 */
dd_err_t producer_txn_send_offsets(struct producer *p, rd_kafka_t *consumer,
                                   const rd_kafka_topic_partition_list_t *offsets,
                                   int timeout_ms, char *errstr,
                                   size_t errstr_size) DD_WUR;

/** @brief Flush and commit the open transaction. */
dd_err_t producer_txn_commit(struct producer *p, int timeout_ms,
                             char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Abort the open transaction: messages not yet delivered are purged
 *        (their reports come back failed), the delivered ones stay invisible
 *        to read_committed consumers.
 */
dd_err_t producer_txn_abort(struct producer *p, int timeout_ms, char *errstr,
                            size_t errstr_size) DD_WUR;

/**
 * @brief Produce one message (copied).  The partition comes from the key.
 * @param key  Non-empty key bytes.
 * @param opaque  Passed to the delivery report.
 * @returns DD_OK (a report will follow); DD_ERR_TRANSIENT (queue full: poll and
 *          retry); DD_ERR_STATE (the producer is in a fatal state:
 *          producer_fatal; send again through a new one); DD_ERR_INVAL
 *          (unknown topic, too large: errstr).
 */
dd_err_t producer_send(struct producer *p, const char *topic, const void *key,
                       size_t key_len, const void *value, size_t value_len,
                       const struct producer_header *hdrs, size_t n_hdrs,
                       void *opaque, char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief producer_send() to an explicit \p partition of \p topic (the
 *        changelog: a decision goes to its job's partition, DESIGN.md
 *        section 6), or, when \p partition < 0, to the key's partition.
 * @param borrowed  false: \p value is copied, as by producer_send().  true:
 *                  not copied (librdkafka's msgflags 0, neither
 *                  RD_KAFKA_MSG_F_COPY nor _F_FREE): the caller keeps the
 *                  bytes unchanged until this message's delivery report has
 *                  been served, or for the producer's life when no report
 *                  comes (the pipeline's outgoing messages, which live until
 *                  their report: a 14 KB result is not copied again).
 * @returns as producer_send(); DD_ERR_INVAL also for an unknown partition.
 */
dd_err_t producer_send_to(struct producer *p, const char *topic,
                          int32_t partition, const void *key, size_t key_len,
                          const void *value, size_t value_len, bool borrowed,
                          const struct producer_header *hdrs, size_t n_hdrs,
                          void *opaque, char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Learn the leaders of \p topics before the first record is sent to
 *        them: one Metadata request per topic (librdkafka's
 *        rd_kafka_metadata on a topic handle the producer keeps until
 *        producer_destroy), repeated every 50 ms until each partition has a
 *        leader, for at most \p timeout_ms in all.  Without it the first
 *        records of a topic created a moment ago (a new group's changelog)
 *        wait in librdkafka's queue for its metadata refresh: 0.5 s of
 *        results and changelog records stuck at the start of each fresh run
 *        of bench rows 2 and 3 (issue 13).  Never fails: at the bound it
 *        logs a warning naming the topic and what was missing, and sending
 *        works as before.  At most 8 topics a producer, over all calls (the
 *        rest are not tried).  A producer recreated after a fatal error
 *        (producer_replace) is not warmed: its topics exist by then, and
 *        librdkafka learns an existing topic's leader in one round trip.
 *        Not interrupted by a stop: it runs at start-up, where the bound
 *        is only reached while the cluster has no leader for a topic.
 * @param topics  n topic names (NULL or empty ones skipped), borrowed.
 * @returns true when every topic's partitions had a leader; false at the
 *          bound (logged), or when a topic was not tried (over 8).
 * @locality the thread that owns \p p, before it sends; blocks.
 */
bool producer_warm(struct producer *p, const char *const *topics, size_t n,
                   int timeout_ms);

/** @brief Serve delivery reports, waiting up to \p timeout_ms. */
void producer_poll(struct producer *p, int timeout_ms);

/** @returns messages not yet acknowledged (rd_kafka_outq_len). */
int producer_outq_len(struct producer *p);

/**
 * @brief Wait until every message is acknowledged or \p timeout_ms passes.
 * @returns DD_OK; DD_ERR_TIMEOUT.
 */
dd_err_t producer_flush(struct producer *p, int timeout_ms) DD_WUR;

/**
 * @brief Has the producer hit a fatal error?  After one (librdkafka's
 *        idempotent producer before 2.3.0 can hit one after a disconnect,
 *        librdkafka issue 4438; DESIGN.md section 6) it accepts nothing more:
 *        the caller purges it, destroys it and creates a new one.
 */
bool producer_fatal(struct producer *p);

/**
 * @brief Drop every message not yet acknowledged (queued and in flight,
 *        rd_kafka_purge) and serve their delivery reports now: each comes
 *        back to the \p dr callback with DD_ERR_TRANSIENT ("Purged ..."), so
 *        the caller can send it again through another producer.  Waits at
 *        most about 1 s for the reports.
 */
void producer_purge(struct producer *p);

/**
 * @brief Replace *\p pp (after a fatal error) by a new producer with the
 *        same settings and report callback: purge it (producer_purge), and
 *        only when every report was served destroy it and create the new one.
 * @returns DD_OK (*pp is the new producer); DD_ERR_TRANSIENT (reports still
 *          outstanding: *pp unchanged, try again); producer_new()'s errors.
 */
dd_err_t producer_replace(struct producer **pp, const struct cfg *cfg,
                          producer_dr_cb *dr, char *errstr,
                          size_t errstr_size) DD_WUR;

/**
 * @brief Test hook: raise a fatal error as the broker would
 *        (rd_kafka_test_fatal_error, OUT_OF_ORDER_SEQUENCE_NUMBER).
 * @returns DD_OK; DD_ERR_STATE (already fatal, or not idempotent).
 */
dd_err_t producer_test_fatal(struct producer *p, const char *reason) DD_WUR;

/** @brief Destroy (after a flush by the caller); NULL is a no-op. */
void producer_destroy(struct producer *p);

#endif
