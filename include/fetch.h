/**
 * @file fetch.h
 * @brief The fetch engine: one thread running a libcurl multi loop.
 *
 * The pipeline hands requests in with fetch_submit() (a bounded work queue; the
 * caller applies backpressure from fetch_inflight()) and takes finished ones back
 * with fetch_take() (a completion queue).  The engine binds each op to one proxy
 * session of the pool (proxy_pool.h), retries with exponential backoff and full
 * jitter within the attempt cap and the op's deadline, and on a blocked status
 * (429 by default) puts the session into a cooldown of Retry-After
 * (RFC 9110 section 10.2.3; fetch.cooldown_default_ms when absent or invalid,
 * clamped to fetch.retry_after_max_ms), rotates the op to another session and
 * retries; rotations are counted and capped apart from attempts.  A 429 is never
 * a final success.  Retry waits live in this thread's timers.
 *
 * Only safe requests (GET/HEAD, or "safe": true) are retried after the request may
 * have reached the origin; unsafe ones are retried only on failures that happen
 * before any byte was sent (proxy/connect/DNS).
 *
 * Safety: TLS verification on; the body cap is enforced in the write callback;
 * redirects are capped; an SSRF guard refuses IP-literal targets in loopback,
 * link-local and private ranges unless a CIDR of fetch.allow_targets allows them,
 * and when fetching direct checks the resolved address of every connection
 * (open-socket callback).  Proxy credentials go through CURLOPT_PROXYUSERNAME /
 * CURLOPT_PROXYPASSWORD, never in a URL.
 */
#ifndef DEDUPD_FETCH_H
#define DEDUPD_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct fetch;
struct cfg;

/** One header of a request (borrowed strings). */
struct fetch_header {
    const char *name;
    const char *value;
};

/** A request to fetch.  fetch_submit() copies everything it needs. */
struct fetch_req {
    const char *url;                  /**< as submitted */
    const char *method;               /**< upper-case */
    const struct fetch_header *headers;
    size_t n_headers;
    const void *body;                 /**< may be NULL */
    size_t body_len;
    bool safe;                        /**< may be retried after bytes were sent */
    const char *country;              /**< upper-case ISO code or NULL: only
                                           sessions of that country serve it */
    int64_t deadline_ms;              /**< absolute, ms since epoch */
    void *opaque;                     /**< returned in the result */
};

/** One attempt of a fetch (redirect hops of one attempt share its record). */
struct fetch_attempt {
    int64_t started_at_ms, ended_at_ms;
    long status;                /**< HTTP status, 0 if none */
    uint64_t bytes;             /**< body bytes received */
    char session[128];          /**< session name, never credentials */
    char exit_addr[64];         /**< address connected to (proxy or target) */
    char category[32];          /**< failure category, "" if it succeeded */
    char error[256];            /**< error text, "" if none */
};

/** A finished fetch.  Owned by the caller of fetch_take(): fetch_result_destroy. */
struct fetch_result {
    void *opaque;
    bool ok;                    /**< a final HTTP answer (not blocked, not 5xx) */
    long status;                /**< last HTTP status, 0 if none */
    char *category;             /**< failure category when !ok (static text) */
    char *error;                /**< error text when !ok (never credentials) */
    char *final_url;            /**< after redirects, or NULL */
    char *content_type, *etag, *last_modified; /**< or NULL */
    unsigned char *body;        /**< decoded body (NUL-terminated extra byte) */
    size_t body_len;
    uint32_t attempts;          /**< attempts made */
    uint32_t rotations;         /**< session rotations */
    uint32_t throttled;         /**< blocked answers (429...) seen */
    char session[128];          /**< session name (exit), never credentials */
    int64_t fetched_at_ms;      /**< end of the last attempt */
    struct fetch_attempt *attempt_log; /**< one record per attempt (owned) */
    size_t n_attempt_log;
};

/** Cumulative counters (read any time; atomics). */
struct fetch_stats {
    uint64_t attempts, rotations, throttled, bytes, completed, failed;
};

/**
 * @brief Start the engine thread.
 * @param cfg  Frozen config (borrowed; must outlive the engine).
 * @param out  Out: engine; stop with fetch_destroy().
 * @returns DD_OK; DD_ERR_INVAL (bad proxy or CIDR in config: errstr says which);
 *          DD_ERR_FATAL (thread or curl multi could not start).
 */
dd_err_t fetch_new(const struct cfg *cfg, struct fetch **out, char *errstr,
                   size_t errstr_size) DD_WUR;

/**
 * @brief Stop the thread: transfers still running end with category "canceled".
 *        Their results stay takeable until destroy.  fetch_destroy(NULL) no-op.
 */
void fetch_destroy(struct fetch *f);

/**
 * @brief Queue a request.  Never blocks.
 * @returns DD_OK; DD_ERR_NOMEM.
 * @locality any thread.
 */
dd_err_t fetch_submit(struct fetch *f, const struct fetch_req *req) DD_WUR;

/**
 * @brief Take one finished request, waiting at most \p timeout_ms (0 = no wait).
 * @returns the result (caller owns; fetch_result_destroy) or NULL.
 */
struct fetch_result *fetch_take(struct fetch *f, int timeout_ms);

/** @returns requests submitted and not yet taken. */
size_t fetch_inflight(struct fetch *f);

/** @brief Copy the counters. */
void fetch_stats_get(struct fetch *f, struct fetch_stats *st);

/** @brief Free a result; NULL is a no-op. */
void fetch_result_destroy(struct fetch_result *r);

/**
 * @brief SSRF guard: is the IP literal \p host (v4 or v6, brackets allowed)
 *        in a refused range and not allowed by \p allow (CIDR list)?
 * @param refused Out: true when the target must be refused.
 * @returns true if \p host is an IP literal (false: a name; nothing decided).
 */
bool fetch_ip_refused(const char *host, char *const *allow, size_t n_allow,
                      bool *refused);

#endif
