/**
 * @file store_index.h
 * @brief INTERNAL to the store (src/store*.c) and tests/test_store_index.c:
 *        the hot index, an exact in-memory table in front of the ops column
 *        family (DESIGN.md section 4), and its hash, SipHash-2-4.  No
 *        RocksDB here: the store feeds it what it wrote or read.
 *
 * Entries: op_id digest -> request_hash digest, state, outbox state and
 * expires_at.
 *
 * Digests: the key is SipHash-2-4-128 of op_id and the value holds
 * SipHash-2-4-64 of request_hash, both keyed with 128 random bits drawn at
 * every store_index_new (the index lives in memory only and is rebuilt at
 * open).  A keyed PRF, unlike MurmurHash or xxHash, cannot be steered into
 * collisions by whoever picks job keys; for unsteered inputs two of 10M
 * op_ids collide with probability about 1.5e-25, and a conflicting
 * request_hash passes for the same one with probability 2^-64.  About 60 ns
 * for a 64-byte op_id here.
 *
 * Table: STORE_INDEX_SEGS independent open-addressing tables (linear
 * probing, 32-byte slots, multiply-shift slot choice so that capacities need
 * not be powers of two), each under its own rwlock: a rehash stalls one
 * segment only, and readers of different segments never share a lock word.
 * A key's segment is the top 6 bits of k0, its home slot k1 scaled to the
 * segment's capacity.  A segment grows by half when its load passes 4/5, so
 * the index costs 40 to 60 bytes per op_id, up to max_bytes /
 * STORE_INDEX_SEGS each.  At its bound a segment first purges tombstones and
 * expired entries (once the rebuild is done), then refuses inserts: the
 * index is then lossy, a cache.  A failed allocation while growing turns the
 * index off (every verdict UNKNOWN) instead of failing the write.
 *
 * Invariant (the store keeps it): an entry, when present, describes the op's
 * latest committed record.  Every op write updates it after RocksDB accepted
 * the write, under the op's stripe, so claims (which take the stripe first)
 * always see it current.  A missing entry proves the op absent only when the
 * index is complete: rebuilt (store_index_rebuild_end), never lossy, never
 * off, and now >= the horizon, the latest time at which entries of expired
 * ops were dropped or skipped.  Entries the compaction filter may already
 * have removed from RocksDB (expires_at below the filter clock) are not
 * trusted either: RocksDB answers them.
 *
 * Rebuild: the store inserts the unexpired records of a snapshot with
 * STORE_INDEX_REBUILD, which enters a key only where no entry exists, so a
 * writer's newer entry always wins; store_index_forget leaves a tombstone
 * while the rebuild runs so that the snapshot cannot bring a deleted op
 * back.  Nothing is purged before store_index_rebuild_end, so an insert a
 * full segment refused to a writer is refused to the rebuild too.
 *
 * @locality every function is safe from any thread (the pipeline, the fetch
 * engine's retry hook, the HTTP server's threads, the store's rebuild
 * thread): each segment has its own rwlock, flags and counters are atomic.
 */
#ifndef DEDUPD_STORE_INDEX_H
#define DEDUPD_STORE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STORE_INDEX_SEGS 64       /**< independent tables, one rwlock each */
#define STORE_INDEX_SEG_SHIFT 58  /**< segment = top 6 bits of k0 */
#define STORE_INDEX_MIN_SLOTS 16  /**< smallest segment, slots */

struct store_index;

/** A key: the SipHash-2-4-128 digest of an op_id, never 0, 0. */
struct store_index_key {
    uint64_t k0, k1;
};

/** One slot, 32 bytes.  k0|k1 == 0 marks an empty slot. */
struct store_index_entry {
    uint64_t k0, k1; /**< the key */
    uint64_t h;      /**< SipHash-2-4-64 of request_hash */
    uint64_t m;      /**< expires_at ms (48 bits, clamped), state, outbox */
};

/** What the index knows of a key. */
enum store_index_verdict {
    STORE_INDEX_UNKNOWN,  /**< ask RocksDB */
    STORE_INDEX_ABSENT,   /**< proven absent or expired */
    STORE_INDEX_FINISHED, /**< complete or failed, live: the entry says */
};

/** How store_index_put enters a record. */
enum store_index_put_mode {
    STORE_INDEX_UPSERT,  /**< a writer's committed record (caller holds the
                              op's stripe): replaces the entry */
    STORE_INDEX_FILL,    /**< a record just read under the op's stripe: only
                              if absent; a full segment drops it silently */
    STORE_INDEX_REBUILD, /**< the rebuild's snapshot record: only if absent */
};

/**
 * @brief SipHash-2-4 of \p in (\p inlen bytes) under the 16-byte key \p k:
 *        out[0] is the 64-bit tag (\p wide false), or out[0], out[1] the
 *        128-bit tag (\p wide), each the little-endian reading of the
 *        reference implementation's output bytes.
 * @locality any thread; pure.
 */
void store_siphash24(const void *in, size_t inlen, const unsigned char k[16],
                     bool wide, uint64_t out[2]);

/**
 * @brief A new, empty index (not rebuilt yet: no absence is proven until
 *        store_index_rebuild_end).
 * @param max_bytes     Bound of its slots (at least STORE_INDEX_MIN_SLOTS
 *                      slots a segment whatever it says).
 * @param expected_ops  Entries to size the segments for (capped by the
 *                      bound); 0 for the smallest.
 * @param keys          The two SipHash keys (op_id, request_hash), 32
 *                      bytes; NULL: drawn at random (getrandom), as the
 *                      store does.
 * @returns the index, to store_index_destroy(); NULL when out of memory.
 */
struct store_index *store_index_new(size_t max_bytes, uint64_t expected_ops,
                                    const unsigned char *keys);

/** @brief Free the index; store_index_destroy(NULL) is a no-op. */
void store_index_destroy(struct store_index *ix);

/** @brief The key of \p op_id (\p len bytes, not NUL-terminated). */
void store_index_digest(const struct store_index *ix, const char *op_id,
                        size_t len, struct store_index_key *k);

/** @returns the digest of \p request_hash (\p len bytes), as entries hold. */
uint64_t store_index_hdigest(const struct store_index *ix,
                             const char *request_hash, size_t len);

/** @returns the segment of \p k, 0..STORE_INDEX_SEGS - 1. */
static inline unsigned store_index_segment(const struct store_index_key *k)
{
    return (unsigned)(k->k0 >> STORE_INDEX_SEG_SHIFT);
}

/**
 * @brief What the index knows of \p k at \p now_ms.
 * @param filter_now_ms  The compaction filter's clock: an entry live at
 *                       now_ms but expired at it is UNKNOWN (RocksDB may
 *                       have dropped the record already).
 * @param out  Out: the entry, when FINISHED.
 * @returns UNKNOWN (also for running and retryable ops, and when the index
 *          is off); ABSENT (a tombstone, expired, or missing from a
 *          complete index at or after its horizon); FINISHED.
 */
enum store_index_verdict store_index_judge(struct store_index *ix,
                                           const struct store_index_key *k,
                                           int64_t now_ms,
                                           int64_t filter_now_ms,
                                           struct store_index_entry *out);

/** @brief Count one look-up of \p k: decided by the index (\p hit) or not. */
void store_index_count(struct store_index *ix, const struct store_index_key *k,
                       bool hit);

/** @brief Add look-ups decided (\p hits) and not (\p misses) to segment
 *         \p seg's counters. */
void store_index_count_add(struct store_index *ix, unsigned seg,
                           uint64_t hits, uint64_t misses);

/**
 * @brief Enter \p op (its request_hash, expires_at, state and outbox state)
 *        as the entry of \p k.  \p now_ms is when expired entries may be
 *        purged to make room.  A no-op when the index is off.
 */
void store_index_put(struct store_index *ix, const struct store_index_key *k,
                     const struct store_op *op, int64_t now_ms,
                     enum store_index_put_mode mode);

/**
 * @brief Does the entry of \p k still describe \p op, the record as its
 *        caller last wrote it (same expires_at, state, outbox state and
 *        request_hash)?  Any write of the op's record since (another state,
 *        an extended expiry, a forget, a restored record) changed the entry,
 *        and an index that is off or lacks the entry answers false: the
 *        caller reads the record instead.  Lets store.c skip the read of an
 *        op its pipeline holds (the completion's fence, the outbox
 *        acknowledgement; issue 13).  Caller holds the op's stripe.
 * @locality any thread.
 */
bool store_index_holds(struct store_index *ix, const struct store_index_key *k,
                       const struct store_op *op);

/**
 * @brief The op of \p k was deleted (store_forget): its entry becomes a
 *        tombstone (ABSENT).  Without an entry, a tombstone is entered only
 *        while the rebuild runs.  Caller holds the op's stripe.
 */
void store_index_forget(struct store_index *ix, const struct store_index_key *k,
                        int64_t now_ms);

/**
 * @brief An ops write failed (RocksDB may still have applied it): no entry
 *        can be trusted any more; the index is off until destroyed.
 * @returns true when this call turned it off (the caller logs it once).
 */
bool store_index_disable(struct store_index *ix);

/**
 * @brief The rebuild is over.
 * @param lossy       Some live op may be missing (the rebuild stopped, an
 *                    iterator error, an unreadable record).
 * @param horizon_ms  Expired records were skipped as of this time (a miss
 *                    proves nothing before it); INT64_MIN: none.
 * @param shrink      Give back the memory of segments a growth left at low
 *                    load (not when the rebuild was stopped).
 */
void store_index_rebuild_end(struct store_index *ix, bool lossy,
                             int64_t horizon_ms, bool shrink);

/** @returns whether the rebuild is still running and can still make the
 *  index complete (not ended, not off, not lossy: at its bound the rest of
 *  the rebuild adds nothing).  @locality any thread. */
bool store_index_rebuilding(struct store_index *ix);

/** @returns whether a miss proves absence (rebuilt, never lossy nor off). */
bool store_index_complete(struct store_index *ix);

/** @brief Fill \p st (entries, capacity, bytes, complete, hits, misses). */
void store_index_stats_fill(struct store_index *ix,
                            struct store_index_stats *st);

/** @returns the op state of entry \p e. */
enum store_op_state store_index_entry_state(const struct store_index_entry *e);

/**
 * @brief The partial op of a finished duplicate the index decided: state,
 *        outbox_state, expires_at_ms and \p request_hash set, the rest zero
 *        (store_claim_req.op).
 */
void store_index_entry_op(const struct store_index_entry *e,
                          const char *request_hash, struct store_op *op);

/* ---- batches: one segment lock per segment, not per key ------------------ */

/** One distinct key of a batch, as the batch functions read and write it. */
struct store_index_probe {
    struct store_index_key key;      /**< in */
    struct store_index_entry entry;  /**< out (judge): when FINISHED */
    const struct store_op *put;      /**< in (put): the record to enter as
                                          STORE_INDEX_UPSERT, or NULL */
    uint8_t verdict;                 /**< out (judge): enum
                                          store_index_verdict */
};

/**
 * @brief Group \p n probes by segment: segment g's are order[start[g] ..
 *        start[g + 1]).
 * @param order  n entries, out.
 */
void store_index_group(const struct store_index_probe *p, size_t n,
                       uint32_t *order,
                       uint32_t start[STORE_INDEX_SEGS + 1]);

/**
 * @brief store_index_judge of every probe of a grouping (its verdict and
 *        entry), one read lock per segment, prefetching the home slots.
 *        Counts nothing.
 */
void store_index_judge_batch(struct store_index *ix,
                             struct store_index_probe *p,
                             const uint32_t *order,
                             const uint32_t start[STORE_INDEX_SEGS + 1],
                             int64_t now_ms, int64_t filter_now_ms);

/**
 * @brief Bring the home slot of each of \p n keys toward the cache (the
 *        fast path's look-ups of a poll batch: store_index_judge then finds
 *        them there instead of each waiting for memory).  Takes each
 *        touched segment's read lock once (keys grouped by segment; at most
 *        1024 keys a group, more are taken in turns).  Reads nothing back,
 *        changes nothing; a no-op when the index is off.
 * @param keys  n keys, borrowed.
 * @locality any thread.
 */
void store_index_prefetch(struct store_index *ix,
                          const struct store_index_key *keys, size_t n);

/**
 * @brief store_index_put (STORE_INDEX_UPSERT) of every probe of a grouping
 *        whose put is not NULL, one write lock per segment.  Caller holds
 *        their ops' stripes.
 */
void store_index_put_batch(struct store_index *ix,
                           const struct store_index_probe *p,
                           const uint32_t *order,
                           const uint32_t start[STORE_INDEX_SEGS + 1],
                           int64_t now_ms);

#endif
