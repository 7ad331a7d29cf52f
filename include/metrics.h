/**
 * @file metrics.h
 * @brief The process's Prometheus metrics: a fixed registry, lock-free updates.
 *
 * One registry per process (like the Prometheus client libraries' default
 * registry): it is a static object, zero at start, so there is nothing to
 * create or destroy and any module may count from any thread.  Every update is
 * one or two relaxed C11 atomic operations (no lock, no allocation); a scrape
 * (metrics_render(), called on the libmicrohttpd thread) reads the same
 * atomics.
 *
 * The set of metrics is closed and listed in the enums below, so every label
 * value comes from a fixed list compiled in here (bounded cardinality) and no
 * caller text ever reaches the output: secrets and payloads cannot leak through
 * metrics.  Names follow Prometheus conventions: counters end in `_total`,
 * durations are in seconds, sizes in bytes.
 *
 * Exposed (text exposition format 0.0.4, every family with `# HELP` and
 * `# TYPE`):
 *
 * | metric | type | labels |
 * | --- | --- | --- |
 * | dedupd_jobs_total | counter | outcome (metrics_job_outcome) |
 * | dedupd_fast_path_decisions_total | counter | |
 * | dedupd_fetch_attempts_total | counter | category (fetch.h + "other") |
 * | dedupd_rotations_total | counter | |
 * | dedupd_fetched_bytes_total | counter | |
 * | dedupd_results_total | counter | outcome (fetched, failed, shadow) |
 * | dedupd_conflicts_reported_total | counter | |
 * | dedupd_dlq_total | counter | |
 * | dedupd_lease_recoveries_total | counter | |
 * | dedupd_outbox_replayed_total | counter | |
 * | dedupd_job_attempts | histogram | buckets 1,2,3,5,8,13,+Inf |
 * | dedupd_fetch_duration_seconds | histogram | buckets 0.005 .. 60 |
 * | dedupd_job_latency_seconds | histogram | buckets 0.05 .. 600 |
 * | dedupd_outbox_pending ... dedupd_start_time_seconds | gauge | |
 * | dedupd_build_info | gauge | version (compile-time DEDUPD_VERSION) |
 *
 * Histograms keep one non-cumulative count per bucket and a sum; a render
 * accumulates the buckets and derives `_count` from them, so `_count` always
 * equals the `+Inf` bucket even while other threads observe.
 */
#ifndef DEDUPD_METRICS_H
#define DEDUPD_METRICS_H

#include <stddef.h>
#include <stdint.h>

/** Outcome of one job on the claim path (dedupd_jobs_total{outcome}). */
enum metrics_job_outcome {
    METRICS_JOB_NEW = 0,            /**< "new": first claim, will be fetched */
    METRICS_JOB_DUPLICATE,          /**< "duplicate": answered from the store */
    METRICS_JOB_DUPLICATE_INFLIGHT, /**< "duplicate_inflight": op running */
    METRICS_JOB_CONFLICT,           /**< "conflict": same op_id, other hash */
    METRICS_JOB_INVALID,            /**< "invalid": not a valid job (DLQ) */
    METRICS_JOB_RECLAIMED,          /**< "reclaimed": expired lease taken */
    METRICS_JOB_MISROUTED,          /**< "misrouted": wrong partition for key */
    METRICS_JOB__N
};

/** Outcome of a published result (dedupd_results_total{outcome}). */
enum metrics_result_outcome {
    METRICS_RESULT_FETCHED = 0, /**< "fetched" */
    METRICS_RESULT_FAILED,      /**< "failed" */
    METRICS_RESULT_SHADOW,      /**< "shadow" (shadow mode, not fetched) */
    METRICS_RESULT__N
};

/** Unlabelled counters, each rendered as `<name>_total`. */
enum metrics_counter {
    METRICS_FAST_PATH_DECISIONS = 0, /**< dedupd_fast_path_decisions_total */
    METRICS_ROTATIONS,               /**< dedupd_rotations_total */
    METRICS_FETCHED_BYTES,           /**< dedupd_fetched_bytes_total (bytes) */
    METRICS_CONFLICTS_REPORTED,      /**< dedupd_conflicts_reported_total */
    METRICS_DLQ,                     /**< dedupd_dlq_total */
    METRICS_LEASE_RECOVERIES,        /**< dedupd_lease_recoveries_total */
    METRICS_OUTBOX_REPLAYED,         /**< dedupd_outbox_replayed_total */
    METRICS_SINGLE_FLIGHT,           /**< dedupd_single_flight_shared_total */
    METRICS_WORKFLOW_RESTARTS,       /**< dedupd_workflow_restarts_total */
    METRICS_HOST_WAITS,              /**< dedupd_host_waits_total */
    METRICS_PROXY_AUTH_SUSPENSIONS,  /**< dedupd_proxy_auth_suspensions_total */
    METRICS_RETRY_WAITS,             /**< dedupd_retry_waits_total */
    METRICS_PRODUCER_RESETS,         /**< dedupd_producer_resets_total */
    METRICS_CHANGELOG_RESTORED,      /**< dedupd_changelog_restored_records_total */
    METRICS_CHANGELOG_RECORDS,       /**< dedupd_changelog_records_total:
                                          acknowledged by the broker */
    METRICS_JOBS_MISROUTED,           /**< dedupd_jobs_misrouted_total */
    METRICS_RELEASES,                /**< dedupd_releases_total */
    METRICS_TXN_COMMITTED,           /**< dedupd_transactions_committed_total */
    METRICS_TXN_ABORTED,             /**< dedupd_transactions_aborted_total */
    METRICS_PREFETCH_KICKS,          /**< dedupd_prefetch_kicks_total
                                          (prefetch_kick.h) */
    METRICS_COUNTER__N
};

/** Gauges, set by the module that owns the value. */
enum metrics_gauge {
    METRICS_OUTBOX_PENDING = 0,    /**< dedupd_outbox_pending (records) */
    METRICS_CONSUMER_LAG_MESSAGES, /**< dedupd_consumer_lag_messages: sum over
                                        the assigned partitions */
    METRICS_OPS_INFLIGHT,          /**< dedupd_ops_inflight (ops) */
    METRICS_STORE_SIZE_BYTES,      /**< dedupd_store_size_bytes */
    METRICS_INDEX_ENTRIES,         /**< dedupd_index_entries */
    METRICS_READY,                 /**< dedupd_ready: 0 or 1 */
    METRICS_START_TIME_SECONDS,    /**< dedupd_start_time_seconds (Unix s) */
    METRICS_PARTITIONS_RESTORING,  /**< dedupd_partitions_restoring */
    METRICS_PARTITIONS_ASSIGNED,   /**< dedupd_partitions_assigned */
    METRICS_INDEX_COMPLETE,        /**< dedupd_index_complete: 0 or 1 */
    METRICS_GAUGE__N
};

/** Histograms. */
enum metrics_hist {
    METRICS_JOB_ATTEMPTS = 0,       /**< dedupd_job_attempts: attempts per
                                         completed job (count) */
    METRICS_FETCH_DURATION_SECONDS, /**< dedupd_fetch_duration_seconds: one
                                         fetch attempt (s) */
    METRICS_JOB_LATENCY_SECONDS,    /**< dedupd_job_latency_seconds: message
                                         timestamp to result acknowledged (s) */
    METRICS_HIST__N
};

/** Number of fetch attempt categories, "other" included. */
#define METRICS_FETCH_CATEGORY_N 17

/**
 * @brief Count one job of outcome \p o in dedupd_jobs_total.
 * @param o  0 .. METRICS_JOB__N-1 (assert).
 * @locality any thread; lock-free.
 */
void metrics_job(enum metrics_job_outcome o);

/**
 * @brief Count one published result of outcome \p o in dedupd_results_total.
 * @param o  0 .. METRICS_RESULT__N-1 (assert).
 * @locality any thread; lock-free.
 */
void metrics_result(enum metrics_result_outcome o);

/**
 * @brief Count one fetch attempt and observe its duration.
 *
 * Increments dedupd_fetch_attempts_total{category} and, when \p duration_s is
 * a finite value >= 0, observes it in dedupd_fetch_duration_seconds.
 * @param category    NUL-terminated category of fetch.h (struct fetch_attempt
 *                    .category; borrowed, not kept): "throttled", "dns", ...
 *                    NULL or "" means success and counts as "ok"; any name
 *                    outside the fixed list counts as "other", so the label
 *                    set stays bounded whatever the caller passes.
 * @param duration_s  Attempt duration in seconds; negative or NaN = unknown
 *                    (not observed).
 * @locality any thread; lock-free.
 */
void metrics_fetch_attempt(const char *category, double duration_s);

/**
 * @brief Add \p n to the unlabelled counter \p c (bytes for
 *        METRICS_FETCHED_BYTES, events otherwise).
 * @param c  0 .. METRICS_COUNTER__N-1 (assert).
 * @param n  Increment; 0 is allowed (no-op).
 * @locality any thread; lock-free.
 */
void metrics_add(enum metrics_counter c, uint64_t n);

/**
 * @brief Set gauge \p g to \p v (units in the gauge's name).
 * @param g  0 .. METRICS_GAUGE__N-1 (assert).
 * @locality any thread; lock-free.  One owner per gauge is expected: concurrent
 *           setters race (last write wins), as with any gauge.
 */
void metrics_gauge_set(enum metrics_gauge g, int64_t v);

/**
 * @brief Add \p delta (may be negative) to gauge \p g atomically (for gauges
 *        updated by several threads, such as METRICS_OPS_INFLIGHT).
 * @param g  0 .. METRICS_GAUGE__N-1 (assert).
 * @locality any thread; lock-free.
 */
void metrics_gauge_add(enum metrics_gauge g, int64_t delta);

/**
 * @brief Read gauge \p g (for tests and for owners that also log the value).
 * @locality any thread; lock-free.
 */
int64_t metrics_gauge_get(enum metrics_gauge g);

/**
 * @brief Observe \p v in histogram \p h.
 * @param h  0 .. METRICS_HIST__N-1 (assert).
 * @param v  Value in the histogram's unit (seconds, or attempts).  NaN is
 *           ignored; negative values land in the first bucket (Prometheus
 *           histograms expect v >= 0, callers should not pass them).
 * @locality any thread; lock-free (the sum is a CAS loop on its 64 bits).
 */
void metrics_observe(enum metrics_hist h, double v);

/**
 * @brief Render every metric in the Prometheus text exposition format 0.0.4
 *        (Content-Type `text/plain; version=0.0.4`).
 * @param len  Out: length of the text in bytes, without the terminating NUL.
 * @returns a NUL-terminated heap string the caller frees with free();
 *          NULL when out of memory (*len is then 0).
 * @locality any thread; concurrent updates are allowed (each value is read
 *           once, so a scrape is consistent per series, not across series).
 */
char *metrics_render(size_t *len);

/**
 * @brief Zero every counter, gauge and histogram (tests; a new process starts
 *        at zero without calling it).
 * @locality any thread, but values updated concurrently may survive.
 */
void metrics_reset(void);

#endif
