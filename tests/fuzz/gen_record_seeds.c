/* Writes the seeds of fuzz_record into tests/fuzz/corpus/record/ (input
 * format: the comment at the top of fuzz_record.c; value layouts:
 * include/store_codec.h).  The records are written by the store's own codec
 * (src/store_codec.c), then, for the refused ones, cut or edited byte by
 * byte.  Deterministic; run again after a layout change:
 *
 *   cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -o /tmp/gen_record_seeds \
 *      tests/fuzz/gen_record_seeds.c src/store_codec.c src/jstr.c src/err.c
 *   /tmp/gen_record_seeds tests/fuzz/corpus/record
 *
 * (DIR defaults to corpus/record next to this source as compiled.)  The unit
 * build compiles it too, and its test fuzz_record_seeds_fresh fails when the
 * seeds in the tree differ from what it writes now.  The random round-trip
 * seeds come from MT19937 seeded with 7, drawn as bytes uniform in 0..255
 * (9 bits per draw, draws >= 256 dropped): the generator the seeds were
 * first written with, so they stay byte for byte the same. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_codec.h"

#define H1 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define H2 "d5f2c9b8922559659be1d83a639c2adf8e49517b47c02eee35a4099edae2d3ec"

struct buf {
    unsigned char d[2048];
    size_t n;
};

static void put(struct buf *b, const void *p, size_t len)
{
    if (b->n + len > sizeof(b->d)) {
        fprintf(stderr, "gen_record_seeds: seed too large\n");
        exit(1);
    }
    memcpy(b->d + b->n, p, len);
    b->n += len;
}

static void u8(struct buf *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}

/* \p width bytes of \p v, big-endian */
static void be(struct buf *b, uint64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--)
        u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}

struct op {
    unsigned state, ostate;
    uint64_t gen;
    int64_t lease, created, updated;
    uint32_t attempts;
    uint64_t seq;
    const char *rh, *ek, *owner, *source, *category;
    int64_t expires;
    unsigned kind;
    int64_t not_before;   /* written in state 2 (retryable) only */
    uint32_t retry_epoch; /* header bytes 4..7 */
};

static struct op op_default(void)
{
    return (struct op){
        .state = 1, .ostate = 0, .gen = 1, .lease = 1700000060000,
        .created = 1700000000000, .updated = 1700000000000, .attempts = 0,
        .seq = 0, .rh = H1, .ek = H2, .owner = "host-a#run-1",
        .source = "scrape.jobs/0/42", .category = "", .expires = 1700259200000,
        .kind = STORE_CODEC_OP,
    };
}

static void die(const char *what)
{
    fprintf(stderr, "gen_record_seeds: %s\n", what);
    exit(1);
}

static void copy_str(char *dst, size_t size, const char *src)
{
    if (strlen(src) >= size)
        die("string too long for its field");
    memcpy(dst, src, strlen(src) + 1);
}

/* The store's op record of \p o (state and outbox state as given, in range
 * or not), then its type byte set to o.kind. */
static struct buf op(struct op o)
{
    struct store_op s;
    memset(&s, 0, sizeof(s));
    s.state = (enum store_op_state)o.state;
    s.outbox_state = (enum store_outbox_state)o.ostate;
    s.generation = o.gen;
    s.lease_expires_at_ms = o.lease;
    s.created_at_ms = o.created;
    s.updated_at_ms = o.updated;
    s.expires_at_ms = o.expires;
    s.attempts = o.attempts;
    s.outbox_seq = o.seq;
    s.not_before_ms = o.not_before;
    s.retry_epoch = o.retry_epoch;
    copy_str(s.request_hash, sizeof(s.request_hash), o.rh);
    copy_str(s.event_key, sizeof(s.event_key), o.ek);
    copy_str(s.lease_owner, sizeof(s.lease_owner), o.owner);
    copy_str(s.source, sizeof(s.source), o.source);
    copy_str(s.category, sizeof(s.category), o.category);
    struct buf b = {.n = 0};
    b.n = store_codec_op_encode(&s, b.d, sizeof(b.d));
    if (!b.n)
        die("op did not encode");
    b.d[1] = (unsigned char)o.kind;
    return b;
}

/* \p b, an op record, with one more byte \p c at the end of its
 * request_hash (a string longer than its field). */
static struct buf op_hash_longer(struct buf b, unsigned char c)
{
    /* header, 2 u8, 4 i64, u32, u64: the request_hash's u16 length */
    const size_t at = STORE_CODEC_HDR_LEN + 2 + 4 * 8 + 4 + 8;
    size_t len = (size_t)(b.d[at] | b.d[at + 1] << 8);
    size_t end = at + 2 + len;
    if (b.n + 1 > sizeof(b.d) || len + 1 > 0xffff)
        die("op_hash_longer");
    memmove(b.d + end + 1, b.d + end, b.n - end);
    b.d[end] = c;
    b.d[at] = (unsigned char)(len + 1);
    b.d[at + 1] = (unsigned char)((len + 1) >> 8);
    b.n++;
    return b;
}

struct attempt {
    uint32_t number;
    uint64_t gen;
    int64_t started, ended;
    int64_t status;
    uint64_t nbytes;
    const char *session, *exit_addr, *category, *error;
    int64_t expires;
};

static struct attempt attempt_default(void)
{
    return (struct attempt){
        .number = 1, .gen = 1, .started = 1700000000000, .ended = 1700000000350,
        .status = 200, .nbytes = 5120, .session = "prov-a-17",
        .exit_addr = "127.0.0.2:18888", .category = "", .error = "",
        .expires = 1700259200000,
    };
}

static struct buf attempt(struct attempt a)
{
    struct store_attempt s;
    memset(&s, 0, sizeof(s));
    s.number = a.number;
    s.generation = a.gen;
    s.started_at_ms = a.started;
    s.ended_at_ms = a.ended;
    s.status = (int32_t)(uint32_t)((uint64_t)a.status & 0xffffffffu);
    s.bytes = a.nbytes;
    copy_str(s.session, sizeof(s.session), a.session);
    copy_str(s.exit_addr, sizeof(s.exit_addr), a.exit_addr);
    copy_str(s.category, sizeof(s.category), a.category);
    copy_str(s.error, sizeof(s.error), a.error);
    struct buf b = {.n = 0};
    b.n = store_codec_attempt_encode(&s, a.expires, b.d, sizeof(b.d));
    if (!b.n)
        die("attempt did not encode");
    return b;
}

struct outbox {
    const char *op_id, *ek;
    uint64_t gen;
    const char *value;
    int64_t expires;
};

static struct outbox outbox_default(void)
{
    return (struct outbox){
        .op_id = "default:order-1001", .ek = H2, .gen = 1,
        .value = "{\"status\":200}", .expires = 0,
    };
}

/* The store writes outbox entries with expires_at 0: o.expires goes into
 * the header afterwards. */
static struct buf outbox(struct outbox o)
{
    const struct store_codec_outbox e = {
        .op_id = o.op_id, .op_id_len = strlen(o.op_id), .event_key = o.ek,
        .event_key_len = strlen(o.ek), .generation = o.gen,
        .value = o.value, .value_len = strlen(o.value)};
    struct buf b = {.n = 0};
    b.n = store_codec_outbox_encode(&e, b.d, sizeof(b.d));
    if (!b.n)
        die("outbox entry did not encode");
    store_codec_le64_put(b.d + 8, (uint64_t)o.expires);
    return b;
}

/* An entry naming its body (the value is the prefix, "}" the suffix). */
static struct buf outbox_named(struct outbox o)
{
    const struct store_codec_outbox e = {
        .op_id = o.op_id, .op_id_len = strlen(o.op_id), .event_key = o.ek,
        .event_key_len = strlen(o.ek), .generation = o.gen,
        .value = o.value, .value_len = strlen(o.value),
        .body_sha256 = "5f2b8e3a9c1d4e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f",
        .body_len = 14000, .literal_len = 14002,
        .written_at_ms = 1764000000123, .suffix = "}", .suffix_len = 1};
    struct buf b = {.n = 0};
    b.n = store_codec_outbox_encode(&e, b.d, sizeof(b.d));
    if (!b.n)
        die("outbox entry naming its body did not encode");
    return b;
}

/* OP_ID of the input: u16 length - 1 (big-endian), the bytes (no NUL) */
static void op_id(struct buf *b, const char *id)
{
    size_t n = strlen(id);
    if (n < 1 || n > STORE_KEY_MAX)
        die("op_id of 1..STORE_KEY_MAX bytes");
    be(b, n - 1, 2);
    put(b, id, n);
}

/* MODE, key (OP_ID, u32 number, u64 seq; big-endian), value */
static struct buf garbage(unsigned mode, struct buf value, const char *id,
                          uint32_t number, uint64_t seq)
{
    struct buf b = {.n = 0};
    u8(&b, mode);
    op_id(&b, id);
    be(&b, number, 4);
    be(&b, seq, 8);
    put(&b, value.d, value.n);
    return b;
}

static struct buf cut(struct buf b, size_t n)
{
    b.n = n;
    return b;
}

static struct buf drop_tail(struct buf b, size_t k)
{
    b.n -= k;
    return b;
}

/* ---- MT19937 */
static uint32_t mt[624];
static int mti;

static void mt_init(uint32_t s)
{
    mt[0] = s;
    for (mti = 1; mti < 624; mti++)
        mt[mti] = 1812433253u * (mt[mti - 1] ^ (mt[mti - 1] >> 30)) + (uint32_t)mti;
}

static void mt_init_by_array(const uint32_t *key, int len)
{
    mt_init(19650218u);
    int i = 1, j = 0;
    for (int k = 624 > len ? 624 : len; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] +
                (uint32_t)j;
        i++;
        j++;
        if (i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
        if (j >= len)
            j = 0;
    }
    for (int k = 623; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    mti = 624;
}

static uint32_t mt_next(void)
{
    static const uint32_t mag01[2] = {0, 0x9908b0dfu};
    if (mti >= 624) {
        int k;
        uint32_t y;
        for (k = 0; k < 624 - 397; k++) {
            y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7fffffffu);
            mt[k] = mt[k + 397] ^ (y >> 1) ^ mag01[y & 1];
        }
        for (; k < 623; k++) {
            y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7fffffffu);
            mt[k] = mt[k + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1];
        }
        y = (mt[623] & 0x80000000u) | (mt[0] & 0x7fffffffu);
        mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 1];
        mti = 0;
    }
    uint32_t y = mt[mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* a byte uniform in 0..255: 9 random bits, drawn again while >= 256 */
static unsigned rand_byte(void)
{
    uint32_t r;
    do
        r = mt_next() >> (32 - 9);
    while (r >= 256);
    return r;
}

static struct buf random_seed(const unsigned char *prefix, size_t plen, size_t n)
{
    struct buf b = {.n = 0};
    put(&b, prefix, plen);
    for (size_t i = 0; i < n; i++)
        u8(&b, rand_byte());
    return b;
}

/* ---- output */
static const char *g_dir;
static int g_count;

static void emit(const char *name, struct buf b)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (b.n && fwrite(b.d, 1, b.n, f) != b.n) || fclose(f)) {
        fprintf(stderr, "gen_record_seeds: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    g_count++;
}

static void mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    if (mkdir(path, 0755) && errno != EEXIST) {
        fprintf(stderr, "gen_record_seeds: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    char dir[4096];
    if (argc > 2) {
        fprintf(stderr, "usage: gen_record_seeds [DIR]   (tests/fuzz/corpus/record)\n");
        return 2;
    }
    if (argc == 2)
        snprintf(dir, sizeof(dir), "%s", argv[1]);
    else {
        const char *src = __FILE__, *slash = strrchr(src, '/');
        if (slash)
            snprintf(dir, sizeof(dir), "%.*s/corpus/record", (int)(slash - src), src);
        else
            snprintf(dir, sizeof(dir), "corpus/record");
    }
    mkdirs(dir);
    g_dir = dir;

    struct op o;
    struct attempt a;
    struct outbox x;

    /* op_ids: job.c makes them "scope:job_key" (a job_key is any UTF-8
     * without control characters) or a request_hash; the decoders quote
     * them cut at 64 bytes */
    const char *id = "default:order-1001";
    char o64[65], o65[66], o512[STORE_KEY_MAX + 1], cut64[70];
    memset(o64, 'o', 64), o64[64] = '\0';
    memset(o65, 'o', 65), o65[65] = '\0';
    memset(o512, 'o', STORE_KEY_MAX), o512[STORE_KEY_MAX] = '\0';
    /* "api:" + 59 x + "caf\u00e9-1": the e-acute (2 bytes) at 63..64, cut
     * by a quote of 64 bytes */
    memcpy(cut64, "api:", 4);
    memset(cut64 + 4, 'x', 59);
    memcpy(cut64 + 63, "\xc3\xa9-1", 5);
    const char *utf8 = "default:\xe6\xb3\xa8\xe6\x96\x87-\xf0\x9f\x93\xa6-7";

    emit("op_running", garbage(0, op(op_default()), id, 0, 0));
    o = op_default(), o.state = 3, o.ostate = 1, o.seq = 4097, o.attempts = 2;
    emit("op_complete_pending", garbage(0, op(o), o64, 0, 0));
    o = op_default(), o.state = 4, o.ostate = 2, o.category = "proxy_auth", o.owner = "";
    emit("op_failed_sent", garbage(0, op(o), o512, 0, 0));
    o = op_default(), o.state = 4, o.ostate = 2, o.category = "client_error",
    o.gen = 3, o.retry_epoch = 2;
    emit("op_failed_retry_epoch", garbage(0, op(o), id, 0, 0));
    char t255[256], o127[128], c31[32];
    memset(t255, 't', 255), t255[255] = '\0';
    memset(o127, 'o', 127), o127[127] = '\0';
    memset(c31, 'c', 31), c31[31] = '\0';
    o = op_default(), o.state = 2, o.source = t255, o.owner = o127, o.category = c31,
    o.not_before = 1700000030000;
    emit("op_retryable_long_source", garbage(0, op(o), o65, 0, 0));
    o = op_default(), o.state = 9;
    emit("op_bad_state", garbage(0, op(o), id, 0, 0));
    o = op_default(), o.ostate = 3;
    emit("op_bad_outbox_state", garbage(0, op(o), utf8, 0, 0));
    o = op_default(), o.kind = STORE_CODEC_OUTBOX;
    emit("op_wrong_type", garbage(0, op(o), cut64, 0, 0));
    emit("op_truncated", garbage(0, drop_tail(op(op_default()), 5), cut64, 0, 0));
    struct buf v = op(op_default());
    u8(&v, 0xa5); /* any byte after the last field, not only 0 */
    emit("op_trailing_byte", garbage(0, v, id, 0, 0));
    emit("op_hash_too_long", garbage(0, op_hash_longer(op(op_default()), '0'),
                                     id, 0, 0));
    v = op(op_default());
    v.d[0] = 2; /* a newer layout version, expires_at 0 */
    store_codec_le64_put(v.d + 8, 0);
    emit("op_newer_layout", garbage(0, v, id, 0, 0));

    a = attempt_default(), a.number = 3;
    emit("attempt_ok", garbage(1, attempt(a), id, 3, 0));
    a = attempt_default(), a.number = 1, a.status = 0, a.category = "proxy",
    a.error = "CONNECT tunnel failed, response 407";
    emit("attempt_failed", garbage(1, attempt(a), o512, 1, 0));
    a = attempt_default(), a.number = 2;
    emit("attempt_number_mismatch", garbage(1, attempt(a), cut64, 3, 0));
    emit("attempt_truncated", garbage(1, cut(attempt(attempt_default()), 30), utf8, 1, 0));

    emit("outbox_ok", garbage(2, outbox(outbox_default()), id, 0, 4097));
    x = outbox_default(), x.value = "";
    emit("outbox_empty_value", garbage(2, outbox(x), id, 0, 1));
    x = outbox_default(), x.op_id = "";
    emit("outbox_no_op_id", garbage(2, outbox(x), id, 0, 2));
    emit("outbox_value_len_too_big", garbage(2, drop_tail(outbox(outbox_default()), 1), id, 0, 3));
    emit("outbox_names_its_body", garbage(2, outbox_named(outbox_default()), id, 0, 4098));
    emit("outbox_names_its_body_cut", garbage(2, drop_tail(outbox_named(outbox_default()), 2), id, 0, 4099));
    v = (struct buf){.n = 0};
    u8(&v, 1);
    u8(&v, 2);
    for (int i = 0; i < 10; i++)
        u8(&v, 0);
    emit("outbox_short", garbage(2, v, id, 0, UINT64_MAX));
    emit("empty", (struct buf){.n = 0});

    uint32_t key[1] = {7};
    mt_init_by_array(key, 1);
    static const struct {
        unsigned mode;
        const char *name;
    } rt[] = {{3, "roundtrip_op"}, {4, "roundtrip_attempt"}, {5, "roundtrip_outbox"}};
    static const size_t sizes[] = {24, 120, 700};
    for (size_t m = 0; m < 3; m++) {
        for (size_t i = 0; i < 3; i++) {
            char name[64];
            unsigned char mode = (unsigned char)rt[m].mode;
            snprintf(name, sizeof(name), "%s_%zu", rt[m].name, i);
            emit(name, random_seed(&mode, 1, sizes[i]));
        }
    }
    static const unsigned char in_range[] = {3, 3, 1};
    emit("roundtrip_op_in_range", random_seed(in_range, sizeof(in_range), 300));

    printf("%d seeds in %s\n", g_count, dir);
    return 0;
}
