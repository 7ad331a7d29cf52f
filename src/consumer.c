/* The pipeline thread.  See consumer.h for the flow and its invariants. */
#include "consumer.h"

#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fetch.h"
#include "job.h"
#include "kconf.h"
#include "log.h"
#include "producer.h"
#include "result.h"
#include "store.h"

/* ---- per-partition completion tracking ---------------------------------- */

struct track_ent {
    int64_t offset;
    bool done;
};

struct ptrack {
    uint32_t epoch;       /* bumped at every assignment */
    bool assigned;
    bool eof;
    struct track_ent *e;
    size_t head, n, cap;
};

/* One consumed message whose work is not done yet. */
struct pmsg {
    int32_t partition;
    uint32_t epoch;
    int64_t offset;
    struct pmsg *next;    /* waiters of one op */
};

struct opctx {
    struct opctx *hnext;
    char *op_id;
    struct job *job;
    uint64_t generation;
    struct pmsg *msgs;    /* the claiming message and its in-flight duplicates */
    uint64_t seq;
    bool stored;          /* result committed to the store (lease no longer
                             needed) */
};

enum out_kind { OUT_RESULT, OUT_DLQ, OUT_CONFLICT, OUT_REPLAY };

/* A message to produce, kept until its delivery report (re-sent on failure). */
struct outmsg {
    struct outmsg *next;  /* retry list */
    enum out_kind kind;
    char *topic;
    char *key;
    size_t key_len;
    char *value;
    size_t value_len;
    char *hname[4], *hval[4];
    size_t n_hdrs;
    struct opctx *op;     /* OUT_RESULT */
    struct pmsg *msg;     /* OUT_DLQ, OUT_CONFLICT */
    uint64_t seq;         /* OUT_RESULT, OUT_REPLAY */
    char *op_id;          /* OUT_REPLAY */
    int64_t retry_at_ms;
};

struct blocked {
    struct blocked *next;
    struct pmsg *pm;
    struct job *job;
    int64_t recheck_at_ms;
};

#define OPMAP_BUCKETS 65536

struct pipeline {
    const struct cfg *cfg;
    const struct consumer_opts *opts;
    struct consumer_stats *st;
    struct job_conf jconf;
    rd_kafka_t *rk;
    struct producer *prod;
    struct fetch *fetch;
    struct store *store;
    struct ptrack *parts;
    size_t n_parts;
    struct opctx **opmap;
    size_t n_ops;
    struct outmsg *retry;
    struct blocked *blocked;
    size_t n_blocked;
    size_t pending_out;   /* produced, not yet acknowledged */
    int64_t last_activity_ms;
    int64_t next_renew_ms;
    bool assigned_once;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct ptrack *track_get(struct pipeline *pl, int32_t partition)
{
    if ((size_t)partition >= pl->n_parts) {
        size_t n = (size_t)partition + 1;
        pl->parts = realloc(pl->parts, n * sizeof(*pl->parts));
        if (!pl->parts)
            abort();
        memset(pl->parts + pl->n_parts, 0, (n - pl->n_parts) * sizeof(*pl->parts));
        pl->n_parts = n;
    }
    return &pl->parts[partition];
}

static struct pmsg *track_add(struct pipeline *pl, int32_t partition,
                              int64_t offset)
{
    struct ptrack *t = track_get(pl, partition);
    if (t->head > 0 && t->head * 2 >= t->n) {
        memmove(t->e, t->e + t->head, (t->n - t->head) * sizeof(*t->e));
        t->n -= t->head;
        t->head = 0;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 1024;
        t->e = realloc(t->e, t->cap * sizeof(*t->e));
        if (!t->e)
            abort();
    }
    t->e[t->n].offset = offset;
    t->e[t->n].done = false;
    t->n++;
    struct pmsg *pm = calloc(1, sizeof(*pm));
    if (!pm)
        abort();
    pm->partition = partition;
    pm->epoch = t->epoch;
    pm->offset = offset;
    return pm;
}

/* The work of \p pm is durable and acknowledged: mark it, and store the offset
 * past every leading done message of its partition. */
static void msg_done(struct pipeline *pl, struct pmsg *pm)
{
    struct ptrack *t = track_get(pl, pm->partition);
    if (pm->epoch == t->epoch && t->assigned) {
        size_t lo = t->head, hi = t->n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (t->e[mid].offset < pm->offset)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < t->n && t->e[lo].offset == pm->offset)
            t->e[lo].done = true;
        int64_t store_at = -1;
        while (t->head < t->n && t->e[t->head].done) {
            store_at = t->e[t->head].offset + 1;
            t->head++;
        }
        if (store_at >= 0) {
            rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
            rd_kafka_topic_partition_list_add(l, pl->cfg->topic_jobs, pm->partition)
                ->offset = store_at;
            rd_kafka_resp_err_t e = rd_kafka_offsets_store(pl->rk, l);
            if (e)
                log_msg(LOG_WARNING, "consumer",
                        "offsets_store partition %d offset %lld: %s",
                        (int)pm->partition, (long long)store_at,
                        rd_kafka_err2str(e));
            rd_kafka_topic_partition_list_destroy(l);
        }
    }
    free(pm);
    pl->last_activity_ms = now_ms();
}

/* ---- op map ------------------------------------------------------------- */

static size_t op_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h & (OPMAP_BUCKETS - 1);
}

static struct opctx *op_find(struct pipeline *pl, const char *op_id)
{
    for (struct opctx *o = pl->opmap[op_hash(op_id)]; o; o = o->hnext)
        if (!strcmp(o->op_id, op_id))
            return o;
    return NULL;
}

static struct opctx *op_add(struct pipeline *pl, struct job *job,
                            uint64_t generation, struct pmsg *pm)
{
    struct opctx *o = calloc(1, sizeof(*o));
    if (!o)
        abort();
    o->op_id = strdup(job->op_id);
    o->job = job;
    o->generation = generation;
    o->msgs = pm;
    size_t b = op_hash(o->op_id);
    o->hnext = pl->opmap[b];
    pl->opmap[b] = o;
    pl->n_ops++;
    return o;
}

/* Remove \p o from the map, complete its messages and free it. */
static void op_finish(struct pipeline *pl, struct opctx *o)
{
    struct opctx **pp = &pl->opmap[op_hash(o->op_id)];
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = o->hnext;
    pl->n_ops--;
    struct pmsg *m = o->msgs;
    while (m) {
        struct pmsg *n = m->next;
        msg_done(pl, m);
        m = n;
    }
    job_destroy(o->job);
    free(o->op_id);
    free(o);
}

/* ---- producing ------------------------------------------------------------ */

static void out_free(struct outmsg *m)
{
    free(m->topic);
    free(m->key);
    free(m->value);
    free(m->op_id);
    for (size_t i = 0; i < m->n_hdrs; i++) {
        free(m->hname[i]);
        free(m->hval[i]);
    }
    free(m);
}

static void out_send(struct pipeline *pl, struct outmsg *m)
{
    struct producer_header h[4];
    for (size_t i = 0; i < m->n_hdrs; i++) {
        h[i].name = m->hname[i];
        h[i].value = m->hval[i];
    }
    char err[DD_ERRSTR_SIZE];
    for (;;) {
        dd_err_t e = producer_send(pl->prod, m->topic, m->key, m->key_len,
                                   m->value, m->value_len, h, m->n_hdrs, m, err,
                                   sizeof(err));
        if (e == DD_OK) {
            pl->pending_out++;
            return;
        }
        if (e == DD_ERR_TRANSIENT) {
            producer_poll(pl->prod, 50);
            continue;
        }
        /* Not sendable (too large for the broker, unknown topic): retry later
         * so nothing is lost; the error is visible in the log. */
        log_msg(LOG_ERR, "producer", "%s; retrying in 5 s", err);
        m->retry_at_ms = now_ms() + 5000;
        m->next = pl->retry;
        pl->retry = m;
        return;
    }
}

static struct outmsg *out_new(enum out_kind kind, const char *topic,
                              const void *key, size_t key_len, const void *value,
                              size_t value_len)
{
    struct outmsg *m = calloc(1, sizeof(*m));
    if (!m)
        abort();
    m->kind = kind;
    m->topic = strdup(topic);
    m->key = malloc(key_len + 1);
    memcpy(m->key, key, key_len);
    m->key[key_len] = '\0';
    m->key_len = key_len;
    m->value = malloc(value_len + 1);
    memcpy(m->value, value, value_len);
    m->value[value_len] = '\0';
    m->value_len = value_len;
    return m;
}

static void out_header(struct outmsg *m, const char *name, const char *value)
{
    if (m->n_hdrs < 4) {
        m->hname[m->n_hdrs] = strdup(name);
        m->hval[m->n_hdrs] = strdup(value);
        m->n_hdrs++;
    }
}

static struct outmsg *result_msg(struct pipeline *pl, enum out_kind kind,
                                 const char *op_id, const char *event_key,
                                 uint64_t generation, const void *value,
                                 size_t len)
{
    struct outmsg *m = out_new(kind, pl->cfg->topic_results, event_key,
                               strlen(event_key), value, len);
    char gen[32];
    snprintf(gen, sizeof(gen), "%llu", (unsigned long long)generation);
    out_header(m, "idempotency-key", event_key);
    out_header(m, "dedupd-op-id", op_id);
    out_header(m, "dedupd-generation", gen);
    return m;
}

/* Delivery reports arrive through producer_poll on this thread; the callback
 * cannot take the pipeline as an argument, so it is kept here. */
static struct pipeline *g_pl;

static void dr_cb(void *opaque, dd_err_t err, const char *errtext,
                  int32_t partition, int64_t offset)
{
    struct pipeline *pl = g_pl;
    struct outmsg *m = opaque;
    (void)partition;
    (void)offset;
    pl->pending_out--;
    if (err) {
        log_msg(LOG_WARNING, "producer", "delivery to %s failed (%s); retrying",
                m->topic, errtext);
        m->retry_at_ms = now_ms() + 1000;
        m->next = pl->retry;
        pl->retry = m;
        return;
    }
    char e[DD_ERRSTR_SIZE];
    switch (m->kind) {
    case OUT_RESULT:
        if (store_outbox_ack(pl->store, m->seq, m->op->op_id, e, sizeof(e)))
            log_msg(LOG_ERR, "store", "%s", e);
        pl->st->results++;
        op_finish(pl, m->op);
        break;
    case OUT_REPLAY:
        if (store_outbox_ack(pl->store, m->seq, m->op_id, e, sizeof(e)))
            log_msg(LOG_ERR, "store", "%s", e);
        pl->st->results++;
        break;
    case OUT_DLQ:
    case OUT_CONFLICT:
        msg_done(pl, m->msg);
        break;
    }
    out_free(m);
}

static void retry_due(struct pipeline *pl)
{
    int64_t now = now_ms();
    struct outmsg **pp = &pl->retry;
    while (*pp) {
        struct outmsg *m = *pp;
        if (m->retry_at_ms <= now) {
            *pp = m->next;
            m->next = NULL;
            out_send(pl, m);
        } else
            pp = &m->next;
    }
}

/* ---- the claim path ------------------------------------------------------- */

static void source_of(const char *topic, int32_t partition, int64_t offset,
                      char *buf, size_t size)
{
    snprintf(buf, size, "%s/%d/%lld", topic, (int)partition, (long long)offset);
}

static void send_dlq(struct pipeline *pl, const rd_kafka_message_t *rkm,
                     struct pmsg *pm, const char *reason)
{
    char source[STORE_SOURCE_MAX + 1];
    source_of(pl->cfg->topic_jobs, rkm->partition, rkm->offset, source,
              sizeof(source));
    const void *key = rkm->key;
    size_t key_len = rkm->key_len;
    if (!key || !key_len) {
        key = source;
        key_len = strlen(source);
    }
    struct outmsg *m = out_new(OUT_DLQ, pl->cfg->topic_dlq, key, key_len,
                               rkm->payload ? rkm->payload : "", rkm->len);
    out_header(m, "dedupd-error", reason);
    out_header(m, "dedupd-source", source);
    m->msg = pm;
    struct log_ctx lc = {pl->cfg->topic_jobs, rkm->partition, rkm->offset, NULL};
    log_ctx_msg(LOG_NOTICE, "consumer", &lc, "job to the DLQ: %s", reason);
    pl->st->invalid++;
    out_send(pl, m);
}

static void start_fetch(struct pipeline *pl, struct opctx *o)
{
    const struct job *j = o->job;
    struct fetch_header *h = calloc(j->req.n_headers + 1, sizeof(*h));
    for (size_t i = 0; i < j->req.n_headers; i++) {
        h[i].name = j->req.headers[i].name;
        h[i].value = j->req.headers[i].value;
    }
    int64_t budget = j->deadline_s > 0 ? j->deadline_s * 1000
                                       : pl->cfg->fetch_deadline_ms;
    struct fetch_req req = {
        .url = j->req.url,
        .method = j->req.method,
        .headers = h,
        .n_headers = j->req.n_headers,
        .body = j->req.body,
        .body_len = j->req.body_len,
        .safe = j->safe,
        .deadline_ms = now_ms() + budget,
        .opaque = o,
    };
    if (fetch_submit(pl->fetch, &req))
        abort(); /* out of memory */
    free(h);
}

/* Claim \p job for message \p pm and act on the answer.  Takes ownership of
 * \p job and \p pm. */
static void claim(struct pipeline *pl, struct job *job, struct pmsg *pm,
                  const char *source)
{
    char e[DD_ERRSTR_SIZE];
    enum store_claim_result res;
    struct store_op op;
    struct log_ctx lc = {pl->cfg->topic_jobs, pm->partition, pm->offset,
                         job->op_id};
    dd_err_t err = store_claim(pl->store, job->op_id, job->request_hash,
                               job->event_key, source, now_ms(), &res, &op, e,
                               sizeof(e));
    if (err) {
        /* Storage trouble: hold the message and try again shortly; its offset
         * stays uncommitted. */
        log_ctx_msg(LOG_ERR, "store", &lc, "%s; retrying", e);
        struct blocked *b = calloc(1, sizeof(*b));
        b->pm = pm;
        b->job = job;
        b->recheck_at_ms = now_ms() + 1000;
        b->next = pl->blocked;
        pl->blocked = b;
        pl->n_blocked++;
        return;
    }
    switch (res) {
    case STORE_CLAIM_NEW:
    case STORE_CLAIM_RECLAIMED: {
        if (res == STORE_CLAIM_NEW)
            pl->st->new_ops++;
        else {
            pl->st->reclaimed++;
            log_ctx_msg(LOG_NOTICE, "consumer", &lc,
                        "reclaimed op at generation %llu",
                        (unsigned long long)op.generation);
        }
        struct opctx *o = op_add(pl, job, op.generation, pm);
        if (pl->opts->shadow) {
            char *v;
            size_t vlen;
            const char *outcome;
            if (result_encode(job, NULL, op.generation,
                              (size_t)pl->cfg->limits_max_result_bytes, &v,
                              &vlen, &outcome))
                abort();
            uint64_t seq;
            if (store_complete(pl->store, job->op_id, op.generation,
                               STORE_OP_COMPLETE, NULL, 0, v, vlen, now_ms(),
                               &seq, e, sizeof(e)))
                log_ctx_msg(LOG_ERR, "store", &lc, "%s", e);
            struct outmsg *m = result_msg(pl, OUT_RESULT, job->op_id,
                                          job->event_key, op.generation, v, vlen);
            m->op = o;
            m->seq = seq;
            free(v);
            out_send(pl, m);
        } else
            start_fetch(pl, o);
        return;
    }
    case STORE_CLAIM_CONFLICT: {
        pl->st->conflicts++;
        bool first = false;
        if (store_conflict_mark(pl->store, job->op_id, job->request_hash,
                                now_ms(), &first, e, sizeof(e))) {
            log_ctx_msg(LOG_ERR, "store", &lc, "%s", e);
            first = true; /* better reported twice than never */
        }
        log_ctx_msg(LOG_NOTICE, "consumer", &lc,
                    "conflict: request_hash %.12s differs from %.12s (first "
                    "seen at %s)%s",
                    job->request_hash, op.request_hash, op.source,
                    first ? "" : "; already reported");
        if (!first) {
            job_destroy(job);
            msg_done(pl, pm);
            return;
        }
        pl->st->conflicts_reported++;
        char *v;
        size_t vlen;
        if (result_conflict_encode(job->op_id, op.request_hash, op.source,
                                   job->request_hash, source, &v, &vlen))
            abort();
        struct outmsg *m = out_new(OUT_CONFLICT, pl->cfg->topic_conflicts,
                                   job->op_id, strlen(job->op_id), v, vlen);
        free(v);
        out_header(m, "dedupd-op-id", job->op_id);
        m->msg = pm;
        job_destroy(job);
        out_send(pl, m);
        return;
    }
    case STORE_CLAIM_DUPLICATE:
        break;
    }
    if (op.state == STORE_OP_COMPLETE || op.state == STORE_OP_FAILED) {
        /* The result is durable in the store (acknowledged, or in the outbox
         * that is replayed until acknowledged). */
        pl->st->duplicates++;
        log_ctx_msg(LOG_DEBUG, "consumer", &lc, "duplicate of a %s op",
                    store_op_state2str(op.state));
        job_destroy(job);
        msg_done(pl, pm);
        return;
    }
    /* In flight: the message waits for that op's result (DESIGN.md section 4,
     * "in flight is not done"). */
    pl->st->duplicates_inflight++;
    struct opctx *o = op_find(pl, job->op_id);
    if (o) {
        pm->next = o->msgs;
        o->msgs = pm;
        job_destroy(job);
        return;
    }
    /* Leased by another owner: check again until it finishes or the lease
     * expires (then this worker reclaims it). */
    struct blocked *b = calloc(1, sizeof(*b));
    b->pm = pm;
    b->job = job;
    int64_t wait = op.lease_expires_at_ms - now_ms();
    b->recheck_at_ms = now_ms() + (wait > 0 && wait < 1000 ? wait : 1000);
    b->next = pl->blocked;
    pl->blocked = b;
    pl->n_blocked++;
}

static void recheck_blocked(struct pipeline *pl)
{
    int64_t now = now_ms();
    struct blocked **pp = &pl->blocked;
    while (*pp) {
        struct blocked *b = *pp;
        if (b->recheck_at_ms > now) {
            pp = &b->next;
            continue;
        }
        *pp = b->next;
        pl->n_blocked--;
        char source[STORE_SOURCE_MAX + 1];
        source_of(pl->cfg->topic_jobs, b->pm->partition, b->pm->offset, source,
                  sizeof(source));
        struct job *job = b->job;
        struct pmsg *pm = b->pm;
        free(b);
        pl->st->duplicates_inflight--; /* counted again by claim() */
        claim(pl, job, pm, source);
    }
}

static void handle_message(struct pipeline *pl, rd_kafka_message_t *rkm)
{
    struct ptrack *t = track_get(pl, rkm->partition);
    t->eof = false;
    pl->st->consumed++;
    int64_t now = now_ms();
    if (!pl->st->first_msg_ms)
        pl->st->first_msg_ms = now;
    pl->st->last_msg_ms = now;
    pl->last_activity_ms = now;
    struct pmsg *pm = track_add(pl, rkm->partition, rkm->offset);
    char e[DD_ERRSTR_SIZE];
    struct job *job = NULL;
    if (!rkm->payload || rkm->len == 0) {
        send_dlq(pl, rkm, pm, "empty message: a job is a JSON object");
        return;
    }
    if (job_parse(&pl->jconf, rkm->payload, rkm->len, &job, e, sizeof(e))) {
        send_dlq(pl, rkm, pm, e);
        return;
    }
    /* The key is a routing hint; count keys that differ from op_id. */
    size_t idlen = strlen(job->op_id);
    if (!rkm->key || rkm->key_len != idlen || memcmp(rkm->key, job->op_id, idlen))
        pl->st->misrouted++;
    /* A submitter's dedupd-op-id header must agree with the value. */
    rd_kafka_headers_t *hdrs = NULL;
    if (!rd_kafka_message_headers(rkm, &hdrs)) {
        const void *v;
        size_t vlen;
        if (!rd_kafka_header_get_last(hdrs, "dedupd-op-id", &v, &vlen) &&
            (vlen != idlen || memcmp(v, job->op_id, idlen))) {
            snprintf(e, sizeof(e),
                     "header dedupd-op-id does not match the op_id derived "
                     "from the job (%.120s)", job->op_id);
            job_destroy(job);
            send_dlq(pl, rkm, pm, e);
            return;
        }
    }
    char source[STORE_SOURCE_MAX + 1];
    source_of(pl->cfg->topic_jobs, rkm->partition, rkm->offset, source,
              sizeof(source));
    claim(pl, job, pm, source);
}

/* A fetch finished: result + op state + outbox in one batch, then produce. */
static void handle_fetched(struct pipeline *pl, struct fetch_result *r)
{
    struct opctx *o = r->opaque;
    char e[DD_ERRSTR_SIZE];
    char *v = NULL;
    size_t vlen = 0;
    const char *outcome;
    struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
    if (result_encode(o->job, r, o->generation,
                      (size_t)pl->cfg->limits_max_result_bytes, &v, &vlen,
                      &outcome))
        abort();
    bool failed = strcmp(outcome, "fetched") != 0;
    if (failed) {
        pl->st->failed++;
        log_ctx_msg(LOG_NOTICE, "fetch", &lc, "op failed: %s (%s) after %u attempts",
                    r->category ? r->category : "too_large",
                    r->error ? r->error : "", r->attempts);
    }
    uint64_t seq = 0;
    dd_err_t err = store_complete(pl->store, o->op_id, o->generation,
                                  failed ? STORE_OP_FAILED : STORE_OP_COMPLETE,
                                  failed ? (r->category ? r->category : "too_large")
                                         : NULL,
                                  r->attempts, v, vlen, now_ms(), &seq, e,
                                  sizeof(e));
    if (err == DD_ERR_STATE) {
        /* Fenced: another worker took the op over; its result will stand. */
        log_ctx_msg(LOG_WARNING, "store", &lc, "result dropped: %s", e);
        free(v);
        fetch_result_destroy(r);
        op_finish(pl, o);
        return;
    }
    if (err) {
        /* The op stays running under our lease; its messages stay uncommitted
         * and a restart resumes it. */
        log_ctx_msg(LOG_ERR, "store", &lc, "%s", e);
        free(v);
        fetch_result_destroy(r);
        return;
    }
    o->seq = seq;
    o->stored = true;
    struct outmsg *m = result_msg(pl, OUT_RESULT, o->op_id, o->job->event_key,
                                  o->generation, v, vlen);
    m->op = o;
    m->seq = seq;
    free(v);
    fetch_result_destroy(r);
    out_send(pl, m);
}

static int replay_cb(void *opaque, uint64_t seq, const char *op_id,
                     const char *event_key, uint64_t generation,
                     const void *value, size_t value_len)
{
    struct pipeline *pl = opaque;
    struct outmsg *m = result_msg(pl, OUT_REPLAY, op_id, event_key, generation,
                                  value, value_len);
    m->seq = seq;
    m->op_id = strdup(op_id);
    pl->st->replayed_outbox++;
    out_send(pl, m);
    return 0;
}

/* Renew the leases of ops still being fetched, every lease_ms / 3, so a slow
 * fetch is never taken over by another worker while it is alive. */
static void renew_leases(struct pipeline *pl)
{
    int64_t now = now_ms();
    if (now < pl->next_renew_ms)
        return;
    pl->next_renew_ms = now + pl->cfg->store_lease_ms / 3;
    char e[DD_ERRSTR_SIZE];
    for (size_t b = 0; b < OPMAP_BUCKETS; b++) {
        for (struct opctx *o = pl->opmap[b]; o; o = o->hnext) {
            if (o->stored)
                continue;
            if (store_lease_renew(pl->store, o->op_id, o->generation, now, e,
                                  sizeof(e))) {
                struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
                log_ctx_msg(LOG_WARNING, "store", &lc, "lease renewal: %s", e);
            }
        }
    }
}

/* ---- rebalance ------------------------------------------------------------ */

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    struct pipeline *pl = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        for (int i = 0; i < parts->cnt; i++) {
            struct ptrack *t = track_get(pl, parts->elems[i].partition);
            t->epoch++;
            t->assigned = true;
            t->eof = false;
            t->head = t->n = 0;
        }
        log_msg(LOG_INFO, "consumer", "assigned %d partitions", parts->cnt);
        pl->assigned_once = true;
        rd_kafka_assign(rk, parts);
    } else {
        /* Commit what is stored; work still in flight for these partitions
         * finishes (its result is published) but its offsets are no longer
         * ours to store: the next owner sees a duplicate. */
        rd_kafka_commit(rk, NULL, 0);
        for (int i = 0; i < parts->cnt; i++) {
            struct ptrack *t = track_get(pl, parts->elems[i].partition);
            t->assigned = false;
            t->epoch++;
        }
        log_msg(LOG_INFO, "consumer", "revoked %d partitions", parts->cnt);
        rd_kafka_assign(rk, NULL);
    }
    pl->last_activity_ms = now_ms();
}

/* ---- run ------------------------------------------------------------------ */

static bool all_eof(struct pipeline *pl)
{
    bool any = false;
    for (size_t i = 0; i < pl->n_parts; i++) {
        if (!pl->parts[i].assigned)
            continue;
        any = true;
        if (!pl->parts[i].eof)
            return false;
    }
    return any;
}

static bool idle(struct pipeline *pl)
{
    return pl->n_ops == 0 && pl->pending_out == 0 && pl->retry == NULL &&
           pl->blocked == NULL;
}

dd_err_t consumer_run(const struct cfg *cfg, const struct consumer_opts *opts,
                      struct consumer_stats *st, char *errstr, size_t errstr_size)
{
    struct pipeline pl_s = {0}, *pl = &pl_s;
    dd_err_t err = DD_OK;
    memset(st, 0, sizeof(*st));
    pl->cfg = cfg;
    pl->opts = opts;
    pl->st = st;
    pl->jconf.variance_headers = (const char *const *)cfg->identity_variance_headers.v;
    pl->jconf.n_variance_headers = cfg->identity_variance_headers.n;
    pl->jconf.credential_headers =
        (const char *const *)cfg->identity_credential_headers.v;
    pl->jconf.n_credential_headers = cfg->identity_credential_headers.n;
    pl->jconf.max_job_bytes = (size_t)cfg->limits_max_job_bytes;
    pl->opmap = calloc(OPMAP_BUCKETS, sizeof(*pl->opmap));
    g_pl = pl;

    char run_id[40];
    snprintf(run_id, sizeof(run_id), "%llx%04x", (unsigned long long)now_ms(),
             (unsigned)getpid() & 0xffff);
    struct store_conf sc = {
        .path = cfg->store_path,
        .instance = cfg->instance_id,
        .run_id = run_id,
        .ops_ttl_ms = cfg->store_ops_ttl_ms,
        .failed_ttl_ms = cfg->store_failed_ttl_ms,
        .lease_ms = cfg->store_lease_ms,
        .block_cache_bytes = (size_t)cfg->store_block_cache_bytes,
        .sync = cfg->store_sync,
    };
    err = store_open(&sc, &pl->store, errstr, errstr_size);
    if (err)
        goto out;
    err = producer_new(cfg, dr_cb, &pl->prod, errstr, errstr_size);
    if (err)
        goto out;
    if (!opts->shadow) {
        err = fetch_new(cfg, &pl->fetch, errstr, errstr_size);
        if (err)
            goto out;
    }

    const char *fixed[] = {
        "group.id", cfg->group_id,
        "enable.auto.offset.store", "false",
        "enable.auto.commit", "true",
        "auto.commit.interval.ms", "1000",
        "auto.offset.reset", "earliest",
        "enable.partition.eof", "true",
        NULL, NULL, NULL};
    rd_kafka_conf_t *kc = NULL;
    err = kconf_new(cfg, true, fixed, &kc, errstr, errstr_size);
    if (err)
        goto out;
    /* Eager assignors unless the operator chose through kafka.*; librdkafka
     * 2.0.2's cooperative-sticky has known bugs (DESIGN.md section 6). */
    char val[64];
    size_t vsz = sizeof(val);
    if (rd_kafka_conf_get(kc, "partition.assignment.strategy", val, &vsz) ==
            RD_KAFKA_CONF_OK &&
        strstr(val, "cooperative") && rd_kafka_version() < 0x020601ff) {
        dd_errstr_set(errstr, errstr_size,
                      "config: kafka.partition.assignment.strategy: "
                      "cooperative-sticky needs librdkafka >= 2.6.1, linked "
                      "is %s", rd_kafka_version_str());
        rd_kafka_conf_destroy(kc);
        err = DD_ERR_INVAL;
        goto out;
    }
    rd_kafka_conf_set_rebalance_cb(kc, rebalance_cb);
    rd_kafka_conf_set_opaque(kc, pl);
    char ke[512];
    pl->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, ke, sizeof(ke));
    if (!pl->rk) {
        rd_kafka_conf_destroy(kc);
        dd_errstr_set(errstr, errstr_size, "rd_kafka_new(consumer): %s", ke);
        err = DD_ERR_FATAL;
        goto out;
    }
    rd_kafka_poll_set_consumer(pl->rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, cfg->topic_jobs, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t ke2 = rd_kafka_subscribe(pl->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (ke2) {
        dd_errstr_set(errstr, errstr_size, "subscribe %s: %s", cfg->topic_jobs,
                      rd_kafka_err2str(ke2));
        err = DD_ERR_FATAL;
        goto out;
    }

    /* Start-up: unsent outbox entries go out again under their event_key. */
    err = store_outbox_foreach(pl->store, replay_cb, pl, errstr, errstr_size);
    if (err)
        goto out;
    if (st->replayed_outbox)
        log_msg(LOG_INFO, "consumer", "replaying %llu unsent results",
                (unsigned long long)st->replayed_outbox);
    log_msg(LOG_INFO, "consumer", "running: instance %s run %s, group %s, topic %s",
            cfg->instance_id, run_id, cfg->group_id, cfg->topic_jobs);

    pl->last_activity_ms = now_ms();
    int64_t stop_at = 0;
    while (1) {
        bool stopping = !*opts->run;
        if (stopping && !stop_at) {
            stop_at = now_ms() + cfg->shutdown_grace_ms;
            log_msg(LOG_INFO, "consumer",
                    "stopping: finishing %zu ops in flight (grace %lld ms)",
                    pl->n_ops, (long long)cfg->shutdown_grace_ms);
        }
        if (stopping && (idle(pl) || now_ms() >= stop_at))
            break;
        /* Completions first: they free capacity. */
        if (pl->fetch) {
            struct fetch_result *r;
            while ((r = fetch_take(pl->fetch, 0)))
                handle_fetched(pl, r);
        }
        producer_poll(pl->prod, 0);
        retry_due(pl);
        recheck_blocked(pl);
        renew_leases(pl);
        bool full = pl->n_ops >= (size_t)cfg->fetch_max_inflight;
        if (!stopping && !full) {
            int timeout = pl->n_ops || pl->pending_out ? 2 : 100;
            for (int i = 0; i < 512; i++) {
                rd_kafka_message_t *rkm = rd_kafka_consumer_poll(pl->rk, i ? 0 : timeout);
                if (!rkm)
                    break;
                if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                    track_get(pl, rkm->partition)->eof = true;
                } else if (rkm->err) {
                    log_msg(LOG_WARNING, "consumer", "consume: %s",
                            rd_kafka_message_errstr(rkm));
                } else {
                    handle_message(pl, rkm);
                }
                rd_kafka_message_destroy(rkm);
                if (pl->n_ops >= (size_t)cfg->fetch_max_inflight)
                    break;
            }
        } else if (pl->fetch) {
            struct fetch_result *r = fetch_take(pl->fetch, 5);
            if (r)
                handle_fetched(pl, r);
        } else
            producer_poll(pl->prod, 5);
        if (opts->exit_when_idle_ms > 0 && !stopping && idle(pl) &&
            pl->assigned_once && all_eof(pl) &&
            now_ms() - pl->last_activity_ms >= opts->exit_when_idle_ms) {
            log_msg(LOG_INFO, "consumer", "idle for %lld ms: exiting",
                    (long long)opts->exit_when_idle_ms);
            break;
        }
    }
    /* Leave cleanly: flush results, commit stored offsets, close. */
    if (producer_flush(pl->prod, 10000))
        log_msg(LOG_WARNING, "producer",
                "%d messages unacknowledged at exit; their outbox entries are "
                "replayed at the next start", producer_outq_len(pl->prod));
    producer_poll(pl->prod, 0);
    rd_kafka_commit(pl->rk, NULL, 0);
out:
    if (pl->rk) {
        rd_kafka_consumer_close(pl->rk);
        rd_kafka_destroy(pl->rk);
    }
    if (pl->fetch) {
        struct fetch_stats fs;
        fetch_stats_get(pl->fetch, &fs);
        st->fetch_attempts = fs.attempts;
        st->rotations = fs.rotations;
        st->throttled = fs.throttled;
        st->bytes = fs.bytes;
    }
    fetch_destroy(pl->fetch);
    /* Ops still in flight keep their lease; a restart reclaims them. */
    for (size_t b = 0; pl->opmap && b < OPMAP_BUCKETS; b++) {
        struct opctx *o = pl->opmap[b];
        while (o) {
            struct opctx *n = o->hnext;
            while (o->msgs) {
                struct pmsg *m = o->msgs;
                o->msgs = m->next;
                free(m);
            }
            job_destroy(o->job);
            free(o->op_id);
            free(o);
            o = n;
        }
    }
    free(pl->opmap);
    while (pl->blocked) {
        struct blocked *b = pl->blocked;
        pl->blocked = b->next;
        job_destroy(b->job);
        free(b->pm);
        free(b);
    }
    while (pl->retry) {
        struct outmsg *m = pl->retry;
        pl->retry = m->next;
        if (m->msg)
            free(m->msg);
        out_free(m);
    }
    producer_destroy(pl->prod);
    store_close(pl->store);
    for (size_t i = 0; i < pl->n_parts; i++)
        free(pl->parts[i].e);
    free(pl->parts);
    g_pl = NULL;
    return err;
}

void consumer_stats_print(const struct consumer_stats *st, FILE *fp)
{
    double secs = st->last_msg_ms > st->first_msg_ms
                      ? (double)(st->last_msg_ms - st->first_msg_ms) / 1000.0
                      : 0.0;
    fprintf(fp,
            "{\"consumed\":%llu,\"new\":%llu,\"reclaimed\":%llu,"
            "\"duplicates\":%llu,\"duplicates_inflight\":%llu,"
            "\"conflicts\":%llu,\"conflicts_reported\":%llu,\"invalid\":%llu,"
            "\"misrouted\":%llu,\"results\":%llu,\"failed\":%llu,"
            "\"replayed_outbox\":%llu,\"fetch_attempts\":%llu,"
            "\"rotations\":%llu,\"throttled\":%llu,\"bytes\":%llu,"
            "\"seconds\":%.3f,\"messages_per_second\":%.1f}\n",
            (unsigned long long)st->consumed, (unsigned long long)st->new_ops,
            (unsigned long long)st->reclaimed,
            (unsigned long long)st->duplicates,
            (unsigned long long)st->duplicates_inflight,
            (unsigned long long)st->conflicts,
            (unsigned long long)st->conflicts_reported,
            (unsigned long long)st->invalid, (unsigned long long)st->misrouted,
            (unsigned long long)st->results, (unsigned long long)st->failed,
            (unsigned long long)st->replayed_outbox,
            (unsigned long long)st->fetch_attempts,
            (unsigned long long)st->rotations,
            (unsigned long long)st->throttled, (unsigned long long)st->bytes,
            secs, secs > 0 ? (double)st->consumed / secs : 0.0);
}
