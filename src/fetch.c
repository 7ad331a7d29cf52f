/* The fetch engine: the transfer state machine, its queues, the libcurl multi
 * loop on its own thread, retry timers, per-host limits and releases
 * (fetch_release).  Sessions come from the proxy pool (proxy_pool.h), the
 * easy handles are set up by fetch_easy.c (options, proxy, request, cookie
 * jar, callbacks, the SSRF guard at the libcurl boundary), and a finished
 * transfer is classified by fetch_outcome_classify() and handled by the
 * handler of its kind (on_<kind>).  See fetch.h for the contract and
 * fetch_internal.h for the shared state.
 *
 * Threads: fetch_new, fetch_destroy, fetch_submit, fetch_release,
 * fetch_take, fetch_inflight and fetch_stats_get run on their callers'
 * threads and meet the engine only under f->lock (incoming queue, release
 * requests, completion ring) or through atomics (counters).  Every static
 * function below runs on the fetch-engine thread unless its @locality says
 * otherwise; the pool belongs to it. */
#include "dd.h"
#include "fetch_internal.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "config.h"
#include "fetch_hosts.h"
#include "fetch_outcome.h"
#include "guard.h"
#include "key.h"
#include "log.h"
#include "metrics.h"
#include "proxy_pool.h"
#include "retry.h"

/* @locality fetch-engine thread */
static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* ---- ops ----------------------------------------------------------------- */

/* @locality any thread (the submitter's or the fetch-engine thread) */
static void wstep_free(struct wstep *w)
{
    free(w->url);
    free(w->method);
    for (size_t i = 0; i < w->n_headers; i++) {
        free(w->hdr_names[i]);
        free(w->hdr_values[i]);
    }
    free(w->hdr_names);
    free(w->hdr_values);
    free(w->body);
}

/* @locality any thread (the engine's, or fetch_result_destroy's caller) */
static void sres_free(struct fetch_step_result *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].final_url);
    free(v);
}

/* @locality fetch-engine thread; the submitter's for a failed submit, the
 * destroyer's for one never seen by the engine */
static void xfer_free(struct xfer *x)
{
    if (!x)
        return;
    fetch_easy_cookiefile_clear(x);
    if (x->easy)
        curl_easy_cleanup(x->easy);
    x->easy = NULL;
    fetch_easy_jar_drop(x);
    curl_slist_free_all(x->slist);
    free(x->url);
    free(x->method);
    for (size_t i = 0; i < x->n_steps; i++)
        wstep_free(&x->steps[i]);
    free(x->steps);
    sres_free(x->sres, x->n_sres);
    free(x->rbody);
    free(x->retry_after);
    free(x->etag);
    free(x->last_modified);
    free(x->content_type);
    free(x->alog);
    free(x);
}

/* The per-host limit key of \p url: its host, lower-case (any port).
 * @locality any thread (the submitter's or the fetch-engine thread) */
static void url_host_key(const char *url, char *out, size_t size)
{
    CURLU *u = curl_url();
    char *host = NULL;
    out[0] = '\0';
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        size_t i = 0;
        for (; host[i] && i + 1 < size; i++)
            out[i] = (char)tolower((unsigned char)host[i]);
        out[i] = '\0';
    }
    curl_free(host);
    curl_url_cleanup(u);
}

/* Takes ownership of \p url.
 * @locality any thread (the submitter's or the fetch-engine thread) */
static void xfer_set_url(struct xfer *x, char *url)
{
    free(x->url);
    x->url = url;
    url_host_key(url, x->host, sizeof(x->host));
}

/* Make step \p i the current request (a new run of it: no redirects yet).
 * Returns false when out of memory (fetch_submit answers DD_ERR_NOMEM; the
 * engine calls dd_oom).
 * @locality any thread (the submitter's or the fetch-engine thread) */
static bool xfer_load_step(struct xfer *x, size_t i)
{
    struct wstep *w = &x->steps[i];
    char *url = strdup(w->url);
    char *method = strdup(w->method);
    if (!url || !method) {
        free(url);
        free(method);
        return false;
    }
    x->step = i;
    xfer_set_url(x, url);
    x->orig_url = w->url;
    free(x->method);
    x->method = method;
    x->body = w->body;
    x->body_len = w->body_len;
    x->redirects = 0;
    x->step_attempts = 0;
    x->step_5xx = 0;
    return true;
}

/* The engine's xfer_load_step: out of memory is dd_oom.
 * @locality fetch-engine thread */
static void xfer_goto_step(struct xfer *x, size_t i)
{
    if (!xfer_load_step(x, i))
        dd_oom("fetch step");
}

/* ---- per-host limits ------------------------------------------------------ */

/* @locality fetch-engine thread */
static void host_release(struct xfer *x)
{
    fetch_hosts_release(x->hs);
    x->hs = NULL;
}

/* @locality fetch-engine thread */
static void host_wait_count(struct fetch *f)
{
    atomic_fetch_add(&f->st_host_waits, 1);
    metrics_add(METRICS_HOST_WAITS, 1);
}

/* Per-host limits of \p x's current target (fetch_hosts.h): the
 * concurrency cap first, then the token bucket.  Returns false when \p x
 * must wait (x->wait_slot: for a request on that host to end; else until
 * x->not_before_ms); the first wait of a run of waits is counted.  *hsp: the
 * host's slot (NULL when no limit is configured), taken when \p x starts.
 * @locality fetch-engine thread */
static bool host_gate(struct fetch *f, struct xfer *x, int64_t now,
                      struct fetch_host **hsp)
{
    int64_t wait_ms = 0;
    switch (fetch_hosts_check(f->hosts, x->host, now, hsp, &wait_ms)) {
    case FETCH_HOSTS_FULL:
        if (!x->gate_waited)
            host_wait_count(f);
        x->wait_slot = x->gate_waited = true;
        return false;
    case FETCH_HOSTS_RATE:
        if (!x->gate_waited)
            host_wait_count(f);
        x->wait_slot = false;
        x->gate_waited = true;
        x->not_before_ms = now + wait_ms;
        return false;
    case FETCH_HOSTS_GO:
    default:
        if (fetch_hosts_enabled(f->hosts))
            x->wait_slot = false;
        return true;
    }
}

/* ---- queues ---------------------------------------------------------------- */

/* A workflow between its first and last step: bound to its session.
 * @locality fetch-engine thread */
static bool wf_midway(const struct xfer *x)
{
    return x->workflow && x->step > 0;
}

/* Restarting re-sends every step: only when each is safe or the job allows.
 * @locality fetch-engine thread */
static bool wf_restartable(const struct xfer *x)
{
    return x->workflow && (x->safe || x->replayable);
}

/* What \p x asks of the pool (DESIGN.md section 3: the job's country and
 * rotation select a provider's sessions).
 * @locality fetch-engine thread */
static struct proxy_pool_want xfer_want(const struct xfer *x, bool rotate)
{
    return (struct proxy_pool_want){.country = x->country,
                                    .rotation = x->rotation,
                                    .current = x->session,
                                    .rotate = rotate};
}

/* When a session can take \p x's next request: the first that could serve
 * it, or the one it is bound to mid-way through a workflow (\p now when one
 * is free now).
 * @locality fetch-engine thread */
static int64_t xfer_free_at(struct fetch *f, const struct xfer *x, int64_t now)
{
    if (x->session >= 0 && wf_midway(x) && !x->need_rotate)
        return proxy_pool_session_free_at(f->pool, x->session, now);
    struct proxy_pool_want w = xfer_want(x, false);
    return proxy_pool_free_at(f->pool, &w, now);
}

/* The earliest time a retry of \p x can start as things stand: its own
 * not_before, or later when every session that could serve it cools down
 * (or the one it is bound to mid-way does).  The caller makes it the op's
 * not_before, so what the store records is never earlier than the start.
 * @locality fetch-engine thread */
static int64_t retry_not_before(struct fetch *f, const struct xfer *x)
{
    int64_t t = xfer_free_at(f, x, dd_now_ms());
    return t > x->not_before_ms ? t : x->not_before_ms;
}

/* When \p x may retry after a backoff of \p delay_ms (retry.h retry_plan):
 * once a session can serve it (*free_at) and before its deadline.  No side
 * effects.
 * @locality fetch-engine thread */
static enum retry_plan retry_when(struct fetch *f, const struct xfer *x,
                                  int64_t delay_ms, int64_t *at,
                                  int64_t *free_at)
{
    int64_t now = dd_now_ms();
    *free_at = xfer_free_at(f, x, now);
    return retry_plan(now, delay_ms, *free_at, x->deadline_ms, at);
}

/* @locality fetch-engine thread */
static void waiting_push(struct fetch *f, struct xfer *x)
{
    /* An op back in the queue after a failed attempt waits for a retry:
     * tell the hook once per failed attempt (a released op waits for no
     * retry: the launcher ends it). */
    if (f->retry_cb && x->n_alog > x->noted_alog && !x->released) {
        const struct fetch_attempt *a = &x->alog[x->n_alog - 1];
        if (a->ended_at_ms && a->category[0]) {
            x->noted_alog = x->n_alog;
            x->retry_noted = true;
            metrics_add(METRICS_RETRY_WAITS, 1);
            /* The time reported is the one kept: the launcher does not
             * start the retry earlier even if a session frees up sooner. */
            x->not_before_ms = retry_not_before(f, x);
            f->retry_cb(f->retry_opaque, x->opaque, FETCH_RETRY_WAIT,
                        x->not_before_ms, (uint32_t)x->n_alog, a);
        }
    }
    x->next = NULL;
    x->state = XF_WAITING;
    *f->waiting_tailp = x;
    f->waiting_tailp = &x->next;
}

/* Take *pp (an op of the waiting list) out of the list.
 * @locality fetch-engine thread */
static void waiting_unlink(struct fetch *f, struct xfer **pp)
{
    struct xfer *x = *pp;
    *pp = x->next;
    if (f->waiting_tailp == &x->next)
        f->waiting_tailp = pp;
    x->next = NULL;
}

/* Put \p x back where waiting_unlink(f, pp) took it from.
 * @locality fetch-engine thread */
static void waiting_relink(struct fetch *f, struct xfer **pp, struct xfer *x)
{
    x->next = *pp;
    *pp = x;
    if (f->waiting_tailp == pp)
        f->waiting_tailp = &x->next;
}

/* Count a rotation of \p x (a new session or a new exit of its session).
 * @locality fetch-engine thread */
static void rotation_count(struct fetch *f, struct xfer *x, bool fresh_connect)
{
    x->rotations++;
    if (fresh_connect)
        x->fresh_connect = true;
    atomic_fetch_add(&f->st_rotations, 1);
    metrics_add(METRICS_ROTATIONS, 1);
}

/* Move \p x to another session after its session failed it, when the pool
 * has one free now (else \p x stays and its next launch picks).
 * @locality fetch-engine thread */
static void rotate_away(struct fetch *f, struct xfer *x, bool fresh_connect)
{
    int next = -1;
    int64_t wait_until = 0;
    struct proxy_pool_want w = xfer_want(x, true);
    if (proxy_pool_pick(f->pool, &w, dd_now_ms(), &next, &wait_until) ==
            PROXY_POOL_PICKED &&
        next != x->session) {
        x->session = next;
        rotation_count(f, x, fresh_connect);
    }
}

/* ---- attempts ---------------------------------------------------------------- */

static void finish(struct fetch *f, struct xfer *x, bool ok, long status,
                   const char *category, const char *error);

/* Close the current attempt record with its outcome (first close wins).
 * @locality fetch-engine thread */
static void att_close(struct xfer *x, long status, const char *category,
                      const char *error)
{
    if (!x->n_alog)
        return;
    struct fetch_attempt *a = &x->alog[x->n_alog - 1];
    if (a->ended_at_ms)
        return;
    a->ended_at_ms = dd_now_ms();
    a->status = status;
    a->bytes = x->rlen;
    snprintf(a->category, sizeof(a->category), "%s", category ? category : "");
    snprintf(a->error, sizeof(a->error), "%s", error ? error : "");
    metrics_fetch_attempt(a->category,
                          (double)(a->ended_at_ms - a->started_at_ms) / 1000.0);
    metrics_add(METRICS_FETCHED_BYTES, a->bytes);
    if (x->easy) {
        char *ip = NULL;
        long port = 0;
        curl_easy_getinfo(x->easy, CURLINFO_PRIMARY_IP, &ip);
        curl_easy_getinfo(x->easy, CURLINFO_PRIMARY_PORT, &port);
        if (ip && *ip)
            snprintf(a->exit_addr, sizeof(a->exit_addr), "%s:%ld", ip, port);
    }
}

/* Open the attempt record of a new attempt (a redirect hop keeps the record
 * of its attempt).
 * @locality fetch-engine thread */
static void att_open(struct xfer *x, const char *session_name)
{
    if (x->n_alog && !x->alog[x->n_alog - 1].ended_at_ms)
        return;
    if (x->n_alog == x->cap_alog) {
        x->cap_alog = x->cap_alog ? x->cap_alog * 2 : 4;
        x->alog = dd_xrealloc(x->alog, x->cap_alog * sizeof(*x->alog),
                              "attempt log");
    }
    struct fetch_attempt *a = &x->alog[x->n_alog++];
    memset(a, 0, sizeof(*a));
    a->started_at_ms = dd_now_ms();
    a->step = (uint32_t)x->step;
    snprintf(a->session, sizeof(a->session), "%s", session_name);
}

/* @locality fetch-engine thread */
static void unpin(struct fetch *f, struct xfer *x)
{
    if (x->pin >= 0) {
        proxy_pool_unpin(f->pool, x->pin);
        x->pin = -1;
    }
}

/* Attach \p x to the running list and the multi handle.
 * @locality fetch-engine thread */
static void running_add(struct fetch *f, struct xfer *x)
{
    x->state = XF_RUNNING;
    f->running++;
    x->run_prev = NULL;
    x->run_next = f->run_head;
    if (f->run_head)
        f->run_head->run_prev = x;
    f->run_head = x;
    curl_multi_add_handle(f->multi, x->easy);
}

/* Detach \p x (its transfer finished) from the running list, its host slot
 * and the multi handle.
 * @locality fetch-engine thread */
static void running_remove(struct fetch *f, struct xfer *x)
{
    f->running--;
    host_release(x);
    if (x->run_prev)
        x->run_prev->run_next = x->run_next;
    else
        f->run_head = x->run_next;
    if (x->run_next)
        x->run_next->run_prev = x->run_prev;
    x->run_prev = x->run_next = NULL;
    curl_multi_remove_handle(f->multi, x->easy);
}

/* Start an attempt of \p x's current request through x->session (may finish
 * and free \p x: a refused target).
 * @locality fetch-engine thread */
static void start_attempt(struct fetch *f, struct xfer *x, int64_t now)
{
    if (x->retry_noted) {
        x->retry_noted = false;
        f->retry_cb(f->retry_opaque, x->opaque, FETCH_RETRY_START, now,
                    (uint32_t)x->n_alog, NULL);
    }
    if (fetch_easy_target_refused(f, x->url)) {
        finish(f, x, false, 0, "forbidden_target",
               "target address is loopback, link-local or private and not in "
               "fetch.allow_targets");
        return;
    }
    fetch_easy_setup(f, x, now);
    x->attempts++;
    x->step_attempts++;
    att_open(x, proxy_pool_session_name(f->pool, x->session));
    proxy_pool_acquire(f->pool, x->session);
    atomic_fetch_add(&f->st_attempts, 1);
    running_add(f, x);
}

/* ---- results ------------------------------------------------------------------ */

/* Schedule \p x again for a retry after \p delay_ms, when the attempt cap
 * permits and a session can serve it before its deadline (retry_when).
 * Returns RETRY_PLAN_AT when queued; else why not (the attempt cap counts as
 * RETRY_PLAN_PAST_DEADLINE: the op fails with its attempt's category), and
 * *free_at: when the first session can serve it.
 * @locality fetch-engine thread */
static enum retry_plan schedule_retry(struct fetch *f, struct xfer *x,
                                      int64_t delay_ms, int64_t *free_at)
{
    int64_t at = 0;
    *free_at = 0;
    if ((int64_t)x->step_attempts >= f->cfg->fetch_max_attempts)
        return RETRY_PLAN_PAST_DEADLINE;
    enum retry_plan p = retry_when(f, x, delay_ms, &at, free_at);
    if (p != RETRY_PLAN_AT)
        return p;
    x->not_before_ms = at;
    waiting_push(f, x);
    return RETRY_PLAN_AT;
}

/* @locality fetch-engine thread */
static struct fetch_result *result_from(struct xfer *x)
{
    struct fetch_result *r = dd_xcalloc(1, sizeof(*r), "fetch result");
    r->opaque = x->opaque;
    r->attempts = x->attempts;
    r->rotations = x->rotations;
    r->throttled = x->throttled;
    r->restarts = x->restarts;
    r->fetched_at_ms = dd_now_ms();
    if (x->session >= 0) {
        struct proxy_pool_session_info s;
        proxy_pool_session_get(x->f->pool, x->session, &s);
        snprintf(r->session, sizeof(r->session), "%s", s.name);
        r->session_rotates_at_ms = s.rotates_at_ms;
    }
    return r;
}

/* Failures after the status line whose body is cut short: never publish
 * that partial body.  Nor the proxy's own answer (407 page, CONNECT
 * refusal): it is not the origin's.
 * @locality fetch-engine thread */
static bool category_partial(const char *category)
{
    return category && (!strcmp(category, "too_large") ||
                        !strcmp(category, "timeout") ||
                        !strcmp(category, "connect") ||
                        !strcmp(category, "protocol") ||
                        !strcmp(category, "canceled") ||
                        !strcmp(category, "proxy_auth") ||
                        !strcmp(category, "proxy_connect"));
}

/* Record the outcome of the current workflow step (this run).
 * @locality fetch-engine thread */
static void sres_record(struct xfer *x, long status, const char *category)
{
    if (!x->workflow)
        return;
    if (!x->sres)
        x->sres = dd_xcalloc(x->n_steps, sizeof(*x->sres), "workflow steps");
    if (x->n_sres >= x->n_steps)
        return;
    struct fetch_step_result *sr = &x->sres[x->n_sres++];
    sr->status = status;
    sr->final_url = x->url ? dd_xstrdup(x->url, "workflow steps") : NULL;
    sr->bytes = x->rlen;
    if (status && (!category || !category_partial(category)) && x->rbody)
        key_sha256_hex(x->rbody, x->rlen, sr->body_sha256);
    else if (status && (!category || !category_partial(category)))
        key_sha256_hex("", 0, sr->body_sha256);
    sr->attempts = x->step_attempts;
    snprintf(sr->category, sizeof(sr->category), "%s", category ? category : "");
    if (x->session >= 0)
        snprintf(sr->session, sizeof(sr->session), "%s",
                 proxy_pool_session_name(x->f->pool, x->session));
    if (x->n_alog)
        snprintf(sr->exit_addr, sizeof(sr->exit_addr), "%s",
                 x->alog[x->n_alog - 1].exit_addr);
    sr->ended_at_ms = dd_now_ms();
}

/* Hand \p r to the completion ring (fetch_take).
 * @locality fetch-engine thread */
static void done_push(struct fetch *f, struct fetch_result *r)
{
    pthread_mutex_lock(&f->lock);
    if (f->done_n == f->done_cap) {
        size_t cap = f->done_cap ? f->done_cap * 2 : 256;
        struct fetch_result **d = dd_xmalloc(cap * sizeof(*d), "completion ring");
        for (size_t i = 0; i < f->done_n; i++)
            d[i] = f->done[(f->done_head + i) % f->done_cap];
        free(f->done);
        f->done = d;
        f->done_head = 0;
        f->done_cap = cap;
    }
    f->done[(f->done_head + f->done_n) % f->done_cap] = r;
    f->done_n++;
    pthread_cond_signal(&f->done_cond);
    pthread_mutex_unlock(&f->lock);
}

/* The op is over: its result (returned; not yet in the completion ring)
 * takes what \p x holds and \p x is freed.  The body and its headers go
 * with a final answer or a failure with a status and a complete body.
 * @locality fetch-engine thread */
static struct fetch_result *finish_result(struct fetch *f, struct xfer *x,
                                          bool ok, long status,
                                          const char *category,
                                          const char *error)
{
    att_close(x, status, ok ? NULL : category, ok ? NULL : error);
    sres_record(x, status, ok ? NULL : category);
    unpin(f, x);
    host_release(x);
    struct fetch_result *r = result_from(x);
    r->attempt_log = x->alog;
    r->n_attempt_log = x->n_alog;
    x->alog = NULL;
    x->n_alog = x->cap_alog = 0;
    if (x->workflow) {
        r->steps = x->sres;
        r->n_steps = x->n_sres;
        r->n_steps_total = x->n_steps;
        x->sres = NULL;
        x->n_sres = 0;
    }
    r->ok = ok;
    r->status = status;
    if (!ok) {
        r->category = dd_xstrdup(category, "fetch result");
        r->error = dd_xstrdup(error ? error : category, "fetch result");
    }
    r->final_url = dd_xstrdup(x->url, "fetch result");
    if (ok || (status && !category_partial(category))) {
        r->body = x->rbody;
        r->body_len = x->rlen;
        if (r->body)
            r->body[r->body_len] = '\0';
        x->rbody = NULL;
        x->rlen = x->rcap = 0;
        r->content_type = x->content_type, x->content_type = NULL;
        r->etag = x->etag, x->etag = NULL;
        r->last_modified = x->last_modified, x->last_modified = NULL;
    }
    xfer_free(x);
    return r;
}

/* The op is over: its result goes to the completion ring and \p x is freed.
 * @locality fetch-engine thread */
static void finish(struct fetch *f, struct xfer *x, bool ok, long status,
                   const char *category, const char *error)
{
    bool released = x->released; /* finish_result frees x */
    struct fetch_result *r = finish_result(f, x, ok, status, category, error);
    if (r->body)
        key_sha256_hex(r->body, r->body_len, r->body_sha256);
    if (f->done_cb && !released)
        f->done_cb(f->done_opaque, r->opaque, r);
    atomic_fetch_add(ok ? &f->st_completed : &f->st_failed, 1);
    done_push(f, r);
}

/* The op was released (fetch_release) and makes no further attempt: it ends
 * now, released, with no body; status is its last attempt's (0 if none) and
 * not_before_ms when its next attempt could have started (0: at once).  An
 * attempt still open (its redirect hop was next) closes as "released".
 * @locality fetch-engine thread */
static void release_end(struct fetch *f, struct xfer *x)
{
    int64_t now = dd_now_ms();
    int64_t not_before = x->not_before_ms > now ? x->not_before_ms : 0;
    char msg[128];
    snprintf(msg, sizeof(msg), "released after %u attempt%s: no further "
             "request", x->attempts, x->attempts == 1 ? "" : "s");
    long status = 0;
    if (x->n_alog) {
        if (!x->alog[x->n_alog - 1].ended_at_ms && x->easy) {
            curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
            att_close(x, status, "released", msg);
        }
        status = x->alog[x->n_alog - 1].status;
    }
    log_msg(LOG_DEBUG, "fetch", "%s: %s", x->orig_url, msg);
    struct fetch_result *r = finish_result(f, x, false, 0, "released", msg);
    r->released = true;
    r->status = status;
    r->not_before_ms = not_before;
    atomic_fetch_add(&f->st_released, 1);
    done_push(f, r);
}

/* No session can serve \p x before its deadline (retry.h
 * RETRY_PLAN_NO_SESSION): every one that could cools down, for a Retry-After
 * or after a proxy failure, until \p free_at or later.  The op fails now with
 * "throttled" rather than wait past its deadline (DESIGN.md section 5); the
 * sessions keep their cooldowns.  The attempt that just failed, when still
 * open, keeps what the server asked for (its Retry-After).
 * @locality fetch-engine thread */
static void fail_no_session(struct fetch *f, struct xfer *x, long status,
                            const char *category, const char *error,
                            int64_t free_at)
{
    int64_t now = dd_now_ms();
    char asked[160] = "", msg[FETCH_OUTCOME_ERROR_SIZE + 320];
    if (x->asked_wait_ms >= 0)
        snprintf(asked, sizeof(asked), "HTTP %ld: the server asked to wait "
                 "%lld ms (Retry-After: %.64s)", status,
                 (long long)x->asked_wait_ms, x->retry_after ? x->retry_after : "");
    snprintf(msg, sizeof(msg), "%s; no session can serve the op before its "
             "deadline (in %lld ms): the first is free in %lld ms",
             asked[0] ? asked : error, (long long)(x->deadline_ms - now),
             (long long)(free_at - now));
    att_close(x, status, category, msg); /* when the attempt is still open */
    log_msg(LOG_INFO, "fetch", "%s: %s", x->orig_url, msg);
    finish(f, x, false, status, "throttled", msg);
}

/* @locality fetch-engine thread */
static void fail_or_retry(struct fetch *f, struct xfer *x, long status,
                          const char *category, const char *error,
                          bool retryable)
{
    int64_t at = 0, free_at = 0;
    enum retry_plan p = RETRY_PLAN_PAST_DEADLINE;
    int64_t d = 0;
    if (retryable && (int64_t)x->step_attempts < f->cfg->fetch_max_attempts) {
        d = retry_backoff_ms((int)x->step_attempts - 1,
                             f->cfg->fetch_backoff_base_ms,
                             f->cfg->fetch_backoff_max_ms, xorshift(&f->rnd));
        p = retry_when(f, x, d, &at, &free_at);
    }
    if (p == RETRY_PLAN_NO_SESSION) {
        fail_no_session(f, x, status, category, error, free_at);
        return;
    }
    att_close(x, status, category, error);
    if (p == RETRY_PLAN_AT && x->released) {
        /* released while the attempt ran: no retry; not_before as a WAIT
         * would have reported it */
        x->not_before_ms = at;
        x->not_before_ms = retry_not_before(f, x);
        release_end(f, x);
        return;
    }
    if (p == RETRY_PLAN_AT) {
        x->not_before_ms = at;
        waiting_push(f, x);
        log_msg(LOG_DEBUG, "fetch", "retry %s in %lld ms after %s",
                x->orig_url, (long long)(at - dd_now_ms()), category);
        return;
    }
    finish(f, x, false, status, category, error);
}

/* A session failure during a workflow (an attempt still open is closed with
 * it): the partial run is discarded and the workflow restarts from its first
 * step on another session when it may (wf_restartable, restarts left, a
 * session free before the deadline); otherwise it fails with \p category, or
 * "throttled" when only cooldowns stand in the way (fail_no_session).
 * @locality fetch-engine thread */
static void wf_restart_or_fail(struct fetch *f, struct xfer *x, long status,
                               const char *category, const char *error)
{
    if (!wf_restartable(x) ||
        (int64_t)x->restarts >= f->cfg->fetch_workflow_max_restarts) {
        finish(f, x, false, status, category, error);
        return;
    }
    int64_t d = retry_backoff_ms((int)x->restarts, f->cfg->fetch_backoff_base_ms,
                                 f->cfg->fetch_backoff_max_ms, xorshift(&f->rnd));
    /* The restart may go to any session that serves the op. */
    struct proxy_pool_want w = xfer_want(x, false);
    int64_t now = dd_now_ms(), at = 0;
    int64_t free_at = proxy_pool_free_at(f->pool, &w, now);
    enum retry_plan p = retry_plan(now, d, free_at, x->deadline_ms, &at);
    if (p == RETRY_PLAN_NO_SESSION) {
        fail_no_session(f, x, status, category, error, free_at);
        return;
    }
    if (p != RETRY_PLAN_AT) {
        finish(f, x, false, status, category, error);
        return;
    }
    att_close(x, status, category, error);
    if (x->released) {
        /* released while the step ran: no restart */
        x->not_before_ms = at;
        release_end(f, x);
        return;
    }
    log_msg(LOG_INFO, "fetch",
            "workflow %s: %s at step %zu of %zu through %s; restarting from "
            "the first step (on another session when one is free)",
            x->steps[0].url, category,
            x->step + 1, x->n_steps,
            x->session >= 0 ? proxy_pool_session_name(f->pool, x->session) : "-");
    x->restarts++;
    atomic_fetch_add(&f->st_restarts, 1);
    metrics_add(METRICS_WORKFLOW_RESTARTS, 1);
    unpin(f, x);
    sres_free(x->sres, x->n_sres);
    x->sres = NULL;
    x->n_sres = 0;
    fetch_easy_jar_drop(x);
    xfer_goto_step(x, 0);
    fetch_easy_reset_response(x);
    x->rlen = 0;
    x->need_rotate = (int64_t)x->rotations < f->cfg->fetch_max_rotations;
    x->fresh_connect = true;
    x->not_before_ms = at;
    waiting_push(f, x);
}

/* A step answered: the workflow goes on with its next step on the same
 * session, or the op is done.
 * @locality fetch-engine thread */
static void step_ok(struct fetch *f, struct xfer *x, long status)
{
    if (!x->workflow || x->step + 1 >= x->n_steps) {
        finish(f, x, true, status, NULL, NULL);
        return;
    }
    att_close(x, status, NULL, NULL);
    sres_record(x, status, NULL);
    if (x->pin < 0 && x->session >= 0) {
        /* From here the workflow is bound to this session (and its exit). */
        struct proxy_pool_session_info s;
        proxy_pool_session_get(f->pool, x->session, &s);
        x->pin = x->session;
        proxy_pool_pin(f->pool, x->session);
        x->run_renewals = s.renewals;
        x->run_epoch = s.epoch;
    }
    xfer_goto_step(x, x->step + 1);
    fetch_easy_reset_response(x);
    x->rlen = 0;
    x->not_before_ms = 0;
    waiting_push(f, x);
}

/* ---- outcome handlers: one per fetch_outcome_kind ------------------------------- */

/* Report the attempt's end through x->session to the pool ("free peer").
 * @locality fetch-engine thread */
static void session_report(struct fetch *f, struct xfer *x,
                           enum proxy_pool_verdict verdict, const char *detail,
                           struct proxy_pool_effect *effect)
{
    struct proxy_pool_outcome o = {.verdict = verdict,
                                   .retry_after = x->retry_after,
                                   .detail = detail};
    proxy_pool_report(f->pool, x->session, &o, dd_now_ms(), effect);
}

/* A final answer: the step (or the op) is done.
 * @locality fetch-engine thread */
static void on_answer(struct fetch *f, struct xfer *x, const struct fetch_outcome *o)
{
    session_report(f, x, PROXY_POOL_OK, NULL, NULL);
    step_ok(f, x, o->status);
}

/* A redirect, followed by hand: capped, http(s) only, through the SSRF
 * guard; a hop is part of the same attempt and passes the per-host limits
 * of its target like any request.
 * @locality fetch-engine thread */
static void on_redirect(struct fetch *f, struct xfer *x, const struct fetch_outcome *o)
{
    long status = o->status;
    char *loc = NULL;
    session_report(f, x, PROXY_POOL_OK, NULL, NULL);
    curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &loc);
    if ((int64_t)x->redirects >= f->cfg->fetch_max_redirects) {
        finish(f, x, false, status, "redirect_loop", "too many redirects");
        return;
    }
    if (strncasecmp(loc, "http://", 7) && strncasecmp(loc, "https://", 8)) {
        finish(f, x, false, status, "forbidden_target",
               "redirect to a scheme other than http or https");
        return;
    }
    if (fetch_easy_target_refused(f, loc)) {
        finish(f, x, false, status, "forbidden_target",
               "redirect to a loopback, link-local or private "
               "address not in fetch.allow_targets");
        return;
    }
    x->redirects++;
    xfer_set_url(x, dd_xstrdup(loc, "redirect url"));
    if (status == 303 || ((status == 301 || status == 302) &&
                          strcmp(x->method, "GET") && strcmp(x->method, "HEAD"))) {
        free(x->method);
        x->method = dd_xstrdup("GET", "redirect method");
        x->body = NULL;
        x->body_len = 0;
    }
    x->attempts--;
    x->step_attempts--;
    x->not_before_ms = 0;
    waiting_push(f, x);
}

/* 4xx: the origin's final word.
 * @locality fetch-engine thread */
static void on_client_error(struct fetch *f, struct xfer *x,
                            const struct fetch_outcome *o)
{
    session_report(f, x, PROXY_POOL_OK, NULL, NULL);
    finish(f, x, false, o->status, o->category, o->error);
}

/* 5xx: retried when safe; mid-way through a workflow, retried on the same
 * session (fetch.workflow_step_retries), then a restart.
 * @locality fetch-engine thread */
static void on_server_error(struct fetch *f, struct xfer *x,
                            const struct fetch_outcome *o)
{
    session_report(f, x, PROXY_POOL_FAILED, NULL, NULL);
    if (wf_midway(x)) {
        if (x->safe && (int64_t)x->step_5xx < f->cfg->fetch_workflow_step_retries) {
            x->step_5xx++;
            fail_or_retry(f, x, o->status, o->category, o->error, true);
        } else {
            wf_restart_or_fail(f, x, o->status, o->category, o->error);
        }
        return;
    }
    fail_or_retry(f, x, o->status, o->category, o->error, x->safe);
}

/* A blocked status (429...): the session cools down for Retry-After and the
 * op moves to a new exit (its session's, through the provider API, or
 * another session) and retries; a blocked answer is never final.
 * @locality fetch-engine thread */
static void on_blocked(struct fetch *f, struct xfer *x, const struct fetch_outcome *o)
{
    struct proxy_pool_effect e;
    session_report(f, x, PROXY_POOL_THROTTLED, NULL, &e);
    x->asked_wait_ms = e.requested_ms;
    x->throttled++;
    atomic_fetch_add(&f->st_throttled, 1);
    log_msg(LOG_INFO, "fetch",
            "HTTP %ld from %s through %s: session cools down %lld ms",
            o->status, x->orig_url, proxy_pool_session_name(f->pool, x->session),
            (long long)e.cooldown_ms);
    if (wf_midway(x)) {
        if (wf_restartable(x)) {
            wf_restart_or_fail(f, x, o->status, o->category, o->error);
        } else {
            /* Bound to this exit: wait out its Retry-After and send the
             * step again (a blocked request was not acted on). */
            fail_or_retry(f, x, o->status, o->category, o->error, true);
        }
        return;
    }
    if ((int64_t)x->rotations < f->cfg->fetch_max_rotations &&
        (int64_t)x->step_attempts < f->cfg->fetch_max_attempts &&
        !x->released) {
        /* The provider moves this session to another exit: the op keeps
         * its session (and the old exit's cooldown no longer applies); a
         * fresh tunnel follows.  Else another session, if one is free.
         * Not after the last attempt: no attempt would use it (whether a
         * free session was there decided the count before). */
        if (proxy_pool_renew(f->pool, x->session, "blocked status"))
            rotation_count(f, x, true);
        else if (proxy_pool_size(f->pool) > 1)
            rotate_away(f, x, true);
    }
    /* Backoff is short: the cooldown keeps the old exit out, and the op
     * waits for Retry-After only if no other session is free. */
    fail_or_retry(f, x, o->status, o->category, o->error, true);
}

/* 407 or a SOCKS authentication rejection: the pool suspends the session's
 * credential set and retires the session; the op moves to a session of
 * another credential set, else fails.  Nothing reached the origin.
 * @locality fetch-engine thread */
static void on_proxy_auth(struct fetch *f, struct xfer *x,
                          const struct fetch_outcome *o)
{
    int64_t now = dd_now_ms();
    long status = o->status;
    att_close(x, status, "proxy_auth", o->error);
    /* Every path below ends the op's binding to the session (finish or a
     * restart), so it does not keep the session from its retirement. */
    unpin(f, x);
    struct proxy_pool_outcome po = {.verdict = PROXY_POOL_AUTH_FAILED,
                                    .detail = o->error};
    struct proxy_pool_effect e;
    proxy_pool_report(f->pool, x->session, &po, now, &e);
    if (e.suspended) {
        atomic_fetch_add(&f->st_auth_suspensions, 1);
        metrics_add(METRICS_PROXY_AUTH_SUSPENSIONS, 1);
    }
    x->fresh_connect = true;
    if (wf_midway(x) && !wf_restartable(x)) {
        finish(f, x, false, status, "proxy_auth", o->error);
        return;
    }
    struct proxy_pool_want w = xfer_want(x, false);
    if ((int64_t)x->rotations >= f->cfg->fetch_max_rotations ||
        !proxy_pool_other_credentials(f->pool, x->session, &w, now)) {
        char msg[FETCH_OUTCOME_ERROR_SIZE + 64];
        snprintf(msg, sizeof(msg), "%s; no session of another credential set "
                 "is available", o->error);
        finish(f, x, false, status, "proxy_auth", msg);
        return;
    }
    if (wf_midway(x)) {
        wf_restart_or_fail(f, x, status, "proxy_auth", o->error);
        return;
    }
    x->need_rotate = true;
    int64_t free_at;
    enum retry_plan p = schedule_retry(f, x, 0, &free_at);
    if (p == RETRY_PLAN_NO_SESSION)
        fail_no_session(f, x, status, "proxy_auth", o->error, free_at);
    else if (p != RETRY_PLAN_AT)
        finish(f, x, false, status, "proxy_auth", o->error);
}

/* The HTTP proxy refused CONNECT: retried whatever the method (nothing was
 * sent); a restartable workflow mid-way leaves the proxy (it cools down).
 * @locality fetch-engine thread */
static void on_connect_refused(struct fetch *f, struct xfer *x,
                               const struct fetch_outcome *o)
{
    bool leave = wf_midway(x) && wf_restartable(x);
    session_report(f, x, leave ? PROXY_POOL_PROXY_DOWN : PROXY_POOL_FAILED,
                   NULL, NULL);
    if (leave) {
        wf_restart_or_fail(f, x, o->status, o->category, o->error);
        return;
    }
    fail_or_retry(f, x, o->status, o->category, o->error, true);
}

/* No usable answer.  Retried per o->retry (terminal: never; before sending:
 * always; else when safe).  An unusable proxy cools down and the op moves
 * elsewhere; a workflow mid-way restarts when it may.
 * @locality fetch-engine thread */
static void on_transport(struct fetch *f, struct xfer *x,
                         const struct fetch_outcome *o)
{
    bool midway = wf_midway(x);
    bool terminal = o->retry == FETCH_OUTCOME_RETRY_NEVER;
    bool retry = terminal ? false
                          : o->retry == FETCH_OUTCOME_RETRY_ANY ? true : x->safe;
    bool proxy_down = !strcmp(o->category, "proxy_connect") &&
                      (midway ? wf_restartable(x) : proxy_pool_size(f->pool) > 1);
    session_report(f, x, proxy_down ? PROXY_POOL_PROXY_DOWN : PROXY_POOL_FAILED,
                   NULL, NULL);
    if (midway && !terminal) {
        /* The bound session failed under the workflow. */
        if (wf_restartable(x)) {
            wf_restart_or_fail(f, x, o->status, o->category, o->error);
            return;
        }
        fail_or_retry(f, x, o->status, o->category, o->error, retry);
        return;
    }
    if (proxy_down)
        rotate_away(f, x, false); /* the exit is unusable: move elsewhere */
    fail_or_retry(f, x, o->status, o->category, o->error, retry);
}

/* A SOCKS exit reached out for the target and reported it unreachable
 * (fetch_outcome.h): the target's failure.  The session keeps its health
 * (no error, no cooldown, no rotation) and the op retries like a direct
 * "dns" or "connect" failure, on the same session; a workflow mid-way
 * retries its step there (its session did nothing wrong).
 * @locality fetch-engine thread */
static void on_target_unreachable(struct fetch *f, struct xfer *x,
                                  const struct fetch_outcome *o)
{
    session_report(f, x, PROXY_POOL_TARGET_FAILED, NULL, NULL);
    fail_or_retry(f, x, o->status, o->category, o->error,
                  o->retry != FETCH_OUTCOME_RETRY_NEVER);
}

typedef void outcome_handler(struct fetch *f, struct xfer *x,
                             const struct fetch_outcome *o);

static outcome_handler *const outcome_handlers[FETCH_OUTCOME_KINDS] = {
    [FETCH_OUTCOME_ANSWER] = on_answer,
    [FETCH_OUTCOME_REDIRECT] = on_redirect,
    [FETCH_OUTCOME_CLIENT_ERROR] = on_client_error,
    [FETCH_OUTCOME_SERVER_ERROR] = on_server_error,
    [FETCH_OUTCOME_BLOCKED] = on_blocked,
    [FETCH_OUTCOME_PROXY_AUTH] = on_proxy_auth,
    [FETCH_OUTCOME_CONNECT_REFUSED] = on_connect_refused,
    [FETCH_OUTCOME_TRANSPORT] = on_transport,
    [FETCH_OUTCOME_TARGET_UNREACHABLE] = on_target_unreachable,
};

/* The facts of \p x's finished transfer (fetch_outcome.h).
 * @locality fetch-engine thread */
static void facts_read(struct fetch *f, struct xfer *x, CURLcode res,
                       struct fetch_facts *fa)
{
    memset(fa, 0, sizeof(*fa));
    fa->result = res;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &fa->status);
    curl_easy_getinfo(x->easy, CURLINFO_HTTP_CONNECTCODE, &fa->connect_code);
    if (res == CURLE_PROXY)
        curl_easy_getinfo(x->easy, CURLINFO_PROXY_ERROR, &fa->proxy_error);
    char *loc = NULL;
    curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &loc);
    fa->has_location = loc != NULL;
    fa->proxied = x->proxied;
    if (x->proxied) {
        struct proxy_pool_session_info s;
        proxy_pool_session_get(f->pool, x->session, &s);
        fa->target_name_to_proxy = fetch_outcome_name_to_proxy(s.proxy, x->host);
    }
    fa->too_large = x->too_large;
    fa->refused_target = x->refused_target;
    fa->headers_too_large = x->headers_too_large;
    fa->curl_error = x->errbuf;
    fa->blocked = f->blocked;
    fa->n_blocked = f->n_blocked;
}

/* A transfer finished: classify it (pure), then run its kind's handler.
 * @locality fetch-engine thread */
static void on_done(struct fetch *f, struct xfer *x, CURLcode res)
{
    running_remove(f, x);
    curl_off_t dl = 0;
    curl_easy_getinfo(x->easy, CURLINFO_SIZE_DOWNLOAD_T, &dl);
    atomic_fetch_add(&f->st_bytes, (uint64_t)dl);
    struct fetch_facts facts;
    facts_read(f, x, res, &facts);
    struct fetch_outcome o;
    fetch_outcome_classify(&facts, &o);
    outcome_handlers[o.kind](f, x, &o);
}

/* ---- launcher ------------------------------------------------------------------ */

/* What the launcher did with a waiting op. */
enum launch {
    LAUNCH_WAIT,   /* it stays where it is in the waiting list */
    LAUNCH_GONE,   /* started, finished, or queued again (at the tail) */
    LAUNCH_GO,     /* (session choice) start it */
};

/* A workflow mid-way keeps its session: no rotation mid-way.  It restarts
 * (or fails) when the session's exit changed under it, its credential set
 * is suspended or it cools down; else it waits for the cooldown.
 * @locality fetch-engine thread */
static enum launch bound_session(struct fetch *f, struct xfer *x, int64_t now)
{
    struct proxy_pool_session_info b;
    proxy_pool_refresh(f->pool, x->session, now);
    proxy_pool_session_get(f->pool, x->session, &b);
    if (b.renewals != x->run_renewals || b.epoch != x->run_epoch) {
        if (wf_restartable(x)) {
            wf_restart_or_fail(f, x, 0, "connect",
                               "the session's exit changed mid-way (rotation)");
            return LAUNCH_GONE;
        }
        log_msg(LOG_NOTICE, "fetch",
                "workflow %s: session %s changed exit mid-way; the "
                "workflow is not replayable and goes on", x->steps[0].url,
                b.name);
        x->run_renewals = b.renewals;
        x->run_epoch = b.epoch;
    }
    if (b.suspended_until_ms > now) {
        if (wf_restartable(x))
            wf_restart_or_fail(f, x, 0, "proxy_auth",
                               "the session's credential set is suspended");
        else
            finish(f, x, false, 0, "proxy_auth",
                   "the session's credential set is suspended");
        return LAUNCH_GONE;
    }
    if (b.cooldown_until_ms > now && wf_restartable(x)) {
        /* Its exit is blocked (another op met a blocked status there):
         * start again elsewhere rather than wait. */
        wf_restart_or_fail(f, x, 429, "throttled",
                           "the workflow's session is cooling down "
                           "after a blocked status");
        return LAUNCH_GONE;
    }
    if (b.cooldown_until_ms > now) {
        if (b.cooldown_until_ms >= x->deadline_ms) {
            finish(f, x, false, 429, "throttled",
                   "the workflow's session was cooling down until the "
                   "deadline");
            return LAUNCH_GONE;
        }
        x->not_before_ms = b.cooldown_until_ms;
        return LAUNCH_WAIT;
    }
    return LAUNCH_GO;
}

/* Ask the pool for a session for \p x (*s); an op no session can serve
 * fails, one whose candidates all cool down waits (this is where
 * Retry-After is waited out), unless its deadline comes first.
 * @locality fetch-engine thread */
static enum launch picked_session(struct fetch *f, struct xfer *x, int64_t now,
                                  int *s)
{
    struct proxy_pool_want w = xfer_want(x, x->need_rotate);
    int64_t wait_until = 0;
    char msg[160];
    switch (proxy_pool_pick(f->pool, &w, now, s, &wait_until)) {
    case PROXY_POOL_PICKED:
        return LAUNCH_GO;
    case PROXY_POOL_UNSERVED:
        snprintf(msg, sizeof(msg),
                 "no proxy session serves this job (country %s, rotation "
                 "%s): no provider of proxy.providers offers it",
                 x->country[0] ? x->country : "any",
                 x->rotation[0] ? x->rotation : "any");
        finish(f, x, false, 0, "proxy_connect", msg);
        return LAUNCH_GONE;
    case PROXY_POOL_SUSPENDED:
        finish(f, x, false, 0, "proxy_auth",
               "every session that could serve this op belongs to a "
               "credential set suspended after proxy authentication failures");
        return LAUNCH_GONE;
    case PROXY_POOL_WAIT:
    default:
        if (wait_until >= x->deadline_ms) {
            /* Waiting would outlive the deadline: fail now. */
            snprintf(msg, sizeof(msg), "no session can serve the op before "
                     "its deadline (in %lld ms): every one that could is "
                     "cooling down, the first for %lld ms",
                     (long long)(x->deadline_ms - now),
                     (long long)(wait_until - now));
            finish(f, x, false, 429, "throttled", msg);
            return LAUNCH_GONE;
        }
        x->not_before_ms = wait_until;
        return LAUNCH_WAIT;
    }
}

/* One waiting op whose timer is due (taken out of the waiting list): a
 * release (its running attempt ended and it makes no other); its
 * deadline; the per-host limits of its current target (concurrency cap,
 * then token bucket); a session (its bound one mid-way through a workflow,
 * another after a session failure, else the pool's pick); then the attempt.
 * @locality fetch-engine thread */
static enum launch launch_one(struct fetch *f, struct xfer *x, int64_t now)
{
    if (x->released) {
        release_end(f, x);
        return LAUNCH_GONE;
    }
    if (now >= x->deadline_ms &&
        (x->attempts > 0 || x->gate_waited || x->not_before_ms > now)) {
        finish(f, x, false, 0, "timeout",
               x->gate_waited && x->wait_slot
                   ? "deadline passed while waiting for the per-host limits"
                   : "deadline passed before a retry");
        return LAUNCH_GONE;
    }
    struct fetch_host *hs;
    if (!host_gate(f, x, now, &hs))
        return LAUNCH_WAIT;
    int s = x->session;
    enum launch l = wf_midway(x) && !x->need_rotate
                        ? bound_session(f, x, now)
                        : picked_session(f, x, now, &s);
    if (l != LAUNCH_GO)
        return l;
    if (x->session >= 0 && s != x->session)
        rotation_count(f, x, true);
    x->need_rotate = false;
    x->session = s;
    fetch_hosts_take(f->hosts, hs, now);
    x->hs = hs;
    x->gate_waited = false;
    start_attempt(f, x, now); /* may finish (and free) x */
    return LAUNCH_GONE;
}

/* Launch what may start now, in waiting-list order.
 * @locality fetch-engine thread */
static void launch_ready(struct fetch *f)
{
    int64_t now = dd_now_ms();
    struct xfer **pp = &f->waiting;
    while (*pp) {
        struct xfer *x = *pp;
        /* due: its time came, or its deadline did (no op waits past it),
         * or it was released */
        if (!x->wait_slot && x->not_before_ms > now && x->deadline_ms > now &&
            !x->released) {
            pp = &x->next;
            continue;
        }
        waiting_unlink(f, pp);
        if (launch_one(f, x, now) == LAUNCH_WAIT) {
            waiting_relink(f, pp, x);
            pp = &x->next;
        }
    }
}

/* ---- releases (fetch_release) ----------------------------------------------- */

/* Orders release requests by opaque (the address only: never dereferenced).
 * @locality fetch-engine thread */
static int release_cmp(const void *a, const void *b)
{
    uintptr_t p = (uintptr_t)((const struct fetch_release_req *)a)->opaque;
    uintptr_t q = (uintptr_t)((const struct fetch_release_req *)b)->opaque;
    return p < q ? -1 : p > q;
}

/* True when one of \p rel (sorted, one per opaque) releases \p x: same
 * opaque, and \p x was submitted before that fetch_release() call.
 * @locality fetch-engine thread */
static bool release_covers(const struct fetch_release_req *rel, size_t n,
                           const struct xfer *x)
{
    struct fetch_release_req key = {.opaque = x->opaque};
    const struct fetch_release_req *r =
        bsearch(&key, rel, n, sizeof(*rel), release_cmp);
    return r && x->seq <= r->seq;
}

/* Apply \p n fetch_release() calls (in any order; \p rel is sorted in
 * place): a waiting op ends now (release_end); a running one is marked and
 * makes no attempt after the running one.  Opaques of no op are ignored.
 * @locality fetch-engine thread */
static void release_apply(struct fetch *f, struct fetch_release_req *rel,
                          size_t n)
{
    qsort(rel, n, sizeof(*rel), release_cmp);
    size_t m = 0; /* one per opaque: the latest call, which covers most */
    for (size_t i = 0; i < n; i++) {
        if (m && rel[m - 1].opaque == rel[i].opaque) {
            if (rel[i].seq > rel[m - 1].seq)
                rel[m - 1].seq = rel[i].seq;
        } else {
            rel[m++] = rel[i];
        }
    }
    for (struct xfer *x = f->run_head; x; x = x->run_next)
        if (release_covers(rel, m, x))
            x->released = true;
    struct xfer **pp = &f->waiting;
    while (*pp) {
        struct xfer *x = *pp;
        if (!release_covers(rel, m, x)) {
            pp = &x->next;
            continue;
        }
        waiting_unlink(f, pp);
        release_end(f, x);
    }
}

/* Take what the callers queued (under f->lock): new requests join the
 * waiting list, then the releases apply (a release covers the requests
 * submitted before it, so both are taken at one instant).
 * @locality fetch-engine thread */
static void intake(struct fetch *f)
{
    pthread_mutex_lock(&f->lock);
    struct xfer *in = f->incoming;
    f->incoming = NULL;
    f->incoming_tailp = &f->incoming;
    struct fetch_release_req *rel = NULL;
    size_t n_rel = f->n_rel;
    if (n_rel) {
        rel = f->rel;
        f->rel = NULL;
        f->n_rel = f->cap_rel = 0;
    }
    pthread_mutex_unlock(&f->lock);
    while (in) {
        struct xfer *n = in->next;
        waiting_push(f, in);
        in = n;
    }
    if (n_rel) {
        release_apply(f, rel, n_rel);
        free(rel);
    }
}

/* ---- the loop ------------------------------------------------------------------ */

/* @locality fetch-engine thread */
static int64_t next_timer(struct fetch *f)
{
    int64_t t = INT64_MAX;
    for (struct xfer *x = f->waiting; x; x = x->next) {
        /* Ops held by the concurrency cap wake on a completion (or their
         * deadline); no op sleeps past its deadline. */
        int64_t at = x->wait_slot || x->deadline_ms < x->not_before_ms
                         ? x->deadline_ms
                         : x->not_before_ms;
        if (at < t)
            t = at;
    }
    return t;
}

/* Shutdown: cancel whatever still runs or waits.
 * @locality fetch-engine thread */
static void cancel_all(struct fetch *f)
{
    static const struct proxy_pool_outcome abandoned = {
        .verdict = PROXY_POOL_ABANDONED};
    while (f->run_head) {
        struct xfer *x = f->run_head;
        f->run_head = x->run_next;
        curl_multi_remove_handle(f->multi, x->easy);
        proxy_pool_report(f->pool, x->session, &abandoned, dd_now_ms(), NULL);
        host_release(x);
        finish(f, x, false, 0, "canceled", "canceled at shutdown");
    }
    while (f->waiting) {
        struct xfer *x = f->waiting;
        f->waiting = x->next;
        finish(f, x, false, 0, "canceled", "canceled at shutdown");
    }
    f->waiting_tailp = &f->waiting;
}

/* @locality fetch-engine thread (its start routine) */
static void *fetch_main(void *arg)
{
    struct fetch *f = arg;
    while (!atomic_load(&f->stop)) {
        intake(f);
        launch_ready(f);
        int still = 0;
        curl_multi_perform(f->multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(f->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            on_done(f, x, m->data.result);
        }
        launch_ready(f);
        int64_t now = dd_now_ms();
        fetch_hosts_sweep(f->hosts, now);
        int64_t t = next_timer(f);
        int timeout = 1000;
        if (t != INT64_MAX)
            timeout = t <= now ? 0 : (int)(t - now < 1000 ? t - now : 1000);
        curl_multi_poll(f->multi, NULL, 0, timeout, NULL);
    }
    cancel_all(f);
    return NULL;
}

/* ---- public API ---------------------------------------------------------------- */

/* The pool's view of the configuration.
 * @locality the caller of fetch_new */
static void pool_conf_from(const struct cfg *cfg, struct proxy_pool_conf *pc)
{
    memset(pc, 0, sizeof(*pc));
    pc->exits = cfg->proxy_exits.v;
    pc->n_exits = cfg->proxy_exits.n;
    pc->providers = cfg->proxy_providers.v;
    pc->n_providers = cfg->proxy_providers.n;
    pc->session_max_uses = cfg->fetch_session_max_uses;
    pc->session_max_errors = cfg->fetch_session_max_errors;
    pc->session_max_age_ms = cfg->fetch_session_max_age_ms;
    pc->cooldown_default_ms = cfg->fetch_cooldown_default_ms;
    pc->retry_after_max_ms = cfg->fetch_retry_after_max_ms;
    pc->proxy_auth_cooldown_ms = cfg->fetch_proxy_auth_cooldown_ms;
}

/* @locality the caller's thread (starts the engine thread) */
dd_err_t fetch_new(const struct cfg *cfg, struct fetch **out, char *errstr,
                   size_t errstr_size)
{
    struct fetch *f = calloc(1, sizeof(*f));
    if (!f)
        return DD_ERR_NOMEM;
    f->cfg = cfg;
    f->rnd = (uint64_t)dd_now_ms() * 0x9E3779B97F4A7C15ull | 1;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->done_cond, NULL);
    f->incoming_tailp = &f->incoming;
    f->waiting_tailp = &f->waiting;
    struct fetch_hosts_conf hc = {.max_inflight = cfg->fetch_per_host_max_inflight,
                                  .rate_per_min = cfg->fetch_per_host_rate_per_min,
                                  .burst = cfg->fetch_per_host_burst};
    f->hosts = fetch_hosts_new(&hc);
    struct proxy_pool_conf pc;
    pool_conf_from(cfg, &pc);
    dd_err_t err = proxy_pool_new(&pc, &f->pool, errstr, errstr_size);
    if (err)
        goto fail;
    char gerr[DD_ERRSTR_SIZE];
    err = guard_new(cfg->fetch_allow_targets.v, cfg->fetch_allow_targets.n,
                    &f->guard, gerr, sizeof(gerr));
    if (err) {
        dd_errstr_set(errstr, errstr_size, "config: fetch.allow_targets: %s", gerr);
        goto fail;
    }
    f->blocked = dd_xcalloc(cfg->fetch_blocked_statuses.n + 1, sizeof(long),
                            "blocked statuses");
    for (size_t i = 0; i < cfg->fetch_blocked_statuses.n; i++)
        f->blocked[f->n_blocked++] = strtol(cfg->fetch_blocked_statuses.v[i], NULL, 10);
    f->multi = curl_multi_init();
    if (!f->multi) {
        dd_errstr_set(errstr, errstr_size, "curl_multi_init failed");
        err = DD_ERR_FATAL;
        goto fail;
    }
    curl_multi_setopt(f->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 64L);
    if (pthread_create(&f->thread, NULL, fetch_main, f)) {
        dd_errstr_set(errstr, errstr_size, "pthread_create failed");
        err = DD_ERR_FATAL;
        goto fail;
    }
    f->thread_started = true;
    *out = f;
    return DD_OK;
fail:
    fetch_destroy(f);
    return err;
}

/* @locality the caller's thread (joins the engine thread) */
void fetch_destroy(struct fetch *f)
{
    if (!f)
        return;
    if (f->thread_started) {
        atomic_store(&f->stop, true);
        curl_multi_wakeup(f->multi);
        pthread_join(f->thread, NULL);
    }
    if (f->multi)
        curl_multi_cleanup(f->multi);
    while (f->incoming) {
        struct xfer *x = f->incoming;
        f->incoming = x->next;
        xfer_free(x);
    }
    free(f->rel);
    fetch_hosts_destroy(f->hosts);
    for (size_t i = 0; i < f->done_n; i++)
        fetch_result_destroy(f->done[(f->done_head + i) % f->done_cap]);
    free(f->done);
    proxy_pool_destroy(f->pool);
    guard_destroy(f->guard);
    free(f->blocked);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->done_cond);
    free(f);
}

/* Copy one request (fetch_submit copies everything it needs).  Returns
 * false when out of memory.
 * @locality the caller of fetch_submit (any thread) */
static bool wstep_copy(struct wstep *w, const char *url, const char *method,
                       const struct fetch_header *h, size_t n, const void *body,
                       size_t body_len)
{
    w->url = strdup(url ? url : "");
    w->method = strdup(method ? method : "GET");
    w->n_headers = n;
    w->hdr_names = calloc(n + 1, sizeof(char *));
    w->hdr_values = calloc(n + 1, sizeof(char *));
    if (!w->url || !w->method || !w->hdr_names || !w->hdr_values)
        return false;
    for (size_t i = 0; i < n; i++) {
        w->hdr_names[i] = strdup(h[i].name);
        w->hdr_values[i] = strdup(h[i].value);
        if (!w->hdr_names[i] || !w->hdr_values[i])
            return false;
    }
    if (body) {
        w->body = malloc(body_len + 1);
        if (!w->body)
            return false;
        memcpy(w->body, body, body_len);
        w->body[body_len] = '\0';
        w->body_len = body_len;
    }
    return true;
}

/* Is nothing queued for the engine's next intake?  Only the request or
 * release that finds the queues empty wakes the engine: one that finds them
 * holding something was queued after that one, whose wakeup (sent after
 * its unlock, or pending in libcurl's wakeup socket: curl_multi_wakeup(3))
 * brings the engine to an intake that takes both at once.  A poll batch of
 * jobs costs one wakeup instead of one each (a send(2) on libcurl's
 * socketpair: 8% of the pipeline thread on fetched pages, issue 13).
 * @locality any thread, under f->lock */
static bool intake_empty(const struct fetch *f)
{
    return f->incoming == NULL && f->n_rel == 0;
}

/* @locality any thread (under f->lock) */
dd_err_t fetch_submit(struct fetch *f, const struct fetch_req *req)
{
    struct xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return DD_ERR_NOMEM;
    x->f = f;
    x->pin = -1;
    x->jar_session = -1;
    x->workflow = req->n_steps > 0;
    x->n_steps = x->workflow ? req->n_steps : 1;
    x->steps = calloc(x->n_steps, sizeof(*x->steps));
    if (!x->steps) {
        free(x);
        return DD_ERR_NOMEM;
    }
    bool ok = true;
    if (x->workflow)
        for (size_t i = 0; i < req->n_steps && ok; i++) {
            const struct fetch_step *st = &req->steps[i];
            ok = wstep_copy(&x->steps[i], st->url, st->method, st->headers,
                            st->n_headers, st->body, st->body_len);
        }
    else
        ok = wstep_copy(&x->steps[0], req->url, req->method, req->headers,
                        req->n_headers, req->body, req->body_len);
    if (!ok || !xfer_load_step(x, 0)) {
        xfer_free(x);
        return DD_ERR_NOMEM;
    }
    x->replayable = req->replayable;
    x->safe = req->safe;
    if (req->country)
        snprintf(x->country, sizeof(x->country), "%s", req->country);
    if (req->rotation)
        snprintf(x->rotation, sizeof(x->rotation), "%s", req->rotation);
    x->deadline_ms = req->deadline_ms;
    x->not_before_ms = req->not_before_ms;
    /* a resumed wait: its first attempt is the retry it waited for */
    x->retry_noted = req->not_before_ms != 0 && f->retry_cb;
    x->opaque = req->opaque;
    x->session = -1;
    x->asked_wait_ms = -1;
    pthread_mutex_lock(&f->lock);
    x->seq = ++f->submit_seq;
    x->next = NULL;
    bool wake = intake_empty(f);
    *f->incoming_tailp = x;
    f->incoming_tailp = &x->next;
    f->inflight++;
    pthread_mutex_unlock(&f->lock);
    if (wake)
        curl_multi_wakeup(f->multi);
    return DD_OK;
}

/* @locality any thread (under f->lock; wakes the engine) */
void fetch_release(struct fetch *f, void *opaque)
{
    pthread_mutex_lock(&f->lock);
    if (f->n_rel == f->cap_rel) {
        f->cap_rel = f->cap_rel ? f->cap_rel * 2 : 16;
        f->rel = dd_xrealloc(f->rel, f->cap_rel * sizeof(*f->rel),
                             "fetch releases");
    }
    bool wake = intake_empty(f);
    f->rel[f->n_rel++] = (struct fetch_release_req){.opaque = opaque,
                                                    .seq = f->submit_seq};
    pthread_mutex_unlock(&f->lock);
    if (wake)
        curl_multi_wakeup(f->multi);
}

/* @locality the pipeline thread, before the first submit */
void fetch_set_retry_hook(struct fetch *f, fetch_retry_cb *cb, void *opaque)
{
    f->retry_cb = cb;
    f->retry_opaque = opaque;
}

/* @locality the pipeline thread, before the first submit */
void fetch_set_done_hook(struct fetch *f, fetch_done_cb *cb, void *opaque)
{
    f->done_cb = cb;
    f->done_opaque = opaque;
}

/* @locality any thread (under f->lock) */
struct fetch_result *fetch_take(struct fetch *f, int timeout_ms)
{
    struct fetch_result *r = NULL;
    pthread_mutex_lock(&f->lock);
    if (f->done_n == 0 && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&f->done_cond, &f->lock, &ts);
    }
    if (f->done_n) {
        r = f->done[f->done_head];
        f->done_head = (f->done_head + 1) % f->done_cap;
        f->done_n--;
        f->inflight--;
    }
    pthread_mutex_unlock(&f->lock);
    return r;
}

/* @locality any thread (under f->lock) */
size_t fetch_inflight(struct fetch *f)
{
    pthread_mutex_lock(&f->lock);
    size_t n = f->inflight;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* @locality any thread (atomics) */
void fetch_stats_get(struct fetch *f, struct fetch_stats *st)
{
    st->attempts = atomic_load(&f->st_attempts);
    st->rotations = atomic_load(&f->st_rotations);
    st->throttled = atomic_load(&f->st_throttled);
    st->bytes = atomic_load(&f->st_bytes);
    st->completed = atomic_load(&f->st_completed);
    st->failed = atomic_load(&f->st_failed);
    st->restarts = atomic_load(&f->st_restarts);
    st->host_waits = atomic_load(&f->st_host_waits);
    st->auth_suspensions = atomic_load(&f->st_auth_suspensions);
    st->released = atomic_load(&f->st_released);
}

/* @locality any thread */
void fetch_result_destroy(struct fetch_result *r)
{
    if (!r)
        return;
    free(r->category);
    free(r->error);
    free(r->final_url);
    free(r->content_type);
    free(r->etag);
    free(r->last_modified);
    free(r->body);
    free(r->attempt_log);
    sres_free(r->steps, r->n_steps);
    if (r->prepared && r->prepared_free)
        r->prepared_free(r->prepared);
    free(r);
}
