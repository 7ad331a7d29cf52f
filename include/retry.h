/**
 * @file retry.h
 * @brief Retry timing: Retry-After parsing (RFC 9110 section 10.2.3) and
 *        exponential backoff with full jitter.  Pure functions.
 */
#ifndef DEDUPD_RETRY_H
#define DEDUPD_RETRY_H

#include <stdbool.h>
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
