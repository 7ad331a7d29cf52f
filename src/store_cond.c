/*
 * store_cond.c: validators and bodies, the store's part of conditional
 * refetch (column families "validators" and "bodies"; store.h describes
 * them, store_codec.h their layouts).  Completions write them in their own
 * WriteBatch (store_complete_batch in store.c calls store_cond_prep and
 * store_cond_stage); the reads are here.
 */
#include "store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jstr.h"
#include "key.h"

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

enum store_validator_write store_cond_prep(struct store *s,
                                           const struct store_complete_req *r,
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
        || (r->body_sha256 && !store_codec_hex64_ok(r->body_sha256)))
        return STORE_VALIDATOR_REFUSED;
    if (r->body_sha256)
        memcpy(digest, r->body_sha256, STORE_HASH_LEN + 1);
    else
        key_sha256_hex(r->body_len ? r->body : "", r->body_len, digest);
    return STORE_VALIDATOR_WRITTEN;
}

int64_t store_body_clock(struct store *s, int64_t now_ms)
{
    int64_t c = atomic_load(&s->body_clock_ms);
    while (c < now_ms
           && !atomic_compare_exchange_weak(&s->body_clock_ms, &c, now_ms))
        ;
    return c > now_ms ? c : now_ms;
}

void store_cond_stage(struct store *s, rocksdb_writebatch_t *wb,
                      const struct store_complete_req *r, const char *digest,
                      bool put_body, int64_t now_ms, int64_t body_now_ms)
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
    int64_t expires_at = store_add_ms(now_ms, s->validators_ttl_ms);
    const struct store_codec_validator v = {
        .stored_at_ms = now_ms,
        .status = r->http_status,
        .body_len = (uint64_t)r->body_len,
        .body_sha256 = digest,
        .etag = r->etag,
        .last_modified = r->last_modified,
        .content_type = r->content_type,
        .final_url = r->final_url,
    };
    unsigned char buf[STORE_CODEC_VALIDATOR_VALUE_MAX];
    size_t len = store_codec_validator_encode(&v, expires_at, buf,
                                              sizeof(buf));
    assert(len > 0); /* every string was checked by store_cond_prep */
    rocksdb_writebatch_put_cf(wb, s->cf[CF_VALIDATORS], rk, rklen,
                              (const char *)buf, len);
    if (!put_body)
        return;
    /* the body goes in from the caller's buffer: no copy besides the
     * batch's own; its expiry from the body clock, never earlier than a
     * body put before it (store_body_clock) */
    unsigned char head[STORE_CODEC_BODY_HEAD_LEN];
    store_codec_body_head(store_add_ms(body_now_ms, s->validators_ttl_ms),
                          (uint64_t)r->body_len, head);
    const char *vals[2] = {(const char *)head, r->body_len ? r->body : ""};
    size_t vlens[2] = {sizeof(head), r->body_len};
    const char *keys[1] = {digest};
    size_t klens[1] = {STORE_HASH_LEN};
    rocksdb_writebatch_putv_cf(wb, s->cf[CF_BODIES], 1, keys, klens, 2, vals,
                               vlens);
}

/*
 * Pinned read of body \p digest (no copy of its bytes).  *pin is NULL when
 * absent or expired; else the caller destroys it (the body points into it).
 */
static dd_err_t body_read(struct store *s, const char *fn, const char *digest,
                          int64_t now_ms, rocksdb_pinnableslice_t **pin,
                          const void **body, size_t *body_len, char *errstr,
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
    dd_err_t err = store_codec_body_decode(v, vlen, digest, &expires_at, body,
                                           body_len, errstr, errstr_size);
    if (err || store_record_expired(expires_at, now_ms)) {
        rocksdb_pinnableslice_destroy(p);
        return err;
    }
    *pin = p;
    return DD_OK;
}

/* Is the body \p v names present, live and of its length?  *live false:
 * absent or expired. */
static dd_err_t validator_body_check(struct store *s, const char *resource_key,
                                     const struct store_validator *v,
                                     int64_t now_ms, bool *live, char *errstr,
                                     size_t errstr_size)
{
    rocksdb_pinnableslice_t *pin = NULL;
    const void *body = NULL;
    size_t blen = 0;
    *live = false;
    dd_err_t err = body_read(s, "store_validator_get", v->body_sha256, now_ms,
                             &pin, &body, &blen, errstr, errstr_size);
    if (err || !pin)
        return err;
    rocksdb_pinnableslice_destroy(pin);
    if (blen != v->body_len) {
        dd_errstr_set(errstr, errstr_size,
                      "store: validators record '%.64s' names body %s of %llu "
                      "bytes, stored with %zu",
                      resource_key, v->body_sha256,
                      (unsigned long long)v->body_len, blen);
        return DD_ERR_FATAL;
    }
    *live = true;
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
        return store_rdb_fail(rerr, "rocksdb_get_cf(validators)",
                              resource_key, errstr, errstr_size);
    if (!val)
        return DD_OK;
    struct store_validator *v = malloc(sizeof(*v));
    if (!v) {
        rocksdb_free(val);
        dd_errstr_set(errstr, errstr_size,
                      "store_validator_get: out of memory");
        return DD_ERR_NOMEM;
    }
    dd_err_t err = store_codec_validator_decode(val, vlen, resource_key, v,
                                                errstr, errstr_size);
    rocksdb_free(val);
    if (err || store_record_expired(v->expires_at_ms, now_ms))
        goto out;
    /* a validator is only as good as its body */
    bool live = false;
    err = validator_body_check(s, resource_key, v, now_ms, &live, errstr,
                               errstr_size);
    if (err || !live)
        goto out;
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
    if (!store_codec_hex64_ok(body_sha256)) {
        dd_errstr_set(errstr, errstr_size,
                      "store_body_get: '%.80s' is not 64 lowercase hex chars",
                      body_sha256);
        return DD_ERR_INVAL;
    }
    rocksdb_pinnableslice_t *pin = NULL;
    const void *b = NULL;
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

dd_err_t store_cond_outbox_rebuild(struct store *s,
                                   const struct store_codec_outbox *ent,
                                   uint64_t seq, char **out, size_t *out_len,
                                   char *errstr, size_t errstr_size)
{
    char digest[STORE_HASH_LEN + 1];
    memcpy(digest, ent->body_sha256, STORE_HASH_LEN);
    digest[STORE_HASH_LEN] = '\0';
    /* expired or not: the pins kept it from compaction (store_pins.c) */
    rocksdb_pinnableslice_t *pin = NULL;
    const void *body = NULL;
    size_t body_len = 0;
    dd_err_t err = body_read(s, "store_outbox_foreach", digest, INT64_MIN,
                             &pin, &body, &body_len, errstr, errstr_size);
    if (err)
        return err == DD_ERR_IO ? err : DD_ERR_FATAL;
    char *lit = NULL;
    size_t lit_len = 0;
    if (!pin || body_len != ent->body_len) {
        dd_errstr_set(errstr, errstr_size,
                      "store: outbox entry %llu of op %.*s names body %s "
                      "(%llu bytes), %s: its result cannot be rebuilt",
                      (unsigned long long)seq,
                      (int)(ent->op_id_len > 64 ? 64 : ent->op_id_len),
                      ent->op_id, digest, (unsigned long long)ent->body_len,
                      pin ? "of another length" : "absent");
        err = DD_ERR_FATAL;
        goto out;
    }
    err = jstr_body_literal(body, body_len, &lit, &lit_len, NULL);
    if (err == DD_ERR_NOMEM) {
        dd_errstr_set(errstr, errstr_size,
                      "store_outbox_foreach: out of memory");
        goto out;
    }
    if (err || lit_len != ent->literal_len) {
        dd_errstr_set(errstr, errstr_size,
                      "store: outbox entry %llu of op %.*s: the literal of "
                      "body %s is %zu bytes, the entry says %u",
                      (unsigned long long)seq,
                      (int)(ent->op_id_len > 64 ? 64 : ent->op_id_len),
                      ent->op_id, digest, lit_len, ent->literal_len);
        err = DD_ERR_FATAL;
        goto out;
    }
    size_t n = ent->value_len + lit_len + ent->suffix_len;
    char *v = malloc(n + 1);
    if (!v) {
        dd_errstr_set(errstr, errstr_size,
                      "store_outbox_foreach: out of memory");
        err = DD_ERR_NOMEM;
        goto out;
    }
    memcpy(v, ent->value, ent->value_len);
    memcpy(v + ent->value_len, lit, lit_len);
    memcpy(v + ent->value_len + lit_len, ent->suffix, ent->suffix_len);
    v[n] = '\0';
    *out = v;
    *out_len = n;
out:
    free(lit);
    if (pin)
        rocksdb_pinnableslice_destroy(pin);
    return err;
}
