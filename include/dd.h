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

#include <stdatomic.h>
#include <stdbool.h>
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

/**
 * @brief Copy the NUL-terminated \p src into \p dst of \p size bytes,
 *        cut to size - 1 bytes and always NUL-terminated when size > 0
 *        (BSD strlcpy; glibc has it from 2.38 only).  What
 *        `snprintf(dst, size, "%s", src)` did on the hot path, without the
 *        format machinery.
 * @returns strlen(\p src) (>= size means cut).  @locality any thread; pure.
 */
size_t dd_strlcpy(char *dst, const char *src, size_t size);

/** Bytes dd_fmt_i64 and dd_fmt_u64 may write, the NUL included. */
#define DD_FMT_INT_MAX 21

/**
 * @brief \p v in decimal ("-" for negatives, no leading zeros), as printf's
 *        "%lld" writes it, NUL-terminated, into \p out of at least
 *        DD_FMT_INT_MAX bytes.
 * @returns the digits' count (and sign), the NUL excluded.
 * @locality any thread; pure.
 */
size_t dd_fmt_i64(char *out, int64_t v);

/** @brief dd_fmt_i64 for an unsigned \p v ("%llu"). */
size_t dd_fmt_u64(char *out, uint64_t v);

/* ---------------------------------------------------------------------- */
/* scratch: a batch's temporary arrays, reused from batch to batch         */

/** One block beyond a scratch's reused one (dd_scratch_alloc). */
struct dd_scratch_block;

/**
 * @brief Temporary memory for one batch (a poll batch, a completion batch):
 *        bump-allocated from one block that is kept from batch to batch, and
 *        released all at once by dd_scratch_reset().
 *
 * Why: a batch's arrays (hundreds of KB for a poll batch of 1,000 messages)
 * were malloc()ed and freed per batch; a request that large makes glibc's
 * malloc consolidate its fastbins first (malloc_consolidate, 3% of the
 * pipeline thread in shadow runs; issue 13: "no per-message malloc churn on
 * the hot path, arena or reuse").  The first batch allocates; dd_scratch_reset
 * then grows the kept block to twice what the batch used (at most
 * DD_SCRATCH_KEEP_MAX bytes), so later batches of that size allocate nothing.
 *
 * Zero-initialize (`struct dd_scratch sc = {0}`).  Allocation and reset are
 * for the one holder of a batch (dd_scratch_take, which any thread may call);
 * dd_scratch_fini() frees everything.
 */
struct dd_scratch {
    unsigned char *base;           /**< the kept block, or NULL */
    size_t cap;                    /**< its bytes */
    size_t used;                   /**< bytes of it handed out */
    size_t over;                   /**< bytes in blocks beyond it */
    struct dd_scratch_block *more; /**< those blocks (freed at reset) */
    atomic_bool busy;              /**< held (dd_scratch_take) */
};

/** Largest block a scratch keeps between batches (bytes): a poll batch of
 *  1,024 jobs needs about 1 MB, so the pipeline's scratch and the store's
 *  keep at most 8 MB and usually a few; a batch beyond this bound
 *  (thousands of acknowledged shadow ops) mallocs its excess each time. */
#define DD_SCRATCH_KEEP_MAX ((size_t)4 << 20)

/**
 * @brief \p n bytes from \p sc, aligned for any type (alignof(max_align_t)),
 *        valid until the next dd_scratch_reset() or dd_scratch_fini().
 * @returns the memory, not initialized; NULL when out of memory (\p sc
 *          unchanged).  Never free() it.
 */
void *dd_scratch_alloc(struct dd_scratch *sc, size_t n);

/**
 * @brief dd_scratch_alloc() of \p nmemb * \p size bytes, zeroed.
 * @returns NULL when out of memory or when the product overflows.
 */
void *dd_scratch_calloc(struct dd_scratch *sc, size_t nmemb, size_t size);

/**
 * @brief Release everything allocated from \p sc since the last reset; keep
 *        (or grow, up to DD_SCRATCH_KEEP_MAX) its block for the next batch.
 *        A failed growth only keeps the smaller block.
 */
void dd_scratch_reset(struct dd_scratch *sc);

/** @brief Free all of \p sc's memory; it is then as zero-initialized. */
void dd_scratch_fini(struct dd_scratch *sc);

/**
 * @brief Hold \p sc for one batch: \p sc itself when no one holds it, else
 *        \p local, zero-initialized here (a nested, re-entered or concurrent
 *        batch gets memory of its own instead of having the holder's reset
 *        under it).  @locality any thread (an atomic exchange).
 * @returns the scratch to allocate from; hand it to dd_scratch_give().
 */
struct dd_scratch *dd_scratch_take(struct dd_scratch *sc,
                                   struct dd_scratch *local);

/**
 * @brief End the batch that dd_scratch_take(\p sc, ...) began with \p got:
 *        \p sc is reset and no longer held; a local scratch is freed.
 */
void dd_scratch_give(struct dd_scratch *sc, struct dd_scratch *got);

#endif
