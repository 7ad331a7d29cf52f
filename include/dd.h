/**
 * @file dd.h
 * @brief Cross-cutting helpers every module shares: the one clock, the one
 *        string hash, and the one out-of-memory policy.
 *
 * Out-of-memory policy: dedupd's allocations are bounded (pools sized at
 * start-up, batches capped by config), so a failed allocation on a running
 * pipeline means the pod's memory limit is wrong, not a condition to retry.
 * Code on the pipeline, fetch-engine and store threads allocates with the
 * dd_x* wrappers, which log one line naming the site and abort (exit by
 * SIGABRT, so Kubernetes restarts the pod and the offsets not committed are
 * consumed again).  Functions whose contract returns DD_ERR_NOMEM (the store's
 * public calls, config loading) keep returning it: their caller decides.
 */
#ifndef DEDUPD_DD_H
#define DEDUPD_DD_H

#include <stddef.h>
#include <stdint.h>

/**
 * @brief Wall-clock time, ms since the Unix epoch (CLOCK_REALTIME).
 *
 * The one clock of lease expiries, TTLs, deadlines and record times (they are
 * stored and compared across processes, so they must be wall time).
 * @locality any thread.
 */
int64_t dd_now_ms(void);

/**
 * @brief FNV-1a, 64-bit, over \p len bytes of \p data (borrowed).
 *
 * For in-memory hash tables and lock stripes only: not keyed, so never for
 * anything an attacker could aim at a table that has no bound (the store's hot
 * index uses keyed SipHash for that reason).
 * @locality any thread; pure.
 */
uint64_t dd_fnv1a64(const void *data, size_t len);

/**
 * @brief Byte-wise order of two byte strings (memcmp over the shorter, then
 *        the shorter first): RocksDB's BytewiseComparator, jansson's sorted
 *        keys.  For qsort comparators.
 * @returns <0, 0 or >0 as \p a sorts before, with or after \p b.
 * @locality any thread; pure.
 */
int dd_bytes_cmp(const void *a, size_t alen, const void *b, size_t blen);

/** @brief dd_fnv1a64 of a NUL-terminated string \p s (borrowed). */
uint64_t dd_fnv1a64_str(const char *s);

/**
 * @brief Days since 1970-01-01 of the proleptic Gregorian date \p y-\p m-\p d
 *        (H. Hinnant's days_from_civil; negative before 1970).
 * @param m  Month 1..12.   @param d  Day 1..31 (not checked against \p m).
 * @locality any thread; pure.
 */
int64_t dd_days_from_civil(int64_t y, unsigned m, unsigned d);

/**
 * @brief The civil date of \p z days since 1970-01-01 (the inverse of
 *        dd_days_from_civil).
 * @param y,m,d  Out: year, month 1..12, day 1..31.
 * @locality any thread; pure.
 */
void dd_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

/**
 * @brief Log "out of memory: <what>" at LOG_CRIT and abort().  Never returns.
 * @param what  Static text naming the allocation site (e.g. "op map").
 */
_Noreturn void dd_oom(const char *what);

/** @brief malloc(\p n), or dd_oom(\p what). @returns never NULL; free() it. */
void *dd_xmalloc(size_t n, const char *what);
/** @brief calloc(\p nmemb, \p size), or dd_oom(\p what). @returns never NULL. */
void *dd_xcalloc(size_t nmemb, size_t size, const char *what);
/** @brief realloc(\p p, \p n), or dd_oom(\p what). @returns never NULL. */
void *dd_xrealloc(void *p, size_t n, const char *what);
/** @brief strdup(\p s), or dd_oom(\p what). @returns never NULL; free() it. */
char *dd_xstrdup(const char *s, const char *what);

#endif
