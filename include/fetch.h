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
 * Deadline: an op never waits past fetch_req.deadline_ms.  A retry starts after
 * its backoff and once a session that serves the op can take it (retry.h
 * retry_plan); when every such session cools down until the deadline or later
 * (a Retry-After beyond the time left), the op fails at once with category
 * "throttled" and no FETCH_RETRY_WAIT is reported; the failed attempt's record
 * keeps the wait the server asked for (its error: "the server asked to wait N
 * ms (Retry-After: V)").  The sessions keep their cooldowns for other ops.
 * When the backoff alone runs out the time, the op fails with its attempt's
 * category.
 *
 * SOCKS replies about the target (RFC 1928 section 6: 3 network unreachable,
 * 4 host unreachable, 5 connection refused, 6 TTL expired; fetch_outcome.h):
 * the target's failure, "dns" (reply 4 about a name the exit resolves) or
 * "connect", retried like the same failure fetched direct, on the same session,
 * whose health (errors, cooldown) is left alone.  Other SOCKS failures are
 * the proxy's: "proxy_connect" (with another session to go to, the failing
 * one cools down and the op moves on).
 *
 * Only safe requests (GET/HEAD, or "safe": true) are retried after the request may
 * have reached the origin; unsafe ones are retried only on failures that happen
 * before any byte was sent (proxy/connect/DNS).
 *
 * Workflows (a request with steps): the steps run in order on ONE session (the
 * op's sticky session); cookies set by a step's responses go to the later steps
 * (an in-memory cookie jar per op, dropped whenever the op changes session);
 * every step passes the same guards, limits and retry rules as a single
 * request.  A step that fails mid-way on a session failure (proxy or transport
 * error, a blocked status, 5xx after fetch.workflow_step_retries retries of a
 * safe step on the same session, proxy_auth, or a timed session that rotated
 * under it) discards the partial run: when the workflow is restartable (every
 * step safe, or "replayable": true) the op takes another session and restarts
 * from its first step (at most fetch.workflow_max_restarts times); otherwise
 * it fails with the step's category.  A non-restartable workflow that meets a
 * blocked status mid-way waits out Retry-After on the same exit and retries
 * that step (a 429 was not acted on).  The result is the last step's response
 * with one record per step (fetch_step_result).
 *
 * Per-host limits: at most fetch.per_host_max_inflight requests to one target
 * host (lower-case name or IP literal, every port) run at once, and requests
 * start at most fetch.per_host_rate_per_min per minute with a token bucket of
 * fetch.per_host_burst; requests over either limit wait in the engine (they
 * are not failed, unless their deadline passes while they wait).  Every
 * request counts: attempts, redirect hops and workflow steps.
 *
 * proxy_auth (407, or a SOCKS5 authentication rejection): the session is
 * retired and its credential set (every session of its provider) is
 * suspended for fetch.proxy_auth_cooldown_ms; the op moves to a session of
 * another credential set (a workflow mid-way only when restartable), else it
 * fails with proxy_auth.  Ops that find no session outside suspended sets
 * fail with proxy_auth at once rather than wait.  A plain exit of proxy.exits
 * has no credentials to suspend: after a 407 it cools down for
 * fetch.cooldown_default_ms and the op moves to another exit if there is one.
 *
 * Timed rotation (provider rotation "timed", rotate_every_s = N): the provider
 * changes a session's exit every N s, counted from the session's creation.
 * The engine treats each interval as a new exit: no connection (tunnel)
 * opened in an earlier interval is reused (libcurl's connection lifetime
 * limit counts whole seconds, so in the first 2 s of an interval every
 * request opens a new tunnel; later, tunnels of the interval are reused),
 * the old exit's cooldown and error
 * count no longer apply, and fetch_result.session_rotates_at_ms tells when the
 * exit that served the result stops being current.  dedupd serves no stored
 * answer without a new request (single-flight shares a transfer still in
 * flight; conditional refetch reuses a body only on the origin's 304); anything
 * that reuses a fetched answer as "through this session" must not keep it
 * past that instant.
 *
 * Safety: TLS verification on; the body cap is enforced in the write callback;
 * redirects are capped; the SSRF guard (guard.h) refuses IP-literal targets in
 * loopback, link-local and private ranges unless a CIDR of fetch.allow_targets
 * allows them, and when fetching direct checks the resolved address of every
 * connection (open-socket callback).  Proxy credentials go through
 * CURLOPT_PROXYUSERNAME / CURLOPT_PROXYPASSWORD, never in a URL.
 *
 * Inside the engine: fetch.c runs the transfer state machine, its queues
 * and the multi loop; fetch_easy.c sets up its libcurl easy handles
 * (options, proxy credentials, request, cookie jar, callbacks) with the
 * state they share in src/fetch_internal.h; proxy_pool.c the sessions
 * (pick / report);
 * fetch_outcome.c classifies a finished transfer (pure); fetch_hosts.c
 * holds the per-host limits' table; guard.c the SSRF guard.
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

/** One step of a workflow (borrowed strings). */
struct fetch_step {
    const char *url;
    const char *method;               /**< upper-case */
    const struct fetch_header *headers;
    size_t n_headers;
    const void *body;                 /**< may be NULL */
    size_t body_len;
};

/** A request to fetch.  fetch_submit() copies everything it needs.  With
 *  n_steps > 0 it is a workflow: url/method/headers/body are ignored and the
 *  steps run in order (safe then applies to every step). */
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
    const char *rotation;             /**< "sticky", "timed", "per_request" or
                                           NULL (any): only sessions of
                                           providers with that mode serve it;
                                           per_request also opens a new proxy
                                           connection for every attempt.
                                           Plain exits and direct serve any
                                           job.  When no session can serve
                                           the request it fails at once with
                                           proxy_connect */
    int64_t deadline_ms;              /**< absolute, ms since epoch */
    void *opaque;                     /**< returned in the result */
    const struct fetch_step *steps;   /**< workflow steps, or NULL */
    size_t n_steps;
    bool replayable;                  /**< a workflow may restart from its
                                           first step although not safe */
    int64_t not_before_ms;            /**< absolute, ms since epoch: the first
                                           attempt starts no earlier, and is
                                           reported to the retry hook as
                                           FETCH_RETRY_START (a reclaimed
                                           retryable op resuming its wait);
                                           0 = at once, not reported */
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
    uint32_t step;              /**< workflow step index (0 for a request) */
};

/** The outcome of one workflow step (of the run that produced the result). */
struct fetch_step_result {
    long status;                /**< HTTP status, 0 if none */
    char *final_url;            /**< after redirects (owned), or NULL */
    uint64_t bytes;             /**< body bytes received */
    char body_sha256[65];       /**< hex SHA-256 of the body, "" if none */
    uint32_t attempts;          /**< attempts of this step in this run */
    char category[32];          /**< failure category, "" if it succeeded */
    char session[128];          /**< session name, never credentials */
    char exit_addr[64];         /**< address connected to */
    int64_t ended_at_ms;
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
    char body_sha256[65];       /**< hex SHA-256 of body, computed on the
                                     engine thread when the result is made
                                     (so the pipeline thread does not: issue
                                     13); "" when body is NULL or was replaced
                                     since (then its user computes it) */
    void *prepared;             /**< what the done hook made of this result
                                     (fetch_set_done_hook), or NULL; freed by
                                     fetch_result_destroy with prepared_free
                                     unless its user took it (set NULL) */
    void (*prepared_free)(void *prepared);
    uint32_t attempts;          /**< attempts made */
    uint32_t rotations;         /**< session rotations */
    uint32_t throttled;         /**< blocked answers (429...) seen */
    char session[128];          /**< session name (exit), never credentials */
    int64_t fetched_at_ms;      /**< end of the last attempt */
    struct fetch_attempt *attempt_log; /**< one record per attempt (owned) */
    size_t n_attempt_log;
    /** Workflows: one record per step run (the steps that completed, then the
     *  failing one when !ok), owned; NULL/0 for a plain request. */
    struct fetch_step_result *steps;
    size_t n_steps;             /**< records in steps */
    size_t n_steps_total;       /**< steps of the workflow (0 = not one) */
    uint32_t restarts;          /**< workflow restarts from the first step */
    /** Timed sessions: when the serving exit rotates (ms since epoch), else 0. */
    int64_t session_rotates_at_ms;
    /** The request was ended by fetch_release() before it got a final
     *  answer: ok = false, category "released", error says after how many
     *  attempts, no body (nor its headers); status is the last attempt's (0
     *  if none ran) and attempt_log/steps hold what ran (a workflow's last
     *  step record is the step the release stopped, category "released").
     *  false for every other result, also for a released request whose
     *  running attempt gave the final result (success or terminal failure). */
    bool released;
    /** Released results: the earliest time (ms since epoch) the request's
     *  next attempt could have started as the engine had planned it (a retry
     *  delay, Retry-After or session cooldown, a per-host rate wait,
     *  fetch_req.not_before_ms), or 0 when it could have started at once;
     *  0 for other results. */
    int64_t not_before_ms;
};

/** Cumulative counters (read any time; atomics). */
struct fetch_stats {
    uint64_t attempts, rotations, throttled, bytes, completed, failed;
    uint64_t restarts;          /**< workflow restarts */
    uint64_t host_waits;        /**< requests held by a per-host limit */
    uint64_t auth_suspensions;  /**< credential sets suspended (proxy_auth) */
    uint64_t released;          /**< results with released = true (counted
                                     in neither completed nor failed) */
};

/**
 * @brief Start the engine thread.
 * @param cfg  Frozen config (borrowed; must outlive the engine).
 * @param out  Out: engine; stop with fetch_destroy().
 * @returns DD_OK; DD_ERR_INVAL (bad proxy or CIDR in config, or a provider
 *          API without a session list: errstr says which; not retriable);
 *          DD_ERR_FATAL (thread or curl multi could not start);
 *          DD_ERR_NOMEM (the engine could not be allocated).
 * @locality the pipeline thread (or main); starts the fetch-engine thread.
 */
dd_err_t fetch_new(const struct cfg *cfg, struct fetch **out, char *errstr,
                   size_t errstr_size) DD_WUR;

/**
 * @brief Stop the thread: transfers still running end with category "canceled".
 *        Their results stay takeable until destroy.  fetch_destroy(NULL) no-op.
 * @locality any one thread that is not the engine's (the pipeline's, which
 *           may differ from the one that called fetch_new()); joins the
 *           engine thread.
 */
void fetch_destroy(struct fetch *f);

/**
 * @brief Queue a request.  Never blocks.
 * @returns DD_OK; DD_ERR_NOMEM.
 * @locality any thread.
 */
dd_err_t fetch_submit(struct fetch *f, const struct fetch_req *req) DD_WUR;

/**
 * @brief Release the request whose opaque is \p opaque: it makes no new attempt.
 *        If it is waiting (a retry delay or Retry-After, a session cooldown, a
 *        per-host limit, single queueing, not started yet), it ends now; if an
 *        attempt is transferring, that attempt finishes, and its result is
 *        delivered as usual when final (success or terminal failure), or the
 *        request ends instead of waiting for another attempt.  A request that
 *        ends this way is delivered through fetch_take() like any other, with
 *        result->released = true (category "released", no body), after no
 *        further request to the origin.  Unknown or already finished opaques
 *        are ignored.  Workflow (multi-step) requests likewise.
 *
 * Details: "no new attempt" includes a workflow's next step, a redirect hop
 * and a workflow restart (a released workflow ends between steps, after the
 * running step's answer, unless that step was its last).  \p opaque is
 * compared as an address, never dereferenced; every request with that opaque
 * (NULL included) submitted before this call is released, none submitted
 * after it (so an opaque freed and reused for a new request after its result
 * was taken is safe, whatever the order in which the engine sees both).
 * Releasing twice is harmless.  The release takes effect when the engine
 * thread next wakes (at once: curl_multi_wakeup); until then the request may
 * still start an attempt or report to the retry hook (see fetch_retry_cb).
 * A released request whose running attempt fails for good (a terminal
 * category, its attempts or its deadline used up, no session before its
 * deadline: "throttled") ends with that failure, not released.  Pending
 * releases at fetch_destroy() are dropped (the requests end "canceled").
 * Out of memory: dd_oom (aborts).
 * @locality any thread (queued to the fetch thread, woken with
 *           curl_multi_wakeup); returns at once.
 */
void fetch_release(struct fetch *f, void *opaque);

/** What a fetch_retry_cb reports. */
enum fetch_retry_event {
    FETCH_RETRY_WAIT = 1,  /**< an attempt failed and the op waits for its
                                next one, not before not_before_ms: the
                                backoff, or later when every session that
                                could serve it cools down (Retry-After) or
                                the session it is bound to mid-way does */
    FETCH_RETRY_START = 2, /**< the op starts the attempt it waited for
                                (not_before_ms = now) */
};

/**
 * Retry hook: called on the engine thread, in order, once per failed attempt
 * that the op will retry (WAIT) and when that retry starts (START).  An op
 * that fails for good, or whose deadline passes while it waits, gets no START:
 * its result follows.  A workflow restarted by the launcher itself (its exit
 * changed, or its bound session cools down, with no attempt failing) reports
 * nothing.  Released ops (fetch_release): once the engine has processed the
 * release, the hook is never called for the op again (a failed attempt is
 * not retried: no WAIT; a WAIT reported before gets no START: the released
 * result follows); between the fetch_release() call and that processing
 * (the engine's next wake-up) a WAIT or START may still be reported, on the
 * engine thread, concurrently with the releasing caller.  Must return
 * quickly and must not call the engine.
 * @param hook_opaque  As given to fetch_set_retry_hook().
 * @param req_opaque   The request's fetch_req.opaque.
 * @param attempts     Attempts recorded so far; the failed one (WAIT) is the
 *                     last, number \p attempts of this request.
 * @param failed       WAIT: the failed attempt's record (borrowed for the
 *                     call); START: NULL.
 */
typedef void(fetch_retry_cb)(void *hook_opaque, void *req_opaque,
                             enum fetch_retry_event ev, int64_t not_before_ms,
                             uint32_t attempts,
                             const struct fetch_attempt *failed);

/**
 * @brief Install the retry hook (NULL: none).  Call before the first
 *        fetch_submit(); not thread-safe against running requests.
 * @locality any one thread that is not the engine's, before the first
 *           fetch_submit() (the submit lock orders the hook's installation
 *           before the engine reads it).
 */
void fetch_set_retry_hook(struct fetch *f, fetch_retry_cb *cb, void *opaque);

/**
 * Done hook: called on the engine thread with each final result of a
 * request not released (fetch_release: its result is dropped), canceled
 * ones at shutdown included, after its body_sha256 is set and before
 * fetch_take can return it, so work on the result (the consumer encodes it)
 * runs beside the taker's thread instead of on it (issue 13).  It may set
 * r->prepared and r->prepared_free and must not change anything else of
 * \p r nor call the engine.  It reads what the request's opaque points to
 * concurrently with the submitter's thread: only what that thread does not
 * change while the request runs.
 * @param hook_opaque  As given to fetch_set_done_hook().
 * @param req_opaque   The request's fetch_req.opaque (r->opaque).
 */
typedef void(fetch_done_cb)(void *hook_opaque, void *req_opaque,
                            struct fetch_result *r);

/**
 * @brief Install the done hook (NULL: none), as fetch_set_retry_hook().
 * @locality any one thread that is not the engine's, before the first
 *           fetch_submit().
 */
void fetch_set_done_hook(struct fetch *f, fetch_done_cb *cb, void *opaque);

/**
 * @brief Take one finished request, waiting at most \p timeout_ms (0 = no wait).
 * @returns the result (caller owns; fetch_result_destroy) or NULL.
 * @locality any thread.
 */
struct fetch_result *fetch_take(struct fetch *f, int timeout_ms);

/** @returns requests submitted and not yet taken. @locality any thread. */
size_t fetch_inflight(struct fetch *f);

/** @brief Copy the counters. @locality any thread. */
void fetch_stats_get(struct fetch *f, struct fetch_stats *st);

/** @brief Free a result; NULL is a no-op. @locality any thread. */
void fetch_result_destroy(struct fetch_result *r);

/** A per-host token bucket (fetch.per_host_rate_per_min, per_host_burst). */
struct fetch_bucket {
    double tokens;              /**< available tokens */
    int64_t at_ms;              /**< time of \p tokens; 0 = new (full) */
};

/**
 * @brief Take one token from \p b at \p now (refilled at \p rate_per_min,
 *        capped at \p burst >= 1; rate 0 = unlimited).
 * @returns 0 when a token was taken, else the ms until one is available
 *          (nothing taken).
 * @locality any thread; pure on \p b (the engine's per-host table,
 *           fetch_hosts.h, calls it on the fetch-engine thread).
 */
int64_t fetch_bucket_take(struct fetch_bucket *b, int64_t now, int64_t rate_per_min,
                          int64_t burst);

#endif
