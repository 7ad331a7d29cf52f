/*
 * store_codec.c: the byte layout of every record of the store (the layout
 * itself is described in include/store_codec.h).  Pure: no RocksDB, no
 * clock, no allocation.  @locality any thread, for every function here.
 */
#include "store_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jstr.h"

/* the column family of each record kind, as decoders name it */
static const char *const kind_cf[] = {
    [STORE_CODEC_OP] = "ops",
    [STORE_CODEC_OUTBOX] = "outbox",
    [STORE_CODEC_CONFLICT] = "conflicts",
    [STORE_CODEC_SEEN] = "seen",
    [STORE_CODEC_ATTEMPT] = "attempts",
    [STORE_CODEC_RECEIPT] = "receipts",
    [STORE_CODEC_VALIDATOR] = "validators",
    [STORE_CODEC_BODY] = "bodies",
    [STORE_CODEC_OUTBOX_REF] = "outbox",
};

/* Set a decoder's error text.  It quotes a key (an op_id or resource key
 * cut at 64 bytes, an Idempotency-Key) and goes to log lines and the API's
 * error bodies: made one line of UTF-8 by jstr_text_clean() (a character cut
 * by the precision or the buffer, a control character or a byte that is not
 * UTF-8 shows as '?'; found by fuzz_record once its op_ids carried its
 * bytes).  @locality any thread. */
static void errstr_set_clean(char *errstr, size_t errstr_size,
                             const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void errstr_set_clean(char *errstr, size_t errstr_size,
                             const char *fmt, ...)
{
    if (!errstr || errstr_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    jstr_text_clean(errstr, errstr_size);
}

/* ---------------------------------------------------------------------- */
/* encoding                                                                */

struct enc {
    unsigned char *buf;
    size_t cap;
    size_t len;
    bool overflow;
};

/* @locality any thread. */
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

/* @locality any thread. */
static void enc_u8(struct enc *e, uint8_t v)
{
    enc_bytes(e, &v, 1);
}

/* @locality any thread. */
static void enc_u16(struct enc *e, uint16_t v)
{
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    enc_bytes(e, b, 2);
}

/* @locality any thread. */
static void enc_u32(struct enc *e, uint32_t v)
{
    unsigned char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    enc_bytes(e, b, 4);
}

/* @locality any thread. */
static void enc_u64(struct enc *e, uint64_t v)
{
    unsigned char b[8];
    store_codec_le64_put(b, v);
    enc_bytes(e, b, 8);
}

/* @locality any thread. */
static void enc_str(struct enc *e, const char *s, size_t n)
{
    if (n > UINT16_MAX) {
        e->overflow = true;
        return;
    }
    enc_u16(e, (uint16_t)n);
    enc_bytes(e, s, n);
}

/* A string of an array of \p size bytes: refused (overflow) when it is not
 * NUL-terminated within it.  @locality any thread. */
static void enc_array_str(struct enc *e, const char *s, size_t size)
{
    size_t n = strnlen(s, size);
    if (n == size) {
        e->overflow = true;
        return;
    }
    enc_str(e, s, n);
}

/* NULL as "", else at most \p max bytes.  @locality any thread. */
static void enc_opt_str(struct enc *e, const char *v, size_t max)
{
    size_t n = v ? strnlen(v, max + 1) : 0;
    if (n > max) {
        e->overflow = true;
        return;
    }
    enc_str(e, v ? v : "", n);
}

/* @locality any thread. */
static void enc_header(struct enc *e, enum store_codec_kind kind,
                       int64_t expires_at)
{
    unsigned char h[STORE_CODEC_HDR_LEN] = {0};
    h[0] = STORE_LAYOUT_V1;
    h[1] = (unsigned char)kind;
    store_codec_le64_put(h + 8, (uint64_t)expires_at);
    enc_bytes(e, h, sizeof(h));
}

/* @locality any thread. */
static size_t enc_done(const struct enc *e)
{
    return e->overflow ? 0 : e->len;
}

/* ---------------------------------------------------------------------- */
/* decoding                                                                */

struct dec {
    const unsigned char *p;
    size_t len;
    size_t off;
    bool bad;
};

/* @locality any thread. */
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

/* @locality any thread. */
static uint8_t dec_u8(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 1);
    return b ? b[0] : 0;
}

/* @locality any thread. */
static uint16_t dec_u16(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 2);
    return b ? (uint16_t)(b[0] | (b[1] << 8)) : 0;
}

/* @locality any thread. */
static uint32_t dec_u32(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 4);
    if (!b)
        return 0;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16
           | (uint32_t)b[3] << 24;
}

/* @locality any thread. */
static uint64_t dec_u64(struct dec *d)
{
    const unsigned char *b = dec_bytes(d, 8);
    return b ? store_codec_le64_get(b) : 0;
}

/* A string into a NUL-terminated buffer of max + 1 bytes.
 * @locality any thread. */
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

/* A borrowed string (pointer into the value) of at most max bytes.
 * @locality any thread. */
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
 * @locality any thread.
 */
static dd_err_t dec_header(struct dec *d, enum store_codec_kind kind,
                           int64_t *expires_at, const char *key,
                           size_t key_len, char *errstr, size_t errstr_size)
{
    const char *cf = kind_cf[kind];
    const unsigned char *h = dec_bytes(d, STORE_CODEC_HDR_LEN);
    if (!h) {
        errstr_set_clean(errstr, errstr_size,
                         "store: %s record '%.*s' is corrupt: %zu bytes, "
                         "shorter than its header",
                         cf, (int)(key_len > 64 ? 64 : key_len), key, d->len);
        return DD_ERR_FATAL;
    }
    if (h[0] != STORE_LAYOUT_V1 || h[1] != kind) {
        errstr_set_clean(errstr, errstr_size,
                         "store: %s record '%.*s' has layout version %u "
                         "type %u, expected version %d type %d",
                         cf, (int)(key_len > 64 ? 64 : key_len), key, h[0],
                         h[1], STORE_LAYOUT_V1, (int)kind);
        return DD_ERR_FATAL;
    }
    *expires_at = (int64_t)store_codec_le64_get(h + 8);
    return DD_OK;
}

/* @locality any thread. */
static struct dec dec_of(const void *val, size_t len)
{
    return (struct dec){(const unsigned char *)val, len, 0, false};
}

bool store_codec_hex64_ok(const char *h)
{
    for (int i = 0; i < STORE_HASH_LEN; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return false;
    return h[STORE_HASH_LEN] == '\0';
}

/* ---------------------------------------------------------------------- */
/* header                                                                  */

size_t store_codec_header(enum store_codec_kind kind, int64_t expires_at_ms,
                          unsigned char out[STORE_CODEC_HDR_LEN])
{
    struct enc e = {out, STORE_CODEC_HDR_LEN, 0, false};
    enc_header(&e, kind, expires_at_ms);
    return e.len;
}

dd_err_t store_codec_header_decode(const void *val, size_t len,
                                   enum store_codec_kind kind, const char *key,
                                   size_t key_len, int64_t *expires_at_ms,
                                   char *errstr, size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    return dec_header(&d, kind, expires_at_ms, key, key_len, errstr,
                      errstr_size);
}

/* ---------------------------------------------------------------------- */
/* ops                                                                     */

size_t store_codec_op_encode(const struct store_op *op, unsigned char *buf,
                             size_t cap)
{
    if (cap < STORE_CODEC_OP_VALUE_MAX)
        return 0;
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, STORE_CODEC_OP, op->expires_at_ms);
    /* header bytes 4..7 of an op: its retry_epoch (store_codec.h) */
    for (int i = 0; i < 4; i++)
        buf[4 + i] = (unsigned char)(op->retry_epoch >> (8 * i));
    enc_u8(&e, (uint8_t)op->state);
    enc_u8(&e, (uint8_t)op->outbox_state);
    enc_u64(&e, op->generation);
    enc_u64(&e, (uint64_t)op->lease_expires_at_ms);
    enc_u64(&e, (uint64_t)op->created_at_ms);
    enc_u64(&e, (uint64_t)op->updated_at_ms);
    enc_u32(&e, op->attempts);
    enc_u64(&e, op->outbox_seq);
    enc_array_str(&e, op->request_hash, sizeof(op->request_hash));
    enc_array_str(&e, op->event_key, sizeof(op->event_key));
    enc_array_str(&e, op->lease_owner, sizeof(op->lease_owner));
    enc_array_str(&e, op->source, sizeof(op->source));
    enc_array_str(&e, op->category, sizeof(op->category));
    if (op->state == STORE_OP_RETRYABLE)
        enc_u64(&e, (uint64_t)op->not_before_ms);
    return enc_done(&e);
}

dd_err_t store_codec_op_decode(const void *val, size_t len, const char *op_id,
                               struct store_op *op, char *errstr,
                               size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    size_t klen = strlen(op_id);
    dd_err_t err = dec_header(&d, STORE_CODEC_OP, &op->expires_at_ms, op_id,
                              klen, errstr, errstr_size);
    if (err)
        return err;
    /* header bytes 4..7 of an op: its retry_epoch, 0 in a record written
     * before it existed (store_codec.h) */
    op->retry_epoch = (uint32_t)d.p[4] | (uint32_t)d.p[5] << 8
                      | (uint32_t)d.p[6] << 16 | (uint32_t)d.p[7] << 24;
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
        || state > STORE_OP_FORGOTTEN || ostate > STORE_OUTBOX_SENT) {
        errstr_set_clean(errstr, errstr_size,
                         "store: ops record '%.*s' is corrupt (%zu bytes, "
                         "state %u, outbox state %u)",
                         (int)(klen > 64 ? 64 : klen), op_id, len, state,
                         ostate);
        return DD_ERR_FATAL;
    }
    op->state = (enum store_op_state)state;
    op->outbox_state = (enum store_outbox_state)ostate;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* attempts                                                                */

size_t store_codec_attempt_key(const char *op_id, size_t op_id_len,
                               uint32_t number,
                               char key[STORE_CODEC_ATTEMPT_KEY_MAX])
{
    memcpy(key, op_id, op_id_len);
    key[op_id_len] = '\n';
    for (int i = 0; i < 4; i++)
        key[op_id_len + 1 + i] = (char)(unsigned char)(number >> (24 - 8 * i));
    return op_id_len + 5;
}

bool store_codec_attempt_key_number(const char *key, size_t key_len,
                                    size_t op_id_len, uint32_t *number)
{
    if (key_len != op_id_len + 5)
        return false;
    const unsigned char *nb = (const unsigned char *)key + op_id_len + 1;
    *number = (uint32_t)nb[0] << 24 | (uint32_t)nb[1] << 16
              | (uint32_t)nb[2] << 8 | nb[3];
    return true;
}

size_t store_codec_attempt_encode(const struct store_attempt *a,
                                  int64_t expires_at_ms, unsigned char *buf,
                                  size_t cap)
{
    if (cap < STORE_CODEC_ATTEMPT_VALUE_MAX)
        return 0;
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, STORE_CODEC_ATTEMPT, expires_at_ms);
    enc_u32(&e, a->number);
    enc_u64(&e, a->generation);
    enc_u64(&e, (uint64_t)a->started_at_ms);
    enc_u64(&e, (uint64_t)a->ended_at_ms);
    enc_u32(&e, (uint32_t)a->status);
    enc_u64(&e, a->bytes);
    enc_array_str(&e, a->session, sizeof(a->session));
    enc_array_str(&e, a->exit_addr, sizeof(a->exit_addr));
    enc_array_str(&e, a->category, sizeof(a->category));
    enc_array_str(&e, a->error, sizeof(a->error));
    return enc_done(&e);
}

dd_err_t store_codec_attempt_decode(const void *val, size_t len,
                                    const char *op_id, uint32_t number,
                                    struct store_attempt *a,
                                    int64_t *expires_at_ms, char *errstr,
                                    size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    char name[STORE_KEY_MAX + 16];
    int nlen = snprintf(name, sizeof(name), "%s#%u", op_id, number);
    dd_err_t err = dec_header(&d, STORE_CODEC_ATTEMPT, expires_at_ms, name,
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
        errstr_set_clean(errstr, errstr_size,
                         "store: attempts record '%.64s' is corrupt (%zu "
                         "bytes, number %u)",
                         name, len, a->number);
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* outbox                                                                  */

void store_codec_outbox_key(uint64_t seq,
                            unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN])
{
    store_codec_be64_put(key, seq);
}

size_t store_codec_outbox_size(size_t op_id_len, size_t event_key_len,
                               size_t value_len)
{
    return STORE_CODEC_HDR_LEN + 2 + op_id_len + 2 + event_key_len + 8 + 4
           + value_len;
}

size_t store_codec_outbox_len(const struct store_codec_outbox *ent)
{
    size_t n = store_codec_outbox_size(ent->op_id_len, ent->event_key_len,
                                       ent->value_len);
    if (ent->body_sha256)
        n += 8 + 2 + STORE_HASH_LEN + 8 + 4 + 4 + ent->suffix_len;
    return n;
}

size_t store_codec_outbox_encode_head(const struct store_codec_outbox *ent,
                                      unsigned char *buf, size_t cap)
{
    if (ent->value_len > UINT32_MAX || ent->suffix_len > UINT32_MAX)
        return 0;
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, ent->body_sha256 ? STORE_CODEC_OUTBOX_REF
                                    : STORE_CODEC_OUTBOX, 0);
    enc_str(&e, ent->op_id, ent->op_id_len);
    enc_str(&e, ent->event_key, ent->event_key_len);
    enc_u64(&e, ent->generation);
    if (ent->body_sha256) {
        enc_u64(&e, (uint64_t)ent->written_at_ms);
        enc_str(&e, ent->body_sha256, STORE_HASH_LEN);
        enc_u64(&e, ent->body_len);
        enc_u32(&e, ent->literal_len);
    }
    enc_u32(&e, (uint32_t)ent->value_len);
    return enc_done(&e);
}

size_t store_codec_outbox_encode_mid(const struct store_codec_outbox *ent,
                                     unsigned char buf[4])
{
    if (!ent->body_sha256 || ent->suffix_len > UINT32_MAX)
        return 0;
    struct enc e = {buf, 4, 0, false};
    enc_u32(&e, (uint32_t)ent->suffix_len);
    return enc_done(&e);
}

size_t store_codec_outbox_encode(const struct store_codec_outbox *ent,
                                 unsigned char *buf, size_t cap)
{
    size_t head = store_codec_outbox_encode_head(ent, buf, cap);
    if (!head || cap < store_codec_outbox_len(ent))
        return 0;
    size_t n = head;
    if (ent->value_len)
        memcpy(buf + n, ent->value, ent->value_len);
    n += ent->value_len;
    if (!ent->body_sha256)
        return n;
    n += store_codec_outbox_encode_mid(ent, buf + n);
    if (ent->suffix_len)
        memcpy(buf + n, ent->suffix, ent->suffix_len);
    return n + ent->suffix_len;
}

dd_err_t store_codec_outbox_decode(const void *val, size_t len, uint64_t seq,
                                   struct store_codec_outbox *ent,
                                   char *errstr, size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    char kbuf[24];
    int kn = snprintf(kbuf, sizeof(kbuf), "%llu", (unsigned long long)seq);
    int64_t expires_at = 0;
    bool ref = len >= 2 && ((const unsigned char *)val)[1]
                               == STORE_CODEC_OUTBOX_REF;
    dd_err_t err = dec_header(&d, ref ? STORE_CODEC_OUTBOX_REF
                                      : STORE_CODEC_OUTBOX,
                              &expires_at, kbuf, (size_t)kn, errstr,
                              errstr_size);
    if (err)
        return err;
    memset(ent, 0, sizeof(*ent));
    ent->op_id = dec_str_ref(&d, STORE_KEY_MAX, &ent->op_id_len);
    ent->event_key = dec_str_ref(&d, STORE_HASH_LEN, &ent->event_key_len);
    ent->generation = dec_u64(&d);
    size_t hash_len = STORE_HASH_LEN;
    if (ref) {
        ent->written_at_ms = (int64_t)dec_u64(&d);
        ent->body_sha256 = dec_str_ref(&d, STORE_HASH_LEN, &hash_len);
        ent->body_len = dec_u64(&d);
        ent->literal_len = dec_u32(&d);
    }
    ent->value_len = dec_u32(&d);
    ent->value = dec_bytes(&d, ent->value_len);
    if (ref) {
        ent->suffix_len = dec_u32(&d);
        ent->suffix = dec_bytes(&d, ent->suffix_len);
    }
    bool hex = true;
    for (size_t i = 0; ref && !d.bad && i < hash_len; i++) {
        char c = ent->body_sha256[i];
        hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    }
    if (d.bad || d.off != d.len || ent->op_id_len == 0 || !hex
        || hash_len != STORE_HASH_LEN || (ref && ent->literal_len < 2)) {
        errstr_set_clean(errstr, errstr_size,
                         "store: outbox entry %s is corrupt (%zu bytes)", kbuf,
                         len);
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* conflicts and seen marks                                                */

size_t store_codec_conflict_key(const char *op_id, size_t op_id_len,
                                const char *request_hash, size_t hash_len,
                                char key[STORE_CODEC_CONFLICT_KEY_MAX])
{
    memcpy(key, op_id, op_id_len);
    key[op_id_len] = '\n';
    memcpy(key + op_id_len + 1, request_hash, hash_len);
    return op_id_len + 1 + hash_len;
}

size_t store_codec_mark_encode(enum store_codec_kind kind,
                               int64_t expires_at_ms, int64_t now_ms,
                               unsigned char out[STORE_CODEC_MARK_LEN])
{
    struct enc e = {out, STORE_CODEC_MARK_LEN, 0, false};
    enc_header(&e, kind, expires_at_ms);
    enc_u64(&e, (uint64_t)now_ms);
    return e.len;
}

/* ---------------------------------------------------------------------- */
/* receipts                                                                */

size_t store_codec_receipt_size(size_t hash_len, size_t receipt_len)
{
    return STORE_CODEC_HDR_LEN + 1 + 2 + hash_len + 2 + receipt_len;
}

size_t store_codec_receipt_encode(int64_t expires_at_ms,
                                  enum store_receipt_state state,
                                  const char *request_hash, size_t hash_len,
                                  const char *receipt, size_t receipt_len,
                                  unsigned char *buf, size_t cap)
{
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, STORE_CODEC_RECEIPT, expires_at_ms);
    enc_u8(&e, (uint8_t)state);
    enc_str(&e, request_hash, hash_len);
    enc_str(&e, receipt, receipt_len);
    return enc_done(&e);
}

size_t store_codec_receipt_pending_encode(int64_t expires_at_ms,
                                          int64_t pending_until_ms,
                                          const char *request_hash,
                                          size_t hash_len, unsigned char *buf,
                                          size_t cap)
{
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, STORE_CODEC_RECEIPT, expires_at_ms);
    enc_u8(&e, (uint8_t)STORE_RECEIPT_PENDING);
    enc_str(&e, request_hash, hash_len);
    enc_str(&e, "", 0);
    enc_u64(&e, (uint64_t)pending_until_ms);
    return enc_done(&e);
}

dd_err_t store_codec_receipt_decode(const void *val, size_t len,
                                    const char *key,
                                    struct store_codec_receipt *r,
                                    char *errstr, size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    int64_t expires_at = 0;
    dd_err_t err = dec_header(&d, STORE_CODEC_RECEIPT, &expires_at, key,
                              strlen(key), errstr, errstr_size);
    if (err)
        return err;
    uint8_t st = dec_u8(&d);
    dec_str(&d, r->request_hash, STORE_HASH_LEN);
    r->receipt_len = 0;
    r->receipt = dec_str_ref(&d, STORE_CODEC_RECEIPT_MAX, &r->receipt_len);
    if (d.bad || (st != STORE_RECEIPT_PENDING && st != STORE_RECEIPT_DONE)) {
        errstr_set_clean(errstr, errstr_size,
                         "receipts: corrupt record at %.64s", key);
        return DD_ERR_FATAL;
    }
    r->state = (enum store_receipt_state)st;
    /* a pending record written before the window existed has none: its
     * window has passed */
    r->pending_until_ms = 0;
    if (st == STORE_RECEIPT_PENDING && d.len - d.off >= 8)
        r->pending_until_ms = (int64_t)dec_u64(&d);
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* validators and bodies                                                   */

size_t store_codec_validator_encode(const struct store_codec_validator *v,
                                    int64_t expires_at_ms, unsigned char *buf,
                                    size_t cap)
{
    if (cap < STORE_CODEC_VALIDATOR_VALUE_MAX
        || !store_codec_hex64_ok(v->body_sha256))
        return 0;
    struct enc e = {buf, cap, 0, false};
    enc_header(&e, STORE_CODEC_VALIDATOR, expires_at_ms);
    enc_u64(&e, (uint64_t)v->stored_at_ms);
    enc_u32(&e, (uint32_t)v->status);
    enc_u64(&e, v->body_len);
    enc_str(&e, v->body_sha256, STORE_HASH_LEN);
    enc_opt_str(&e, v->etag, STORE_ETAG_MAX);
    enc_opt_str(&e, v->last_modified, STORE_LAST_MODIFIED_MAX);
    enc_opt_str(&e, v->content_type, STORE_CONTENT_TYPE_MAX);
    enc_opt_str(&e, v->final_url, STORE_URL_MAX);
    return enc_done(&e);
}

dd_err_t store_codec_validator_decode(const void *val, size_t len,
                                      const char *key,
                                      struct store_validator *v, char *errstr,
                                      size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    size_t key_len = strlen(key);
    dd_err_t err = dec_header(&d, STORE_CODEC_VALIDATOR, &v->expires_at_ms,
                              key, key_len, errstr, errstr_size);
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
    if (d.bad || d.off != d.len || !store_codec_hex64_ok(v->body_sha256)) {
        errstr_set_clean(errstr, errstr_size,
                         "store: validators record '%.*s' is corrupt (%zu "
                         "bytes)",
                         (int)(key_len > 64 ? 64 : key_len), key, len);
        return DD_ERR_FATAL;
    }
    return DD_OK;
}

size_t store_codec_body_head(int64_t expires_at_ms, uint64_t body_len,
                             unsigned char out[STORE_CODEC_BODY_HEAD_LEN])
{
    struct enc e = {out, STORE_CODEC_BODY_HEAD_LEN, 0, false};
    enc_header(&e, STORE_CODEC_BODY, expires_at_ms);
    enc_u64(&e, body_len);
    return e.len;
}

dd_err_t store_codec_body_decode(const void *val, size_t len,
                                 const char *digest, int64_t *expires_at_ms,
                                 const void **body, size_t *body_len,
                                 char *errstr, size_t errstr_size)
{
    struct dec d = dec_of(val, len);
    dd_err_t err = dec_header(&d, STORE_CODEC_BODY, expires_at_ms, digest,
                              strlen(digest), errstr, errstr_size);
    if (err)
        return err;
    uint64_t n = dec_u64(&d);
    if (d.bad || n != d.len - d.off) {
        errstr_set_clean(errstr, errstr_size,
                         "store: bodies record '%.64s' is corrupt (%zu bytes, "
                         "body_len %llu)",
                         digest, len, (unsigned long long)n);
        return DD_ERR_FATAL;
    }
    *body = d.p + d.off;
    *body_len = (size_t)n;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* meta                                                                    */

void store_codec_layout_encode(uint32_t version,
                               unsigned char out[STORE_CODEC_LAYOUT_LEN])
{
    for (int i = 0; i < 4; i++)
        out[i] = (unsigned char)(version >> (8 * i));
}

bool store_codec_layout_decode(const void *val, size_t len, uint32_t *version)
{
    if (len != STORE_CODEC_LAYOUT_LEN)
        return false;
    const unsigned char *b = val;
    *version = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16
               | (uint32_t)b[3] << 24;
    return true;
}

void store_codec_checkpoint_encode(int64_t offset, int64_t taken_at_ms,
                                   unsigned char out[STORE_CODEC_CHECKPOINT_LEN])
{
    struct enc e = {out, STORE_CODEC_CHECKPOINT_LEN, 0, false};
    enc_u64(&e, (uint64_t)offset);
    enc_u64(&e, (uint64_t)taken_at_ms);
}

bool store_codec_checkpoint_decode(const void *val, size_t len,
                                   int64_t *offset, int64_t *taken_at_ms)
{
    if (len != STORE_CODEC_CHECKPOINT_LEN)
        return false;
    struct dec d = dec_of(val, len);
    *offset = (int64_t)dec_u64(&d);
    *taken_at_ms = (int64_t)dec_u64(&d);
    return !d.bad;
}
