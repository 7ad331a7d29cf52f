/* The pipeline thread.  See consumer.h for the flow and its invariants. */
#include "dd.h"
#include "consumer.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fetch.h"
#include "job.h"
#include "kconf.h"
#include "key.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
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
    bool dirty;           /* store_at not yet handed to librdkafka */
    int64_t store_at;     /* next offset to store (every earlier one done) */
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
    uint32_t base_attempts; /* attempts of earlier generations (from the store) */
    int64_t not_before_ms;  /* reclaimed retryable op: its stored retry time */
    bool stored;          /* result committed to the store (lease no longer
                             needed) */
    uint64_t ticket;      /* group commit: durable once store_durable()
                             reaches it */
    struct opctx *await_next; /* acknowledged, waiting for durability */
    bool failed;          /* result outcome failed */
    bool shadow;          /* result outcome shadow */
    int64_t deadline_ms;  /* of its fetch (absolute) */
    /* single-flight (DESIGN.md section 5): a leader's transfer serves the
     * followers waiting on the same resource_key */
    struct opctx *sf_hnext;     /* leader map chain */
    struct opctx *sf_followers; /* leader: its waiters */
    struct opctx *sf_next;      /* follower: next waiter of its leader */
    bool sf_leading;            /* in the leader map */
    bool sf_waiting;            /* follower, waiting */
    struct store_validator *cond; /* validators sent with its request
                                     (conditional refetch), or NULL */
    bool no_cond;               /* refetch without validators (a 304 not
                                   trusted, or its stored body gone) */
    bool sf_alone;              /* its leader failed transiently: it fetches
                                   on its own (never chained behind another
                                   waiter, so every wait stays bounded) */
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
    char *op_id;          /* OUT_REPLAY, OUT_CONFLICT */
    char hash[STORE_HASH_LEN + 1]; /* OUT_CONFLICT: the conflicting hash */
    struct outmsg *next_conflict;  /* conflict reports in flight */
    int64_t retry_at_ms;
};

struct blocked {
    struct blocked *next;
    struct pmsg *pm;
    struct job *job;
    int64_t recheck_at_ms;
};

#define OPMAP_BUCKETS 65536
#define SFMAP_BUCKETS 4096
#define POLL_BATCH 1024
#define DLQ_TRUNCATE_BYTES (512 * 1024) /* DLQ prefix kept when refused whole */   /* messages claimed together (one store batch) */

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
    struct opctx **sfmap; /* resource_key -> leader fetching it */
    struct outmsg *retry;
    struct blocked *blocked;
    size_t n_blocked;
    struct outmsg *conflicts_inflight; /* reports not yet acknowledged */
    size_t pending_out;   /* produced, not yet acknowledged */
    struct opctx *await;  /* results acknowledged whose completion is not
                             fsync'd yet (group commit): their offsets wait */
    bool purging;         /* producer_reset: reports of purged messages */
    int64_t reset_retry_at_ms; /* producer_reset: not again before */
    long fail_fatal_after; /* test failpoint (see producer_reset), -1 off */
    int64_t last_activity_ms;
    int64_t next_renew_ms;
    int64_t next_gauges_ms;
    bool assigned_once;
    bool rechecking;      /* claim() of a held message: already counted */
    atomic_bool ready;    /* read by the admin listener */
    struct http *http;
    struct producer *api_prod; /* POST /v1/jobs, used by the api thread only */
    bool offsets_dirty;   /* some partition's store_at waits for flush */
    struct opctx **shadow_pending; /* shadow ops claimed, to complete */
    size_t n_shadow, cap_shadow;
};


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
            t->store_at = store_at;
            t->dirty = true;
            pl->offsets_dirty = true;
        }
    }
    free(pm);
    pl->last_activity_ms = dd_now_ms();
}

/* Hand every partition's new store_at to librdkafka in one offsets_store call
 * (once per loop iteration, not per message: a replay storm stores
 * thousands of offsets per batch). */
static void flush_offsets(struct pipeline *pl)
{
    if (!pl->offsets_dirty)
        return;
    pl->offsets_dirty = false;
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t p = 0; p < pl->n_parts; p++) {
        struct ptrack *t = &pl->parts[p];
        if (!t->dirty)
            continue;
        t->dirty = false;
        if (!t->assigned)
            continue;
        if (!l)
            l = rd_kafka_topic_partition_list_new(4);
        rd_kafka_topic_partition_list_add(l, pl->cfg->topic_jobs, (int32_t)p)
            ->offset = t->store_at;
    }
    if (!l)
        return;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(pl->rk, l);
    if (e)
        log_msg(LOG_WARNING, "consumer", "offsets_store: %s",
                rd_kafka_err2str(e));
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].err)
            log_msg(LOG_WARNING, "consumer",
                    "offsets_store partition %d offset %lld: %s",
                    (int)l->elems[i].partition,
                    (long long)l->elems[i].offset,
                    rd_kafka_err2str(l->elems[i].err));
    rd_kafka_topic_partition_list_destroy(l);
}

/* ---- op map ------------------------------------------------------------- */

static size_t op_hash(const char *s)
{
    return (size_t)(dd_fnv1a64_str(s) & (OPMAP_BUCKETS - 1));
}

static struct opctx *op_find(struct pipeline *pl, const char *op_id)
{
    for (struct opctx *o = pl->opmap[op_hash(op_id)]; o; o = o->hnext)
        if (!strcmp(o->op_id, op_id))
            return o;
    return NULL;
}

/* op_find for a key that is not NUL-terminated (a Kafka message key). */
static struct opctx *op_find_key(struct pipeline *pl, const void *key,
                                 size_t len)
{
    char id[STORE_KEY_MAX + 1];
    if (len > STORE_KEY_MAX)
        return NULL;
    memcpy(id, key, len);
    id[len] = '\0';
    return op_find(pl, id);
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
    free(o->cond);
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

static void out_header(struct outmsg *m, const char *name, const char *value);

static void out_send(struct pipeline *pl, struct outmsg *m)
{
    struct producer_header h[5];
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
        if (e == DD_ERR_STATE) {
            /* the producer is in a fatal state: producer_check recreates it
             * and the retry list sends this again */
            m->retry_at_ms = dd_now_ms() + 100;
            m->next = pl->retry;
            pl->retry = m;
            return;
        }
        if (m->kind == OUT_DLQ && m->value_len > DLQ_TRUNCATE_BYTES) {
            /* The broker refuses the original whole: keep a prefix, say so
             * (size and digest of the original) rather than lose the record. */
            char note[160], digest[KEY_HEX_LEN + 1];
            key_sha256_hex(m->value, m->value_len, digest);
            snprintf(note, sizeof(note), "%zu bytes, sha256 %s", m->value_len,
                     digest);
            log_msg(LOG_WARNING, "producer",
                    "DLQ record refused whole (%s): truncating to %d bytes",
                    err, DLQ_TRUNCATE_BYTES);
            m->value_len = DLQ_TRUNCATE_BYTES;
            out_header(m, "dedupd-truncated", note);
            for (size_t i = 0; i < m->n_hdrs; i++)
                h[i] = (struct producer_header){m->hname[i], m->hval[i]};
            continue;
        }
        /* Not sendable (too large for the broker, unknown topic): retry later
         * so nothing is lost; the error is visible in the log. */
        log_msg(LOG_ERR, "producer", "%s; retrying in 5 s", err);
        m->retry_at_ms = dd_now_ms() + 5000;
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
    if (m->n_hdrs < 5) {
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
        if (!pl->purging)
            log_msg(LOG_WARNING, "producer",
                    "delivery to %s failed (%s); retrying", m->topic, errtext);
        m->retry_at_ms = dd_now_ms() + 1000;
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
        metrics_result(m->op->shadow ? METRICS_RESULT_SHADOW
                       : m->op->failed ? METRICS_RESULT_FAILED
                                       : METRICS_RESULT_FETCHED);
        /* The result is on the topic; the op's messages are done once its
         * completion is on disk too (DESIGN.md section 4: offsets only
         * after the batch is durable). */
        if (store_durable(pl->store) >= m->op->ticket) {
            op_finish(pl, m->op);
        } else {
            m->op->await_next = pl->await;
            pl->await = m->op;
        }
        break;
    case OUT_REPLAY:
        if (store_outbox_ack(pl->store, m->seq, m->op_id, e, sizeof(e)))
            log_msg(LOG_ERR, "store", "%s", e);
        pl->st->results++;
        metrics_add(METRICS_OUTBOX_REPLAYED, 1);
        break;
    case OUT_DLQ:
        metrics_add(METRICS_DLQ, 1);
        msg_done(pl, m->msg);
        break;
    case OUT_CONFLICT: {
        metrics_add(METRICS_CONFLICTS_REPORTED, 1);
        bool first;
        if (store_conflict_mark(pl->store, m->op_id, m->hash, dd_now_ms(), &first,
                                e, sizeof(e)))
            log_msg(LOG_ERR, "store", "%s", e);
        struct outmsg **pp = &pl->conflicts_inflight;
        while (*pp && *pp != m)
            pp = &(*pp)->next_conflict;
        if (*pp)
            *pp = m->next_conflict;
        msg_done(pl, m->msg);
    }
        break;
    }
    out_free(m);
}

static void retry_due(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
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

static bool conflict_inflight(struct pipeline *pl, const char *op_id,
                              const char *hash)
{
    for (struct outmsg *m = pl->conflicts_inflight; m; m = m->next_conflict)
        if (!strcmp(m->op_id, op_id) && !strcmp(m->hash, hash))
            return true;
    return false;
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
    metrics_job(METRICS_JOB_INVALID);
    out_send(pl, m);
}

static size_t sf_hash(const char *resource_key)
{
    return op_hash(resource_key) % SFMAP_BUCKETS;
}

/* Only a plain safe request without a body shares a transfer: an unsafe one
 * is a separate action of each op, and a workflow has its own session. */
static bool sf_eligible(const struct job *j)
{
    return j->n_steps == 0 && j->safe && j->req.body_len == 0 &&
           (!strcmp(j->req.method, "GET") || !strcmp(j->req.method, "HEAD"));
}

static void sf_remove(struct pipeline *pl, struct opctx *lead)
{
    struct opctx **pp = &pl->sfmap[sf_hash(lead->job->resource_key)];
    while (*pp && *pp != lead)
        pp = &(*pp)->sf_hnext;
    if (*pp)
        *pp = lead->sf_hnext;
    lead->sf_leading = false;
}

/* Is this final answer one a waiter may take as its own?  Never a transient
 * one (throttled, timeouts, connection and proxy failures, 5xx, canceled):
 * each waiter then fetches for itself. */
static bool sf_shareable(const struct fetch_result *r)
{
    static const char *const terminal[] = {"client_error", "forbidden_target",
                                           "redirect_loop", "protocol"};
    if (r->ok)
        return true;
    for (size_t i = 0; r->category && i < sizeof(terminal) / sizeof(*terminal);
         i++)
        if (!strcmp(r->category, terminal[i]))
            return true;
    return false;
}

/* Conditional refetch (DESIGN.md section 5) applies to what single-flight
 * shares: a plain GET without a body whose job sets no validator itself. */
static bool cond_eligible(const struct job *j)
{
    if (j->n_steps || j->req.body_len || strcmp(j->req.method, "GET"))
        return false;
    for (size_t i = 0; i < j->req.n_headers; i++)
        if (!strcasecmp(j->req.headers[i].name, "if-none-match") ||
            !strcasecmp(j->req.headers[i].name, "if-modified-since") ||
            !strcasecmp(j->req.headers[i].name, "range"))
            return false;
    return true;
}

/* Weak comparison of two entity tags (RFC 9110 section 8.8.3.2): equal once
 * a leading W/ is dropped from each. */
static bool etag_weak_match(const char *a, const char *b)
{
    if (!strncmp(a, "W/", 2))
        a += 2;
    if (!strncmp(b, "W/", 2))
        b += 2;
    return !strcmp(a, b);
}

static void start_fetch(struct pipeline *pl, struct opctx *o)
{
    const struct job *j = o->job;
    int64_t budget0 = j->deadline_s > 0 ? j->deadline_s * 1000
                                        : pl->cfg->fetch_deadline_ms;
    if (!o->deadline_ms) { /* a waiter sent off on its own keeps its budget */
        int64_t t0 = dd_now_ms();
        /* a reclaimed retryable op's budget starts when its wait ends */
        if (o->not_before_ms > t0)
            t0 = o->not_before_ms;
        o->deadline_ms = t0 + budget0;
    }
    if (pl->sfmap && !o->sf_alone && sf_eligible(j)) {
        struct opctx *lead = pl->sfmap[sf_hash(j->resource_key)];
        while (lead && strcmp(lead->job->resource_key, j->resource_key))
            lead = lead->sf_hnext;
        /* The wait is bounded: only behind a leader whose fetch ends (at
         * its deadline at the latest) before this op's own deadline. */
        if (lead && lead->deadline_ms <= o->deadline_ms) {
            o->sf_waiting = true;
            o->sf_next = lead->sf_followers;
            lead->sf_followers = o;
            pl->st->single_flight++;
            metrics_add(METRICS_SINGLE_FLIGHT, 1);
            return;
        }
        if (!lead) {
            size_t b = sf_hash(j->resource_key);
            o->sf_hnext = pl->sfmap[b];
            pl->sfmap[b] = o;
            o->sf_leading = true;
        }
    }
    struct fetch_header *h = calloc(j->req.n_headers + 3, sizeof(*h));
    if (!h)
        abort();
    size_t nh = j->req.n_headers;
    for (size_t i = 0; i < nh; i++) {
        h[i].name = j->req.headers[i].name;
        h[i].value = j->req.headers[i].value;
    }
    if (!o->no_cond && !o->cond && cond_eligible(j)) {
        struct store_validator v;
        bool found = false;
        char e[DD_ERRSTR_SIZE];
        if (store_validator_get(pl->store, j->resource_key, dd_now_ms(), &v,
                                &found, e, sizeof(e)))
            log_msg(LOG_WARNING, "store", "validators: %s", e);
        else if (found && (v.etag[0] || v.last_modified[0])) {
            o->cond = malloc(sizeof(*o->cond));
            if (!o->cond)
                abort();
            *o->cond = v;
        }
    }
    if (o->cond && !o->no_cond) {
        if (o->cond->etag[0])
            h[nh++] = (struct fetch_header){"If-None-Match", o->cond->etag};
        if (o->cond->last_modified[0])
            h[nh++] = (struct fetch_header){"If-Modified-Since",
                                            o->cond->last_modified};
    }
    /* A workflow: every step, with its headers (borrowed from the job). */
    struct fetch_step *steps = calloc(j->n_steps + 1, sizeof(*steps));
    struct fetch_header **sh = calloc(j->n_steps + 1, sizeof(*sh));
    if (!h || !steps || !sh)
        abort(); /* out of memory */
    for (size_t s = 0; s < j->n_steps; s++) {
        const struct job_request *jr = &j->steps[s];
        sh[s] = calloc(jr->n_headers + 1, sizeof(**sh));
        if (!sh[s])
            abort();
        for (size_t i = 0; i < jr->n_headers; i++) {
            sh[s][i].name = jr->headers[i].name;
            sh[s][i].value = jr->headers[i].value;
        }
        steps[s] = (struct fetch_step){
            .url = jr->url, .method = jr->method, .headers = sh[s],
            .n_headers = jr->n_headers, .body = jr->body,
            .body_len = jr->body_len,
        };
    }
    struct fetch_req req = {
        .url = j->req.url,
        .method = j->req.method,
        .headers = h,
        .n_headers = nh,
        .body = j->req.body,
        .body_len = j->req.body_len,
        .safe = j->safe,
        .country = j->country,
        .rotation = j->rotation,
        .deadline_ms = o->deadline_ms,
        .opaque = o,
        .steps = j->n_steps ? steps : NULL,
        .n_steps = j->n_steps,
        .replayable = j->replayable,
        .not_before_ms = o->not_before_ms,
    };
    if (fetch_submit(pl->fetch, &req))
        abort(); /* out of memory */
    o->not_before_ms = 0; /* a later fetch of this op (a refetch) resumes nothing */
    for (size_t s = 0; s < j->n_steps; s++)
        free(sh[s]);
    free(sh);
    free(steps);
    free(h);
}

/* Claim \p job for message \p pm and act on the answer.  Takes ownership of
 * \p job and \p pm. */
static void claim_apply(struct pipeline *pl, struct job *job, struct pmsg *pm,
                        const char *source, dd_err_t err, const char *errtext,
                        enum store_claim_result res, struct store_op op)
{
    char e[DD_ERRSTR_SIZE];
    struct log_ctx lc = {pl->cfg->topic_jobs, pm->partition, pm->offset,
                         job->op_id};
    if (err) {
        snprintf(e, sizeof(e), "%s", errtext);
        /* Storage trouble: hold the message and try again shortly; its offset
         * stays uncommitted. */
        log_ctx_msg(LOG_ERR, "store", &lc, "%s; retrying", e);
        struct blocked *b = calloc(1, sizeof(*b));
        b->pm = pm;
        b->job = job;
        b->recheck_at_ms = dd_now_ms() + 1000;
        b->next = pl->blocked;
        pl->blocked = b;
        pl->n_blocked++;
        return;
    }
    switch (res) {
    case STORE_CLAIM_NEW:
    case STORE_CLAIM_RECLAIMED: {
        if (res == STORE_CLAIM_NEW) {
            pl->st->new_ops++;
            metrics_job(METRICS_JOB_NEW);
        } else {
            pl->st->reclaimed++;
            metrics_job(METRICS_JOB_RECLAIMED);
            metrics_add(METRICS_LEASE_RECOVERIES, 1);
            log_ctx_msg(LOG_NOTICE, "consumer", &lc,
                        "reclaimed op at generation %llu",
                        (unsigned long long)op.generation);
        }
        struct opctx *o = op_add(pl, job, op.generation, pm);
        o->base_attempts = op.attempts;
        /* a reclaimed retryable op: its first attempt resumes the wait */
        if (op.state == STORE_OP_RETRYABLE)
            o->not_before_ms = op.not_before_ms > 0 ? op.not_before_ms : 1;
        if (op.state == STORE_OP_RETRYABLE && op.not_before_ms > dd_now_ms())
            log_ctx_msg(LOG_NOTICE, "consumer", &lc,
                        "op was retryable: its next attempt waits %lld ms "
                        "(the stored retry time)",
                        (long long)(op.not_before_ms - dd_now_ms()));
        o->shadow = pl->opts->shadow;
        if (pl->opts->shadow) {
            /* completed with the others of this loop (one batch, one sync) */
            if (pl->n_shadow == pl->cap_shadow) {
                pl->cap_shadow = pl->cap_shadow ? 2 * pl->cap_shadow : 256;
                pl->shadow_pending = realloc(pl->shadow_pending,
                                             pl->cap_shadow *
                                                 sizeof(*pl->shadow_pending));
                if (!pl->shadow_pending)
                    abort();
            }
            pl->shadow_pending[pl->n_shadow++] = o;
        } else
            start_fetch(pl, o);
        return;
    }
    case STORE_CLAIM_CONFLICT: {
        pl->st->conflicts++;
        metrics_job(METRICS_JOB_CONFLICT);
        /* Report once: not if already reported (marked after the broker's
         * acknowledgement), nor while a report of the same pair is in flight;
         * a crash between acknowledgement and mark reports it again. */
        bool reported = false;
        if (store_conflict_reported(pl->store, job->op_id, job->request_hash,
                                    dd_now_ms(), &reported, e, sizeof(e))) {
            log_ctx_msg(LOG_ERR, "store", &lc, "%s", e);
            reported = false; /* better reported twice than never */
        }
        if (!reported && conflict_inflight(pl, job->op_id, job->request_hash))
            reported = true;
        bool first = !reported;
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
        m->op_id = strdup(job->op_id);
        snprintf(m->hash, sizeof(m->hash), "%s", job->request_hash);
        m->next_conflict = pl->conflicts_inflight;
        pl->conflicts_inflight = m;
        job_destroy(job);
        out_send(pl, m);
        return;
    }
    case STORE_CLAIM_DUPLICATE:
        break;
    }
    if ((op.state == STORE_OP_COMPLETE || op.state == STORE_OP_FAILED) &&
        !op_find(pl, job->op_id)) {
        /* The result is durable in the store (acknowledged, or in the outbox
         * that is replayed until acknowledged).  While this run still tracks
         * the op (its completion not fsync'd yet, or its result not
         * acknowledged), the message waits with the op's own, below. */
        pl->st->duplicates++;
        metrics_job(METRICS_JOB_DUPLICATE);
        log_ctx_msg(LOG_DEBUG, "consumer", &lc, "duplicate of a %s op",
                    store_op_state2str(op.state));
        job_destroy(job);
        msg_done(pl, pm);
        return;
    }
    /* In flight: the message waits for that op's result (DESIGN.md section 4,
     * "in flight is not done"). */
    if (!pl->rechecking) {
        pl->st->duplicates_inflight++;
        metrics_job(METRICS_JOB_DUPLICATE_INFLIGHT);
    }
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
    int64_t wait = op.lease_expires_at_ms - dd_now_ms();
    b->recheck_at_ms = dd_now_ms() + (wait > 0 && wait < 1000 ? wait : 1000);
    b->next = pl->blocked;
    pl->blocked = b;
    pl->n_blocked++;
}

/* Claim one job (the slow path: held messages).  Takes ownership of \p job
 * and \p pm. */
static void claim(struct pipeline *pl, struct job *job, struct pmsg *pm,
                  const char *source)
{
    char e[DD_ERRSTR_SIZE] = "";
    enum store_claim_result res = STORE_CLAIM_DUPLICATE;
    struct store_op op;
    memset(&op, 0, sizeof(op));
    dd_err_t err = store_claim(pl->store, job->op_id, job->request_hash,
                               job->event_key, source, dd_now_ms(), &res, &op, e,
                               sizeof(e));
    claim_apply(pl, job, pm, source, err, e, res, op);
}

static void recheck_blocked(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
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
        pl->rechecking = true; /* counted when it was first held */
        claim(pl, job, pm, source);
        pl->rechecking = false;
    }
}

/* One message of a poll batch on its way to the claim. */
struct item {
    struct job *job;
    struct pmsg *pm;
    char source[STORE_SOURCE_MAX + 1];
};

/* Fast path (DESIGN.md section 2): the key equals the dedupd-op-id header and
 * the hot index holds that op finished with the dedupd-request-hash header's
 * hash: a duplicate, decided without parsing the value. */
static bool fast_path(struct pipeline *pl, const rd_kafka_message_t *rkm)
{
    if (!pl->cfg->identity_trust_headers || !rkm->key || !rkm->key_len)
        return false;
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(rkm, &hdrs))
        return false;
    const void *id, *hash;
    size_t id_len, hash_len;
    if (rd_kafka_header_get_last(hdrs, "dedupd-op-id", &id, &id_len) ||
        rd_kafka_header_get_last(hdrs, "dedupd-request-hash", &hash, &hash_len))
        return false;
    if (id_len != rkm->key_len || memcmp(id, rkm->key, id_len) ||
        hash_len != STORE_HASH_LEN)
        return false;
    /* An op this run still tracks (result not acknowledged, or completion
     * not fsync'd: the index already says finished) is not done yet: the
     * slow path attaches the message to it. */
    if (pl->n_ops && op_find_key(pl, rkm->key, rkm->key_len))
        return false;
    char h[STORE_HASH_LEN + 1];
    memcpy(h, hash, STORE_HASH_LEN);
    h[STORE_HASH_LEN] = '\0';
    return store_index_duplicate(pl->store, rkm->key, rkm->key_len, h, dd_now_ms(),
                                 NULL);
}

/* Parse and check one message; returns false when it went to the DLQ or was
 * decided on the fast path. */
static bool admit(struct pipeline *pl, rd_kafka_message_t *rkm, struct item *it)
{
    pl->st->consumed++;
    int64_t now = dd_now_ms();
    if (!pl->st->first_msg_ms)
        pl->st->first_msg_ms = now;
    pl->st->last_msg_ms = now;
    pl->last_activity_ms = now;
    if (fast_path(pl, rkm)) {
        pl->st->duplicates++;
        pl->st->fast_path++;
        metrics_job(METRICS_JOB_DUPLICATE);
        metrics_add(METRICS_FAST_PATH_DECISIONS, 1);
        struct ptrack *t = track_get(pl, rkm->partition);
        if (t->head == t->n) {
            /* Nothing of this partition is outstanding: the offset moves
             * on at once, with no tracking entry (the replay-storm path). */
            if (t->assigned) {
                t->store_at = rkm->offset + 1;
                t->dirty = true;
                pl->offsets_dirty = true;
            }
        } else
            msg_done(pl, track_add(pl, rkm->partition, rkm->offset));
        return false;
    }
    struct pmsg *pm = track_add(pl, rkm->partition, rkm->offset);
    char e[DD_ERRSTR_SIZE];
    struct job *job = NULL;
    if (!rkm->payload || rkm->len == 0) {
        send_dlq(pl, rkm, pm, "empty message: a job is a JSON object");
        return false;
    }
    if (job_parse(&pl->jconf, rkm->payload, rkm->len, &job, e, sizeof(e))) {
        send_dlq(pl, rkm, pm, e);
        return false;
    }
    /* Workflow jobs ("steps") run in the fetch engine (fetch.h). */
    /* The key is a routing hint; count keys that differ from op_id. */
    size_t idlen = strlen(job->op_id);
    if (!rkm->key || rkm->key_len != idlen || memcmp(rkm->key, job->op_id, idlen)) {
        pl->st->misrouted++;
        metrics_job(METRICS_JOB_MISROUTED);
    }
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
            return false;
        }
    }
    it->job = job;
    it->pm = pm;
    source_of(pl->cfg->topic_jobs, rkm->partition, rkm->offset, it->source,
              sizeof(it->source));
    return true;
}

/* Act on one answer of store_complete_batch for \p o: produce its result
 * (\p value, borrowed), or drop it when fenced (another worker took the op
 * over: its result will stand), or leave the op running under our lease when
 * the write failed (its messages stay uncommitted; a restart resumes it). */
static void completed(struct pipeline *pl, struct opctx *o,
                      const struct store_complete_req *req, const char *value,
                      size_t value_len)
{
    struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
    if (req->err == DD_ERR_STATE) {
        log_ctx_msg(LOG_WARNING, "store", &lc, "result dropped: %s",
                    req->errstr);
        op_finish(pl, o);
    } else if (req->err) {
        log_ctx_msg(LOG_ERR, "store", &lc, "%s", req->errstr);
    } else {
        o->seq = req->seq;
        o->ticket = req->ticket;
        o->stored = true;
        struct outmsg *m = result_msg(pl, OUT_RESULT, o->op_id,
                                      o->job->event_key, o->generation, value,
                                      value_len);
        m->op = o;
        m->seq = req->seq;
        out_send(pl, m);
    }
}

/* Shadow mode: complete the ops claimed in this loop iteration with their
 * `shadow` results in one store batch (group commit), then produce them. */
static void shadow_flush(struct pipeline *pl)
{
    size_t n = pl->n_shadow;
    if (!n)
        return;
    pl->n_shadow = 0;
    struct store_complete_req *req = calloc(n, sizeof(*req));
    char **v = calloc(n, sizeof(*v));
    size_t *vlen = calloc(n, sizeof(*vlen));
    if (!req || !v || !vlen)
        abort();
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = pl->shadow_pending[i];
        const char *outcome;
        if (result_encode(o->job, NULL, o->generation,
                          (size_t)pl->cfg->limits_max_result_bytes, &v[i],
                          &vlen[i], &outcome))
            abort();
        req[i] = (struct store_complete_req){
            .op_id = o->op_id,
            .generation = o->generation,
            .state = STORE_OP_COMPLETE,
            .value = v[i],
            .value_len = vlen[i],
        };
    }
    char e[DD_ERRSTR_SIZE];
    if (store_complete_batch(pl->store, req, n, dd_now_ms(), e, sizeof(e)))
        log_msg(LOG_ERR, "store", "completing %zu shadow ops: %s", n, e);
    for (size_t i = 0; i < n; i++) {
        completed(pl, pl->shadow_pending[i], &req[i], v[i], vlen[i]);
        free(v[i]);
    }
    free(req);
    free(v);
    free(vlen);
}

/* Process a poll batch: admit each message, claim the survivors at once
 * (store_claim_batch: one MultiGet for what the hot index cannot decide, one
 * WriteBatch), then act on each answer in consumption order. */
static void handle_batch(struct pipeline *pl, rd_kafka_message_t **rkms, size_t n)
{
    struct item *items = calloc(n, sizeof(*items));
    struct store_claim_req *reqs = calloc(n, sizeof(*reqs));
    if (!items || !reqs)
        abort();
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (admit(pl, rkms[i], &items[k]))
            k++;
    if (k) {
        for (size_t i = 0; i < k; i++) {
            reqs[i].op_id = items[i].job->op_id;
            reqs[i].request_hash = items[i].job->request_hash;
            reqs[i].event_key = items[i].job->event_key;
            reqs[i].source = items[i].source;
        }
        char e[DD_ERRSTR_SIZE] = "";
        dd_err_t err = store_claim_batch(pl->store, reqs, k, dd_now_ms(), e, sizeof(e));
        for (size_t i = 0; i < k; i++)
            claim_apply(pl, items[i].job, items[i].pm, items[i].source,
                        err ? err : reqs[i].err,
                        err ? e : "store_claim_batch: per-request error",
                        reqs[i].result, reqs[i].op);
    }
    free(items);
    free(reqs);
}

/* A fetch finished: result + op state + outbox in one batch, then produce. */
/* Completions of one loop iteration, committed together (group commit,
 * DESIGN.md section 4): one WriteBatch and one WAL sync for all of them,
 * single-flight waiters included. */
#define FETCHED_BATCH 256

/* The store's record of fetch attempt \p fa (number \p number of the op). */
static void attempt_record(struct store_attempt *sa,
                           const struct fetch_attempt *fa, uint32_t number,
                           uint64_t generation)
{
    memset(sa, 0, sizeof(*sa));
    sa->number = number;
    sa->generation = generation;
    sa->started_at_ms = fa->started_at_ms;
    sa->ended_at_ms = fa->ended_at_ms;
    sa->status = (int32_t)fa->status;
    sa->bytes = fa->bytes;
    snprintf(sa->session, sizeof(sa->session), "%s", fa->session);
    snprintf(sa->exit_addr, sizeof(sa->exit_addr), "%s", fa->exit_addr);
    snprintf(sa->category, sizeof(sa->category), "%s", fa->category);
    snprintf(sa->error, sizeof(sa->error), "%s", fa->error);
}

/*
 * Retry hook (fetch_retry_cb), on the engine thread: the op's record follows
 * its retries (DESIGN.md section 4): running -> retryable with the failed
 * attempt and the not-before time, retryable -> running when the attempt
 * starts.  The retry itself stays in the engine's timers; the record is what
 * `dedupd inspect` shows and what a reclaim after a crash waits out.  Reads
 * only fields of \p req_opaque fixed before fetch_submit; the store is
 * thread-safe (per-op stripes).  A failure is logged: the completion's
 * fencing still decides.
 */
static void on_fetch_retry(void *arg, void *req_opaque,
                           enum fetch_retry_event ev, int64_t not_before_ms,
                           uint32_t attempts, const struct fetch_attempt *fa)
{
    struct pipeline *pl = arg;
    const struct opctx *o = req_opaque;
    char e[DD_ERRSTR_SIZE];
    dd_err_t err;
    if (ev == FETCH_RETRY_WAIT) {
        struct store_attempt sa;
        attempt_record(&sa, fa, o->base_attempts + attempts, o->generation);
        err = store_op_retry(pl->store, o->op_id, o->generation, not_before_ms,
                             o->base_attempts + attempts, fa->category, &sa,
                             dd_now_ms(), e, sizeof(e));
    } else {
        err = store_op_resume(pl->store, o->op_id, o->generation,
                              not_before_ms, e, sizeof(e));
    }
    if (err) {
        struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
        log_ctx_msg(LOG_WARNING, "store", &lc, "%s", e);
    }
}

struct fetched {
    struct fetch_result *r;
    struct opctx *o;
    bool shared;          /* a waiter served by its leader's transfer */
    char *value;
    size_t value_len;
    struct store_attempt *attempts;
};

/* Encode the result of \p o from \p r and its attempt records into \p f
 * and \p req.  A shared result records no attempts of its own (they belong
 * to the leader's op). */
static void fetched_prepare(struct pipeline *pl, struct opctx *o,
                            struct fetch_result *r, bool shared,
                            struct fetched *f, struct store_complete_req *req)
{
    const char *outcome;
    struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
    memset(f, 0, sizeof(*f));
    f->r = r;
    f->o = o;
    f->shared = shared;
    if (result_encode(o->job, r, o->generation,
                      (size_t)pl->cfg->limits_max_result_bytes, &f->value,
                      &f->value_len, &outcome))
        abort();
    bool failed = strcmp(outcome, "fetched") && strcmp(outcome, "not_modified");
    o->failed = failed;
    metrics_observe(METRICS_JOB_ATTEMPTS, shared ? 0.0 : (double)r->attempts);
    const char *category = failed ? (r->category ? r->category : "too_large")
                                  : NULL;
    if (failed) {
        pl->st->failed++;
        log_ctx_msg(LOG_NOTICE, "fetch", &lc, "op failed: %s (%s) after %u attempts",
                    category,
                    r->category ? (r->error ? r->error : "")
                                : "result above limits.max_result_bytes",
                    r->attempts);
    }
    size_t n_log = shared ? 0 : r->n_attempt_log;
    if (n_log) {
        f->attempts = calloc(n_log, sizeof(*f->attempts));
        if (!f->attempts)
            abort();
        for (size_t i = 0; i < n_log; i++)
            attempt_record(&f->attempts[i], &r->attempt_log[i],
                           o->base_attempts + (uint32_t)(i + 1), o->generation);
    }
    *req = (struct store_complete_req){
        .op_id = o->op_id,
        .generation = o->generation,
        .state = failed ? STORE_OP_FAILED : STORE_OP_COMPLETE,
        .category = category,
        .attempts = o->base_attempts + (shared ? 0 : r->attempts),
        .value = f->value,
        .value_len = f->value_len,
        .attempt_log = f->attempts,
        .n_attempt_log = n_log,
    };
    /* A fresh 2xx of a conditional-refetch candidate keeps (or, without
     * ETag and Last-Modified, clears) the resource's validators and body, in
     * the same batch.  A waiter's copy is the leader's: written once. */
    if (!shared && !failed && r->status >= 200 && r->status < 300 &&
        r->status != 206 && cond_eligible(o->job)) {
        req->resource_key = o->job->resource_key;
        req->etag = r->etag;
        req->last_modified = r->last_modified;
        req->content_type = r->content_type;
        req->final_url = r->final_url;
        req->http_status = (int32_t)r->status;
        req->body = r->body;
        req->body_len = r->body_len;
    }
}

/* A 304 answered the validators \p o sent: put the stored body (and its
 * headers) into \p r.  @returns false when the 304 is not trusted (its ETag
 * does not weakly match the one sent) or the stored body is gone: the op is
 * then fetched again without validators. */
static bool cond_apply(struct pipeline *pl, struct opctx *o,
                       struct fetch_result *r)
{
    struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
    const struct store_validator *v = o->cond;
    if (r->etag && v->etag[0] && !etag_weak_match(r->etag, v->etag)) {
        log_ctx_msg(LOG_NOTICE, "fetch", &lc,
                    "304 with ETag %.80s, sent %.80s: not trusted, fetching "
                    "again without validators", r->etag, v->etag);
        return false;
    }
    void *body = NULL;
    size_t len = 0;
    bool found = false;
    char e[DD_ERRSTR_SIZE] = "";
    if (store_body_get(pl->store, v->body_sha256, dd_now_ms(), &body, &len,
                       &found, e, sizeof(e)) || !found) {
        log_ctx_msg(LOG_NOTICE, "fetch", &lc,
                    "304 but the stored body is gone%s%s: fetching again "
                    "without validators", e[0] ? ": " : "", e);
        free(body);
        return false;
    }
    free(r->body);
    r->body = body;
    r->body_len = len;
    if (!r->content_type && v->content_type[0])
        r->content_type = strdup(v->content_type);
    if (!r->etag && v->etag[0])
        r->etag = strdup(v->etag);
    if (!r->last_modified && v->last_modified[0])
        r->last_modified = strdup(v->last_modified);
    pl->st->not_modified++;
    return true;
}

/* Commit \p n finished fetches (and the single-flight waiters their answers
 * serve) in one store batch and produce their results. */
static void handle_fetched(struct pipeline *pl, struct fetch_result **rs,
                           size_t n)
{
    char e[DD_ERRSTR_SIZE];
    /* Single-flight: the leaders leave the map; their waiters take a final
     * answer as their own, or fetch for themselves after a transient one. */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = rs[i]->opaque;
        if (o->sf_leading)
            sf_remove(pl, o);
        if (o->cond && rs[i]->ok && rs[i]->status == 304 &&
            !cond_apply(pl, o, rs[i])) {
            /* once more, without validators; its waiters keep waiting */
            o->no_cond = true;
            free(o->cond);
            o->cond = NULL;
            /* the next fetch's attempts are numbered after this one's */
            o->base_attempts += (uint32_t)rs[i]->n_attempt_log;
            fetch_result_destroy(rs[i]);
            start_fetch(pl, o);
            continue;
        }
        rs[total++] = rs[i];
    }
    n = total;
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = rs[i]->opaque;
        if (!o->sf_followers)
            continue;
        if (sf_shareable(rs[i])) {
            for (struct opctx *w = o->sf_followers; w; w = w->sf_next)
                total++;
            continue;
        }
        struct opctx *w = o->sf_followers;
        o->sf_followers = NULL;
        while (w) {
            struct opctx *next = w->sf_next;
            w->sf_next = NULL;
            w->sf_waiting = false;
            w->sf_alone = true;
            start_fetch(pl, w);
            w = next;
        }
    }
    if (!total)
        return;
    struct fetched *f = calloc(total, sizeof(*f));
    struct store_complete_req *req = calloc(total, sizeof(*req));
    if (!f || !req)
        abort();
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = rs[i]->opaque;
        fetched_prepare(pl, o, rs[i], false, &f[k], &req[k]);
        k++;
        struct opctx *w = o->sf_followers;
        o->sf_followers = NULL;
        while (w) {
            struct opctx *next = w->sf_next;
            w->sf_next = NULL;
            w->sf_waiting = false;
            fetched_prepare(pl, w, rs[i], true, &f[k], &req[k]);
            k++;
            w = next;
        }
    }
    /* a failed write (DD_ERR_IO, NOMEM) also lands in every req[i].err */
    if (store_complete_batch(pl->store, req, total, dd_now_ms(), e, sizeof(e)))
        log_msg(LOG_ERR, "store", "completing %zu ops: %s", total, e);
    for (size_t i = 0; i < total; i++) {
        completed(pl, f[i].o, &req[i], f[i].value, f[i].value_len);
        free(f[i].value);
        free(f[i].attempts);
    }
    for (size_t i = 0; i < total; i++)
        if (!f[i].shared)
            fetch_result_destroy(f[i].r);
    free(f);
    free(req);
}

/* Take every finished fetch (waiting at most \p timeout_ms for the first)
 * and commit them in batches.  @returns how many were taken. */
static size_t drain_fetched(struct pipeline *pl, int timeout_ms)
{
    struct fetch_result *rs[FETCHED_BATCH];
    size_t total = 0;
    for (;;) {
        size_t n = 0;
        struct fetch_result *r;
        while (n < FETCHED_BATCH &&
               (r = fetch_take(pl->fetch, total == 0 && n == 0 ? timeout_ms
                                                                : 0)))
            rs[n++] = r;
        if (!n)
            return total;
        handle_fetched(pl, rs, n);
        total += n;
        if (n < FETCHED_BATCH)
            return total;
    }
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
    int64_t now = dd_now_ms();
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
            t->dirty = false;
            t->head = t->n = 0;
        }
        log_msg(LOG_INFO, "consumer", "assigned %d partitions", parts->cnt);
        pl->assigned_once = true;
        rd_kafka_assign(rk, parts);
        atomic_store(&pl->ready, true);
        metrics_gauge_set(METRICS_READY, 1);
    } else {
        /* Commit what is stored; work still in flight for these partitions
         * finishes (its result is published) but its offsets are no longer
         * ours to store: the next owner sees a duplicate. */
        flush_offsets(pl);
        rd_kafka_commit(rk, NULL, 0);
        for (int i = 0; i < parts->cnt; i++) {
            struct ptrack *t = track_get(pl, parts->elems[i].partition);
            t->assigned = false;
            t->epoch++;
        }
        log_msg(LOG_INFO, "consumer", "revoked %d partitions", parts->cnt);
        rd_kafka_assign(rk, NULL);
    }
    pl->last_activity_ms = dd_now_ms();
}

/* ---- HTTP callbacks and gauges (admin and api listener threads) ---------- */

static bool http_ready(void *opaque, char *reason, size_t size)
{
    struct pipeline *pl = opaque;
    if (atomic_load(&pl->ready))
        return true;
    snprintf(reason, size, "not consuming: waiting for partitions of %s",
             pl->cfg->topic_jobs);
    return false;
}

static int http_op(void *opaque, const char *op_id, char **response_json)
{
    struct pipeline *pl = opaque;
    struct store_op op;
    bool found = false;
    char e[DD_ERRSTR_SIZE];
    json_t *o = json_object();
    int status = 200;
    if (store_op_get(pl->store, op_id, dd_now_ms(), &op, &found, e, sizeof(e))) {
        json_object_set_new(o, "error", json_string("store read failed"));
        log_msg(LOG_ERR, "http", "GET /v1/ops: %s", e);
        status = 500;
    } else if (!found) {
        json_object_set_new(o, "error", json_string("op not found"));
        json_object_set_new(o, "hint",
                            json_string("not in this instance's store: it was "
                                        "never claimed here (another instance "
                                        "may own its partition), or it expired"));
        status = 404;
    } else {
        json_object_set_new(o, "op_id", json_string(op_id));
        json_object_set_new(o, "state", json_string(store_op_state2str(op.state)));
        json_object_set_new(o, "request_hash", json_string(op.request_hash));
        json_object_set_new(o, "event_key", json_string(op.event_key));
        json_object_set_new(o, "generation", json_integer((json_int_t)op.generation));
        json_object_set_new(o, "attempts", json_integer(op.attempts));
        json_object_set_new(o, "outbox",
                            json_string(op.outbox_state == STORE_OUTBOX_SENT ? "sent"
                                        : op.outbox_state == STORE_OUTBOX_PENDING
                                            ? "pending"
                                            : "none"));
        if (op.category[0])
            json_object_set_new(o, "category", json_string(op.category));
        if (op.state == STORE_OP_RETRYABLE)
            json_object_set_new(o, "not_before_ms", json_integer(op.not_before_ms));
        json_object_set_new(o, "expires_at_ms", json_integer(op.expires_at_ms));
    }
    *response_json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return status;
}

/* ---- POST /v1/jobs (api listener thread) ------------------------------------
 * Idempotency-Key semantics of the IETF httpapi draft (DESIGN.md section 7):
 * the key is the job's job_key (scope api.scope); the stored response is the
 * submit receipt; a replay of it for the same payload (request_hash), 409 while
 * the first submit is unacknowledged, 422 for another payload, 400 for a
 * malformed key or job.  Produced through the api's own producer, whose delivery
 * reports this thread serves while it waits. */

struct api_delivery {
    bool done;
    dd_err_t err;
    int32_t partition;
    int64_t offset;
    char errtext[128];
};

static void api_dr(void *opaque, dd_err_t err, const char *errtext,
                   int32_t partition, int64_t offset)
{
    struct api_delivery *d = opaque;
    d->done = true;
    d->err = err;
    d->partition = partition;
    d->offset = offset;
    snprintf(d->errtext, sizeof(d->errtext), "%s", errtext ? errtext : "");
}

static char *api_error(const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static bool api_key_valid(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 255)
        return false;
    for (; *k; k++)
        if ((unsigned char)*k < 0x20 || (unsigned char)*k > 0x7e || *k == '"' ||
            *k == '\\')
            return false;
    return true;
}

static int http_submit(void *opaque, const char *idempotency_key, const void *body,
                       size_t len, char **response_json, char **hname,
                       char **hvalue)
{
    struct pipeline *pl = opaque;
    char e[DD_ERRSTR_SIZE];
    char *keyed = NULL;
    size_t keyed_len = len;
    struct job *job = NULL;
    int status = 500;
    bool began = false;
    if (idempotency_key && !api_key_valid(idempotency_key)) {
        *response_json = api_error("malformed Idempotency-Key: 1..255 printable "
                                   "ASCII characters, no quote or backslash");
        return 400;
    }
    if (idempotency_key) {
        if (job_with_key(body, len, idempotency_key, pl->cfg->api_scope, &keyed,
                         &keyed_len, e, sizeof(e))) {
            *response_json = api_error(e);
            return 400;
        }
    }
    const void *payload = keyed ? keyed : body;
    if (job_parse(&pl->jconf, payload, keyed_len, &job, e, sizeof(e))) {
        *response_json = api_error(e);
        status = 400;
        goto out;
    }
    if (idempotency_key) {
        enum store_receipt_state st;
        char existing[STORE_HASH_LEN + 1];
        char *receipt = NULL;
        if (store_receipt_begin(pl->store, job->op_id, job->request_hash,
                                dd_now_ms(), pl->cfg->api_receipt_ttl_ms, &st,
                                existing, &receipt, e, sizeof(e))) {
            log_msg(LOG_ERR, "http", "POST /v1/jobs: %s", e);
            *response_json = api_error("receipt store unavailable");
            status = 503;
            goto out;
        }
        if (st != STORE_RECEIPT_NEW && strcmp(existing, job->request_hash)) {
            free(receipt);
            *response_json = api_error("Idempotency-Key reused with a different "
                                       "payload");
            status = 422;
            goto out;
        }
        if (st == STORE_RECEIPT_PENDING) {
            *response_json = api_error("a request with this Idempotency-Key is "
                                       "in progress");
            status = 409;
            goto out;
        }
        if (st == STORE_RECEIPT_DONE) {
            *response_json = receipt;
            *hname = strdup("Idempotent-Replayed");
            *hvalue = strdup("true");
            status = 202;
            goto out;
        }
        began = true;
    }
    if (producer_fatal(pl->api_prod)) {
        /* As producer_reset for results: this thread is its only user, and
         * every request flushes, so nothing is held but a failed send. */
        if (producer_replace(&pl->api_prod, pl->cfg, api_dr, e, sizeof(e)) ==
            DD_OK) {
            metrics_add(METRICS_PRODUCER_RESETS, 1);
            log_msg(LOG_ERR, "http", "fatal producer error: the job API's "
                    "producer was recreated");
        }
    }
    struct api_delivery d = {0};
    struct producer_header h[2] = {{"dedupd-op-id", job->op_id},
                                   {"dedupd-request-hash", job->request_hash}};
    if (producer_send(pl->api_prod, pl->cfg->topic_jobs, job->op_id,
                      strlen(job->op_id), payload, keyed_len, h, 2, &d, e,
                      sizeof(e)) ||
        producer_flush(pl->api_prod, 15000) || !d.done || d.err) {
        /* nothing may outlive this request: its report points at d */
        producer_purge(pl->api_prod);
        if (d.done || !e[0])
            snprintf(e, sizeof(e), "%s", d.done ? d.errtext : "not acknowledged");
        log_msg(LOG_WARNING, "http", "POST /v1/jobs: produce: %s", e);
        if (began && store_receipt_abort(pl->store, job->op_id, e, sizeof(e)))
            log_msg(LOG_ERR, "http", "%s", e);
        *response_json = api_error("the job could not be queued; retry");
        status = 503;
        goto out;
    }
    json_t *r = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I}", "op_id", job->op_id,
                          "event_key", job->event_key, "request_hash",
                          job->request_hash, "topic", pl->cfg->topic_jobs,
                          "partition", (int)d.partition, "offset",
                          (json_int_t)d.offset);
    *response_json = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    if (began && store_receipt_done(pl->store, job->op_id, job->request_hash,
                                    *response_json, dd_now_ms(),
                                    pl->cfg->api_receipt_ttl_ms, e, sizeof(e)))
        log_msg(LOG_ERR, "http", "POST /v1/jobs: receipt: %s", e);
    status = 202;
out:
    job_destroy(job);
    free(keyed);
    return status;
}

/* Gauges, once a second: ops in flight, outbox, index, consumer lag. */
static void update_gauges(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
    if (now < pl->next_gauges_ms)
        return;
    pl->next_gauges_ms = now + 1000;
    metrics_gauge_set(METRICS_OPS_INFLIGHT, (int64_t)pl->n_ops);
    metrics_gauge_set(METRICS_OUTBOX_PENDING,
                      (int64_t)store_outbox_pending(pl->store));
    struct store_index_stats is;
    store_index_stats_get(pl->store, &is);
    metrics_gauge_set(METRICS_INDEX_ENTRIES, (int64_t)is.entries);
    rd_kafka_topic_partition_list_t *a = NULL;
    if (rd_kafka_assignment(pl->rk, &a) || !a)
        return;
    rd_kafka_position(pl->rk, a);
    int64_t lag = 0;
    for (int i = 0; i < a->cnt; i++) {
        int64_t lo = 0, hi = 0;
        if (rd_kafka_get_watermark_offsets(pl->rk, a->elems[i].topic,
                                           a->elems[i].partition, &lo, &hi))
            continue;
        int64_t pos = a->elems[i].offset >= 0 ? a->elems[i].offset : lo;
        if (hi > pos)
            lag += hi - pos;
    }
    rd_kafka_topic_partition_list_destroy(a);
    metrics_gauge_set(METRICS_CONSUMER_LAG_MESSAGES, lag);
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

/*
 * A fatal producer error (librdkafka's idempotent producer before 2.3.0 can
 * hit one after a broker disconnect, librdkafka issue 4438; DESIGN.md section
 * 6): the producer accepts nothing more.  Purge it (every message it holds
 * comes back through dr_cb onto the retry list), destroy it and send them
 * again through a new one.  Results keep their event_key, so a copy that had
 * reached the topic before the error is dropped downstream; nothing is lost,
 * since offsets move only on acknowledgements.
 *
 * Failpoint for the test of this path (tests/integration/it_producer_fatal.sh):
 * DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER=N raises one fatal error
 * (rd_kafka_test_fatal_error) once N results were acknowledged, at a moment
 * when messages are in flight.
 */
static void producer_reset(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
    if (now < pl->reset_retry_at_ms)
        return;
    pl->reset_retry_at_ms = now + 1000;
    size_t held = pl->pending_out;
    char e[DD_ERRSTR_SIZE];
    /* every report is served before the old producer goes, or its messages
     * (and their ops' offsets) would be lost track of */
    pl->purging = true;
    dd_err_t err = producer_replace(&pl->prod, pl->cfg, dr_cb, e, sizeof(e));
    pl->purging = false;
    if (err) {
        log_msg(LOG_ERR, "producer", "fatal producer error: recreating the "
                "producer: %s; trying again in 1 s", e);
        return;
    }
    metrics_add(METRICS_PRODUCER_RESETS, 1);
    log_msg(LOG_ERR, "producer",
            "fatal producer error: producer recreated; %zu messages it held "
            "(%zu still unacknowledged) are sent again",
            held, pl->pending_out);
}

static void producer_check(struct pipeline *pl)
{
    if (pl->fail_fatal_after >= 0 && pl->pending_out > 0 &&
        pl->st->results >= (uint64_t)pl->fail_fatal_after) {
        pl->fail_fatal_after = -1;
        if (producer_test_fatal(pl->prod, "failpoint "
                                "DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER"))
            log_msg(LOG_WARNING, "producer", "failpoint: no fatal error raised");
    }
    if (producer_fatal(pl->prod))
        producer_reset(pl);
}

/* Finish the acknowledged ops whose completion the group commit has made
 * durable since: their messages' offsets move on. */
static void release_durable(struct pipeline *pl)
{
    if (!pl->await)
        return;
    uint64_t d = store_durable(pl->store);
    struct opctx **pp = &pl->await;
    while (*pp) {
        struct opctx *o = *pp;
        if (o->ticket <= d) {
            *pp = o->await_next;
            op_finish(pl, o);
        } else
            pp = &o->await_next;
    }
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
    pl->sfmap = calloc(SFMAP_BUCKETS, sizeof(*pl->sfmap));
    if (!pl->opmap || !pl->sfmap)
        abort(); /* out of memory at start-up */
    g_pl = pl;

    char run_id[40];
    snprintf(run_id, sizeof(run_id), "%llx%04x", (unsigned long long)dd_now_ms(),
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
        /* the pipeline never waits for an fsync: results go out at once,
         * offsets wait for store_durable() */
        .group_commit = true,
        .index_max_bytes = (size_t)cfg->store_index_max_bytes,
        .validators_ttl_ms = cfg->store_validators_ttl_ms,
        .max_body_bytes = (size_t)cfg->store_max_body_bytes,
    };
    err = store_open(&sc, &pl->store, errstr, errstr_size);
    if (err)
        goto out;
    err = producer_new(cfg, dr_cb, &pl->prod, errstr, errstr_size);
    {
        const char *fp = getenv("DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER");
        pl->fail_fatal_after = fp && *fp ? atol(fp) : -1;
    }
    if (err)
        goto out;
    if (cfg->api_listen[0]) {
        err = producer_new(cfg, api_dr, &pl->api_prod, errstr, errstr_size);
        /* Failpoint of the job API producer's reset (it_admin): a fatal
         * error before the first POST /v1/jobs. */
        const char *fp = getenv("DEDUPD_FAILPOINT_API_PRODUCER_FATAL");
        if (!err && fp && !strcmp(fp, "1") &&
            producer_test_fatal(pl->api_prod, "failpoint "
                                "DEDUPD_FAILPOINT_API_PRODUCER_FATAL"))
            log_msg(LOG_WARNING, "http", "failpoint: no fatal error raised");
        if (err)
            goto out;
    }
    {
        struct http_conf hc = {
            .admin_listen = cfg->admin_listen,
            .api_listen = cfg->api_listen,
            .api_token = cfg->api_token[0] ? cfg->api_token : NULL,
            .max_body_bytes = (size_t)cfg->api_max_body_bytes,
        };
        struct http_callbacks cb = {.ready = http_ready,
                                    .submit = http_submit,
                                    .op = http_op,
                                    .opaque = pl};
        err = http_new(&hc, &cb, &pl->http, errstr, errstr_size);
        if (err)
            goto out;
        log_msg(LOG_INFO, "http", "admin listener on port %u (/healthz /readyz "
                "/metrics), api listener on port %u",
                (unsigned)http_admin_port(pl->http), (unsigned)http_api_port(pl->http));
        metrics_gauge_set(METRICS_START_TIME_SECONDS, dd_now_ms() / 1000);
    }
    if (!opts->shadow) {
        err = fetch_new(cfg, &pl->fetch, errstr, errstr_size);
        if (err)
            goto out;
        fetch_set_retry_hook(pl->fetch, on_fetch_retry, pl);
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

    pl->last_activity_ms = dd_now_ms();
    int64_t stop_at = 0;
    while (1) {
        bool stopping = !*opts->run;
        if (stopping && !stop_at) {
            atomic_store(&pl->ready, false);
            metrics_gauge_set(METRICS_READY, 0);
            stop_at = dd_now_ms() + cfg->shutdown_grace_ms;
            log_msg(LOG_INFO, "consumer",
                    "stopping: finishing %zu ops in flight (grace %lld ms)",
                    pl->n_ops, (long long)cfg->shutdown_grace_ms);
        }
        if (stopping && (idle(pl) || dd_now_ms() >= stop_at ||
                         (opts->hurry && *opts->hurry)))
            break;
        /* Completions first: they free capacity. */
        if (pl->fetch)
            drain_fetched(pl, 0);
        producer_poll(pl->prod, 0);
        producer_check(pl);
        if (store_sync_failed(pl->store)) {
            /* Nothing written from here on can be made durable: stop, and
             * let the next run take over what was not acknowledged. */
            dd_errstr_set(errstr, errstr_size,
                          "the store's WAL fsync failed (see the log): "
                          "stopping; unacknowledged jobs are redelivered");
            err = DD_ERR_IO;
            break;
        }
        retry_due(pl);
        recheck_blocked(pl);
        renew_leases(pl);
        update_gauges(pl);
        bool full = pl->n_ops >= (size_t)cfg->fetch_max_inflight;
        if (!stopping && !full) {
            int timeout = pl->n_ops || pl->pending_out ? 2 : 100;
            rd_kafka_message_t *batch[POLL_BATCH];
            size_t nb = 0;
            /* Room for new ops bounds the batch: every message may be NEW. */
            size_t room = (size_t)cfg->fetch_max_inflight - pl->n_ops;
            for (int i = 0; i < POLL_BATCH && nb < room; i++) {
                rd_kafka_message_t *rkm = rd_kafka_consumer_poll(pl->rk, i ? 0 : timeout);
                if (!rkm)
                    break;
                if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                    track_get(pl, rkm->partition)->eof = true;
                    rd_kafka_message_destroy(rkm);
                } else if (rkm->err) {
                    log_msg(LOG_WARNING, "consumer", "consume: %s",
                            rd_kafka_message_errstr(rkm));
                    rd_kafka_message_destroy(rkm);
                } else {
                    /* In poll order: an EOF polled after this message sets
                     * the flag again. */
                    track_get(pl, rkm->partition)->eof = false;
                    batch[nb++] = rkm;
                }
            }
            if (nb)
                handle_batch(pl, batch, nb);
            for (size_t i = 0; i < nb; i++)
                rd_kafka_message_destroy(batch[i]);
        } else if (pl->fetch)
            drain_fetched(pl, 5);
        else
            producer_poll(pl->prod, 5);
        shadow_flush(pl);
        release_durable(pl);
        flush_offsets(pl);
        if (opts->exit_when_idle_ms > 0 && !stopping && idle(pl) &&
            pl->assigned_once && all_eof(pl) &&
            dd_now_ms() - pl->last_activity_ms >= opts->exit_when_idle_ms) {
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
    /* The results acknowledged last wait for their fsync: make it now, so
     * their offsets are committed with the others. */
    if (!err) {
        char se[DD_ERRSTR_SIZE];
        if (store_sync_now(pl->store, se, sizeof(se)))
            log_msg(LOG_ERR, "store", "%s", se);
        release_durable(pl);
    }
    flush_offsets(pl);
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
    free(pl->sfmap);
    free(pl->shadow_pending);
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
    http_destroy(pl->http);
    if (pl->api_prod && producer_flush(pl->api_prod, 5000))
        log_msg(LOG_WARNING, "http", "api producer: messages unacknowledged at exit");
    producer_destroy(pl->api_prod);
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
            "\"replayed_outbox\":%llu,\"fast_path\":%llu,\"fetch_attempts\":%llu,"
            "\"rotations\":%llu,\"throttled\":%llu,\"bytes\":%llu,"
            "\"single_flight\":%llu,\"not_modified\":%llu,"
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
            (unsigned long long)st->fast_path,
            (unsigned long long)st->fetch_attempts,
            (unsigned long long)st->rotations,
            (unsigned long long)st->throttled, (unsigned long long)st->bytes,
            (unsigned long long)st->single_flight,
            (unsigned long long)st->not_modified, secs, secs > 0 ? (double)st->consumed / secs : 0.0);
}
