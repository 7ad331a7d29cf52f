/**
 * @file retry.h
 * @brief Retry timing: Retry-After parsing (RFC 9110 section 10.2.3),
 *        HTTP-dates (RFC 9110 section 5.6.7), exponential backoff with full
 *        jitter, and the plan of a retry against the op's deadline.  Pure
 *        functions.
 */
#ifndef DEDUPD_RETRY_H
#define DEDUPD_RETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/**
 * @brief Parse a Retry-After header value (RFC 9110 section 10.2.3).
 *
 * delay-seconds (1*DIGIT) or an HTTP-date (IMF-fixdate, and the obsolete RFC 850
 * and asctime forms that RFC 9110 section 5.6.7 says recipients must accept).
 * A date in the past means 0; a negative, empty or unparsable value is ignored
 * (returns false); any value is clamped to \p max_ms.
 * @param value   NUL-terminated header value (may have surrounding spaces), or
 *                NULL (returns false).
 * @param now_ms  Current time, ms since the Unix epoch (for the date form).
 * @param max_ms  Clamp, ms (fetch.retry_after_max_ms).
 * @param delay_ms Out: the delay in ms, 0..max_ms, when true is returned.
 * @returns true if \p value was a valid Retry-After.
 * @locality any thread; pure (the fetch engine's thread).
 */
bool retry_after_parse(const char *value, int64_t now_ms, int64_t max_ms,
                       int64_t *delay_ms);

/** Size of an IMF-fixdate with its NUL: "Sun, 06 Nov 1994 08:49:37 GMT". */
#define RETRY_HTTP_DATE_SIZE 30

/**
 * @brief Parse an HTTP-date (RFC 9110 section 5.6.7): IMF-fixdate
 *        ("Sun, 06 Nov 1994 08:49:37 GMT"), or the obsolete RFC 850
 *        ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime
 *        ("Sun Nov  6 08:49:37 1994") forms, which recipients must accept.
 *
 * The grammar is exact (case-sensitive names, "GMT", single spaces); anything
 * else (ISO 8601, a numeric zone, a localised name) is not an HTTP-date.  The
 * same parser reads Retry-After dates (retry_after_parse).
 * @param value    NUL-terminated field value (surrounding SP / HTAB allowed),
 *                 or NULL (returns false).
 * @param now_ms   Current time, ms since the Unix epoch: only for RFC 850's
 *                 two-digit year (more than 50 years ahead means the
 *                 previous century).
 * @param epoch_s  Out: the instant, s since the Unix epoch (a leap second 60
 *                 counts as the next second), when true is returned.
 * @returns true if \p value is an HTTP-date.
 * @locality any thread; pure (the pipeline's thread: conditional refetch).
 */
bool retry_http_date_parse(const char *value, int64_t now_ms, int64_t *epoch_s);

/**
 * @brief Format \p epoch_s as an IMF-fixdate, the form a sender must use
 *        (RFC 9110 section 5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT".
 * @param epoch_s  s since the Unix epoch; years 0000..9999 only.
 * @param out      Out: NUL-terminated, 29 characters.
 * @param size     Size of \p out, >= RETRY_HTTP_DATE_SIZE.
 * @returns false (nothing written) when \p size is too small or the year is
 *          outside 0000..9999.
 * @locality any thread; pure.
 */
bool retry_http_date_format(int64_t epoch_s, char *out, size_t size);

/** What retry_plan() found. */
enum retry_plan {
    RETRY_PLAN_AT = 0,        /**< retry at *at_ms (before the deadline) */
    RETRY_PLAN_PAST_DEADLINE, /**< the backoff alone reaches the deadline:
                                   the op fails with its attempt's category */
    RETRY_PLAN_NO_SESSION,    /**< no session can serve the op before the
                                   deadline (every one that could cools down,
                                   e.g. for a Retry-After, until then or
                                   later): the op fails now, "throttled" */
};

/**
 * @brief When may a failed op try again, if at all before its deadline?
 *
 * An op never waits past its deadline (DESIGN.md section 5): the retry starts
 * after the backoff and once a session can serve it, and both must come
 * before \p deadline_ms.  The backoff is looked at first: when it alone runs
 * out the time, the op's failure stays its attempt's.
 * @param now_ms       The caller's clock, ms since the epoch.
 * @param backoff_ms   The backoff, ms (negative counts as 0).
 * @param free_at_ms   When the first session that can serve the op can take
 *                     a request (proxy_pool_free_at; \p now_ms or earlier when
 *                     one is free now), ms since the epoch.
 * @param deadline_ms  The op's deadline, ms since the epoch.
 * @param at_ms        Out (RETRY_PLAN_AT only): max(now + backoff, free_at).
 * @returns the plan.
 * @locality any thread; pure (the fetch engine's thread).
 */
enum retry_plan retry_plan(int64_t now_ms, int64_t backoff_ms,
                           int64_t free_at_ms, int64_t deadline_ms,
                           int64_t *at_ms);

/**
 * @brief Full-jitter backoff: uniform in [0, min(cap_ms, base_ms * 2^attempt)]
 *        ("Exponential Backoff And Jitter", AWS Architecture Blog, 2015).
 * @param attempt  0 for the first retry; a negative value counts as 0.
 * @param base_ms  fetch.backoff_base_ms, in ms; <= 0 gives 0.
 * @param cap_ms   fetch.backoff_max_ms, in ms; <= 0 gives 0.
 * @param rnd      A uniformly random 64-bit value (caller's generator).
 * @returns the delay in ms, 0..min(cap_ms, base_ms * 2^attempt); the doubling
 *          saturates at cap_ms, never overflows.
 * @locality any thread; pure (the fetch engine's thread).
 */
int64_t retry_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms,
                         uint64_t rnd);

#endif
