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

/* What op_locked() does to a record it read: set *write to write it back
 * (and its changelog value); an error leaves the record as it was. */
typedef dd_err_t(op_change_fn)(struct store *s, struct store_op *op,
                               bool found, const void *arg, int64_t now_ms,
                               bool *write, char *errstr, size_t errstr_size);

/* Read \p op_id under its stripe, let \p change decide, write it back (no
 * fsync, the hot index following) when asked; \p buf gets its changelog
 * value whenever the change succeeded on a live record. */
static dd_err_t op_locked(struct store *s, const char *fn, const char *op_id,
                          int64_t now_ms, op_change_fn *change,
                          const void *arg, unsigned char *buf, size_t *len,
                          struct store_op *out, char *errstr,
                          size_t errstr_size)
{
    dd_err_t err = store_op_id_check(fn, op_id, errstr, errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op op;
    bool found = false, write = false;
    err = store_op_read(s, op_id, now_ms, false, &op, &found, errstr,
                        errstr_size);
    if (!err)
        err = change(s, &op, found, arg, now_ms, &write, errstr, errstr_size);
    if (!err && write) {
        err = store_op_write(s, op_id, &op, errstr, errstr_size);
        if (!err)
            store_index_put(s->idx, &k, &op, now_ms, STORE_INDEX_UPSERT);
    }
    pthread_mutex_unlock(mu);
    if (!err && found) {
        *len = store_changelog_encode(&op, buf);
        if (out)
            *out = op;
    }
    return err;
}

static dd_err_t change_none(struct store *s, struct store_op *op, bool found,
                            const void *arg, int64_t now_ms, bool *write,
                            char *errstr, size_t errstr_size)
{
    (void)s, (void)op, (void)now_ms, (void)write;
    if (found)
        return DD_OK;
    snprintf(errstr, errstr_size,
             "store_changelog_value: op '%.64s' is absent or expired",
             (const char *)arg);
    return DD_ERR_STATE;
}

dd_err_t store_changelog_value(struct store *s, const char *op_id,
                               unsigned char *buf, size_t *len,
                               struct store_op *out, char *errstr,
                               size_t errstr_size)
{
    return op_locked(s, "store_changelog_value", op_id, store_clock_ms(s),
                     change_none, op_id, buf, len, out, errstr, errstr_size);
}

static dd_err_t change_release(struct store *s, struct store_op *op,
                               bool found, const void *arg, int64_t now_ms,
                               bool *write, char *errstr, size_t errstr_size)
{
    (void)s;
    uint64_t generation = *(const uint64_t *)arg;
    if (!found || op->generation != generation ||
        (op->state != STORE_OP_RUNNING && op->state != STORE_OP_RETRYABLE)) {
        snprintf(errstr, errstr_size,
                 "store_op_release: the op is not unfinished at generation "
                 "%llu", (unsigned long long)generation);
        return DD_ERR_STATE;
    }
    op->lease_owner[0] = '\0';
    op->lease_expires_at_ms = 0;
    store_op_stamp(op, now_ms);
    *write = true;
    return DD_OK;
}

dd_err_t store_op_release(struct store *s, const char *op_id,
                          uint64_t generation, int64_t now_ms,
                          unsigned char *buf, size_t *len, char *errstr,
                          size_t errstr_size)
{
    return op_locked(s, "store_op_release", op_id, now_ms, change_release,
                     &generation, buf, len, NULL, errstr, errstr_size);
}

static dd_err_t change_forget(struct store *s, struct store_op *op,
                              bool found, const void *arg, int64_t now_ms,
                              bool *write, char *errstr, size_t errstr_size)
{
    (void)arg, (void)errstr, (void)errstr_size;
    if (!found)
        return DD_OK;
    op->state = STORE_OP_FORGOTTEN;
    op->generation++;
    op->outbox_state = STORE_OUTBOX_NONE;
    op->outbox_seq = 0;
    op->lease_owner[0] = '\0';
    op->lease_expires_at_ms = 0;
    op->not_before_ms = 0;
    op->updated_at_ms = now_ms; /* a new generation: this clock's */
    op->expires_at_ms = store_add_ms(now_ms, s->ops_ttl_ms);
    *write = true;
    return DD_OK;
}

dd_err_t store_op_forget(struct store *s, const char *op_id, int64_t now_ms,
                         unsigned char *buf, size_t *len, bool *found,
                         char *errstr, size_t errstr_size)
{
    struct store_op op;
    op.state = 0;
    dd_err_t err = op_locked(s, "store_op_forget", op_id, now_ms,
                             change_forget, NULL, buf, len, &op, errstr,
                             errstr_size);
    *found = !err && op.state == STORE_OP_FORGOTTEN;
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

/* One op of a batch being restored: its record as the batch and the store
 * see it together.  A partition's log can hold several records of one op in
 * one batch (a later record of a lower generation, a zombie's, must not win
 * over an earlier one of a higher generation): the slot carries the winner
 * so far, and the batch writes each op once, its final record. */
struct rslot {
    const char *key;     /* the op_id (borrowed from the record) */
    size_t len;
    bool read;           /* cur/found hold the store's record or a winner */
    bool found;          /* cur is live */
    bool dirty;          /* cur is to be written */
    struct store_op cur;
};

/* The slots of one batch: open addressing over the op_ids. */
struct rslots {
    struct rslot *v;     /* n used */
    size_t n;
    int32_t *tab;        /* mask + 1 entries, -1 empty */
    size_t mask;
};

/* FNV-1a of an op_id: the slot table's hash. */
static uint64_t rslot_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* The slot of op \p key, added when absent. */
static struct rslot *rslot_of(struct rslots *t, const void *key, size_t len)
{
    size_t i = (size_t)rslot_hash(key, len) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        int32_t j = t->tab[i];
        if (j < 0)
            break;
        if (t->v[j].len == len && !memcmp(t->v[j].key, key, len))
            return &t->v[j];
    }
    t->tab[i] = (int32_t)t->n;
    struct rslot *sl = &t->v[t->n++];
    sl->key = key;
    sl->len = len;
    sl->read = sl->found = sl->dirty = false;
    return sl;
}

/* The store's record of op_id into \p sl (once per batch: later records of
 * the op see the winner so far, in sl). */
static dd_err_t restore_read(struct store *s, struct rslot *sl,
                             const char *op_id, int64_t now_ms, char *errstr,
                             size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_OPS], op_id, sl->len,
                               &vlen, &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_get_cf(ops)", op_id, errstr,
                              errstr_size);
    sl->read = true;
    sl->found = false;
    if (!val)
        return DD_OK;
    memset(&sl->cur, 0, sizeof(sl->cur));
    dd_err_t err = store_codec_op_decode(val, vlen, op_id, &sl->cur, errstr,
                                         errstr_size);
    rocksdb_free(val);
    if (!err && !store_record_expired(sl->cur.expires_at_ms, now_ms))
        sl->found = true;
    return err;
}

static bool finished(enum store_op_state st)
{
    return st == STORE_OP_COMPLETE || st == STORE_OP_FAILED ||
           st == STORE_OP_FORGOTTEN;
}

/* Does \p local win over the restored \p rec?  A higher generation wins.
 * One generation is one holder's, on one clock: the later change wins (a
 * local retryable record over its own claim record, a completion over a
 * claim record sent again from the retry list); at the same time a finished
 * record wins over an unfinished one; else the record wins. */
static bool outranks(const struct store_op *local, const struct store_op *rec)
{
    if (local->generation != rec->generation)
        return local->generation > rec->generation;
    if (local->updated_at_ms != rec->updated_at_ms)
        return local->updated_at_ms > rec->updated_at_ms;
    return finished(local->state) && !finished(rec->state);
}

/* One restored op record: decide it under its stripe against its slot. */
static dd_err_t restore_op(struct store *s, struct rslot *sl,
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
    struct store_index_entry e;
    if (!sl->read &&
        store_index_judge(s->idx, &k, now_ms, store_clock_ms(s), &e) ==
            STORE_INDEX_ABSENT) {
        /* the hot index holds every live op and not this one (a restore
         * into an empty or new copy): absent, without a read */
        sl->read = true;
        sl->found = false;
    }
    if (!sl->read)
        err = restore_read(s, sl, op_id, now_ms, errstr, errstr_size);
    const struct store_op *local = &sl->cur;
    if (!err && sl->found && outranks(local, &rec)) {
        c->kept++;
    } else if (!err) {
        if (sl->found && local->generation == rec.generation &&
            local->outbox_state == STORE_OUTBOX_PENDING) {
            /* this copy's own result is still unacknowledged: keep the
             * outbox reference so the entry is acknowledged later */
            rec.outbox_state = STORE_OUTBOX_PENDING;
            rec.outbox_seq = local->outbox_seq;
        }
        restore_lease(s, &rec, now_ms);
        store_index_put(s->idx, &k, &rec, now_ms, STORE_INDEX_UPSERT);
        sl->cur = rec;
        sl->found = sl->dirty = true;
        c->applied++;
    }
    pthread_mutex_unlock(mu);
    return err;
}

/* Is \p r an op's record (by its key and value kind)? */
static bool restore_is_op(const struct store_restore_rec *r)
{
    return r->value && r->key_len && r->key_len <= STORE_KEY_MAX &&
           memchr(r->key, '\0', r->key_len) == NULL && r->value_len > 1 &&
           ((const unsigned char *)r->value)[1] == STORE_CODEC_OP;
}

/* Write the final record of every op the batch changed: one WriteBatch. */
static dd_err_t restore_write(struct store *s, const struct rslots *t,
                              char *errstr, size_t errstr_size)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    for (size_t i = 0; i < t->n; i++) {
        if (!t->v[i].dirty)
            continue;
        unsigned char buf[STORE_CODEC_OP_VALUE_MAX];
        size_t len = store_codec_op_encode(&t->v[i].cur, buf, sizeof(buf));
        assert(len > 0);
        rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], t->v[i].key,
                                  t->v[i].len, (const char *)buf, len);
    }
    dd_err_t err = DD_OK;
    if (rocksdb_writebatch_count(wb) > 0) {
        char *rerr = NULL;
        rocksdb_write(s->db, s->wopts_nosync, wb, &rerr);
        if (rerr) {
            store_index_write_failed(s);
            err = store_write_fail(s, rerr, "rocksdb_write(ops)", "restore",
                                   errstr, errstr_size);
        }
    }
    rocksdb_writebatch_destroy(wb);
    return err;
}

dd_err_t store_restore_apply(struct store *s,
                             const struct store_restore_rec *recs, size_t n,
                             int64_t now_ms, struct store_restore_counts *c,
                             char *errstr, size_t errstr_size)
{
    struct rslots t = {.mask = 15};
    while (t.mask + 1 < 2 * n)
        t.mask = t.mask * 2 + 1;
    t.v = malloc((n ? n : 1) * sizeof(*t.v));
    t.tab = malloc((t.mask + 1) * sizeof(*t.tab));
    if (!t.v || !t.tab)
        dd_oom("store_restore_apply");
    memset(t.tab, 0xff, (t.mask + 1) * sizeof(*t.tab));
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
        } else if (restore_is_op(r)) {
            err = restore_op(s, rslot_of(&t, r->key, r->key_len), r, now_ms,
                             c, errstr, errstr_size);
        } else {
            c->skipped++;
        }
    }
    if (!err)
        err = restore_write(s, &t, errstr, errstr_size);
    free(t.v);
    free(t.tab);
    return err;
}

/* A meta record: *val (rocksdb_free) or NULL when absent. */
static dd_err_t meta_get(struct store *s, const char *key, size_t klen,
                         char **val, size_t *vlen, char *errstr,
                         size_t errstr_size)
{
    char *rerr = NULL;
    *vlen = 0;
    *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_META], key, klen, vlen,
                          &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_get_cf(meta)", key, errstr,
                              errstr_size);
    return DD_OK;
}

/* Write a meta record (\p v NULL: delete it). */
static dd_err_t meta_put(struct store *s, const char *key, size_t klen,
                         const void *v, size_t vlen, char *errstr,
                         size_t errstr_size)
{
    char *rerr = NULL;
    if (v)
        rocksdb_put_cf(s->db, s->wopts_nosync, s->cf[CF_META], key, klen,
                       (const char *)v, vlen, &rerr);
    else
        rocksdb_delete_cf(s->db, s->wopts_nosync, s->cf[CF_META], key, klen,
                          &rerr);
    if (rerr)
        return store_write_fail(s, rerr, "rocksdb_put_cf(meta)", key, errstr,
                                errstr_size);
    return DD_OK;
}

static size_t checkpoint_key(int32_t partition, char *key)
{
    return (size_t)snprintf(key, CHECKPOINT_KEY_MAX, "checkpoint/%d",
                            (int)partition);
}

dd_err_t store_checkpoint_get(struct store *s, int32_t partition,
                              int64_t *offset, int64_t *taken_at_ms,
                              bool *found, char *errstr, size_t errstr_size)
{
    char key[CHECKPOINT_KEY_MAX];
    size_t klen = checkpoint_key(partition, key);
    char *val;
    size_t vlen;
    *found = false;
    dd_err_t err = meta_get(s, key, klen, &val, &vlen, errstr, errstr_size);
    if (err || !val)
        return err;
    if (!store_codec_checkpoint_decode(val, vlen, offset, taken_at_ms)) {
        snprintf(errstr, errstr_size,
                 "store: meta record '%s' is corrupt (%zu bytes, expected %d)",
                 key, vlen, STORE_CODEC_CHECKPOINT_LEN);
        err = DD_ERR_FATAL;
    } else {
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
    unsigned char v[STORE_CODEC_CHECKPOINT_LEN];
    if (offset >= 0)
        store_codec_checkpoint_encode(offset, taken_at_ms, v);
    return meta_put(s, key, klen, offset < 0 ? NULL : v, sizeof(v), errstr,
                    errstr_size);
}

/* meta "identity/<changelog topic>" */
static size_t identity_key(const char *topic, char *key, size_t size)
{
    int n = snprintf(key, size, "identity/%s", topic);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

dd_err_t store_identity_get(struct store *s, const char *topic, char **value,
                            size_t *len, bool *found, char *errstr,
                            size_t errstr_size)
{
    char key[300];
    size_t klen = identity_key(topic, key, sizeof(key));
    char *val;
    size_t vlen;
    *value = NULL;
    *len = 0;
    *found = false;
    dd_err_t err = meta_get(s, key, klen, &val, &vlen, errstr, errstr_size);
    if (err || !val)
        return err;
    *value = dd_xmalloc(vlen + 1, "identity record");
    memcpy(*value, val, vlen);
    (*value)[vlen] = '\0';
    *len = vlen;
    *found = true;
    rocksdb_free(val);
    return DD_OK;
}

dd_err_t store_identity_put(struct store *s, const char *topic,
                            const void *value, size_t len, char *errstr,
                            size_t errstr_size)
{
    char key[300];
    size_t klen = identity_key(topic, key, sizeof(key));
    return meta_put(s, key, klen, value, len, errstr, errstr_size);
}
