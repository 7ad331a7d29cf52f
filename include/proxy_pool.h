/**
 * @file proxy_pool.h
 * @brief The proxy session pool: sessions and providers; pick, report,
 *        cooldown, credential suspension, rotation.
 *
 * A session is one way out: each plain exit of proxy.exits (a proxy URL),
 * each provider session (a session id in the username, or a session of the
 * provider's API; proxy.providers, one set of sessions per country), or, when
 * neither is configured, the one "direct" session (no proxy).  Sessions are
 * numbered 0..proxy_pool_size()-1 (plain exits first, in order) and the set
 * never changes after proxy_pool_new(); a session's exit may (renewal).
 *
 * The fetch engine uses the pool as nginx's upstream round robin uses its
 * peers ("get peer" / "free peer"): it asks for a session for an op
 * (proxy_pool_pick: the op's country and rotation mode, its current session,
 * whether to move away from it), says when an attempt starts through it
 * (proxy_pool_acquire), and reports how the attempt ended
 * (proxy_pool_report: ok, failed, throttled with its Retry-After, proxy down,
 * proxy authentication failed, or the target failed behind a working exit).
 * The pool applies what follows for the session; what follows for the op
 * (retry, rotation caps, workflow restarts, the deadline) is the engine's.
 *
 * Policy the pool applies:
 *  - pick: the least busy session, round robin among equals, that serves the
 *    op (a provider session with a countries list serves only its country; a
 *    rotation mode takes only sessions of providers with that mode; plain
 *    exits and direct serve any op), is not cooling down, and whose
 *    credential set is not suspended;
 *  - cooldown: a blocked status cools the session down for its Retry-After
 *    (RFC 9110 section 10.2.3; fetch.cooldown_default_ms when absent or
 *    invalid, clamped to fetch.retry_after_max_ms; a cooldown never gets
 *    shorter); a proxy that could not be used, when the op leaves it, cools
 *    down fetch.cooldown_default_ms;
 *  - target failures: an exit that worked and said the target failed (a
 *    SOCKS5 reply about the target) keeps its health as it was: no error
 *    counted (so no retirement for errors in a row), no cooldown;
 *  - credential suspension: a proxy authentication failure on a provider
 *    session suspends every session of that provider (its credential set) for
 *    fetch.proxy_auth_cooldown_ms (0 = never) and retires the session (a
 *    provider without an API: a new session id, when no attempt runs through
 *    it and no workflow is bound to it); a plain exit has no credentials to
 *    suspend and cools down fetch.cooldown_default_ms instead (a cooldown
 *    never gets shorter);
 *  - retirement (Crawlee SessionPool's rules), checked on the session a pick
 *    returns: after fetch.session_max_uses uses, fetch.session_max_errors
 *    failures in a row or fetch.session_max_age_ms, a provider session that
 *    is idle and not bound moves to a new exit (its provider's API rotates
 *    it, else a new session id);
 *  - timed rotation (provider rotation "timed", rotate_every_s = N): the
 *    provider changes the exit every N s counted from the session's creation
 *    (proxy_pool_timed_interval); when the interval changed since the session
 *    was last looked at, the old exit's cooldown and error count no longer
 *    apply.
 *
 * Threads: not thread-safe.  The pool belongs to the fetch-engine thread
 * (proxy_pool_new and proxy_pool_destroy run on the thread that starts and
 * stops the engine, before and after it runs).  Provider API calls (a GET of
 * the session list at start, a POST to rotate a session) are synchronous
 * HTTP requests made by the pool itself (5 s timeout).
 *
 * Times are ms since the Unix epoch.  Decisions use the \p now_ms the caller
 * passes; a session's creation time (the start of its timed intervals) is
 * read from the pool's clock (proxy_pool_conf.clock_ms) when the session is
 * created or renewed.
 */
#ifndef DEDUPD_PROXY_POOL_H
#define DEDUPD_PROXY_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct proxy_pool;
struct cfg_provider;

/** What the pool needs of the configuration (everything borrowed: it must
 *  outlive the pool). */
struct proxy_pool_conf {
    char *const *exits;        /**< proxy.exits: proxy URLs, may be NULL */
    size_t n_exits;
    const struct cfg_provider *providers; /**< proxy.providers, may be NULL */
    size_t n_providers;
    int64_t session_max_uses;  /**< retire after this many uses; 0 = never */
    int64_t session_max_errors;/**< ... failures in a row; 0 = never */
    int64_t session_max_age_ms;/**< ... age; 0 = never */
    int64_t cooldown_default_ms;   /**< blocked without Retry-After, proxy down */
    int64_t retry_after_max_ms;    /**< clamp of a Retry-After */
    int64_t proxy_auth_cooldown_ms;/**< credential suspension; 0 = none */
    int64_t (*clock_ms)(void); /**< creation times; NULL = dd_now_ms */
};

/** What an op asks of a session. */
struct proxy_pool_want {
    const char *country;       /**< upper-case ISO code; NULL or "" = any */
    const char *rotation;      /**< "sticky", "timed", "per_request";
                                    NULL or "" = any */
    int current;               /**< the op's session, or -1 (none yet) */
    bool rotate;               /**< move away from \p current */
};

/** What proxy_pool_pick() found. */
enum proxy_pool_pick_result {
    PROXY_POOL_PICKED = 0,     /**< *session is the session to use */
    PROXY_POOL_WAIT = 1,       /**< every candidate cools down: try again at
                                    *wait_until_ms */
    PROXY_POOL_SUSPENDED = 2,  /**< every candidate's credential set is
                                    suspended (proxy authentication) */
    PROXY_POOL_UNSERVED = 3,   /**< no session serves the country and
                                    rotation mode asked for */
};

/** How an attempt through a session ended (proxy_pool_report). */
enum proxy_pool_verdict {
    PROXY_POOL_OK = 0,         /**< an answer that says nothing against the
                                    exit (not 5xx, not blocked, not 407) */
    PROXY_POOL_FAILED = 1,     /**< a failure through the session (5xx, a
                                    transport error, a proxy failure the op
                                    stays on): counted */
    PROXY_POOL_PROXY_DOWN = 2, /**< the proxy could not be used and the op
                                    leaves it: FAILED, and it cools down
                                    fetch.cooldown_default_ms from now
                                    (replacing any other cooldown) */
    PROXY_POOL_THROTTLED = 3,  /**< a blocked status (429...): FAILED, and it
                                    cools down for the answer's Retry-After */
    PROXY_POOL_AUTH_FAILED = 4,/**< the proxy refused the credentials (407,
                                    SOCKS authentication): FAILED, and the
                                    credential set is suspended (see above) */
    PROXY_POOL_ABANDONED = 5,  /**< the attempt was canceled: only released */
    PROXY_POOL_TARGET_FAILED = 6, /**< the exit worked and reported that the
                                    target failed (a SOCKS5 reply about the
                                    target, RFC 1928 section 6: network or
                                    host unreachable, connection refused,
                                    TTL expired): only released; the
                                    session's health (errors, errors in a
                                    row, cooldown) is left alone */
};

/** An attempt's outcome as reported. */
struct proxy_pool_outcome {
    enum proxy_pool_verdict verdict;
    const char *retry_after;   /**< THROTTLED: the answer's Retry-After value
                                    (NUL-terminated, borrowed), or NULL */
    const char *detail;        /**< AUTH_FAILED: the error, for the log; or
                                    NULL */
};

/** What a report did to the session (for the engine's counters and logs). */
struct proxy_pool_effect {
    int64_t cooldown_ms;       /**< THROTTLED, PROXY_DOWN: the cooldown this
                                    outcome asked for, ms from now (the
                                    session keeps a longer earlier one); else 0 */
    int64_t requested_ms;      /**< THROTTLED: the wait the server asked for
                                    in its Retry-After, ms from now, before
                                    the fetch.retry_after_max_ms clamp; -1
                                    when it sent none (or none valid); else -1 */
    bool suspended;            /**< AUTH_FAILED: a credential set was newly
                                    suspended */
    bool renewed;              /**< the session moved to a new exit */
};

/** A session as the engine sees it.  Strings are borrowed: \p name lives as
 *  long as the pool (its text changes when the session renews); \p proxy and
 *  \p username until the next pick, report or renewal. */
struct proxy_pool_session_info {
    const char *name;          /**< shown in results and logs; never secret */
    const char *proxy;         /**< proxy URL, or NULL (direct) */
    const char *username;      /**< proxy credentials, or NULL: none */
    const char *password;      /**< secret; NULL with username */
    const char *provider;      /**< provider name, or NULL (plain exit) */
    const char *country;       /**< upper-case ISO code, "" = any */
    bool per_request;          /**< provider rotation per_request: a new
                                    connection for every attempt */
    bool timed;                /**< provider rotation timed, N > 0 */
    unsigned renewals;         /**< new exits so far (identity of the exit,
                                    with \p epoch) */
    int64_t epoch;             /**< timed: the interval last looked at */
    int64_t epoch_start_ms;    /**< timed: its start; else the creation */
    int64_t rotates_at_ms;     /**< timed: end of interval \p epoch; else 0 */
    int64_t created_at_ms;     /**< creation or last renewal */
    int64_t cooldown_until_ms; /**< 0 or the end of its cooldown */
    int64_t suspended_until_ms;/**< 0 or the end of its credential
                                    suspension */
    uint64_t uses, uses_since_new, errors, errors_in_row;
    int active;                /**< attempts running through it */
    int pinned;                /**< workflows bound to it */
};

/**
 * @brief Build the sessions: each plain exit, then each provider's sessions
 *        (per country), or the one direct session when there are none.
 *        Providers with an API are asked for their session list (GET
 *        /sessions, bearer api_key).
 * @param conf    Borrowed; must outlive the pool (copied shallowly).
 * @param out     Out: the pool; free with proxy_pool_destroy().
 * @param errstr  Optional (may be NULL): "provider NAME: session list: why".
 * @returns DD_OK; DD_ERR_INVAL (a provider API gave no session list; not
 *          retriable as configured).  Out of memory: dd_oom (aborts).
 * @locality the thread that starts the engine (before it runs).
 */
dd_err_t proxy_pool_new(const struct proxy_pool_conf *conf,
                        struct proxy_pool **out, char *errstr,
                        size_t errstr_size) DD_WUR;

/** @brief Free the pool; proxy_pool_destroy(NULL) is a no-op.
 *  @locality the thread that stops the engine (after it stopped). */
void proxy_pool_destroy(struct proxy_pool *pool);

/** @returns the number of sessions, >= 1. @locality fetch-engine thread. */
size_t proxy_pool_size(const struct proxy_pool *pool);

/**
 * @brief Pick a session for an op ("get peer").
 *
 * Without \p want->rotate, the op's current session when it is usable (not
 * cooling down, not suspended).  Otherwise the least busy usable session that
 * serves \p want, round robin among equals; with \p want->rotate never the
 * current one, unless no other session serves the op at all (it then stays,
 * after its cooldown).  The session returned is first checked for retirement.
 * @param want          Constraints (borrowed for the call).
 * @param now_ms        The caller's clock.
 * @param session       Out (PICKED): session number.
 * @param wait_until_ms Out (WAIT): when the first candidate's cooldown ends
 *                      (\p now_ms + 100 when none cools down).
 * @returns the result; never an error.
 * @locality fetch-engine thread.
 */
enum proxy_pool_pick_result proxy_pool_pick(struct proxy_pool *pool,
                                            const struct proxy_pool_want *want,
                                            int64_t now_ms, int *session,
                                            int64_t *wait_until_ms);

/**
 * @brief An attempt starts through \p session: counts a use and an active
 *        attempt until its proxy_pool_report().
 * @locality fetch-engine thread.
 */
void proxy_pool_acquire(struct proxy_pool *pool, int session);

/**
 * @brief An attempt through \p session ended ("free peer"): releases it and
 *        applies \p outcome (see proxy_pool_verdict).
 * @param outcome  Borrowed for the call.
 * @param now_ms   The caller's clock (start of a cooldown or suspension).
 * @param effect   Out (may be NULL): what the report did.
 * @locality fetch-engine thread.
 */
void proxy_pool_report(struct proxy_pool *pool, int session,
                       const struct proxy_pool_outcome *outcome, int64_t now_ms,
                       struct proxy_pool_effect *effect);

/**
 * @brief Move \p session to a new exit in place, through its provider's API,
 *        when it has one, no attempt runs through the session and no
 *        workflow is bound to it.  The old exit's cooldown is dropped.  A
 *        failed API call is logged and leaves the exit as it was (the session
 *        still counts as renewed).
 * @param why  Static text for the log.
 * @returns true when the session was renewed.
 * @locality fetch-engine thread.
 */
bool proxy_pool_renew(struct proxy_pool *pool, int session, const char *why);

/** @brief A workflow binds itself to \p session (no renewal while bound).
 *  @locality fetch-engine thread. */
void proxy_pool_pin(struct proxy_pool *pool, int session);

/** @brief Undo one proxy_pool_pin(). @locality fetch-engine thread. */
void proxy_pool_unpin(struct proxy_pool *pool, int session);

/**
 * @brief Bring \p session's timed-rotation interval up to date at \p now_ms
 *        (a new interval clears its cooldown and errors in a row).
 * @locality fetch-engine thread.
 */
void proxy_pool_refresh(struct proxy_pool *pool, int session, int64_t now_ms);

/** @brief Describe \p session (see proxy_pool_session_info for lifetimes).
 *  @locality fetch-engine thread. */
void proxy_pool_session_get(const struct proxy_pool *pool, int session,
                            struct proxy_pool_session_info *info);

/** @returns \p session's name (borrowed: lives as long as the pool).
 *  @locality fetch-engine thread. */
const char *proxy_pool_session_name(const struct proxy_pool *pool, int session);

/**
 * @brief When \p session can take a request again: the end of its cooldown
 *        (for a timed session, its next interval at the latest), or \p now_ms.
 * @locality fetch-engine thread.
 */
int64_t proxy_pool_session_free_at(const struct proxy_pool *pool, int session,
                                   int64_t now_ms);

/**
 * @brief When the first session that serves \p want and is not suspended can
 *        take a request again (proxy_pool_session_free_at); \p now_ms when
 *        none serves it.  \p want->current and rotate are not looked at.
 * @locality fetch-engine thread.
 */
int64_t proxy_pool_free_at(const struct proxy_pool *pool,
                           const struct proxy_pool_want *want, int64_t now_ms);

/**
 * @brief Can a session of another credential set than \p session's (another
 *        provider, or a plain exit other than \p session) serve \p want and is
 *        not suspended?  Cooling down is fine: it comes back.
 * @locality fetch-engine thread.
 */
bool proxy_pool_other_credentials(const struct proxy_pool *pool, int session,
                                  const struct proxy_pool_want *want,
                                  int64_t now_ms);

/**
 * @brief Timed rotation: the interval a session created at \p created_ms is in
 *        at \p now_ms for a provider rotating every \p every_s seconds.
 * @param start_ms Out (may be NULL): when that interval began.
 * @returns the interval number (0 = the first); 0 when every_s <= 0 or
 *          \p now_ms is before \p created_ms.
 * @locality any thread; pure.
 */
int64_t proxy_pool_timed_interval(int64_t created_ms, int64_t every_s,
                                  int64_t now_ms, int64_t *start_ms);

#endif
