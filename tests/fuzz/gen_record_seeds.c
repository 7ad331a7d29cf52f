/* Writes the seeds of fuzz_record into tests/fuzz/corpus/record/ (input
 * format: the comment at the top of fuzz_record.c; value layouts:
 * include/store_codec.h).  Deterministic; run again after a layout change:
 *
 *   cc -std=c11 -Wall -Wextra -o /tmp/gen_record_seeds tests/fuzz/gen_record_seeds.c
 *   /tmp/gen_record_seeds tests/fuzz/corpus/record
 *
 * (DIR defaults to corpus/record next to this source as compiled.)  A
 * stand-alone program: libc only, not part of any CMake build.  The random
 * round-trip seeds come from MT19937 seeded with 7, drawn as bytes uniform in
 * 0..255 (9 bits per draw, draws >= 256 dropped): the generator the seeds
 * were first written with, so they stay byte for byte the same. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { LAYOUT_V1 = 1, OP = 1, OUTBOX = 2, ATTEMPT = 5 };
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

/* \p width bytes of \p v, little-endian */
static void le(struct buf *b, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}

/* \p width bytes of \p v, big-endian */
static void be(struct buf *b, uint64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--)
        u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}

/* a string: u16 length (LE) + bytes */
static void str(struct buf *b, const char *s)
{
    size_t len = strlen(s);
    le(b, len, 2);
    put(b, s, len);
}

static void hdr(struct buf *b, unsigned kind, int64_t expires_at, unsigned version)
{
    u8(b, version);
    u8(b, kind);
    for (int i = 0; i < 6; i++)
        u8(b, 0);
    le(b, (uint64_t)expires_at, 8);
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
};

static struct op op_default(void)
{
    return (struct op){
        .state = 1, .ostate = 0, .gen = 1, .lease = 1700000060000,
        .created = 1700000000000, .updated = 1700000000000, .attempts = 0,
        .seq = 0, .rh = H1, .ek = H2, .owner = "host-a#run-1",
        .source = "scrape.jobs/0/42", .category = "", .expires = 1700259200000,
        .kind = OP,
    };
}

static struct buf op(struct op o)
{
    struct buf b = {.n = 0};
    hdr(&b, o.kind, o.expires, LAYOUT_V1);
    u8(&b, o.state);
    u8(&b, o.ostate);
    le(&b, o.gen, 8);
    le(&b, (uint64_t)o.lease, 8);
    le(&b, (uint64_t)o.created, 8);
    le(&b, (uint64_t)o.updated, 8);
    le(&b, o.attempts, 4);
    le(&b, o.seq, 8);
    str(&b, o.rh);
    str(&b, o.ek);
    str(&b, o.owner);
    str(&b, o.source);
    str(&b, o.category);
    if (o.state == 2)
        le(&b, (uint64_t)o.not_before, 8);
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
    struct buf b = {.n = 0};
    hdr(&b, ATTEMPT, a.expires, LAYOUT_V1);
    le(&b, a.number, 4);
    le(&b, a.gen, 8);
    le(&b, (uint64_t)a.started, 8);
    le(&b, (uint64_t)a.ended, 8);
    le(&b, (uint64_t)a.status & 0xffffffffu, 4);
    le(&b, a.nbytes, 8);
    str(&b, a.session);
    str(&b, a.exit_addr);
    str(&b, a.category);
    str(&b, a.error);
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

static struct buf outbox(struct outbox o)
{
    struct buf b = {.n = 0};
    size_t vlen = strlen(o.value);
    hdr(&b, OUTBOX, o.expires, LAYOUT_V1);
    str(&b, o.op_id);
    str(&b, o.ek);
    le(&b, o.gen, 8);
    le(&b, vlen, 4);
    put(&b, o.value, vlen);
    return b;
}

/* MODE, key (idsel, u32 number, u64 seq; big-endian), value */
static struct buf garbage(unsigned mode, struct buf value, unsigned idsel, uint32_t number,
                          uint64_t seq)
{
    struct buf b = {.n = 0};
    u8(&b, mode);
    u8(&b, idsel);
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

    emit("op_running", garbage(0, op(op_default()), 0, 0, 0));
    o = op_default(), o.state = 3, o.ostate = 1, o.seq = 4097, o.attempts = 2;
    emit("op_complete_pending", garbage(0, op(o), 1, 0, 0));
    o = op_default(), o.state = 4, o.ostate = 2, o.category = "proxy_auth", o.owner = "";
    emit("op_failed_sent", garbage(0, op(o), 3, 0, 0));
    char t255[256], o127[128], c31[32];
    memset(t255, 't', 255), t255[255] = '\0';
    memset(o127, 'o', 127), o127[127] = '\0';
    memset(c31, 'c', 31), c31[31] = '\0';
    o = op_default(), o.state = 2, o.source = t255, o.owner = o127, o.category = c31,
    o.not_before = 1700000030000;
    emit("op_retryable_long_source", garbage(0, op(o), 2, 0, 0));
    o = op_default(), o.state = 9;
    emit("op_bad_state", garbage(0, op(o), 0, 0, 0));
    o = op_default(), o.ostate = 3;
    emit("op_bad_outbox_state", garbage(0, op(o), 0, 0, 0));
    o = op_default(), o.kind = OUTBOX;
    emit("op_wrong_type", garbage(0, op(o), 0, 0, 0));
    emit("op_truncated", garbage(0, drop_tail(op(op_default()), 5), 0, 0, 0));
    struct buf v = op(op_default());
    u8(&v, 0);
    emit("op_trailing_byte", garbage(0, v, 0, 0, 0));
    o = op_default(), o.rh = H1 "0";
    emit("op_hash_too_long", garbage(0, op(o), 0, 0, 0));
    v = (struct buf){.n = 0};
    hdr(&v, OP, 0, 2);
    struct buf rest = op(op_default());
    put(&v, rest.d + 16, rest.n - 16);
    emit("op_newer_layout", garbage(0, v, 0, 0, 0));

    a = attempt_default(), a.number = 3;
    emit("attempt_ok", garbage(1, attempt(a), 0, 3, 0));
    a = attempt_default(), a.number = 1, a.status = 0, a.category = "proxy",
    a.error = "CONNECT tunnel failed, response 407";
    emit("attempt_failed", garbage(1, attempt(a), 3, 1, 0));
    a = attempt_default(), a.number = 2;
    emit("attempt_number_mismatch", garbage(1, attempt(a), 0, 3, 0));
    emit("attempt_truncated", garbage(1, cut(attempt(attempt_default()), 30), 0, 1, 0));

    emit("outbox_ok", garbage(2, outbox(outbox_default()), 0, 0, 4097));
    x = outbox_default(), x.value = "";
    emit("outbox_empty_value", garbage(2, outbox(x), 0, 0, 1));
    x = outbox_default(), x.op_id = "";
    emit("outbox_no_op_id", garbage(2, outbox(x), 0, 0, 2));
    emit("outbox_value_len_too_big", garbage(2, drop_tail(outbox(outbox_default()), 1), 0, 0, 3));
    v = (struct buf){.n = 0};
    u8(&v, 1);
    u8(&v, 2);
    for (int i = 0; i < 10; i++)
        u8(&v, 0);
    emit("outbox_short", garbage(2, v, 0, 0, 0));
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
