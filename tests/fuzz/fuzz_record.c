/*
 * fuzz_record.c - the store's record codec (include/store_codec.h,
 * src/store_codec.c): the op, attempt and outbox decoders and encoders,
 * called directly.
 *
 * Input: MODE (1 byte, taken modulo 6), then
 *  - modes 0, 1, 2 (garbage): OP_ID (the key's op_id: 2 bytes, big-endian,
 *    its length 1 + n % STORE_KEY_MAX, then that many bytes of the input, a
 *    0 byte read as 1: the decoders take a C string; cut short where the
 *    input ends, "o" when no byte is left), NUMBER (4 bytes, big-endian: the attempt
 *    number of the key), SEQ (8 bytes, big-endian: the outbox key), then the
 *    value bytes, decoded as an op (0), attempt (1) or outbox (2) record;
 *  - modes 3, 4, 5 (round trip): bytes from which an op (3), attempt (4) or
 *    outbox entry (5) is built, encoded and decoded again: the record's
 *    fields (an outbox entry's SEQ of its own after its generation), CUT
 *    (2 bytes: where the truncation check cuts), EXTRA (1 byte: what the
 *    appended-byte check appends), the record's strings, then (op, attempt)
 *    the key's OP_ID as above, then (op) its RETRY_EPOCH (4 bytes,
 *    big-endian; 0 where the input ends) (see roundtrip_*()).
 *
 * Properties, abort() on violation:
 *  - every refusal is DD_ERR_FATAL with a reason by fuzz_check_text()
 *    (non-empty, UTF-8, no control character: the reason quotes the key, cut
 *    at 64 bytes, and goes to log lines), and the reason names its record:
 *    an op or attempt reason holds the op_id (when the op_id is UTF-8
 *    without control characters, as job.c makes them) up to its last
 *    character boundary within 64 bytes; an outbox reason holds the entry's
 *    seq in decimal (not inside a longer number);
 *  - garbage: an accepted value
 *    decodes into an in-range state: op state RUNNING..FORGOTTEN, outbox state
 *    NONE..SENT, every string NUL-terminated within its array (the hashes at
 *    most 64 bytes), expires_at the header's, the attempt number the key's,
 *    an outbox op_id of 1..STORE_KEY_MAX bytes and every outbox pointer and
 *    length inside the value (the payload its last bytes); and it is
 *    canonical: encoding what was decoded gives the value back (header
 *    bytes 2..7, which the decoders do not read, aside, but an op's 4..7,
 *    its retry_epoch; a string with a NUL
 *    inside, which C strings cut short, aside), and that decodes to the
 *    same record;
 *  - round trip: decode(encode(x)) == x for every op whose states are in
 *    range, and DD_ERR_FATAL for one whose state is not; attempts and outbox
 *    entries likewise, plus: the codec's attempt and outbox encoders write
 *    the same bytes as the independent mirrors of their layout here
 *    (ref_attempt()/ref_outbox()), an attempt under another number and an
 *    outbox entry without op_id are refused; any truncation of an encoded
 *    value and any byte (of the input's choosing) appended to it is
 *    refused.
 */
#include <stdint.h>

#include "fuzz_common.h"
#include "store.h"
#include "store_codec.h"

#define HDR STORE_CODEC_HDR_LEN

/* ---- reading the fuzz input -------------------------------------------- */

struct in {
    const uint8_t *p;
    size_t n;
};

static uint8_t in_u8(struct in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static uint64_t in_uint(struct in *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | in_u8(in);
    return v;
}

/* A string of 0..max bytes (length from one or two input bytes), without
 * NUL (0 becomes 1): C strings, as the store writes them. */
static void in_str(struct in *in, char *out, size_t max)
{
    size_t len = (size_t)(max > 255 ? in_uint(in, 2) : in_u8(in)) % (max + 1);
    size_t i = 0;
    for (; i < len && in->n > 0; i++) {
        uint8_t c = in_u8(in);
        out[i] = (char)(c ? c : 1);
    }
    out[i] = '\0';
}

/* ---- the value layout (store_codec.h), mirrored: reference encoders ------ */

struct buf {
    unsigned char *p;
    size_t len;
};

static void put(struct buf *b, const void *s, size_t n)
{
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put_le(struct buf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        unsigned char c = (unsigned char)(v >> (8 * i));
        put(b, &c, 1);
    }
}

static void put_str(struct buf *b, const char *s, size_t n)
{
    put_le(b, n, 2);
    put(b, s, n);
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static unsigned char *ref_header(struct buf *b, enum store_codec_kind kind,
                                 int64_t expires_at, size_t cap)
{
    b->p = malloc(cap);
    if (!b->p)
        abort();
    b->len = store_codec_header(kind, expires_at, b->p);
    FUZZ_CHECK(b->len == HDR, "store_codec_header wrote %zu bytes", b->len);
    return b->p;
}

/* An attempt, as the layout of store_codec.h says. */
static struct buf ref_attempt(const struct store_attempt *a,
                              int64_t expires_at)
{
    struct buf b;
    ref_header(&b, STORE_CODEC_ATTEMPT, expires_at,
               HDR + 40 + 8 + sizeof(a->session) + sizeof(a->exit_addr) +
                   sizeof(a->category) + sizeof(a->error));
    put_le(&b, a->number, 4);
    put_le(&b, a->generation, 8);
    put_le(&b, (uint64_t)a->started_at_ms, 8);
    put_le(&b, (uint64_t)a->ended_at_ms, 8);
    put_le(&b, (uint32_t)a->status, 4);
    put_le(&b, a->bytes, 8);
    put_str(&b, a->session, strlen(a->session));
    put_str(&b, a->exit_addr, strlen(a->exit_addr));
    put_str(&b, a->category, strlen(a->category));
    put_str(&b, a->error, strlen(a->error));
    return b;
}

/* An outbox entry, as the layout of store_codec.h says (the store writes
 * expires_at 0). */
static struct buf ref_outbox(const char *op_id, size_t op_id_len,
                             const char *event_key, size_t event_key_len,
                             uint64_t generation, const void *value,
                             size_t value_len, int64_t expires_at)
{
    struct buf b;
    ref_header(&b, STORE_CODEC_OUTBOX, expires_at,
               HDR + 2 + op_id_len + 2 + event_key_len + 8 + 4 + value_len);
    put_str(&b, op_id, op_id_len);
    put_str(&b, event_key, event_key_len);
    put_le(&b, generation, 8);
    put_le(&b, value_len, 4);
    put(&b, value, value_len);
    return b;
}

/* An outbox entry naming its body (record OUTBOX_REF), as the layout of
 * store_codec.h says. */
static struct buf ref_outbox_named(const struct store_codec_outbox *o,
                                   int64_t expires_at)
{
    struct buf b;
    ref_header(&b, STORE_CODEC_OUTBOX_REF, expires_at,
               HDR + 2 + o->op_id_len + 2 + o->event_key_len + 8 + 8 + 2
                   + STORE_HASH_LEN + 8 + 4 + 4 + o->value_len + 4
                   + o->suffix_len);
    put_str(&b, o->op_id, o->op_id_len);
    put_str(&b, o->event_key, o->event_key_len);
    put_le(&b, o->generation, 8);
    put_le(&b, (uint64_t)o->written_at_ms, 8);
    put_str(&b, o->body_sha256, STORE_HASH_LEN);
    put_le(&b, o->body_len, 8);
    put_le(&b, o->literal_len, 4);
    put_le(&b, o->value_len, 4);
    put(&b, o->value, o->value_len);
    put_le(&b, o->suffix_len, 4);
    put(&b, o->suffix, o->suffix_len);
    return b;
}

/* ---- checks -------------------------------------------------------------- */

static bool terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

/* The key a refusal must name: an op_id, or an outbox seq in decimal. */
struct rkey {
    const char *op_id; /* NULL: an outbox entry */
    uint64_t seq;
};

/* The part of \p op_id a reason quoting it cut at \p max bytes shows as
 * is: up to its last character boundary within max bytes (a UTF-8
 * continuation byte is 10xxxxxx), into \p out; false (nothing to look for)
 * when op_id is not UTF-8 or has a control character (the reason shows such
 * bytes otherwise).  Independent of the product's cleaning. */
static bool shown_prefix(const char *op_id, size_t max, char *out)
{
    size_t n = strlen(op_id);
    if (!jstr_utf8_valid(op_id, n) || !fuzz_no_ctl(op_id))
        return false;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)op_id[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(out, op_id, n);
    out[n] = '\0';
    return true;
}

/* Does \p e hold the decimal number \p num, not as part of a longer one? */
static bool has_number(const char *e, const char *num)
{
    size_t n = strlen(num);
    for (const char *p = e; (p = strstr(p, num)) != NULL; p++)
        if ((p == e || !isdigit((unsigned char)p[-1])) &&
            !isdigit((unsigned char)p[n]))
            return true;
    return false;
}

static void check_refusal(const char *what, dd_err_t err, const char *e,
                          struct rkey key)
{
    FUZZ_CHECK(err == DD_ERR_FATAL, "%s: error %d (%s), want DD_ERR_FATAL",
               what, (int)err, e);
    fuzz_check_text(what, e);
    char want[STORE_KEY_MAX + 1];
    if (key.op_id) {
        if (shown_prefix(key.op_id, 64, want))
            FUZZ_CHECK(strstr(e, want) != NULL, "%s: reason \"%s\" does not "
                       "name op_id \"%s\"", what, e, want);
        return;
    }
    snprintf(want, sizeof(want), "%llu", (unsigned long long)key.seq);
    FUZZ_CHECK(has_number(e, want), "%s: reason \"%s\" does not name outbox "
               "entry %s", what, e, want);
}

static struct rkey op_key(const char *op_id)
{
    return (struct rkey){op_id, 0};
}

static struct rkey outbox_key(uint64_t seq)
{
    return (struct rkey){NULL, seq};
}

/* Equal ignoring header bytes 2..7 (reserved, not read by the decoders),
 * or 2..3 only when \p op (an op's bytes 4..7 are its retry_epoch). */
static bool same_value(const unsigned char *a, size_t alen,
                       const unsigned char *b, size_t blen, bool op)
{
    size_t from = op ? 4 : 8;
    return alen == blen && alen >= HDR && memcmp(a, b, 2) == 0 &&
           memcmp(a + from, b + from, alen - from) == 0;
}

/* Every string in [first, end) of a value (u16 length + bytes, \p n of
 * them from \p off) is free of NUL: then encode(decode(v)) must be v. */
static bool strings_without_nul(const unsigned char *v, size_t len,
                                size_t off, int n)
{
    for (int i = 0; i < n; i++) {
        if (off + 2 > len)
            return false;
        size_t sl = (size_t)get_le(v + off, 2);
        off += 2;
        if (sl > len - off || memchr(v + off, '\0', sl))
            return false;
        off += sl;
    }
    return true;
}

static bool op_equal(const struct store_op *a, const struct store_op *b)
{
    return a->state == b->state && a->outbox_state == b->outbox_state &&
           a->generation == b->generation &&
           a->lease_expires_at_ms == b->lease_expires_at_ms &&
           a->created_at_ms == b->created_at_ms &&
           a->updated_at_ms == b->updated_at_ms &&
           a->expires_at_ms == b->expires_at_ms && a->attempts == b->attempts &&
           a->outbox_seq == b->outbox_seq &&
           strcmp(a->request_hash, b->request_hash) == 0 &&
           strcmp(a->event_key, b->event_key) == 0 &&
           strcmp(a->lease_owner, b->lease_owner) == 0 &&
           strcmp(a->source, b->source) == 0 &&
           strcmp(a->category, b->category) == 0 &&
           a->not_before_ms == b->not_before_ms &&
           a->retry_epoch == b->retry_epoch;
}

static bool attempt_equal(const struct store_attempt *a,
                          const struct store_attempt *b)
{
    return a->number == b->number && a->generation == b->generation &&
           a->started_at_ms == b->started_at_ms &&
           a->ended_at_ms == b->ended_at_ms && a->status == b->status &&
           a->bytes == b->bytes && strcmp(a->session, b->session) == 0 &&
           strcmp(a->exit_addr, b->exit_addr) == 0 &&
           strcmp(a->category, b->category) == 0 &&
           strcmp(a->error, b->error) == 0;
}

static bool op_in_range(const struct store_op *op)
{
    return op->state >= STORE_OP_RUNNING && op->state <= STORE_OP_FORGOTTEN &&
           op->outbox_state <= STORE_OUTBOX_SENT;
}

static void check_op_range(const struct store_op *op)
{
    FUZZ_CHECK(op_in_range(op), "op decoded with state %d, outbox state %d",
               (int)op->state, (int)op->outbox_state);
    FUZZ_CHECK(terminated(op->request_hash, sizeof(op->request_hash)) &&
                   terminated(op->event_key, sizeof(op->event_key)) &&
                   terminated(op->lease_owner, sizeof(op->lease_owner)) &&
                   terminated(op->source, sizeof(op->source)) &&
                   terminated(op->category, sizeof(op->category)),
               "op decoded with an unterminated string");
}

static void check_attempt_range(const struct store_attempt *a)
{
    FUZZ_CHECK(terminated(a->session, sizeof(a->session)) &&
                   terminated(a->exit_addr, sizeof(a->exit_addr)) &&
                   terminated(a->category, sizeof(a->category)) &&
                   terminated(a->error, sizeof(a->error)),
               "attempt decoded with an unterminated string");
}

/* A truncated value (cut at \p cut % len bytes), or one with the byte
 * \p extra appended, is refused. */
static void check_not_prefix(const char *what, const unsigned char *v,
                             size_t len, size_t cut, uint8_t extra, int kind,
                             const char *op_id, uint32_t number, uint64_t seq)
{
    unsigned char *c = malloc(len + 1);
    if (!c)
        abort();
    memcpy(c, v, len);
    c[len] = extra;
    char e[DD_ERRSTR_SIZE] = "";
    for (int pass = 0; pass < 2; pass++) {
        size_t n = pass == 0 ? cut % len : len + 1;
        unsigned char *t = malloc(n ? n : 1); /* exact size, for ASan */
        if (!t)
            abort();
        memcpy(t, c, n);
        dd_err_t err;
        if (kind == 0) {
            struct store_op op;
            err = store_codec_op_decode(t, n, op_id, &op, e, sizeof(e));
        } else if (kind == 1) {
            struct store_attempt a;
            int64_t x;
            err = store_codec_attempt_decode(t, n, op_id, number, &a, &x, e,
                                             sizeof(e));
        } else {
            struct store_codec_outbox o;
            err = store_codec_outbox_decode(t, n, seq, &o, e, sizeof(e));
        }
        free(t);
        FUZZ_CHECK(err != DD_OK, "%s: %zu of %zu bytes decoded%s", what, n,
                   len, pass ? " (one byte appended)" : "");
        check_refusal(what, err, e, kind == 2 ? outbox_key(seq)
                                              : op_key(op_id));
    }
    free(c);
}

/* ---- garbage ------------------------------------------------------------- */

static void garbage_op(const unsigned char *v, size_t len, const char *op_id)
{
    struct store_op op;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = store_codec_op_decode(v, len, op_id, &op, e, sizeof(e));
    if (err) {
        check_refusal("op", err, e, op_key(op_id));
        return;
    }
    check_op_range(&op);
    FUZZ_CHECK(op.expires_at_ms == (int64_t)get_le(v + 8, 8),
               "op expires_at %lld", (long long)op.expires_at_ms);
    FUZZ_CHECK(strlen(op.request_hash) <= STORE_HASH_LEN &&
                   strlen(op.event_key) <= STORE_HASH_LEN,
               "op hash longer than %d", STORE_HASH_LEN);
    size_t cap = STORE_CODEC_OP_VALUE_MAX;
    unsigned char *re = malloc(cap);
    if (!re)
        abort();
    size_t rlen = store_codec_op_encode(&op, re, cap);
    FUZZ_CHECK(rlen > 0, "a decoded op does not encode");
    if (strings_without_nul(v, len, HDR + 2 + 8 * 4 + 4 + 8, 5))
        FUZZ_CHECK(same_value(v, len, re, rlen, true),
                   "op value of %zu bytes is not canonical: re-encoded to "
                   "%zu bytes", len, rlen);
    struct store_op again;
    err = store_codec_op_decode(re, rlen, op_id, &again, e, sizeof(e));
    FUZZ_CHECK(err == DD_OK && op_equal(&op, &again),
               "re-encoded op does not decode the same (%d: %s)", (int)err,
               e);
    free(re);
}

static void garbage_attempt(const unsigned char *v, size_t len,
                            const char *op_id, uint32_t number)
{
    struct store_attempt a;
    int64_t expires_at = 0;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = store_codec_attempt_decode(v, len, op_id, number, &a,
                                              &expires_at, e, sizeof(e));
    if (err) {
        check_refusal("attempt", err, e, op_key(op_id));
        return;
    }
    check_attempt_range(&a);
    FUZZ_CHECK(a.number == number, "attempt %u decoded under key number %u",
               a.number, number);
    FUZZ_CHECK(expires_at == (int64_t)get_le(v + 8, 8),
               "attempt expires_at %lld", (long long)expires_at);
    struct buf re = ref_attempt(&a, expires_at);
    if (strings_without_nul(v, len, HDR + 4 + 8 * 3 + 4 + 8, 4))
        FUZZ_CHECK(same_value(v, len, re.p, re.len, false),
                   "attempt value of %zu bytes is not canonical (%zu)", len,
                   re.len);
    struct store_attempt again;
    int64_t x2 = 0;
    err = store_codec_attempt_decode(re.p, re.len, op_id, number, &again, &x2,
                                     e, sizeof(e));
    FUZZ_CHECK(err == DD_OK && attempt_equal(&a, &again) && x2 == expires_at,
               "re-encoded attempt does not decode the same (%d: %s)",
               (int)err, e);
    free(re.p);
}

static void garbage_outbox(const unsigned char *v, size_t len, uint64_t seq)
{
    struct store_codec_outbox o;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = store_codec_outbox_decode(v, len, seq, &o, e, sizeof(e));
    if (err) {
        check_refusal("outbox", err, e, outbox_key(seq));
        return;
    }
    const unsigned char *end = v + len;
    FUZZ_CHECK(o.op_id_len >= 1 && o.op_id_len <= STORE_KEY_MAX,
               "outbox op_id of %zu bytes", o.op_id_len);
    FUZZ_CHECK(o.event_key_len <= STORE_HASH_LEN, "outbox event_key of %zu "
               "bytes", o.event_key_len);
    if (o.body_sha256) { /* an entry naming its body */
        FUZZ_CHECK(v[1] == STORE_CODEC_OUTBOX_REF && o.literal_len >= 2 &&
                       (const unsigned char *)o.value >= v &&
                       (const unsigned char *)o.value + o.value_len <= end &&
                       (const unsigned char *)o.suffix + o.suffix_len == end,
                   "outbox entry naming its body: fields outside the value");
        struct buf rn = ref_outbox_named(&o, (int64_t)get_le(v + 8, 8));
        FUZZ_CHECK(same_value(v, len, rn.p, rn.len, false),
                   "outbox value of %zu bytes is not canonical (%zu)", len,
                   rn.len);
        free(rn.p);
        return;
    }
    FUZZ_CHECK(v[1] == STORE_CODEC_OUTBOX && !o.suffix && !o.suffix_len,
               "a whole outbox entry with a suffix");
    FUZZ_CHECK((const unsigned char *)o.op_id == v + HDR + 2 &&
                   (const unsigned char *)o.event_key ==
                       (const unsigned char *)o.op_id + o.op_id_len + 2 &&
                   o.value_len <= len &&
                   (const unsigned char *)o.value == end - o.value_len &&
                   (const unsigned char *)o.event_key + o.event_key_len + 12 ==
                       (const unsigned char *)o.value,
               "outbox fields outside the value or not where they belong");
    struct buf re = ref_outbox(o.op_id, o.op_id_len, o.event_key,
                               o.event_key_len, o.generation, o.value,
                               o.value_len, (int64_t)get_le(v + 8, 8));
    FUZZ_CHECK(same_value(v, len, re.p, re.len, false),
               "outbox value of %zu bytes is not canonical (%zu)", len,
               re.len);
    free(re.p);
}

/* ---- round trips --------------------------------------------------------- */

/* OP_ID of the input (the comment at the top) into \p out: 1..STORE_KEY_MAX
 * bytes, none of them NUL ("o" when the input has no byte left). */
static const char *op_id_of(struct in *in, char out[STORE_KEY_MAX + 1])
{
    size_t len = 1 + (size_t)in_uint(in, 2) % STORE_KEY_MAX;
    size_t i = 0;
    for (; i < len && in->n > 0; i++) {
        uint8_t c = in_u8(in);
        out[i] = (char)(c ? c : 1);
    }
    if (i == 0)
        out[i++] = 'o';
    out[i] = '\0';
    return out;
}

static void roundtrip_op(struct in *in)
{
    struct store_op op;
    memset(&op, 0, sizeof(op));
    op.state = (enum store_op_state)in_u8(in);
    op.outbox_state = (enum store_outbox_state)in_u8(in);
    op.generation = in_uint(in, 8);
    op.lease_expires_at_ms = (int64_t)in_uint(in, 8);
    op.created_at_ms = (int64_t)in_uint(in, 8);
    op.updated_at_ms = (int64_t)in_uint(in, 8);
    op.expires_at_ms = (int64_t)in_uint(in, 8);
    op.attempts = (uint32_t)in_uint(in, 4);
    op.outbox_seq = in_uint(in, 8);
    size_t cut = (size_t)in_uint(in, 2);
    uint8_t extra = in_u8(in);
    in_str(in, op.request_hash, STORE_HASH_LEN);
    in_str(in, op.event_key, STORE_HASH_LEN);
    in_str(in, op.lease_owner, STORE_OWNER_MAX);
    in_str(in, op.source, STORE_SOURCE_MAX);
    in_str(in, op.category, STORE_CATEGORY_MAX);
    char op_id[STORE_KEY_MAX + 1];
    op_id_of(in, op_id);
    op.retry_epoch = (uint32_t)in_uint(in, 4); /* last: older seeds keep
                                                  their meaning */

    size_t cap = STORE_CODEC_OP_VALUE_MAX;
    unsigned char *v = malloc(cap);
    if (!v)
        abort();
    size_t len = store_codec_op_encode(&op, v, cap);
    FUZZ_CHECK(len > HDR, "op did not encode");
    unsigned char *exact = malloc(len); /* exact size, for ASan */
    if (!exact)
        abort();
    memcpy(exact, v, len);
    struct store_op back;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = store_codec_op_decode(exact, len, op_id, &back, e,
                                         sizeof(e));
    if (op_in_range(&op)) {
        FUZZ_CHECK(err == DD_OK, "encoded op refused: %s", e);
        FUZZ_CHECK(op_equal(&op, &back), "decode(encode(op)) != op");
    } else {
        FUZZ_CHECK(err != DD_OK, "op with state %d, outbox state %d "
                   "decoded", (int)op.state, (int)op.outbox_state);
        check_refusal("op", err, e, op_key(op_id));
    }
    check_not_prefix("op", exact, len, cut, extra, 0, op_id, 0, 0);
    free(exact);
    free(v);
}

static void roundtrip_attempt(struct in *in)
{
    struct store_attempt a;
    memset(&a, 0, sizeof(a));
    a.number = (uint32_t)in_uint(in, 4);
    a.generation = in_uint(in, 8);
    a.started_at_ms = (int64_t)in_uint(in, 8);
    a.ended_at_ms = (int64_t)in_uint(in, 8);
    a.status = (int32_t)(uint32_t)in_uint(in, 4);
    a.bytes = in_uint(in, 8);
    int64_t expires_at = (int64_t)in_uint(in, 8);
    size_t cut = (size_t)in_uint(in, 2);
    uint8_t extra = in_u8(in);
    in_str(in, a.session, STORE_SESSION_MAX);
    in_str(in, a.exit_addr, STORE_SESSION_MAX);
    in_str(in, a.category, STORE_CATEGORY_MAX);
    in_str(in, a.error, STORE_ERROR_MAX);
    char op_id[STORE_KEY_MAX + 1];
    op_id_of(in, op_id);

    struct buf v = ref_attempt(&a, expires_at);
    unsigned char *cv = malloc(STORE_CODEC_ATTEMPT_VALUE_MAX);
    if (!cv)
        abort();
    size_t clen = store_codec_attempt_encode(&a, expires_at, cv,
                                             STORE_CODEC_ATTEMPT_VALUE_MAX);
    FUZZ_CHECK(clen == v.len && memcmp(cv, v.p, v.len) == 0,
               "codec attempt encoding (%zu bytes) differs from the layout "
               "(%zu bytes)", clen, v.len);
    free(cv);
    struct store_attempt back;
    int64_t x = 0;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = store_codec_attempt_decode(v.p, v.len, op_id, a.number,
                                              &back, &x, e, sizeof(e));
    FUZZ_CHECK(err == DD_OK, "encoded attempt refused: %s", e);
    FUZZ_CHECK(attempt_equal(&a, &back) && x == expires_at,
               "decode(encode(attempt)) != attempt");
    err = store_codec_attempt_decode(v.p, v.len, op_id, a.number + 1, &back,
                                     &x, e, sizeof(e));
    FUZZ_CHECK(err != DD_OK, "attempt %u decoded as number %u", a.number,
               a.number + 1);
    check_refusal("attempt", err, e, op_key(op_id));
    check_not_prefix("attempt", v.p, v.len, cut, extra, 1, op_id, a.number,
                     0);
    free(v.p);
}

static void roundtrip_outbox(struct in *in)
{
    char op_id[STORE_KEY_MAX + 1], ek[STORE_HASH_LEN + 1];
    uint64_t generation = in_uint(in, 8);
    uint64_t seq = in_uint(in, 8);
    int64_t expires_at = (int64_t)in_uint(in, 8);
    size_t cut = (size_t)in_uint(in, 2);
    uint8_t extra = in_u8(in);
    in_str(in, op_id, STORE_KEY_MAX);
    in_str(in, ek, STORE_HASH_LEN);
    size_t idlen = strlen(op_id), eklen = strlen(ek);
    struct buf v = ref_outbox(op_id, idlen, ek, eklen, generation, in->p,
                              in->n, expires_at);
    const struct store_codec_outbox ent = {
        .op_id = op_id, .op_id_len = idlen, .event_key = ek,
        .event_key_len = eklen, .generation = generation, .value = in->p,
        .value_len = in->n};
    size_t csize = store_codec_outbox_size(idlen, eklen, in->n);
    unsigned char *cv = malloc(csize);
    if (!cv)
        abort();
    size_t clen = store_codec_outbox_encode(&ent, cv, csize);
    FUZZ_CHECK(clen == v.len && memcmp(cv, v.p, 8) == 0 &&
                   store_codec_le64_get(cv + 8) == 0 &&
                   memcmp(cv + HDR, v.p + HDR, v.len - HDR) == 0,
               "codec outbox encoding (%zu bytes) differs from the layout "
               "(%zu bytes)", clen, v.len);
    free(cv);
    struct store_codec_outbox o;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = store_codec_outbox_decode(v.p, v.len, seq, &o, e,
                                             sizeof(e));
    if (idlen == 0) {
        FUZZ_CHECK(err != DD_OK, "outbox entry without op_id decoded");
        check_refusal("outbox", err, e, outbox_key(seq));
    } else {
        FUZZ_CHECK(err == DD_OK, "encoded outbox entry refused: %s", e);
        FUZZ_CHECK(o.op_id_len == idlen && memcmp(o.op_id, op_id, idlen) == 0 &&
                       o.event_key_len == eklen &&
                       memcmp(o.event_key, ek, eklen) == 0 &&
                       o.generation == generation && o.value_len == in->n &&
                       (in->n == 0 || memcmp(o.value, in->p, in->n) == 0),
                   "decode(encode(outbox)) != outbox");
    }
    check_not_prefix("outbox", v.p, v.len, cut, extra, 2, NULL, 0, seq);
    free(v.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct in in = { data, size };
    int mode = in_u8(&in) % 6;
    if (mode >= 3) {
        if (mode == 3)
            roundtrip_op(&in);
        else if (mode == 4)
            roundtrip_attempt(&in);
        else
            roundtrip_outbox(&in);
        return 0;
    }
    char op_id[STORE_KEY_MAX + 1];
    op_id_of(&in, op_id);
    uint32_t number = (uint32_t)in_uint(&in, 4);
    uint64_t seq = in_uint(&in, 8);
    /* the value: an exact-size copy, so ASan sees any read past it */
    unsigned char *v = malloc(in.n ? in.n : 1);
    if (!v)
        abort();
    if (in.n)
        memcpy(v, in.p, in.n);
    if (mode == 0)
        garbage_op(v, in.n, op_id);
    else if (mode == 1)
        garbage_attempt(v, in.n, op_id, number);
    else
        garbage_outbox(v, in.n, seq);
    free(v);
    return 0;
}
