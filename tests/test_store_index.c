/*
 * Unit tests of the store's hot index on its own (include/store_index.h):
 * SipHash-2-4 against the reference vectors, digests, verdicts (absent,
 * unknown, finished; the C-28 expiry boundary and the filter clock), put
 * modes, tombstones, the horizon, lossy and off states, collisions and
 * wrap-around of linear probing, growth, the bound (refusal, purge), the
 * shrink after a rebuild, counters and the batch calls.  No RocksDB.
 *
 * Keys are built by hand where the test needs a segment or a home slot: a
 * key's segment is the top 6 bits of k0, its home slot k1 * cap >> 64, and
 * every segment starts with 64 slots (expected_ops 0).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "store_index.h"

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define BIG ((size_t)64 << 20)
#define SEG_SLOTS 64                           /* a new segment */
#define ALL_SLOTS (SEG_SLOTS * STORE_INDEX_SEGS) /* a new index */
#define EXP_MAX ((INT64_C(1) << 48) - 1)       /* the largest expiry kept */

/* The reference keys: bytes 0..15 (op_id digests), 16..31 (request_hash). */
static unsigned char g_keys[32];
static struct store_index *g_ix;

static void setup(void)
{
    for (int i = 0; i < 32; i++)
        g_keys[i] = (unsigned char)i;
    g_ix = store_index_new(BIG, 0, g_keys);
    ck_assert_ptr_nonnull(g_ix);
}

static void teardown(void)
{
    store_index_destroy(g_ix);
    g_ix = NULL;
}

/* A key in segment \p seg with \p k1 (home slot k1 * cap >> 64). */
static struct store_index_key key_in(unsigned seg, uint64_t low, uint64_t k1)
{
    struct store_index_key k = {(uint64_t)seg << STORE_INDEX_SEG_SHIFT | low,
                                k1};
    return k;
}

static struct store_op op_of(enum store_op_state st, int64_t expires_at,
                             const char *hash)
{
    struct store_op op;
    memset(&op, 0, sizeof(op));
    op.state = st;
    op.outbox_state = STORE_OUTBOX_PENDING;
    op.generation = 3;
    op.expires_at_ms = expires_at;
    snprintf(op.request_hash, sizeof(op.request_hash), "%s", hash);
    return op;
}

static void put(const struct store_index_key *k, enum store_op_state st,
                int64_t expires_at, const char *hash,
                enum store_index_put_mode mode)
{
    struct store_op op = op_of(st, expires_at, hash);
    store_index_put(g_ix, k, &op, 0, mode);
}

static enum store_index_verdict judge(const struct store_index_key *k,
                                      int64_t now_ms)
{
    struct store_index_entry e;
    return store_index_judge(g_ix, k, now_ms, now_ms, &e);
}

static void rebuilt(void)
{
    store_index_rebuild_end(g_ix, false, INT64_MIN, false);
}

static struct store_index_stats stats(void)
{
    struct store_index_stats st;
    store_index_stats_fill(g_ix, &st);
    return st;
}

/* ---------------------------------------------------------------------- */
/* SipHash-2-4 and digests                                                 */

/* The reference implementation's vectors (key 00..0f, input 00..len-1). */
START_TEST(test_store_index_siphash64_matches_reference_vectors)
{
    static const struct {
        size_t len;
        uint64_t tag;
    } v[] = {
        {0, UINT64_C(0x726fdb47dd0e0e31)},  {7, UINT64_C(0xab0200f58b01d137)},
        {8, UINT64_C(0x93f5f5799a932462)},  {15, UINT64_C(0xa129ca6149be45e5)},
        {63, UINT64_C(0x958a324ceb064572)},
    };
    unsigned char in[64];
    for (int i = 0; i < 64; i++)
        in[i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint64_t out[2] = {0, 0};
        store_siphash24(in, v[i].len, g_keys, false, out);
        ck_assert_msg(out[0] == v[i].tag, "len %zu: %016llx", v[i].len,
                      (unsigned long long)out[0]);
    }
}
END_TEST

START_TEST(test_store_index_siphash128_matches_reference_vectors)
{
    static const struct {
        size_t len;
        unsigned char tag[16];
    } v[] = {
        {0, {0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72,
             0x14, 0xc7, 0x55, 0x02, 0x93}},
        {7, {0xa1, 0xf1, 0xeb, 0xbe, 0xd8, 0xdb, 0xc1, 0x53, 0xc0, 0xb8, 0x4a,
             0xa6, 0x1f, 0xf0, 0x82, 0x39}},
        {8, {0x3b, 0x62, 0xa9, 0xba, 0x62, 0x58, 0xf5, 0x61, 0x0f, 0x83, 0xe2,
             0x64, 0xf3, 0x14, 0x97, 0xb4}},
        {15, {0x54, 0x93, 0xe9, 0x99, 0x33, 0xb0, 0xa8, 0x11, 0x7e, 0x08, 0xec,
              0x0f, 0x97, 0xcf, 0xc3, 0xd9}},
    };
    unsigned char in[16];
    for (int i = 0; i < 16; i++)
        in[i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint64_t out[2] = {0, 0};
        store_siphash24(in, v[i].len, g_keys, true, out);
        uint64_t w0 = 0, w1 = 0;
        for (int b = 7; b >= 0; b--) {
            w0 = w0 << 8 | v[i].tag[b];
            w1 = w1 << 8 | v[i].tag[8 + b];
        }
        ck_assert_msg(out[0] == w0 && out[1] == w1, "len %zu", v[i].len);
    }
}
END_TEST

/* op_id digests are SipHash-2-4-128 under the first key, request_hash
 * digests SipHash-2-4-64 under the second. */
START_TEST(test_store_index_digests_use_their_keys)
{
    struct store_index_key k;
    store_index_digest(g_ix, "", 0, &k);
    ck_assert_uint_eq(k.k0, UINT64_C(0xe6a825ba047f81a3));
    ck_assert_uint_eq(k.k1, UINT64_C(0x930255c71472f66d));
    uint64_t o[2];
    store_siphash24(H1, 64, g_keys + 16, false, o);
    ck_assert_uint_eq(store_index_hdigest(g_ix, H1, 64), o[0]);
    ck_assert_uint_ne(store_index_hdigest(g_ix, H1, 64),
                      store_index_hdigest(g_ix, H2, 64));
    /* another index, other random keys: other digests */
    struct store_index *other = store_index_new(BIG, 0, NULL);
    ck_assert_ptr_nonnull(other);
    struct store_index_key k2;
    store_index_digest(other, "", 0, &k2);
    ck_assert(k2.k0 != k.k0 || k2.k1 != k.k1);
    store_index_destroy(other);
}
END_TEST

START_TEST(test_store_index_segment_is_top_six_bits)
{
    struct store_index_key k = {UINT64_C(0xfc00000000000000), 1};
    ck_assert_uint_eq(store_index_segment(&k), 63);
    k.k0 = UINT64_C(1) << 58;
    ck_assert_uint_eq(store_index_segment(&k), 1);
    k.k0 = (UINT64_C(1) << 58) - 1;
    ck_assert_uint_eq(store_index_segment(&k), 0);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* verdicts                                                                */

START_TEST(test_store_index_miss_proves_absence_only_once_rebuilt)
{
    struct store_index_key k = key_in(5, 1, 77);
    ck_assert(!store_index_complete(g_ix));
    ck_assert_int_eq(judge(&k, 1000), STORE_INDEX_UNKNOWN);
    rebuilt();
    ck_assert(store_index_complete(g_ix));
    ck_assert_int_eq(judge(&k, 1000), STORE_INDEX_ABSENT);
}
END_TEST

START_TEST(test_store_index_finished_entry_answers_with_its_record)
{
    rebuilt();
    struct store_index_key k = key_in(2, 9, 1234);
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    struct store_index_entry e;
    ck_assert_int_eq(store_index_judge(g_ix, &k, 4000, 4000, &e),
                     STORE_INDEX_FINISHED);
    ck_assert_uint_eq(e.k0, k.k0);
    ck_assert_uint_eq(e.k1, k.k1);
    ck_assert_uint_eq(e.h, store_index_hdigest(g_ix, H1, 64));
    ck_assert_int_eq(store_index_entry_state(&e), STORE_OP_COMPLETE);
    struct store_op op;
    store_index_entry_op(&e, H1, &op);
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_PENDING);
    ck_assert_int_eq(op.expires_at_ms, 5000);
    ck_assert_str_eq(op.request_hash, H1);
    ck_assert_uint_eq(op.generation, 0); /* marks an index answer */
    ck_assert_str_eq(op.lease_owner, "");

    put(&k, STORE_OP_FAILED, 5000, H2, STORE_INDEX_UPSERT);
    ck_assert_int_eq(store_index_judge(g_ix, &k, 4000, 4000, &e),
                     STORE_INDEX_FINISHED);
    ck_assert_int_eq(store_index_entry_state(&e), STORE_OP_FAILED);
    ck_assert_uint_eq(e.h, store_index_hdigest(g_ix, H2, 64));
}
END_TEST

/* Running and retryable ops hold a lease only RocksDB knows. */
START_TEST(test_store_index_live_ops_are_left_to_rocksdb)
{
    rebuilt();
    struct store_index_key a = key_in(1, 1, 10), b = key_in(1, 2, 20);
    put(&a, STORE_OP_RUNNING, 5000, H1, STORE_INDEX_UPSERT);
    put(&b, STORE_OP_RETRYABLE, 5000, H1, STORE_INDEX_UPSERT);
    ck_assert_int_eq(judge(&a, 4000), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(judge(&b, 4000), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(judge(&a, 5001), STORE_INDEX_ABSENT); /* expired */
}
END_TEST

/* C-28: live up to and including expires_at. */
START_TEST(test_store_index_expiry_boundary_c28)
{
    rebuilt();
    struct store_index_key k = key_in(3, 3, 30);
    put(&k, STORE_OP_COMPLETE, 1000, H1, STORE_INDEX_UPSERT);
    ck_assert_int_eq(judge(&k, 1000), STORE_INDEX_FINISHED);
    ck_assert_int_eq(judge(&k, 1001), STORE_INDEX_ABSENT);
}
END_TEST

/* Live now but expired at the filter clock: the compaction filter may have
 * dropped the record already, so RocksDB decides. */
START_TEST(test_store_index_filter_clock_ahead_is_unknown)
{
    rebuilt();
    struct store_index_key k = key_in(3, 4, 40);
    struct store_index_entry e;
    put(&k, STORE_OP_COMPLETE, 1000, H1, STORE_INDEX_UPSERT);
    ck_assert_int_eq(store_index_judge(g_ix, &k, 1000, 1001, &e),
                     STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(store_index_judge(g_ix, &k, 1000, 1000, &e),
                     STORE_INDEX_FINISHED);
}
END_TEST

/* expires_at is kept in 48 bits: <= 0 reads as "at most 0", beyond 2^48 - 2
 * as "at least 2^48 - 1". */
START_TEST(test_store_index_expiry_clamped_to_48_bits)
{
    rebuilt();
    struct store_index_key z = key_in(4, 1, 10), m = key_in(4, 2, 20);
    struct store_index_entry e;
    put(&z, STORE_OP_COMPLETE, -5, H1, STORE_INDEX_UPSERT);
    ck_assert_int_eq(judge(&z, 1), STORE_INDEX_ABSENT);
    ck_assert_int_eq(judge(&z, 0), STORE_INDEX_UNKNOWN);
    put(&m, STORE_OP_COMPLETE, INT64_MAX, H1, STORE_INDEX_UPSERT);
    ck_assert_int_eq(store_index_judge(g_ix, &m, EXP_MAX, EXP_MAX, &e),
                     STORE_INDEX_FINISHED);
    struct store_op op;
    store_index_entry_op(&e, H1, &op);
    ck_assert_int_eq(op.expires_at_ms, EXP_MAX);
    ck_assert_int_eq(judge(&m, EXP_MAX + 1), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(store_index_judge(g_ix, &m, 1000, EXP_MAX + 1, &e),
                     STORE_INDEX_UNKNOWN);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* put modes, tombstones, horizon, lossy, off                              */

START_TEST(test_store_index_fill_and_rebuild_never_replace_an_entry)
{
    rebuilt();
    struct store_index_key k = key_in(6, 1, 60);
    struct store_index_entry e;
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    put(&k, STORE_OP_FAILED, 9000, H2, STORE_INDEX_FILL);
    put(&k, STORE_OP_FAILED, 9000, H2, STORE_INDEX_REBUILD);
    ck_assert_int_eq(store_index_judge(g_ix, &k, 10, 10, &e),
                     STORE_INDEX_FINISHED);
    ck_assert_int_eq(store_index_entry_state(&e), STORE_OP_COMPLETE);
    ck_assert_uint_eq(e.h, store_index_hdigest(g_ix, H1, 64));
    ck_assert_uint_eq(stats().entries, 1);
    /* an absent key is filled */
    struct store_index_key f = key_in(6, 2, 61);
    put(&f, STORE_OP_FAILED, 9000, H2, STORE_INDEX_FILL);
    ck_assert_int_eq(judge(&f, 10), STORE_INDEX_FINISHED);
    ck_assert_uint_eq(stats().entries, 2);
}
END_TEST

START_TEST(test_store_index_forget_leaves_a_tombstone)
{
    struct store_index_key k = key_in(7, 1, 70);
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    store_index_forget(g_ix, &k, 10);
    /* proven absent even before the rebuild ends */
    ck_assert_int_eq(judge(&k, 10), STORE_INDEX_ABSENT);
    ck_assert_uint_eq(stats().entries, 1);
    /* the rebuild's snapshot cannot bring it back */
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_REBUILD);
    ck_assert_int_eq(judge(&k, 10), STORE_INDEX_ABSENT);
    /* a writer's new record does */
    put(&k, STORE_OP_RUNNING, 5000, H1, STORE_INDEX_UPSERT);
    ck_assert_int_eq(judge(&k, 10), STORE_INDEX_UNKNOWN);
}
END_TEST

/* Without an entry: a tombstone while the rebuild runs (its snapshot may
 * still hold the op), nothing once it is done. */
START_TEST(test_store_index_forget_of_a_missing_key)
{
    struct store_index_key a = key_in(8, 1, 80), b = key_in(8, 2, 81);
    store_index_forget(g_ix, &a, 10);
    ck_assert_uint_eq(stats().entries, 1);
    put(&a, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_REBUILD);
    ck_assert_int_eq(judge(&a, 10), STORE_INDEX_ABSENT);
    rebuilt();
    store_index_forget(g_ix, &b, 10);
    ck_assert_uint_eq(stats().entries, 1);
    ck_assert_int_eq(judge(&b, 10), STORE_INDEX_ABSENT);
}
END_TEST

START_TEST(test_store_index_miss_before_horizon_is_unknown)
{
    store_index_rebuild_end(g_ix, false, 5000, false);
    ck_assert(store_index_complete(g_ix));
    struct store_index_key k = key_in(9, 1, 90);
    ck_assert_int_eq(judge(&k, 4999), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(judge(&k, 5000), STORE_INDEX_ABSENT);
}
END_TEST

START_TEST(test_store_index_lossy_rebuild_proves_nothing_absent)
{
    struct store_index_key in = key_in(9, 2, 91), out = key_in(9, 3, 92);
    put(&in, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_REBUILD);
    store_index_rebuild_end(g_ix, true, INT64_MIN, false);
    ck_assert(!store_index_complete(g_ix));
    ck_assert_int_eq(judge(&out, 10), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(judge(&in, 10), STORE_INDEX_FINISHED); /* a cache */
    ck_assert(!stats().complete);
}
END_TEST

START_TEST(test_store_index_disabled_answers_unknown_and_takes_nothing)
{
    rebuilt();
    struct store_index_key k = key_in(10, 1, 100), n = key_in(10, 2, 101);
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    ck_assert(store_index_disable(g_ix));
    ck_assert(!store_index_disable(g_ix)); /* once */
    ck_assert(!store_index_complete(g_ix));
    ck_assert_int_eq(judge(&k, 10), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(judge(&n, 10), STORE_INDEX_UNKNOWN);
    put(&n, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    ck_assert_uint_eq(stats().entries, 1);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* probing, growth, the bound                                              */

/* Keys with one home slot probe on; a key at the last slot wraps to 0. */
START_TEST(test_store_index_colliding_keys_keep_their_own_entries)
{
    rebuilt();
    /* k1 < 2^58: home slot 0 of a 64-slot segment */
    struct store_index_key a = key_in(11, 1, 1), b = key_in(11, 2, 1),
                           c = key_in(11, 3, 2);
    /* k1 = 2^64 - 1: home slot 63, the last */
    struct store_index_key d = key_in(12, 1, UINT64_MAX),
                           e = key_in(12, 2, UINT64_MAX);
    put(&a, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    put(&b, STORE_OP_FAILED, 6000, H2, STORE_INDEX_UPSERT);
    put(&c, STORE_OP_RUNNING, 7000, H1, STORE_INDEX_UPSERT);
    put(&d, STORE_OP_COMPLETE, 8000, H2, STORE_INDEX_UPSERT);
    put(&e, STORE_OP_FAILED, 9000, H1, STORE_INDEX_UPSERT);
    struct store_index_entry x;
    struct store_op op;
    ck_assert_int_eq(store_index_judge(g_ix, &a, 10, 10, &x),
                     STORE_INDEX_FINISHED);
    store_index_entry_op(&x, H1, &op);
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(op.expires_at_ms, 5000);
    ck_assert_int_eq(store_index_judge(g_ix, &b, 10, 10, &x),
                     STORE_INDEX_FINISHED);
    store_index_entry_op(&x, H2, &op);
    ck_assert_int_eq(op.state, STORE_OP_FAILED);
    ck_assert_int_eq(op.expires_at_ms, 6000);
    ck_assert_int_eq(judge(&c, 10), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(store_index_judge(g_ix, &e, 10, 10, &x),
                     STORE_INDEX_FINISHED);
    ck_assert_uint_eq(x.k0, e.k0);
    ck_assert_int_eq(store_index_entry_state(&x), STORE_OP_FAILED);
    ck_assert_int_eq(store_index_judge(g_ix, &d, 10, 10, &x),
                     STORE_INDEX_FINISHED);
    ck_assert_int_eq(store_index_entry_state(&x), STORE_OP_COMPLETE);
    /* same k1, other k0: not the same key */
    struct store_index_key f = key_in(11, 4, 1);
    ck_assert_int_eq(judge(&f, 10), STORE_INDEX_ABSENT);
    /* forgetting one leaves its neighbours */
    store_index_forget(g_ix, &a, 10);
    ck_assert_int_eq(judge(&a, 10), STORE_INDEX_ABSENT);
    ck_assert_int_eq(judge(&b, 10), STORE_INDEX_FINISHED);
    ck_assert_uint_eq(stats().entries, 5);
}
END_TEST

/* The key fill() enters as number \p i of segment \p seg: k1 spread over
 * the slots. */
static struct store_index_key spread(unsigned seg, uint64_t i)
{
    return key_in(seg, i, i * UINT64_C(0x9e3779b97f4a7c15) | 1);
}

/* n complete keys in segment \p seg, numbered from \p first. */
static void fill(unsigned seg, uint64_t first, unsigned n, int64_t expires_at,
                 enum store_index_put_mode mode)
{
    for (unsigned i = 0; i < n; i++) {
        struct store_index_key k = spread(seg, first + i);
        put(&k, STORE_OP_COMPLETE, expires_at, H1, mode);
    }
}

/* A segment grows by half when its load would pass 4/5: 51 of 64 fit, the
 * 52nd makes it 96. */
START_TEST(test_store_index_segment_grows_by_half_past_load_four_fifths)
{
    rebuilt();
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.capacity, ALL_SLOTS);
    ck_assert_uint_eq(st.entries, 0);
    size_t overhead = st.bytes - st.capacity * 32;
    fill(13, 1, 51, 5000, STORE_INDEX_UPSERT);
    ck_assert_uint_eq(stats().capacity, ALL_SLOTS);
    fill(13, 100, 1, 5000, STORE_INDEX_UPSERT);
    st = stats();
    ck_assert_uint_eq(st.capacity, ALL_SLOTS + 32);
    ck_assert_uint_eq(st.entries, 52);
    ck_assert_uint_eq(st.bytes, st.capacity * 32 + overhead);
    ck_assert(st.complete);
    /* every entry survived the rehash */
    for (unsigned i = 0; i < 51; i++) {
        struct store_index_key k = spread(13, 1 + i);
        ck_assert_int_eq(judge(&k, 10), STORE_INDEX_FINISHED);
    }
}
END_TEST

/* The fixture's index replaced by one at its bound from the start: 64
 * slots (2048 bytes) a segment, 51 entries before a segment is full. */
static void small_index(void)
{
    store_index_destroy(g_ix);
    g_ix = store_index_new((size_t)ALL_SLOTS * 32, 0, g_keys);
    ck_assert_ptr_nonnull(g_ix);
}

/* At its bound (64 slots: 2048 bytes a segment) a segment refuses the
 * insert of a writer before the rebuild ends: the index is lossy. */
START_TEST(test_store_index_full_segment_refuses_and_turns_lossy)
{
    small_index();
    fill(14, 1, 51, 5000, STORE_INDEX_UPSERT);
    ck_assert(!stats().complete);
    struct store_index_key k = key_in(14, 500, 12345);
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    rebuilt();
    ck_assert(!store_index_complete(g_ix)); /* lossy */
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.entries, 51);
    ck_assert_uint_eq(st.capacity, ALL_SLOTS);
    ck_assert_int_eq(judge(&k, 10), STORE_INDEX_UNKNOWN);
}
END_TEST

/* A cache fill into a full segment is dropped silently: nothing lost. */
START_TEST(test_store_index_full_segment_drops_a_fill_and_stays_complete)
{
    small_index();
    store_index_rebuild_end(g_ix, false, INT64_MIN, false);
    fill(15, 1, 51, 5000, STORE_INDEX_UPSERT);
    struct store_index_key k = key_in(15, 500, 12345);
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_FILL);
    ck_assert(store_index_complete(g_ix));
    ck_assert_uint_eq(stats().entries, 51);
    /* the rebuild's snapshot must not be dropped silently */
    put(&k, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_REBUILD);
    ck_assert(!store_index_complete(g_ix));
}
END_TEST

/* Once rebuilt, a full segment purges tombstones and expired entries to
 * make room; a miss then proves nothing before the purge time. */
START_TEST(test_store_index_full_segment_purges_expired_and_tombstones)
{
    small_index();
    rebuilt();
    fill(16, 1, 40, 100, STORE_INDEX_UPSERT);    /* expired at 200 */
    fill(16, 1000, 10, 5000, STORE_INDEX_UPSERT); /* live */
    struct store_index_key t = key_in(16, 2000, 777);
    put(&t, STORE_OP_COMPLETE, 5000, H1, STORE_INDEX_UPSERT);
    store_index_forget(g_ix, &t, 10); /* a tombstone: 51 slots used */
    ck_assert_uint_eq(stats().entries, 51);
    struct store_index_key k = key_in(16, 3000, 4242);
    struct store_op op = op_of(STORE_OP_COMPLETE, 5000, H2);
    store_index_put(g_ix, &k, &op, 200, STORE_INDEX_UPSERT);
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.entries, 11); /* 10 live + the new one */
    ck_assert_uint_eq(st.capacity, ALL_SLOTS);
    ck_assert(st.complete);
    ck_assert_int_eq(judge(&k, 200), STORE_INDEX_FINISHED);
    struct store_index_key gone = spread(16, 1);
    ck_assert_int_eq(judge(&gone, 199), STORE_INDEX_UNKNOWN);
    ck_assert_int_eq(judge(&gone, 200), STORE_INDEX_ABSENT);
    ck_assert_int_eq(judge(&t, 200), STORE_INDEX_ABSENT);
}
END_TEST

/* A full segment of live entries purges at the first refused insert, then
 * once per cap / 16 + 1 refusals (5 at 64 slots), not on every one: each
 * purge rehashes the whole segment, and a rehash per insert took a shadow
 * run at a full 64 MiB index from ~50k to ~500 new ops/s. */
START_TEST(test_store_index_full_segment_purges_once_per_cap_sixteenths)
{
    small_index();
    rebuilt();
    fill(17, 1, 51, 5000, STORE_INDEX_UPSERT); /* live: nothing to purge */
    uint64_t before = stats().rehashes;
    fill(17, 1000, 100, 5000, STORE_INDEX_UPSERT); /* 100 refused */
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.entries, 51);
    ck_assert(!st.complete);
    /* purges at refusals 1, 6, 11, ..., 96: 20 */
    ck_assert_uint_eq(st.rehashes - before, 20);
}
END_TEST

/* A purge at the bound that frees under cap / 16 slots (2 expired of 64)
 * is not repeated at the next refusal: the next one waits for cap / 16 + 1
 * more, so that a few expiries at a time cannot cost a whole-segment
 * rehash every few inserts. */
START_TEST(test_store_index_purge_freeing_little_waits_before_the_next)
{
    small_index();
    rebuilt();
    fill(18, 1, 2, 100, STORE_INDEX_UPSERT);    /* expired at 200 */
    fill(18, 100, 49, 5000, STORE_INDEX_UPSERT); /* live: 51, full */
    uint64_t before = stats().rehashes;
    for (uint64_t i = 0; i < 5; i++) { /* 2 fit after the purge, 3 refused */
        struct store_index_key k = spread(18, 1000 + i);
        struct store_op op = op_of(STORE_OP_COMPLETE, 5000, H2);
        store_index_put(g_ix, &k, &op, 200, STORE_INDEX_UPSERT);
    }
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.entries, 51);
    ck_assert_uint_eq(st.rehashes - before, 1);
}
END_TEST

/* Sized for expected_ops, then given back what the rebuild did not fill:
 * a segment at load below 0.65 shrinks to used * 10 / 7 + 16 slots. */
START_TEST(test_store_index_rebuild_end_shrinks_underused_segments)
{
    store_index_destroy(g_ix);
    g_ix = store_index_new(BIG, 64 * 1000, g_keys);
    ck_assert_ptr_nonnull(g_ix);
    ck_assert_uint_eq(stats().capacity, 64 * 1064);
    fill(17, 1, 10, 5000, STORE_INDEX_REBUILD);
    store_index_rebuild_end(g_ix, false, INT64_MIN, true);
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.capacity, 63 * 16 + 30);
    ck_assert_uint_eq(st.entries, 10);
    ck_assert(st.complete);
    struct store_index_key k = spread(17, 5);
    ck_assert_int_eq(judge(&k, 10), STORE_INDEX_FINISHED);
}
END_TEST

START_TEST(test_store_index_bound_caps_the_initial_size)
{
    store_index_destroy(g_ix);
    g_ix = store_index_new(1, 1000000, g_keys); /* at least 16 a segment */
    ck_assert_ptr_nonnull(g_ix);
    ck_assert_uint_eq(stats().capacity, 64 * STORE_INDEX_MIN_SLOTS);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* counters and batches                                                    */

START_TEST(test_store_index_counters_add_up)
{
    struct store_index_key a = key_in(1, 1, 1), b = key_in(2, 1, 1);
    store_index_count(g_ix, &a, true);
    store_index_count(g_ix, &a, false);
    store_index_count(g_ix, &b, false);
    store_index_count_add(g_ix, 63, 5, 7);
    struct store_index_stats st = stats();
    ck_assert_uint_eq(st.hits, 6);
    ck_assert_uint_eq(st.misses, 9);
}
END_TEST

START_TEST(test_store_index_batch_groups_judges_and_puts_by_segment)
{
    rebuilt();
    struct store_index_probe p[5];
    memset(p, 0, sizeof(p));
    p[0].key = key_in(9, 1, 11);
    p[1].key = key_in(3, 1, 12);
    p[2].key = key_in(9, 2, 13);
    p[3].key = key_in(0, 1, 14);
    p[4].key = key_in(3, 2, 15);
    uint32_t order[5], start[STORE_INDEX_SEGS + 1];
    store_index_group(p, 5, order, start);
    static const uint32_t want[5] = {3, 1, 4, 0, 2};
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(order[i], want[i]);
    ck_assert_uint_eq(start[0], 0);
    ck_assert_uint_eq(start[1], 1);
    ck_assert_uint_eq(start[3], 1);
    ck_assert_uint_eq(start[4], 3);
    ck_assert_uint_eq(start[9], 3);
    ck_assert_uint_eq(start[10], 5);
    ck_assert_uint_eq(start[STORE_INDEX_SEGS], 5);

    put(&p[2].key, STORE_OP_COMPLETE, 5000, H2, STORE_INDEX_UPSERT);
    put(&p[4].key, STORE_OP_RUNNING, 5000, H1, STORE_INDEX_UPSERT);
    store_index_judge_batch(g_ix, p, order, start, 10, 10);
    ck_assert_int_eq(p[0].verdict, STORE_INDEX_ABSENT);
    ck_assert_int_eq(p[1].verdict, STORE_INDEX_ABSENT);
    ck_assert_int_eq(p[2].verdict, STORE_INDEX_FINISHED);
    ck_assert_uint_eq(p[2].entry.h, store_index_hdigest(g_ix, H2, 64));
    ck_assert_int_eq(p[3].verdict, STORE_INDEX_ABSENT);
    ck_assert_int_eq(p[4].verdict, STORE_INDEX_UNKNOWN);

    struct store_op done = op_of(STORE_OP_FAILED, 7000, H1);
    p[0].put = &done;
    p[3].put = &done;
    store_index_put_batch(g_ix, p, order, start, 10);
    ck_assert_int_eq(judge(&p[0].key, 10), STORE_INDEX_FINISHED);
    ck_assert_int_eq(judge(&p[3].key, 10), STORE_INDEX_FINISHED);
    ck_assert_int_eq(judge(&p[1].key, 10), STORE_INDEX_ABSENT);
    ck_assert_uint_eq(stats().entries, 4);

    ck_assert(store_index_disable(g_ix));
    store_index_judge_batch(g_ix, p, order, start, 10, 10);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(p[i].verdict, STORE_INDEX_UNKNOWN);
}
END_TEST

Suite *store_index_suite(void)
{
    Suite *s = suite_create("store_index");
    TCase *tc = tcase_create("hash");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_store_index_siphash64_matches_reference_vectors);
    tcase_add_test(tc, test_store_index_siphash128_matches_reference_vectors);
    tcase_add_test(tc, test_store_index_digests_use_their_keys);
    tcase_add_test(tc, test_store_index_segment_is_top_six_bits);
    suite_add_tcase(s, tc);

    tc = tcase_create("verdicts");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc,
                   test_store_index_miss_proves_absence_only_once_rebuilt);
    tcase_add_test(tc,
                   test_store_index_finished_entry_answers_with_its_record);
    tcase_add_test(tc, test_store_index_live_ops_are_left_to_rocksdb);
    tcase_add_test(tc, test_store_index_expiry_boundary_c28);
    tcase_add_test(tc, test_store_index_filter_clock_ahead_is_unknown);
    tcase_add_test(tc, test_store_index_expiry_clamped_to_48_bits);
    suite_add_tcase(s, tc);

    tc = tcase_create("states");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc,
                   test_store_index_fill_and_rebuild_never_replace_an_entry);
    tcase_add_test(tc, test_store_index_forget_leaves_a_tombstone);
    tcase_add_test(tc, test_store_index_forget_of_a_missing_key);
    tcase_add_test(tc, test_store_index_miss_before_horizon_is_unknown);
    tcase_add_test(tc, test_store_index_lossy_rebuild_proves_nothing_absent);
    tcase_add_test(tc,
                   test_store_index_disabled_answers_unknown_and_takes_nothing);
    suite_add_tcase(s, tc);

    tc = tcase_create("room");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc,
                   test_store_index_colliding_keys_keep_their_own_entries);
    tcase_add_test(tc,
                   test_store_index_segment_grows_by_half_past_load_four_fifths);
    tcase_add_test(tc, test_store_index_full_segment_refuses_and_turns_lossy);
    tcase_add_test(tc,
                   test_store_index_full_segment_drops_a_fill_and_stays_complete);
    tcase_add_test(tc,
                   test_store_index_full_segment_purges_expired_and_tombstones);
    tcase_add_test(tc, test_store_index_rebuild_end_shrinks_underused_segments);
    tcase_add_test(tc, test_store_index_bound_caps_the_initial_size);
    tcase_add_test(tc, test_store_index_full_segment_purges_once_per_cap_sixteenths);
    tcase_add_test(tc, test_store_index_purge_freeing_little_waits_before_the_next);
    suite_add_tcase(s, tc);

    tc = tcase_create("batches");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_store_index_counters_add_up);
    tcase_add_test(tc, test_store_index_batch_groups_judges_and_puts_by_segment);
    suite_add_tcase(s, tc);
    return s;
}
