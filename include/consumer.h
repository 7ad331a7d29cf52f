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

#include "err.h"

struct cfg;

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
    int64_t first_msg_ms, last_msg_ms;
};

/**
 * @brief Run the pipeline until *opts->run is 0 or the run is idle for
 *        opts->exit_when_idle_ms (every assigned partition at its end, nothing
 *        in flight, nothing unacknowledged).  On stop: finish in-flight work
 *        within shutdown.grace_ms, flush, commit stored offsets, close.
 * @param stats  Out: counters of the run.
 * @returns DD_OK; DD_ERR_INVAL (config); DD_ERR_IO (store); DD_ERR_FATAL.
 */
dd_err_t consumer_run(const struct cfg *cfg, const struct consumer_opts *opts,
                      struct consumer_stats *stats, char *errstr,
                      size_t errstr_size) DD_WUR;

/** @brief Print \p st as one JSON line to \p fp. */
void consumer_stats_print(const struct consumer_stats *st, FILE *fp);

#endif
