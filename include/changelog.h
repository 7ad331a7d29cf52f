/**
 * @file changelog.h
 * @brief The changelog topic: the durable record of every dedup decision
 *        (DESIGN.md sections 4 and 6), its creation and checks at start-up,
 *        the identity record, and the restore of a partition's copy.
 *
 * The topic is `<consumer.group_id>-changelog`: one per consumer group, so
 * two deployments or a shadow run never share one; co-partitioned with the
 * jobs topic (partition p of the changelog holds the decisions about the jobs
 * of partition p).  Keys and values (store.h, "the changelog's side"): an
 * op's record keyed by op_id; conflict marks keyed
 * "conflict/<op_id>/<request_hash>"; the identity settings keyed
 * CHANGELOG_IDENTITY_KEY.  Records are produced by the pipeline's producer
 * (consumer.c) to the partition of the job they decide, explicitly.
 *
 * Restore (changelog_restore): a separate consumer handle that never
 * subscribes and never commits (group.id `<consumer.group_id>-restore`,
 * enable.auto.commit=false, isolation.level=read_committed,
 * auto.offset.reset=error, enable.partition.eof=true) reads each partition
 * by absolute offsets from the store's checkpoint to its end, found by
 * position: the partition's EOF event (under read_committed the end is the
 * last stable offset, often a transaction marker, not a record), or a
 * checkpoint already at the high watermark.  kafka.* options reach it
 * except the consumer-only ones (group.instance.id, isolation.level, ...):
 * the connection and security settings are shared.
 *
 * Threads: every function runs on the pipeline thread (the restore runs
 * inside librdkafka's rebalance callback); not thread-safe.
 */
#ifndef DEDUPD_CHANGELOG_H
#define DEDUPD_CHANGELOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "store.h"

struct cfg;

/** The identity record's key (no op_id can be it: no ':' and not 64 hex). */
#define CHANGELOG_IDENTITY_KEY "__identity"

/** Room for a changelog topic name. */
#define CHANGELOG_TOPIC_MAX 320

/** The changelog's segment.ms bound (DESIGN.md section 6): 1 h. */
#define CHANGELOG_SEGMENT_MS_MAX 3600000LL

/** What changelog_ensure() found. */
struct changelog_info {
    int32_t partitions;          /**< of the jobs topic = of the changelog */
    int64_t delete_retention_ms; /**< the changelog's delete.retention.ms: a
                                      checkpoint older than it is not
                                      trusted (tombstones may be gone) */
    bool created;                /**< this call created the changelog */
};

/** @brief "<consumer.group_id>-changelog" into \p out (CHANGELOG_TOPIC_MAX). */
void changelog_topic_of(const struct cfg *cfg, char *out, size_t size);

/**
 * @returns the retention.ms the changelog needs: the longest op record life
 *          (store_record_life_ms: the ops TTL, or store.failed_ttl_ms + half
 *          the ops TTL when longer) + the longest job deadline (24 h) + 1 h,
 *          in ms (no overflow: each TTL is at most a year, config.c).
 *          Time-based deletion must not take an op's last record while the
 *          op lives (DESIGN.md section 6).
 */
int64_t changelog_retention_ms(const struct cfg *cfg);

/**
 * @brief Start-up check of the topics (Admin API and metadata, at most
 *        about 30 s): the jobs topic and the output topics (results,
 *        conflicts, dlq) exist; the changelog exists with the
 *        same partition count, or is created (cleanup.policy=compact,delete,
 *        retention.ms = changelog_retention_ms(), segment.ms = 1 h,
 *        delete.retention.ms = 1 d; replication: the broker's default);
 *        an existing changelog's cleanup.policy includes compact, its
 *        retention.ms is at least changelog_retention_ms() (or -1) and its
 *        segment.ms at most 1 h.
 * @param info  Out.
 * @returns DD_OK; DD_ERR_INVAL (a topic missing or mis-configured: errstr
 *          names the topic, the setting or both partition counts; exit 2);
 *          DD_ERR_TIMEOUT / DD_ERR_IO (no answer from the brokers).
 */
dd_err_t changelog_ensure(const struct cfg *cfg, struct changelog_info *info,
                          char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief The identity record's value: JSON with the key version "v", the
 *        variance and credential header lists as the canonical request uses
 *        them (lower-case, sorted) and "digest", the hex SHA-256 of the
 *        canonical JSON of the other three (DESIGN.md section 2).
 * @returns a malloc'd NUL-terminated string (free()); never NULL (dd.h's
 *          out-of-memory policy).
 */
char *changelog_identity_value(const struct cfg *cfg);

/**
 * @brief Compare a restored identity record with this instance's settings.
 * @returns DD_OK (same digest); DD_ERR_INVAL (they differ: errstr names the
 *          first setting that differs, both values, and that changing them
 *          means a new consumer group; or the record is not readable).
 */
dd_err_t changelog_identity_check(const struct cfg *cfg, const void *value,
                                  size_t len, char *errstr,
                                  size_t errstr_size) DD_WUR;

struct changelog_restorer;

/**
 * @brief Create the restore consumer (see the file comment).
 * @param out  Out: changelog_restorer_destroy().
 * @returns DD_OK; DD_ERR_INVAL (config: errstr names the key); DD_ERR_FATAL.
 */
dd_err_t changelog_restorer_new(const struct cfg *cfg,
                                struct changelog_restorer **out, char *errstr,
                                size_t errstr_size) DD_WUR;

/** @brief Close and free; NULL is a no-op. */
void changelog_restorer_destroy(struct changelog_restorer *r);

/** What one changelog_restore() did. */
struct changelog_restore_stats {
    uint64_t records;        /**< records read */
    uint64_t bytes;          /**< their key and value bytes */
    int64_t ms;              /**< wall time of the restore */
    size_t from_start;       /**< partitions restored from the log start */
    uint64_t prefetch_kicks; /**< prefetch kicks answered (prefetch_kick.h,
                                  consumer.prefetch_kick_ms) */
    struct store_restore_counts counts; /**< what the store did with them */
};

/**
 * @brief Restore partitions \p parts (n of them) of the changelog into
 *        \p store: from each one's checkpoint (from the log start when there
 *        is none, when it is older than info->delete_retention_ms, or when
 *        the broker answers offset-out-of-range) to its end; apply every
 *        record (store_restore_apply); check each identity record met;
 *        then write each partition's checkpoint (its end, now).  Logs one
 *        line per 2 s with records/s and the ETA, and one at the end.
 * @returns DD_OK; DD_ERR_INVAL (an identity record differs: errstr says
 *          which setting; the instance must stop with exit 2);
 *          DD_ERR_TIMEOUT (no progress for 60 s: errstr names the
 *          partitions); DD_ERR_IO / DD_ERR_FATAL (the store's errors).
 */
dd_err_t changelog_restore(struct changelog_restorer *r, struct store *store,
                           const struct cfg *cfg,
                           const struct changelog_info *info,
                           const int32_t *parts, size_t n,
                           struct changelog_restore_stats *st, char *errstr,
                           size_t errstr_size) DD_WUR;

#endif
