/* The job API and readiness over http.c.  See api.h for the semantics. */
#include "api.h"

#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "changelog.h"
#include "config.h"
#include "dd.h"
#include "http.h"
#include "job.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "result.h"
#include "store.h"

/* How long a POST /v1/jobs handler waits for its job's delivery report. */
#define API_ACK_WAIT_MS 15000
/* A pending receipt's in-flight window: the handler's wait + a margin (its
 * receipt is written just before the produce, the wait starts just after).
 * Past it the submit's process has ended (one store, one process): a retry
 * with the same payload is a new submit, never 409. */
#define API_RECEIPT_PENDING_MS (API_ACK_WAIT_MS + 5000)

struct api {
    const struct cfg *cfg;
    struct job_conf jconf;
    struct store *store;
    struct producer *prod; /* POST /v1/jobs; the api listener's thread only */
    const char *topic;     /* where POST /v1/jobs produces: topics.jobs, or
                              the failpoint's topic (below) */
    struct http *http;
    atomic_bool ready;     /* set by the pipeline, read by /readyz */
    int64_t receipt_pending_ms; /* a pending receipt's in-flight window */
    int64_t receipt_ttl_ms;     /* a receipt's life: the op's */
    /* api_hurry_watch: the flag a second signal sets (NULL: none) */
    _Atomic(const volatile sig_atomic_t *) hurry;
};

/* A POST waits API_ACK_WAIT_MS (above) for its acknowledgement, in slices
 * of API_WAIT_SLICE_MS, so a hurried stop ends the wait at once;
 * api_destroy flushes the producer for API_CLOSE_FLUSH_MS,
 * API_HURRY_FLUSH_MS when hurried. */
#define API_WAIT_SLICE_MS 50
#define API_CLOSE_FLUSH_MS 5000
#define API_HURRY_FLUSH_MS 300

/* Has a second signal asked to leave now?  @locality any thread. */
static bool api_hurried(struct api *a)
{
    const volatile sig_atomic_t *h = atomic_load(&a->hurry);
    return h && *h;
}

/* Wait for every produced message's acknowledgement, up to
 * API_ACK_WAIT_MS or a hurried stop.  @returns DD_OK when none is left,
 * else DD_ERR_TIMEOUT.  @locality api listener thread. */
static dd_err_t api_flush(struct api *a)
{
    int64_t end = dd_now_ms() + API_ACK_WAIT_MS;
    for (;;) {
        if (!producer_flush(a->prod, API_WAIT_SLICE_MS))
            return DD_OK;
        if (api_hurried(a) || dd_now_ms() >= end)
            return DD_ERR_TIMEOUT;
    }
}

/* The delivery report of one POST /v1/jobs, on its handler's stack. */
struct api_delivery {
    bool done;
    dd_err_t err;
    int32_t partition;
    int64_t offset;
    char errtext[128];
};

/* @locality api listener thread (served by producer_flush/purge there). */
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

/* @locality api listener thread. */
static char *api_error(const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* @locality admin listener thread. */
static bool api_ready(void *opaque, char *reason, size_t size)
{
    struct api *a = opaque;
    if (atomic_load(&a->ready))
        return true;
    snprintf(reason, size, "not consuming: waiting for partitions of %s",
             a->cfg->topic_jobs);
    return false;
}

/* GET /v1/ops/{op_id}.  @locality api listener thread. */
static int api_op(void *opaque, const char *op_id, char **response_json)
{
    struct api *a = opaque;
    struct store_op op;
    bool found = false;
    char e[DD_ERRSTR_SIZE];
    if (store_op_get(a->store, op_id, dd_now_ms(), &op, &found, e,
                     sizeof(e))) {
        log_msg(LOG_ERR, "http", "GET /v1/ops: %s", e);
        *response_json = api_error("store read failed");
        return 500;
    }
    if (!found) {
        json_t *o = json_pack(
            "{s:s, s:s}", "error", "op not found", "hint",
            "not in this instance's store: it was never claimed here "
            "(another instance may own its partition), or it expired");
        *response_json = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return 404;
    }
    if (result_op_encode(op_id, &op, NULL, 0, RESULT_OP_LIVE, response_json))
        return 500; /* out of memory: an empty body */
    return 200;
}

/* @locality api listener thread. */
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

/*
 * The Idempotency-Key's receipt for \p job: 0 when this submit is the first
 * (its receipt is now pending: produce it), or takes over a pending receipt
 * of the same payload past its in-flight window; else the HTTP status to
 * answer with its body in *response_json (a replay of the stored receipt,
 * 409 inside the window, 422 for another payload while the receipt lives,
 * 503).  @locality api listener thread.
 */
static int submit_receipt(struct api *a, const struct job *job,
                          char **response_json, char **hname, char **hvalue)
{
    enum store_receipt_state st;
    char existing[STORE_HASH_LEN + 1];
    char *receipt = NULL;
    char e[DD_ERRSTR_SIZE];
    if (store_receipt_begin(a->store, job->op_id, job->request_hash,
                            dd_now_ms(), a->receipt_pending_ms,
                            a->receipt_ttl_ms, &st, existing, &receipt, e,
                            sizeof(e))) {
        log_msg(LOG_ERR, "http", "POST /v1/jobs: %s", e);
        *response_json = api_error("receipt store unavailable");
        return 503;
    }
    if (st != STORE_RECEIPT_NEW && strcmp(existing, job->request_hash)) {
        free(receipt);
        *response_json = api_error("Idempotency-Key reused with a different "
                                   "payload");
        return 422;
    }
    if (st == STORE_RECEIPT_PENDING) {
        *response_json = api_error("a request with this Idempotency-Key is "
                                   "in progress");
        return 409;
    }
    if (st == STORE_RECEIPT_DONE) {
        *response_json = receipt;
        *hname = dd_xstrdup("Idempotent-Replayed", "api header");
        *hvalue = dd_xstrdup("true", "api header");
        return 202;
    }
    return 0;
}

/* After a fatal error the job API's producer accepts nothing more: recreate
 * it (as the pipeline does for results).  This thread is its only user and
 * every request flushes, so nothing is held but a failed send.
 * @locality api listener thread. */
static void api_producer_check(struct api *a)
{
    char e[DD_ERRSTR_SIZE];
    if (!producer_fatal(a->prod))
        return;
    if (producer_replace(&a->prod, a->cfg, api_dr, e, sizeof(e)) == DD_OK) {
        metrics_add(METRICS_PRODUCER_RESETS, 1);
        log_msg(LOG_ERR, "http", "fatal producer error: the job API's "
                "producer was recreated");
    }
}

/*
 * Produce \p job (\p payload, \p len bytes: the body as submitted or keyed)
 * and wait for its acknowledgement: 202 with the receipt (stored when
 * \p began, an Idempotency-Key's first submit), else 503 (the pending
 * receipt aborted).  @locality api listener thread.
 */
static int submit_produce(struct api *a, const struct job *job,
                          const void *payload, size_t len, bool began,
                          char **response_json)
{
    char e[DD_ERRSTR_SIZE] = "";
    api_producer_check(a);
    struct api_delivery d = {0};
    struct producer_header h[2] = {{"dedupd-op-id", job->op_id},
                                   {"dedupd-request-hash", job->request_hash}};
    if (producer_send(a->prod, a->topic, job->op_id,
                      strlen(job->op_id), payload, len, h, 2, &d, e,
                      sizeof(e)) ||
        api_flush(a) || !d.done || d.err) {
        /* nothing may outlive this request: its report points at d */
        producer_purge(a->prod);
        if (d.done || !e[0])
            snprintf(e, sizeof(e), "%s", d.done ? d.errtext : "not acknowledged");
        log_msg(LOG_WARNING, "http", "POST /v1/jobs: produce: %s", e);
        if (began && store_receipt_abort(a->store, job->op_id, e, sizeof(e)))
            log_msg(LOG_ERR, "http", "%s", e);
        *response_json = api_error("the job could not be queued; retry");
        return 503;
    }
    json_t *r = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I}", "op_id", job->op_id,
                          "event_key", job->event_key, "request_hash",
                          job->request_hash, "topic", a->cfg->topic_jobs,
                          "partition", (int)d.partition, "offset",
                          (json_int_t)d.offset);
    *response_json = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    if (began && store_receipt_done(a->store, job->op_id, job->request_hash,
                                    *response_json, dd_now_ms(),
                                    a->receipt_ttl_ms, e, sizeof(e)))
        log_msg(LOG_ERR, "http", "POST /v1/jobs: receipt: %s", e);
    return 202;
}

int api_submit_parse(const char *scope, const struct job_conf *jconf,
                     const char *idempotency_key, const void *body, size_t len,
                     struct job **job, char **keyed, size_t *keyed_len,
                     char **response_json)
{
    char e[DD_ERRSTR_SIZE];
    *job = NULL;
    *keyed = NULL;
    *keyed_len = len;
    *response_json = NULL;
    if (idempotency_key && !api_key_valid(idempotency_key)) {
        *response_json = api_error("malformed Idempotency-Key: 1..255 printable "
                                   "ASCII characters, no quote or backslash");
        return 400;
    }
    if (idempotency_key &&
        job_with_key(body, len, idempotency_key, scope, keyed, keyed_len, e,
                     sizeof(e))) {
        *response_json = api_error(e);
        return 400;
    }
    if (job_parse(jconf, *keyed ? *keyed : body, *keyed_len, job, e,
                  sizeof(e))) {
        free(*keyed);
        *keyed = NULL;
        *response_json = api_error(e);
        return 400;
    }
    return 0;
}

/* POST /v1/jobs.  @locality api listener thread. */
static int api_submit(void *opaque, const char *idempotency_key,
                      const void *body, size_t len, char **response_json,
                      char **hname, char **hvalue)
{
    struct api *a = opaque;
    char *keyed;
    size_t keyed_len;
    struct job *job;
    int status = api_submit_parse(a->cfg->api_scope, &a->jconf,
                                  idempotency_key, body, len, &job, &keyed,
                                  &keyed_len, response_json);
    if (status)
        return status;
    const void *payload = keyed ? keyed : body;
    if (idempotency_key) {
        status = submit_receipt(a, job, response_json, hname, hvalue);
        if (status)
            goto out;
    }
    status = submit_produce(a, job, payload, keyed_len, idempotency_key != NULL,
                            response_json);
out:
    job_destroy(job);
    free(keyed);
    return status;
}

/* A receipt's in-flight window and life.  The op a receipt answers for
 * lives store_record_life_ms() from its last state, reached at most the
 * longest job deadline after its claim: changelog_retention_ms() (+ 1 h of
 * lag) is that bound.  Failpoint of it_api_pending_409:
 * DEDUPD_FAILPOINT_RECEIPT_PENDING_MS shortens the window.
 * @locality the thread of api_new. */
static void api_receipt_lives(const struct cfg *cfg, int64_t *pending_ms,
                              int64_t *ttl_ms)
{
    *ttl_ms = changelog_retention_ms(cfg);
    if (cfg->api_receipt_ttl_ms > *ttl_ms)
        *ttl_ms = cfg->api_receipt_ttl_ms;
    *pending_ms = API_RECEIPT_PENDING_MS;
    const char *fp = getenv("DEDUPD_FAILPOINT_RECEIPT_PENDING_MS");
    if (fp && *fp) {
        char *end;
        long long v = strtoll(fp, &end, 10);
        if (*end || v <= 0 || v > *ttl_ms)
            log_msg(LOG_WARNING, "http", "failpoint "
                    "DEDUPD_FAILPOINT_RECEIPT_PENDING_MS: '%.32s' ignored "
                    "(1..%lld ms)", fp, (long long)*ttl_ms);
        else
            *pending_ms = v;
    }
}

dd_err_t api_new(const struct cfg *cfg, const struct job_conf *jconf,
                 struct store *store, struct api **out, char *errstr,
                 size_t errstr_size)
{
    struct api *a = dd_xcalloc(1, sizeof(*a), "api");
    dd_err_t err = DD_OK;
    a->cfg = cfg;
    a->jconf = *jconf;
    a->store = store;
    atomic_init(&a->ready, false);
    api_receipt_lives(cfg, &a->receipt_pending_ms, &a->receipt_ttl_ms);
    if (cfg->api_listen[0]) {
        err = producer_new(cfg, api_dr, &a->prod, errstr, errstr_size);
        if (err)
            goto out;
        /* Failpoint of it_api_pending_409: POST /v1/jobs produces to this
         * topic (one that does not exist: its produce is never
         * acknowledged), while the run consumes topics.jobs. */
        const char *ft = getenv("DEDUPD_FAILPOINT_API_TOPIC");
        a->topic = ft && *ft ? ft : cfg->topic_jobs;
        /* Failpoint of the job API producer's reset (it_admin): a fatal
         * error before the first POST /v1/jobs. */
        const char *fp = getenv("DEDUPD_FAILPOINT_API_PRODUCER_FATAL");
        if (fp && !strcmp(fp, "1") &&
            producer_test_fatal(a->prod, "failpoint "
                                "DEDUPD_FAILPOINT_API_PRODUCER_FATAL"))
            log_msg(LOG_WARNING, "http", "failpoint: no fatal error raised");
    }
    struct http_conf hc = {
        .admin_listen = cfg->admin_listen,
        .api_listen = cfg->api_listen,
        .api_token = cfg->api_token[0] ? cfg->api_token : NULL,
        .max_body_bytes = (size_t)cfg->api_max_body_bytes,
    };
    struct http_callbacks cb = {.ready = api_ready,
                                .submit = api_submit,
                                .op = api_op,
                                .opaque = a};
    err = http_new(&hc, &cb, &a->http, errstr, errstr_size);
    if (err)
        goto out;
    log_msg(LOG_INFO, "http", "admin listener on port %u (/healthz /readyz "
            "/metrics), api listener on port %u",
            (unsigned)http_admin_port(a->http), (unsigned)http_api_port(a->http));
    metrics_gauge_set(METRICS_START_TIME_SECONDS, dd_now_ms() / 1000);
out:
    if (err) {
        api_destroy(a);
        return err;
    }
    *out = a;
    return DD_OK;
}

void api_ready_set(struct api *api, bool ready)
{
    atomic_store(&api->ready, ready);
}

void api_hurry_watch(struct api *api, const volatile sig_atomic_t *hurry)
{
    if (api)
        atomic_store(&api->hurry, hurry);
}

void api_destroy(struct api *api)
{
    if (!api)
        return;
    http_destroy(api->http);
    if (api->prod &&
        producer_flush(api->prod, api_hurried(api) ? API_HURRY_FLUSH_MS
                                                   : API_CLOSE_FLUSH_MS))
        log_msg(LOG_WARNING, "http", "api producer: messages unacknowledged at exit");
    producer_destroy(api->prod);
    free(api);
}
