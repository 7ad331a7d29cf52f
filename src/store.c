/*
 * store.c: the op lifecycle store on RocksDB (the only RocksDB user).
 *
 * On-disk layout V1 (see store.h for the 16-byte header of expiring records):
 *
 *   ops        key op_id
 *              value header(type OP) u8 state, u8 outbox_state, u64 generation,
 *                    i64 lease_expires_at, i64 created_at, i64 updated_at,
 *                    u32 attempts, u64 outbox_seq, then the strings
 *                    request_hash, event_key, lease_owner, source, category
 *   outbox     key u64 seq, big-endian (iteration order = sequence order)
 *              value header(type OUTBOX, expires_at 0) str op_id, str event_key,
 *                    u64 generation, u32 value_len, value bytes
 *   conflicts  key op_id "\n" request_hash
 *              value header(type CONFLICT) i64 first_seen_at
 *   seen       key caller bytes
 *              value header(type SEEN) i64 created_at
 *   meta       "layout_version"       u32 LE (kept trivially simple so that every
 *                                     past and future dedupd can read it)
 *              "outbox_seq_reserved"  u64 LE: sequence numbers below it may have
 *                                     been handed out; a restart starts above it
 *
 * Integers are little-endian (except outbox keys), strings are u16 length +
 * bytes.  Decoding is bounds checked; anything unexpected is DD_ERR_FATAL.
 *
 * Expiry: a record is expired when expires_at < now (C-28: written at t with
 * TTL d it is still live at t + d).  Reads and the compaction filter use the
 * same test, record_expired().
 */
#include "store.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rocksdb/c.h>

#include "log.h"

#define STORE_HDR_LEN 16
#define STORE_STRIPES 256
#define STORE_SEQ_BLOCK 1024 /* outbox seqs reserved in meta per write */

#define STORE_DEF_OPS_TTL_MS (72LL * 3600 * 1000)
#define STORE_DEF_FAILED_TTL_MS (1LL * 3600 * 1000)
#define STORE_DEF_LEASE_MS (60LL * 1000)
#define STORE_DEF_CACHE_BYTES ((size_t)64 << 20)
#define STORE_WRITE_BUFFER_BYTES ((size_t)32 << 20)

/* an op record: header + fixed fields + 5 strings with u16 lengths */
#define STORE_OP_VALUE_MAX                                                    \
    (STORE_HDR_LEN + 1 + 1 + 8 + 8 + 8 + 8 + 4 + 8 + 5 * 2 + STORE_HASH_LEN * 2 \
     + STORE_OWNER_MAX + STORE_SOURCE_MAX + STORE_CATEGORY_MAX)

enum rec_type {
    REC_OP = 1,
    REC_OUTBOX = 2,
    REC_CONFLICT = 3,
    REC_SEEN = 4,
};

enum store_cf {
    CF_DEFAULT,
    CF_OPS,
    CF_OUTBOX,
    CF_CONFLICTS,
    CF_SEEN,
    CF_META,
    CF_N
};

static const char *const cf_names[CF_N] = {
    "default", "ops", "outbox", "conflicts", "seen", "meta",
};

static const char META_LAYOUT_KEY[] = "layout_version";
static const char META_SEQ_KEY[] = "outbox_seq_reserved";

struct store {
    rocksdb_t *db;
    rocksdb_options_t *opts;     /* DB options; default, outbox, meta CFs */
    rocksdb_options_t *ttl_opts; /* ops, conflicts, seen: + TTL filter */
    rocksdb_block_based_table_options_t *bbto;
    rocksdb_cache_t *cache;
    rocksdb_compactionfilter_t *filter;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
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

    char *path;
    char owner[STORE_OWNER_MAX + 1];        /* "<instance>#<run_id>" */
    char owner_prefix[STORE_OWNER_MAX + 1]; /* "<instance>#" */
    int64_t ops_ttl_ms;
    int64_t failed_ttl_ms;
    int64_t lease_ms;
};

/* ---------------------------------------------------------------------- */
/* little helpers                                                          */

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t store_clock_ms(struct store *s)
{
    int64_t c = atomic_load(&s->filter_clock_ms);
    return c ? c : wall_ms();
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
    /* FNV-1a */
    const unsigned char *p = key;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h % STORE_STRIPES;
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
    if (d.bad || d.off != d.len || state < STORE_OP_RUNNING
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
    rocksdb_put_cf(s->db, s->wopts, s->cf[CF_OPS], op_id, strlen(op_id),
                   (const char *)buf, len, &rerr);
    if (rerr)
        return rdb_fail(rerr, "rocksdb_put_cf(ops)", op_id, errstr,
                        errstr_size);
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
}

static bool is_ttl_cf(int i)
{
    return i == CF_OPS || i == CF_CONFLICTS || i == CF_SEEN;
}

/* Open with our CFs plus any a newer layout added (so its meta is readable). */
static dd_err_t db_open(struct store *s, char *errstr, size_t errstr_size)
{
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
    if (conf->ops_ttl_ms < 0 || conf->failed_ttl_ms < 0 || conf->lease_ms < 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store_open: negative ops_ttl_ms, failed_ttl_ms or "
                      "lease_ms");
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
    atomic_init(&s->filter_clock_ms, 0);
    atomic_init(&s->next_seq, 1);
    atomic_init(&s->seq_reserved, 1);
    atomic_init(&s->pending, 0);

    for (; s->stripes_init < STORE_STRIPES; s->stripes_init++)
        pthread_mutex_init(&s->stripes[s->stripes_init], NULL);
    pthread_mutex_init(&s->seq_mu, NULL);
    s->seq_mu_init = true;

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
    for (int i = 0; i < s->stripes_init; i++)
        pthread_mutex_destroy(&s->stripes[i]);
    if (s->seq_mu_init)
        pthread_mutex_destroy(&s->seq_mu);
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

static pthread_mutex_t *stripe(struct store *s, const char *op_id)
{
    return &s->stripes[stripe_of(op_id, strlen(op_id))];
}

dd_err_t store_claim(struct store *s, const char *op_id,
                     const char *request_hash, const char *event_key,
                     const char *source, int64_t now_ms,
                     enum store_claim_result *result, struct store_op *op,
                     char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_claim", op_id, errstr, errstr_size);
    if (err)
        return err;
    size_t hlen = strlen(request_hash), elen = strlen(event_key);
    if (hlen == 0 || hlen > STORE_HASH_LEN || elen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "store_claim(%.64s): request_hash of %zu bytes or "
                      "event_key of %zu bytes (at most %d)",
                      op_id, hlen, elen, STORE_HASH_LEN);
        return DD_ERR_INVAL;
    }

    pthread_mutex_t *mu = stripe(s, op_id);
    pthread_mutex_lock(mu);
    struct store_op cur;
    bool found = false;
    memset(&cur, 0, sizeof(cur));
    err = op_read(s, op_id, now_ms, false, &cur, &found, errstr, errstr_size);
    if (err)
        goto out;

    if (!found) {
        /* absent or expired: a new op (an expired record is overwritten) */
        memset(&cur, 0, sizeof(cur));
        cur.state = STORE_OP_RUNNING;
        cur.outbox_state = STORE_OUTBOX_NONE;
        cur.generation = 1;
        cur.lease_expires_at_ms = add_ms(now_ms, s->lease_ms);
        cur.created_at_ms = now_ms;
        cur.updated_at_ms = now_ms;
        /* a running record expires too, or a crash would leak it */
        cur.expires_at_ms = add_ms(now_ms, s->ops_ttl_ms);
        memcpy(cur.request_hash, request_hash, hlen + 1);
        memcpy(cur.event_key, event_key, elen + 1);
        snprintf(cur.lease_owner, sizeof(cur.lease_owner), "%s", s->owner);
        snprintf(cur.source, sizeof(cur.source), "%s", source);
        err = op_write(s, op_id, &cur, errstr, errstr_size);
        if (err)
            goto out;
        *result = STORE_CLAIM_NEW;
    } else if (strcmp(cur.request_hash, request_hash) != 0) {
        *result = STORE_CLAIM_CONFLICT; /* record untouched */
    } else if (cur.state == STORE_OP_COMPLETE || cur.state == STORE_OP_FAILED) {
        *result = STORE_CLAIM_DUPLICATE;
    } else if (strcmp(cur.lease_owner, s->owner) == 0) {
        *result = STORE_CLAIM_DUPLICATE; /* in flight here */
    } else if (record_expired(cur.lease_expires_at_ms, now_ms)
               || strncmp(cur.lease_owner, s->owner_prefix,
                          strlen(s->owner_prefix))
                      == 0) {
        /* expired lease, or a lease of a previous run of this instance */
        cur.state = STORE_OP_RUNNING;
        cur.generation++;
        snprintf(cur.lease_owner, sizeof(cur.lease_owner), "%s", s->owner);
        cur.lease_expires_at_ms = add_ms(now_ms, s->lease_ms);
        cur.updated_at_ms = now_ms;
        cur.expires_at_ms = add_ms(now_ms, s->ops_ttl_ms);
        err = op_write(s, op_id, &cur, errstr, errstr_size);
        if (err)
            goto out;
        *result = STORE_CLAIM_RECLAIMED;
    } else {
        *result = STORE_CLAIM_DUPLICATE; /* in flight elsewhere */
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

/* Fencing: running, leased by this run, at generation.  Caller holds lock. */
static dd_err_t fence(struct store *s, const char *fn, const char *op_id,
                      uint64_t generation, int64_t now_ms, struct store_op *op,
                      char *errstr, size_t errstr_size)
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
    if (op->state != STORE_OP_RUNNING) {
        dd_errstr_set(errstr, errstr_size, "%s(%.64s): op is %s, not running",
                      fn, op_id, store_op_state2str(op->state));
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

dd_err_t store_lease_renew(struct store *s, const char *op_id,
                           uint64_t generation, int64_t now_ms, char *errstr,
                           size_t errstr_size)
{
    dd_err_t err = check_op_id("store_lease_renew", op_id, errstr,
                               errstr_size);
    if (err)
        return err;
    pthread_mutex_t *mu = stripe(s, op_id);
    pthread_mutex_lock(mu);
    struct store_op op;
    err = fence(s, "store_lease_renew", op_id, generation, now_ms, &op, errstr,
                errstr_size);
    if (err)
        goto out;
    op.lease_expires_at_ms = add_ms(now_ms, s->lease_ms);
    op.updated_at_ms = now_ms;
    /* a leased record must not expire under its holder */
    if (op.expires_at_ms < op.lease_expires_at_ms)
        op.expires_at_ms = op.lease_expires_at_ms;
    err = op_write(s, op_id, &op, errstr, errstr_size);
out:
    pthread_mutex_unlock(mu);
    return err;
}

dd_err_t store_complete(struct store *s, const char *op_id,
                        uint64_t generation, enum store_op_state state,
                        const char *category, uint32_t attempts,
                        const void *value, size_t value_len, int64_t now_ms,
                        uint64_t *seq, char *errstr, size_t errstr_size)
{
    dd_err_t err = check_op_id("store_complete", op_id, errstr, errstr_size);
    if (err)
        return err;
    if (state != STORE_OP_COMPLETE && state != STORE_OP_FAILED) {
        dd_errstr_set(errstr, errstr_size,
                      "store_complete(%.64s): final state must be complete or "
                      "failed, not %s",
                      op_id, store_op_state2str(state));
        return DD_ERR_INVAL;
    }
    if (!category)
        category = "";
    size_t clen = strlen(category);
    if (clen > STORE_CATEGORY_MAX || value_len > UINT32_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "store_complete(%.64s): category of %zu bytes (at most "
                      "%d) or value of %zu bytes (at most %u)",
                      op_id, clen, STORE_CATEGORY_MAX, value_len, UINT32_MAX);
        return DD_ERR_INVAL;
    }

    pthread_mutex_t *mu = stripe(s, op_id);
    unsigned char *obuf = NULL;
    rocksdb_writebatch_t *batch = NULL;
    pthread_mutex_lock(mu);
    struct store_op op;
    err = fence(s, "store_complete", op_id, generation, now_ms, &op, errstr,
                errstr_size);
    if (err)
        goto out;
    uint64_t n = 0;
    err = seq_alloc(s, &n, errstr, errstr_size);
    if (err)
        goto out;

    op.state = state;
    snprintf(op.category, sizeof(op.category), "%s", category);
    op.attempts = attempts;
    op.outbox_state = STORE_OUTBOX_PENDING;
    op.outbox_seq = n;
    op.updated_at_ms = now_ms;
    op.expires_at_ms = add_ms(now_ms, state == STORE_OP_COMPLETE
                                          ? s->ops_ttl_ms
                                          : s->failed_ttl_ms);
    unsigned char vbuf[STORE_OP_VALUE_MAX];
    size_t vlen = op_encode(&op, vbuf, sizeof(vbuf));

    size_t idlen = strlen(op_id);
    size_t ocap = STORE_HDR_LEN + 2 + idlen + 2 + STORE_HASH_LEN + 8 + 4
                  + value_len;
    obuf = malloc(ocap);
    if (!obuf) {
        dd_errstr_set(errstr, errstr_size,
                      "store_complete(%.64s): out of memory (%zu bytes)",
                      op_id, ocap);
        err = DD_ERR_NOMEM;
        goto out;
    }
    struct enc e = {obuf, ocap, 0, false};
    enc_header(&e, REC_OUTBOX, 0);
    enc_str(&e, op_id, idlen);
    enc_str(&e, op.event_key, strlen(op.event_key));
    enc_u64(&e, op.generation);
    enc_u32(&e, (uint32_t)value_len);
    enc_bytes(&e, value, value_len);
    assert(!e.overflow);
    unsigned char key[8];
    put_be64(key, n);

    batch = rocksdb_writebatch_create();
    rocksdb_writebatch_put_cf(batch, s->cf[CF_OPS], op_id, idlen,
                              (const char *)vbuf, vlen);
    rocksdb_writebatch_put_cf(batch, s->cf[CF_OUTBOX], (const char *)key,
                              sizeof(key), (const char *)obuf, e.len);
    char *rerr = NULL;
    rocksdb_write(s->db, s->wopts, batch, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_write(ops+outbox)", op_id, errstr,
                       errstr_size);
        goto out;
    }
    atomic_fetch_add(&s->pending, 1);
    *seq = n;
out:
    pthread_mutex_unlock(mu);
    if (batch)
        rocksdb_writebatch_destroy(batch);
    free(obuf);
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
    pthread_mutex_t *mu = stripe(s, op_id);
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
    rocksdb_write(s->db, s->wopts, batch, &rerr);
    if (rerr) {
        err = rdb_fail(rerr, "rocksdb_write(outbox ack)", op_id, errstr,
                       errstr_size);
        goto out;
    }
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

    pthread_mutex_t *mu = stripe(s, op_id);
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
    pthread_mutex_t *mu = stripe(s, op_id);
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
        goto out;
    }
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
