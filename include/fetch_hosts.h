/**
 * @file fetch_hosts.h
 * @brief INTERNAL to the fetch engine (fetch.c, fetch_hosts.c and their unit
 *        tests): the per-host limits' table.
 *
 * One slot per target host (the lower-case host of the URL, every port): the
 * requests running there, and a token bucket (fetch_bucket_take, fetch.h).
 * The engine asks before it starts a request (fetch_hosts_check: the
 * concurrency cap fetch.per_host_max_inflight first, then the bucket of
 * fetch.per_host_rate_per_min and fetch.per_host_burst, probed without
 * taking), takes the token and counts the request when it starts
 * (fetch_hosts_take), and releases the slot when the request ends
 * (fetch_hosts_release).  Slots of hosts idle long enough for their bucket to
 * be full again are forgotten (fetch_hosts_sweep); a slot with running
 * requests never is, so a slot pointer held by a running request stays valid.
 *
 * What waits and how it is counted is the engine's (fetch.c, host_gate).
 * Threads: the fetch-engine thread only (fetch_hosts_new/destroy: the
 * thread that starts and stops the engine).
 */
#ifndef DEDUPD_FETCH_HOSTS_H
#define DEDUPD_FETCH_HOSTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fetch_hosts;
struct fetch_host;

/** The limits (0 = none). */
struct fetch_hosts_conf {
    int64_t max_inflight;      /**< fetch.per_host_max_inflight */
    int64_t rate_per_min;      /**< fetch.per_host_rate_per_min */
    int64_t burst;             /**< fetch.per_host_burst */
};

/** What fetch_hosts_check() found. */
enum fetch_hosts_verdict {
    FETCH_HOSTS_GO = 0,        /**< may start now (take with fetch_hosts_take) */
    FETCH_HOSTS_FULL = 1,      /**< the concurrency cap is reached: wait for a
                                    request on that host to end */
    FETCH_HOSTS_RATE = 2,      /**< the bucket is empty: wait *wait_ms */
};

/**
 * @brief A table with the limits \p conf (copied).
 * @returns the table (never NULL; out of memory: dd_oom); free with
 *          fetch_hosts_destroy().
 * @locality the thread that starts the engine.
 */
struct fetch_hosts *fetch_hosts_new(const struct fetch_hosts_conf *conf);

/** @brief Free the table and its slots; NULL is a no-op.
 *  @locality the thread that stops the engine (after it stopped). */
void fetch_hosts_destroy(struct fetch_hosts *h);

/** @returns true when a limit is configured (else every check is GO with
 *  no slot). @locality fetch-engine thread. */
bool fetch_hosts_enabled(const struct fetch_hosts *h);

/**
 * @brief May a request to \p host start at \p now_ms?
 * @param host     Lower-case host, NUL-terminated (borrowed; copied into a
 *                 new slot).
 * @param slot     Out: the host's slot (GO; NULL when no limit is
 *                 configured), valid while a request counts on it.
 * @param wait_ms  Out (RATE): ms until the bucket has a token.
 * @returns the verdict.
 * @locality fetch-engine thread.
 */
enum fetch_hosts_verdict fetch_hosts_check(struct fetch_hosts *h,
                                           const char *host, int64_t now_ms,
                                           struct fetch_host **slot,
                                           int64_t *wait_ms);

/** @brief A request starts on \p slot (NULL: no-op): takes a token and
 *  counts it running. @locality fetch-engine thread. */
void fetch_hosts_take(struct fetch_hosts *h, struct fetch_host *slot,
                      int64_t now_ms);

/** @brief A request counted on \p slot (NULL: no-op) ended.
 *  @locality fetch-engine thread. */
void fetch_hosts_release(struct fetch_host *slot);

/**
 * @brief Forget idle hosts (no request running, not checked for 60 s or the
 *        bucket's refill time, whichever is longer); at most every 10 s.
 * @locality fetch-engine thread.
 */
void fetch_hosts_sweep(struct fetch_hosts *h, int64_t now_ms);

/** @returns the slots kept (tests). @locality fetch-engine thread. */
size_t fetch_hosts_count(const struct fetch_hosts *h);

/** @returns requests counted running on \p host (0 when no slot; tests).
 *  @locality fetch-engine thread. */
int fetch_hosts_inflight(const struct fetch_hosts *h, const char *host);

#endif
