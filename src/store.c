/*
 * store.c: the op state machine of the store (store_internal.h lists the
 * store's files): claims, one by one and in batches, the fenced transitions
 * of a live op (retry, resume, lease renewal), completions and their group
 * commit (with the outbox entry they write), attempts and forget.  What
 * changes one op (its record, outbox entry, attempts, validator and its
 * index entry) is one WriteBatch under the op's stripe; the outbox's
 * acknowledgements, replay and pins' upkeep are in store_outbox.c.
 *
 * Threads: the store is safe from any thread (store.h).  Claims,
 * completions, acks and lease renewals run on the pipeline thread; the
 * retry hook (store_op_retry, store_op_resume) on the fetch engine's thread;
 * store_op_get on the job API's HTTP threads too; store_attempts_get on the
 * pipeline or the CLI's thread (`dedupd inspect`).
 */
#include "store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "key.h"
#include "log.h"

static const char META_SEQ_KEY[] = STORE_META_SEQ_KEY;

#define ST_BIT(st) (1u << (st))
#define ST_LIVE (ST_BIT(STORE_OP_RUNNING) | ST_BIT(STORE_OP_RETRYABLE))

/* ---------------------------------------------------------------------- */
/* little helpers                                                          */

/*
 * RocksDB counts every key comparison in its thread-local perf context (two
 * TLS look-ups through __tls_get_addr per comparison in Debian's shared
 * library): about 10% of a claim batch's memtable inserts.  dedupd reads no
 * perf context, so the claim paths switch it off for their thread.
 */
static void perf_off(void)
{
    static _Thread_local bool done;
    if (!done) {
        rocksdb_set_perf_level(rocksdb_disable);
        done = true;
    }
}

/*
 * A write of ops failed.  RocksDB may still have applied it (an error after
 * the WAL write), so no entry can be trusted any more: off until reopen.
 * @locality any thread (also the fetch engine's, through op_transition).
 */
void store_index_write_failed(struct store *s)
{
    if (store_index_disable(s->idx))
        log_msg(LOG_WARNING, "STORE",
                "hot index of %s off until reopen after a failed write",
                s->path);
}

dd_err_t store_op_id_check(const char *fn, const char *op_id, char *errstr,
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

/* ---------------------------------------------------------------------- */
/* reads and writes                                                        */

/*
 * Read op_id.  *found is false when absent, or when expired at now_ms unless
 * include_expired.  Caller holds the op's stripe when it will write.
 * @locality any thread (the fetch engine's through op_transition, the HTTP
 * threads' through store_op_get).
 */
dd_err_t store_op_read(struct store *s, const char *op_id, int64_t now_ms,
                        bool include_expired, struct store_op *op,
                        bool *found, char *errstr, size_t errstr_size)
{
    char *rerr = NULL;
    size_t vlen = 0;
    char *val = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_OPS], op_id,
                               strlen(op_id), &vlen, &rerr);
    if (rerr)
        return store_rdb_fail(rerr, "rocksdb_get_cf(ops)", op_id, errstr,
                              errstr_size);
    *found = false;
    if (!val)
        return DD_OK;
    struct store_op tmp;
    memset(&tmp, 0, sizeof(tmp));
    dd_err_t err = store_codec_op_decode(val, vlen, op_id, &tmp, errstr,
                                         errstr_size);
    rocksdb_free(val);
    if (err)
        return err;
    if (!include_expired && store_record_expired(tmp.expires_at_ms, now_ms))
        return DD_OK;
    *op = tmp;
    *found = true;
    return DD_OK;
}

dd_err_t store_op_write(struct store *s, const char *op_id,
                         const struct store_op *op, char *errstr,
                         size_t errstr_size)
{
    unsigned char buf[STORE_CODEC_OP_VALUE_MAX];
    size_t len = store_codec_op_encode(op, buf, sizeof(buf));
    assert(len > 0); /* every string is bounded by its array */
    char *rerr = NULL;
    /* no fsync (store.h: claims, renewals): the next synced write persists
     * it, and losing it in a crash costs at most a repeated fetch */
    rocksdb_put_cf(s->db, s->wopts_nosync, s->cf[CF_OPS], op_id,
                   strlen(op_id), (const char *)buf, len, &rerr);
    if (rerr) {
        store_index_write_failed(s);
        return store_write_fail(s, rerr, "rocksdb_put_cf(ops)", op_id, errstr,
                                errstr_size);
    }
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
        store_codec_le64_put(v, want);
        char *rerr = NULL;
        rocksdb_put_cf(s->db, s->wopts, s->cf[CF_META], META_SEQ_KEY,
                       sizeof(META_SEQ_KEY) - 1, (const char *)v, sizeof(v),
                       &rerr);
        if (rerr) {
            /* n is burnt: a gap in seqs is harmless */
            err = store_write_fail(s, rerr, "rocksdb_put_cf(meta)",
                                   META_SEQ_KEY, errstr, errstr_size);
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
/* ops                                                                     */

/* A failed op past store.failed_ttl_ms, claimed again (DESIGN.md section
 * 2): running at retry_epoch + 1 (the caller adds the generation and
 * the lease), under the event_key of that epoch; created_at, first source
 * and attempts (the attempt log goes on) kept.
 * @locality any thread (under the op's stripe). */
static void claim_failed_again(const char *op_id, struct store_op *cur)
{
    cur->state = STORE_OP_RUNNING;
    cur->outbox_state = STORE_OUTBOX_NONE;
    cur->outbox_seq = 0;
    cur->retry_epoch++;
    key_event_key_epoch(op_id, cur->request_hash, cur->retry_epoch,
                        cur->event_key);
    cur->category[0] = '\0';
    cur->not_before_ms = 0;
}

int64_t store_record_life_ms(int64_t ops_ttl_ms, int64_t failed_ttl_ms)
{
    int64_t failed = store_add_ms(failed_ttl_ms, ops_ttl_ms / 2);
    return failed > ops_ttl_ms ? failed : ops_ttl_ms;
}

/* Whether a failed op may be claimed again: its failure (updated_at, which
 * nothing changes after it: the failure's time, or 1 ms after the change
 * before it, store_op_stamp) is more than failed_ttl_ms ago, and its
 * result was acknowledged (a pending one still has its outbox entry and
 * may still be tracked by this run).  @locality any thread. */
static bool failed_reclaimable(const struct store *s,
                               const struct store_op *cur, int64_t now_ms)
{
    return cur->state == STORE_OP_FAILED
           && cur->outbox_state != STORE_OUTBOX_PENDING
           && store_record_expired(store_add_ms(cur->updated_at_ms,
                                                s->failed_ttl_ms),
                                   now_ms);
}

/*
 * One claim applied to the op's current record (*cur, live when found), as
 * DESIGN.md section 4 orders it.  *dirty: the record changed and must be
 * written.  Shared by store_claim and store_claim_batch.
 */
static enum store_claim_result claim_apply(struct store *s, const char *op_id,
                                           struct store_op *cur, bool found,
                                           const char *request_hash,
                                           size_t hlen, const char *event_key,
                                           size_t elen, const char *source,
                                           int64_t now_ms, bool *dirty)
{
    *dirty = false;
    /* forgotten: a new op that continues from its generation (a late
     * record of the forgotten one never wins over it) */
    uint64_t gen0 = found && cur->state == STORE_OP_FORGOTTEN
                        ? cur->generation : 0;
    if (!found || gen0) {
        /* absent or expired: a new op (an expired record is overwritten) */
        memset(cur, 0, sizeof(*cur));
        cur->state = STORE_OP_RUNNING;
        cur->outbox_state = STORE_OUTBOX_NONE;
        cur->generation = gen0 + 1;
        cur->lease_expires_at_ms = store_add_ms(now_ms, s->lease_ms);
        cur->created_at_ms = now_ms;
        cur->updated_at_ms = now_ms;
        /* a running record expires too, or a crash would leak it; never
         * before its lease (a TTL shorter than a fetch must not drop the
         * record its completion is fenced against) */
        cur->expires_at_ms = store_add_ms(now_ms, s->ops_ttl_ms);
        if (cur->expires_at_ms < cur->lease_expires_at_ms)
            cur->expires_at_ms = cur->lease_expires_at_ms;
        memcpy(cur->request_hash, request_hash, hlen + 1);
        memcpy(cur->event_key, event_key, elen + 1);
        dd_strlcpy(cur->lease_owner, s->owner, sizeof(cur->lease_owner));
        dd_strlcpy(cur->source, source, sizeof(cur->source));
        *dirty = true;
        return STORE_CLAIM_NEW;
    }
    if (strcmp(cur->request_hash, request_hash) != 0)
        return STORE_CLAIM_CONFLICT; /* record untouched */
    bool failed_again = failed_reclaimable(s, cur, now_ms);
    if ((cur->state == STORE_OP_COMPLETE || cur->state == STORE_OP_FAILED)
        && !failed_again)
        return STORE_CLAIM_DUPLICATE;
    if (!failed_again && strcmp(cur->lease_owner, s->owner) == 0)
        return STORE_CLAIM_DUPLICATE; /* in flight here */
    if (failed_again
        || store_record_expired(cur->lease_expires_at_ms, now_ms)
        || strncmp(cur->lease_owner, s->owner_prefix,
                   strlen(s->owner_prefix))
               == 0) {
        /* a failed op past failed_ttl_ms (its next retry epoch); an
         * expired lease, or a lease of a previous run of this instance: a
         * retryable op stays retryable with its not_before, the new holder
         * waits it out, then resumes it (store_op_resume) */
        if (failed_again)
            claim_failed_again(op_id, cur);
        else if (cur->state != STORE_OP_RETRYABLE)
            cur->state = STORE_OP_RUNNING;
        cur->generation++;
        dd_strlcpy(cur->lease_owner, s->owner, sizeof(cur->lease_owner));
        cur->lease_expires_at_ms = store_add_ms(now_ms, s->lease_ms);
        cur->updated_at_ms = now_ms; /* a new generation: this clock's */
        cur->expires_at_ms = store_add_ms(now_ms, s->ops_ttl_ms);
        if (cur->expires_at_ms < cur->lease_expires_at_ms)
            cur->expires_at_ms = cur->lease_expires_at_ms;
        *dirty = true;
        return STORE_CLAIM_RECLAIMED;
    }
    return STORE_CLAIM_DUPLICATE; /* in flight elsewhere */
}

static dd_err_t check_claim_args(const char *fn, const char *op_id,
                                 const char *request_hash,
                                 const char *event_key, size_t *hlen,
                                 size_t *elen, char *errstr,
                                 size_t errstr_size)
{
    dd_err_t err = store_op_id_check(fn, op_id, errstr, errstr_size);
    if (err)
        return err;
    *hlen = strlen(request_hash);
    *elen = strlen(event_key);
    if (*hlen == 0 || *hlen > STORE_HASH_LEN || *elen > STORE_HASH_LEN) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): request_hash of %zu bytes or "
                      "event_key of %zu bytes (at most %d)",
                      fn, op_id, *hlen, *elen, STORE_HASH_LEN);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

dd_err_t store_claim(struct store *s, const char *op_id,
                     const char *request_hash, const char *event_key,
                     const char *source, int64_t now_ms,
                     enum store_claim_result *result, struct store_op *op,
                     char *errstr, size_t errstr_size)
{
    size_t hlen = 0, elen = 0;
    dd_err_t err = check_claim_args("store_claim", op_id, request_hash,
                                    event_key, &hlen, &elen, errstr,
                                    errstr_size);
    if (err)
        return err;

    perf_off();
    struct store_index_key k;
    store_index_digest(s->idx, op_id, strlen(op_id), &k);
    pthread_mutex_t *mu = store_key_stripe(s, &k);
    pthread_mutex_lock(mu);
    struct store_op cur;
    bool found = false;
    memset(&cur, 0, sizeof(cur));
    /* the index proves absence without a read; a present op is read, since
     * the answer carries the whole record */
    struct store_index_entry sl;
    bool absent = store_index_judge(s->idx, &k, now_ms, store_clock_ms(s),
                                    &sl)
                  == STORE_INDEX_ABSENT;
    store_index_count(s->idx, &k, absent);
    if (!absent) {
        err = store_op_read(s, op_id, now_ms, false, &cur, &found, errstr,
                      errstr_size);
        if (err)
            goto out;
        if (found)
            store_index_put(s->idx, &k, &cur, now_ms, STORE_INDEX_FILL);
    }
    bool dirty = false;
    *result = claim_apply(s, op_id, &cur, found, request_hash, hlen,
                          event_key, elen, source, now_ms, &dirty);
    if (dirty) {
        err = store_op_write(s, op_id, &cur, errstr, errstr_size);
        if (err)
            goto out;
        store_index_put(s->idx, &k, &cur, now_ms, STORE_INDEX_UPSERT);
    }
    *op = cur;
out:
    pthread_mutex_unlock(mu);
    return err;
}

/* @locality the pipeline, an HTTP server thread (GET /v1/ops/{op_id}), or
 * the CLI's thread (`dedupd inspect`). */
dd_err_t store_op_get(struct store *s, const char *op_id, int64_t now_ms,
                      struct store_op *op, bool *found, char *errstr,
                      size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_op_get", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    return store_op_read(s, op_id, now_ms, false, op, found, errstr, errstr_size);
}

static dd_err_t fence_check(struct store *s, const char *fn, const char *op_id,
                            unsigned states, uint64_t generation,
                            const struct store_op *op, char *errstr,
                            size_t errstr_size);

/* Fencing: in one of the states of \p states (ST_BIT mask), leased by this
 * run, at generation.  Caller holds the op's stripe.
 * @locality any thread (the fetch engine's through op_transition). */
static dd_err_t fence(struct store *s, const char *fn, const char *op_id,
                      unsigned states, uint64_t generation, int64_t now_ms,
                      struct store_op *op, char *errstr, size_t errstr_size)
{
    bool found = false;
    dd_err_t err = store_op_read(s, op_id, now_ms, false, op, &found, errstr,
                           errstr_size);
    if (err)
        return err;
    if (!found) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): op not found (absent or expired)", fn,
                      op_id);
        return DD_ERR_STATE;
    }
    return fence_check(s, fn, op_id, states, generation, op, errstr,
                       errstr_size);
}

/* fence's checks of the live record \p op.
 * @locality any thread. */
static dd_err_t fence_check(struct store *s, const char *fn, const char *op_id,
                            unsigned states, uint64_t generation,
                            const struct store_op *op, char *errstr,
                            size_t errstr_size)
{
    if (!(states & ST_BIT(op->state))) {
        dd_errstr_set(errstr, errstr_size, "%s(%.64s): op is %s, not %s", fn,
                      op_id, store_op_state2str(op->state),
                      states == ST_BIT(STORE_OP_RUNNING)     ? "running"
                      : states == ST_BIT(STORE_OP_RETRYABLE) ? "retryable"
                                                             : "running or retryable");
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

static dd_err_t attempts_check(const char *fn, const char *op_id,
                               const struct store_attempt *attempts, size_t n,
                               char *errstr, size_t errstr_size);
static void attempts_stage(struct store *s, rocksdb_writebatch_t *wb,
                           const char *op_id,
                           const struct store_attempt *attempts, size_t n,
                           int64_t now_ms);

/* The lease of a live op, renewed: now + lease; a leased record must not
 * expire under its holder.  @locality any thread (op_transition). */
static void lease_extend(struct store *s, struct store_op *op, int64_t now_ms)
{
    store_op_stamp(op, now_ms);
    op->lease_expires_at_ms = store_add_ms(now_ms, s->lease_ms);
    if (op->expires_at_ms < op->lease_expires_at_ms)
        op->expires_at_ms = op->lease_expires_at_ms;
}

/* A transition's change to the fenced record; DD_ERR_STATE refuses it.
 * @locality the caller's of op_transition. */
typedef dd_err_t(op_edit_fn)(struct store_op *op, const void *arg,
                             int64_t now_ms, const char *op_id, char *errstr,
                             size_t errstr_size);

/*
 * One fenced transition of a live op held by this run (DESIGN.md section 4):
 * under the op's stripe, fence it (\p states, \p generation), let \p edit
 * change it, renew the lease, and write it with \p attempt (when not NULL)
 * in one WriteBatch without fsync (store.h), then update the index.
 * @locality the fetch engine's thread (retry, resume) or the pipeline
 * (lease renewal).
 */
static dd_err_t op_transition(struct store *s, const char *fn,
                              const char *op_id, unsigned states,
                              uint64_t generation, int64_t now_ms,
                              op_edit_fn *edit, const void *arg,
                              const struct store_attempt *attempt,
                              char *errstr, size_t errstr_size)
{
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    pthread_mutex_lock(mu);
    struct store_op op;
    dd_err_t err = fence(s, fn, op_id, states, generation, now_ms, &op, errstr,
                         errstr_size);
    if (!err)
        err = edit(&op, arg, now_ms, op_id, errstr, errstr_size);
    if (!err) {
        lease_extend(s, &op, now_ms);
        if (attempt)
            attempts_stage(s, wb, op_id, attempt, 1, now_ms);
        unsigned char vbuf[STORE_CODEC_OP_VALUE_MAX];
        size_t vlen = store_codec_op_encode(&op, vbuf, sizeof(vbuf));
        assert(vlen > 0);
        rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], op_id, strlen(op_id),
                                  (const char *)vbuf, vlen);
        char *rerr = NULL;
        /* no fsync: the retry hook runs on the fetch engine's thread, which
         * must not wait for the disk; the next group commit persists it */
        rocksdb_write(s->db, s->wopts_nosync, wb, &rerr);
        if (rerr) {
            store_index_write_failed(s);
            err = store_write_fail(s, rerr, "rocksdb_write(ops)", op_id, errstr,
                                   errstr_size);
        } else
            store_index_put(s->idx, &k, &op, now_ms, STORE_INDEX_UPSERT);
    }
    pthread_mutex_unlock(mu);
    rocksdb_writebatch_destroy(wb);
    return err;
}

struct retry_edit {
    int64_t not_before_ms;
    uint32_t attempts;
    const char *category;
};

/* @locality the fetch engine's thread. */
static dd_err_t edit_retry(struct store_op *op, const void *arg,
                           int64_t now_ms, const char *op_id, char *errstr,
                           size_t errstr_size)
{
    const struct retry_edit *r = arg;
    (void)now_ms, (void)op_id, (void)errstr, (void)errstr_size;
    op->state = STORE_OP_RETRYABLE;
    op->not_before_ms = r->not_before_ms;
    op->attempts = r->attempts;
    dd_strlcpy(op->category, r->category, sizeof(op->category));
    return DD_OK;
}

/* @locality the fetch engine's thread. */
static dd_err_t edit_resume(struct store_op *op, const void *arg,
                            int64_t now_ms, const char *op_id, char *errstr,
                            size_t errstr_size)
{
    (void)arg;
    if (now_ms < op->not_before_ms) {
        dd_errstr_set(errstr, errstr_size,
                      "store_op_resume(%.64s): retryable not before %lld, "
                      "%lld ms from now",
                      op_id, (long long)op->not_before_ms,
                      (long long)(op->not_before_ms - now_ms));
        return DD_ERR_STATE;
    }
    op->state = STORE_OP_RUNNING;
    op->not_before_ms = 0;
    return DD_OK;
}

/* @locality the pipeline (lease renewal). */
static dd_err_t edit_none(struct store_op *op, const void *arg, int64_t now_ms,
                          const char *op_id, char *errstr, size_t errstr_size)
{
    (void)op, (void)arg, (void)now_ms, (void)op_id, (void)errstr,
        (void)errstr_size;
    return DD_OK;
}

/* @locality the fetch engine's thread (the pipeline's retry hook). */
dd_err_t store_op_retry(struct store *s, const char *op_id,
                        uint64_t generation, int64_t not_before_ms,
                        uint32_t attempts, const char *category,
                        const struct store_attempt *attempt, int64_t now_ms,
                        char *errstr, size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_op_retry", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    size_t clen = category ? strlen(category) : 0;
    if (clen == 0 || clen > STORE_CATEGORY_MAX || not_before_ms < 0) {
        dd_errstr_set(errstr, errstr_size,
                      "store_op_retry(%.64s): category of %zu bytes (must be "
                      "1..%d) or negative not_before %lld",
                      op_id, clen, STORE_CATEGORY_MAX,
                      (long long)not_before_ms);
        return DD_ERR_INVAL;
    }
    if (attempt) {
        err = attempts_check("store_op_retry", op_id, attempt, 1, errstr,
                             errstr_size);
        if (err)
            return err;
    }
    struct retry_edit r = {not_before_ms, attempts, category};
    /* from retryable too: an attempt may run before its START was recorded
     * (the resume failed on the disk); its failure still goes on record */
    return op_transition(s, "store_op_retry", op_id, ST_LIVE, generation,
                         now_ms, edit_retry, &r, attempt, errstr,
                         errstr_size);
}

/* @locality the fetch engine's thread (the pipeline's retry hook). */
dd_err_t store_op_resume(struct store *s, const char *op_id,
                         uint64_t generation, int64_t now_ms, char *errstr,
                         size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_op_resume", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    return op_transition(s, "store_op_resume", op_id,
                         ST_BIT(STORE_OP_RETRYABLE), generation, now_ms,
                         edit_resume, NULL, NULL, errstr, errstr_size);
}

dd_err_t store_lease_renew(struct store *s, const char *op_id,
                           uint64_t generation, int64_t now_ms, char *errstr,
                           size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_lease_renew", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    return op_transition(s, "store_lease_renew", op_id, ST_LIVE, generation,
                         now_ms, edit_none, NULL, NULL, errstr, errstr_size);
}

/* Arguments of a completion that do not depend on the stored record. */
static dd_err_t complete_check(const char *fn, const char *op_id,
                               enum store_op_state state, const char *category,
                               size_t value_len, char *errstr,
                               size_t errstr_size)
{
    dd_err_t err = store_op_id_check(fn, op_id, errstr, errstr_size);
    if (err)
        return err;
    if (state != STORE_OP_COMPLETE && state != STORE_OP_FAILED) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): final state must be complete or failed, "
                      "not %s",
                      fn, op_id, store_op_state2str(state));
        return DD_ERR_INVAL;
    }
    size_t clen = category ? strlen(category) : 0;
    if (clen > STORE_CATEGORY_MAX || value_len > UINT32_MAX) {
        dd_errstr_set(errstr, errstr_size,
                      "%s(%.64s): category of %zu bytes (at most %d) or value "
                      "of %zu bytes (at most %u)",
                      fn, op_id, clen, STORE_CATEGORY_MAX, value_len,
                      UINT32_MAX);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

/*
 * Under the op's stripe: fence, allocate the outbox sequence and add the op
 * record and the outbox entry to \p wb.  *op is the record as it will be
 * written (for the index once the batch is durable).
 */
/* A completion whose event's bytes [off, off + len) are the literal of a
 * body the same WriteBatch puts (store_complete_req.body_lit_off). */
struct body_ref {
    const char *digest; /* hex SHA-256, the body's key in CF bodies */
    uint64_t body_len;
    size_t off, len;
    int64_t written_at; /* the batch's body clock (store_body_clock) */
};

/* Stage outbox entry \p n of \p ent: with \p ref, pinned (store_pins.c),
 * without the literal and naming the body; else (or when the pin finds no
 * memory) the whole event.  Head and the caller's bytes go in as slices:
 * one copy, the batch's own. */
static void outbox_stage(struct store *s, rocksdb_writebatch_t *wb,
                         uint64_t n, struct store_codec_outbox *ent,
                         const struct body_ref *ref)
{
    const char *value = ent->value;
    size_t value_len = ent->value_len;
    if (ref && store_pins_add(&s->pins, n, ref->written_at)) {
        ent->body_sha256 = ref->digest;
        ent->body_len = ref->body_len;
        ent->literal_len = (uint32_t)ref->len;
        ent->written_at_ms = ref->written_at;
        ent->value_len = ref->off;
        ent->suffix = value + ref->off + ref->len;
        ent->suffix_len = value_len - ref->off - ref->len;
    }
    unsigned char head[STORE_CODEC_HDR_LEN + 2 + STORE_KEY_MAX + 2
                       + STORE_HASH_LEN + 8 + 8 + 2 + STORE_HASH_LEN + 8 + 4
                       + 4];
    size_t hlen = store_codec_outbox_encode_head(ent, head, sizeof(head));
    assert(hlen > 0); /* bounded strings; value_len checked */
    unsigned char mid[4];
    size_t mlen = store_codec_outbox_encode_mid(ent, mid);
    unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN];
    store_codec_outbox_key(n, key);
    const char *keys[1] = {(const char *)key};
    size_t klens[1] = {sizeof(key)};
    const char *vals[4] = {(const char *)head, ent->value_len ? value : "",
                           (const char *)mid,
                           ent->suffix_len ? ent->suffix : ""};
    size_t vlens[4] = {hlen, ent->value_len, mlen, ent->suffix_len};
    rocksdb_writebatch_putv_cf(wb, s->cf[CF_OUTBOX], 1, keys, klens,
                               mlen ? 4 : 2, vals, vlens);
}

static dd_err_t complete_stage(struct store *s, const char *fn,
                               rocksdb_writebatch_t *wb, const char *op_id,
                               const struct store_index_key *k,
                               uint64_t generation, enum store_op_state state,
                               const char *category, uint32_t attempts,
                               const void *value, size_t value_len,
                               const struct body_ref *ref,
                               int64_t now_ms, const struct store_op *held,
                               bool held_unwritten, bool acked,
                               struct store_op *op, uint64_t *seq,
                               char *errstr, size_t errstr_size)
{
    dd_err_t err;
    /* the record the caller holds, while the index says nothing wrote the
     * op since: fenced without a read */
    if (held && !store_record_expired(held->expires_at_ms, now_ms) &&
        store_index_holds(s->idx, k, held)) {
        *op = *held;
        err = fence_check(s, fn, op_id, ST_LIVE, generation, op, errstr,
                          errstr_size);
    } else {
        bool found = false;
        err = store_op_read(s, op_id, now_ms, false, op, &found, errstr,
                            errstr_size);
        if (!err && !found && held && held_unwritten) {
            /* its claim was deferred (store_claim_req.defer_new) and
             * nothing wrote the op since: the held record is the op */
            *op = *held;
            found = true;
        }
        if (!err && !found) {
            dd_errstr_set(errstr, errstr_size,
                          "%s(%.64s): op not found (absent or expired)", fn,
                          op_id);
            err = DD_ERR_STATE;
        } else if (!err) {
            err = fence_check(s, fn, op_id, ST_LIVE, generation, op, errstr,
                              errstr_size);
        }
    }
    if (err)
        return err;
    size_t idlen = strlen(op_id);
    uint64_t n = 0;
    err = acked ? DD_OK : seq_alloc(s, &n, errstr, errstr_size);
    if (err)
        return err;
    op->state = state;
    dd_strlcpy(op->category, category ? category : "", sizeof(op->category));
    op->attempts = attempts;
    op->outbox_state = acked ? STORE_OUTBOX_SENT : STORE_OUTBOX_PENDING;
    op->outbox_seq = n;
    op->not_before_ms = 0;
    store_op_stamp(op, now_ms);
    /* a failed op is kept for the ops TTL, or for failed_ttl_ms + half the
     * ops TTL when longer (store_record_life_ms: else, with failed_ttl_ms
     * near or over the ops TTL, it would expire about when it may be
     * claimed again, and its next claim would start over at epoch 0, under
     * the first failure's event_key): claimed again after failed_ttl_ms, it
     * keeps counting its retry epochs (DESIGN.md sections 2 and 4).  The
     * TTL counts from now (C-28's boundary); updated_at can be a few ms
     * later (store_op_stamp), which only shortens the window between
     * failed_ttl_ms and expiry by as much. */
    int64_t keep = state == STORE_OP_FAILED
                       ? store_record_life_ms(s->ops_ttl_ms, s->failed_ttl_ms)
                       : s->ops_ttl_ms;
    op->expires_at_ms = store_add_ms(now_ms, keep);
    unsigned char vbuf[STORE_CODEC_OP_VALUE_MAX];
    size_t vlen = store_codec_op_encode(op, vbuf, sizeof(vbuf));
    assert(vlen > 0);
    rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], op_id, idlen,
                              (const char *)vbuf, vlen);
    *seq = n;
    if (acked)
        return DD_OK;
    struct store_codec_outbox ent = {
        .op_id = op_id,
        .op_id_len = idlen,
        .event_key = op->event_key,
        .event_key_len = strlen(op->event_key),
        .generation = op->generation,
        .value = value,
        .value_len = value_len,
    };
    outbox_stage(s, wb, n, &ent, ref);
    return DD_OK;
}

dd_err_t store_complete(struct store *s, const char *op_id,
                        uint64_t generation, enum store_op_state state,
                        const char *category, uint32_t attempts,
                        const void *value, size_t value_len, int64_t now_ms,
                        uint64_t *seq, char *errstr, size_t errstr_size)
{
    dd_err_t err = complete_check("store_complete", op_id, state, category,
                                  value_len, errstr, errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    rocksdb_writebatch_t *batch = rocksdb_writebatch_create();
    pthread_mutex_lock(mu);
    struct store_op op;
    uint64_t n = 0;
    err = complete_stage(s, "store_complete", batch, op_id, &k, generation,
                         state,
                         category, attempts, value, value_len, NULL, now_ms,
                         NULL,
                         false, false, &op, &n, errstr, errstr_size);
    if (err)
        goto out;
    char *rerr = NULL;
    rocksdb_write(s->db, s->wopts, batch, &rerr);
    if (rerr) {
        err = store_write_fail(s, rerr, "rocksdb_write(ops+outbox)", op_id,
                               errstr, errstr_size);
        store_index_write_failed(s);
        goto out;
    }
    store_index_put(s->idx, &k, &op, now_ms, STORE_INDEX_UPSERT);
    atomic_fetch_add(&s->pending, 1);
    *seq = n;
out:
    pthread_mutex_unlock(mu);
    rocksdb_writebatch_destroy(batch);
    return err;
}

/* ---------------------------------------------------------------------- */
/* group commit of completions                                             */

/* The scratch of one store_complete_batch: per request, its index key, the
 * op record as staged, the validator's body digest; the stripes taken. */
/* An op_id of a batch and its position (claims: in cb->u; completions: in
 * reqs), to write the ops column family in key order. */
struct batch_read {
    const char *id;
    size_t len;
    uint32_t u;
};

/* RocksDB's bytewise order of op_ids (MultiGet's sorted_input must agree
 * with it), then the position: equal op_ids keep their batch order. */
static int batch_read_cmp(const void *a, const void *b)
{
    const struct batch_read *x = a, *y = b;
    int c = dd_bytes_cmp(x->id, x->len, y->id, y->len);
    if (c)
        return c;
    return x->u < y->u ? -1 : x->u > y->u;
}

struct complete_batch {
    struct store_index_key *keys;
    struct store_op *ops;
    char (*digests)[STORE_HASH_LEN + 1];
    struct batch_read *order; /* the requests in op_id order */
    uint64_t locked[STORE_STRIPES / 64];
};

/* Reset each request's outputs, refuse what the stored record cannot
 * change (arguments, attempts), decide its validator and note its stripe;
 * all before any lock is taken. */
static void complete_batch_prepare(struct store *s,
                                   struct store_complete_req *reqs, size_t n,
                                   struct complete_batch *cb)
{
    for (size_t i = 0; i < n; i++) {
        struct store_complete_req *r = &reqs[i];
        r->seq = 0;
        r->changelog_len = 0;
        r->errstr[0] = '\0';
        r->validator_write = STORE_VALIDATOR_NONE;
        r->err = complete_check("store_complete_batch", r->op_id, r->state,
                                r->category, r->value_len, r->errstr,
                                sizeof(r->errstr));
        if (!r->err)
            r->err = attempts_check("store_complete_batch", r->op_id,
                                    r->attempt_log, r->n_attempt_log,
                                    r->errstr, sizeof(r->errstr));
        if (r->err)
            continue;
        /* validators and the body digest: checked and hashed before the
         * stripes are taken */
        r->validator_write = store_cond_prep(s, r, cb->digests[i]);
        store_index_digest(s->idx, r->op_id, strlen(r->op_id), &cb->keys[i]);
        store_stripes_add(cb->locked, &cb->keys[i]);
    }
}

/* Is request i's op_id one an earlier request of the batch completes?  The
 * requests are staged in op_id order with equal op_ids in batch order
 * (batch_read_cmp), so the earlier ones of its op_id were staged just before
 * it: \p last is the last request staged without an error so far
 * (UINT32_MAX: none), the only one that can share its op_id.  One compare
 * per request, where a scan of the earlier ones was quadratic in the batch
 * (0.85% of a shadow run's samples at a few thousand a batch). */
static bool complete_batch_repeated(const struct store_complete_req *reqs,
                                    const struct complete_batch *cb, size_t i,
                                    uint32_t last)
{
    return last != UINT32_MAX && cb->keys[last].k0 == cb->keys[i].k0
           && cb->keys[last].k1 == cb->keys[i].k1
           && strcmp(reqs[last].op_id, reqs[i].op_id) == 0;
}

/* Does request i put its body, or did an earlier request of the batch put
 * the same one (content-addressed: same bytes, same expiry)? */
static bool complete_batch_puts_body(const struct store_complete_req *reqs,
                                     const struct complete_batch *cb, size_t i)
{
    if (reqs[i].validator_write != STORE_VALIDATOR_WRITTEN)
        return false;
    for (size_t j = 0; j < i; j++)
        if (!reqs[j].err && reqs[j].validator_write == STORE_VALIDATOR_WRITTEN
            && strcmp(cb->digests[j], cb->digests[i]) == 0)
            return false;
    return true;
}

/* Under the stripes: fence and stage every request still standing (op
 * record, outbox entry, attempts, validator and body) into \p wb.
 * @returns how many were staged. */
static size_t complete_batch_stage(struct store *s,
                                   struct store_complete_req *reqs, size_t n,
                                   struct complete_batch *cb,
                                   rocksdb_writebatch_t *wb, int64_t now_ms)
{
    size_t staged = 0;
    /* in op_id order, as the claim batch: the ops column family's skiplist
     * inserts then reuse their search path (issue 13: the inserts were a
     * fifth of the pipeline thread's time in shadow runs) */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!reqs[i].err)
            cb->order[m++] = (struct batch_read){reqs[i].op_id,
                                                 strlen(reqs[i].op_id),
                                                 (uint32_t)i};
    qsort(cb->order, m, sizeof(*cb->order), batch_read_cmp);
    int64_t body_now = store_body_clock(s, now_ms);
    uint32_t last = UINT32_MAX; /* the last request staged standing */
    for (size_t x = 0; x < m; x++) {
        size_t i = cb->order[x].u;
        struct store_complete_req *r = &reqs[i];
        /* a repeated op_id: the first completion fences the later ones */
        if (complete_batch_repeated(reqs, cb, i, last)) {
            dd_errstr_set(r->errstr, sizeof(r->errstr),
                          "store_complete_batch(%.64s): completed twice in "
                          "one batch",
                          r->op_id);
            r->err = DD_ERR_STATE;
            continue;
        }
        /* the event's literal is the body this batch puts (by this
         * request or a twin before it): the entry names the body */
        struct body_ref ref = {cb->digests[i], (uint64_t)r->body_len,
                               r->body_lit_off, r->body_lit_len, body_now};
        bool named = r->validator_write == STORE_VALIDATOR_WRITTEN
                     && r->body_lit_len >= 2
                     && r->body_lit_off <= r->value_len
                     && r->body_lit_len <= r->value_len - r->body_lit_off;
        r->err = complete_stage(s, "store_complete_batch", wb, r->op_id,
                                &cb->keys[i], r->generation, r->state, r->category,
                                r->attempts, r->value, r->value_len,
                                named ? &ref : NULL, now_ms,
                                r->held, r->held_unwritten, r->acked,
                                &cb->ops[i], &r->seq, r->errstr,
                                sizeof(r->errstr));
        if (r->err)
            continue;
        /* only the lease holder's attempts: a fenced worker's numbers could
         * overwrite the new holder's */
        attempts_stage(s, wb, r->op_id, r->attempt_log, r->n_attempt_log,
                       now_ms);
        staged++;
        last = (uint32_t)i;
    }
    /* validators and bodies once every fence is known: a body goes in with
     * the first request (in batch order) still standing that names it */
    for (size_t i = 0; i < n; i++)
        if (!reqs[i].err)
            store_cond_stage(s, wb, &reqs[i], cb->digests[i],
                             complete_batch_puts_body(reqs, cb, i), now_ms,
                             body_now);
    return staged;
}

/* One WAL write for the staged requests; its fsync here (store.sync), or by
 * the syncer (group commit: the ticket tells when).  Then the index.  A
 * failed write took no completion: each staged one gets DD_ERR_IO. */
static dd_err_t complete_batch_write(struct store *s,
                                     struct store_complete_req *reqs, size_t n,
                                     const struct complete_batch *cb,
                                     rocksdb_writebatch_t *wb, int64_t now_ms,
                                     char *errstr, size_t errstr_size)
{
    char *rerr = NULL;
    rocksdb_write(s->db, s->group_commit ? s->wopts_nosync : s->wopts, wb,
                  &rerr);
    if (rerr) {
        char text[DD_ERRSTR_SIZE];
        dd_err_t err =
            store_write_fail(s, rerr, "rocksdb_write(complete batch)",
                             "batch", text, sizeof(text));
        store_index_write_failed(s);
        dd_errstr_set(errstr, errstr_size, "%s", text);
        for (size_t i = 0; i < n; i++)
            if (!reqs[i].err) {
                reqs[i].err = err;
                store_pins_remove(&s->pins, reqs[i].seq); /* not written */
                reqs[i].seq = 0;
                reqs[i].validator_write = STORE_VALIDATOR_NONE;
                snprintf(reqs[i].errstr, sizeof(reqs[i].errstr), "%s", text);
            }
        return err;
    }
    uint64_t ticket = store_sync_ticket(s);
    for (size_t i = 0; i < n; i++)
        if (!reqs[i].err) {
            reqs[i].ticket = ticket;
            if (reqs[i].changelog)
                reqs[i].changelog_len =
                    store_changelog_encode(&cb->ops[i], reqs[i].changelog);
            store_index_put(s->idx, &cb->keys[i], &cb->ops[i], now_ms,
                            STORE_INDEX_UPSERT);
            if (!reqs[i].acked)
                atomic_fetch_add(&s->pending, 1);
            if (reqs[i].written)
                *reqs[i].written = cb->ops[i];
        }
    return DD_OK;
}

dd_err_t store_complete_batch(struct store *s,
                              struct store_complete_req *reqs, size_t n,
                              int64_t now_ms, char *errstr,
                              size_t errstr_size)
{
    if (n == 0)
        return DD_OK;
    struct dd_scratch local, *sc = dd_scratch_take(&s->scratch, &local);
    struct complete_batch cb = {
        .keys = dd_scratch_alloc(sc, n * sizeof(*cb.keys)),
        .ops = dd_scratch_alloc(sc, n * sizeof(*cb.ops)),
        .digests = dd_scratch_alloc(sc, n * sizeof(*cb.digests)),
        .order = dd_scratch_alloc(sc, n * sizeof(*cb.order)),
    };
    rocksdb_writebatch_t *wb = NULL;
    dd_err_t err = DD_OK;
    if (!cb.keys || !cb.ops || !cb.digests || !cb.order) {
        dd_errstr_set(errstr, errstr_size,
                      "store_complete_batch: out of memory (%zu requests)", n);
        for (size_t i = 0; i < n; i++)
            reqs[i].err = DD_ERR_NOMEM;
        err = DD_ERR_NOMEM;
        goto out;
    }
    complete_batch_prepare(s, reqs, n, &cb);
    /* the ops' stripes in ascending order, as store_claim_batch */
    store_stripes_lock(s, cb.locked);
    wb = store_wb_take(s);
    if (complete_batch_stage(s, reqs, n, &cb, wb, now_ms))
        err = complete_batch_write(s, reqs, n, &cb, wb, now_ms, errstr,
                                   errstr_size);
    store_stripes_unlock(s, cb.locked);
    /* a completion refused or fenced wrote nothing of its validator */
    for (size_t i = 0; i < n; i++)
        if (reqs[i].err)
            reqs[i].validator_write = STORE_VALIDATOR_NONE;
    if (!err)
        for (size_t i = 0; i < n; i++)
            if (reqs[i].err) {
                dd_errstr_set(errstr, errstr_size, "%s", reqs[i].errstr);
                break;
            }
out:
    store_wb_give(s, wb);
    dd_scratch_give(&s->scratch, sc);
    return err;
}


/* ---------------------------------------------------------------------- */
/* batched claims, the fast path, index counters                           */

#define BATCH_NONE UINT32_MAX

/* One distinct op_id of a batch (its index part: the probe of the same
 * number). */
struct batch_key {
    uint32_t first;     /* first request; its op holds the stored record */
    uint32_t tail;      /* last request so far (chaining) */
    uint32_t cur;       /* request whose op is the current record */
    dd_err_t err;
    bool found;         /* a live record existed before the batch */
    bool from_index;    /* a finished duplicate the index answered */
    bool dirty;         /* to write */
};

/* The scratch of one store_claim_batch. */
struct claim_batch {
    struct dd_scratch *sc;            /* its arrays' memory */
    struct store_claim_req *reqs;
    size_t n;
    size_t nu;                        /* distinct op_ids */
    size_t tcap;                      /* slots of table, a power of 2 */
    uint32_t *next;                   /* n: next request of the same op_id */
    uint32_t *ukey;                   /* n: request -> distinct op_id */
    uint32_t *table;                  /* tcap: op_id digest -> distinct */
    struct batch_key *u;              /* n (nu used) */
    struct store_index_probe *probe;  /* n (nu used): u[j]'s index part */
    struct batch_read *rd;            /* n: reads, then writes, key order */
    uint32_t *order;                  /* n: the nu grouped by segment */
    uint32_t seg_start[STORE_INDEX_SEGS + 1];
    uint64_t locked[STORE_STRIPES / 64];
    char *errstr;                     /* the first failure's text */
    size_t errstr_size;
    bool errset;
};

static void batch_err(struct claim_batch *cb, const char *text)
{
    if (!cb->errset && cb->errstr && cb->errstr_size)
        snprintf(cb->errstr, cb->errstr_size, "%s", text);
    cb->errset = true;
}

static bool claim_batch_alloc(struct claim_batch *cb)
{
    cb->tcap = 16;
    while (cb->tcap < 2 * cb->n)
        cb->tcap *= 2;
    cb->next = dd_scratch_alloc(cb->sc, cb->n * sizeof(*cb->next));
    cb->ukey = dd_scratch_alloc(cb->sc, cb->n * sizeof(*cb->ukey));
    cb->table = dd_scratch_alloc(cb->sc, cb->tcap * sizeof(*cb->table));
    cb->u = dd_scratch_alloc(cb->sc, cb->n * sizeof(*cb->u));
    cb->probe = dd_scratch_alloc(cb->sc, cb->n * sizeof(*cb->probe));
    cb->rd = dd_scratch_alloc(cb->sc, cb->n * sizeof(*cb->rd));
    cb->order = dd_scratch_alloc(cb->sc, cb->n * sizeof(*cb->order));
    if (!cb->next || !cb->ukey || !cb->table || !cb->u || !cb->probe
        || !cb->rd || !cb->order)
        return false;
    memset(cb->table, 0xff, cb->tcap * sizeof(*cb->table));
    return true;
}

/* Request i, whose op_id's key is \p k: a new distinct op_id, or chained
 * to the one it repeats. */
static void claim_batch_key(struct claim_batch *cb, size_t i,
                            const struct store_index_key *k)
{
    size_t pos = k->k1 & (cb->tcap - 1);
    for (;;) {
        uint32_t x = cb->table[pos];
        if (x == BATCH_NONE) {
            struct batch_key *b = &cb->u[cb->nu];
            memset(b, 0, sizeof(*b));
            b->first = b->tail = b->cur = (uint32_t)i;
            memset(&cb->probe[cb->nu], 0, sizeof(cb->probe[cb->nu]));
            cb->probe[cb->nu].key = *k;
            cb->table[pos] = (uint32_t)cb->nu;
            cb->ukey[i] = (uint32_t)cb->nu++;
            return;
        }
        const struct store_index_key *xk = &cb->probe[x].key;
        if (xk->k0 == k->k0 && xk->k1 == k->k1
            && strcmp(cb->reqs[cb->u[x].first].op_id, cb->reqs[i].op_id) == 0) {
            cb->next[cb->u[x].tail] = (uint32_t)i;
            cb->u[x].tail = (uint32_t)i;
            cb->ukey[i] = x;
            return;
        }
        pos = (pos + 1) & (cb->tcap - 1);
    }
}

/* Validate, digest and deduplicate the requests; note their stripes. */
static void claim_batch_dedup(struct store *s, struct claim_batch *cb)
{
    char text[DD_ERRSTR_SIZE];
    for (size_t i = 0; i < cb->n; i++) {
        struct store_claim_req *r = &cb->reqs[i];
        size_t hl, el;
        r->result = 0;
        r->err = check_claim_args("store_claim_batch", r->op_id,
                                  r->request_hash, r->event_key, &hl, &el,
                                  text, sizeof(text));
        cb->ukey[i] = BATCH_NONE;
        cb->next[i] = BATCH_NONE;
        if (r->err) {
            batch_err(cb, text);
            continue;
        }
        struct store_index_key k;
        store_index_digest(s->idx, r->op_id, strlen(r->op_id), &k);
        claim_batch_key(cb, i, &k);
    }
    for (size_t j = 0; j < cb->nu; j++)
        store_stripes_add(cb->locked, &cb->probe[j].key);
}

/* Read the ops of rd[0..m) (sorted) with one batched MultiGet. */
static void claim_batch_read(struct store *s, struct claim_batch *cb,
                             size_t m, int64_t now_ms)
{
    const char **keys = dd_scratch_alloc(cb->sc, m * sizeof(*keys));
    size_t *sizes = dd_scratch_alloc(cb->sc, m * sizeof(*sizes));
    rocksdb_pinnableslice_t **vals = dd_scratch_calloc(cb->sc, m,
                                                       sizeof(*vals));
    char **errs = dd_scratch_calloc(cb->sc, m, sizeof(*errs));
    char text[DD_ERRSTR_SIZE];
    if (!keys || !sizes || !vals || !errs) {
        for (size_t j = 0; j < m; j++)
            cb->u[cb->rd[j].u].err = DD_ERR_NOMEM;
        batch_err(cb, "store_claim_batch: out of memory");
        return;
    }
    for (size_t j = 0; j < m; j++) {
        keys[j] = cb->rd[j].id;
        sizes[j] = cb->rd[j].len;
    }
    rocksdb_batched_multi_get_cf(s->db, s->ropts, s->cf[CF_OPS], m, keys,
                                 sizes, vals, errs, true);
    for (size_t j = 0; j < m; j++) {
        struct batch_key *b = &cb->u[cb->rd[j].u];
        const char *op_id = cb->reqs[b->first].op_id;
        if (errs[j]) {
            snprintf(text, sizeof(text),
                     "rocksdb_batched_multi_get_cf(ops)(%.200s): %s", op_id,
                     errs[j]);
            batch_err(cb, text);
            rocksdb_free(errs[j]);
            b->err = DD_ERR_IO;
            continue;
        }
        if (!vals[j])
            continue; /* absent */
        size_t vlen = 0;
        const char *v = rocksdb_pinnableslice_value(vals[j], &vlen);
        struct store_op *op = &cb->reqs[b->first].op;
        memset(op, 0, sizeof(*op));
        dd_err_t err = store_codec_op_decode(v, vlen, op_id, op, text,
                                             sizeof(text));
        rocksdb_pinnableslice_destroy(vals[j]);
        if (err) {
            batch_err(cb, text);
            b->err = err;
            continue;
        }
        if (store_record_expired(op->expires_at_ms, now_ms))
            continue;
        b->found = true;
        store_index_put(s->idx, &cb->probe[cb->rd[j].u].key, op, now_ms,
                        STORE_INDEX_FILL);
    }
}

/* Does the index's finished entry answer every request of distinct op_id
 * j (the same request_hash digest in all)?  Not a failed op's: whether it
 * may be claimed again (failed_ttl_ms after its failure) is in RocksDB. */
static bool claim_batch_from_index(struct store *s,
                                   const struct claim_batch *cb, size_t j)
{
    if (store_index_entry_state(&cb->probe[j].entry) == STORE_OP_FAILED)
        return false;
    for (uint32_t i = cb->u[j].first; i != BATCH_NONE; i = cb->next[i]) {
        const char *h = cb->reqs[i].request_hash;
        if (store_index_hdigest(s->idx, h, strlen(h))
            != cb->probe[j].entry.h)
            return false;
    }
    return true;
}

/* The index first; RocksDB (one sorted MultiGet) for what it cannot
 * decide.  Counts a hit or a miss per distinct op_id. */
static void claim_batch_lookup(struct store *s, struct claim_batch *cb,
                               int64_t now_ms)
{
    store_index_group(cb->probe, cb->nu, cb->order, cb->seg_start);
    store_index_judge_batch(s->idx, cb->probe, cb->order, cb->seg_start,
                            now_ms, store_clock_ms(s));
    uint64_t hits[STORE_INDEX_SEGS] = {0}, misses[STORE_INDEX_SEGS] = {0};
    size_t m = 0;
    for (size_t j = 0; j < cb->nu; j++) {
        struct batch_key *b = &cb->u[j];
        enum store_index_verdict v = cb->probe[j].verdict;
        if (v == STORE_INDEX_FINISHED)
            b->from_index = claim_batch_from_index(s, cb, j);
        bool decided = v == STORE_INDEX_ABSENT || b->from_index;
        unsigned seg = store_index_segment(&cb->probe[j].key);
        if (decided) {
            hits[seg]++;
        } else {
            misses[seg]++;
            const char *id = cb->reqs[b->first].op_id;
            cb->rd[m++] = (struct batch_read){id, strlen(id), (uint32_t)j};
        }
    }
    for (unsigned g = 0; g < STORE_INDEX_SEGS; g++)
        store_index_count_add(s->idx, g, hits[g], misses[g]);
    if (m) {
        qsort(cb->rd, m, sizeof(*cb->rd), batch_read_cmp);
        claim_batch_read(s, cb, m, now_ms);
    }
}

/* The claims in array order, as store_claim would answer them.
 * @returns the number of distinct op_ids to write. */
static size_t claim_batch_apply(struct store *s, struct claim_batch *cb,
                                int64_t now_ms)
{
    size_t ndirty = 0;
    for (size_t i = 0; i < cb->n; i++) {
        if (cb->ukey[i] == BATCH_NONE)
            continue;
        uint32_t j = cb->ukey[i];
        struct batch_key *b = &cb->u[j];
        struct store_claim_req *r = &cb->reqs[i];
        if (b->err) {
            r->err = b->err;
            continue;
        }
        if (b->from_index) {
            r->result = STORE_CLAIM_DUPLICATE;
            store_index_entry_op(&cb->probe[j].entry, r->request_hash,
                                 &r->op);
            continue;
        }
        bool found = b->found;
        if (i != b->first) {
            r->op = cb->reqs[b->cur].op;
            found = true; /* the first request left a live record */
        }
        bool dirty = false;
        r->result = claim_apply(s, r->op_id, &r->op, found, r->request_hash,
                                strlen(r->request_hash), r->event_key,
                                strlen(r->event_key), r->source, now_ms,
                                &dirty);
        if (dirty && !b->dirty) {
            b->dirty = true;
            ndirty++;
        }
        b->cur = (uint32_t)i;
    }
    return ndirty;
}

/* One WriteBatch, one WAL write, not synced: the next synced write (a
 * completion) persists it, and a claim lost in a crash is only claimed
 * again (store.h).  Then the index.  A failed write took no claim: every
 * request gets DD_ERR_IO. */
static dd_err_t claim_batch_write(struct store *s, struct claim_batch *cb,
                                  int64_t now_ms)
{
    unsigned char vbuf[STORE_CODEC_OP_VALUE_MAX];
    /* in key order: the memtable's skiplist inserts then reuse their
     * search path (rd is free again: the reads are done) */
    size_t w = 0;
    for (size_t j = 0; j < cb->nu; j++) {
        cb->probe[j].put = NULL;
        if (cb->u[j].dirty) {
            struct store_claim_req *first = &cb->reqs[cb->u[j].first];
            cb->probe[j].put = &cb->reqs[cb->u[j].cur].op;
            /* a new op its caller completes within the loop: in the index
             * only, written with its completion (store_claim_req) */
            if (first->defer_new && !cb->u[j].found &&
                first->result == STORE_CLAIM_NEW &&
                first->op.generation == 1) {
                first->deferred = true;
                continue;
            }
            cb->rd[w++] = (struct batch_read){first->op_id,
                                              strlen(first->op_id),
                                              (uint32_t)j};
        }
    }
    qsort(cb->rd, w, sizeof(*cb->rd), batch_read_cmp);
    rocksdb_writebatch_t *wb = store_wb_take(s);
    for (size_t x = 0; x < w; x++) {
        const struct store_claim_req *r = &cb->reqs[cb->u[cb->rd[x].u].cur];
        size_t vlen = store_codec_op_encode(&r->op, vbuf, sizeof(vbuf));
        assert(vlen > 0);
        rocksdb_writebatch_put_cf(wb, s->cf[CF_OPS], r->op_id,
                                  strlen(r->op_id), (const char *)vbuf, vlen);
    }
    char *rerr = NULL;
    dd_err_t err = DD_OK;
    if (w)
        rocksdb_write(s->db, s->wopts_nosync, wb, &rerr);
    store_wb_give(s, wb);
    if (rerr) {
        for (size_t i = 0; i < cb->n; i++)
            cb->reqs[i].deferred = false;
        err = store_write_fail(s, rerr, "rocksdb_write(ops batch)",
                               cb->reqs[cb->u[0].first].op_id, cb->errstr,
                               cb->errstr_size);
        store_index_write_failed(s);
        for (size_t i = 0; i < cb->n; i++)
            if (!cb->reqs[i].err)
                cb->reqs[i].err = DD_ERR_IO;
        return err;
    }
    store_index_put_batch(s->idx, cb->probe, cb->order, cb->seg_start,
                          now_ms);
    return DD_OK;
}

dd_err_t store_claim_batch(struct store *s, struct store_claim_req *reqs,
                           size_t n, int64_t now_ms, char *errstr,
                           size_t errstr_size)
{
    if (n == 0)
        return DD_OK;
    if (n > UINT32_MAX / 4) {
        dd_errstr_set(errstr, errstr_size,
                      "store_claim_batch: %zu requests (at most %u)", n,
                      UINT32_MAX / 4);
        return DD_ERR_INVAL;
    }
    dd_err_t err = DD_OK;
    struct dd_scratch local;
    struct claim_batch cb = {.sc = dd_scratch_take(&s->scratch, &local),
                             .reqs = reqs, .n = n, .errstr = errstr,
                             .errstr_size = errstr_size};
    for (size_t i = 0; i < n; i++)
        reqs[i].deferred = false;
    perf_off();
    if (!claim_batch_alloc(&cb)) {
        dd_errstr_set(errstr, errstr_size,
                      "store_claim_batch: out of memory (%zu requests)", n);
        for (size_t i = 0; i < n; i++)
            reqs[i].err = DD_ERR_NOMEM;
        err = DD_ERR_NOMEM;
        goto out;
    }
    claim_batch_dedup(s, &cb);
    /* the ops' stripes, in ascending order (no deadlock with anyone) */
    store_stripes_lock(s, cb.locked);
    claim_batch_lookup(s, &cb, now_ms);
    if (claim_batch_apply(s, &cb, now_ms))
        err = claim_batch_write(s, &cb, now_ms);
    store_stripes_unlock(s, cb.locked);
out:
    dd_scratch_give(&s->scratch, cb.sc);
    return err;
}

void store_index_prepare(struct store *s, const void *const *op_ids,
                         const size_t *lens, size_t n,
                         struct store_fast_key *keys)
{
    enum { CHUNK = 1024 };
    struct store_index_key k[CHUNK]; /* the keys to prefetch */
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t m = 0;
        for (size_t i = base; i < n && i < base + CHUNK; i++) {
            keys[i].k0 = keys[i].k1 = 0;
            if (!op_ids[i] || lens[i] == 0 || lens[i] > STORE_KEY_MAX)
                continue; /* no key: never proven, nothing to prefetch */
            store_index_digest(s->idx, op_ids[i], lens[i], &k[m]);
            keys[i].k0 = k[m].k0;
            keys[i].k1 = k[m].k1; /* never 0 (store_index_digest) */
            m++;
        }
        store_index_prefetch(s->idx, k, m);
    }
}

/* The fast path's verdict on index key \p k at \p now_ms (the compaction
 * filter's clock \p filter_now_ms).  @locality any thread. */
static bool index_duplicate(struct store *s, const struct store_index_key *k,
                            const char *request_hash, size_t hash_len,
                            int64_t now_ms, int64_t filter_now_ms,
                            enum store_op_state *state)
{
    struct store_index_entry e;
    /* a failed op is not decided here: whether it may be claimed again
     * (failed_ttl_ms after its failure) is in RocksDB */
    bool dup = store_index_judge(s->idx, k, now_ms, filter_now_ms, &e)
                   == STORE_INDEX_FINISHED
               && store_index_entry_state(&e) != STORE_OP_FAILED
               && e.h == store_index_hdigest(s->idx, request_hash, hash_len);
    store_index_count(s->idx, k, dup);
    if (dup && state)
        *state = store_index_entry_state(&e);
    return dup;
}

bool store_index_duplicate_key(struct store *s,
                               const struct store_fast_key *fk,
                               const char *request_hash, size_t hash_len,
                               int64_t now_ms, enum store_op_state *state)
{
    if (!fk->k1)
        return false;
    struct store_index_key k = {fk->k0, fk->k1};
    /* the filter's clock read now: \p now_ms may be a poll batch old, and
     * an entry the filter may have dropped since must not be proven */
    return index_duplicate(s, &k, request_hash, hash_len, now_ms,
                           store_clock_ms(s), state);
}

bool store_index_duplicate(struct store *s, const char *op_id,
                           size_t op_id_len, const char *request_hash,
                           int64_t now_ms, enum store_op_state *state)
{
    if (op_id_len == 0 || op_id_len > STORE_KEY_MAX)
        return false;
    struct store_index_key k;
    store_index_digest(s->idx, op_id, op_id_len, &k);
    return index_duplicate(s, &k, request_hash, strlen(request_hash), now_ms,
                           store_clock_ms(s), state);
}

void store_index_stats_get(struct store *s, struct store_index_stats *st)
{
    store_index_stats_fill(s->idx, st);
}

bool store_index_wait(struct store *s, int64_t timeout_ms)
{
    int64_t end = dd_now_ms() + timeout_ms;
    while (store_index_rebuilding(s->idx)) {
        if (dd_now_ms() >= end)
            return false;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* attempts                                                                */

/* A NUL-terminated string within its array of \p size bytes.
 * @locality any thread. */
static bool bounded(const char *str, size_t size)
{
    return memchr(str, '\0', size) != NULL;
}

/* Every attempt numbered and its strings terminated in their arrays.
 * @locality any thread (store_op_retry runs on the fetch engine's). */
static dd_err_t attempts_check(const char *fn, const char *op_id,
                               const struct store_attempt *attempts, size_t n,
                               char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < n; i++) {
        const struct store_attempt *a = &attempts[i];
        if (a->number == 0 || !bounded(a->session, sizeof(a->session))
            || !bounded(a->exit_addr, sizeof(a->exit_addr))
            || !bounded(a->category, sizeof(a->category))
            || !bounded(a->error, sizeof(a->error))) {
            dd_errstr_set(errstr, errstr_size,
                          "%s(%.64s): attempt %zu has number %u (must be >= "
                          "1) or an unterminated string",
                          fn, op_id, i, a->number);
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

/* The attempts into \p wb (TTL of ops from \p now_ms), checked by
 * attempts_check.  @locality any thread (the fetch engine's through
 * op_transition). */
static void attempts_stage(struct store *s, rocksdb_writebatch_t *wb,
                           const char *op_id,
                           const struct store_attempt *attempts, size_t n,
                           int64_t now_ms)
{
    size_t idlen = strlen(op_id);
    int64_t expires_at = store_add_ms(now_ms, s->ops_ttl_ms);
    for (size_t i = 0; i < n; i++) {
        const struct store_attempt *a = &attempts[i];
        char key[STORE_CODEC_ATTEMPT_KEY_MAX];
        unsigned char buf[STORE_CODEC_ATTEMPT_VALUE_MAX];
        size_t klen = store_codec_attempt_key(op_id, idlen, a->number, key);
        size_t len = store_codec_attempt_encode(a, expires_at, buf,
                                                sizeof(buf));
        assert(len > 0); /* every string is bounded by its array */
        rocksdb_writebatch_put_cf(wb, s->cf[CF_ATTEMPTS], key, klen,
                                  (const char *)buf, len);
    }
}

dd_err_t store_attempts_put(struct store *s, const char *op_id,
                            const struct store_attempt *attempts, size_t n,
                            int64_t now_ms, char *errstr, size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_attempts_put", op_id, errstr,
                                     errstr_size);
    if (err || n == 0)
        return err;
    err = attempts_check("store_attempts_put", op_id, attempts, n, errstr,
                         errstr_size);
    if (err)
        return err;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    attempts_stage(s, wb, op_id, attempts, n, now_ms);
    char *rerr = NULL;
    rocksdb_write(s->db, s->wopts, wb, &rerr);
    rocksdb_writebatch_destroy(wb);
    if (rerr)
        return store_write_fail(s, rerr, "rocksdb_write(attempts)", op_id,
                                errstr, errstr_size);
    return DD_OK;
}

/* @locality the pipeline, or the CLI's thread (`dedupd inspect`). */
dd_err_t store_attempts_get(struct store *s, const char *op_id,
                            int64_t now_ms, struct store_attempt **out,
                            size_t *n, char *errstr, size_t errstr_size)
{
    *out = NULL;
    *n = 0;
    dd_err_t err = store_op_id_check("store_attempts_get", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    size_t idlen = strlen(op_id), count = 0, cap = 0;
    struct store_attempt *arr = NULL;
    char lower[STORE_KEY_MAX + 1], upper[STORE_KEY_MAX + 1];
    memcpy(lower, op_id, idlen);
    lower[idlen] = '\n';
    memcpy(upper, op_id, idlen);
    upper[idlen] = '\n' + 1;
    char *rerr = NULL;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_iterate_upper_bound(ro, upper, idlen + 1);
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(s->db, ro,
                                                        s->cf[CF_ATTEMPTS]);
    for (rocksdb_iter_seek(it, lower, idlen + 1); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen = 0, vlen = 0;
        const char *k = rocksdb_iter_key(it, &klen);
        uint32_t number = 0;
        if (!store_codec_attempt_key_number(k, klen, idlen, &number))
            continue; /* an attempt of op "<op_id>\n..." */
        const char *v = rocksdb_iter_value(it, &vlen);
        struct store_attempt a;
        int64_t expires_at = 0;
        err = store_codec_attempt_decode(v, vlen, op_id, number, &a,
                                         &expires_at, errstr, errstr_size);
        if (err)
            goto out;
        if (store_record_expired(expires_at, now_ms))
            continue;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            struct store_attempt *na = realloc(arr, ncap * sizeof(*na));
            if (!na) {
                dd_errstr_set(errstr, errstr_size,
                              "store_attempts_get(%.64s): out of memory",
                              op_id);
                err = DD_ERR_NOMEM;
                goto out;
            }
            arr = na;
            cap = ncap;
        }
        arr[count++] = a;
    }
    rocksdb_iter_get_error(it, &rerr);
    if (rerr)
        err = store_rdb_fail(rerr, "rocksdb_iter(attempts)", op_id, errstr,
                             errstr_size);
out:
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (err) {
        free(arr);
        return err;
    }
    *out = arr;
    *n = count;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* forget, names                                                           */

dd_err_t store_forget(struct store *s, const char *op_id, bool *found,
                      char *errstr, size_t errstr_size)
{
    dd_err_t err = store_op_id_check("store_forget", op_id, errstr,
                                     errstr_size);
    if (err)
        return err;
    struct store_index_key k;
    pthread_mutex_t *mu = store_op_stripe(s, op_id, &k);
    pthread_mutex_lock(mu);
    struct store_op op;
    bool live = false;
    /* the store's clock: the filter clock when set (tests), else wall time */
    err = store_op_read(s, op_id, store_clock_ms(s), false, &op, &live, errstr,
                  errstr_size);
    if (err)
        goto out;
    char *rerr = NULL;
    rocksdb_delete_cf(s->db, s->wopts, s->cf[CF_OPS], op_id, strlen(op_id),
                      &rerr);
    if (rerr) {
        err = store_write_fail(s, rerr, "rocksdb_delete_cf(ops)", op_id, errstr,
                               errstr_size);
        store_index_write_failed(s);
        goto out;
    }
    store_index_forget(s->idx, &k, store_clock_ms(s));
    *found = live;
out:
    pthread_mutex_unlock(mu);
    return err;
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
    case STORE_OP_FORGOTTEN: return "forgotten";
    }
    return "unknown";
}

