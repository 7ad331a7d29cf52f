/* The changelog's side of the store (store.h, "the changelog's side"):
 * changelog values, releases at a revoke, the restore's record-wins rule,
 * and per-partition checkpoints.  See store_internal.h for the locking. */
#include "store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jstr.h"

#define CONFLICT_PREFIX "conflict/"
#define CHECKPOINT_KEY_MAX 32
#define CHECKPOINT_LEN 16 /* i64 offset, i64 taken_at, little-endian */

/* The changelog value of \p op (as stored): outbox state normalized (a
 * record is produced only after its result was acknowledged). */
size_t store_changelog_encode(const struct store_op *op, unsigned char *buf)
{
    struct store_op c = *op;
    if (c.outbox_state == STORE_OUTBOX_PENDING)
        c.outbox_state = STORE_OUTBOX_SENT;
    c.outbox_seq = 0;
    size_t n = store_codec_op_encode(&c, buf, STORE_CHANGELOG_VALUE_MAX);
    assert(n > 0); /* every string is bounded by its array */
    return n;
}

dd_err_t store_changelog_value(struct store *s, const char *op_id,
                               unsigned char *buf, size_t *len,
                               struct store_op *out, char *errstr,
                               size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_changelog_value", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op op;
    bool found = false;
    err = store_op_read(s, op_id, store_clock_ms(s), false, &op, &found,
                        errstr, errstr_size);
    pthread_mutex_unlock(mu);
    if (err)
        return err;
    if (!found) {
        snprintf(errstr, errstr_size,
                 "store_changelog_value: op '%.64s' is absent or expired",
                 op_id);
        return DD_ERR_STATE;
    }
    *len = store_changelog_encode(&op, buf);
    if (out)
        *out = op;
    return DD_OK;
}

dd_err_t store_op_release(struct store *s, const char *op_id,
                          uint64_t generation, int64_t now_ms,
                          unsigned char *buf, size_t *len, char *errstr,
                          size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_op_release", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op op;
    bool found = false;
    err = store_op_read(s, op_id, now_ms, false, &op, &found, errstr,
                        errstr_size);
    if (!err && (!found || op.generation != generation ||
                 (op.state != STORE_OP_RUNNING &&
                  op.state != STORE_OP_RETRYABLE))) {
        snprintf(errstr, errstr_size,
                 "store_op_release: op '%.64s' is not unfinished at "
                 "generation %llu", op_id, (unsigned long long)generation);
        err = DD_ERR_STATE;
    }
    if (!err) {
        op.lease_owner[0] = '\0';
        op.lease_expires_at_ms = 0;
        op.updated_at_ms = now_ms;
        err = store_op_write(s, op_id, &op, errstr, errstr_size);
        if (!err) {
            store_index_put(s->idx, &k, &op, now_ms, STORE_INDEX_UPSERT);
            *len = store_changelog_encode(&op, buf);
        }
    }
    pthread_mutex_unlock(mu);
    return err;
}

dd_err_t store_op_forget(struct store *s, const char *op_id, int64_t now_ms,
                         unsigned char *buf, size_t *len, bool *found,
                         char *errstr, size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_op_forget", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op op;
    *found = false;
    err = store_op_read(s, op_id, now_ms, false, &op, found, errstr,
                        errstr_size);
    if (!err && *found) {
        op.state = STORE_OP_FORGOTTEN;
        op.generation++;
        op.outbox_state = STORE_OUTBOX_NONE;
        op.outbox_seq = 0;
        op.lease_owner[0] = '\0';
        op.lease_expires_at_ms = 0;
        op.not_before_ms = 0;
        op.updated_at_ms = now_ms;
        op.expires_at_ms = store_add_ms(now_ms, s->ops_ttl_ms);
        err = store_op_write(s, op_id, &op, errstr, errstr_size);
        if (!err) {
            store_index_put(s->idx, &k, &op, now_ms, STORE_INDEX_UPSERT);
            *len = store_changelog_encode(&op, buf);
        }
    }
    pthread_mutex_unlock(mu);
    return err;
}

/* "conflict/<op_id>/<request_hash>": split into op_id and hash. */
static bool conflict_parse(const char *key, size_t len, char *op_id,
                           char hash[STORE_HASH_LEN + 1])
{
    size_t pl = sizeof(CONFLICT_PREFIX) - 1;
    if (len < pl + 2 + STORE_HASH_LEN || memcmp(key, CONFLICT_PREFIX, pl) ||
        key[len - STORE_HASH_LEN - 1] != '/')
        return false;
    size_t idlen = len - pl - STORE_HASH_LEN - 1;
    if (idlen > STORE_KEY_MAX)
        return false;
    memcpy(op_id, key + pl, idlen);
    op_id[idlen] = '\0';
    memcpy(hash, key + len - STORE_HASH_LEN, STORE_HASH_LEN);
    hash[STORE_HASH_LEN] = '\0';
    return strlen(op_id) == idlen && store_codec_hex64_ok(hash);
}

/* The restored record \p op of another owner: its lease counts from now on
 * this instance's clock; a release (no owner) and this run's own record are
 * free at once; a previous run of this instance keeps its expiry (void at
 * start-up: the claim reclaims it at once). */
static void restore_lease(struct store *s, struct store_op *op, int64_t now_ms)
{
    if (op->state != STORE_OP_RUNNING && op->state != STORE_OP_RETRYABLE)
        return;
    if (!op->lease_owner[0] || !strcmp(op->lease_owner, s->owner))
        op->lease_expires_at_ms = 0;
    else if (strncmp(op->lease_owner, s->owner_prefix,
                     strlen(s->owner_prefix)))
        op->lease_expires_at_ms = store_add_ms(now_ms, s->lease_ms);
}

/* Read op_id as the batch being built and the store see it together (a
 * partition's log can hold several records of one op in one batch: a later
 * record of a lower generation, a zombie's, must not win over an earlier
 * one of a higher generation). */
static dd_err_t restore_read(struct store *s, rocksdb_writebatch_wi_t *wb,
                             const char *op_id, size_t len, int64_t now_ms,
                             struct store_op *op, bool *found, char *errstr,
                             size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_writebatch_wi_get_from_batch_and_db_cf(
        wb, s->db, s->ropts, s->cf[CF_OPS], op_id, len, &vlen, &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_writebatch_wi_get(ops)", op_id,
                              errstr, errstr_size);
    *found = false;
    if (!val)
        return DD_OK;
    memset(op, 0, sizeof(*op));
    dd_err_t err = store_codec_op_decode(val, vlen, op_id, op, errstr,
                                         errstr_size);
    rocksdb_free(val);
    if (!err && !store_record_expired(op->expires_at_ms, now_ms))
        *found = true;
    return err;
}

/* One restored op record: decide it under its stripe and stage it. */
static dd_err_t restore_op(struct store *s, rocksdb_writebatch_wi_t *wb,
                           const struct store_restore_rec *r, int64_t now_ms,
                           struct store_restore_counts *c, char *errstr,
                           size_t errstr_size)
{
    char op_id[STORE_KEY_MAX + 1];
    memcpy(op_id, r->key, r->key_len);
    op_id[r->key_len] = '\0';
    struct store_op rec;
    memset(&rec, 0, sizeof(rec));
    dd_err_t err = store_codec_op_decode(r->value, r->value_len, op_id, &rec,
                                         errstr, errstr_size);
    if (err)
        return err;
    if (store_record_expired(rec.expires_at_ms, now_ms)) {
        c->expired++;
        return DD_OK;
    }
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op local;
    bool found = false;
    err = restore_read(s, wb, op_id, r->key_len, now_ms, &local, &found,
                       errstr, errstr_size);
    if (!err && found && local.generation > rec.generation) {
        c->kept++;
    } else if (!err) {
        if (found && local.generation == rec.generation &&
            local.outbox_state == STORE_OUTBOX_PENDING) {
            /* this copy's own result is still unacknowledged: keep the
             * outbox reference so the entry is acknowledged later */
            rec.outbox_state = STORE_OUTBOX_PENDING;
            rec.outbox_seq = local.outbox_seq;
        }
        restore_lease(s, &rec, now_ms);
        unsigned char buf[STORE_CODEC_OP_VALUE_MAX];
        size_t len = store_codec_op_encode(&rec, buf, sizeof(buf));
        assert(len > 0);
        rocksdb_writebatch_wi_put_cf(wb, s->cf[CF_OPS], op_id, r->key_len,
                                     (const char *)buf, len);
        store_index_put(s->idx, &k, &rec, now_ms, STORE_INDEX_UPSERT);
        c->applied++;
    }
    pthread_mutex_unlock(mu);
    return err;
}

dd_err_t store_restore_apply(struct store *s,
                             const struct store_restore_rec *recs, size_t n,
                             int64_t now_ms, struct store_restore_counts *c,
                             char *errstr, size_t errstr_size)
{
    rocksdb_writebatch_wi_t *wb = rocksdb_writebatch_wi_create(0, 1);
    dd_err_t err = DD_OK;
    for (size_t i = 0; i < n && !err; i++) {
        const struct store_restore_rec *r = &recs[i];
        char op_id[STORE_KEY_MAX + 1], hash[STORE_HASH_LEN + 1];
        if (!r->value || !r->key_len) {
            c->skipped++;
        } else if (r->key_len > sizeof(CONFLICT_PREFIX) - 1 &&
                   !memcmp(r->key, CONFLICT_PREFIX,
                           sizeof(CONFLICT_PREFIX) - 1)) {
            bool first;
            if (conflict_parse(r->key, r->key_len, op_id, hash)) {
                err = store_conflict_mark(s, op_id, hash, now_ms, &first,
                                          errstr, errstr_size);
                c->conflicts++;
            } else
                c->skipped++;
        } else if (r->key_len <= STORE_KEY_MAX &&
                   memchr(r->key, '\0', r->key_len) == NULL &&
                   r->value_len > 1 &&
                   ((const unsigned char *)r->value)[1] == STORE_CODEC_OP) {
            err = restore_op(s, wb, r, now_ms, c, errstr, errstr_size);
        } else {
            c->skipped++;
        }
    }
    if (!err && rocksdb_writebatch_wi_count(wb) > 0) {
        char *rerr = NULL;
        rocksdb_write_writebatch_wi(s->db, s->wopts_nosync, wb, &rerr);
        if (rerr) {
            store_index_write_failed(s);
            err = store_write_fail(s, rerr, "rocksdb_write(ops)", "restore",
                                   errstr, errstr_size);
        }
    }
    rocksdb_writebatch_wi_destroy(wb);
    return err;
}

static size_t checkpoint_key(int32_t partition, char *key)
{
    return (size_t)snprintf(key, CHECKPOINT_KEY_MAX, "checkpoint/%d",
                            (int)partition);
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
        v = v << 8 | p[i];
    return v;
}

dd_err_t store_checkpoint_get(struct store *s, int32_t partition,
                              int64_t *offset, int64_t *taken_at_ms,
                              bool *found, char *errstr, size_t errstr_size)
{
    char key[CHECKPOINT_KEY_MAX];
    size_t klen = checkpoint_key(partition, key);
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_META], key, klen,
                               &vlen, &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_get_cf(meta)", key, errstr,
                              errstr_size);
    *found = false;
    if (!val)
        return DD_OK;
    dd_err_t err = DD_OK;
    if (vlen != CHECKPOINT_LEN) {
        snprintf(errstr, errstr_size,
                 "store: meta record '%s' is corrupt (%zu bytes, expected %d)",
                 key, vlen, CHECKPOINT_LEN);
        err = DD_ERR_FATAL;
    } else {
        *offset = (int64_t)get_le64((const unsigned char *)val);
        *taken_at_ms = (int64_t)get_le64((const unsigned char *)val + 8);
        *found = true;
    }
    rocksdb_free(val);
    return err;
}

dd_err_t store_checkpoint_put(struct store *s, int32_t partition,
                              int64_t offset, int64_t taken_at_ms,
                              char *errstr, size_t errstr_size)
{
    char key[CHECKPOINT_KEY_MAX];
    size_t klen = checkpoint_key(partition, key);
    char *rerr = NULL;
    if (offset < 0) {
        rocksdb_delete_cf(s->db, s->wopts_nosync, s->cf[CF_META], key, klen,
                          &rerr);
    } else {
        unsigned char v[CHECKPOINT_LEN];
        put_le64(v, (uint64_t)offset);
        put_le64(v + 8, (uint64_t)taken_at_ms);
        rocksdb_put_cf(s->db, s->wopts_nosync, s->cf[CF_META], key, klen,
                       (const char *)v, sizeof(v), &rerr);
    }
    if (rerr)
        return store_write_fail(s, rerr, "rocksdb_put_cf(meta)", key, errstr,
                                errstr_size);
    return DD_OK;
}
