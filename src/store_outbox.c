/*
 * store_outbox.c: the outbox after a completion wrote its entry (store.c):
 * the broker's acknowledgements (one by one and batched; the entry deleted,
 * the op marked sent, the entry's pin removed), the start-up replay (an
 * entry naming its body rebuilt, store_cond.c), and the rewrite of entries
 * pending for half the validators TTL (store_pins.c says why).  Each change
 * of an op happens under its stripe (store_internal.h).
 */
#include "store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* An entry's body may expire within this long of its deletion: the
 * deletion is made durable before its pin goes (outbox_unpin). */
#define STORE_UNPIN_SYNC_MS (10 * 60 * 1000)

/* Unpin outbox entry \p seq, just deleted by an acknowledgement written
 * without fsync.  When its body may expire soon (an entry pending about as
 * long as the validators TTL), the WAL is synced first: else a crash of the
 * machine could lose the deletion after a compaction, free of the pin, had
 * dropped the body, and the entry would come back naming a body that is
 * gone.  A failed sync keeps the pin (the body stays; nothing is lost).
 * @returns whether the WAL was synced (so a caller unpinning several syncs
 * once). */
static bool outbox_unpin(struct store *s, uint64_t seq, bool synced)
{
    int64_t t = store_pins_time(&s->pins, seq);
    if (t == INT64_MIN)
        return synced;
    if (!synced && store_add_ms(t, s->validators_ttl_ms)
                       <= store_add_ms(store_clock_ms(s), STORE_UNPIN_SYNC_MS)) {
        if (!store_wal_sync(s, "unpinning an acknowledged outbox entry"))
            return false; /* the pin stays */
        synced = true;
    }
    store_pins_remove(&s->pins, seq);
    return synced;
}

dd_err_t store_outbox_ack(struct store *s, uint64_t seq, const char *op_id,
                          char *errstr, size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_outbox_ack", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN];
    store_codec_outbox_key(seq, key);
    char *rerr = NULL;
    char *val = NULL;
    rocksdb_writebatch_t *batch = NULL;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);

    size_t vlen = 0;
    val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_OUTBOX], (const char *)key,
                         sizeof(key), &vlen, &rerr);
    if (rerr) {
        err = store_rdb_fail(rerr, "rocksdb_get_cf(outbox)", op_id, errstr,
                             errstr_size);
        goto out;
    }
    bool existed = val != NULL;
    if (existed) {
        struct store_codec_outbox ent;
        err = store_codec_outbox_decode(val, vlen, seq, &ent, errstr,
                                        errstr_size);
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
    err = store_op_read(s, op_id, 0, true, &op, &found, errstr, errstr_size);
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
        unsigned char vbuf[STORE_CODEC_OP_VALUE_MAX];
        op.outbox_state = STORE_OUTBOX_SENT;
        size_t n = store_codec_op_encode(&op, vbuf, sizeof(vbuf));
        assert(n > 0);
        rocksdb_writebatch_put_cf(batch, s->cf[CF_OPS], op_id, strlen(op_id),
                                  (const char *)vbuf, n);
    }
    rocksdb_write(s->db, s->wopts_nosync, batch, &rerr);
    if (rerr) {
        err = store_write_fail(s, rerr, "rocksdb_write(outbox ack)", op_id,
                               errstr, errstr_size);
        store_index_write_failed(s);
        goto out;
    }
    if (mark)
        store_index_put(s->idx, &k, &op, store_clock_ms(s),
                        STORE_INDEX_UPSERT);
    if (existed) {
        atomic_fetch_sub(&s->pending, 1);
        (void)outbox_unpin(s, seq, false);
    }
out:
    pthread_mutex_unlock(mu);
    if (batch)
        rocksdb_writebatch_destroy(batch);
    rocksdb_free(val);
    return err;
}

/* store_outbox_ack_batch's first pass, under the stripes: read the ops,
 * stage the acknowledgements whose op still names its entry (mark[i]),
 * write them.  @returns the write's error. */
static dd_err_t ack_batch_stage(struct store *s, struct dd_scratch *sc,
                                struct store_outbox_ack_req *reqs, size_t n,
                                const struct store_index_key *keys,
                                struct store_op *ops, bool *mark,
                                char *errstr, size_t errstr_size)
{
    const char **ks = dd_scratch_alloc(sc, n * sizeof(*ks));
    size_t *sizes = dd_scratch_alloc(sc, 2 * n * sizeof(*sizes)); /* all,
                                                           then the read */
    size_t *at = dd_scratch_alloc(sc, n * sizeof(*at)); /* read r is
                                                           request i */
    rocksdb_pinnableslice_t **vals = dd_scratch_calloc(sc, n, sizeof(*vals));
    char **errs = dd_scratch_calloc(sc, n, sizeof(*errs));
    dd_err_t err = DD_OK;
    if (!ks || !sizes || !at || !vals || !errs) {
        dd_errstr_set(errstr, errstr_size,
                      "store_outbox_ack_batch: out of memory (%zu)", n);
        err = DD_ERR_NOMEM;
        goto out;
    }
    /* the ops the caller holds as their completion wrote them, unchanged
     * since (the index says so), are not read: the others are, at once */
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        const struct store_op *h = reqs[i].held;
        sizes[i] = strlen(reqs[i].op_id);
        if (h && !reqs[i].err && h->outbox_seq == reqs[i].seq &&
            h->outbox_state == STORE_OUTBOX_PENDING &&
            store_index_holds(s->idx, &keys[i], h)) {
            ops[i] = *h;
            mark[i] = true;
            continue;
        }
        mark[i] = false;
        ks[nr] = reqs[i].op_id;
        sizes[n + nr] = sizes[i];
        at[nr++] = i;
    }
    if (nr)
        rocksdb_batched_multi_get_cf(s->db, s->ropts, s->cf[CF_OPS], nr, ks,
                                     sizes + n, vals, errs, false);
    for (size_t r = 0; r < nr; r++) {
        size_t i = at[r], vlen = 0;
        const char *v = vals[r] ? rocksdb_pinnableslice_value(vals[r], &vlen)
                                : NULL;
        memset(&ops[i], 0, sizeof(ops[i]));
        mark[i] = !errs[r] && v &&
                  store_codec_op_decode(v, vlen, reqs[i].op_id, &ops[i], NULL,
                                        0) == DD_OK &&
                  ops[i].outbox_seq == reqs[i].seq &&
                  ops[i].outbox_state == STORE_OUTBOX_PENDING;
        rocksdb_free(errs[r]);
        if (vals[r])
            rocksdb_pinnableslice_destroy(vals[r]);
    }
    rocksdb_writebatch_t *wb = store_wb_take(s);
    size_t staged = 0;
    for (size_t i = 0; i < n; i++) {
        /* the same entry twice in one batch: acknowledged once (the
         * pending count is decremented once) */
        for (size_t j = 0; mark[i] && j < i; j++)
            if (mark[j] && reqs[j].seq == reqs[i].seq)
                mark[i] = false;
        if (!mark[i])
            continue;
        unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN];
        store_codec_outbox_key(reqs[i].seq, key);
        rocksdb_writebatch_delete_cf(wb, s->cf[CF_OUTBOX], (const char *)key,
                                     sizeof(key));
        unsigned char vbuf[STORE_CODEC_OP_VALUE_MAX];
        ops[i].outbox_state = STORE_OUTBOX_SENT;
        size_t m = store_codec_op_encode(&ops[i], vbuf, sizeof(vbuf));
        assert(m > 0);
        rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], reqs[i].op_id,
                                  sizes[i], (const char *)vbuf, m);
        staged++;
    }
    char *rerr = NULL;
    if (staged)
        rocksdb_write(s->db, s->wopts_nosync, wb, &rerr);
    store_wb_give(s, wb);
    if (rerr) {
        err = store_write_fail(s, rerr, "rocksdb_write(outbox ack batch)",
                               "batch", errstr, errstr_size);
        store_index_write_failed(s);
        goto out;
    }
    int64_t now = store_clock_ms(s);
    bool synced = false;
    for (size_t i = 0; i < n; i++)
        if (mark[i]) {
            store_index_put(s->idx, &keys[i], &ops[i], now,
                            STORE_INDEX_UPSERT);
            atomic_fetch_sub(&s->pending, 1);
            synced = outbox_unpin(s, reqs[i].seq, synced);
        }
out:
    return err;
}

dd_err_t store_outbox_ack_batch(struct store *s,
                                struct store_outbox_ack_req *reqs, size_t n,
                                char *errstr, size_t errstr_size)
{
    if (n == 0)
        return DD_OK;
    struct dd_scratch local, *sc = dd_scratch_take(&s->scratch, &local);
    struct store_index_key *keys = dd_scratch_alloc(sc, n * sizeof(*keys));
    struct store_op *ops = dd_scratch_alloc(sc, n * sizeof(*ops));
    bool *mark = dd_scratch_calloc(sc, n, sizeof(*mark));
    uint64_t locked[STORE_STRIPES / 64] = {0};
    dd_err_t err = DD_OK;
    if (!keys || !ops || !mark) {
        err = DD_ERR_NOMEM;
        dd_errstr_set(errstr, errstr_size,
                      "store_outbox_ack_batch: out of memory (%zu)", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        reqs[i].err = store_op_id_check("store_outbox_ack_batch",
                                        reqs[i].op_id, errstr, errstr_size);
        if (reqs[i].err) { /* never staged: refused again below */
            reqs[i].op_id = "";
            continue;
        }
        store_index_digest(s->idx, reqs[i].op_id, strlen(reqs[i].op_id),
                           &keys[i]);
        store_stripes_add(locked, &keys[i]);
    }
    store_stripes_lock(s, locked);
    err = ack_batch_stage(s, sc, reqs, n, keys, ops, mark, errstr,
                          errstr_size);
    store_stripes_unlock(s, locked);
    for (size_t i = 0; i < n; i++) {
        if (err)
            reqs[i].err = err;
        else if (!mark[i] && !reqs[i].err) /* the rare cases, one by one */
            reqs[i].err = store_outbox_ack(s, reqs[i].seq, reqs[i].op_id,
                                           errstr, errstr_size);
    }
out:
    dd_scratch_give(&s->scratch, sc);
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
        if (klen != STORE_CODEC_OUTBOX_KEY_LEN) {
            dd_errstr_set(errstr, errstr_size,
                          "store: outbox key of %zu bytes (expected 8)", klen);
            err = DD_ERR_FATAL;
            goto out;
        }
        uint64_t seq = store_codec_be64_get((const unsigned char *)k);
        struct store_codec_outbox ent;
        err = store_codec_outbox_decode(v, vlen, seq, &ent, errstr,
                                        errstr_size);
        if (err)
            goto out;
        char event_key[STORE_HASH_LEN + 1];
        memcpy(op_id, ent.op_id, ent.op_id_len);
        op_id[ent.op_id_len] = '\0';
        memcpy(event_key, ent.event_key, ent.event_key_len);
        event_key[ent.event_key_len] = '\0';
        char *whole = NULL; /* an entry naming its body: rebuilt */
        const void *value = ent.value;
        size_t value_len = ent.value_len;
        if (ent.body_sha256) {
            err = store_cond_outbox_rebuild(s, &ent, seq, &whole, &value_len,
                                            errstr, errstr_size);
            if (err)
                goto out;
            value = whole;
        }
        int stop = cb(opaque, seq, op_id, event_key, ent.generation, value,
                      value_len);
        free(whole);
        if (stop)
            break;
    }
    rocksdb_iter_get_error(it, &rerr);
    if (rerr)
        err = store_rdb_fail(rerr, "rocksdb_iter(outbox)", s->path, errstr,
                             errstr_size);
out:
    rocksdb_iter_destroy(it);
    free(op_id);
    return err;
}

/* What unpin_old_one did with an entry. */
enum unpin_old {
    UNPIN_OLD_NONE,      /* gone or whole: nothing written */
    UNPIN_OLD_REWRITTEN, /* rewritten whole (not yet synced) */
};

/* Under \p seq's op stripe: rewrite its entry, still naming its body, as
 * the whole event (without fsync: the caller syncs once, then unpins). */
static dd_err_t unpin_old_one(struct store *s, uint64_t seq,
                              enum unpin_old *did, char *errstr,
                              size_t errstr_size)
{
    unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN];
    store_codec_outbox_key(seq, key);
    char *rerr = NULL, *val = NULL, *whole = NULL;
    size_t vlen = 0, wlen = 0;
    char op_id[STORE_KEY_MAX + 1];
    pthread_mutex_t *mu = NULL;
    dd_err_t err = DD_OK;
    *did = UNPIN_OLD_NONE;
    /* read, learn the op, take its stripe, read again (an acknowledgement
     * may have deleted the entry meanwhile) */
    for (int pass = 0; pass < 2; pass++) {
        rocksdb_free(val);
        val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_OUTBOX],
                             (const char *)key, sizeof(key), &vlen, &rerr);
        if (rerr) {
            err = store_rdb_fail(rerr, "rocksdb_get_cf(outbox)", "unpin",
                                 errstr, errstr_size);
            goto out;
        }
        struct store_codec_outbox ent;
        if (!val)
            goto out; /* gone */
        err = store_codec_outbox_decode(val, vlen, seq, &ent, errstr,
                                        errstr_size);
        if (err || !ent.body_sha256)
            goto out; /* corrupt (the replay names it), or whole */
        if (pass == 0) {
            memcpy(op_id, ent.op_id, ent.op_id_len);
            op_id[ent.op_id_len] = '\0';
            struct store_index_key k;
            mu = store_op_stripe(s, op_id, &k);
            pthread_mutex_lock(mu);
            continue;
        }
        err = store_cond_outbox_rebuild(s, &ent, seq, &whole, &wlen, errstr,
                                        errstr_size);
        if (err)
            goto out;
        struct store_codec_outbox w = ent;
        w.value = whole;
        w.value_len = wlen;
        w.body_sha256 = NULL;
        w.suffix = NULL;
        w.suffix_len = 0;
        size_t n = store_codec_outbox_len(&w);
        unsigned char *buf = malloc(n);
        if (!buf) {
            dd_errstr_set(errstr, errstr_size, "store: out of memory");
            err = DD_ERR_NOMEM;
            goto out;
        }
        size_t got = store_codec_outbox_encode(&w, buf, n);
        assert(got == n);
        rocksdb_put_cf(s->db, s->wopts_nosync, s->cf[CF_OUTBOX],
                       (const char *)key, sizeof(key), (const char *)buf, got,
                       &rerr);
        free(buf);
        if (rerr) {
            err = store_write_fail(s, rerr, "rocksdb_put_cf(outbox, whole)",
                                   op_id, errstr, errstr_size);
            goto out;
        }
        *did = UNPIN_OLD_REWRITTEN;
    }
out:
    if (mu)
        pthread_mutex_unlock(mu);
    rocksdb_free(val);
    free(whole);
    return err;
}

/* At most this long of the caller's thread per store_outbox_unpin_old. */
#define STORE_UNPIN_OLD_BUDGET_MS 20

dd_err_t store_outbox_unpin_old(struct store *s, int64_t now_ms,
                                size_t *rewritten, char *errstr,
                                size_t errstr_size)
{
    *rewritten = 0;
    int64_t before = now_ms - s->validators_ttl_ms / 2;
    if (atomic_load(&s->pins.floor_ms) >= before)
        return DD_OK;
    uint64_t seqs[64];
    size_t k = store_pins_older(&s->pins, before, seqs, 64);
    bool drop[64] = {false};
    dd_err_t err = DD_OK;
    int64_t start = dd_now_ms();
    size_t i = 0;
    /* the first entry always: every call makes progress, however slow */
    for (; i < k && (i == 0 || dd_now_ms() - start < STORE_UNPIN_OLD_BUDGET_MS);
         i++) {
        enum unpin_old did;
        char e[DD_ERRSTR_SIZE];
        dd_err_t r = unpin_old_one(s, seqs[i], &did, e, sizeof(e));
        if (r == DD_ERR_FATAL) {
            /* its body is gone: nothing left to keep; the replay will name
             * it, and the other entries go on */
            log_msg(LOG_ERR, "STORE", "%s", e);
        } else if (r) {
            dd_errstr_set(errstr, errstr_size, "%s", e);
            err = r;
            break;
        } else if (did == UNPIN_OLD_REWRITTEN) {
            (*rewritten)++;
        }
        /* rewritten, gone (an acknowledgement whose own unpin found the
         * WAL unsynced), whole or bodiless: the pin goes once synced */
        drop[i] = true;
    }
    /* one sync for them all, before any pin goes */
    if (!store_wal_sync(s, "unpinning outbox entries rewritten whole")) {
        if (!err) {
            dd_errstr_set(errstr, errstr_size, "store_outbox_unpin_old: the "
                          "WAL cannot be synced (an earlier fsync failed); "
                          "the pins stay");
            err = DD_ERR_IO;
        }
        return err;
    }
    for (size_t j = 0; j < i; j++)
        if (drop[j])
            store_pins_remove(&s->pins, seqs[j]);
    return err;
}

uint64_t store_outbox_pending(struct store *s)
{
    return atomic_load(&s->pending);
}
