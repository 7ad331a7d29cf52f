/**
 * @file consumer.h
 * @brief The pipeline: consume jobs, claim, fetch, commit, publish, store offsets.
 *
 * One pipeline thread (the caller of consumer_run) does every offset decision and
 * every claim-path write (DESIGN.md section 9):
 *   1 poll a message; parse and validate it (job.h); invalid -> DLQ with reason
 *   2 claim its op_id (store.h): NEW/RECLAIMED -> fetch; CONFLICT -> conflicts
 *     topic (once per pair); DUPLICATE of a finished op -> done; DUPLICATE in
 *     flight -> the message waits for that op's result
 *   3 a finished fetch -> result + op state + outbox entry in one WriteBatch ->
 *     produce keyed by event_key -> delivery report -> outbox entry deleted ->
 *     offsets of the op's messages marked done
 *   4 per partition, the stored offset only advances over messages whose work is
 *     durable and acknowledged (work completes out of order);
 *     enable.auto.offset.store=false and the auto-commit commits stored offsets.
 * On start-up unsent outbox entries are produced again (same event_key).
 * Per-partition state (done tracking, commit points, epochs, rebalance
 * decisions) lives in partitions.h; the job API and readiness in api.h.
 * The module is consumer.c (the pipeline), consumer_out.c (its outgoing
 * side: messages kept until acknowledged, delivery reports, the producer's
 * reset), consumer_rebalance.c (the rebalance callback) and consumer_stop.c
 * (the ways out: stop, hurried stop, failed store), sharing the INTERNAL
 * src/consumer_internal.h.
 *
 * Handles: consumer_handles_open() opens what a run uses (store, results
 * producer, HTTP listeners, fetch engine, the jobs topic's Kafka consumer) and
 * consumer_run() drives them, so a test can open them against librdkafka's
 * mock cluster and a loopback origin and look at the store and the topics
 * afterwards.
 * The fetch engine is the backpressure: at fetch.max_inflight ops in flight, the
 * pipeline stops polling the consumer (well within max.poll.interval.ms, since
 * an op's deadline is shorter), instead of pause/resume with the batch APIs of
 * librdkafka 2.0.2 (issue 4208).
 */
#ifndef DEDUPD_CONSUMER_H
#define DEDUPD_CONSUMER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "changelog.h"
#include "err.h"

struct api;
struct cfg;
struct fetch;
struct producer;
struct store;

/** The jobs topic's Kafka consumer (librdkafka inside), subscribed. */
struct consumer;

/** Run options (CLI). */
struct consumer_opts {
    int64_t exit_when_idle_ms;     /**< 0 = run until signalled */
    bool shadow;                   /**< claim and publish outcome "shadow" only */
    const volatile sig_atomic_t *run; /**< cleared by the signal handler */
    const volatile sig_atomic_t *hurry; /**< set by a second signal: leave now
                                             (in-flight ops keep their lease;
                                             a restart reclaims them) */
};

/** Counters of one run. */
struct consumer_stats {
    uint64_t consumed, new_ops, reclaimed, duplicates, duplicates_inflight,
        conflicts, conflicts_reported, invalid, misrouted, results, failed,
        replayed_outbox, fast_path;
    uint64_t fetch_attempts, rotations, throttled, bytes;
    uint64_t single_flight; /**< ops served by another op's transfer */
    uint64_t not_modified;  /**< 304s answered from the stored body */
    uint64_t prefetch_kicks; /**< prefetch kicks the brokers answered
                                  (prefetch_kick.h, consumer.prefetch_kick_ms):
                                  one per drained prefetch queue at most */
    int64_t first_msg_ms, last_msg_ms;
    double pipeline_cpu_s;  /**< CPU time (user + system, seconds) of the
                                 thread that ran consumer_run since that
                                 thread started (dedupd run: the main
                                 thread, so the configuration, the store's
                                 open and the restore are in it, and an
                                 in-process restart's earlier runs), taken
                                 at the run's end: CLOCK_THREAD_CPUTIME_ID,
                                 clock_gettime(3);
                                 libcurl's transfers (the fetch engine's
                                 thread) and librdkafka's threads excluded */
};

/** What one run drives, opened by consumer_handles_open(). */
struct consumer_handles {
    struct store *store;        /**< the op store (group commit on) */
    struct producer *producer;  /**< results, conflicts, dead letters; its
                                     reports go to the run (consumer_run may
                                     replace it after a fatal error) */
    struct api *api;            /**< HTTP listeners (api.h), or NULL */
    struct fetch *fetch;        /**< NULL in shadow mode; consumer_run takes
                                     it (stops and destroys it) */
    struct consumer *consumer;  /**< the jobs topic's consumer, subscribed */
    char run_id[40];            /**< this run's id (the store's lease owner
                                     is "<instance.id>#<run_id>") */
    struct changelog_info changelog; /**< the changelog's partitions and
                                          retention (changelog_ensure) */
    struct changelog_restorer *restorer; /**< its restore consumer */
    bool exactly_once;          /**< processing.guarantee exactly_once: the
                                     producer is transactional */
    bool wipe;                  /**< exactly_once: a transaction was aborted;
                                     the local copy is dropped at the next
                                     consumer_handles_open (run again) */
    char *eos_marker;           /**< exactly_once: the store's "open" marker
                                     file (consumer_handles_close removes it
                                     when clean), or NULL */
    bool clean;                 /**< exactly_once: the run ended with its
                                     last transaction committed and nothing
                                     unacknowledged: the copy is kept */
};

struct store_conf;

/**
 * @brief The store settings `dedupd run` opens its store with (group commit
 *        on), for the store at \p path under run id \p run_id (both
 *        borrowed: they must outlive \p sc's use).
 * @locality any thread.
 */
void consumer_store_conf(const struct cfg *cfg, const char *path,
                         const char *run_id, struct store_conf *sc);

/**
 * @brief Open everything a run uses, in this order: the store (its owner
 *        names a fresh run id), the results producer, the HTTP listeners
 *        (api_new), the fetch engine (unless \p shadow), and the Kafka
 *        consumer of topics.jobs (group consumer.group_id; eager assignors
 *        only: a kafka.partition.assignment.strategy naming a cooperative
 *        assignor is refused with DD_ERR_INVAL and the reason; offsets stored
 *        by the pipeline only, auto-committed), subscribed.  Should a
 *        cooperative rebalance reach the consumer anyway, the process logs
 *        the cause (LOG_CRIT) and exits 1 from the rebalance callback.
 * @param cfg     Frozen config (borrowed; must outlive the handles).
 * @param h       Out: the handles; consumer_handles_close() them, also on
 *                failure (what was opened is then set, the rest NULL).
 * @param errstr  Optional (may be NULL).
 * @returns DD_OK; DD_ERR_INVAL (config: errstr names the key); DD_ERR_IO
 *          (store, a listen port taken); DD_ERR_FATAL (a Kafka client or the
 *          fetch engine could not start); DD_ERR_NOMEM.
 * @locality any thread (main, at start-up).
 */
dd_err_t consumer_handles_open(const struct cfg *cfg, bool shadow,
                               struct consumer_handles *h, char *errstr,
                               size_t errstr_size) DD_WUR;

/**
 * @brief Close what \p h holds, in this order: the Kafka consumer, the fetch
 *        engine, the HTTP listeners (and the job API's producer), the results
 *        producer, the store; each pointer is set to NULL.  The Kafka
 *        consumer was closed (it left its group) by consumer_run; a producer
 *        is destroyed without a flush (consumer_run flushed it).
 * @locality the thread that ran consumer_run (or opened them).
 */
void consumer_handles_close(struct consumer_handles *h);

/**
 * @brief Run the pipeline until *opts->run is 0 or the run is idle for
 *        opts->exit_when_idle_ms (every assigned partition at its end, nothing
 *        in flight, nothing unacknowledged).  On stop: finish in-flight work
 *        within shutdown.grace_ms, flush, commit stored offsets, leave the
 *        group (rd_kafka_consumer_close).  Once *opts->hurry is set (a second
 *        signal): leave within a second: at most 300 ms for what is in
 *        flight, no fsync, commits not waited for, the group left without
 *        the revoke's drain, the job API's waits cut short
 *        (api_hurry_watch); returns DD_OK.  After a failed store write or
 *        WAL fsync: no more claims or completions; the results already
 *        stored are published (and their changelog records), what is done
 *        is committed, and DD_ERR_IO names the cause and the ops abandoned.
 * @param h      Open handles (consumer_handles_open); h->fetch must be NULL
 *               exactly when opts->shadow.  Takes ownership of h->fetch, also
 *               on failure: it is destroyed (its thread calls into the run)
 *               and h->fetch set to NULL before the return.  h->producer may
 *               be replaced by a new producer after a fatal producer error.
 * @param stats  Out: counters of the run.
 * @returns DD_OK; DD_ERR_IO (outbox replay read, or a failed store write or
 *          WAL fsync: stopped, "store write failed, stopped: N ops
 *          abandoned ...: <cause>", unacknowledged jobs are redelivered);
 *          DD_ERR_FATAL (a corrupt outbox key or record at the replay);
 *          DD_ERR_NOMEM.  None is retriable within the run.
 * @locality the pipeline thread: the caller's, for the whole run.
 */
dd_err_t consumer_run(const struct cfg *cfg, struct consumer_handles *h,
                      const struct consumer_opts *opts,
                      struct consumer_stats *stats, char *errstr,
                      size_t errstr_size) DD_WUR;

/** @brief Print \p st as one JSON line to \p fp. */
void consumer_stats_print(const struct consumer_stats *st, FILE *fp);

#endif
