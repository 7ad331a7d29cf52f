/*
 * store.c: the op lifecycle store on RocksDB (the only RocksDB user).
 *
 * On-disk layout V1 (see store.h for the 16-byte header of expiring records):
 *
 *   ops        key op_id
 *              value header(type OP) u8 state, u8 outbox_state, u64 generation,
 *                    i64 lease_expires_at, i64 created_at, i64 updated_at,
 *                    u32 attempts, u64 outbox_seq, then the strings
 *                    request_hash, event_key, lease_owner, source, category,
 *                    then, in state retryable only, i64 not_before (the
 *                    next attempt's earliest start; added without a layout
 *                    bump: no earlier dedupd wrote state retryable.  One way:
 *                    a dedupd from before it calls such a record corrupt, so
 *                    going back needs no retryable op in the store)
 *   attempts   key op_id "\n" u32 number, big-endian (iteration order = number
 *              order; the key length tells op "a" from op "a\n...")
 *              value header(type ATTEMPT, expires_at = written + ops TTL)
 *                    u32 number, u64 generation, i64 started_at, i64 ended_at,
 *                    i32 status, u64 bytes, then the strings session,
 *                    exit_addr, category, error
 *   outbox     key u64 seq, big-endian (iteration order = sequence order)
 *              value header(type OUTBOX, expires_at 0) str op_id, str event_key,
 *                    u64 generation, u32 value_len, value bytes
 *   conflicts  key op_id "\n" request_hash
 *              value header(type CONFLICT) i64 first_seen_at
 *   seen       key caller bytes
 *              value header(type SEEN) i64 created_at
 *   receipts   key Idempotency-Key
 *              value header(type RECEIPT) u8 state, str request_hash,
 *                    str receipt
 *   validators key resource key (caller bytes, 1..STORE_KEY_MAX)
 *              value header(type VALIDATOR, expires_at = stored_at +
 *                    validators TTL) i64 stored_at, i32 status,
 *                    u64 body_len, then the strings body_sha256 (64 hex),
 *                    etag, last_modified, content_type, final_url
 *   bodies     key hex SHA-256 of the body (64 bytes)
 *              value header(type BODY, expires_at as its latest validator)
 *                    u64 body_len, then the body_len bytes of the body
 *   meta       "layout_version"       u32 LE (kept trivially simple so that every
 *                                     past and future dedupd can read it)
 *              "outbox_seq_reserved"  u64 LE: sequence numbers below it may have
 *                                     been handed out; a restart starts above it
 *
 * Integers are little-endian (except outbox and attempt keys), strings are u16
 * length + bytes.  Decoding is bounds checked; anything unexpected is
 * DD_ERR_FATAL.  The attempts, receipts, validators and bodies column
 * families were added without a layout bump: their records use the V1 header,
 * store_open creates them in an existing store (create_missing_column_families),
 * and an older dedupd opens them as column families of a newer layout (no TTL
 * filter there, untouched otherwise).
 *
 * Expiry: a record is expired when expires_at < now (C-28: written at t with
 * TTL d it is still live at t + d).  Reads and the compaction filter use the
 * same test, record_expired().
 *
 * The hot index (DESIGN.md section 4) is described where it is implemented,
 * below "hot index".
 */
#include "dd.h"
#include "store.h"

#include <assert.h>
#include <errno.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#include <rocksdb/c.h>

#include "key.h"
#include "log.h"

#define STORE_HDR_LEN 16
#define STORE_STRIPES 256
#define STORE_SEQ_BLOCK 1024 /* outbox seqs reserved in meta per write */

#define STORE_DEF_OPS_TTL_MS (72LL * 3600 * 1000)
#define STORE_DEF_FAILED_TTL_MS (1LL * 3600 * 1000)
#define STORE_DEF_LEASE_MS (60LL * 1000)
#define STORE_DEF_CACHE_BYTES ((size_t)64 << 20)
#define STORE_DEF_INDEX_BYTES ((size_t)64 << 20)
#define STORE_DEF_VALIDATORS_TTL_MS (7LL * 24 * 3600 * 1000)
#define STORE_DEF_MAX_BODY_BYTES ((size_t)8 << 20)
#define STORE_WRITE_BUFFER_BYTES ((size_t)32 << 20)

/* an op record: header + fixed fields + 5 strings with u16 lengths */
#define STORE_OP_VALUE_MAX                                                    \
    (STORE_HDR_LEN + 1 + 1 + 8 + 8 + 8 + 8 + 4 + 8 + 5 * 2 + STORE_HASH_LEN * 2 \
     + STORE_OWNER_MAX + STORE_SOURCE_MAX + STORE_CATEGORY_MAX + 8)

/* an attempt record: header + fixed fields + 4 strings with u16 lengths */
#define STORE_ATTEMPT_VALUE_MAX                                               \
    (STORE_HDR_LEN + 4 + 8 + 8 + 8 + 4 + 8 + 4 * 2 + 2 * STORE_SESSION_MAX    \
     + STORE_CATEGORY_MAX + STORE_ERROR_MAX)
#define STORE_ATTEMPT_KEY_MAX (STORE_KEY_MAX + 1 + 4)

/* a validator record: header + fixed fields + 5 strings with u16 lengths */
#define STORE_VALIDATOR_VALUE_MAX                                             \
    (STORE_HDR_LEN + 8 + 4 + 8 + 5 * 2 + STORE_HASH_LEN + STORE_ETAG_MAX      \
     + STORE_LAST_MODIFIED_MAX + STORE_CONTENT_TYPE_MAX + STORE_URL_MAX)
/* the part of a body record before the body's bytes */
#define STORE_BODY_HEAD_LEN (STORE_HDR_LEN + 8)

enum rec_type {
    REC_OP = 1,
    REC_OUTBOX = 2,
    REC_CONFLICT = 3,
    REC_SEEN = 4,
    REC_ATTEMPT = 5,
    REC_RECEIPT = 6,
    REC_VALIDATOR = 7,
    REC_BODY = 8,
};

enum store_cf {
    CF_DEFAULT,
    CF_OPS,
    CF_OUTBOX,
    CF_CONFLICTS,
    CF_SEEN,
    CF_META,
    CF_ATTEMPTS,
    CF_RECEIPTS,
    CF_VALIDATORS,
    CF_BODIES,
    CF_N
};

static const char *const cf_names[CF_N] = {
    "default", "ops", "outbox", "conflicts", "seen", "meta", "attempts",
    "receipts", "validators", "bodies",
};

static const char META_LAYOUT_KEY[] = "layout_version";
static const char META_SEQ_KEY[] = "outbox_seq_reserved";

/* ---- hot index types (see "hot index" below) ---- */

#define IDX_SEGS 64          /* independent tables, one rwlock each */
#define IDX_SEG_SHIFT 58     /* segment = top 6 bits of k0 */
#define IDX_MIN_SLOTS 16
#define IDX_LOAD_NUM 4       /* grow (or stop inserting) past load 4/5 */
#define IDX_LOAD_DEN 5
#define IDX_EXP_MASK ((UINT64_C(1) << 48) - 1)
#define IDX_ST_SHIFT 48
#define IDX_OB_SHIFT 56
#define IDX_ST_ABSENT 0      /* a tombstone: known absent (store_forget) */

/* One slot: 32 bytes.  k0|k1 == 0 marks an empty slot. */
struct idx_slot {
    uint64_t k0, k1; /* SipHash-2-4-128 of op_id (keyed, never 0) */
    uint64_t h;      /* SipHash-2-4-64 of request_hash */
    uint64_t m;      /* expires_at ms (48 bits, clamped), state, outbox */
};
_Static_assert(sizeof(struct idx_slot) == 32, "index slot is 32 bytes");

struct idx_seg {
    pthread_rwlock_t lock;
    struct idx_slot *slots;
    uint64_t cap;     /* slots */
    uint64_t used;    /* occupied slots (tombstones and expired included) */
    uint64_t max_cap; /* bound */
    uint64_t fails;   /* inserts refused since the last purge */
    _Atomic uint64_t hits, misses;
    char pad[64];     /* keep segments on separate cache lines */
};

struct idx_key {
    uint64_t k0, k1;
};

struct store {
    rocksdb_t *db;
    rocksdb_options_t *opts;     /* DB options; default, outbox, meta CFs */
    rocksdb_options_t *ttl_opts; /* expiring CFs (is_ttl_cf): + TTL filter */
    rocksdb_block_based_table_options_t *bbto;
    rocksdb_cache_t *cache;
    rocksdb_compactionfilter_t *filter;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_writeoptions_t *wopts_nosync; /* never synced: claims, outbox
                                            acks (see store.h) */
    /* group commit (store_conf.group_commit): store_complete_batch writes
     * without fsync and takes a ticket; the syncer thread fsyncs the WAL
     * (rocksdb_flush_wal, sync) whenever tickets are pending, so one fsync
     * covers every write before it, and publishes the last ticket covered */
    bool group_commit;
    pthread_t sync_thread;
    bool sync_thread_started;
    pthread_mutex_t sync_mu;
    pthread_cond_t sync_cv;
    bool sync_mu_init;
    bool sync_stop;                      /* under sync_mu */
    _Atomic uint64_t ticket_issued;      /* last ticket handed out */
    _Atomic uint64_t ticket_durable;     /* last ticket fsync'd */
    _Atomic bool sync_failed;            /* an fsync failed: no ticket after
                                            it will ever be durable */
    rocksdb_column_family_handle_t *cf[CF_N];
    rocksdb_column_family_handle_t **extra_cf; /* CFs of a newer layout */
    size_t extra_cf_n;

    pthread_mutex_t stripes[STORE_STRIPES];
    int stripes_init;
    pthread_mutex_t seq_mu;
    bool seq_mu_init;

    _Atomic int64_t filter_clock_ms;     /* 0 = wall clock */
    _Atomic uint64_t next_seq;           /* next outbox seq to hand out */
    _Atomic uint64_t seq_reserved;       /* persisted bound (exclusive) */
    _Atomic uint64_t pending;            /* outbox entries */

    /* hot index */
    unsigned char sip_key[16];           /* random per open */
    unsigned char sip_hkey[16];          /* for request_hash digests */
    struct idx_seg *idx;                 /* IDX_SEGS segments */
    int idx_segs_init;
    _Atomic bool idx_done;               /* rebuild finished */
    _Atomic bool idx_lossy;              /* some live op may be missing */
    _Atomic bool idx_off;                /* unusable until reopen */
    _Atomic int64_t idx_horizon_ms;      /* a miss proves nothing before it */
    _Atomic bool idx_stop;               /* store_close: stop the rebuild */
    pthread_t idx_thread;
    bool idx_thread_started;

    char *path;
    char owner[STORE_OWNER_MAX + 1];        /* "<instance>#<run_id>" */
    char owner_prefix[STORE_OWNER_MAX + 1]; /* "<instance>#" */
    int64_t ops_ttl_ms;
    int64_t failed_ttl_ms;
    int64_t lease_ms;
    int64_t validators_ttl_ms;
    size_t max_body_bytes;
};

/* ---------------------------------------------------------------------- */
/* little helpers                                                          */

static int64_t store_clock_ms(struct store *s)
{
    int64_t c = atomic_load(&s->filter_clock_ms);
    return c ? c : dd_now_ms();
}

/* The one expiry rule (C-28): live up to and including expires_at. */
static bool record_expired(int64_t expires_at_ms, int64_t now_ms)
{
    return expires_at_ms < now_ms;
}

static int64_t add_ms(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    return a + b;
}

static uint32_t stripe_of(const void *key, size_t len)
{
    return (uint32_t)(dd_fnv1a64(key, len) % STORE_STRIPES);
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/*
 * RocksDB counts every key comparison in its thread-local perf context (two
 * TLS look-ups through __tls_get_addr per comparison in Debian's shared
 * library): about 10% of a claim batch's memtable inserts.  dedupd reads no
 * perf context, so the claim paths switch it off for their thread.
 */
static void perf_off(void)
{
    static _Thread_local bool done;
    if (!done) {
        rocksdb_set_perf_level(rocksdb_disable);
        done = true;
    }
}

/* Convert a RocksDB error at the boundary: copy, then rocksdb_free. */
static dd_err_t rdb_fail(char *rerr, const char *call, const char *what,
                         char *errstr, size_t errstr_size)
{
    dd_errstr_set(errstr, errstr_size, "%s(%.200s): %s", call, what, rerr);
    rocksdb_free(rerr);
    return DD_ERR_IO;
}

/* ---------------------------------------------------------------------- */
/* encoding                                                                */

struct enc {
    unsigned char *buf;
    size_t cap;
    size_t len;
    bool overflow;
};

static void enc_bytes(struct enc *e, const void *p, size_t n)
{
    if (e->overflow || n > e->cap - e->len) {
        e->overflow = true;
        return;
    }
    if (n)
        memcpy(e->buf + e->len, p, n);
    e->len += n;
}

static void enc_u8(struct enc *e, uint8_t v)
{
    enc_bytes(e, &v, 1);
}

static void enc_u16(struct enc *e, uint16_t v)
{
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    enc_bytes(e, b, 2);
}

static void enc_u32(struct enc *e, uint32_t v)
{
    unsigned char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    enc_bytes(e, b, 4);
}

static void enc_u64(struct enc *e, uint64_t v)
{
    unsigned char b[8];
    put_le64(b, v);
    enc_bytes(e, b, 8);
}

static void enc_str(struct enc *e, const char *s, size_t n)
{
    if (n > UINT16_MAX) {
        e->overflow = true;
        return;
    }
    enc_u16(e, (uint16_t)n);
    enc_bytes(e, s, n);
}

static void enc_header(struct enc *e, enum rec_type type, int64_t expires_at)
{
    unsigned char h[STORE_HDR_LEN] = {0};
    h[0] = STORE_LAYOUT_V1;
    h[1] = (unsigned char)type;
    put_le64(h + 8, (uint64_t)expires_at);
    enc_bytes(e, h, sizeof(h));
}

struct dec {
    const unsigned char *p;
    size_t len;
    size_t off;
    bool bad;
};

static const unsigned char *dec_bytes(struct dec *d, size_t n)
{
    if (d->bad || n > d->len - d->off) {
        d->bad = true;
        return NULL;
    }
    const unsigned char *r = d->p + d->off;
    d->off += n;
    return r;
}

static uint8_t dec_u8(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 1);
    return b ? b[0] : 0;
}

static uint16_t dec_u16(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 2);
    return b ? (uint16_t)(b[0] | (b[1] << 8)) : 0;
}

static uint32_t dec_u32(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 4);
    if (!b)
        return 0;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16
           | (uint32_t)b[3] << 24;
}

static uint64_t dec_u64(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 8);
    return b ? get_le64(b) : 0;
}

/* A string into a NUL-terminated buffer of max + 1 bytes. */
static void dec_str(struct dec *d, char *out, size_t max)
{
    uint16_t n = dec_u16(d);
    if (n > max) {
        d->bad = true;
        out[0] = '\0';
        return;
    }
    const unsigned char *b = dec_bytes(d, n);
    if (!b) {
        out[0] = '\0';
        return;
    }
    memcpy(out, b, n);
    out[n] = '\0';
}

/* A borrowed string (pointer into the value) of at most max bytes. */
static const char *dec_str_ref(struct dec *d, size_t max, size_t *n)
{
    uint16_t len = dec_u16(d);
    if (len > max) {
        d->bad = true;
        return NULL;
    }
    *n = len;
    return (const char *)dec_bytes(d, len);
}

/*
 * Check the header of a value and return its expires_at.  Errors name the CF
 * and the key.
 */
static dd_err_t dec_header(struct dec *d, enum rec_type type,
                           int64_t *expires_at, const char *cf,
                           const char *key, size_t key_len, char *errstr,
                           size_t errstr_size)
{
    const unsigned char *h = dec_bytes(d, STORE_HDR_LEN);
    if (!h) {
        dd_errstr_set(errstr, errstr_size,
                      "store: %s record '%.*s' is corrupt: %zu bytes, "
                      "shorter than its header",
                      cf, (int)(key_len > 64 ? 64 : key_len), key, d->len);
        return DD_ERR_FATAL;
    }
    if (h[0] != STORE_LAYOUT_V1 || h[1] != type) {
        dd_errstr_set(errstr, errstr_size,
                      "store: %s record '%.*s' has layout version %u type %u, "
                      "expected version %d type %d",
                      cf, (int)(key_len > 64 ? 64 : key_len), key, h[0], h[1],
                      STORE_LAYOUT_V1, (int)type);
        return DD_ERR_FATAL;
    }
    *expires_at = (int64_t)get_le64(h + 8);
    return DD_OK;
}

static size_t op_encode(const struct store_op *op, unsigned char *buf,
                        size_t cap)
{
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, REC_OP, op->expires_at_ms);
    enc_u8(&e, (uint8_t)op->state);
    enc_u8(&e, (uint8_t)op->outbox_state);
    enc_u64(&e, op->generation);
    enc_u64(&e, (uint64_t)op->lease_expires_at_ms);
    enc_u64(&e, (uint64_t)op->created_at_ms);
    enc_u64(&e, (uint64_t)op->updated_at_ms);
    enc_u32(&e, op->attempts);
    enc_u64(&e, op->outbox_seq);
    enc_str(&e, op->request_hash, strlen(op->request_hash));
    enc_str(&e, op->event_key, strlen(op->event_key));
    enc_str(&e, op->lease_owner, strlen(op->lease_owner));
    enc_str(&e, op->source, strlen(op->source));
    enc_str(&e, op->category, strlen(op->category));
    if (op->state == STORE_OP_RETRYABLE)
        enc_u64(&e, (uint64_t)op->not_before_ms);
    /* every field is bounded by its STORE_*_MAX: cannot overflow */
    assert(!e.overflow);
    return e.len;
}

static dd_err_t op_decode(const char *val, size_t len, const char *op_id,
                          struct store_op *op, char *errstr,
                          size_t errstr_size)
{
    struct dec d = {(const unsigned char *)val, len, 0, false};
    size_t klen = strlen(op_id);
    dd_err_t err = dec_header(&d, REC_OP, &op->expires_at_ms, "ops", op_id,
                              klen, errstr, errstr_size);
    if (err)
        return err;
    uint8_t state = dec_u8(&d);
    uint8_t ostate = dec_u8(&d);
    op->generation = dec_u64(&d);
    op->lease_expires_at_ms = (int64_t)dec_u64(&d);
    op->created_at_ms = (int64_t)dec_u64(&d);
    op->updated_at_ms = (int64_t)dec_u64(&d);
    op->attempts = dec_u32(&d);
    op->outbox_seq = dec_u64(&d);
    dec_str(&d, op->request_hash, STORE_HASH_LEN);
    dec_str(&d, op->event_key, STORE_HASH_LEN);
    dec_str(&d, op->lease_owner, STORE_OWNER_MAX);
    dec_str(&d, op->source, STORE_SOURCE_MAX);
    dec_str(&d, op->category, STORE_CATEGORY_MAX);
    op->not_before_ms = 0;
    if (state == STORE_OP_RETRYABLE)
        op->not_before_ms = (int64_t)dec_u64(&d);
    if (d.bad || d.off != d.len || op->not_before_ms < 0
        || state < STORE_OP_RUNNING
        || state > STORE_OP_FAILED || ostate > STORE_OUTBOX_SENT) {
        dd_errstr_set(errstr, errstr_size,
                      "store: ops record '%.*s' is corrupt (%zu bytes, "
                      "state %u, outbox state %u)",
                      (int)(klen > 64 ? 64 : klen), op_id, len, state, ostate);
        return DD_ERR_FATAL;
    }
    op->state = (enum store_op_state)state;
    op->outbox_state = (enum store_outbox_state)ostate;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* compaction filter                                                       */

static void ttl_filter_destroy(void *state)
{
    (void)state; /* the filter's state is the store itself */
}

static const char *ttl_filter_name(void *state)
{
    (void)state;
    return "dedupd.ttl";
}

/* @locality RocksDB compaction threads. */
static unsigned char ttl_filter(void *state, int level, const char *key,
                                size_t key_length, const char *value,
                                size_t value_length, char **new_value,
                                size_t *new_value_length,
                                unsigned char *value_changed)
{
    (void)level;
    (void)key;
    (void)key_length;
    (void)new_value;
    (void)new_value_length;
    *value_changed = 0;
    /* keep what we do not understand (a newer layout's records) */
    if (value_length < STORE_HDR_LEN
        || (unsigned char)value[0] != STORE_LAYOUT_V1)
        return 0;
    int64_t expires_at = (int64_t)get_le64((const unsigned char *)value + 8);
    return record_expired(expires_at, store_clock_ms(state)) ? 1 : 0;
}

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

/*
 * SipHash-2-4 of \p in under the 16-byte key \p k: out[0] is the 64-bit tag
 * (wide == false), or out[0], out[1] the 128-bit tag (wide), each the
 * little-endian reading of the reference implementation's output bytes.
 */
static void siphash24(const void *in, size_t inlen, const unsigned char k[16],
                      bool wide, uint64_t out[2])
{
    const unsigned char *p = in;
    uint64_t k0 = get_le64(k), k1 = get_le64(k + 8);
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ k1;
    uint64_t b = (uint64_t)inlen << 56;
    if (wide)
        v1 ^= 0xee;
    const unsigned char *end = p + (inlen & ~(size_t)7);
    for (; p != end; p += 8) {
        uint64_t m = get_le64(p);
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
/* hot index                                                               */

/*
 * An exact in-memory index in front of the ops column family (DESIGN.md
 * section 4): op_id digest -> request_hash digest, state, outbox state and
 * expires_at.
 *
 * Digests: the key is SipHash-2-4-128 of op_id and the value holds
 * SipHash-2-4-64 of request_hash, both keyed with 128 random bits drawn at
 * every open (the index lives in memory only and is rebuilt at open).  A keyed
 * PRF, unlike MurmurHash or xxHash, cannot be steered into collisions by whoever
 * picks job keys; for unsteered inputs two of 10M op_ids collide with
 * probability about 1.5e-25, and a conflicting request_hash passes for the
 * same one with probability 2^-64.  About 60 ns for a 64-byte op_id here.
 *
 * Table: IDX_SEGS independent open-addressing tables (linear probing, 32-byte
 * slots, multiply-shift slot choice so that capacities need not be powers of
 * two), each under its own rwlock: a rehash stalls one segment only, and
 * readers of different segments never share a lock word.  A segment grows by
 * half when its load passes 4/5, so the index costs 40 to 60 bytes per op_id,
 * up to index_max_bytes / IDX_SEGS each.  At its bound a segment first purges
 * tombstones and expired entries, then refuses inserts: the index is then
 * lossy, a cache.
 *
 * Invariant: an entry, when present, describes the op's latest committed
 * record.  Every op write updates it after RocksDB accepted the write, under
 * the op's stripe, so claims (which take the stripe first) always see it
 * current.  A missing entry proves the op absent only when the index is
 * complete: rebuilt, never lossy, and now >= idx_horizon_ms, the latest time
 * at which entries of expired ops were dropped or skipped.  Entries the
 * compaction filter may already have removed from RocksDB (expires_at below
 * the filter clock) are not trusted either: RocksDB answers them.
 *
 * Rebuild: a thread iterates the ops column family (a snapshot) and inserts
 * unexpired records only where no entry exists, so a writer's newer entry
 * always wins; store_forget leaves a tombstone while the rebuild runs so that
 * the snapshot cannot bring a deleted op back.  Nothing is purged during the
 * rebuild, so an insert a full segment refused to a writer is refused to the
 * rebuild too.
 */

enum idx_verdict {
    IV_UNKNOWN,  /* ask RocksDB */
    IV_ABSENT,   /* proven absent or expired */
    IV_FINISHED, /* complete or failed, live; *out holds the entry */
};

enum idx_put_mode {
    IDX_UPSERT,  /* a writer's committed record */
    IDX_FILL,    /* cache a record just read; only if absent, may fail */
    IDX_REBUILD, /* the rebuild's snapshot record; only if absent */
};

enum { IDX_LIVE, IDX_EXPIRED, IDX_UNSURE };

static void idx_digest(const struct store *s, const char *op_id, size_t len,
                       struct idx_key *k)
{
    uint64_t o[2];
    siphash24(op_id, len, s->sip_key, true, o);
    k->k0 = o[0];
    k->k1 = o[1] ? o[1] : 1; /* never the empty slot's 0, 0 */
}

static uint64_t idx_hdigest(const struct store *s, const char *h, size_t len)
{
    uint64_t o[2];
    siphash24(h, len, s->sip_hkey, false, o);
    return o[0];
}

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

static int idx_state(uint64_t m)
{
    return (int)(m >> IDX_ST_SHIFT & 0xff);
}

static int idx_expiry(uint64_t m, int64_t now_ms, int64_t filter_now_ms)
{
    int64_t e = (int64_t)(m & IDX_EXP_MASK);
    if (e == 0)
        return now_ms > 0 ? IDX_EXPIRED : IDX_UNSURE;
    if (e == (int64_t)IDX_EXP_MASK)
        return now_ms <= e && filter_now_ms <= e ? IDX_LIVE : IDX_UNSURE;
    if (record_expired(e, now_ms))
        return IDX_EXPIRED;
    /* live at now_ms, but the filter may have dropped it already */
    return record_expired(e, filter_now_ms) ? IDX_UNSURE : IDX_LIVE;
}

static struct idx_seg *idx_seg_of(struct store *s, const struct idx_key *k)
{
    return &s->idx[k->k0 >> IDX_SEG_SHIFT];
}

static pthread_mutex_t *key_stripe(struct store *s, const struct idx_key *k)
{
    return &s->stripes[k->k0 % STORE_STRIPES];
}

static bool idx_complete(struct store *s)
{
    return atomic_load(&s->idx_done) && !atomic_load(&s->idx_lossy)
           && !atomic_load(&s->idx_off);
}

/* k's slot, or the empty slot where it would go.  Caller holds g->lock. */
static struct idx_slot *seg_probe(const struct idx_seg *g,
                                  const struct idx_key *k)
{
    uint64_t i = (uint64_t)(((unsigned __int128)k->k1 * g->cap) >> 64);
    for (;;) {
        struct idx_slot *sl = &g->slots[i];
        if ((sl->k0 == k->k0 && sl->k1 == k->k1) || (sl->k0 | sl->k1) == 0)
            return sl;
        if (++i == g->cap)
            i = 0;
    }
}

/*
 * Slot arrays come straight from mmap: a segment's old array goes back to
 * the kernel when it grows (from malloc, arrays of a few MiB would stay in
 * the heap after glibc raised its mmap threshold), and large ones may use
 * transparent huge pages (fewer TLB misses on random probes).
 */
static struct idx_slot *slots_alloc(uint64_t n)
{
    size_t bytes = (size_t)n * sizeof(struct idx_slot);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (bytes >= ((size_t)4 << 20))
        (void)madvise(p, bytes, MADV_HUGEPAGE);
    return p; /* zero-filled */
}

static void slots_free(struct idx_slot *p, uint64_t n)
{
    if (p)
        munmap(p, (size_t)n * sizeof(*p));
}

static void idx_raise_horizon(struct store *s, int64_t t)
{
    int64_t cur = atomic_load(&s->idx_horizon_ms);
    while (cur < t
           && !atomic_compare_exchange_weak(&s->idx_horizon_ms, &cur, t))
        ;
}

/*
 * Rehash segment g into ncap slots; unless purge_now_ms is INT64_MIN, drop
 * tombstones and entries expired at purge_now_ms.  Caller holds the write
 * lock.  Returns false when out of memory (g unchanged).
 */
static bool seg_rehash(struct store *s, struct idx_seg *g, uint64_t ncap,
                       int64_t purge_now_ms)
{
    struct idx_slot *ns = slots_alloc(ncap);
    if (!ns)
        return false;
    struct idx_seg tmp = {.slots = ns, .cap = ncap};
    bool expired_dropped = false;
    for (uint64_t i = 0; i < g->cap; i++) {
        const struct idx_slot *sl = &g->slots[i];
        if ((sl->k0 | sl->k1) == 0)
            continue;
        if (purge_now_ms != INT64_MIN) {
            int64_t e = (int64_t)(sl->m & IDX_EXP_MASK);
            if (idx_state(sl->m) == IDX_ST_ABSENT)
                continue;
            if (e != (int64_t)IDX_EXP_MASK && record_expired(e, purge_now_ms)) {
                expired_dropped = true;
                continue;
            }
        }
        struct idx_key k = {sl->k0, sl->k1};
        *seg_probe(&tmp, &k) = *sl;
        tmp.used++;
    }
    slots_free(g->slots, g->cap);
    g->slots = ns;
    g->cap = ncap;
    g->used = tmp.used;
    g->fails = 0;
    if (expired_dropped)
        idx_raise_horizon(s, purge_now_ms);
    return true;
}

/* Make room for one more entry.  0: room; 1: full at the bound; -1: NOMEM. */
static int seg_make_room(struct store *s, struct idx_seg *g, int64_t now_ms,
                         enum idx_put_mode mode)
{
    /* purging during the rebuild could let its snapshot resurrect entries */
    bool purge = mode != IDX_REBUILD && atomic_load(&s->idx_done);
    uint64_t ncap = g->cap + g->cap / 2;
    if (ncap > g->max_cap)
        ncap = g->max_cap;
    if (ncap <= g->cap) {
        /* at the bound: purge, but not again on every refused insert */
        if (!purge || g->fails++ % (g->cap / 16 + 1) != 0)
            return 1;
    }
    if (!seg_rehash(s, g, ncap, purge ? now_ms : INT64_MIN))
        return -1;
    if ((g->used + 1) * IDX_LOAD_DEN > g->cap * IDX_LOAD_NUM)
        return 1;
    return 0;
}

/*
 * Enter k's state.  IDX_UPSERT: the caller committed the record and holds the
 * op's stripe; IDX_FILL: the caller read it under the op's stripe; IDX_REBUILD:
 * the rebuild thread's snapshot.
 */
static void idx_put_locked(struct store *s, struct idx_seg *g,
                           const struct idx_key *k, uint64_t h, uint64_t m,
                           int64_t now_ms, enum idx_put_mode mode)
{
    struct idx_slot *sl = seg_probe(g, k);
    if ((sl->k0 | sl->k1) != 0) {
        if (mode == IDX_UPSERT) {
            sl->h = h;
            sl->m = m;
        }
        return;
    }
    if ((g->used + 1) * IDX_LOAD_DEN > g->cap * IDX_LOAD_NUM) {
        int r = seg_make_room(s, g, now_ms, mode);
        if (r != 0) {
            if (mode == IDX_FILL)
                return; /* only a cache fill: nothing lost */
            if (r < 0)
                atomic_store(&s->idx_off, true);
            else
                atomic_store(&s->idx_lossy, true);
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

static void idx_put(struct store *s, const struct idx_key *k, uint64_t h,
                    uint64_t m, int64_t now_ms, enum idx_put_mode mode)
{
    if (atomic_load_explicit(&s->idx_off, memory_order_relaxed))
        return;
    struct idx_seg *g = idx_seg_of(s, k);
    pthread_rwlock_wrlock(&g->lock);
    idx_put_locked(s, g, k, h, m, now_ms, mode);
    pthread_rwlock_unlock(&g->lock);
}

/* Prefetch k's home slot (batches: overlap the cache misses of a segment's
 * keys).  Caller holds g->lock. */
static void seg_prefetch(const struct idx_seg *g, const struct idx_key *k)
{
    uint64_t i = (uint64_t)(((unsigned __int128)k->k1 * g->cap) >> 64);
    __builtin_prefetch(&g->slots[i]);
}

/* Enter an op record. */
static void idx_put_op(struct store *s, const struct idx_key *k,
                       const struct store_op *op, int64_t now_ms,
                       enum idx_put_mode mode)
{
    idx_put(s, k, idx_hdigest(s, op->request_hash, strlen(op->request_hash)),
            idx_meta(op->expires_at_ms, op->state, op->outbox_state), now_ms,
            mode);
}

/* store_forget removed the op: mark it absent.  Caller holds the stripe. */
static void idx_forget(struct store *s, const struct idx_key *k,
                       int64_t now_ms)
{
    if (atomic_load(&s->idx_off))
        return;
    struct idx_seg *g = idx_seg_of(s, k);
    pthread_rwlock_wrlock(&g->lock);
    struct idx_slot *sl = seg_probe(g, k);
    bool present = (sl->k0 | sl->k1) != 0;
    if (present)
        sl->m = idx_meta(0, (enum store_op_state)IDX_ST_ABSENT,
                         STORE_OUTBOX_NONE);
    pthread_rwlock_unlock(&g->lock);
    /* while the rebuild runs, a tombstone keeps its snapshot out */
    if (!present && !atomic_load(&s->idx_done))
        idx_put(s, k, 0, idx_meta(0, (enum store_op_state)IDX_ST_ABSENT,
                                  STORE_OUTBOX_NONE),
                now_ms, IDX_UPSERT);
}

/* Caller holds g->lock (either mode). */
static enum idx_verdict idx_judge_locked(struct store *s,
                                         const struct idx_seg *g,
                                         const struct idx_key *k,
                                         int64_t now_ms, int64_t filter_now_ms,
                                         struct idx_slot *out)
{
    const struct idx_slot *sl = seg_probe(g, k);
    if ((sl->k0 | sl->k1) == 0)
        return idx_complete(s) && now_ms >= atomic_load(&s->idx_horizon_ms)
                   ? IV_ABSENT
                   : IV_UNKNOWN;
    int st = idx_state(sl->m);
    if (st == IDX_ST_ABSENT)
        return IV_ABSENT;
    switch (idx_expiry(sl->m, now_ms, filter_now_ms)) {
    case IDX_EXPIRED:
        return IV_ABSENT;
    case IDX_UNSURE:
        return IV_UNKNOWN;
    }
    if (st == STORE_OP_COMPLETE || st == STORE_OP_FAILED) {
        *out = *sl;
        return IV_FINISHED;
    }
    return IV_UNKNOWN; /* running or retryable: RocksDB has the lease */
}

/* What the index knows of k at now_ms; counts a hit or a miss. */
static enum idx_verdict idx_judge(struct store *s, const struct idx_key *k,
                                  int64_t now_ms, int64_t filter_now_ms,
                                  struct idx_slot *out)
{
    if (atomic_load_explicit(&s->idx_off, memory_order_relaxed))
        return IV_UNKNOWN;
    struct idx_seg *g = idx_seg_of(s, k);
    pthread_rwlock_rdlock(&g->lock);
    enum idx_verdict v = idx_judge_locked(s, g, k, now_ms, filter_now_ms,
                                          out);
    pthread_rwlock_unlock(&g->lock);
    return v;
}

static void idx_count(struct store *s, const struct idx_key *k, bool hit)
{
    struct idx_seg *g = idx_seg_of(s, k);
    atomic_fetch_add_explicit(hit ? &g->hits : &g->misses, 1,
                              memory_order_relaxed);
}

/* Partial op of an op the index decided was a finished duplicate. */
static void op_from_index(const struct idx_slot *sl, const char *request_hash,
                          struct store_op *op)
{
    memset(op, 0, sizeof(*op));
    op->state = (enum store_op_state)idx_state(sl->m);
    op->outbox_state = (enum store_outbox_state)(sl->m >> IDX_OB_SHIFT & 0xf);
    op->expires_at_ms = (int64_t)(sl->m & IDX_EXP_MASK);
    snprintf(op->request_hash, sizeof(op->request_hash), "%s", request_hash);
}

/* @locality the index rebuild thread, started by store_open. */
static void *idx_rebuild_main(void *arg)
{
    struct store *s = arg;
    int64_t t0 = dd_now_ms();
    int64_t w = store_clock_ms(s);
    uint64_t n = 0, skipped = 0, bad = 0;
    char op_id[STORE_KEY_MAX + 1];
    char *rerr = NULL;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_fill_cache(ro, 0);
    rocksdb_readoptions_set_readahead_size(ro, (size_t)2 << 20);
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro,
                                                        s->cf[CF_OPS]);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        if ((n & 1023) == 0 && atomic_load(&s->idx_stop))
            break;
        size_t klen = 0, vlen = 0;
        const char *k = rocksdb_iter_key(it, &klen);
        const char *v = rocksdb_iter_value(it, &vlen);
        struct store_op op;
        if (klen == 0 || klen > STORE_KEY_MAX) {
            bad++;
            continue;
        }
        memcpy(op_id, k, klen);
        op_id[klen] = '\0';
        if (op_decode(v, vlen, op_id, &op, NULL, 0) != DD_OK) {
            bad++; /* claims of it must read it and fail */
            continue;
        }
        if (record_expired(op.expires_at_ms, w)) {
            skipped++;
            continue;
        }
        struct idx_key ik;
        idx_digest(s, op_id, klen, &ik);
        idx_put_op(s, &ik, &op, w, IDX_REBUILD);
        n++;
    }
    rocksdb_iter_get_error(it, &rerr);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    bool stopped = atomic_load(&s->idx_stop);
    if (rerr || bad || stopped)
        atomic_store(&s->idx_lossy, true);
    if (skipped)
        idx_raise_horizon(s, w);
    atomic_store(&s->idx_done, true);
    /* a growth during the rebuild may have left a segment at load 0.53:
     * give back what it does not need (load below 0.65 -> 0.7) */
    for (int i = 0; i < IDX_SEGS && !stopped; i++) {
        struct idx_seg *g = &s->idx[i];
        pthread_rwlock_wrlock(&g->lock);
        uint64_t want = g->used * 10 / 7 + IDX_MIN_SLOTS;
        if (g->used * 20 < g->cap * 13 && want < g->cap)
            seg_rehash(s, g, want, INT64_MIN); /* may fail: keeps g */
        pthread_rwlock_unlock(&g->lock);
    }
    if (rerr) {
        log_msg(LOG_ERR, "STORE", "index rebuild of %s: rocksdb_iter(ops): %s",
                s->path, rerr);
        rocksdb_free(rerr);
    }
    if (!stopped)
        log_msg(LOG_INFO, "STORE",
                "index rebuilt in %lld ms: %llu ops, %llu expired skipped, "
                "%llu unreadable; %s",
                (long long)(dd_now_ms() - t0), (unsigned long long)n,
                (unsigned long long)skipped, (unsigned long long)bad,
                idx_complete(s) ? "complete" : "a cache only (lossy)");
    return NULL;
}

static uint64_t ops_estimate(struct store *s)
{
    char *v = rocksdb_property_value_cf(s->db, s->cf[CF_OPS],
                                        "rocksdb.estimate-num-keys");
    uint64_t n = v ? strtoull(v, NULL, 10) : 0;
    free(v);
    return n;
}

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
        put_le64(k, a);
        put_le64(k + 8, b);
    }
}

/* Allocate the segments (sized for the ops already stored) and start the
 * rebuild thread. */
static dd_err_t idx_open(struct store *s, size_t max_bytes, char *errstr,
                         size_t errstr_size)
{
    random_key(s->sip_key);
    random_key(s->sip_hkey);
    s->idx = calloc(IDX_SEGS, sizeof(*s->idx));
    if (!s->idx)
        goto nomem;
    uint64_t max_cap = max_bytes / sizeof(struct idx_slot) / IDX_SEGS;
    if (max_cap < IDX_MIN_SLOTS)
        max_cap = IDX_MIN_SLOTS;
    /* RocksDB's estimate counts overwritten versions too (a claimed, then
     * completed op is two until compaction): size for half of it, which at
     * worst costs the rebuild two growths and never a peak of twice the
     * memory */
    uint64_t cap = ops_estimate(s) / 2 / IDX_SEGS + 64;
    if (cap > max_cap)
        cap = max_cap;
    for (; s->idx_segs_init < IDX_SEGS; s->idx_segs_init++) {
        struct idx_seg *g = &s->idx[s->idx_segs_init];
        g->slots = slots_alloc(cap);
        if (!g->slots)
            goto nomem;
        g->cap = cap;
        g->max_cap = max_cap;
        pthread_rwlock_init(&g->lock, NULL);
    }
    if (pthread_create(&s->idx_thread, NULL, idx_rebuild_main, s) != 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store_open(%s): cannot start the index rebuild thread",
                      s->path);
        return DD_ERR_FATAL;
    }
    s->idx_thread_started = true;
    return DD_OK;
nomem:
    dd_errstr_set(errstr, errstr_size,
                  "store_open(%s): out of memory for the hot index", s->path);
    return DD_ERR_NOMEM;
}

/*
 * A write of ops failed.  RocksDB may still have applied it (an error after
 * the WAL write), so no entry can be trusted any more: off until reopen.
 */
static void idx_write_failed(struct store *s)
{
    if (!atomic_exchange(&s->idx_off, true))
        log_msg(LOG_WARNING, "STORE",
                "hot index of %s off until reopen after a failed write",
                s->path);
}

static void idx_close(struct store *s)
{
    if (s->idx_thread_started) {
        atomic_store(&s->idx_stop, true);
        pthread_join(s->idx_thread, NULL);
        s->idx_thread_started = false;
    }
    if (!s->idx)
        return;
    for (int i = 0; i < IDX_SEGS; i++) {
        slots_free(s->idx[i].slots, s->idx[i].cap);
        if (i < s->idx_segs_init)
            pthread_rwlock_destroy(&s->idx[i].lock);
    }
    free(s->idx);
    s->idx = NULL;
}

/* ---------------------------------------------------------------------- */
/* reads and writes                                                        */

/*
 * Read op_id.  *found is false when absent, or when expired at now_ms unless
 * include_expired.  Caller holds the op's stripe when it will write.
 */
static dd_err_t op_read(struct store *s, const char *op_id, int64_t now_ms,
                        bool include_expired, struct store_op *op,
                        bool *found, char *errstr, size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_OPS], op_id,
                               strlen(op_id), &vlen, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_get_cf(ops)", op_id, errstr,
                        errstr_size);
    *found = false;
    if (!val)
        return DD_OK;
    struct store_op tmp;
    memset(&tmp, 0, sizeof(tmp));
    dd_err_t err = op_decode(val, vlen, op_id, &tmp, errstr, errstr_size);
    rocksdb_free(val);
    if (err)
        return err;
    if (!include_expired && record_expired(tmp.expires_at_ms, now_ms))
        return DD_OK;
    *op = tmp;
    *found = true;
    return DD_OK;
}

static dd_err_t op_write(struct store *s, const char *op_id,
                         const struct store_op *op, char *errstr,
                         size_t errstr_size)
{
    unsigned char buf[STORE_OP_VALUE_MAX];
    size_t len = op_encode(op, buf, sizeof(buf));
    char *rerr = NULL;
    /* no fsync (store.h: claims, renewals): the next synced write persists
     * it, and losing it in a crash costs at most a repeated fetch */
    rocksdb_put_cf(s->db, s->wopts_nosync, s->cf[CF_OPS], op_id,
                   strlen(op_id), (const char *)buf, len, &rerr);
    if (rerr) {
        idx_write_failed(s);
        return rdb_fail(rerr, "rocksdb_put_cf(ops)", op_id, errstr,
                        errstr_size);
    }
    return DD_OK;
}

/*
 * put-if-absent of a small expiring record (conflicts, seen).  *present is
 * true when a live record existed.  Caller holds the key's stripe.
 */
static dd_err_t mark_once(struct store *s, int cf, enum rec_type type,
                          const char *key, size_t key_len, int64_t ttl_ms,
                          int64_t now_ms, bool *present, char *errstr,
                          size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    dd_err_t err = DD_OK;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[cf], key, key_len,
                               &vlen, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_get_cf", cf_names[cf], errstr,
                        errstr_size);
    if (val) {
        struct dec d = {(const unsigned char *)val, vlen, 0, false};
        int64_t expires_at = 0;
        err = dec_header(&d, type, &expires_at, cf_names[cf], key, key_len,
                         errstr, errstr_size);
        rocksdb_free(val);
        if (err)
            return err;
        if (!record_expired(expires_at, now_ms)) {
            *present = true;
            return DD_OK;
        }
    }
    unsigned char buf[STORE_HDR_LEN + 8];
    struct enc e = {buf, sizeof(buf), 0, false};
    enc_header(&e, type, add_ms(now_ms, ttl_ms));
    enc_u64(&e, (uint64_t)now_ms);
    rocksdb_put_cf(s->db, s->wopts, s->cf[cf], key, key_len,
                   (const char *)buf, e.len, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_put_cf", cf_names[cf], errstr,
                        errstr_size);
    *present = false;
    return DD_OK;
}

/*
 * Hand out an outbox seq.  Seqs are reserved in meta by blocks, each
 * reservation written (in WAL order) before any seq of its block is used, so
 * no seq repeats after a restart even when every entry was acked and deleted.
 */
static dd_err_t seq_alloc(struct store *s, uint64_t *seq, char *errstr,
                          size_t errstr_size)
{
    dd_err_t err = DD_OK;
    uint64_t n = atomic_fetch_add(&s->next_seq, 1);
    if (n < atomic_load(&s->seq_reserved)) {
        *seq = n;
        return DD_OK;
    }
    pthread_mutex_lock(&s->seq_mu);
    if (n >= atomic_load(&s->seq_reserved)) {
        uint64_t want = n + STORE_SEQ_BLOCK;
        unsigned char v[8];
        put_le64(v, want);
        char *rerr = NULL;
        rocksdb_put_cf(s->db, s->wopts, s->cf[CF_META], META_SEQ_KEY,
                       sizeof(META_SEQ_KEY) - 1, (const char *)v, sizeof(v),
                       &rerr);
        if (rerr) {
            /* n is burnt: a gap in seqs is harmless */
            err = rdb_fail(rerr, "rocksdb_put_cf(meta)", META_SEQ_KEY, errstr,
                           errstr_size);
            goto out;
        }
        /* reservations only grow: a concurrent one may have reached higher */
        uint64_t cur = atomic_load(&s->seq_reserved);
        if (want > cur)
            atomic_store(&s->seq_reserved, want);
    }
    *seq = n;
out:
    pthread_mutex_unlock(&s->seq_mu);
    return err;
}

/* ---------------------------------------------------------------------- */
/* open / close                                                            */

static void set_options(struct store *s, const struct store_conf *conf)
{
    size_t cache_bytes = conf->block_cache_bytes ? conf->block_cache_bytes
                                                 : STORE_DEF_CACHE_BYTES;
    s->cache = rocksdb_cache_create_lru(cache_bytes);

    s->bbto = rocksdb_block_based_options_create();
    /* whole-key bloom, 10 bits per key; the options own the policy */
    rocksdb_block_based_options_set_filter_policy(
        s->bbto, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_whole_key_filtering(s->bbto, 1);
    rocksdb_block_based_options_set_block_cache(s->bbto, s->cache);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(s->bbto, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(
        s->bbto, 1);
    rocksdb_block_based_options_set_data_block_index_type(
        s->bbto,
        rocksdb_block_based_table_data_block_index_type_binary_search_and_hash);

    s->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(s->opts, 1);
    rocksdb_options_set_create_missing_column_families(s->opts, 1);
    rocksdb_options_set_block_based_table_factory(s->opts, s->bbto);
    rocksdb_options_set_memtable_whole_key_filtering(s->opts, 1);
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(s->opts, 0.1);
    rocksdb_options_set_write_buffer_size(s->opts, STORE_WRITE_BUFFER_BYTES);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(s->opts, 1);
    rocksdb_options_set_compression(s->opts, rocksdb_no_compression);
    rocksdb_options_set_keep_log_file_num(s->opts, 5);

    s->filter = rocksdb_compactionfilter_create(s, ttl_filter_destroy,
                                                ttl_filter, ttl_filter_name);
    s->ttl_opts = rocksdb_options_create_copy(s->opts);
    rocksdb_options_set_compaction_filter(s->ttl_opts, s->filter);

    s->ropts = rocksdb_readoptions_create();
    s->wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(s->wopts, conf->sync ? 1 : 0);
    /* An ack lost in a crash only replays its entry at start-up under the
     * same event_key (a duplicate consumers drop), so it needs no fsync;
     * the next synced write persists it anyway. */
    s->wopts_nosync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(s->wopts_nosync, 0);
}

static bool is_ttl_cf(int i)
{
    return i == CF_OPS || i == CF_ATTEMPTS || i == CF_CONFLICTS
           || i == CF_SEEN || i == CF_RECEIPTS || i == CF_VALIDATORS
           || i == CF_BODIES;
}

/* Open with our CFs plus any a newer layout added (so its meta is readable). */
/* mkdir -p of the directories above \p path (RocksDB creates only the last
 * one): a store.path such as ".dedupd/store" works in a fresh checkout. */
static dd_err_t make_parents(const char *path, char *errstr,
                             size_t errstr_size)
{
    char *p = strdup(path);
    if (!p) {
        dd_errstr_set(errstr, errstr_size, "store_open(%s): out of memory",
                      path);
        return DD_ERR_NOMEM;
    }
    dd_err_t err = DD_OK;
    char *slash = strrchr(p, '/');
    if (slash)
        *slash = '\0';
    for (char *q = p + 1; slash && *p; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            dd_errstr_set(errstr, errstr_size,
                          "store_open(%s): cannot create directory %s: %s",
                          path, p, strerror(errno));
            err = DD_ERR_IO;
            break;
        }
        *q = c;
        if (!c)
            break;
    }
    free(p);
    return err;
}

static dd_err_t db_open(struct store *s, char *errstr, size_t errstr_size)
{
    dd_err_t perr = make_parents(s->path, errstr, errstr_size);
    if (perr)
        return perr;
    dd_err_t err = DD_OK;
    char *rerr = NULL;
    size_t listed_n = 0;
    char **listed = rocksdb_list_column_families(s->opts, s->path, &listed_n,
                                                 &rerr);
    if (rerr) {
        /* no database yet: it is created below.  RocksDB 7.8 returns an
         * empty, allocated list even on error. */
        rocksdb_free(rerr);
        rerr = NULL;
        if (listed)
            rocksdb_list_column_families_destroy(listed, listed_n);
        listed = NULL;
        listed_n = 0;
    }
    size_t total = CF_N + listed_n;
    const char **names = calloc(total, sizeof(*names));
    const rocksdb_options_t **copts = calloc(total, sizeof(*copts));
    rocksdb_column_family_handle_t **handles = calloc(total, sizeof(*handles));
    if (!names || !copts || !handles) {
        dd_errstr_set(errstr, errstr_size, "store_open(%s): out of memory",
                      s->path);
        err = DD_ERR_NOMEM;
        goto out;
    }
    size_t n = 0;
    for (int i = 0; i < CF_N; i++, n++) {
        names[n] = cf_names[i];
        copts[n] = is_ttl_cf(i) ? s->ttl_opts : s->opts;
    }
    for (size_t j = 0; j < listed_n; j++) {
        bool ours = false;
        for (int i = 0; i < CF_N; i++)
            if (strcmp(listed[j], cf_names[i]) == 0)
                ours = true;
        if (ours)
            continue;
        names[n] = listed[j];
        copts[n] = s->opts;
        n++;
    }
    s->db = rocksdb_open_column_families(s->opts, s->path, (int)n, names,
                                         copts, handles, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_open", s->path, errstr, errstr_size);
        goto out;
    }
    for (int i = 0; i < CF_N; i++)
        s->cf[i] = handles[i];
    if (n > CF_N) {
        s->extra_cf = calloc(n - CF_N, sizeof(*s->extra_cf));
        if (!s->extra_cf) {
            for (size_t j = CF_N; j < n; j++)
                rocksdb_column_family_handle_destroy(handles[j]);
            dd_errstr_set(errstr, errstr_size, "store_open(%s): out of memory",
                          s->path);
            err = DD_ERR_NOMEM;
            goto out;
        }
        for (size_t j = CF_N; j < n; j++)
            s->extra_cf[s->extra_cf_n++] = handles[j];
    }
out:
    free(names);
    free(copts);
    free(handles);
    if (listed)
        rocksdb_list_column_families_destroy(listed, listed_n);
    return err;
}

static dd_err_t check_layout(struct store *s, char *errstr,
                             size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    dd_err_t err = DD_OK;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_META],
                               META_LAYOUT_KEY, sizeof(META_LAYOUT_KEY) - 1,
                               &vlen, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_get_cf(meta)", META_LAYOUT_KEY, errstr,
                        errstr_size);
    if (!val) {
        unsigned char v[4] = {STORE_LAYOUT_V1, 0, 0, 0};
        rocksdb_put_cf(s->db, s->wopts, s->cf[CF_META], META_LAYOUT_KEY,
                       sizeof(META_LAYOUT_KEY) - 1, (const char *)v,
                       sizeof(v), &rerr);
        if (rerr)
            return rdb_fail(rerr, "rocksdb_put_cf(meta)", META_LAYOUT_KEY,
                            errstr, errstr_size);
        return DD_OK;
    }
    if (vlen != 4) {
        dd_errstr_set(errstr, errstr_size,
                      "store at %s: meta %s is corrupt (%zu bytes, expected 4)",
                      s->path, META_LAYOUT_KEY, vlen);
        err = DD_ERR_FATAL;
        goto out;
    }
    const unsigned char *b = (const unsigned char *)val;
    uint32_t ver = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16
                   | (uint32_t)b[3] << 24;
    if (ver > STORE_LAYOUT_V1) {
        dd_errstr_set(errstr, errstr_size,
                      "store at %s has layout version %u, newer than this "
                      "dedupd's %d",
                      s->path, ver, STORE_LAYOUT_V1);
        err = DD_ERR_FATAL;
    } else if (ver < STORE_LAYOUT_V1) {
        dd_errstr_set(errstr, errstr_size,
                      "store at %s: meta %s is corrupt (version %u)", s->path,
                      META_LAYOUT_KEY, ver);
        err = DD_ERR_FATAL;
    }
out:
    rocksdb_free(val);
    return err;
}

/* next_seq from the last outbox key and the reservation; count entries. */
static dd_err_t init_outbox(struct store *s, char *errstr, size_t errstr_size)
{
    dd_err_t err = DD_OK;
    char *rerr = NULL;
    uint64_t next = 1, count = 0;

    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_META], META_SEQ_KEY,
                               sizeof(META_SEQ_KEY) - 1, &vlen, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_get_cf(meta)", META_SEQ_KEY, errstr,
                        errstr_size);
    if (val) {
        if (vlen != 8) {
            rocksdb_free(val);
            dd_errstr_set(errstr, errstr_size,
                          "store at %s: meta %s is corrupt (%zu bytes)",
                          s->path, META_SEQ_KEY, vlen);
            return DD_ERR_FATAL;
        }
        uint64_t r = get_le64((const unsigned char *)val);
        rocksdb_free(val);
        if (r > next)
            next = r;
    }

    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts,
                                                        s->cf[CF_OUTBOX]);
    rocksdb_iter_seek_to_last(it);
    if (rocksdb_iter_valid(it)) {
        size_t klen = 0;
        const char *k = rocksdb_iter_key(it, &klen);
        if (klen != 8) {
            dd_errstr_set(errstr, errstr_size,
                          "store at %s: outbox key of %zu bytes (expected 8)",
                          s->path, klen);
            err = DD_ERR_FATAL;
            goto out;
        }
        uint64_t last = get_be64((const unsigned char *)k);
        if (last + 1 > next)
            next = last + 1;
    }
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
         rocksdb_iter_next(it))
        count++;
    rocksdb_iter_get_error(it, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_iter(outbox)", s->path, errstr,
                       errstr_size);
        goto out;
    }
    atomic_store(&s->next_seq, next);
    atomic_store(&s->seq_reserved, next); /* first use writes a reservation */
    atomic_store(&s->pending, count);
out:
    rocksdb_iter_destroy(it);
    return err;
}

/* Tickets up to \p upto are on disk: publish that, unless the other
 * fsyncer (syncer thread or store_sync_now) got further meanwhile. */
static void publish_durable(struct store *s, uint64_t upto)
{
    uint64_t d = atomic_load(&s->ticket_durable);
    while (d < upto &&
           !atomic_compare_exchange_weak(&s->ticket_durable, &d, upto))
        ;
}

/* The group-commit syncer: fsync the WAL whenever a ticket is pending.  A
 * failed fsync is final: after one, the kernel may have dropped the dirty
 * pages and a second fsync would "succeed" without them, so no ticket after
 * it is ever published (store_sync_failed tells the caller to stop). */
static void *sync_main(void *arg)
{
    struct store *s = arg;
    pthread_mutex_lock(&s->sync_mu);
    for (;;) {
        while (!s->sync_stop && (atomic_load(&s->sync_failed) ||
                                 atomic_load(&s->ticket_issued) ==
                                     atomic_load(&s->ticket_durable)))
            pthread_cond_wait(&s->sync_cv, &s->sync_mu);
        uint64_t upto = atomic_load(&s->ticket_issued);
        if (s->sync_stop && (atomic_load(&s->sync_failed) ||
                             upto == atomic_load(&s->ticket_durable)))
            break;
        pthread_mutex_unlock(&s->sync_mu);
        char *rerr = NULL;
        rocksdb_flush_wal(s->db, 1, &rerr);
        if (rerr) {
            log_msg(LOG_CRIT, "STORE", "group commit: fsync of the WAL of %s "
                    "failed: %s; completions after ticket %llu are not durable "
                    "and never will be counted so",
                    s->path, rerr,
                    (unsigned long long)atomic_load(&s->ticket_durable));
            rocksdb_free(rerr);
            atomic_store(&s->sync_failed, true);
        } else
            publish_durable(s, upto);
        pthread_mutex_lock(&s->sync_mu);
    }
    pthread_mutex_unlock(&s->sync_mu);
    return NULL;
}

bool store_sync_failed(struct store *s)
{
    return atomic_load(&s->sync_failed);
}

dd_err_t store_sync_now(struct store *s, char *errstr, size_t errstr_size)
{
    if (!s->group_commit)
        return DD_OK;
    if (atomic_load(&s->sync_failed)) {
        dd_errstr_set(errstr, errstr_size,
                      "store_sync_now(%s): an earlier WAL fsync failed", s->path);
        return DD_ERR_IO;
    }
    uint64_t upto = atomic_load(&s->ticket_issued);
    char *rerr = NULL;
    rocksdb_flush_wal(s->db, 1, &rerr);
    if (rerr) {
        atomic_store(&s->sync_failed, true);
        return rdb_fail(rerr, "rocksdb_flush_wal(sync)", s->path, errstr,
                        errstr_size);
    }
    publish_durable(s, upto);
    return DD_OK;
}

uint64_t store_durable(struct store *s)
{
    return s->group_commit ? atomic_load(&s->ticket_durable) : UINT64_MAX;
}

dd_err_t store_open(const struct store_conf *conf, struct store **out,
                    char *errstr, size_t errstr_size)
{
    dd_err_t err = DD_OK;
    struct store *s = NULL;

    *out = NULL;
    if (!conf->path || !*conf->path || !conf->instance || !*conf->instance
        || !conf->run_id || !*conf->run_id) {
        dd_errstr_set(errstr, errstr_size,
                      "store_open: path, instance and run_id are required");
        return DD_ERR_INVAL;
    }
    if (strchr(conf->instance, '#')) {
        dd_errstr_set(errstr, errstr_size,
                      "store_open: instance '%.64s' contains '#', which "
                      "separates it from the run id in lease owners",
                      conf->instance);
        return DD_ERR_INVAL;
    }
    if (strlen(conf->instance) + 1 + strlen(conf->run_id) > STORE_OWNER_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "store_open: lease owner '%.64s#%.64s' is longer than %d "
                      "bytes",
                      conf->instance, conf->run_id, STORE_OWNER_MAX);
        return DD_ERR_INVAL;
    }
    if (conf->ops_ttl_ms < 0 || conf->failed_ttl_ms < 0 || conf->lease_ms < 0
        || conf->validators_ttl_ms < 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store_open: negative ops_ttl_ms, failed_ttl_ms, "
                      "lease_ms or validators_ttl_ms");
        return DD_ERR_INVAL;
    }

    s = calloc(1, sizeof(*s));
    if (!s) {
        dd_errstr_set(errstr, errstr_size, "store_open: out of memory");
        return DD_ERR_NOMEM;
    }
    s->path = strdup(conf->path);
    if (!s->path) {
        dd_errstr_set(errstr, errstr_size, "store_open: out of memory");
        err = DD_ERR_NOMEM;
        goto out;
    }
    snprintf(s->owner, sizeof(s->owner), "%s#%s", conf->instance,
             conf->run_id);
    snprintf(s->owner_prefix, sizeof(s->owner_prefix), "%s#", conf->instance);
    s->ops_ttl_ms = conf->ops_ttl_ms ? conf->ops_ttl_ms : STORE_DEF_OPS_TTL_MS;
    s->failed_ttl_ms =
        conf->failed_ttl_ms ? conf->failed_ttl_ms : STORE_DEF_FAILED_TTL_MS;
    s->lease_ms = conf->lease_ms ? conf->lease_ms : STORE_DEF_LEASE_MS;
    s->validators_ttl_ms = conf->validators_ttl_ms
                               ? conf->validators_ttl_ms
                               : STORE_DEF_VALIDATORS_TTL_MS;
    s->max_body_bytes =
        conf->max_body_bytes ? conf->max_body_bytes : STORE_DEF_MAX_BODY_BYTES;
    atomic_init(&s->filter_clock_ms, 0);
    atomic_init(&s->next_seq, 1);
    atomic_init(&s->seq_reserved, 1);
    atomic_init(&s->pending, 0);

    for (; s->stripes_init < STORE_STRIPES; s->stripes_init++)
        pthread_mutex_init(&s->stripes[s->stripes_init], NULL);
    pthread_mutex_init(&s->seq_mu, NULL);
    s->seq_mu_init = true;
    pthread_mutex_init(&s->sync_mu, NULL);
    pthread_cond_init(&s->sync_cv, NULL);
    s->sync_mu_init = true;

    set_options(s, conf);
    err = db_open(s, errstr, errstr_size);
    if (err)
        goto out;
    err = check_layout(s, errstr, errstr_size);
    if (err)
        goto out;
    err = init_outbox(s, errstr, errstr_size);
    if (err)
        goto out;
    err = idx_open(s, conf->index_max_bytes ? conf->index_max_bytes
                                            : STORE_DEF_INDEX_BYTES,
                   errstr, errstr_size);
    if (err)
        goto out;
    if (conf->sync && conf->group_commit) {
        if (pthread_create(&s->sync_thread, NULL, sync_main, s) != 0) {
            dd_errstr_set(errstr, errstr_size,
                          "store_open(%s): cannot start the group-commit "
                          "thread", s->path);
            err = DD_ERR_FATAL;
            goto out;
        }
        s->sync_thread_started = true;
        s->group_commit = true;
    }
    log_msg(LOG_INFO, "STORE",
            "opened %s as %s: %llu pending outbox entries, next seq %llu",
            s->path, s->owner, (unsigned long long)atomic_load(&s->pending),
            (unsigned long long)atomic_load(&s->next_seq));
out:
    if (err) {
        store_close(s);
        return err;
    }
    *out = s;
    return DD_OK;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    idx_close(s); /* stops the rebuild thread, which reads the DB */
    if (s->sync_thread_started) {
        /* the syncer makes what is pending durable, then leaves */
        pthread_mutex_lock(&s->sync_mu);
        s->sync_stop = true;
        pthread_cond_signal(&s->sync_cv);
        pthread_mutex_unlock(&s->sync_mu);
        pthread_join(s->sync_thread, NULL);
    }
    /* column-family handles go before rocksdb_close (DESIGN.md 10) */
    for (int i = 0; i < CF_N; i++)
        if (s->cf[i])
            rocksdb_column_family_handle_destroy(s->cf[i]);
    for (size_t j = 0; j < s->extra_cf_n; j++)
        rocksdb_column_family_handle_destroy(s->extra_cf[j]);
    free(s->extra_cf);
    if (s->db)
        rocksdb_close(s->db);
    /* the filter is used by compactions until the DB is closed */
    if (s->ttl_opts)
        rocksdb_options_destroy(s->ttl_opts);
    if (s->opts)
        rocksdb_options_destroy(s->opts);
    if (s->filter)
        rocksdb_compactionfilter_destroy(s->filter);
    if (s->bbto)
        rocksdb_block_based_options_destroy(s->bbto);
    if (s->cache)
        rocksdb_cache_destroy(s->cache);
    if (s->ropts)
        rocksdb_readoptions_destroy(s->ropts);
    if (s->wopts)
        rocksdb_writeoptions_destroy(s->wopts);
    if (s->wopts_nosync)
        rocksdb_writeoptions_destroy(s->wopts_nosync);
    for (int i = 0; i < s->stripes_init; i++)
        pthread_mutex_destroy(&s->stripes[i]);
    if (s->seq_mu_init)
        pthread_mutex_destroy(&s->seq_mu);
    if (s->sync_mu_init) {
        pthread_mutex_destroy(&s->sync_mu);
        pthread_cond_destroy(&s->sync_cv);
    }
    free(s->path);
    free(s);
}

const char *store_owner(const struct store *store)
{
    return store->owner;
}

/* ---------------------------------------------------------------------- */
/* ops                                                                     */

static dd_err_t check_op_id(const char *fn, const char *op_id, char *errstr,
                            size_t errstr_size)
{
    size_t n = strlen(op_id);
    if (n == 0 || n > STORE_KEY_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: op_id of %zu bytes (must be 1..%d)", fn, n,
                      STORE_KEY_MAX);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

/* The op's stripe; k gets the op's index key. */
static pthread_mutex_t *stripe(struct store *s, const char *op_id,
                               struct idx_key *k)
{
    idx_digest(s, op_id, strlen(op_id), k);
    return key_stripe(s, k);
}

/*
 * One claim applied to the op's current record (*cur, live when found), as
 * DESIGN.md section 4 orders it.  *dirty: the record changed and must be
 * written.  Shared by store_claim and store_claim_batch.
 */
static enum store_claim_result claim_apply(struct store *s,
                                           struct store_op *cur, bool found,
                                           const char *request_hash,
                                           size_t hlen, const char *event_key,
                                           size_t elen, const char *source,
                                           int64_t now_ms, bool *dirty)
{
    *dirty = false;
    if (!found) {
        /* absent or expired: a new op (an expired record is overwritten) */
        memset(cur, 0, sizeof(*cur));
        cur->state = STORE_OP_RUNNING;
        cur->outbox_state = STORE_OUTBOX_NONE;
        cur->generation = 1;
        cur->lease_expires_at_ms = add_ms(now_ms, s->lease_ms);
        cur->created_at_ms = now_ms;
        cur->updated_at_ms = now_ms;
        /* a running record expires too, or a crash would leak it */
        cur->expires_at_ms = add_ms(now_ms, s->ops_ttl_ms);
        memcpy(cur->request_hash, request_hash, hlen + 1);
        memcpy(cur->event_key, event_key, elen + 1);
        snprintf(cur->lease_owner, sizeof(cur->lease_owner), "%s", s->owner);
        snprintf(cur->source, sizeof(cur->source), "%s", source);
        *dirty = true;
        return STORE_CLAIM_NEW;
    }
    if (strcmp(cur->request_hash, request_hash) != 0)
        return STORE_CLAIM_CONFLICT; /* record untouched */
    if (cur->state == STORE_OP_COMPLETE || cur->state == STORE_OP_FAILED)
        return STORE_CLAIM_DUPLICATE;
    if (strcmp(cur->lease_owner, s->owner) == 0)
        return STORE_CLAIM_DUPLICATE; /* in flight here */
    if (record_expired(cur->lease_expires_at_ms, now_ms)
        || strncmp(cur->lease_owner, s->owner_prefix,
                   strlen(s->owner_prefix))
               == 0) {
        /* expired lease, or a lease of a previous run of this instance; a
         * retryable op stays retryable with its not_before: the new holder
         * waits it out, then resumes it (store_op_resume) */
        if (cur->state != STORE_OP_RETRYABLE)
            cur->state = STORE_OP_RUNNING;
        cur->generation++;
        snprintf(cur->lease_owner, sizeof(cur->lease_owner), "%s", s->owner);
        cur->lease_expires_at_ms = add_ms(now_ms, s->lease_ms);
        cur->updated_at_ms = now_ms;
        cur->expires_at_ms = add_ms(now_ms, s->ops_ttl_ms);
        *dirty = true;
        return STORE_CLAIM_RECLAIMED;
    }
    return STORE_CLAIM_DUPLICATE; /* in flight elsewhere */
}

static dd_err_t check_claim_args(const char *fn, const char *op_id,
                                 const char *request_hash,
                                 const char *event_key, size_t *hlen,
                                 size_t *elen, char *errstr,
                                 size_t errstr_size)
{
    dd_err_t err = check_op_id(fn, op_id, errstr, errstr_size);
    if (err)
        return err;
    *hlen = strlen(request_hash);
    *elen = strlen(event_key);
    if (*hlen == 0 || *hlen > STORE_HASH_LEN || *elen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): request_hash of %zu bytes or "
                      "event_key of %zu bytes (at most %d)",
                      fn, op_id, *hlen, *elen, STORE_HASH_LEN);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

dd_err_t store_claim(struct store *s, const char *op_id,
                     const char *request_hash, const char *event_key,
                     const char *source, int64_t now_ms,
                     enum store_claim_result *result, struct store_op *op,
                     char *errstr, size_t errstr_size)
{
    size_t hlen = 0, elen = 0;
    dd_err_t err = check_claim_args("store_claim", op_id, request_hash,
                                    event_key, &hlen, &elen, errstr,
                                    errstr_size);
    if (err)
        return err;

    perf_off();
    struct idx_key k;
    idx_digest(s, op_id, strlen(op_id), &k);
    pthread_mutex_t *mu = key_stripe(s, &k);
    pthread_mutex_lock(mu);
    struct store_op cur;
    bool found = false;
    memset(&cur, 0, sizeof(cur));
    /* the index proves absence without a read; a present op is read, since
     * the answer carries the whole record */
    struct idx_slot sl;
    bool absent = idx_judge(s, &k, now_ms, store_clock_ms(s), &sl)
                  == IV_ABSENT;
    idx_count(s, &k, absent);
    if (!absent) {
        err = op_read(s, op_id, now_ms, false, &cur, &found, errstr,
                      errstr_size);
        if (err)
            goto out;
        if (found)
            idx_put_op(s, &k, &cur, now_ms, IDX_FILL);
    }
    bool dirty = false;
    *result = claim_apply(s, &cur, found, request_hash, hlen, event_key, elen,
                          source, now_ms, &dirty);
    if (dirty) {
        err = op_write(s, op_id, &cur, errstr, errstr_size);
        if (err)
            goto out;
        idx_put_op(s, &k, &cur, now_ms, IDX_UPSERT);
    }
    *op = cur;
out:
    pthread_mutex_unlock(mu);
    return err;
}

dd_err_t store_op_get(struct store *s, const char *op_id, int64_t now_ms,
                      struct store_op *op, bool *found, char *errstr,
                      size_t errstr_size)
{
    dd_err_t err = check_op_id("store_op_get", op_id, errstr, errstr_size);
    if (err)
        return err;
    return op_read(s, op_id, now_ms, false, op, found, errstr, errstr_size);
}

#define ST_BIT(st) (1u << (st))
#define ST_LIVE (ST_BIT(STORE_OP_RUNNING) | ST_BIT(STORE_OP_RETRYABLE))

/* Fencing: in one of the states of \p states (ST_BIT mask), leased by this
 * run, at generation.  Caller holds the op's stripe. */
static dd_err_t fence(struct store *s, const char *fn, const char *op_id,
                      unsigned states, uint64_t generation, int64_t now_ms,
                      struct store_op *op, char *errstr, size_t errstr_size)
{
    bool found = false;
    dd_err_t err = op_read(s, op_id, now_ms, false, op, &found, errstr,
                           errstr_size);
    if (err)
        return err;
    if (!found) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): op not found (absent or expired)", fn,
                      op_id);
        return DD_ERR_STATE;
    }
    if (!(states & ST_BIT(op->state))) {
        dd_errstr_set(errstr, errstr_size, "%s(%.64s): op is %s, not %s", fn,
                      op_id, store_op_state2str(op->state),
                      states == ST_BIT(STORE_OP_RUNNING)     ? "running"
                      : states == ST_BIT(STORE_OP_RETRYABLE) ? "retryable"
                                                             : "running or retryable");
        return DD_ERR_STATE;
    }
    if (strcmp(op->lease_owner, s->owner) != 0) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): lease held by %s, not by this run %s", fn,
                      op_id, op->lease_owner, s->owner);
        return DD_ERR_STATE;
    }
    if (op->generation != generation) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): stale generation %llu, current %llu", fn,
                      op_id, (unsigned long long)generation,
                      (unsigned long long)op->generation);
        return DD_ERR_STATE;
    }
    return DD_OK;
}

static dd_err_t attempts_check(const char *fn, const char *op_id,
                               const struct store_attempt *attempts, size_t n,
                               char *errstr, size_t errstr_size);
static void attempts_stage(struct store *s, rocksdb_writebatch_t *wb,
                           const char *op_id,
                           const struct store_attempt *attempts, size_t n,
                           int64_t now_ms);

/* The lease of a live op, renewed: now + lease; a leased record must not
 * expire under its holder. */
static void lease_extend(struct store *s, struct store_op *op, int64_t now_ms)
{
    op->updated_at_ms = now_ms;
    op->lease_expires_at_ms = add_ms(now_ms, s->lease_ms);
    if (op->expires_at_ms < op->lease_expires_at_ms)
        op->expires_at_ms = op->lease_expires_at_ms;
}

/* A transition's change to the fenced record; DD_ERR_STATE refuses it. */
typedef dd_err_t(op_edit_fn)(struct store_op *op, const void *arg,
                             int64_t now_ms, const char *op_id, char *errstr,
                             size_t errstr_size);

/*
 * One fenced transition of a live op held by this run (DESIGN.md section 4):
 * under the op's stripe, fence it (\p states, \p generation), let \p edit
 * change it, renew the lease, and write it with \p attempt (when not NULL)
 * in one WriteBatch without fsync (store.h), then update the index.
 */
static dd_err_t op_transition(struct store *s, const char *fn,
                              const char *op_id, unsigned states,
                              uint64_t generation, int64_t now_ms,
                              op_edit_fn *edit, const void *arg,
                              const struct store_attempt *attempt,
                              char *errstr, size_t errstr_size)
{
    struct idx_key k;
    pthread_mutex_t *mu = stripe(s, op_id, &k);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    pthread_mutex_lock(mu);
    struct store_op op;
    dd_err_t err = fence(s, fn, op_id, states, generation, now_ms, &op, errstr,
                         errstr_size);
    if (!err)
        err = edit(&op, arg, now_ms, op_id, errstr, errstr_size);
    if (!err) {
        lease_extend(s, &op, now_ms);
        if (attempt)
            attempts_stage(s, wb, op_id, attempt, 1, now_ms);
        unsigned char vbuf[STORE_OP_VALUE_MAX];
        size_t vlen = op_encode(&op, vbuf, sizeof(vbuf));
        rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], op_id, strlen(op_id),
                                  (const char *)vbuf, vlen);
        char *rerr = NULL;
        /* no fsync: the retry hook runs on the fetch engine's thread, which
         * must not wait for the disk; the next group commit persists it */
        rocksdb_write(s->db, s->wopts_nosync, wb, &rerr);
        if (rerr) {
            idx_write_failed(s);
            err = rdb_fail(rerr, "rocksdb_write(ops)", op_id, errstr,
                           errstr_size);
        } else
            idx_put_op(s, &k, &op, now_ms, IDX_UPSERT);
    }
    pthread_mutex_unlock(mu);
    rocksdb_writebatch_destroy(wb);
    return err;
}

struct retry_edit {
    int64_t not_before_ms;
    uint32_t attempts;
    const char *category;
};

static dd_err_t edit_retry(struct store_op *op, const void *arg,
                           int64_t now_ms, const char *op_id, char *errstr,
                           size_t errstr_size)
{
    const struct retry_edit *r = arg;
    (void)now_ms, (void)op_id, (void)errstr, (void)errstr_size;
    op->state = STORE_OP_RETRYABLE;
    op->not_before_ms = r->not_before_ms;
    op->attempts = r->attempts;
    snprintf(op->category, sizeof(op->category), "%s", r->category);
    return DD_OK;
}

static dd_err_t edit_resume(struct store_op *op, const void *arg,
                            int64_t now_ms, const char *op_id, char *errstr,
                            size_t errstr_size)
{
    (void)arg;
    if (now_ms < op->not_before_ms) {
        dd_errstr_set(errstr, errstr_size,
                      "store_op_resume(%.64s): retryable not before %lld, "
                      "%lld ms from now",
                      op_id, (long long)op->not_before_ms,
                      (long long)(op->not_before_ms - now_ms));
        return DD_ERR_STATE;
    }
    op->state = STORE_OP_RUNNING;
    op->not_before_ms = 0;
    return DD_OK;
}

static dd_err_t edit_none(struct store_op *op, const void *arg, int64_t now_ms,
                          const char *op_id, char *errstr, size_t errstr_size)
{
    (void)op, (void)arg, (void)now_ms, (void)op_id, (void)errstr,
        (void)errstr_size;
    return DD_OK;
}

dd_err_t store_op_retry(struct store *s, const char *op_id,
                        uint64_t generation, int64_t not_before_ms,
                        uint32_t attempts, const char *category,
                        const struct store_attempt *attempt, int64_t now_ms,
                        char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_op_retry", op_id, errstr, errstr_size);
    if (err)
        return err;
    size_t clen = category ? strlen(category) : 0;
    if (clen == 0 || clen > STORE_CATEGORY_MAX || not_before_ms < 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store_op_retry(%.64s): category of %zu bytes (must be "
                      "1..%d) or negative not_before %lld",
                      op_id, clen, STORE_CATEGORY_MAX,
                      (long long)not_before_ms);
        return DD_ERR_INVAL;
    }
    if (attempt) {
        err = attempts_check("store_op_retry", op_id, attempt, 1, errstr,
                             errstr_size);
        if (err)
            return err;
    }
    struct retry_edit r = {not_before_ms, attempts, category};
    /* from retryable too: an attempt may run before its START was recorded
     * (the resume failed on the disk); its failure still goes on record */
    return op_transition(s, "store_op_retry", op_id, ST_LIVE, generation,
                         now_ms, edit_retry, &r, attempt, errstr,
                         errstr_size);
}

dd_err_t store_op_resume(struct store *s, const char *op_id,
                         uint64_t generation, int64_t now_ms, char *errstr,
                         size_t errstr_size)
{
    dd_err_t err = check_op_id("store_op_resume", op_id, errstr, errstr_size);
    if (err)
        return err;
    return op_transition(s, "store_op_resume", op_id,
                         ST_BIT(STORE_OP_RETRYABLE), generation, now_ms,
                         edit_resume, NULL, NULL, errstr, errstr_size);
}

dd_err_t store_lease_renew(struct store *s, const char *op_id,
                           uint64_t generation, int64_t now_ms, char *errstr,
                           size_t errstr_size)
{
    dd_err_t err = check_op_id("store_lease_renew", op_id, errstr,
                               errstr_size);
    if (err)
        return err;
    return op_transition(s, "store_lease_renew", op_id, ST_LIVE, generation,
                         now_ms, edit_none, NULL, NULL, errstr, errstr_size);
}

/* Arguments of a completion that do not depend on the stored record. */
static dd_err_t complete_check(const char *fn, const char *op_id,
                               enum store_op_state state, const char *category,
                               size_t value_len, char *errstr,
                               size_t errstr_size)
{
    dd_err_t err = check_op_id(fn, op_id, errstr, errstr_size);
    if (err)
        return err;
    if (state != STORE_OP_COMPLETE && state != STORE_OP_FAILED) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): final state must be complete or failed, "
                      "not %s",
                      fn, op_id, store_op_state2str(state));
        return DD_ERR_INVAL;
    }
    size_t clen = category ? strlen(category) : 0;
    if (clen > STORE_CATEGORY_MAX || value_len > UINT32_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): category of %zu bytes (at most %d) or value "
                      "of %zu bytes (at most %u)",
                      fn, op_id, clen, STORE_CATEGORY_MAX, value_len,
                      UINT32_MAX);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

/*
 * Under the op's stripe: fence, allocate the outbox sequence and add the op
 * record and the outbox entry to \p wb.  *op is the record as it will be
 * written (for the index once the batch is durable).
 */
static dd_err_t complete_stage(struct store *s, const char *fn,
                               rocksdb_writebatch_t *wb, const char *op_id,
                               uint64_t generation, enum store_op_state state,
                               const char *category, uint32_t attempts,
                               const void *value, size_t value_len,
                               int64_t now_ms, struct store_op *op,
                               uint64_t *seq, char *errstr,
                               size_t errstr_size)
{
    dd_err_t err = fence(s, fn, op_id, ST_LIVE, generation, now_ms, op, errstr,
                         errstr_size);
    if (err)
        return err;
    size_t idlen = strlen(op_id);
    size_t ocap = STORE_HDR_LEN + 2 + idlen + 2 + STORE_HASH_LEN + 8 + 4
                  + value_len;
    unsigned char *obuf = malloc(ocap);
    if (!obuf) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): out of memory (%zu bytes)", fn, op_id, ocap);
        return DD_ERR_NOMEM;
    }
    uint64_t n = 0;
    err = seq_alloc(s, &n, errstr, errstr_size);
    if (err) {
        free(obuf);
        return err;
    }
    op->state = state;
    snprintf(op->category, sizeof(op->category), "%s",
             category ? category : "");
    op->attempts = attempts;
    op->outbox_state = STORE_OUTBOX_PENDING;
    op->outbox_seq = n;
    op->not_before_ms = 0;
    op->updated_at_ms = now_ms;
    op->expires_at_ms = add_ms(now_ms, state == STORE_OP_COMPLETE
                                           ? s->ops_ttl_ms
                                           : s->failed_ttl_ms);
    unsigned char vbuf[STORE_OP_VALUE_MAX];
    size_t vlen = op_encode(op, vbuf, sizeof(vbuf));

    struct enc e = {obuf, ocap, 0, false};
    enc_header(&e, REC_OUTBOX, 0);
    enc_str(&e, op_id, idlen);
    enc_str(&e, op->event_key, strlen(op->event_key));
    enc_u64(&e, op->generation);
    enc_u32(&e, (uint32_t)value_len);
    enc_bytes(&e, value, value_len);
    assert(!e.overflow);
    unsigned char key[8];
    put_be64(key, n);
    rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], op_id, idlen,
                              (const char *)vbuf, vlen);
    rocksdb_writebatch_put_cf(wb, s->cf[CF_OUTBOX], (const char *)key,
                              sizeof(key), (const char *)obuf, e.len);
    free(obuf);
    *seq = n;
    return DD_OK;
}

dd_err_t store_complete(struct store *s, const char *op_id,
                        uint64_t generation, enum store_op_state state,
                        const char *category, uint32_t attempts,
                        const void *value, size_t value_len, int64_t now_ms,
                        uint64_t *seq, char *errstr, size_t errstr_size)
{
    dd_err_t err = complete_check("store_complete", op_id, state, category,
                                  value_len, errstr, errstr_size);
    if (err)
        return err;
    struct idx_key k;
    pthread_mutex_t *mu = stripe(s, op_id, &k);
    rocksdb_writebatch_t *batch = rocksdb_writebatch_create();
    pthread_mutex_lock(mu);
    struct store_op op;
    uint64_t n = 0;
    err = complete_stage(s, "store_complete", batch, op_id, generation, state,
                         category, attempts, value, value_len, now_ms, &op, &n,
                         errstr, errstr_size);
    if (err)
        goto out;
    char *rerr = NULL;
    rocksdb_write(s->db, s->wopts, batch, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_write(ops+outbox)", op_id, errstr,
                       errstr_size);
        idx_write_failed(s);
        goto out;
    }
    idx_put_op(s, &k, &op, now_ms, IDX_UPSERT);
    atomic_fetch_add(&s->pending, 1);
    *seq = n;
out:
    pthread_mutex_unlock(mu);
    rocksdb_writebatch_destroy(batch);
    return err;
}

static enum store_validator_write
validator_prep(struct store *s, const struct store_complete_req *r,
               char digest[STORE_HASH_LEN + 1]);
static void validator_stage(struct store *s, rocksdb_writebatch_t *wb,
                            const struct store_complete_req *r,
                            const char *digest, bool put_body,
                            int64_t now_ms);

dd_err_t store_complete_batch(struct store *s,
                              struct store_complete_req *reqs, size_t n,
                              int64_t now_ms, char *errstr,
                              size_t errstr_size)
{
    if (n == 0)
        return DD_OK;
    struct idx_key *keys = malloc(n * sizeof(*keys));
    struct store_op *ops = malloc(n * sizeof(*ops));
    char(*digests)[STORE_HASH_LEN + 1] = malloc(n * sizeof(*digests));
    if (!keys || !ops || !digests) {
        free(keys);
        free(ops);
        free(digests);
        dd_errstr_set(errstr, errstr_size,
                      "store_complete_batch: out of memory (%zu requests)", n);
        for (size_t i = 0; i < n; i++)
            reqs[i].err = DD_ERR_NOMEM;
        return DD_ERR_NOMEM;
    }
    uint64_t locked[STORE_STRIPES / 64] = {0};
    for (size_t i = 0; i < n; i++) {
        struct store_complete_req *r = &reqs[i];
        r->seq = 0;
        r->errstr[0] = '\0';
        r->validator_write = STORE_VALIDATOR_NONE;
        r->err = complete_check("store_complete_batch", r->op_id, r->state,
                                r->category, r->value_len, r->errstr,
                                sizeof(r->errstr));
        if (!r->err)
            r->err = attempts_check("store_complete_batch", r->op_id,
                                    r->attempt_log, r->n_attempt_log,
                                    r->errstr, sizeof(r->errstr));
        if (r->err)
            continue;
        /* validators and the body digest: checked and hashed before the
         * stripes are taken */
        r->validator_write = validator_prep(s, r, digests[i]);
        idx_digest(s, r->op_id, strlen(r->op_id), &keys[i]);
        uint32_t st = (uint32_t)(keys[i].k0 % STORE_STRIPES);
        locked[st / 64] |= UINT64_C(1) << (st % 64);
    }
    /* the ops' stripes in ascending order, as store_claim_batch */
    for (uint32_t st = 0; st < STORE_STRIPES; st++)
        if (locked[st / 64] >> (st % 64) & 1)
            pthread_mutex_lock(&s->stripes[st]);

    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    size_t staged = 0;
    for (size_t i = 0; i < n; i++) {
        struct store_complete_req *r = &reqs[i];
        if (r->err)
            continue;
        /* a repeated op_id: the first completion fences the later ones */
        bool repeated = false;
        for (size_t j = 0; j < i && !repeated; j++)
            repeated = !reqs[j].err && keys[j].k0 == keys[i].k0
                       && keys[j].k1 == keys[i].k1
                       && strcmp(reqs[j].op_id, r->op_id) == 0;
        if (repeated) {
            dd_errstr_set(r->errstr, sizeof(r->errstr),
                          "store_complete_batch(%.64s): completed twice in "
                          "one batch",
                          r->op_id);
            r->err = DD_ERR_STATE;
            continue;
        }
        r->err = complete_stage(s, "store_complete_batch", wb, r->op_id,
                                r->generation, r->state, r->category,
                                r->attempts, r->value, r->value_len, now_ms,
                                &ops[i], &r->seq, r->errstr,
                                sizeof(r->errstr));
        if (r->err)
            continue;
        /* only the lease holder's attempts: a fenced worker's numbers could
         * overwrite the new holder's */
        attempts_stage(s, wb, r->op_id, r->attempt_log, r->n_attempt_log,
                       now_ms);
        /* a body already put by an earlier completion of this batch is
         * not put again (content-addressed: same bytes, same expiry) */
        bool put_body = r->validator_write == STORE_VALIDATOR_WRITTEN;
        for (size_t j = 0; j < i && put_body; j++)
            put_body = reqs[j].err
                       || reqs[j].validator_write != STORE_VALIDATOR_WRITTEN
                       || strcmp(digests[j], digests[i]) != 0;
        validator_stage(s, wb, r, digests[i], put_body, now_ms);
        staged++;
    }
    dd_err_t err = DD_OK;
    if (staged) {
        char *rerr = NULL;
        /* one WAL write; its fsync here (store.sync), or by the syncer
         * (group commit: the ticket tells when) */
        rocksdb_write(s->db, s->group_commit ? s->wopts_nosync : s->wopts, wb,
                      &rerr);
        if (rerr) {
            char text[DD_ERRSTR_SIZE];
            err = rdb_fail(rerr, "rocksdb_write(complete batch)",
                           "batch", text, sizeof(text));
            idx_write_failed(s);
            dd_errstr_set(errstr, errstr_size, "%s", text);
            for (size_t i = 0; i < n; i++)
                if (!reqs[i].err) {
                    reqs[i].err = err;
                    reqs[i].seq = 0;
                    reqs[i].validator_write = STORE_VALIDATOR_NONE;
                    snprintf(reqs[i].errstr, sizeof(reqs[i].errstr), "%s",
                             text);
                }
        } else {
            uint64_t ticket = 0;
            if (s->group_commit) {
                pthread_mutex_lock(&s->sync_mu);
                ticket = atomic_fetch_add(&s->ticket_issued, 1) + 1;
                pthread_cond_signal(&s->sync_cv);
                pthread_mutex_unlock(&s->sync_mu);
            }
            for (size_t i = 0; i < n; i++)
                if (!reqs[i].err) {
                    reqs[i].ticket = ticket;
                    idx_put_op(s, &keys[i], &ops[i], now_ms, IDX_UPSERT);
                    atomic_fetch_add(&s->pending, 1);
                }
        }
    }
    for (uint32_t st = 0; st < STORE_STRIPES; st++)
        if (locked[st / 64] >> (st % 64) & 1)
            pthread_mutex_unlock(&s->stripes[st]);
    rocksdb_writebatch_destroy(wb);
    /* a completion refused or fenced wrote nothing of its validator */
    for (size_t i = 0; i < n; i++)
        if (reqs[i].err)
            reqs[i].validator_write = STORE_VALIDATOR_NONE;
    if (!err)
        for (size_t i = 0; i < n; i++)
            if (reqs[i].err) {
                dd_errstr_set(errstr, errstr_size, "%s", reqs[i].errstr);
                break;
            }
    free(keys);
    free(ops);
    free(digests);
    return err;
}

/* ---------------------------------------------------------------------- */
/* outbox                                                                  */

struct outbox_entry {
    const char *op_id;
    size_t op_id_len;
    const char *event_key;
    size_t event_key_len;
    uint64_t generation;
    const void *value;
    size_t value_len;
};

static dd_err_t outbox_decode(const char *val, size_t len, uint64_t seq,
                              struct outbox_entry *ent, char *errstr,
                              size_t errstr_size)
{
    struct dec d = {(const unsigned char *)val, len, 0, false};
    char kbuf[24];
    int kn = snprintf(kbuf, sizeof(kbuf), "%llu", (unsigned long long)seq);
    int64_t expires_at = 0;
    dd_err_t err = dec_header(&d, REC_OUTBOX, &expires_at, "outbox", kbuf,
                              (size_t)kn, errstr, errstr_size);
    if (err)
        return err;
    ent->op_id = dec_str_ref(&d, STORE_KEY_MAX, &ent->op_id_len);
    ent->event_key = dec_str_ref(&d, STORE_HASH_LEN, &ent->event_key_len);
    ent->generation = dec_u64(&d);
    ent->value_len = dec_u32(&d);
    ent->value = dec_bytes(&d, ent->value_len);
    if (d.bad || d.off != d.len || ent->op_id_len == 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store: outbox entry %s is corrupt (%zu bytes)", kbuf,
                      len);
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

dd_err_t store_outbox_ack(struct store *s, uint64_t seq, const char *op_id,
                          char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_outbox_ack", op_id, errstr,
                               errstr_size);
    if (err)
        return err;
    unsigned char key[8];
    put_be64(key, seq);
    char *rerr = NULL;
    char *val = NULL;
    rocksdb_writebatch_t *batch = NULL;
    struct idx_key k;
    pthread_mutex_t *mu = stripe(s, op_id, &k);
    pthread_mutex_lock(mu);

    size_t vlen = 0;
    val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_OUTBOX], (const char *)key,
                         sizeof(key), &vlen, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_get_cf(outbox)", op_id, errstr,
                       errstr_size);
        goto out;
    }
    bool existed = val != NULL;
    if (existed) {
        struct outbox_entry ent;
        err = outbox_decode(val, vlen, seq, &ent, errstr, errstr_size);
        if (err)
            goto out;
        if (ent.op_id_len != strlen(op_id)
            || memcmp(ent.op_id, op_id, ent.op_id_len) != 0) {
            dd_errstr_set(errstr, errstr_size,
                          "store_outbox_ack(%.64s): outbox entry %llu belongs "
                          "to op %.*s",
                          op_id, (unsigned long long)seq,
                          (int)(ent.op_id_len > 64 ? 64 : ent.op_id_len),
                          ent.op_id);
            err = DD_ERR_INVAL;
            goto out;
        }
    }

    /* mark SENT whatever the record's age: the mark never extends it */
    struct store_op op;
    bool found = false;
    err = op_read(s, op_id, 0, true, &op, &found, errstr, errstr_size);
    if (err)
        goto out;
    bool mark = found && op.outbox_seq == seq
                && op.outbox_state == STORE_OUTBOX_PENDING;
    if (!existed && !mark)
        goto out; /* already acked */

    batch = rocksdb_writebatch_create();
    if (existed)
        rocksdb_writebatch_delete_cf(batch, s->cf[CF_OUTBOX],
                                     (const char *)key, sizeof(key));
    if (mark) {
        unsigned char vbuf[STORE_OP_VALUE_MAX];
        op.outbox_state = STORE_OUTBOX_SENT;
        size_t n = op_encode(&op, vbuf, sizeof(vbuf));
        rocksdb_writebatch_put_cf(batch, s->cf[CF_OPS], op_id, strlen(op_id),
                                  (const char *)vbuf, n);
    }
    rocksdb_write(s->db, s->wopts_nosync, batch, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_write(outbox ack)", op_id, errstr,
                       errstr_size);
        idx_write_failed(s);
        goto out;
    }
    if (mark)
        idx_put_op(s, &k, &op, store_clock_ms(s), IDX_UPSERT);
    if (existed)
        atomic_fetch_sub(&s->pending, 1);
out:
    pthread_mutex_unlock(mu);
    if (batch)
        rocksdb_writebatch_destroy(batch);
    rocksdb_free(val);
    return err;
}

dd_err_t store_outbox_foreach(struct store *s, store_outbox_cb *cb,
                              void *opaque, char *errstr, size_t errstr_size)
{
    dd_err_t err = DD_OK;
    char *rerr = NULL;
    char *op_id = NULL;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, s->ropts,
                                                        s->cf[CF_OUTBOX]);
    op_id = malloc(STORE_KEY_MAX + 1);
    if (!op_id) {
        dd_errstr_set(errstr, errstr_size, "store_outbox_foreach: out of memory");
        err = DD_ERR_NOMEM;
        goto out;
    }
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen = 0, vlen = 0;
        const char *k = rocksdb_iter_key(it, &klen);
        const char *v = rocksdb_iter_value(it, &vlen);
        if (klen != 8) {
            dd_errstr_set(errstr, errstr_size,
                          "store: outbox key of %zu bytes (expected 8)", klen);
            err = DD_ERR_FATAL;
            goto out;
        }
        uint64_t seq = get_be64((const unsigned char *)k);
        struct outbox_entry ent;
        err = outbox_decode(v, vlen, seq, &ent, errstr, errstr_size);
        if (err)
            goto out;
        char event_key[STORE_HASH_LEN + 1];
        memcpy(op_id, ent.op_id, ent.op_id_len);
        op_id[ent.op_id_len] = '\0';
        memcpy(event_key, ent.event_key, ent.event_key_len);
        event_key[ent.event_key_len] = '\0';
        if (cb(opaque, seq, op_id, event_key, ent.generation, ent.value,
               ent.value_len))
            break;
    }
    rocksdb_iter_get_error(it, &rerr);
    if (rerr)
        err = rdb_fail(rerr, "rocksdb_iter(outbox)", s->path, errstr,
                       errstr_size);
out:
    rocksdb_iter_destroy(it);
    free(op_id);
    return err;
}

uint64_t store_outbox_pending(struct store *s)
{
    return atomic_load(&s->pending);
}

/* ---------------------------------------------------------------------- */
/* batched claims, the fast path, index counters                           */

#define BATCH_NONE UINT32_MAX

/* One distinct op_id of a batch. */
struct batch_key {
    struct idx_key k;
    struct idx_slot sl; /* the index entry when from_index */
    uint32_t first;     /* first request; its op holds the stored record */
    uint32_t tail;      /* last request so far (chaining) */
    uint32_t cur;       /* request whose op is the current record */
    dd_err_t err;
    uint8_t verdict;    /* enum idx_verdict */
    bool found;         /* a live record existed before the batch */
    bool from_index;    /* a finished duplicate the index answered */
    bool dirty;         /* to write */
};

struct batch_read {
    const char *id;
    size_t len;
    uint32_t u;
};

static int batch_read_cmp(const void *a, const void *b)
{
    /* RocksDB's bytewise comparator: sorted_input must agree with it */
    const struct batch_read *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->id, y->id, n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* order[]: the distinct op_ids grouped by index segment; segment g's are
 * order[start[g] .. start[g + 1]). */
static void batch_by_segment(const struct batch_key *u, size_t nu,
                             uint32_t *order, uint32_t start[IDX_SEGS + 1])
{
    uint32_t pos[IDX_SEGS] = {0};
    for (size_t j = 0; j < nu; j++)
        pos[u[j].k.k0 >> IDX_SEG_SHIFT]++;
    start[0] = 0;
    for (int g = 0; g < IDX_SEGS; g++) {
        start[g + 1] = start[g] + pos[g];
        pos[g] = start[g];
    }
    for (size_t j = 0; j < nu; j++)
        order[pos[u[j].k.k0 >> IDX_SEG_SHIFT]++] = (uint32_t)j;
}

/* The index's verdict on every distinct op_id, one segment lock each. */
static void batch_judge(struct store *s, struct batch_key *u,
                        const uint32_t *order,
                        const uint32_t start[IDX_SEGS + 1], int64_t now_ms)
{
    int64_t filter_now = store_clock_ms(s);
    bool off = atomic_load(&s->idx_off);
    for (int gi = 0; gi < IDX_SEGS; gi++) {
        if (start[gi] == start[gi + 1])
            continue;
        struct idx_seg *g = &s->idx[gi];
        if (off) {
            for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
                u[order[x]].verdict = IV_UNKNOWN;
            continue;
        }
        pthread_rwlock_rdlock(&g->lock);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
            seg_prefetch(g, &u[order[x]].k);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++) {
            struct batch_key *b = &u[order[x]];
            b->verdict = (uint8_t)idx_judge_locked(s, g, &b->k, now_ms,
                                                   filter_now, &b->sl);
        }
        pthread_rwlock_unlock(&g->lock);
    }
}

/* Enter the written ops, one segment lock each.  Caller holds the stripes. */
static void batch_index_written(struct store *s,
                                const struct store_claim_req *reqs,
                                const struct batch_key *u,
                                const uint32_t *order,
                                const uint32_t start[IDX_SEGS + 1],
                                int64_t now_ms)
{
    if (atomic_load(&s->idx_off))
        return;
    for (int gi = 0; gi < IDX_SEGS; gi++) {
        if (start[gi] == start[gi + 1])
            continue;
        struct idx_seg *g = &s->idx[gi];
        pthread_rwlock_wrlock(&g->lock);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++)
            if (u[order[x]].dirty)
                seg_prefetch(g, &u[order[x]].k);
        for (uint32_t x = start[gi]; x < start[gi + 1]; x++) {
            const struct batch_key *b = &u[order[x]];
            if (!b->dirty)
                continue;
            const struct store_op *op = &reqs[b->cur].op;
            idx_put_locked(s, g, &b->k,
                           idx_hdigest(s, op->request_hash,
                                       strlen(op->request_hash)),
                           idx_meta(op->expires_at_ms, op->state,
                                    op->outbox_state),
                           now_ms, IDX_UPSERT);
        }
        pthread_rwlock_unlock(&g->lock);
    }
}

static void batch_err(char *errstr, size_t errstr_size, bool *set,
                      const char *text)
{
    if (!*set && errstr && errstr_size)
        snprintf(errstr, errstr_size, "%s", text);
    *set = true;
}

/* Read the ops of rd[0..m) (sorted) with one batched MultiGet. */
static void batch_read_ops(struct store *s, struct store_claim_req *reqs,
                           struct batch_key *u, struct batch_read *rd,
                           size_t m, int64_t now_ms, char *errstr,
                           size_t errstr_size, bool *errset)
{
    const char **keys = malloc(m * sizeof(*keys));
    size_t *sizes = malloc(m * sizeof(*sizes));
    rocksdb_pinnableslice_t **vals = calloc(m, sizeof(*vals));
    char **errs = calloc(m, sizeof(*errs));
    char text[DD_ERRSTR_SIZE];
    if (!keys || !sizes || !vals || !errs) {
        for (size_t j = 0; j < m; j++)
            u[rd[j].u].err = DD_ERR_NOMEM;
        batch_err(errstr, errstr_size, errset,
                  "store_claim_batch: out of memory");
        goto out;
    }
    for (size_t j = 0; j < m; j++) {
        keys[j] = rd[j].id;
        sizes[j] = rd[j].len;
    }
    rocksdb_batched_multi_get_cf(s->db, s->ropts, s->cf[CF_OPS], m, keys,
                                 sizes, vals, errs, true);
    for (size_t j = 0; j < m; j++) {
        struct batch_key *b = &u[rd[j].u];
        const char *op_id = reqs[b->first].op_id;
        if (errs[j]) {
            snprintf(text, sizeof(text),
                     "rocksdb_batched_multi_get_cf(ops)(%.200s): %s", op_id,
                     errs[j]);
            batch_err(errstr, errstr_size, errset, text);
            rocksdb_free(errs[j]);
            b->err = DD_ERR_IO;
            continue;
        }
        if (!vals[j])
            continue; /* absent */
        size_t vlen = 0;
        const char *v = rocksdb_pinnableslice_value(vals[j], &vlen);
        struct store_op *op = &reqs[b->first].op;
        memset(op, 0, sizeof(*op));
        dd_err_t err = op_decode(v, vlen, op_id, op, text, sizeof(text));
        rocksdb_pinnableslice_destroy(vals[j]);
        if (err) {
            batch_err(errstr, errstr_size, errset, text);
            b->err = err;
            continue;
        }
        if (record_expired(op->expires_at_ms, now_ms))
            continue;
        b->found = true;
        idx_put_op(s, &b->k, op, now_ms, IDX_FILL);
    }
out:
    free(keys);
    free(sizes);
    free(vals);
    free(errs);
}

dd_err_t store_claim_batch(struct store *s, struct store_claim_req *reqs,
                           size_t n, int64_t now_ms, char *errstr,
                           size_t errstr_size)
{
    dd_err_t err = DD_OK;
    bool errset = false;
    char text[DD_ERRSTR_SIZE];
    if (n == 0)
        return DD_OK;
    if (n > UINT32_MAX / 4) {
        dd_errstr_set(errstr, errstr_size,
                      "store_claim_batch: %zu requests (at most %u)", n,
                      UINT32_MAX / 4);
        return DD_ERR_INVAL;
    }
    size_t tcap = 16;
    while (tcap < 2 * n)
        tcap *= 2;
    uint32_t *next = malloc(n * sizeof(*next));
    uint32_t *ukey = malloc(n * sizeof(*ukey));
    uint32_t *table = malloc(tcap * sizeof(*table));
    struct batch_key *u = malloc(n * sizeof(*u));
    struct batch_read *rd = malloc(n * sizeof(*rd));
    uint32_t *order = malloc(n * sizeof(*order));
    uint32_t seg_start[IDX_SEGS + 1];
    uint64_t locked[STORE_STRIPES / 64] = {0};
    rocksdb_writebatch_t *wb = NULL;
    perf_off();
    if (!next || !ukey || !table || !u || !rd || !order) {
        dd_errstr_set(errstr, errstr_size,
                      "store_claim_batch: out of memory (%zu requests)", n);
        for (size_t i = 0; i < n; i++)
            reqs[i].err = DD_ERR_NOMEM;
        err = DD_ERR_NOMEM;
        goto out;
    }
    memset(table, 0xff, tcap * sizeof(*table));

    /* validate, digest and deduplicate */
    size_t nu = 0;
    for (size_t i = 0; i < n; i++) {
        struct store_claim_req *r = &reqs[i];
        size_t hl, el;
        r->result = 0;
        r->err = check_claim_args("store_claim_batch", r->op_id,
                                  r->request_hash, r->event_key, &hl, &el,
                                  text, sizeof(text));
        ukey[i] = BATCH_NONE;
        next[i] = BATCH_NONE;
        if (r->err) {
            batch_err(errstr, errstr_size, &errset, text);
            continue;
        }
        struct idx_key k;
        idx_digest(s, r->op_id, strlen(r->op_id), &k);
        size_t pos = k.k1 & (tcap - 1);
        for (;;) {
            uint32_t x = table[pos];
            if (x == BATCH_NONE) {
                struct batch_key *b = &u[nu];
                memset(b, 0, sizeof(*b));
                b->k = k;
                b->first = b->tail = b->cur = (uint32_t)i;
                table[pos] = (uint32_t)nu;
                ukey[i] = (uint32_t)nu++;
                break;
            }
            if (u[x].k.k0 == k.k0 && u[x].k.k1 == k.k1
                && strcmp(reqs[u[x].first].op_id, r->op_id) == 0) {
                next[u[x].tail] = (uint32_t)i;
                u[x].tail = (uint32_t)i;
                ukey[i] = x;
                break;
            }
            pos = (pos + 1) & (tcap - 1);
        }
    }

    /* the ops' stripes, in ascending order (no deadlock with anyone) */
    for (size_t j = 0; j < nu; j++) {
        uint32_t st = (uint32_t)(u[j].k.k0 % STORE_STRIPES);
        locked[st / 64] |= UINT64_C(1) << (st % 64);
    }
    for (uint32_t st = 0; st < STORE_STRIPES; st++)
        if (locked[st / 64] >> (st % 64) & 1)
            pthread_mutex_lock(&s->stripes[st]);

    /* the index first; RocksDB for what it cannot decide */
    batch_by_segment(u, nu, order, seg_start);
    batch_judge(s, u, order, seg_start, now_ms);
    uint64_t hits[IDX_SEGS] = {0}, misses[IDX_SEGS] = {0};
    size_t m = 0;
    for (size_t j = 0; j < nu; j++) {
        struct batch_key *b = &u[j];
        enum idx_verdict v = b->verdict;
        if (v == IV_FINISHED) {
            /* every request of the op must carry the same request_hash */
            b->from_index = true;
            for (uint32_t i = b->first; i != BATCH_NONE; i = next[i]) {
                const char *h = reqs[i].request_hash;
                if (idx_hdigest(s, h, strlen(h)) != b->sl.h) {
                    b->from_index = false;
                    break;
                }
            }
        }
        bool decided = v == IV_ABSENT || b->from_index;
        if (decided)
            hits[b->k.k0 >> IDX_SEG_SHIFT]++;
        else
            misses[b->k.k0 >> IDX_SEG_SHIFT]++;
        if (!decided) {
            const char *id = reqs[b->first].op_id;
            rd[m++] = (struct batch_read){id, strlen(id), (uint32_t)j};
        }
    }
    for (int g = 0; g < IDX_SEGS; g++) {
        if (hits[g])
            atomic_fetch_add_explicit(&s->idx[g].hits, hits[g],
                                      memory_order_relaxed);
        if (misses[g])
            atomic_fetch_add_explicit(&s->idx[g].misses, misses[g],
                                      memory_order_relaxed);
    }
    if (m) {
        qsort(rd, m, sizeof(*rd), batch_read_cmp);
        batch_read_ops(s, reqs, u, rd, m, now_ms, errstr, errstr_size,
                       &errset);
    }

    /* the claims in array order, as store_claim would answer them */
    size_t ndirty = 0;
    for (size_t i = 0; i < n; i++) {
        if (ukey[i] == BATCH_NONE)
            continue;
        struct batch_key *b = &u[ukey[i]];
        struct store_claim_req *r = &reqs[i];
        if (b->err) {
            r->err = b->err;
            continue;
        }
        if (b->from_index) {
            r->result = STORE_CLAIM_DUPLICATE;
            op_from_index(&b->sl, r->request_hash, &r->op);
            continue;
        }
        bool found = b->found;
        if (i != b->first) {
            r->op = reqs[b->cur].op;
            found = true; /* the first request left a live record */
        }
        bool dirty = false;
        r->result = claim_apply(s, &r->op, found, r->request_hash,
                                strlen(r->request_hash), r->event_key,
                                strlen(r->event_key), r->source, now_ms,
                                &dirty);
        if (dirty && !b->dirty) {
            b->dirty = true;
            ndirty++;
        }
        b->cur = (uint32_t)i;
    }

    /* one WriteBatch, one WAL write (and sync, per store.sync) */
    if (ndirty) {
        unsigned char vbuf[STORE_OP_VALUE_MAX];
        /* in key order: the memtable's skiplist inserts then reuse their
         * search path (rd is free again: the reads are done) */
        size_t w = 0;
        for (size_t j = 0; j < nu; j++)
            if (u[j].dirty) {
                const char *id = reqs[u[j].first].op_id;
                rd[w++] = (struct batch_read){id, strlen(id), (uint32_t)j};
            }
        qsort(rd, w, sizeof(*rd), batch_read_cmp);
        wb = rocksdb_writebatch_create();
        for (size_t x = 0; x < w; x++) {
            size_t j = rd[x].u;
            const struct store_claim_req *r = &reqs[u[j].cur];
            size_t vlen = op_encode(&r->op, vbuf, sizeof(vbuf));
            rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], r->op_id,
                                      strlen(r->op_id), (const char *)vbuf,
                                      vlen);
        }
        char *rerr = NULL;
        /* not synced: the next synced write (a completion) persists it,
         * and a claim lost in a crash is only claimed again (store.h) */
        rocksdb_write(s->db, s->wopts_nosync, wb, &rerr);
        if (rerr) {
            err = rdb_fail(rerr, "rocksdb_write(ops batch)",
                           reqs[u[0].first].op_id, errstr, errstr_size);
            idx_write_failed(s);
            for (size_t i = 0; i < n; i++)
                if (!reqs[i].err)
                    reqs[i].err = DD_ERR_IO;
            goto unlock;
        }
        batch_index_written(s, reqs, u, order, seg_start, now_ms);
    }
unlock:
    for (uint32_t st = 0; st < STORE_STRIPES; st++)
        if (locked[st / 64] >> (st % 64) & 1)
            pthread_mutex_unlock(&s->stripes[st]);
out:
    if (wb)
        rocksdb_writebatch_destroy(wb);
    free(next);
    free(ukey);
    free(table);
    free(u);
    free(rd);
    free(order);
    return err;
}

bool store_index_duplicate(struct store *s, const char *op_id,
                           size_t op_id_len, const char *request_hash,
                           int64_t now_ms, enum store_op_state *state)
{
    if (op_id_len == 0 || op_id_len > STORE_KEY_MAX)
        return false;
    struct idx_key k;
    struct idx_slot sl;
    idx_digest(s, op_id, op_id_len, &k);
    bool dup = idx_judge(s, &k, now_ms, store_clock_ms(s), &sl)
                   == IV_FINISHED
               && sl.h == idx_hdigest(s, request_hash, strlen(request_hash));
    idx_count(s, &k, dup);
    if (dup && state)
        *state = (enum store_op_state)idx_state(sl.m);
    return dup;
}

void store_index_stats_get(struct store *s, struct store_index_stats *st)
{
    memset(st, 0, sizeof(*st));
    for (int i = 0; i < IDX_SEGS; i++) {
        struct idx_seg *g = &s->idx[i];
        pthread_rwlock_rdlock(&g->lock);
        st->entries += g->used;
        st->capacity += g->cap;
        pthread_rwlock_unlock(&g->lock);
        st->hits += atomic_load_explicit(&g->hits, memory_order_relaxed);
        st->misses += atomic_load_explicit(&g->misses, memory_order_relaxed);
    }
    st->bytes = st->capacity * sizeof(struct idx_slot)
                + IDX_SEGS * sizeof(struct idx_seg);
    st->complete = idx_complete(s);
}

/* ---------------------------------------------------------------------- */
/* attempts                                                                */

static size_t attempt_key(const char *op_id, size_t idlen, uint32_t number,
                          char *buf)
{
    memcpy(buf, op_id, idlen);
    buf[idlen] = '\n';
    for (int i = 0; i < 4; i++)
        buf[idlen + 1 + i] = (char)(unsigned char)(number >> (24 - 8 * i));
    return idlen + 5;
}

/* A NUL-terminated string within its array of \p size bytes. */
static bool bounded(const char *str, size_t size)
{
    return memchr(str, '\0', size) != NULL;
}

static dd_err_t attempts_check(const char *fn, const char *op_id,
                               const struct store_attempt *attempts, size_t n,
                               char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < n; i++) {
        const struct store_attempt *a = &attempts[i];
        if (a->number == 0 || !bounded(a->session, sizeof(a->session))
            || !bounded(a->exit_addr, sizeof(a->exit_addr))
            || !bounded(a->category, sizeof(a->category))
            || !bounded(a->error, sizeof(a->error))) {
            dd_errstr_set(errstr, errstr_size,
                          "%s(%.64s): attempt %zu has number %u (must be >= "
                          "1) or an unterminated string",
                          fn, op_id, i, a->number);
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

static void attempts_stage(struct store *s, rocksdb_writebatch_t *wb,
                           const char *op_id,
                           const struct store_attempt *attempts, size_t n,
                           int64_t now_ms)
{
    size_t idlen = strlen(op_id);
    int64_t expires_at = add_ms(now_ms, s->ops_ttl_ms);
    for (size_t i = 0; i < n; i++) {
        const struct store_attempt *a = &attempts[i];
        char key[STORE_ATTEMPT_KEY_MAX];
        unsigned char buf[STORE_ATTEMPT_VALUE_MAX];
        size_t klen = attempt_key(op_id, idlen, a->number, key);
        struct enc e = {buf, sizeof(buf), 0, false};
        enc_header(&e, REC_ATTEMPT, expires_at);
        enc_u32(&e, a->number);
        enc_u64(&e, a->generation);
        enc_u64(&e, (uint64_t)a->started_at_ms);
        enc_u64(&e, (uint64_t)a->ended_at_ms);
        enc_u32(&e, (uint32_t)a->status);
        enc_u64(&e, a->bytes);
        enc_str(&e, a->session, strlen(a->session));
        enc_str(&e, a->exit_addr, strlen(a->exit_addr));
        enc_str(&e, a->category, strlen(a->category));
        enc_str(&e, a->error, strlen(a->error));
        assert(!e.overflow); /* every string is bounded by its array */
        rocksdb_writebatch_put_cf(wb, s->cf[CF_ATTEMPTS], key, klen,
                                  (const char *)buf, e.len);
    }
}

dd_err_t store_attempts_put(struct store *s, const char *op_id,
                            const struct store_attempt *attempts, size_t n,
                            int64_t now_ms, char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_attempts_put", op_id, errstr,
                               errstr_size);
    if (err || n == 0)
        return err;
    err = attempts_check("store_attempts_put", op_id, attempts, n, errstr,
                         errstr_size);
    if (err)
        return err;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    attempts_stage(s, wb, op_id, attempts, n, now_ms);
    char *rerr = NULL;
    rocksdb_write(s->db, s->wopts, wb, &rerr);
    rocksdb_writebatch_destroy(wb);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_write(attempts)", op_id, errstr,
                        errstr_size);
    return DD_OK;
}

static dd_err_t attempt_decode(const char *val, size_t len, const char *op_id,
                               uint32_t number, struct store_attempt *a,
                               int64_t *expires_at, char *errstr,
                               size_t errstr_size)
{
    struct dec d = {(const unsigned char *)val, len, 0, false};
    char name[STORE_KEY_MAX + 16];
    int nlen = snprintf(name, sizeof(name), "%s#%u", op_id, number);
    dd_err_t err = dec_header(&d, REC_ATTEMPT, expires_at, "attempts", name,
                              (size_t)nlen, errstr, errstr_size);
    if (err)
        return err;
    memset(a, 0, sizeof(*a));
    a->number = dec_u32(&d);
    a->generation = dec_u64(&d);
    a->started_at_ms = (int64_t)dec_u64(&d);
    a->ended_at_ms = (int64_t)dec_u64(&d);
    a->status = (int32_t)dec_u32(&d);
    a->bytes = dec_u64(&d);
    dec_str(&d, a->session, STORE_SESSION_MAX);
    dec_str(&d, a->exit_addr, STORE_SESSION_MAX);
    dec_str(&d, a->category, STORE_CATEGORY_MAX);
    dec_str(&d, a->error, STORE_ERROR_MAX);
    if (d.bad || d.off != d.len || a->number != number) {
        dd_errstr_set(errstr, errstr_size,
                      "store: attempts record '%.64s' is corrupt (%zu bytes, "
                      "number %u)",
                      name, len, a->number);
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

dd_err_t store_attempts_get(struct store *s, const char *op_id,
                            int64_t now_ms, struct store_attempt **out,
                            size_t *n, char *errstr, size_t errstr_size)
{
    *out = NULL;
    *n = 0;
    dd_err_t err = check_op_id("store_attempts_get", op_id, errstr,
                               errstr_size);
    if (err)
        return err;
    size_t idlen = strlen(op_id), count = 0, cap = 0;
    struct store_attempt *arr = NULL;
    char lower[STORE_KEY_MAX + 1], upper[STORE_KEY_MAX + 1];
    memcpy(lower, op_id, idlen);
    lower[idlen] = '\n';
    memcpy(upper, op_id, idlen);
    upper[idlen] = '\n' + 1;
    char *rerr = NULL;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_iterate_upper_bound(ro, upper, idlen + 1);
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro,
                                                        s->cf[CF_ATTEMPTS]);
    for (rocksdb_iter_seek(it, lower, idlen + 1); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen = 0, vlen = 0;
        const char *k = rocksdb_iter_key(it, &klen);
        if (klen != idlen + 5)
            continue; /* an attempt of op "<op_id>\n..." */
        const unsigned char *nb = (const unsigned char *)k + idlen + 1;
        uint32_t number = (uint32_t)nb[0] << 24 | (uint32_t)nb[1] << 16
                          | (uint32_t)nb[2] << 8 | nb[3];
        const char *v = rocksdb_iter_value(it, &vlen);
        struct store_attempt a;
        int64_t expires_at = 0;
        err = attempt_decode(v, vlen, op_id, number, &a, &expires_at, errstr,
                             errstr_size);
        if (err)
            goto out;
        if (record_expired(expires_at, now_ms))
            continue;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            struct store_attempt *na = realloc(arr, ncap * sizeof(*na));
            if (!na) {
                dd_errstr_set(errstr, errstr_size,
                              "store_attempts_get(%.64s): out of memory",
                              op_id);
                err = DD_ERR_NOMEM;
                goto out;
            }
            arr = na;
            cap = ncap;
        }
        arr[count++] = a;
    }
    rocksdb_iter_get_error(it, &rerr);
    if (rerr)
        err = rdb_fail(rerr, "rocksdb_iter(attempts)", op_id, errstr,
                       errstr_size);
out:
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (err) {
        free(arr);
        return err;
    }
    *out = arr;
    *n = count;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* conflicts, seen, forget, maintenance                                    */

dd_err_t store_conflict_mark(struct store *s, const char *op_id,
                             const char *request_hash, int64_t now_ms,
                             bool *first, char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_conflict_mark", op_id, errstr,
                               errstr_size);
    if (err)
        return err;
    size_t idlen = strlen(op_id), hlen = strlen(request_hash);
    if (hlen == 0 || hlen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "store_conflict_mark(%.64s): request_hash of %zu bytes "
                      "(must be 1..%d)",
                      op_id, hlen, STORE_HASH_LEN);
        return DD_ERR_INVAL;
    }
    char key[STORE_KEY_MAX + 1 + STORE_HASH_LEN];
    memcpy(key, op_id, idlen);
    key[idlen] = '\n';
    memcpy(key + idlen + 1, request_hash, hlen);

    struct idx_key k;
    pthread_mutex_t *mu = stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    bool present = false;
    err = mark_once(s, CF_CONFLICTS, REC_CONFLICT, key, idlen + 1 + hlen,
                    s->ops_ttl_ms, now_ms, &present, errstr, errstr_size);
    pthread_mutex_unlock(mu);
    if (!err)
        *first = !present;
    return err;
}

dd_err_t store_mark_seen(struct store *s, const void *key, size_t key_len,
                         int64_t ttl_ms, int64_t now_ms, bool *seen,
                         char *errstr, size_t errstr_size)
{
    if (key_len == 0 || key_len > STORE_KEY_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "store_mark_seen: key of %zu bytes (must be 1..%d)",
                      key_len, STORE_KEY_MAX);
        return DD_ERR_INVAL;
    }
    if (ttl_ms < 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store_mark_seen: negative ttl_ms %lld",
                      (long long)ttl_ms);
        return DD_ERR_INVAL;
    }
    pthread_mutex_t *mu = &s->stripes[stripe_of(key, key_len)];
    pthread_mutex_lock(mu);
    dd_err_t err = mark_once(s, CF_SEEN, REC_SEEN, key, key_len, ttl_ms,
                             now_ms, seen, errstr, errstr_size);
    pthread_mutex_unlock(mu);
    return err;
}

dd_err_t store_forget(struct store *s, const char *op_id, bool *found,
                      char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_forget", op_id, errstr, errstr_size);
    if (err)
        return err;
    struct idx_key k;
    pthread_mutex_t *mu = stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op op;
    bool live = false;
    /* the store's clock: the filter clock when set (tests), else wall time */
    err = op_read(s, op_id, store_clock_ms(s), false, &op, &live, errstr,
                  errstr_size);
    if (err)
        goto out;
    char *rerr = NULL;
    rocksdb_delete_cf(s->db, s->wopts, s->cf[CF_OPS], op_id, strlen(op_id),
                      &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_delete_cf(ops)", op_id, errstr,
                       errstr_size);
        idx_write_failed(s);
        goto out;
    }
    idx_forget(s, &k, store_clock_ms(s));
    *found = live;
out:
    pthread_mutex_unlock(mu);
    return err;
}

void store_compact(struct store *s)
{
    for (int i = 0; i < CF_N; i++)
        rocksdb_compact_range_cf(s->db, s->cf[i], NULL, 0, NULL, 0);
}

void store_set_filter_clock(struct store *s, int64_t now_ms)
{
    atomic_store(&s->filter_clock_ms, now_ms);
}

const char *store_claim_result2str(enum store_claim_result r)
{
    switch (r) {
    case STORE_CLAIM_NEW: return "new";
    case STORE_CLAIM_DUPLICATE: return "duplicate";
    case STORE_CLAIM_CONFLICT: return "conflict";
    case STORE_CLAIM_RECLAIMED: return "reclaimed";
    }
    return "unknown";
}

const char *store_op_state2str(enum store_op_state st)
{
    switch (st) {
    case STORE_OP_RUNNING: return "running";
    case STORE_OP_RETRYABLE: return "retryable";
    case STORE_OP_COMPLETE: return "complete";
    case STORE_OP_FAILED: return "failed";
    }
    return "unknown";
}

/* Is an unexpired record of \p type at \p key in \p cf?  Read-only. */
static dd_err_t read_present(struct store *s, int cf, enum rec_type type,
                             const char *key, size_t key_len, int64_t now_ms,
                             bool *present, char *errstr, size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[cf], key, key_len, &vlen,
                               &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_get_cf", cf_names[cf], errstr,
                        errstr_size);
    *present = false;
    if (!val)
        return DD_OK;
    struct dec d = {(const unsigned char *)val, vlen, 0, false};
    int64_t expires_at = 0;
    dd_err_t err = dec_header(&d, type, &expires_at, cf_names[cf], key, key_len,
                              errstr, errstr_size);
    rocksdb_free(val);
    if (err)
        return err;
    *present = !record_expired(expires_at, now_ms);
    return DD_OK;
}

dd_err_t store_seen_contains(struct store *s, const void *key, size_t key_len,
                             int64_t now_ms, bool *present, char *errstr,
                             size_t errstr_size)
{
    if (key_len == 0 || key_len > STORE_KEY_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "store_seen_contains: key of %zu bytes (must be 1..%d)",
                      key_len, STORE_KEY_MAX);
        return DD_ERR_INVAL;
    }
    return read_present(s, CF_SEEN, REC_SEEN, key, key_len, now_ms, present,
                        errstr, errstr_size);
}

dd_err_t store_conflict_reported(struct store *s, const char *op_id,
                                 const char *request_hash, int64_t now_ms,
                                 bool *reported, char *errstr,
                                 size_t errstr_size)
{
    dd_err_t err = check_op_id("store_conflict_reported", op_id, errstr,
                               errstr_size);
    if (err)
        return err;
    size_t idlen = strlen(op_id), hlen = strlen(request_hash);
    if (hlen == 0 || hlen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "store_conflict_reported(%.64s): request_hash of %zu "
                      "bytes (must be 1..%d)", op_id, hlen, STORE_HASH_LEN);
        return DD_ERR_INVAL;
    }
    char key[STORE_KEY_MAX + 1 + STORE_HASH_LEN];
    memcpy(key, op_id, idlen);
    key[idlen] = '\n';
    memcpy(key + idlen + 1, request_hash, hlen);
    return read_present(s, CF_CONFLICTS, REC_CONFLICT, key, idlen + 1 + hlen,
                        now_ms, reported, errstr, errstr_size);
}

/* ---- receipts of the submit API (CF "receipts") ---------------------------
 * value: header, u8 state (1 pending, 2 done), str request_hash, str receipt */

#define RECEIPT_MAX 4096

dd_err_t store_receipt_begin(struct store *s, const char *key,
                             const char *request_hash, int64_t now_ms,
                             int64_t ttl_ms, enum store_receipt_state *state,
                             char existing_hash[STORE_HASH_LEN + 1],
                             char **receipt, char *errstr, size_t errstr_size)
{
    size_t klen = strlen(key), hlen = strlen(request_hash);
    if (klen == 0 || klen > STORE_KEY_MAX || hlen == 0 || hlen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "store_receipt_begin: key of %zu bytes or hash of %zu "
                      "bytes out of range", klen, hlen);
        return DD_ERR_INVAL;
    }
    *receipt = NULL;
    existing_hash[0] = '\0';
    pthread_mutex_t *mu = &s->stripes[stripe_of(key, klen)];
    pthread_mutex_lock(mu);
    char *rerr = NULL;
    size_t vlen = 0;
    dd_err_t err = DD_OK;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_RECEIPTS], key, klen,
                               &vlen, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_get_cf", "receipts", errstr, errstr_size);
        goto out;
    }
    if (val) {
        struct dec d = {(const unsigned char *)val, vlen, 0, false};
        int64_t expires_at = 0;
        err = dec_header(&d, REC_RECEIPT, &expires_at, "receipts", key, klen,
                         errstr, errstr_size);
        if (!err && !record_expired(expires_at, now_ms)) {
            uint8_t st = dec_u8(&d);
            dec_str(&d, existing_hash, STORE_HASH_LEN);
            size_t rn = 0;
            const char *r = dec_str_ref(&d, RECEIPT_MAX, &rn);
            if (d.bad || (st != STORE_RECEIPT_PENDING && st != STORE_RECEIPT_DONE)) {
                dd_errstr_set(errstr, errstr_size,
                              "receipts: corrupt record at %.64s", key);
                err = DD_ERR_FATAL;
            } else {
                *state = (enum store_receipt_state)st;
                if (st == STORE_RECEIPT_DONE && r)
                    *receipt = strndup(r, rn);
            }
            rocksdb_free(val);
            goto out;
        }
        rocksdb_free(val);
        if (err)
            goto out;
    }
    {
        unsigned char buf[STORE_HDR_LEN + 1 + 2 + STORE_HASH_LEN + 2];
        struct enc e = {buf, sizeof(buf), 0, false};
        enc_header(&e, REC_RECEIPT, add_ms(now_ms, ttl_ms));
        enc_u8(&e, STORE_RECEIPT_PENDING);
        enc_str(&e, request_hash, hlen);
        enc_str(&e, "", 0);
        rocksdb_put_cf(s->db, s->wopts, s->cf[CF_RECEIPTS], key, klen,
                       (const char *)buf, e.len, &rerr);
        if (rerr)
            err = rdb_fail(rerr, "rocksdb_put_cf", "receipts", errstr, errstr_size);
        else
            *state = STORE_RECEIPT_NEW;
    }
out:
    pthread_mutex_unlock(mu);
    return err;
}

dd_err_t store_receipt_done(struct store *s, const char *key,
                            const char *request_hash, const char *receipt,
                            int64_t now_ms, int64_t ttl_ms, char *errstr,
                            size_t errstr_size)
{
    size_t klen = strlen(key), hlen = strlen(request_hash), rlen = strlen(receipt);
    if (klen == 0 || klen > STORE_KEY_MAX || hlen > STORE_HASH_LEN ||
        rlen > RECEIPT_MAX) {
        dd_errstr_set(errstr, errstr_size, "store_receipt_done: argument out "
                      "of range");
        return DD_ERR_INVAL;
    }
    unsigned char *buf = malloc(STORE_HDR_LEN + 1 + 2 + hlen + 2 + rlen);
    if (!buf)
        return DD_ERR_NOMEM;
    struct enc e = {buf, STORE_HDR_LEN + 1 + 2 + hlen + 2 + rlen, 0, false};
    enc_header(&e, REC_RECEIPT, add_ms(now_ms, ttl_ms));
    enc_u8(&e, STORE_RECEIPT_DONE);
    enc_str(&e, request_hash, hlen);
    enc_str(&e, receipt, rlen);
    char *rerr = NULL;
    pthread_mutex_t *mu = &s->stripes[stripe_of(key, klen)];
    pthread_mutex_lock(mu);
    rocksdb_put_cf(s->db, s->wopts, s->cf[CF_RECEIPTS], key, klen,
                   (const char *)buf, e.len, &rerr);
    pthread_mutex_unlock(mu);
    free(buf);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_put_cf", "receipts", errstr, errstr_size);
    return DD_OK;
}

dd_err_t store_receipt_abort(struct store *s, const char *key, char *errstr,
                             size_t errstr_size)
{
    char *rerr = NULL;
    size_t klen = strlen(key);
    pthread_mutex_t *mu = &s->stripes[stripe_of(key, klen)];
    pthread_mutex_lock(mu);
    rocksdb_delete_cf(s->db, s->wopts, s->cf[CF_RECEIPTS], key, klen, &rerr);
    pthread_mutex_unlock(mu);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_delete_cf", "receipts", errstr, errstr_size);
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* validators and bodies (CFs "validators", "bodies": conditional refetch)  */

/* 64 lowercase hex chars and the NUL: a body key. */
static bool is_hex64(const char *h)
{
    for (int i = 0; i < STORE_HASH_LEN; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return false;
    return h[STORE_HASH_LEN] == '\0';
}

/* NULL, or at most max bytes without a control character (CR and LF would
 * split the request header the value is sent back in). */
static bool field_ok(const char *v, size_t max)
{
    if (!v)
        return true;
    size_t i = 0;
    for (; v[i] && i <= max; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return i <= max;
}

static bool resource_key_ok(const char *k)
{
    size_t n = strnlen(k, STORE_KEY_MAX + 1);
    return n >= 1 && n <= STORE_KEY_MAX;
}

/*
 * Decide what a completion does with its validator fields; no lock held.
 * For STORE_VALIDATOR_WRITTEN, \p digest is the body's key (given by the
 * caller or computed here).
 */
static enum store_validator_write
validator_prep(struct store *s, const struct store_complete_req *r,
               char digest[STORE_HASH_LEN + 1])
{
    if (!r->resource_key || r->state != STORE_OP_COMPLETE)
        return STORE_VALIDATOR_NONE;
    if (!resource_key_ok(r->resource_key))
        return STORE_VALIDATOR_REFUSED;
    if (!(r->etag && *r->etag) && !(r->last_modified && *r->last_modified))
        return STORE_VALIDATOR_CLEARED;
    if (r->body_len > s->max_body_bytes)
        return STORE_VALIDATOR_TOO_LARGE;
    if ((!r->body && r->body_len) || !field_ok(r->etag, STORE_ETAG_MAX)
        || !field_ok(r->last_modified, STORE_LAST_MODIFIED_MAX)
        || !field_ok(r->content_type, STORE_CONTENT_TYPE_MAX)
        || !field_ok(r->final_url, STORE_URL_MAX)
        || (r->body_sha256 && !is_hex64(r->body_sha256)))
        return STORE_VALIDATOR_REFUSED;
    if (r->body_sha256)
        memcpy(digest, r->body_sha256, STORE_HASH_LEN + 1);
    else
        key_sha256_hex(r->body_len ? r->body : "", r->body_len, digest);
    return STORE_VALIDATOR_WRITTEN;
}

static void enc_opt_str(struct enc *e, const char *v)
{
    enc_str(e, v ? v : "", v ? strlen(v) : 0);
}

/* Under the op's stripe, after complete_stage: the validator of a
 * completion (put or delete) and its body, into \p wb. */
static void validator_stage(struct store *s, rocksdb_writebatch_t *wb,
                            const struct store_complete_req *r,
                            const char *digest, bool put_body, int64_t now_ms)
{
    if (r->validator_write == STORE_VALIDATOR_NONE
        || !resource_key_ok(r->resource_key))
        return;
    const char *rk = r->resource_key;
    size_t rklen = strlen(rk);
    if (r->validator_write != STORE_VALIDATOR_WRITTEN) {
        rocksdb_writebatch_delete_cf(wb, s->cf[CF_VALIDATORS], rk, rklen);
        return;
    }
    int64_t expires_at = add_ms(now_ms, s->validators_ttl_ms);
    unsigned char buf[STORE_VALIDATOR_VALUE_MAX];
    struct enc e = {buf, sizeof(buf), 0, false};
    enc_header(&e, REC_VALIDATOR, expires_at);
    enc_u64(&e, (uint64_t)now_ms);
    enc_u32(&e, (uint32_t)r->http_status);
    enc_u64(&e, (uint64_t)r->body_len);
    enc_str(&e, digest, STORE_HASH_LEN);
    enc_opt_str(&e, r->etag);
    enc_opt_str(&e, r->last_modified);
    enc_opt_str(&e, r->content_type);
    enc_opt_str(&e, r->final_url);
    assert(!e.overflow); /* every string was checked by validator_prep */
    rocksdb_writebatch_put_cf(wb, s->cf[CF_VALIDATORS], rk, rklen,
                              (const char *)buf, e.len);
    if (!put_body)
        return;
    /* the body goes in from the caller's buffer: no copy besides the
     * batch's own */
    unsigned char head[STORE_BODY_HEAD_LEN];
    struct enc h = {head, sizeof(head), 0, false};
    enc_header(&h, REC_BODY, expires_at);
    enc_u64(&h, (uint64_t)r->body_len);
    assert(!h.overflow);
    const char *vals[2] = {(const char *)head, r->body_len ? r->body : ""};
    size_t vlens[2] = {sizeof(head), r->body_len};
    const char *keys[1] = {digest};
    size_t klens[1] = {STORE_HASH_LEN};
    rocksdb_writebatch_putv_cf(wb, s->cf[CF_BODIES], 1, keys, klens, 2, vals,
                               vlens);
}

static dd_err_t validator_decode(const char *val, size_t len, const char *key,
                                 size_t key_len, struct store_validator *v,
                                 char *errstr, size_t errstr_size)
{
    struct dec d = {(const unsigned char *)val, len, 0, false};
    dd_err_t err = dec_header(&d, REC_VALIDATOR, &v->expires_at_ms,
                              "validators", key, key_len, errstr,
                              errstr_size);
    if (err)
        return err;
    v->stored_at_ms = (int64_t)dec_u64(&d);
    v->status = (int32_t)dec_u32(&d);
    v->body_len = dec_u64(&d);
    dec_str(&d, v->body_sha256, STORE_HASH_LEN);
    dec_str(&d, v->etag, STORE_ETAG_MAX);
    dec_str(&d, v->last_modified, STORE_LAST_MODIFIED_MAX);
    dec_str(&d, v->content_type, STORE_CONTENT_TYPE_MAX);
    dec_str(&d, v->final_url, STORE_URL_MAX);
    if (d.bad || d.off != d.len || !is_hex64(v->body_sha256)) {
        dd_errstr_set(errstr, errstr_size,
                      "store: validators record '%.*s' is corrupt (%zu bytes)",
                      (int)(key_len > 64 ? 64 : key_len), key, len);
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

/* A body record: its expiry and a pointer to its bytes inside \p val. */
static dd_err_t body_decode(const char *val, size_t len, const char *digest,
                            int64_t *expires_at, const char **body,
                            size_t *body_len, char *errstr,
                            size_t errstr_size)
{
    struct dec d = {(const unsigned char *)val, len, 0, false};
    dd_err_t err = dec_header(&d, REC_BODY, expires_at, "bodies", digest,
                              strlen(digest), errstr, errstr_size);
    if (err)
        return err;
    uint64_t n = dec_u64(&d);
    if (d.bad || n != d.len - d.off) {
        dd_errstr_set(errstr, errstr_size,
                      "store: bodies record '%.64s' is corrupt (%zu bytes, "
                      "body_len %llu)",
                      digest, len, (unsigned long long)n);
        return DD_ERR_FATAL;
    }
    *body = val + d.off;
    *body_len = (size_t)n;
    return DD_OK;
}

/*
 * Pinned read of body \p digest (no copy of its bytes).  *pin is NULL when
 * absent or expired; else the caller destroys it (the body points into it).
 */
static dd_err_t body_read(struct store *s, const char *fn, const char *digest,
                          int64_t now_ms, rocksdb_pinnableslice_t **pin,
                          const char **body, size_t *body_len, char *errstr,
                          size_t errstr_size)
{
    char *rerr = NULL;
    *pin = NULL;
    rocksdb_pinnableslice_t *p = rocksdb_get_pinned_cf(
        s->db, s->ropts, s->cf[CF_BODIES], digest, STORE_HASH_LEN, &rerr);
    if (rerr) {
        dd_errstr_set(errstr, errstr_size, "%s: rocksdb_get_pinned_cf(bodies,"
                      " %.64s): %s", fn, digest, rerr);
        rocksdb_free(rerr);
        return DD_ERR_IO;
    }
    if (!p)
        return DD_OK;
    size_t vlen = 0;
    const char *v = rocksdb_pinnableslice_value(p, &vlen);
    int64_t expires_at = 0;
    dd_err_t err = body_decode(v, vlen, digest, &expires_at, body, body_len,
                               errstr, errstr_size);
    if (err || record_expired(expires_at, now_ms)) {
        rocksdb_pinnableslice_destroy(p);
        return err;
    }
    *pin = p;
    return DD_OK;
}

dd_err_t store_validator_get(struct store *s, const char *resource_key,
                             int64_t now_ms, struct store_validator *out,
                             bool *found, char *errstr, size_t errstr_size)
{
    *found = false;
    if (!resource_key_ok(resource_key)) {
        dd_errstr_set(errstr, errstr_size,
                      "store_validator_get: resource key of %zu bytes (must "
                      "be 1..%d)",
                      strnlen(resource_key, STORE_KEY_MAX + 1), STORE_KEY_MAX);
        return DD_ERR_INVAL;
    }
    size_t klen = strlen(resource_key);
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_VALIDATORS],
                               resource_key, klen, &vlen, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_get_cf(validators)", resource_key,
                        errstr, errstr_size);
    if (!val)
        return DD_OK;
    struct store_validator *v = malloc(sizeof(*v));
    if (!v) {
        rocksdb_free(val);
        dd_errstr_set(errstr, errstr_size,
                      "store_validator_get: out of memory");
        return DD_ERR_NOMEM;
    }
    dd_err_t err = validator_decode(val, vlen, resource_key, klen, v, errstr,
                                    errstr_size);
    rocksdb_free(val);
    if (err || record_expired(v->expires_at_ms, now_ms))
        goto out;
    /* a validator is only as good as its body */
    rocksdb_pinnableslice_t *pin = NULL;
    const char *body = NULL;
    size_t blen = 0;
    err = body_read(s, "store_validator_get", v->body_sha256, now_ms, &pin,
                    &body, &blen, errstr, errstr_size);
    if (err || !pin)
        goto out;
    rocksdb_pinnableslice_destroy(pin);
    if (blen != v->body_len) {
        dd_errstr_set(errstr, errstr_size,
                      "store: validators record '%.64s' names body %s of %llu "
                      "bytes, stored with %zu",
                      resource_key, v->body_sha256,
                      (unsigned long long)v->body_len, blen);
        err = DD_ERR_FATAL;
        goto out;
    }
    *out = *v;
    *found = true;
out:
    free(v);
    return err;
}

dd_err_t store_body_get(struct store *s, const char *body_sha256,
                        int64_t now_ms, void **body, size_t *len, bool *found,
                        char *errstr, size_t errstr_size)
{
    *body = NULL;
    *len = 0;
    *found = false;
    if (!is_hex64(body_sha256)) {
        dd_errstr_set(errstr, errstr_size,
                      "store_body_get: '%.80s' is not 64 lowercase hex chars",
                      body_sha256);
        return DD_ERR_INVAL;
    }
    rocksdb_pinnableslice_t *pin = NULL;
    const char *b = NULL;
    size_t blen = 0;
    dd_err_t err = body_read(s, "store_body_get", body_sha256, now_ms, &pin,
                             &b, &blen, errstr, errstr_size);
    if (err || !pin)
        return err;
    char *copy = malloc(blen + 1);
    if (!copy) {
        rocksdb_pinnableslice_destroy(pin);
        dd_errstr_set(errstr, errstr_size,
                      "store_body_get(%s): out of memory (%zu bytes)",
                      body_sha256, blen);
        return DD_ERR_NOMEM;
    }
    if (blen)
        memcpy(copy, b, blen);
    copy[blen] = '\0';
    rocksdb_pinnableslice_destroy(pin);
    *body = copy;
    *len = blen;
    *found = true;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* test hook: the record codecs for tests/fuzz/fuzz_record.c and unit      */
/* tests (include/store_codec.h: internal, not an API)                     */

#include "store_codec.h"

_Static_assert(STORE_CODEC_HDR_LEN == STORE_HDR_LEN, "store_codec.h header");
_Static_assert((int)STORE_CODEC_OP == (int)REC_OP
                   && (int)STORE_CODEC_OUTBOX == (int)REC_OUTBOX
                   && (int)STORE_CODEC_ATTEMPT == (int)REC_ATTEMPT
                   && (int)STORE_CODEC_VALIDATOR == (int)REC_VALIDATOR
                   && (int)STORE_CODEC_BODY == (int)REC_BODY,
               "store_codec.h record kinds");

size_t store_codec_op_value_max(void)
{
    return STORE_OP_VALUE_MAX;
}

size_t store_codec_header(enum store_codec_kind kind, int64_t expires_at_ms,
                          unsigned char *out)
{
    struct enc e = {out, STORE_HDR_LEN, 0, false};
    enc_header(&e, (enum rec_type)kind, expires_at_ms);
    return e.len;
}

size_t store_codec_op_encode(const struct store_op *op, unsigned char *buf,
                             size_t cap)
{
    /* op_encode() takes strlen() of each string and asserts it fits */
    if (cap < STORE_OP_VALUE_MAX
        || !memchr(op->request_hash, '\0', sizeof(op->request_hash))
        || !memchr(op->event_key, '\0', sizeof(op->event_key))
        || !memchr(op->lease_owner, '\0', sizeof(op->lease_owner))
        || !memchr(op->source, '\0', sizeof(op->source))
        || !memchr(op->category, '\0', sizeof(op->category)))
        return 0;
    return op_encode(op, buf, cap);
}

dd_err_t store_codec_op_decode(const void *val, size_t len, const char *op_id,
                               struct store_op *op, char *errstr,
                               size_t errstr_size)
{
    return op_decode((const char *)val, len, op_id, op, errstr, errstr_size);
}

dd_err_t store_codec_attempt_decode(const void *val, size_t len,
                                    const char *op_id, uint32_t number,
                                    struct store_attempt *a,
                                    int64_t *expires_at_ms, char *errstr,
                                    size_t errstr_size)
{
    return attempt_decode((const char *)val, len, op_id, number, a,
                          expires_at_ms, errstr, errstr_size);
}

dd_err_t store_codec_outbox_decode(const void *val, size_t len, uint64_t seq,
                                   struct store_codec_outbox *ent,
                                   char *errstr, size_t errstr_size)
{
    struct outbox_entry e;
    memset(&e, 0, sizeof(e));
    dd_err_t err = outbox_decode((const char *)val, len, seq, &e, errstr,
                                 errstr_size);
    if (err)
        return err;
    ent->op_id = e.op_id;
    ent->op_id_len = e.op_id_len;
    ent->event_key = e.event_key;
    ent->event_key_len = e.event_key_len;
    ent->generation = e.generation;
    ent->value = e.value;
    ent->value_len = e.value_len;
    return DD_OK;
}

dd_err_t store_codec_validator_decode(const void *val, size_t len,
                                      const char *key,
                                      struct store_validator *v, char *errstr,
                                      size_t errstr_size)
{
    return validator_decode((const char *)val, len, key, strlen(key), v,
                            errstr, errstr_size);
}

dd_err_t store_codec_body_decode(const void *val, size_t len,
                                 const char *digest, int64_t *expires_at_ms,
                                 const void **body, size_t *body_len,
                                 char *errstr, size_t errstr_size)
{
    const char *b = NULL;
    dd_err_t err = body_decode((const char *)val, len, digest, expires_at_ms,
                               &b, body_len, errstr, errstr_size);
    if (!err)
        *body = b;
    return err;
}
