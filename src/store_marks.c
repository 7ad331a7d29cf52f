/*
 * store_marks.c: the store's small put-if-absent records beside the ops:
 * conflicts reported (CF "conflicts"), seen keys of `dedupd tail` (CF
 * "seen") and the receipts of the job API's Idempotency-Keys (CF
 * "receipts").  Each is one record under its key's stripe.
 */
#include "store_internal.h"

#include <stdlib.h>
#include <string.h>

/* The stripe of a key that is not an op_id (seen keys, receipts).
 * @locality any thread (receipts: the HTTP server's). */
static pthread_mutex_t *key_stripe_of(struct store *s, const void *key,
                                      size_t len)
{
    return &s->stripes[dd_fnv1a64(key, len) % STORE_STRIPES];
}

/* Is an unexpired record of \p kind at \p key in \p cf?  Read-only. */
static dd_err_t read_present(struct store *s, int cf,
                             enum store_codec_kind kind, const char *key,
                             size_t key_len, int64_t now_ms, bool *present,
                             char *errstr, size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[cf], key, key_len, &vlen,
                               &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_get_cf", store_cf_names[cf],
                              errstr, errstr_size);
    *present = false;
    if (!val)
        return DD_OK;
    int64_t expires_at = 0;
    dd_err_t err = store_codec_header_decode(val, vlen, kind, key, key_len,
                                             &expires_at, errstr,
                                             errstr_size);
    rocksdb_free(val);
    if (err)
        return err;
    *present = !store_record_expired(expires_at, now_ms);
    return DD_OK;
}

/*
 * put-if-absent of a small expiring record (conflicts, seen).  *present is
 * true when a live record existed.  Caller holds the key's stripe.
 */
static dd_err_t mark_once(struct store *s, int cf, enum store_codec_kind kind,
                          const char *key, size_t key_len, int64_t ttl_ms,
                          int64_t now_ms, bool *present, char *errstr,
                          size_t errstr_size)
{
    bool live = false;
    dd_err_t err = read_present(s, cf, kind, key, key_len, now_ms, &live,
                                errstr, errstr_size);
    if (err)
        return err;
    if (live) {
        *present = true;
        return DD_OK;
    }
    char *rerr = NULL;
    unsigned char buf[STORE_CODEC_MARK_LEN];
    size_t len = store_codec_mark_encode(kind, store_add_ms(now_ms, ttl_ms),
                                         now_ms, buf);
    rocksdb_put_cf(s->db, s->wopts, s->cf[cf], key, key_len,
                   (const char *)buf, len, &rerr);
    if (rerr)
        return store_write_fail(s, rerr, "rocksdb_put_cf", store_cf_names[cf],
                                errstr, errstr_size);
    *present = false;
    return DD_OK;
}

/* The conflict key of (op_id, request_hash), both checked for \p fn. */
static dd_err_t conflict_key(const char *fn, const char *op_id,
                             const char *request_hash,
                             char key[STORE_CODEC_CONFLICT_KEY_MAX],
                             size_t *klen, char *errstr, size_t errstr_size)
{
    dd_err_t err = store_op_id_check(fn, op_id, errstr, errstr_size);
    if (err)
        return err;
    size_t hlen = strlen(request_hash);
    if (hlen == 0 || hlen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): request_hash of %zu bytes (must be 1..%d)",
                      fn, op_id, hlen, STORE_HASH_LEN);
        return DD_ERR_INVAL;
    }
    *klen = store_codec_conflict_key(op_id, strlen(op_id), request_hash, hlen,
                                     key);
    return DD_OK;
}

dd_err_t store_conflict_mark(struct store *s, const char *op_id,
                             const char *request_hash, int64_t now_ms,
                             bool *first, char *errstr, size_t errstr_size)
{
    char key[STORE_CODEC_CONFLICT_KEY_MAX];
    size_t klen = 0;
    dd_err_t err = conflict_key("store_conflict_mark", op_id, request_hash,
                                key, &klen, errstr, errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    bool present = false;
    err = mark_once(s, CF_CONFLICTS, STORE_CODEC_CONFLICT, key, klen,
                    s->ops_ttl_ms, now_ms, &present, errstr, errstr_size);
    pthread_mutex_unlock(mu);
    if (!err)
        *first = !present;
    return err;
}

dd_err_t store_conflict_reported(struct store *s, const char *op_id,
                                 const char *request_hash, int64_t now_ms,
                                 bool *reported, char *errstr,
                                 size_t errstr_size)
{
    char key[STORE_CODEC_CONFLICT_KEY_MAX];
    size_t klen = 0;
    dd_err_t err = conflict_key("store_conflict_reported", op_id,
                                request_hash, key, &klen, errstr,
                                errstr_size);
    if (err)
        return err;
    return read_present(s, CF_CONFLICTS, STORE_CODEC_CONFLICT, key, klen,
                        now_ms, reported, errstr, errstr_size);
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
    pthread_mutex_t *mu = key_stripe_of(s, key, key_len);
    pthread_mutex_lock(mu);
    dd_err_t err = mark_once(s, CF_SEEN, STORE_CODEC_SEEN, key, key_len,
                             ttl_ms, now_ms, seen, errstr, errstr_size);
    pthread_mutex_unlock(mu);
    return err;
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
    return read_present(s, CF_SEEN, STORE_CODEC_SEEN, key, key_len, now_ms,
                        present, errstr, errstr_size);
}

/* ---------------------------------------------------------------------- */
/* receipts of the submit API (CF "receipts")                              */

/* The live receipt at \p key (*live false: absent or expired), and when
 * pending the end of its in-flight window.  Caller holds the key's stripe.
 * @locality an HTTP server thread (POST /v1/jobs). */
static dd_err_t receipt_read(struct store *s, const char *key, size_t klen,
                             int64_t now_ms, bool *live,
                             enum store_receipt_state *state,
                             int64_t *pending_until_ms,
                             char existing_hash[STORE_HASH_LEN + 1],
                             char **receipt, char *errstr, size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    *live = false;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_RECEIPTS], key, klen,
                               &vlen, &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_get_cf", "receipts", errstr,
                              errstr_size);
    if (!val)
        return DD_OK;
    int64_t expires_at = 0;
    struct store_codec_receipt r;
    dd_err_t err = store_codec_header_decode(val, vlen, STORE_CODEC_RECEIPT,
                                             key, klen, &expires_at, errstr,
                                             errstr_size);
    /* an expired record is overwritten, whatever its body holds */
    if (err || store_record_expired(expires_at, now_ms))
        goto out;
    *live = true;
    err = store_codec_receipt_decode(val, vlen, key, &r, errstr, errstr_size);
    if (err)
        goto out;
    *state = r.state;
    *pending_until_ms = r.pending_until_ms;
    memcpy(existing_hash, r.request_hash, sizeof(r.request_hash));
    if (r.state == STORE_RECEIPT_DONE) {
        char *copy = dd_xmalloc(r.receipt_len + 1, "store receipt");
        memcpy(copy, r.receipt, r.receipt_len);
        copy[r.receipt_len] = '\0';
        *receipt = copy;
    }
out:
    rocksdb_free(val);
    return err;
}

/* @locality an HTTP server thread (POST /v1/jobs). */
dd_err_t store_receipt_begin(struct store *s, const char *key,
                             const char *request_hash, int64_t now_ms,
                             int64_t pending_ms, int64_t ttl_ms,
                             enum store_receipt_state *state,
                             char existing_hash[STORE_HASH_LEN + 1],
                             char **receipt, char *errstr, size_t errstr_size)
{
    size_t klen = strlen(key), hlen = strlen(request_hash);
    if (klen == 0 || klen > STORE_KEY_MAX || hlen == 0 ||
        hlen > STORE_HASH_LEN || pending_ms <= 0 || ttl_ms < pending_ms) {
        dd_errstr_set(errstr, errstr_size,
                      "store_receipt_begin: key of %zu bytes, hash of %zu "
                      "bytes, pending_ms %lld or ttl_ms %lld out of range",
                      klen, hlen, (long long)pending_ms, (long long)ttl_ms);
        return DD_ERR_INVAL;
    }
    *receipt = NULL;
    existing_hash[0] = '\0';
    pthread_mutex_t *mu = key_stripe_of(s, key, klen);
    pthread_mutex_lock(mu);
    bool live = false;
    int64_t pending_until = 0;
    dd_err_t err = receipt_read(s, key, klen, now_ms, &live, state,
                                &pending_until, existing_hash, receipt, errstr,
                                errstr_size);
    if (err)
        goto out;
    if (live) {
        /* done, or pending inside its window (live at exactly its end, as
         * records are at expires_at) */
        if (*state != STORE_RECEIPT_PENDING || now_ms <= pending_until)
            goto out;
        /* past its window: the same payload takes it over */
        if (strcmp(existing_hash, request_hash)) {
            *state = STORE_RECEIPT_UNSETTLED;
            goto out;
        }
        existing_hash[0] = '\0';
    }
    unsigned char buf[STORE_CODEC_HDR_LEN + 1 + 2 + STORE_HASH_LEN + 2 + 8];
    size_t len = store_codec_receipt_pending_encode(
        store_add_ms(now_ms, ttl_ms), store_add_ms(now_ms, pending_ms),
        request_hash, hlen, buf, sizeof(buf));
    char *rerr = NULL;
    rocksdb_put_cf(s->db, s->wopts, s->cf[CF_RECEIPTS], key, klen,
                   (const char *)buf, len, &rerr);
    if (rerr)
        err = store_write_fail(s, rerr, "rocksdb_put_cf", "receipts", errstr,
                               errstr_size);
    else
        *state = STORE_RECEIPT_NEW;
out:
    pthread_mutex_unlock(mu);
    return err;
}

/* @locality an HTTP server thread (POST /v1/jobs). */
dd_err_t store_receipt_done(struct store *s, const char *key,
                            const char *request_hash, const char *receipt,
                            int64_t now_ms, int64_t ttl_ms, char *errstr,
                            size_t errstr_size)
{
    size_t klen = strlen(key), hlen = strlen(request_hash), rlen = strlen(receipt);
    if (klen == 0 || klen > STORE_KEY_MAX || hlen > STORE_HASH_LEN ||
        rlen > STORE_CODEC_RECEIPT_MAX) {
        dd_errstr_set(errstr, errstr_size, "store_receipt_done: argument out "
                      "of range");
        return DD_ERR_INVAL;
    }
    size_t cap = store_codec_receipt_size(hlen, rlen);
    unsigned char *buf = malloc(cap);
    if (!buf)
        return DD_ERR_NOMEM;
    size_t len = store_codec_receipt_encode(store_add_ms(now_ms, ttl_ms),
                                            STORE_RECEIPT_DONE, request_hash,
                                            hlen, receipt, rlen, buf, cap);
    char *rerr = NULL;
    pthread_mutex_t *mu = key_stripe_of(s, key, klen);
    pthread_mutex_lock(mu);
    rocksdb_put_cf(s->db, s->wopts, s->cf[CF_RECEIPTS], key, klen,
                   (const char *)buf, len, &rerr);
    pthread_mutex_unlock(mu);
    free(buf);
    if (rerr)
        return store_write_fail(s, rerr, "rocksdb_put_cf", "receipts", errstr,
                                errstr_size);
    return DD_OK;
}

/* @locality an HTTP server thread (POST /v1/jobs). */
dd_err_t store_receipt_abort(struct store *s, const char *key, char *errstr,
                             size_t errstr_size)
{
    char *rerr = NULL;
    size_t klen = strlen(key);
    pthread_mutex_t *mu = key_stripe_of(s, key, klen);
    pthread_mutex_lock(mu);
    rocksdb_delete_cf(s->db, s->wopts, s->cf[CF_RECEIPTS], key, klen, &rerr);
    pthread_mutex_unlock(mu);
    if (rerr)
        return store_write_fail(s, rerr, "rocksdb_delete_cf", "receipts",
                                errstr, errstr_size);
    return DD_OK;
}
