/* The pipeline thread.  See consumer.h for the flow and its invariants. */
#include "dd.h"
#include "consumer.h"

#include <assert.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "changelog.h"
#include "config.h"
#include "fetch.h"
#include "job.h"
#include "key.h"
#include "log.h"
#include "metrics.h"
#include "partitions.h"
#include "producer.h"
#include "result.h"
#include "store.h"

#include "consumer_internal.h"

#define SFMAP_BUCKETS 4096
#define POLL_BATCH 1024 /* messages claimed together (one store batch) */
/* Shadow ops fetch nothing and hold no body: from their claim to the
 * acknowledgement of their result's changelog record (two broker round
 * trips) they only wait.  fetch.max_inflight, sized for fetches, would idle
 * the loop there (issue 13: a quarter of a run at the default 256); this
 * bounds them instead (a few KB each: job, result, record). */
#define SHADOW_MAX_INFLIGHT 8192
#define PAUSE_AFTER_MS 1000 /* at capacity this long: pause and poll on */
#define OFFSETS_CHUNK 256 /* partitions per rd_kafka_offsets_store call */


/* ---- message tracking (partitions.h) and offsets ------------------------- */

static struct pmsg *msg_track(struct pipeline *pl, int32_t partition,
                              int64_t offset)
{
    struct pmsg *pm = dd_xcalloc(1, sizeof(*pm), "message");
    partitions_track(pl->parts, partition, offset, &pm->m);
    return pm;
}

/* The work of \p pm is durable and acknowledged: its partition's commit
 * point may move (partitions_done); frees \p pm. */
void consumer_msg_done(struct pipeline *pl, struct pmsg *pm)
{
    partitions_done(pl->parts, &pm->m);
    free(pm);
    pl->last_activity_ms = dd_now_ms();
}

/* Hand \p n commit points to librdkafka in one offsets_store call. */
void consumer_offsets_store(struct pipeline *pl,
                          const struct partitions_offset *o, size_t n)
{
    if (pl->eos) { /* they go with the next transaction */
        consumer_txn_offsets(pl, o, n);
        return;
    }
    rd_kafka_topic_partition_list_t *l =
        rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, pl->cfg->topic_jobs,
                                          o[i].partition)
            ->offset = o[i].offset;
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

/* Store every moved commit point (once per loop iteration, not per message:
 * a replay storm moves thousands of offsets per batch). */
void consumer_flush_offsets(struct pipeline *pl)
{
    struct partitions_offset o[OFFSETS_CHUNK];
    while (partitions_commit_pending(pl->parts)) {
        size_t n = partitions_commit_take(pl->parts, o, OFFSETS_CHUNK);
        if (n)
            consumer_offsets_store(pl, o, n);
    }
}

/* ---- op map ------------------------------------------------------------- */

static size_t op_hash(const char *s)
{
    return (size_t)(dd_fnv1a64_str(s) & (CONSUMER_OPMAP_BUCKETS - 1));
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
    /* the op_id in the same allocation, after the struct */
    size_t idlen = strlen(job->op_id);
    struct opctx *o = dd_xcalloc(1, sizeof(*o) + idlen + 1, "op context");
    o->op_id = (char *)(o + 1);
    memcpy(o->op_id, job->op_id, idlen + 1);
    o->job = job;
    o->generation = generation;
    o->msgs = pm;
    o->partition = pm->m.partition;
    size_t b = op_hash(o->op_id);
    o->hnext = pl->opmap[b];
    pl->opmap[b] = o;
    pl->n_ops++;
    return o;
}

void consumer_op_unlink(struct pipeline *pl, struct opctx *o)
{
    struct opctx **pp = &pl->opmap[op_hash(o->op_id)];
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = o->hnext;
    pl->n_ops--;
}

void consumer_released_free(struct pipeline *pl, struct opctx *o)
{
    struct opctx **pp = &pl->released;
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = o->hnext;
    consumer_op_free(o);
}

void consumer_op_free(struct opctx *o)
{
    job_destroy(o->job);
    free(o->cond);
    free(o->clog);
    free(o); /* and its op_id (op_add) */
}

/* Remove \p o from the map, complete its messages and free it. */
void consumer_op_finish(struct pipeline *pl, struct opctx *o)
{
    consumer_op_unlink(pl, o);
    struct pmsg *m = o->msgs;
    while (m) {
        struct pmsg *n = m->next;
        consumer_msg_done(pl, m);
        m = n;
    }
    consumer_op_free(o);
}

/* ---- the claim path ------------------------------------------------------- */

static void source_of(const char *topic, int32_t partition, int64_t offset,
                      char *buf, size_t size)
{
    /* snprintf(buf, size, "%s/%d/%lld", ...) without the format machinery
     * (once for every parsed job) */
    char num[2 * DD_FMT_INT_MAX + 2];
    size_t n = 0;
    num[n++] = '/';
    n += dd_fmt_i64(num + n, partition);
    num[n++] = '/';
    dd_fmt_i64(num + n, offset);
    size_t t = dd_strlcpy(buf, topic, size);
    if (t + 1 < size)
        dd_strlcpy(buf + t, num, size - t);
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
    struct outmsg *m =
        consumer_out_new(pl, OUT_DLQ, pl->cfg->topic_dlq, key, key_len,
                         rkm->payload ? rkm->payload : "", rkm->len);
    consumer_out_header(m, "dedupd-error", reason);
    consumer_out_header(m, "dedupd-source", source);
    m->msg = pm;
    struct log_ctx lc = {pl->cfg->topic_jobs, rkm->partition, rkm->offset,
                         NULL};
    log_ctx_msg(LOG_NOTICE, "consumer", &lc, "job to the DLQ: %s", reason);
    pl->st->invalid++;
    metrics_job(METRICS_JOB_INVALID);
    consumer_out_send(pl, m);
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

/* Single-flight (DESIGN.md section 5): does \p o wait for a leader already
 * fetching its resource?  If so it is queued behind that leader; if no one
 * fetches it yet, \p o becomes the leader.  @returns true when it waits. */
static bool sf_join(struct pipeline *pl, struct opctx *o)
{
    const struct job *j = o->job;
    if (!pl->sfmap || o->sf_alone || !sf_eligible(j))
        return false;
    struct opctx *lead = pl->sfmap[sf_hash(j->resource_key)];
    while (lead && strcmp(lead->job->resource_key, j->resource_key))
        lead = lead->sf_hnext;
    /* The wait is bounded: only behind a leader whose fetch ends (at its
     * deadline at the latest) before this op's own deadline. */
    if (lead && lead->deadline_ms <= o->deadline_ms) {
        o->sf_waiting = true;
        o->sf_next = lead->sf_followers;
        lead->sf_followers = o;
        pl->st->single_flight++;
        metrics_add(METRICS_SINGLE_FLIGHT, 1);
        return true;
    }
    if (!lead) {
        size_t b = sf_hash(j->resource_key);
        o->sf_hnext = pl->sfmap[b];
        pl->sfmap[b] = o;
        o->sf_leading = true;
    }
    return false;
}

/* The If-Modified-Since a Last-Modified may become (DESIGN.md section 5):
 * only an HTTP-date (RFC 9110 section 5.6.7, any of its three forms), sent
 * as IMF-fixdate; anything else (ISO 8601, a localised date) gives "" and
 * that condition is not sent.  \p out: RETRY_HTTP_DATE_SIZE bytes. */
static void cond_ims(const char *last_modified, char *out)
{
    int64_t t;
    out[0] = '\0';
    if (!last_modified || !retry_http_date_parse(last_modified, dd_now_ms(), &t) ||
        !retry_http_date_format(t, out, RETRY_HTTP_DATE_SIZE))
        out[0] = '\0';
}

/* Conditional refetch: load the stored validators of \p o's resource, once
 * (a refetch without validators keeps none).  Only validators that make a
 * condition count: an ETag, or a Last-Modified that is an HTTP-date. */
static void cond_load(struct pipeline *pl, struct opctx *o)
{
    const struct job *j = o->job;
    if (o->no_cond || o->cond || !cond_eligible(j))
        return;
    struct store_validator v;
    bool found = false;
    char e[DD_ERRSTR_SIZE];
    if (store_validator_get(pl->store, j->resource_key, dd_now_ms(), &v,
                            &found, e, sizeof(e))) {
        log_msg(LOG_WARNING, "store", "validators: %s", e);
        return;
    }
    if (!found)
        return;
    cond_ims(v.last_modified, o->ims);
    if (v.last_modified[0] && !o->ims[0])
        log_msg(LOG_DEBUG, "fetch", "Last-Modified '%.80s' is not an "
                "HTTP-date: no If-Modified-Since", v.last_modified);
    if (v.etag[0] || o->ims[0]) {
        o->cond = dd_xmalloc(sizeof(*o->cond), "validators");
        *o->cond = v;
    }
}

/* The request headers of \p o (borrowed from its job and validators), plus
 * If-None-Match / If-Modified-Since of a conditional refetch.  *n: count;
 * free() the array. */
static struct fetch_header *fetch_headers(const struct opctx *o, size_t *n)
{
    const struct job *j = o->job;
    struct fetch_header *h =
        dd_xcalloc(j->req.n_headers + 3, sizeof(*h), "fetch headers");
    size_t nh = j->req.n_headers;
    for (size_t i = 0; i < nh; i++) {
        h[i].name = j->req.headers[i].name;
        h[i].value = j->req.headers[i].value;
    }
    if (o->cond && !o->no_cond) {
        if (o->cond->etag[0])
            h[nh++] = (struct fetch_header){"If-None-Match", o->cond->etag};
        if (o->ims[0])
            h[nh++] = (struct fetch_header){"If-Modified-Since", o->ims};
    }
    *n = nh;
    return h;
}

/* A workflow's steps for the engine, with their headers (borrowed from the
 * job); fetch_steps_free() them. */
static struct fetch_step *fetch_steps(const struct job *j)
{
    struct fetch_step *steps =
        dd_xcalloc(j->n_steps + 1, sizeof(*steps), "fetch steps");
    for (size_t s = 0; s < j->n_steps; s++) {
        const struct job_request *jr = &j->steps[s];
        struct fetch_header *sh =
            dd_xcalloc(jr->n_headers + 1, sizeof(*sh), "fetch steps");
        for (size_t i = 0; i < jr->n_headers; i++) {
            sh[i].name = jr->headers[i].name;
            sh[i].value = jr->headers[i].value;
        }
        steps[s] = (struct fetch_step){
            .url = jr->url, .method = jr->method, .headers = sh,
            .n_headers = jr->n_headers, .body = jr->body,
            .body_len = jr->body_len,
        };
    }
    return steps;
}

static void fetch_steps_free(struct fetch_step *steps, size_t n)
{
    for (size_t s = 0; s < n; s++)
        free((void *)steps[s].headers);
    free(steps);
}

/* Hand \p o to the fetch engine, or queue it behind the single-flight
 * leader fetching the same resource. */
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
    if (sf_join(pl, o))
        return;
    cond_load(pl, o);
    size_t nh;
    struct fetch_header *h = fetch_headers(o, &nh);
    struct fetch_step *steps = fetch_steps(j);
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
        dd_oom("fetch request"); /* its only error */
    o->fetching = true;
    o->not_before_ms = 0; /* a later fetch of this op (a refetch) resumes nothing */
    fetch_steps_free(steps, j->n_steps);
    free(h);
}

/* Hold \p pm (with \p job) and claim it again at \p recheck_at_ms. */
static void hold(struct pipeline *pl, struct job *job, struct pmsg *pm,
                 int64_t recheck_at_ms)
{
    struct blocked *b = dd_xcalloc(1, sizeof(*b), "held message");
    b->pm = pm;
    b->job = job;
    b->recheck_at_ms = recheck_at_ms;
    b->next = pl->blocked;
    pl->blocked = b;
    pl->n_blocked++;
}

/* NEW or RECLAIMED: the op is ours.  Track it and fetch it (or, in shadow
 * mode, complete it with the others of this loop: one batch, one sync). */
static void claim_won(struct pipeline *pl, struct job *job, struct pmsg *pm,
                      enum store_claim_result res, const struct store_op *op,
                      bool deferred, const struct log_ctx *lc)
{
    if (res == STORE_CLAIM_NEW) {
        pl->st->new_ops++;
        metrics_job(METRICS_JOB_NEW);
    } else {
        pl->st->reclaimed++;
        metrics_job(METRICS_JOB_RECLAIMED);
        metrics_add(METRICS_LEASE_RECOVERIES, 1);
        log_ctx_msg(LOG_NOTICE, "consumer", lc,
                    "reclaimed op at generation %llu, retry epoch %u",
                    (unsigned long long)op->generation,
                    (unsigned)op->retry_epoch);
    }
    /* a failed op claimed again publishes under its epoch's event_key
     * (DESIGN.md section 2); job->event_key is always job->retry_epoch's
     * (epoch 0's from job_parse), so only another epoch hashes again */
    if (job->retry_epoch != op->retry_epoch) {
        job->retry_epoch = op->retry_epoch;
        key_event_key_epoch(job->op_id, job->request_hash, op->retry_epoch,
                            job->event_key);
    }
    struct opctx *o = op_add(pl, job, op->generation, pm);
    o->base_attempts = op->attempts;
    o->rec = *op;
    o->rec_unwritten = deferred; /* shadow: written at its result's ack */
    /* the claim record: the next owner after a crash waits out its lease
     * (or takes it at once after a release) instead of fetching blindly.
     * A shadow op fetches nothing and its completion's record follows its
     * result's acknowledgement: it has none (issue 13: a third of the
     * records and of their delivery reports on the decision path) */
    if (!pl->opts->shadow) {
        unsigned char v[STORE_CHANGELOG_VALUE_MAX];
        size_t vlen = store_changelog_encode(op, v);
        consumer_out_changelog(pl, o->partition, o->op_id, v, vlen, NULL);
    }
    /* a reclaimed retryable op: its first attempt resumes the wait */
    if (op->state == STORE_OP_RETRYABLE)
        o->not_before_ms = op->not_before_ms > 0 ? op->not_before_ms : 1;
    if (op->state == STORE_OP_RETRYABLE && op->not_before_ms > dd_now_ms())
        log_ctx_msg(LOG_NOTICE, "consumer", lc,
                    "op was retryable: its next attempt waits %lld ms "
                    "(the stored retry time)",
                    (long long)(op->not_before_ms - dd_now_ms()));
    o->shadow = pl->opts->shadow;
    if (!pl->opts->shadow) {
        start_fetch(pl, o);
        return;
    }
    if (pl->n_shadow == pl->cap_shadow) {
        pl->cap_shadow = pl->cap_shadow ? 2 * pl->cap_shadow : 256;
        pl->shadow_pending =
            dd_xrealloc(pl->shadow_pending,
                        pl->cap_shadow * sizeof(*pl->shadow_pending),
                        "shadow ops");
    }
    pl->shadow_pending[pl->n_shadow++] = o;
}

/* CONFLICT: same op_id, another request.  Report it to the conflicts topic
 * once: not if already reported (marked after the broker's
 * acknowledgement), nor while a report of the same pair is in flight; a
 * crash between acknowledgement and mark reports it again. */
static void claim_conflict(struct pipeline *pl, struct job *job,
                           struct pmsg *pm, const char *source,
                           const struct store_op *op, const struct log_ctx *lc)
{
    char e[DD_ERRSTR_SIZE];
    pl->st->conflicts++;
    metrics_job(METRICS_JOB_CONFLICT);
    bool reported = false;
    if (store_conflict_reported(pl->store, job->op_id, job->request_hash,
                                dd_now_ms(), &reported, e, sizeof(e))) {
        log_ctx_msg(LOG_ERR, "store", lc, "%s", e);
        reported = false; /* better reported twice than never */
    }
    if (!reported &&
        consumer_out_conflict_inflight(pl, job->op_id, job->request_hash))
        reported = true;
    bool first = !reported;
    log_ctx_msg(LOG_NOTICE, "consumer", lc,
                "conflict: request_hash %.12s differs from %.12s (first "
                "seen at %s)%s",
                job->request_hash, op->request_hash, op->source,
                first ? "" : "; already reported");
    if (!first) {
        job_destroy(job);
        consumer_msg_done(pl, pm);
        return;
    }
    pl->st->conflicts_reported++;
    char *v;
    size_t vlen;
    if (result_conflict_encode(job->op_id, op->request_hash, op->source,
                               job->request_hash, source, &v, &vlen))
        dd_oom("conflict record");
    struct outmsg *m =
        consumer_out_new(pl, OUT_CONFLICT, pl->cfg->topic_conflicts,
                         job->op_id, strlen(job->op_id), v, vlen);
    free(v);
    consumer_out_header(m, "dedupd-op-id", job->op_id);
    m->msg = pm;
    m->op_id = dd_xstrdup(job->op_id, "conflict record");
    dd_strlcpy(m->hash, job->request_hash, sizeof(m->hash));
    m->next_conflict = pl->conflicts_inflight;
    pl->conflicts_inflight = m;
    job_destroy(job);
    consumer_out_send(pl, m);
}

/* DUPLICATE: of a finished op, the message is done; of an op in flight, it
 * waits for that op's result (DESIGN.md section 4, "in flight is not done"):
 * with the op when this run fetches it, else held and claimed again until
 * it finishes or its lease expires (then this worker reclaims it). */
static void claim_duplicate(struct pipeline *pl, struct job *job,
                            struct pmsg *pm, const struct store_op *op,
                            const struct log_ctx *lc)
{
    struct opctx *o = op_find(pl, job->op_id);
    if ((op->state == STORE_OP_COMPLETE || op->state == STORE_OP_FAILED) &&
        !o) {
        /* The result is durable in the store (acknowledged, or in the outbox
         * that is replayed until acknowledged).  While this run still tracks
         * the op (its completion not fsync'd yet, or its result not
         * acknowledged), the message waits with the op's own, below. */
        pl->st->duplicates++;
        metrics_job(METRICS_JOB_DUPLICATE);
        log_ctx_msg(LOG_DEBUG, "consumer", lc, "duplicate of a %s op",
                    store_op_state2str(op->state));
        job_destroy(job);
        consumer_msg_done(pl, pm);
        return;
    }
    if (!pl->rechecking) {
        pl->st->duplicates_inflight++;
        metrics_job(METRICS_JOB_DUPLICATE_INFLIGHT);
    }
    if (o) {
        pm->next = o->msgs;
        o->msgs = pm;
        job_destroy(job);
        return;
    }
    int64_t wait = op->lease_expires_at_ms - dd_now_ms();
    hold(pl, job, pm, dd_now_ms() + (wait > 0 && wait < 1000 ? wait : 1000));
}

/* Act on the claim of \p job for message \p pm (\p err, \p res, \p op: the
 * store's answer).  Takes ownership of \p job and \p pm. */
static void claim_apply(struct pipeline *pl, struct job *job, struct pmsg *pm,
                        const char *source, dd_err_t err, const char *errtext,
                        enum store_claim_result res, struct store_op op,
                        bool deferred)
{
    struct log_ctx lc = {pl->cfg->topic_jobs, pm->m.partition, pm->m.offset,
                         job->op_id};
    if (err) {
        /* Storage trouble: hold the message and try again shortly; its offset
         * stays uncommitted. */
        log_ctx_msg(LOG_ERR, "store", &lc, "%s; retrying", errtext);
        hold(pl, job, pm, dd_now_ms() + 1000);
        return;
    }
    switch (res) {
    case STORE_CLAIM_NEW:
    case STORE_CLAIM_RECLAIMED:
        claim_won(pl, job, pm, res, &op, deferred, &lc);
        return;
    case STORE_CLAIM_CONFLICT:
        claim_conflict(pl, job, pm, source, &op, &lc);
        return;
    case STORE_CLAIM_DUPLICATE:
        claim_duplicate(pl, job, pm, &op, &lc);
        return;
    }
}

/* A job of an op this run holds but has not written yet (a shadow op until
 * its result is acknowledged): the store does not know it, this run does.
 * Decided here as the store would (a duplicate in flight, or a conflict)
 * and true; false for any other job.  Takes ownership of \p job and \p pm
 * when true. */
static bool claim_unwritten(struct pipeline *pl, struct job *job,
                            struct pmsg *pm, const char *source)
{
    struct opctx *o = pl->n_ops ? op_find(pl, job->op_id) : NULL;
    if (!o || !o->rec_unwritten)
        return false;
    bool same = strcmp(o->rec.request_hash, job->request_hash) == 0;
    claim_apply(pl, job, pm, source, DD_OK, "",
                same ? STORE_CLAIM_DUPLICATE : STORE_CLAIM_CONFLICT, o->rec,
                false);
    return true;
}

/* Claim one job (the slow path: held messages).  Takes ownership of \p job
 * and \p pm. */
static void claim(struct pipeline *pl, struct job *job, struct pmsg *pm,
                  const char *source)
{
    if (claim_unwritten(pl, job, pm, source))
        return;
    char e[DD_ERRSTR_SIZE] = "";
    enum store_claim_result res = STORE_CLAIM_DUPLICATE;
    struct store_op op;
    memset(&op, 0, sizeof(op));
    dd_err_t err = store_claim(pl->store, job->op_id, job->request_hash,
                               job->event_key, source, dd_now_ms(), &res, &op, e,
                               sizeof(e));
    claim_apply(pl, job, pm, source, err, e, res, op, false);
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
        source_of(pl->cfg->topic_jobs, b->pm->m.partition, b->pm->m.offset,
                  source, sizeof(source));
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
 * either the hot index holds that op finished with the dedupd-request-hash
 * header's hash (FAST_DONE: a duplicate, done), or this run tracks the op,
 * claimed from this partition for that hash (FAST_ATTACHED: the message
 * waits with the op's own, as claim_duplicate would have it after a parse);
 * decided without parsing the value.  FAST_NO: the slow path decides. */
enum fast { FAST_NO, FAST_DONE, FAST_ATTACHED };

static enum fast fast_path(struct pipeline *pl, const rd_kafka_message_t *rkm,
                           const struct store_fast_key *fk, int64_t now)
{
    if (!fk || !rkm->key || !rkm->key_len)
        return FAST_NO;
    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(rkm, &hdrs))
        return FAST_NO;
    const void *id, *hash;
    size_t id_len, hash_len;
    if (rd_kafka_header_get_last(hdrs, "dedupd-op-id", &id, &id_len) ||
        rd_kafka_header_get_last(hdrs, "dedupd-request-hash", &hash, &hash_len))
        return FAST_NO;
    if (id_len != rkm->key_len || memcmp(id, rkm->key, id_len) ||
        hash_len != STORE_HASH_LEN)
        return FAST_NO;
    /* An op this run still tracks (result not acknowledged: the index may
     * already say finished) is not done yet: the message waits with it.
     * Another hash (a conflict) or another partition (misrouted) takes the
     * slow path. */
    struct opctx *o =
        pl->n_ops ? op_find_key(pl, rkm->key, rkm->key_len) : NULL;
    if (o) {
        if (o->partition != rkm->partition || !o->job ||
            memcmp(o->job->request_hash, hash, STORE_HASH_LEN))
            return FAST_NO;
        struct pmsg *pm = msg_track(pl, rkm->partition, rkm->offset);
        pm->next = o->msgs;
        o->msgs = pm;
        return FAST_ATTACHED;
    }
    return store_index_duplicate_key(pl->store, fk, hash, STORE_HASH_LEN, now,
                                     NULL)
               ? FAST_DONE
               : FAST_NO;
}

/* The jobs topic's partition of \p op_id, as the producers of dedupd submit
 * and the job API put it (murmur2, the Java client's), or -1 when the
 * partition count is unknown. */
static int32_t op_partition(const struct pipeline *pl, const char *op_id)
{
    /* shadow mode never produces to the live jobs topic: it decides a
     * misrouted job where it is (its changelog is its own) */
    if (pl->clinfo.partitions <= 0 || pl->opts->shadow)
        return -1;
    return rd_kafka_msg_partitioner_murmur2(NULL, op_id, strlen(op_id),
                                            pl->clinfo.partitions, NULL, NULL);
}

/* DESIGN.md section 2: re-produce a misrouted job (its original bytes) to
 * partition \p want of the jobs topic keyed by op_id with the identity
 * headers and dedupd-rerouted-from; its own offset is done once that copy
 * is acknowledged. */
static void reroute(struct pipeline *pl, const rd_kafka_message_t *rkm,
                    struct job *job, struct pmsg *pm, int32_t want)
{
    char source[STORE_SOURCE_MAX + 1];
    source_of(pl->cfg->topic_jobs, rkm->partition, rkm->offset, source,
              sizeof(source));
    pl->st->misrouted++;
    metrics_job(METRICS_JOB_MISROUTED);
    metrics_add(METRICS_JOBS_MISROUTED, 1);
    struct outmsg *m = consumer_out_new(pl, OUT_REROUTE, pl->cfg->topic_jobs,
                                        job->op_id, strlen(job->op_id),
                                        rkm->payload, rkm->len);
    m->partition = want;
    consumer_out_header(m, "dedupd-op-id", job->op_id);
    consumer_out_header(m, "dedupd-request-hash", job->request_hash);
    consumer_out_header(m, "dedupd-rerouted-from", source);
    m->msg = pm;
    struct log_ctx lc = {pl->cfg->topic_jobs, rkm->partition, rkm->offset,
                         job->op_id};
    log_ctx_msg(LOG_DEBUG, "consumer", &lc,
                "misrouted: re-produced to partition %d", (int)want);
    job_destroy(job);
    consumer_out_send(pl, m);
}

/* The forget control message (key op_id, header dedupd-control: forget;
 * DESIGN.md section 6): the op's owner writes a FORGOTTEN record at
 * generation + 1 and records it in the changelog; the message is done when
 * that is acknowledged.  @returns false when \p rkm is not a control
 * message. */
static bool control(struct pipeline *pl, const rd_kafka_message_t *rkm,
                    struct pmsg *pm)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *v;
    size_t vlen;
    if (rd_kafka_message_headers(rkm, &hdrs) ||
        rd_kafka_header_get_last(hdrs, "dedupd-control", &v, &vlen))
        return false;
    char why[DD_ERRSTR_SIZE], op_id[STORE_KEY_MAX + 1];
    if (vlen != 6 || memcmp(v, "forget", 6)) {
        snprintf(why, sizeof(why), "unknown control message '%.*s' (known: "
                 "forget)", (int)(vlen > 64 ? 64 : vlen), (const char *)v);
        send_dlq(pl, rkm, pm, why);
        return true;
    }
    if (!rkm->key || !rkm->key_len || rkm->key_len > STORE_KEY_MAX ||
        memchr(rkm->key, '\0', rkm->key_len)) {
        send_dlq(pl, rkm, pm, "forget: the key must be the op_id");
        return true;
    }
    memcpy(op_id, rkm->key, rkm->key_len);
    op_id[rkm->key_len] = '\0';
    int32_t want = op_partition(pl, op_id);
    if (want >= 0 && want != rkm->partition) {
        snprintf(why, sizeof(why), "forget on partition %d: op_id maps to "
                 "partition %d (produce it keyed by op_id with the murmur2 "
                 "partitioner, as dedupd forget does)", (int)rkm->partition,
                 (int)want);
        send_dlq(pl, rkm, pm, why);
        return true;
    }
    unsigned char val[STORE_CHANGELOG_VALUE_MAX];
    size_t len = 0;
    bool found = false;
    if (store_op_forget(pl->store, op_id, dd_now_ms(), val, &len, &found, why,
                        sizeof(why))) {
        /* kept, not lost: `dedupd redrive` sends it again */
        char dlq[DD_ERRSTR_SIZE + 32];
        snprintf(dlq, sizeof(dlq), "forget: %s", why);
        send_dlq(pl, rkm, pm, dlq);
        return true;
    }
    struct log_ctx lc = {pl->cfg->topic_jobs, rkm->partition, rkm->offset,
                         op_id};
    log_ctx_msg(LOG_NOTICE, "consumer", &lc, found
                ? "forgot the op: its next job is fetched again"
                : "forget: the op is not in the store (nothing to forget)");
    struct opctx *o = found ? op_find(pl, op_id) : NULL;
    if (o) { /* its result's record is read back: the forget is newer */
        free(o->clog);
        o->clog = NULL;
    }
    if (found)
        consumer_out_changelog(pl, rkm->partition, op_id, val, len, pm);
    else
        consumer_msg_done(pl, pm);
    return true;
}

/* Parse and check one message (\p fk: its key's fast-path look-up, or NULL
 * without one; \p now: the poll batch's clock); returns false when it went
 * to the DLQ or was decided on the fast path. */
static bool admit(struct pipeline *pl, rd_kafka_message_t *rkm,
                  const struct store_fast_key *fk, int64_t now,
                  struct item *it)
{
    pl->st->consumed++;
    if (!pl->st->first_msg_ms)
        pl->st->first_msg_ms = now;
    pl->st->last_msg_ms = now;
    pl->last_activity_ms = now;
    enum fast fast = fast_path(pl, rkm, fk, now);
    if (fast != FAST_NO) {
        pl->st->fast_path++;
        metrics_add(METRICS_FAST_PATH_DECISIONS, 1);
        if (fast == FAST_ATTACHED) {
            pl->st->duplicates_inflight++;
            metrics_job(METRICS_JOB_DUPLICATE_INFLIGHT);
            return false;
        }
        pl->st->duplicates++;
        metrics_job(METRICS_JOB_DUPLICATE);
        partitions_decided(pl->parts, rkm->partition, rkm->offset);
        return false;
    }
    struct pmsg *pm = msg_track(pl, rkm->partition, rkm->offset);
    if (control(pl, rkm, pm))
        return false;
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
    size_t idlen = strlen(job->op_id);
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
    /* The key is a routing hint: a job on another partition than its
     * op_id's goes there, so every copy meets one owner. */
    int32_t want = op_partition(pl, job->op_id);
    if (want >= 0 && want != rkm->partition) {
        reroute(pl, rkm, job, pm, want);
        return false;
    }
    it->job = job;
    it->pm = pm;
    source_of(pl->cfg->topic_jobs, rkm->partition, rkm->offset, it->source,
              sizeof(it->source));
    return true;
}

/* Act on one answer of store_complete_batch for \p o: produce its result
 * (*\p value, malloc'd: taken over, *value NULL then; else left to the
 * caller), or drop it when fenced (another worker took the op over: its
 * result will stand), or leave the op running under our lease when the
 * write failed (its messages stay uncommitted; a restart resumes it). */
static void completed(struct pipeline *pl, struct opctx *o,
                      const struct store_complete_req *req, char **value,
                      size_t value_len)
{
    struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
    if (req->err == DD_ERR_STATE) {
        log_ctx_msg(LOG_WARNING, "store", &lc, "result dropped: %s",
                    req->errstr);
        consumer_op_finish(pl, o);
    } else if (req->err) {
        log_ctx_msg(LOG_ERR, "store", &lc, "%s", req->errstr);
    } else {
        o->seq = req->seq;
        o->ticket = req->ticket;
        o->stored = true;
        o->rec_held = true; /* req->written */
        if (req->changelog_len && o->partition >= 0) {
            o->clog = dd_xmalloc(req->changelog_len, "changelog value");
            memcpy(o->clog, req->changelog, req->changelog_len);
            o->clog_len = req->changelog_len;
        }
        struct outmsg *m = consumer_out_result_take(
            pl, OUT_RESULT, o->op_id, o->job->event_key, o->generation, value,
            value_len);
        m->op = o;
        m->seq = req->seq;
        consumer_out_send(pl, m);
    }
}

/* Shadow mode: the ops claimed in this loop iteration get their `shadow`
 * results.  A new op (its claim deferred, store_claim_req.defer_new) is
 * produced at once and written once, when its result is acknowledged
 * (consumer_out_acks_flush); a reclaimed one is completed in one store
 * batch with the others (group commit), then produced. */
void consumer_shadow_flush(struct pipeline *pl)
{
    size_t n = pl->n_shadow;
    if (!n)
        return;
    pl->n_shadow = 0;
    struct dd_scratch local, *sc = dd_scratch_take(&pl->scratch, &local);
    struct store_complete_req *req =
        consumer_scratch(sc, n, sizeof(*req), true, "shadow batch");
    struct opctx **ops =
        consumer_scratch(sc, n, sizeof(*ops), true, "shadow batch");
    unsigned char *clog = consumer_scratch(sc, n, STORE_CHANGELOG_VALUE_MAX,
                                           false, "shadow batch");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = pl->shadow_pending[i];
        const char *outcome;
        char *val;
        size_t len;
        if (result_encode(o->job, NULL, o->generation,
                          (size_t)pl->cfg->limits_max_result_bytes, &val,
                          &len, &outcome, NULL))
            dd_oom("shadow result");
        if (o->rec_unwritten) {
            struct outmsg *m =
                consumer_out_result_take(pl, OUT_RESULT, o->op_id,
                                         o->job->event_key, o->generation,
                                         &val, len);
            m->op = o;
            consumer_out_send(pl, m);
            continue;
        }
        ops[k] = o;
        req[k] = (struct store_complete_req){
            .op_id = o->op_id,
            .generation = o->generation,
            .state = STORE_OP_COMPLETE,
            .value = val,
            .value_len = len,
            .changelog = clog + k * STORE_CHANGELOG_VALUE_MAX,
            /* claimed in this loop iteration: nothing but this run wrote
             * it since (no lease renewal, no fetch) */
            .held = &o->rec,
            .written = &o->rec,
        };
        k++;
    }
    char e[DD_ERRSTR_SIZE];
    if (k && store_complete_batch(pl->store, req, k, dd_now_ms(), e,
                                  sizeof(e)))
        log_msg(LOG_ERR, "store", "completing %zu shadow ops: %s", k, e);
    for (size_t i = 0; i < k; i++) { /* req[i].value: the result, ours */
        char *v = (char *)req[i].value;
        completed(pl, ops[i], &req[i], &v, req[i].value_len);
        free(v);
    }
    dd_scratch_give(&pl->scratch, sc);
}

/* Process a poll batch: admit each message, claim the survivors at once
 * (store_claim_batch: one MultiGet for what the hot index cannot decide, one
 * WriteBatch), then act on each answer in consumption order. */
static void handle_batch(struct pipeline *pl, rd_kafka_message_t **rkms, size_t n)
{
    assert(n <= POLL_BATCH);
    struct dd_scratch local, *sc = dd_scratch_take(&pl->scratch, &local);
    /* admit fills an item for each message it returns true for */
    struct item *items =
        consumer_scratch(sc, n, sizeof(*items), false, "poll batch");
    /* The fast path's index keys, computed and their slots prefetched for
     * the whole batch (keys from submitters trusted to send the identity
     * headers only). */
    struct store_fast_key fks[POLL_BATCH];
    bool fast = pl->cfg->identity_trust_headers;
    if (fast) {
        const void *ids[POLL_BATCH];
        size_t lens[POLL_BATCH];
        for (size_t i = 0; i < n; i++) {
            ids[i] = rkms[i]->key;
            lens[i] = rkms[i]->key_len;
        }
        store_index_prepare(pl->store, ids, lens, n, fks);
    }
    int64_t now = dd_now_ms();
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (admit(pl, rkms[i], fast ? &fks[i] : NULL, now, &items[k]) &&
            !claim_unwritten(pl, items[k].job, items[k].pm, items[k].source))
            k++;
    struct store_claim_req *reqs =
        k ? consumer_scratch(sc, k, sizeof(*reqs), true, "poll batch") : NULL;
    if (k) {
        for (size_t i = 0; i < k; i++) {
            reqs[i].op_id = items[i].job->op_id;
            reqs[i].request_hash = items[i].job->request_hash;
            reqs[i].event_key = items[i].job->event_key;
            reqs[i].source = items[i].source;
            /* a new shadow op is written once, at its result's
             * acknowledgement (consumer_out_acks_flush) */
            reqs[i].defer_new = pl->opts->shadow;
        }
        char e[DD_ERRSTR_SIZE] = "";
        dd_err_t err = store_claim_batch(pl->store, reqs, k, dd_now_ms(), e, sizeof(e));
        for (size_t i = 0; i < k; i++)
            claim_apply(pl, items[i].job, items[i].pm, items[i].source,
                        err ? err : reqs[i].err,
                        err ? e : "store_claim_batch: per-request error",
                        reqs[i].result, reqs[i].op, reqs[i].deferred);
    }
    dd_scratch_give(&pl->scratch, sc);
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
    dd_strlcpy(sa->session, fa->session, sizeof(sa->session));
    dd_strlcpy(sa->exit_addr, fa->exit_addr, sizeof(sa->exit_addr));
    dd_strlcpy(sa->category, fa->category, sizeof(sa->category));
    dd_strlcpy(sa->error, fa->error, sizeof(sa->error));
}

/*
 * Retry hook (fetch_retry_cb), on the engine thread: the op's record follows
 * its retries (DESIGN.md section 4): running -> retryable with the failed
 * attempt and the not-before time, retryable -> running when the attempt
 * starts.  The retry itself stays in the engine's timers; the record is what
 * `dedupd inspect` shows and what a reclaim after a crash waits out.  Reads
 * only fields of \p req_opaque fixed before fetch_submit, and sets its
 * rec_retried; the store is thread-safe (per-op stripes).  A failure is
 * logged: the completion's fencing still decides.
 * @locality fetch engine thread.
 */
static void on_fetch_retry(void *arg, void *req_opaque,
                           enum fetch_retry_event ev, int64_t not_before_ms,
                           uint32_t attempts, const struct fetch_attempt *fa)
{
    struct pipeline *pl = arg;
    struct opctx *o = req_opaque;
    char e[DD_ERRSTR_SIZE];
    dd_err_t err;
    /* the completion reads the record again (fetched_prepare) */
    atomic_store_explicit(&o->rec_retried, true, memory_order_relaxed);
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

/* A result encoded on the engine thread (fetch_result.prepared). */
struct encoded {
    char *value;
    size_t value_len;
    size_t body_at;      /* result_encode's */
    const char *outcome; /* static text */
};

static void encoded_free(void *p)
{
    struct encoded *e = p;
    free(e->value);
    free(e);
}

/* The done hook (fetch.h): \p r's result encoded beside the pipeline
 * (issue 13: encoding, the page's literal most of it, was a sixth of the
 * pipeline thread's time on fetched pages).  Reads only what is fixed
 * before fetch_submit (the op's job, generation) and the configuration; out
 * of memory leaves it to the pipeline.
 * @locality fetch engine thread. */
static void on_fetch_done(void *arg, void *req_opaque, struct fetch_result *r)
{
    const struct pipeline *pl = arg;
    const struct opctx *o = req_opaque;
    struct encoded *e = malloc(sizeof(*e));
    if (!e)
        return;
    if (result_encode(o->job, r, o->generation,
                      (size_t)pl->cfg->limits_max_result_bytes, &e->value,
                      &e->value_len, &e->outcome, &e->body_at)) {
        free(e);
        return;
    }
    r->prepared = e;
    r->prepared_free = encoded_free;
}

struct fetched {
    struct fetch_result *r;
    struct opctx *o;
    bool shared;          /* a waiter served by its leader's transfer */
    char *value;
    size_t value_len;
    size_t body_at; /* where r->body's literal starts in value (0: none) */
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
    struct encoded *e = shared ? NULL : r->prepared;
    if (e) { /* by the engine thread (on_fetch_done) */
        r->prepared = NULL;
        f->value = e->value;
        f->value_len = e->value_len;
        f->body_at = e->body_at;
        outcome = e->outcome;
        free(e);
    } else if (result_encode(o->job, r, o->generation,
                             (size_t)pl->cfg->limits_max_result_bytes,
                             &f->value, &f->value_len, &outcome, &f->body_at))
        dd_oom("result");
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
        f->attempts = dd_xcalloc(n_log, sizeof(*f->attempts), "attempt log");
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
        /* fenced on the claim's record without a read unless a lease
         * renewal or the retry hook rewrote it since (the index cannot
         * tell: neither changes its state, expiry or request hash for
         * long), and while the index still holds it (store_index_holds:
         * nothing else wrote it either) */
        .held = o->rec_renewed ||
                        atomic_load_explicit(&o->rec_retried,
                                             memory_order_relaxed)
                    ? NULL
                    : &o->rec,
        .written = &o->rec,
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
        if (r->body && r->body_sha256[0])
            req->body_sha256 = r->body_sha256;
        /* the result's literal is this body's: stored with the body, the
         * outbox entry keeps the rest (the page is written once) */
        if (r->body && f->body_at) {
            req->body_lit_off = f->body_at;
            req->body_lit_len = f->value_len - 1 - f->body_at;
        }
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
    r->body_sha256[0] = '\0'; /* the stored body's: computed where used */
    if (r->prepared) { /* encoded with the 304's empty body */
        r->prepared_free(r->prepared);
        r->prepared = NULL;
    }
    if (!r->content_type && v->content_type[0])
        r->content_type = dd_xstrdup(v->content_type, "stored headers");
    if (!r->etag && v->etag[0])
        r->etag = dd_xstrdup(v->etag, "stored headers");
    if (!r->last_modified && v->last_modified[0])
        r->last_modified = dd_xstrdup(v->last_modified, "stored headers");
    pl->st->not_modified++;
    return true;
}

/* \p o's transfer serves nobody: its single-flight waiters fetch on their
 * own. */
static void sf_release_followers(struct pipeline *pl, struct opctx *o)
{
    struct opctx *w = o->sf_followers;
    o->sf_followers = NULL;
    while (w) {
        struct opctx *next = w->sf_next;
        w->sf_next = NULL;
        w->sf_waiting = false;
        w->sf_alone = true;
        if (w->released)
            consumer_released_free(pl, w); /* given up at a revoke */
        else
            start_fetch(pl, w);
        w = next;
    }
}

/* Drop \p o's single-flight waiters given up at a revoke. */
static void sf_prune_released(struct pipeline *pl, struct opctx *o)
{
    struct opctx **pp = &o->sf_followers;
    while (*pp) {
        struct opctx *w = *pp;
        if (w->released) {
            *pp = w->sf_next;
            consumer_released_free(pl, w);
        } else
            pp = &w->sf_next;
    }
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
        o->fetching = false;
        if (o->sf_leading)
            sf_remove(pl, o);
        sf_prune_released(pl, o);
        if (o->released) {
            /* given up at a revoke: nothing is produced for it any more;
             * its waiters (of partitions still ours) fetch on their own */
            fetch_result_destroy(rs[i]);
            sf_release_followers(pl, o);
            consumer_released_free(pl, o);
            continue;
        }
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
        sf_release_followers(pl, o);
    }
    if (!total)
        return;
    struct dd_scratch local, *sc = dd_scratch_take(&pl->scratch, &local);
    struct fetched *f =
        consumer_scratch(sc, total, sizeof(*f), true, "completion batch");
    struct store_complete_req *req =
        consumer_scratch(sc, total, sizeof(*req), true, "completion batch");
    unsigned char *clog = consumer_scratch(
        sc, total, STORE_CHANGELOG_VALUE_MAX, false, "completion batch");
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
    for (size_t i = 0; i < total; i++)
        req[i].changelog = clog + i * STORE_CHANGELOG_VALUE_MAX;
    /* a failed write (DD_ERR_IO, NOMEM) also lands in every req[i].err */
    if (store_complete_batch(pl->store, req, total, dd_now_ms(), e, sizeof(e)))
        log_msg(LOG_ERR, "store", "completing %zu ops: %s", total, e);
    for (size_t i = 0; i < total; i++) {
        completed(pl, f[i].o, &req[i], &f[i].value, f[i].value_len);
        free(f[i].value);
        free(f[i].attempts);
    }
    for (size_t i = 0; i < total; i++)
        if (!f[i].shared)
            fetch_result_destroy(f[i].r);
    dd_scratch_give(&pl->scratch, sc);
}

/* Take every finished fetch (waiting at most \p timeout_ms for the first)
 * and commit them in batches.  @returns how many were taken. */
size_t consumer_drain_fetched(struct pipeline *pl, int timeout_ms)
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
    struct outmsg *m = consumer_out_result(pl, OUT_REPLAY, op_id, event_key,
                                           generation, value, value_len);
    m->seq = seq;
    m->op_id = dd_xstrdup(op_id, "outbox replay");
    /* its changelog record goes to the partition of its first job (the
     * source "topic/partition/offset") */
    struct store_op op;
    bool found = false;
    char e[DD_ERRSTR_SIZE];
    if (!store_op_get(pl->store, op_id, dd_now_ms(), &op, &found, e,
                      sizeof(e)) && found) {
        const char *a = strchr(op.source, '/');
        if (a && strchr(a + 1, '/'))
            m->src_partition = (int32_t)atoi(a + 1);
    }
    pl->st->replayed_outbox++;
    consumer_out_send(pl, m);
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
    for (size_t b = 0; b < CONSUMER_OPMAP_BUCKETS; b++) {
        for (struct opctx *o = pl->opmap[b]; o; o = o->hnext) {
            if (o->stored || o->rec_unwritten) /* no record to renew */
                continue;
            o->rec_renewed = true; /* rec no longer the stored record */
            if (store_lease_renew(pl->store, o->op_id, o->generation, now, e,
                                  sizeof(e))) {
                struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
                log_ctx_msg(LOG_WARNING, "store", &lc, "lease renewal: %s", e);
            }
        }
    }
}

/* Gauges, once a second: ops in flight, outbox, index, consumer lag. */
static void update_gauges(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
    if (now < pl->next_gauges_ms)
        return;
    pl->next_gauges_ms = now + 1000;
    /* results pending for half the bodies' TTL stop pinning bodies */
    size_t unpinned = 0;
    char ue[DD_ERRSTR_SIZE];
    if (now < pl->next_unpin_ms) {
        /* backing off after a failure */
    } else if (store_outbox_unpin_old(pl->store, now, &unpinned, ue,
                                      sizeof(ue))) {
        log_msg(LOG_ERR, "store", "outbox: %s (next try in 60 s)", ue);
        pl->next_unpin_ms = now + 60000;
    } else if (unpinned)
        log_msg(LOG_WARNING, "store", "outbox: %zu results pending for more "
                "than half of store.validators_ttl_ms now hold their page "
                "again", unpinned);
    metrics_gauge_set(METRICS_OPS_INFLIGHT, (int64_t)pl->n_ops);
    metrics_gauge_set(METRICS_OUTBOX_PENDING,
                      (int64_t)store_outbox_pending(pl->store));
    struct store_index_stats is;
    store_index_stats_get(pl->store, &is);
    metrics_gauge_set(METRICS_INDEX_ENTRIES, (int64_t)is.entries);
    metrics_gauge_set(METRICS_INDEX_COMPLETE, is.complete ? 1 : 0);
    /* once a run, when the index stops being (or, rebuilt past its bound
     * at start-up, never was) complete: both states last until reopen */
    if (!is.complete && !is.rebuilding && !pl->index_warned) {
        pl->index_warned = true;
        if (is.off)
            log_msg(LOG_WARNING, "store",
                    "the hot index is off (an ops write failed: see the "
                    "error logged then): every decision reads RocksDB until "
                    "the next start");
        else
            log_msg(LOG_WARNING, "store",
                    "the hot index is past store.index_max_bytes (%llu "
                    "entries, %llu bytes): it no longer holds every live "
                    "op_id and is a cache until the next start; each new "
                    "op's claim reads RocksDB (about half the new-op rate "
                    "measured); raise store.index_max_bytes (about 40 bytes "
                    "an op_id)",
                    (unsigned long long)is.entries,
                    (unsigned long long)is.bytes);
    }
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
        /* no message consumed since the assignment: the position is
         * unknown; at the end (EOF) the lag is 0, else the commit point or,
         * lacking one, the log start bounds it */
        int32_t p = a->elems[i].partition;
        int64_t cp = partitions_commit_point(pl->parts, p);
        int64_t pos = a->elems[i].offset >= 0 ? a->elems[i].offset
                      : partitions_at_eof(pl->parts, p) ? hi
                      : cp >= 0                          ? cp
                                                         : lo;
        if (hi > pos)
            lag += hi - pos;
    }
    rd_kafka_topic_partition_list_destroy(a);
    metrics_gauge_set(METRICS_CONSUMER_LAG_MESSAGES, lag);
}

/* Finish the acknowledged ops whose completion the group commit has made
 * durable since: their messages' offsets move on. */
void consumer_release_durable(struct pipeline *pl)
{
    consumer_out_acks_flush(pl);
    if (!pl->await)
        return;
    uint64_t d = store_durable(pl->store);
    struct opctx **pp = &pl->await;
    while (*pp) {
        struct opctx *o = *pp;
        if (o->ticket <= d) {
            *pp = o->await_next;
            consumer_op_finish(pl, o);
        } else
            pp = &o->await_next;
    }
}

static bool idle(struct pipeline *pl)
{
    return pl->n_ops == 0 && pl->pending_out == 0 && pl->retry == NULL &&
           pl->blocked == NULL && pl->n_acks == 0 && !(pl->eos && pl->txn_dirty);
}

/* ---- run ------------------------------------------------------------------ */

static void pipeline_init(struct pipeline *pl, const struct cfg *cfg,
                          struct consumer_handles *h,
                          const struct consumer_opts *opts,
                          struct consumer_stats *st)
{
    memset(st, 0, sizeof(*st));
    pl->cfg = cfg;
    pl->opts = opts;
    pl->st = st;
    pl->h = h;
    pl->rk = h->consumer->rk;
    pl->fetch = h->fetch;
    pl->store = h->store;
    pl->api = h->api;
    consumer_job_conf(cfg, &pl->jconf);
    pl->parts = partitions_new();
    pl->opmap = dd_xcalloc(CONSUMER_OPMAP_BUCKETS, sizeof(*pl->opmap), "op map");
    pl->sfmap = dd_xcalloc(SFMAP_BUCKETS, sizeof(*pl->sfmap), "op map");
    const char *fp = getenv("DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER");
    pl->fail_fatal_after = fp && *fp ? atol(fp) : -1;
    fp = getenv("DEDUPD_FAILPOINT_EXIT_BEFORE_ACK");
    pl->fail_exit_before_ack = fp && *fp ? atol(fp) : -1;
    h->consumer->pl = pl;
    changelog_topic_of(cfg, pl->changelog, sizeof(pl->changelog));
    pl->clinfo = h->changelog;
    pl->restorer = h->restorer;
    pl->identity = changelog_identity_value(cfg);
    if (cfg->prefetch_kick_ms > 0)
        pl->kick = prefetch_kick_start(pl->rk, (int)cfg->prefetch_kick_ms);
    if (pl->fetch) {
        fetch_set_retry_hook(pl->fetch, on_fetch_retry, pl);
        fetch_set_done_hook(pl->fetch, on_fetch_done, pl);
    }
    api_hurry_watch(pl->api, opts->hurry);
    consumer_txn_init(pl);
}

/* Poll up to POLL_BATCH messages (at most \p room: every message may be a
 * NEW op), waiting up to \p timeout_ms for the first, and process them. */
static void poll_batch(struct pipeline *pl, size_t room, int timeout_ms)
{
    rd_kafka_message_t *batch[POLL_BATCH];
    size_t nb = 0;
    for (int i = 0; i < POLL_BATCH && nb < room; i++) {
        rd_kafka_message_t *rkm =
            rd_kafka_consumer_poll(pl->rk, i ? 0 : timeout_ms);
        if (!rkm)
            break;
        if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            partitions_eof_set(pl->parts, rkm->partition, true);
            rd_kafka_message_destroy(rkm);
        } else if (rkm->err) {
            log_msg(LOG_WARNING, "consumer", "consume: %s",
                    rd_kafka_message_errstr(rkm));
            rd_kafka_message_destroy(rkm);
        } else {
            /* In poll order: an EOF polled after this message sets the
             * flag again. */
            partitions_eof_set(pl->parts, rkm->partition, false);
            batch[nb++] = rkm;
        }
    }
    /* wakes librdkafka's fetcher once drained (NULL: off) */
    prefetch_kick_polled(pl->kick, batch, nb);
    if (nb)
        handle_batch(pl, batch, nb);
    for (size_t i = 0; i < nb; i++)
        rd_kafka_message_destroy(batch[i]);
}

/* `run --exit-when-idle MS`: every assigned partition at its end, nothing
 * in flight or unacknowledged, for MS. */
static bool idle_exit(struct pipeline *pl)
{
    int64_t ms = pl->opts->exit_when_idle_ms;
    if (ms <= 0 || !idle(pl) || !partitions_ever_assigned(pl->parts) ||
        !partitions_all_eof(pl->parts) ||
        dd_now_ms() - pl->last_activity_ms < ms)
        return false;
    log_msg(LOG_INFO, "consumer", "idle for %lld ms: exiting", (long long)ms);
    return true;
}

/* The loop: until stopped (and drained, or the grace is over, or hurried),
 * idle, or a store write or its WAL fsync failed (DD_ERR_IO, after
 * consumer_stop_store_failed). */
static dd_err_t run_loop(struct pipeline *pl, char *errstr, size_t errstr_size)
{
    const struct consumer_opts *opts = pl->opts;
    struct producer **prod = &pl->h->producer;
    int64_t stop_at = 0;
    pl->last_activity_ms = dd_now_ms();
    char cause[DD_ERRSTR_SIZE];
    for (;;) {
        bool stopping = !*opts->run;
        if (pl->fatal) { /* a rebalance or a transaction's end */
            dd_errstr_set(errstr, errstr_size, "%s", pl->fatal_msg);
            return pl->fatal;
        }
        if (consumer_stop_store_broken(pl, cause, sizeof(cause)))
            return consumer_stop_store_failed(pl, cause, errstr, errstr_size);
        if (stopping && !stop_at)
            stop_at = consumer_stop_begin(pl);
        if (stopping && opts->hurry && *opts->hurry) {
            consumer_stop_hurry(pl);
            return DD_OK;
        }
        if (stopping && (idle(pl) || dd_now_ms() >= stop_at))
            return DD_OK;
        /* Completions first: they free capacity. */
        if (pl->fetch)
            consumer_drain_fetched(pl, 0);
        producer_poll(*prod, 0);
        consumer_out_producer_check(pl);
        if (pl->fatal) {
            dd_errstr_set(errstr, errstr_size, "%s", pl->fatal_msg);
            return pl->fatal;
        }
        consumer_out_retry_due(pl);
        recheck_blocked(pl);
        renew_leases(pl);
        update_gauges(pl);
        size_t max = (size_t)pl->cfg->fetch_max_inflight;
        if (pl->opts->shadow && max < SHADOW_MAX_INFLIGHT)
            max = SHADOW_MAX_INFLIGHT;
        if (!stopping && pl->n_ops < max) {
            pl->at_capacity_ms = 0;
            consumer_backpressure(pl, false);
            poll_batch(pl, max - pl->n_ops,
                       pl->n_ops || pl->pending_out ? 2 : 100);
        } else {
            int64_t now = dd_now_ms();
            if (!stopping && !pl->at_capacity_ms)
                pl->at_capacity_ms = now;
            if (!stopping && now - pl->at_capacity_ms >= PAUSE_AFTER_MS) {
                /* at capacity for long (slow fetches, or results a broker
                 * outage keeps unacknowledged): the partitions are paused
                 * and the poll goes on, which keeps the member in its
                 * group; what was fetched before the pause is taken in.
                 * Short spells pass without it: every pause drops the
                 * prefetched messages and its resume fetches them again */
                consumer_backpressure(pl, true);
                poll_batch(pl, POLL_BATCH, 0);
            }
            if (stopping)
                consumer_stop_poll(pl);
            if (pl->fetch)
                consumer_drain_fetched(pl, 5);
            else
                producer_poll(*prod, 5);
        }
        consumer_shadow_flush(pl);
        consumer_release_durable(pl);
        consumer_flush_offsets(pl);
        consumer_checkpoint_flush(pl, false);
        consumer_txn_tick(pl);
        if (!stopping && idle_exit(pl))
            return DD_OK;
    }
}

/* Leave the group, stop the fetch engine (its thread calls into the run),
 * and free what the run holds.  Ops still in flight keep their lease; a
 * restart reclaims them. */
static void pipeline_fini(struct pipeline *pl)
{
    pl->st->prefetch_kicks = prefetch_kick_stop(pl->kick);
    pl->kick = NULL;
    rd_kafka_consumer_close(pl->rk);
    consumer_out_acks_flush(pl);
    pl->h->consumer->pl = NULL;
    /* exactly_once: the copy is kept only when it is what the last
     * transaction committed (the close's revoke committed it) */
    pl->h->clean = pl->eos && !pl->fatal && !consumer_stop_hurried(pl) &&
                   !pl->txn_dirty && !pl->txn_fail[0] && pl->n_ops == 0 &&
                   pl->pending_out == 0 && !pl->retry &&
                   store_outbox_pending(pl->store) == 0;
    consumer_txn_fini(pl);
    if (pl->fetch) {
        struct fetch_stats fs;
        fetch_stats_get(pl->fetch, &fs);
        pl->st->fetch_attempts = fs.attempts;
        pl->st->rotations = fs.rotations;
        pl->st->throttled = fs.throttled;
        pl->st->bytes = fs.bytes;
    }
    fetch_destroy(pl->fetch);
    pl->h->fetch = pl->fetch = NULL;
    for (size_t b = 0; b < CONSUMER_OPMAP_BUCKETS; b++) {
        struct opctx *o = pl->opmap[b];
        while (o) {
            struct opctx *n = o->hnext;
            while (o->msgs) {
                struct pmsg *m = o->msgs;
                o->msgs = m->next;
                free(m);
            }
            job_destroy(o->job);
            free(o->cond);
            free(o->clog);
            free(o); /* and its op_id */
            o = n;
        }
    }
    /* what the producer still holds comes back through its reports and is
     * freed with the retry list (results are in the outbox, replayed at the
     * next start; offsets never passed what was unacknowledged) */
    pl->closing = true;
    producer_purge(pl->h->producer);
    while (pl->released) /* their fetches ended with the engine */
        consumer_released_free(pl, pl->released);
    consumer_out_acks_flush(pl); /* the purge's reports */
    free(pl->acks);
    free(pl->acked);
    dd_scratch_fini(&pl->scratch);
    free(pl->opmap);
    free(pl->sfmap);
    free(pl->identity);
    free(pl->shadow_pending);
    free(pl->clog_next);
    free(pl->clog_dirty);
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
        free(m->msg);
        consumer_out_free(m);
    }
    partitions_destroy(pl->parts);
}

dd_err_t consumer_run(const struct cfg *cfg, struct consumer_handles *h,
                      const struct consumer_opts *opts,
                      struct consumer_stats *st, char *errstr,
                      size_t errstr_size)
{
    struct pipeline pl_s = {0}, *pl = &pl_s;
    assert(h->store && h->producer && h->consumer);
    assert(!opts->shadow == !!h->fetch);
    pipeline_init(pl, cfg, h, opts, st);
    /* Start-up: unsent outbox entries go out again under their event_key. */
    dd_err_t err = store_outbox_foreach(pl->store, replay_cb, pl, errstr,
                                        errstr_size);
    if (err)
        goto out;
    if (st->replayed_outbox)
        log_msg(LOG_INFO, "consumer", "replaying %llu unsent results",
                (unsigned long long)st->replayed_outbox);
    log_msg(LOG_INFO, "consumer",
            "running: instance %s run %s, group %s, topic %s",
            cfg->instance_id, h->run_id, cfg->group_id, cfg->topic_jobs);
    err = run_loop(pl, errstr, errstr_size);
    consumer_stop_leave(pl, err);
out:
    pipeline_fini(pl);
    struct timespec cpu;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
        st->pipeline_cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9;
    /* exactly_once: the last transaction (the stop's or the close's revoke)
     * aborted or was fenced: not a clean exit */
    if (!err && pl->fatal) {
        err = pl->fatal;
        dd_errstr_set(errstr, errstr_size, "%s", pl->fatal_msg);
    }
    return err;
}
