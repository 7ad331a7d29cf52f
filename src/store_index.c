/*
 * store_index.c: the store's hot index and its hash, SipHash-2-4 (concept,
 * invariants and locking: include/store_index.h).  No RocksDB.
 *
 * @locality every function here runs on any thread that calls the store
 * (pipeline, fetch engine, HTTP server threads) and on the store's rebuild
 * thread; the segment rwlocks and the atomics are what make that safe.
 */
#include "store_index.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#include "store_codec.h"

#define IDX_LOAD_NUM 4       /* grow (or stop inserting) past load 4/5 */
#define IDX_LOAD_DEN 5
#define IDX_EXP_MASK ((UINT64_C(1) << 48) - 1)
#define IDX_ST_SHIFT 48
#define IDX_OB_SHIFT 56
#define IDX_ST_ABSENT 0      /* a tombstone: known absent (store_forget) */

_Static_assert(sizeof(struct store_index_entry) == 32,
               "index slot is 32 bytes");

struct idx_seg {
    pthread_rwlock_t lock;
    struct store_index_entry *slots;
    uint64_t cap;     /* slots */
    uint64_t used;    /* occupied slots (tombstones and expired included) */
    uint64_t max_cap; /* bound */
    uint64_t fails;   /* inserts refused since the last purge */
    uint64_t rehashes; /* growths, shrinks and purges */
    _Atomic uint64_t hits, misses;
    char pad[64];     /* keep segments on separate cache lines */
};

struct store_index {
    unsigned char sip_key[16];      /* op_id digests */
    unsigned char sip_hkey[16];     /* request_hash digests */
    struct idx_seg seg[STORE_INDEX_SEGS];
    int segs_init;                  /* segments with a lock */
    _Atomic bool done;              /* rebuild finished */
    _Atomic bool lossy;             /* some live op may be missing */
    _Atomic bool off;               /* unusable until destroyed */
    _Atomic int64_t horizon_ms;     /* a miss proves nothing before it */
};

enum { IDX_LIVE, IDX_EXPIRED, IDX_UNSURE };

/* ---------------------------------------------------------------------- */
/* SipHash-2-4 (Aumasson and Bernstein, reference implementation's rules)  */

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND                                                             \
    do {                                                                      \
        v0 += v1;                                                             \
        v1 = SIP_ROTL(v1, 13);                                                \
        v1 ^= v0;                                                             \
        v0 = SIP_ROTL(v0, 32);                                                \
        v2 += v3;                                                             \
        v3 = SIP_ROTL(v3, 16);                                                \
        v3 ^= v2;                                                             \
        v0 += v3;                                                             \
        v3 = SIP_ROTL(v3, 21);                                                \
        v3 ^= v0;                                                             \
        v2 += v1;                                                             \
        v1 = SIP_ROTL(v1, 17);                                                \
        v1 ^= v2;                                                             \
        v2 = SIP_ROTL(v2, 32);                                                \
    } while (0)

void store_siphash24(const void *in, size_t inlen, const unsigned char k[16],
                     bool wide, uint64_t out[2])
{
    const unsigned char *p = in;
    uint64_t k0 = store_codec_le64_get(k), k1 = store_codec_le64_get(k + 8);
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ k1;
    uint64_t b = (uint64_t)inlen << 56;
    if (wide)
        v1 ^= 0xee;
    const unsigned char *end = p + (inlen & ~(size_t)7);
    for (; p != end; p += 8) {
        uint64_t m = store_codec_le64_get(p);
        v3 ^= m;
        SIP_ROUND;
        SIP_ROUND;
        v0 ^= m;
    }
    for (size_t i = 0; i < (inlen & 7); i++)
        b |= (uint64_t)p[i] << (8 * i);
    v3 ^= b;
    SIP_ROUND;
    SIP_ROUND;
    v0 ^= b;
    v2 ^= wide ? 0xee : 0xff;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    out[0] = v0 ^ v1 ^ v2 ^ v3;
    if (!wide)
        return;
    v1 ^= 0xdd;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    out[1] = v0 ^ v1 ^ v2 ^ v3;
}

/* ---------------------------------------------------------------------- */
/* entries                                                                 */

void store_index_digest(const struct store_index *ix, const char *op_id,
                        size_t len, struct store_index_key *k)
{
    uint64_t o[2];
    store_siphash24(op_id, len, ix->sip_key, true, o);
    k->k0 = o[0];
    k->k1 = o[1] ? o[1] : 1; /* never the empty slot's 0, 0 */
}

uint64_t store_index_hdigest(const struct store_index *ix,
                             const char *request_hash, size_t len)
{
    uint64_t o[2];
    store_siphash24(request_hash, len, ix->sip_hkey, false, o);
    return o[0];
}

/* @locality any thread. */
static uint64_t idx_meta(int64_t expires_at_ms, enum store_op_state state,
                         enum store_outbox_state outbox)
{
    uint64_t e;
    if (expires_at_ms <= 0)
        e = 0; /* reads as "at most 0" */
    else if ((uint64_t)expires_at_ms >= IDX_EXP_MASK)
        e = IDX_EXP_MASK; /* reads as "at least IDX_EXP_MASK" */
    else
        e = (uint64_t)expires_at_ms;
    return e | (uint64_t)state << IDX_ST_SHIFT
           | (uint64_t)outbox << IDX_OB_SHIFT;
}

/* @locality any thread. */
static int idx_state(uint64_t m)
{
    return (int)(m >> IDX_ST_SHIFT & 0xff);
}

/* @locality any thread. */
static int idx_expiry(uint64_t m, int64_t now_ms, int64_t filter_now_ms)
{
    int64_t e = (int64_t)(m & IDX_EXP_MASK);
    if (e == 0)
        return now_ms > 0 ? IDX_EXPIRED : IDX_UNSURE;
    if (e == (int64_t)IDX_EXP_MASK)
        return now_ms <= e && filter_now_ms <= e ? IDX_LIVE : IDX_UNSURE;
    if (store_record_expired(e, now_ms))
        return IDX_EXPIRED;
    /* live at now_ms, but the filter may have dropped it already */
    return store_record_expired(e, filter_now_ms) ? IDX_UNSURE : IDX_LIVE;
}

enum store_op_state store_index_entry_state(const struct store_index_entry *e)
{
    return (enum store_op_state)idx_state(e->m);
}

void store_index_entry_op(const struct store_index_entry *e,
                          const char *request_hash, struct store_op *op)
{
    memset(op, 0, sizeof(*op));
    op->state = (enum store_op_state)idx_state(e->m);
    op->outbox_state = (enum store_outbox_state)(e->m >> IDX_OB_SHIFT & 0xf);
    op->expires_at_ms = (int64_t)(e->m & IDX_EXP_MASK);
    snprintf(op->request_hash, sizeof(op->request_hash), "%s", request_hash);
}

/* ---------------------------------------------------------------------- */
/* segments                                                                */

/* @locality any thread. */
static struct idx_seg *idx_seg_of(struct store_index *ix,
                                  const struct store_index_key *k)
{
    return &ix->seg[store_index_segment(k)];
}

bool store_index_rebuilding(struct store_index *ix)
{
    return !atomic_load(&ix->done) && !atomic_load(&ix->off) &&
           !atomic_load(&ix->lossy);
}

bool store_index_complete(struct store_index *ix)
{
    return atomic_load(&ix->done) && !atomic_load(&ix->lossy)
           && !atomic_load(&ix->off);
}

/* k's slot, or the empty slot where it would go.  Caller holds g->lock.
 * @locality any thread. */
static struct store_index_entry *seg_probe(const struct idx_seg *g,
                                           const struct store_index_key *k)
{
    uint64_t i = (uint64_t)(((unsigned __int128)k->k1 * g->cap) >> 64);
    for (;;) {
        struct store_index_entry *sl = &g->slots[i];
        if ((sl->k0 == k->k0 && sl->k1 == k->k1) || (sl->k0 | sl->k1) == 0)
            return sl;
        if (++i == g->cap)
            i = 0;
    }
}

/* Prefetch k's home slot (batches: overlap the cache misses of a segment's
 * keys).  Caller holds g->lock.  @locality any thread. */
static void seg_prefetch(const struct idx_seg *g,
                         const struct store_index_key *k)
{
    uint64_t i = (uint64_t)(((unsigned __int128)k->k1 * g->cap) >> 64);
    __builtin_prefetch(&g->slots[i]);
}

/*
 * Slot arrays come straight from mmap: a segment's old array goes back to
 * the kernel when it grows (from malloc, arrays of a few MiB would stay in
 * the heap after glibc raised its mmap threshold), and large ones may use
 * transparent huge pages (fewer TLB misses on random probes).  A failure is
 * NULL, not an abort: the index turns off (or store_open fails), the store
 * keeps working from RocksDB.
 * @locality any thread.
 */
static struct store_index_entry *slots_alloc(uint64_t n)
{
    size_t bytes = (size_t)n * sizeof(struct store_index_entry);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (bytes >= ((size_t)4 << 20))
        (void)madvise(p, bytes, MADV_HUGEPAGE);
    /* Fault every page in writable now: a page a probe reads first is the
     * shared zero page, and the write after it is a copy-on-write fault
     * whose TLB flush interrupts every core running this process (the
     * pipeline's look-ups included); measured in the replay storm's
     * profile (issue 13). */
    for (size_t o = 0; o < bytes; o += 4096)
        ((volatile unsigned char *)p)[o] = 0;
    return p; /* zero-filled */
}

/* @locality any thread. */
static void slots_free(struct store_index_entry *p, uint64_t n)
{
    if (p)
        munmap(p, (size_t)n * sizeof(*p));
}

/* @locality any thread. */
static void idx_raise_horizon(struct store_index *ix, int64_t t)
{
    int64_t cur = atomic_load(&ix->horizon_ms);
    while (cur < t
           && !atomic_compare_exchange_weak(&ix->horizon_ms, &cur, t))
        ;
}

/*
 * Rehash segment g into ncap slots; unless purge_now_ms is INT64_MIN, drop
 * tombstones and entries expired at purge_now_ms.  Caller holds the write
 * lock.  Returns false when out of memory (g unchanged).
 * @locality any thread.
 */
static bool seg_rehash(struct store_index *ix, struct idx_seg *g,
                       uint64_t ncap, int64_t purge_now_ms)
{
    struct store_index_entry *ns = slots_alloc(ncap);
    if (!ns)
        return false;
    struct idx_seg tmp = {.slots = ns, .cap = ncap};
    bool expired_dropped = false;
    for (uint64_t i = 0; i < g->cap; i++) {
        const struct store_index_entry *sl = &g->slots[i];
        if ((sl->k0 | sl->k1) == 0)
            continue;
        if (purge_now_ms != INT64_MIN) {
            int64_t e = (int64_t)(sl->m & IDX_EXP_MASK);
            if (idx_state(sl->m) == IDX_ST_ABSENT)
                continue;
            if (e != (int64_t)IDX_EXP_MASK
                && store_record_expired(e, purge_now_ms)) {
                expired_dropped = true;
                continue;
            }
        }
        struct store_index_key k = {sl->k0, sl->k1};
        *seg_probe(&tmp, &k) = *sl;
        tmp.used++;
    }
    slots_free(g->slots, g->cap);
    g->slots = ns;
    g->cap = ncap;
    g->used = tmp.used;
    g->fails = 0;
    g->rehashes++;
    if (expired_dropped)
        idx_raise_horizon(ix, purge_now_ms);
    return true;
}

/* Make room for one more entry.  0: room; 1: full at the bound; -1: NOMEM.
 * @locality any thread. */
static int seg_make_room(struct store_index *ix, struct idx_seg *g,
                         int64_t now_ms, enum store_index_put_mode mode)
{
    /* purging during the rebuild could let its snapshot resurrect entries */
    bool purge = mode != STORE_INDEX_REBUILD && atomic_load(&ix->done);
    uint64_t ncap = g->cap + g->cap / 2;
    if (ncap > g->max_cap)
        ncap = g->max_cap;
    bool at_bound = ncap <= g->cap;
    if (at_bound) {
        /* at the bound: purge, but not again on every refused insert */
        if (!purge || g->fails++ % (g->cap / 16 + 1) != 0)
            return 1;
    }
    uint64_t before = g->used;
    if (!seg_rehash(ix, g, ncap, purge ? now_ms : INT64_MIN))
        return -1;
    /* A purge at the bound that freed under cap / 16 slots: the next one
     * after cap / 16 + 1 more refusals, so that a rehash of the whole
     * segment is paid by at least cap / 16 inserts or refusals.  The
     * rehash zeroed fails, and fails 0 purges: without this every refused
     * insert rehashed its segment (a full 64 MiB index took about 500 new
     * ops/s in issue 13's 4M-op shadow run), and a purge freeing a few
     * expired entries at a time would recur every few inserts. */
    if (at_bound && before - g->used < g->cap / 16)
        g->fails = 1;
    if ((g->used + 1) * IDX_LOAD_DEN > g->cap * IDX_LOAD_NUM)
        return 1;
    return 0;
}

/*
 * Enter k's state.  STORE_INDEX_UPSERT: the caller committed the record and
 * holds the op's stripe; STORE_INDEX_FILL: the caller read it under the op's
 * stripe; STORE_INDEX_REBUILD: the rebuild thread's snapshot.  Caller holds
 * g's write lock.
 * @locality any thread.
 */
static void idx_put_locked(struct store_index *ix, struct idx_seg *g,
                           const struct store_index_key *k, uint64_t h,
                           uint64_t m, int64_t now_ms,
                           enum store_index_put_mode mode)
{
    struct store_index_entry *sl = seg_probe(g, k);
    if ((sl->k0 | sl->k1) != 0) {
        if (mode == STORE_INDEX_UPSERT) {
            sl->h = h;
            sl->m = m;
        }
        return;
    }
    if ((g->used + 1) * IDX_LOAD_DEN > g->cap * IDX_LOAD_NUM) {
        int r = seg_make_room(ix, g, now_ms, mode);
        if (r != 0) {
            if (mode == STORE_INDEX_FILL)
                return; /* only a cache fill: nothing lost */
            if (r < 0)
                atomic_store(&ix->off, true);
            else
                atomic_store(&ix->lossy, true);
            return;
        }
        sl = seg_probe(g, k);
    }
    sl->k0 = k->k0;
    sl->k1 = k->k1;
    sl->h = h;
    sl->m = m;
    g->used++;
}

/* @locality any thread. */
static void idx_put(struct store_index *ix, const struct store_index_key *k,
                    uint64_t h, uint64_t m, int64_t now_ms,
                    enum store_index_put_mode mode)
{
    if (atomic_load_explicit(&ix->off, memory_order_relaxed))
        return;
    struct idx_seg *g = idx_seg_of(ix, k);
    pthread_rwlock_wrlock(&g->lock);
    idx_put_locked(ix, g, k, h, m, now_ms, mode);
    pthread_rwlock_unlock(&g->lock);
}

/* The digest and meta of op record \p op under g's write lock.
 * @locality any thread. */
static void idx_put_op_locked(struct store_index *ix, struct idx_seg *g,
                              const struct store_index_key *k,
                              const struct store_op *op, int64_t now_ms,
                              enum store_index_put_mode mode)
{
    idx_put_locked(ix, g, k,
                   store_index_hdigest(ix, op->request_hash,
                                       strlen(op->request_hash)),
                   idx_meta(op->expires_at_ms, op->state, op->outbox_state),
                   now_ms, mode);
}

void store_index_put(struct store_index *ix, const struct store_index_key *k,
                     const struct store_op *op, int64_t now_ms,
                     enum store_index_put_mode mode)
{
    idx_put(ix, k,
            store_index_hdigest(ix, op->request_hash, strlen(op->request_hash)),
            idx_meta(op->expires_at_ms, op->state, op->outbox_state), now_ms,
            mode);
}

void store_index_forget(struct store_index *ix, const struct store_index_key *k,
                        int64_t now_ms)
{
    if (atomic_load(&ix->off))
        return;
    struct idx_seg *g = idx_seg_of(ix, k);
    uint64_t tomb = idx_meta(0, (enum store_op_state)IDX_ST_ABSENT,
                             STORE_OUTBOX_NONE);
    pthread_rwlock_wrlock(&g->lock);
    struct store_index_entry *sl = seg_probe(g, k);
    bool present = (sl->k0 | sl->k1) != 0;
    if (present)
        sl->m = tomb;
    pthread_rwlock_unlock(&g->lock);
    /* while the rebuild runs, a tombstone keeps its snapshot out */
    if (!present && !atomic_load(&ix->done))
        idx_put(ix, k, 0, tomb, now_ms, STORE_INDEX_UPSERT);
}

/* Caller holds g->lock (either mode). */
static enum store_index_verdict
idx_judge_locked(struct store_index *ix, const struct idx_seg *g,
                 const struct store_index_key *k, int64_t now_ms,
                 int64_t filter_now_ms, struct store_index_entry *out)
{
    const struct store_index_entry *sl = seg_probe(g, k);
    if ((sl->k0 | sl->k1) == 0)
        return store_index_complete(ix)
                       && now_ms >= atomic_load(&ix->horizon_ms)
                   ? STORE_INDEX_ABSENT
                   : STORE_INDEX_UNKNOWN;
    int st = idx_state(sl->m);
    if (st == IDX_ST_ABSENT)
        return STORE_INDEX_ABSENT;
    switch (idx_expiry(sl->m, now_ms, filter_now_ms)) {
    case IDX_EXPIRED:
        return STORE_INDEX_ABSENT;
    case IDX_UNSURE:
        return STORE_INDEX_UNKNOWN;
    }
    if (st == STORE_OP_COMPLETE || st == STORE_OP_FAILED) {
        *out = *sl;
        return STORE_INDEX_FINISHED;
    }
    return STORE_INDEX_UNKNOWN; /* running or retryable: RocksDB has the
                                   lease */
}

enum store_index_verdict store_index_judge(struct store_index *ix,
                                           const struct store_index_key *k,
                                           int64_t now_ms,
                                           int64_t filter_now_ms,
                                           struct store_index_entry *out)
{
    if (atomic_load_explicit(&ix->off, memory_order_relaxed))
        return STORE_INDEX_UNKNOWN;
    struct idx_seg *g = idx_seg_of(ix, k);
    pthread_rwlock_rdlock(&g->lock);
    enum store_index_verdict v = idx_judge_locked(ix, g, k, now_ms,
                                                  filter_now_ms, out);
    pthread_rwlock_unlock(&g->lock);
    return v;
}

bool store_index_holds(struct store_index *ix, const struct store_index_key *k,
                       const struct store_op *op)
{
    if (atomic_load_explicit(&ix->off, memory_order_relaxed))
        return false;
    uint64_t m = idx_meta(op->expires_at_ms, op->state, op->outbox_state);
    uint64_t h = store_index_hdigest(ix, op->request_hash,
                                     strlen(op->request_hash));
    struct idx_seg *g = idx_seg_of(ix, k);
    pthread_rwlock_rdlock(&g->lock);
    const struct store_index_entry *sl = seg_probe(g, k);
    bool held = (sl->k0 | sl->k1) != 0 && sl->m == m && sl->h == h;
    pthread_rwlock_unlock(&g->lock);
    return held;
}

void store_index_count(struct store_index *ix, const struct store_index_key *k,
                       bool hit)
{
    struct idx_seg *g = idx_seg_of(ix, k);
    atomic_fetch_add_explicit(hit ? &g->hits : &g->misses, 1,
                              memory_order_relaxed);
}

void store_index_count_add(struct store_index *ix, unsigned seg,
                           uint64_t hits, uint64_t misses)
{
    struct idx_seg *g = &ix->seg[seg];
    if (hits)
        atomic_fetch_add_explicit(&g->hits, hits, memory_order_relaxed);
    if (misses)
        atomic_fetch_add_explicit(&g->misses, misses, memory_order_relaxed);
}

bool store_index_disable(struct store_index *ix)
{
    return !atomic_exchange(&ix->off, true);
}

/* ---------------------------------------------------------------------- */
/* batches                                                                 */

/* Group \p n keys by segment (a counting sort): segment g's are order[start[g]
 * .. start[g + 1]).  Each key is the first member of an element \p stride
 * bytes after the previous one (a key array, or the probes). */
static void group_by_segment(const void *base, size_t stride, size_t n,
                             uint32_t *order,
                             uint32_t start[STORE_INDEX_SEGS + 1])
{
    const unsigned char *b = base;
#define KEY_AT(j) ((const struct store_index_key *)(const void *)(b + (j) * stride))
    uint32_t pos[STORE_INDEX_SEGS] = {0};
    for (size_t j = 0; j < n; j++)
        pos[store_index_segment(KEY_AT(j))]++;
    start[0] = 0;
    for (int g = 0; g < STORE_INDEX_SEGS; g++) {
        start[g + 1] = start[g] + pos[g];
        pos[g] = start[g];
    }
    for (size_t j = 0; j < n; j++)
        order[pos[store_index_segment(KEY_AT(j))]++] = (uint32_t)j;
#undef KEY_AT
}

void store_index_group(const struct store_index_probe *p, size_t n,
                       uint32_t *order, uint32_t start[STORE_INDEX_SEGS + 1])
{
    /* the key is a probe's first member */
    _Static_assert(offsetof(struct store_index_probe, key) == 0,
                   "store_index_probe starts with its key");
    group_by_segment(p, sizeof(*p), n, order, start);
}

void store_index_judge_batch(struct store_index *ix,
                             struct store_index_probe *p,
                             const uint32_t *order,
                             const uint32_t start[STORE_INDEX_SEGS + 1],
                             int64_t now_ms, int64_t filter_now_ms)
{
    bool off = atomic_load(&ix->off);
    for (int gi = 0; gi < STORE_INDEX_SEGS; gi++) {
        if (start[gi] == start[gi + 1])
            continue;
        struct idx_seg *g = &ix->seg[gi];
        if (off) {
            for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
                p[order[x]].verdict = STORE_INDEX_UNKNOWN;
            continue;
        }
        pthread_rwlock_rdlock(&g->lock);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
            seg_prefetch(g, &p[order[x]].key);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++) {
            struct store_index_probe *b = &p[order[x]];
            b->verdict = (uint8_t)idx_judge_locked(ix, g, &b->key, now_ms,
                                                   filter_now_ms, &b->entry);
        }
        pthread_rwlock_unlock(&g->lock);
    }
}

void store_index_prefetch(struct store_index *ix,
                          const struct store_index_key *keys, size_t n)
{
    enum { CHUNK = 1024 };
    if (atomic_load_explicit(&ix->off, memory_order_relaxed))
        return;
    uint32_t order[CHUNK];
    uint32_t start[STORE_INDEX_SEGS + 1];
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t m = n - base < CHUNK ? n - base : CHUNK;
        const struct store_index_key *k = keys + base;
        group_by_segment(k, sizeof(*k), m, order, start);
        for (int gi = 0; gi < STORE_INDEX_SEGS; gi++) {
            if (start[gi] == start[gi + 1])
                continue;
            struct idx_seg *g = &ix->seg[gi];
            pthread_rwlock_rdlock(&g->lock);
            for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
                seg_prefetch(g, &k[order[x]]);
            pthread_rwlock_unlock(&g->lock);
        }
    }
}

void store_index_put_batch(struct store_index *ix,
                           const struct store_index_probe *p,
                           const uint32_t *order,
                           const uint32_t start[STORE_INDEX_SEGS + 1],
                           int64_t now_ms)
{
    if (atomic_load(&ix->off))
        return;
    for (int gi = 0; gi < STORE_INDEX_SEGS; gi++) {
        if (start[gi] == start[gi + 1])
            continue;
        struct idx_seg *g = &ix->seg[gi];
        pthread_rwlock_wrlock(&g->lock);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
            if (p[order[x]].put)
                seg_prefetch(g, &p[order[x]].key);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++) {
            const struct store_index_probe *b = &p[order[x]];
            if (b->put)
                idx_put_op_locked(ix, g, &b->key, b->put, now_ms,
                                  STORE_INDEX_UPSERT);
        }
        pthread_rwlock_unlock(&g->lock);
    }
}

/* ---------------------------------------------------------------------- */
/* life cycle                                                              */

/* @locality any thread. */
static void random_key(unsigned char k[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t r = getrandom(k + got, 16 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got < 16) {
        /* no entropy source: still a fine hash, only not secret */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t a = (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)k;
        uint64_t b = (uint64_t)ts.tv_sec * UINT64_C(0x9e3779b97f4a7c15);
        store_codec_le64_put(k, a);
        store_codec_le64_put(k + 8, b);
    }
}

struct store_index *store_index_new(size_t max_bytes, uint64_t expected_ops,
                                    const unsigned char *keys)
{
    struct store_index *ix = calloc(1, sizeof(*ix));
    if (!ix)
        return NULL;
    if (keys) {
        memcpy(ix->sip_key, keys, 16);
        memcpy(ix->sip_hkey, keys + 16, 16);
    } else {
        random_key(ix->sip_key);
        random_key(ix->sip_hkey);
    }
    atomic_init(&ix->horizon_ms, 0);
    uint64_t max_cap = max_bytes / sizeof(struct store_index_entry)
                       / STORE_INDEX_SEGS;
    if (max_cap < STORE_INDEX_MIN_SLOTS)
        max_cap = STORE_INDEX_MIN_SLOTS;
    uint64_t cap = expected_ops / STORE_INDEX_SEGS + 64;
    if (cap > max_cap)
        cap = max_cap;
    for (; ix->segs_init < STORE_INDEX_SEGS; ix->segs_init++) {
        struct idx_seg *g = &ix->seg[ix->segs_init];
        g->slots = slots_alloc(cap);
        if (!g->slots) {
            store_index_destroy(ix);
            return NULL;
        }
        g->cap = cap;
        g->max_cap = max_cap;
        pthread_rwlock_init(&g->lock, NULL);
    }
    return ix;
}

void store_index_destroy(struct store_index *ix)
{
    if (!ix)
        return;
    for (int i = 0; i < STORE_INDEX_SEGS; i++) {
        slots_free(ix->seg[i].slots, ix->seg[i].cap);
        if (i < ix->segs_init)
            pthread_rwlock_destroy(&ix->seg[i].lock);
    }
    free(ix);
}

void store_index_rebuild_end(struct store_index *ix, bool lossy,
                             int64_t horizon_ms, bool shrink)
{
    if (lossy)
        atomic_store(&ix->lossy, true);
    if (horizon_ms != INT64_MIN)
        idx_raise_horizon(ix, horizon_ms);
    /* a growth during the rebuild may have left a segment at load 0.53:
     * give back what it does not need (load below 0.65 -> 0.7).  Before
     * the rebuild is declared over: whoever waits for it (an assignment,
     * store_index_wait) starts on a settled table, not beside 64 rehashes
     * and their unmaps (a lossy end, set above, releases the waiters at
     * once: that index is a cache, nothing waits for it to settle) */
    for (int i = 0; i < STORE_INDEX_SEGS && shrink; i++) {
        struct idx_seg *g = &ix->seg[i];
        pthread_rwlock_wrlock(&g->lock);
        uint64_t want = g->used * 10 / 7 + STORE_INDEX_MIN_SLOTS;
        if (g->used * 20 < g->cap * 13 && want < g->cap)
            seg_rehash(ix, g, want, INT64_MIN); /* may fail: keeps g */
        pthread_rwlock_unlock(&g->lock);
    }
    atomic_store(&ix->done, true);
}

void store_index_stats_fill(struct store_index *ix,
                            struct store_index_stats *st)
{
    memset(st, 0, sizeof(*st));
    for (int i = 0; i < STORE_INDEX_SEGS; i++) {
        struct idx_seg *g = &ix->seg[i];
        pthread_rwlock_rdlock(&g->lock);
        st->entries += g->used;
        st->capacity += g->cap;
        st->rehashes += g->rehashes;
        pthread_rwlock_unlock(&g->lock);
        st->hits += atomic_load_explicit(&g->hits, memory_order_relaxed);
        st->misses += atomic_load_explicit(&g->misses, memory_order_relaxed);
    }
    st->bytes = st->capacity * sizeof(struct store_index_entry)
                + STORE_INDEX_SEGS * sizeof(struct idx_seg);
    st->complete = store_index_complete(ix);
    st->off = atomic_load(&ix->off);
    st->rebuilding = store_index_rebuilding(ix);
}
