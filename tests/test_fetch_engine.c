/* Unit tests of fetch.c beyond the classification (test_fetch.c): the
 * per-host token bucket and table (fetch_hosts.c; timed-rotation intervals moved to test_proxy_pool.c
 * with proxy_pool_timed_interval), and the engine itself (direct, no proxy)
 * against a small in-process HTTP/1.1 origin: workflow cookies and their
 * isolation between ops, restart of a safe workflow, failure without replay
 * of an unsafe one, the per-host concurrency cap, a Retry-After against the
 * op's deadline (issue 14), fetch_release of waiting and running ops. */

#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fetch.h"
#include "fetch_hosts.h"

/* ---- token bucket --------------------------------------------------------- */

START_TEST(test_bucket_rate)
{
    struct fetch_bucket b = {0};
    /* 600/min = one token per 100 ms, burst 1 */
    ck_assert_int_eq(fetch_bucket_take(&b, 1000, 600, 1), 0);
    ck_assert_int_eq(fetch_bucket_take(&b, 1000, 600, 1), 100);
    ck_assert_int_eq(fetch_bucket_take(&b, 1050, 600, 1), 50);
    ck_assert_int_eq(fetch_bucket_take(&b, 1100, 600, 1), 0);
    /* a long quiet period refills up to the burst only */
    ck_assert_int_eq(fetch_bucket_take(&b, 60000, 600, 1), 0);
    ck_assert_int_gt(fetch_bucket_take(&b, 60000, 600, 1), 0);
}
END_TEST

START_TEST(test_bucket_burst)
{
    struct fetch_bucket b = {0};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fetch_bucket_take(&b, 5000, 60, 3), 0);
    ck_assert_int_eq(fetch_bucket_take(&b, 5000, 60, 3), 1000); /* 1/s */
    ck_assert_int_eq(fetch_bucket_take(&b, 5999, 60, 3), 1);
    ck_assert_int_eq(fetch_bucket_take(&b, 6000, 60, 3), 0);
    /* rate 0: no limit */
    struct fetch_bucket u = {0};
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(fetch_bucket_take(&u, 1, 0, 1), 0);
}
END_TEST

/* ---- per-host table (fetch_hosts.h) ---------------------------------------- */

START_TEST(test_hosts_disabled)
{
    struct fetch_hosts_conf c = {0};
    struct fetch_hosts *h = fetch_hosts_new(&c);
    ck_assert(!fetch_hosts_enabled(h));
    struct fetch_host *slot = (struct fetch_host *)0x1;
    int64_t w = -1;
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &slot, &w), FETCH_HOSTS_GO);
    ck_assert_ptr_null(slot);
    fetch_hosts_take(h, slot, 1000); /* NULL: no-op */
    fetch_hosts_release(slot);
    ck_assert_uint_eq(fetch_hosts_count(h), 0);
    fetch_hosts_destroy(h);
    fetch_hosts_destroy(NULL);
}
END_TEST

START_TEST(test_hosts_cap)
{
    struct fetch_hosts_conf c = {.max_inflight = 2};
    struct fetch_hosts *h = fetch_hosts_new(&c);
    ck_assert(fetch_hosts_enabled(h));
    struct fetch_host *s1, *s2, *s3, *o;
    int64_t w = -1;
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s1, &w), FETCH_HOSTS_GO);
    fetch_hosts_take(h, s1, 1000);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s2, &w), FETCH_HOSTS_GO);
    ck_assert_ptr_eq(s1, s2);
    fetch_hosts_take(h, s2, 1000);
    ck_assert_int_eq(fetch_hosts_inflight(h, "a.test"), 2);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s3, &w), FETCH_HOSTS_FULL);
    ck_assert_ptr_null(s3);
    /* another host has its own cap */
    ck_assert_int_eq(fetch_hosts_check(h, "b.test", 1000, &o, &w), FETCH_HOSTS_GO);
    ck_assert_ptr_ne(o, s1);
    ck_assert_uint_eq(fetch_hosts_count(h), 2);
    fetch_hosts_release(s1);
    ck_assert_int_eq(fetch_hosts_inflight(h, "a.test"), 1);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s3, &w), FETCH_HOSTS_GO);
    ck_assert_int_eq(fetch_hosts_inflight(h, "nowhere.test"), 0);
    fetch_hosts_destroy(h);
}
END_TEST

START_TEST(test_hosts_rate)
{
    struct fetch_hosts_conf c = {.rate_per_min = 600, .burst = 1};
    struct fetch_hosts *h = fetch_hosts_new(&c);
    struct fetch_host *s;
    int64_t w = -1;
    /* a check only probes the bucket: nothing is taken */
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s, &w), FETCH_HOSTS_GO);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s, &w), FETCH_HOSTS_GO);
    fetch_hosts_take(h, s, 1000);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &s, &w), FETCH_HOSTS_RATE);
    ck_assert_int_eq(w, 100);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1050, &s, &w), FETCH_HOSTS_RATE);
    ck_assert_int_eq(w, 50);
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1100, &s, &w), FETCH_HOSTS_GO);
    fetch_hosts_destroy(h);
}
END_TEST

START_TEST(test_hosts_sweep)
{
    struct fetch_hosts_conf c = {.max_inflight = 1, .rate_per_min = 1, .burst = 2};
    struct fetch_hosts *h = fetch_hosts_new(&c);
    struct fetch_host *a, *b;
    int64_t w = -1;
    ck_assert_int_eq(fetch_hosts_check(h, "a.test", 1000, &a, &w), FETCH_HOSTS_GO);
    ck_assert_int_eq(fetch_hosts_check(h, "b.test", 1000, &b, &w), FETCH_HOSTS_GO);
    fetch_hosts_take(h, b, 1000); /* b runs */
    /* idle time: the bucket's refill, 2 tokens at 1/min = 120001 ms */
    fetch_hosts_sweep(h, 121001);
    ck_assert_uint_eq(fetch_hosts_count(h), 2);
    fetch_hosts_sweep(h, 200000);
    ck_assert_uint_eq(fetch_hosts_count(h), 1); /* a forgotten, b runs */
    ck_assert_int_eq(fetch_hosts_inflight(h, "b.test"), 1);
    fetch_hosts_release(b);
    fetch_hosts_sweep(h, 205000); /* at most every 10 s */
    ck_assert_uint_eq(fetch_hosts_count(h), 1);
    fetch_hosts_sweep(h, 210000);
    ck_assert_uint_eq(fetch_hosts_count(h), 0);
    fetch_hosts_destroy(h);
}
END_TEST

/* ---- a small origin ----------------------------------------------------------
 * Keep-alive HTTP/1.1, one thread per connection.  Logs "METHOD PATH COOKIE"
 * per request.  /login?k=K sets sid=K-n; /flaky answers 503 while srv.flaky
 * (decremented per request) is positive; /slow sleeps 150 ms (before its
 * answer: /slow/flaky is a slow 503); /held waits (at most 10 s) until the
 * test opens the gate (gate_open: a transfer that runs until the test says,
 * however slow the machine; /held/flaky is a held 503); /throttle?ra=V
 * answers 429 with "Retry-After: V"; others 200. */

#define LOG_MAX 256
static struct {
    int fd, port;
    pthread_mutex_t lock;
    char log[LOG_MAX][256];
    int n_log;
    int logins, flaky;
    int active, max_active;
    int conns;          /* connection threads alive */
    bool gate_is_open;  /* /held answers (srv_start closes it) */
    pthread_cond_t gate;
    pthread_t acceptor;
} srv;

static void *conn_main(void *arg)
{
    int c = (int)(intptr_t)arg;
    char buf[8192];
    size_t have = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t n = recv(c, buf + have, sizeof(buf) - have - 1, 0);
            if (n <= 0)
                goto out;
            have += (size_t)n;
        }
        buf[have] = '\0';
        size_t hlen = (size_t)(end - buf) + 4;
        char method[16] = "", target[512] = "", cookie[256] = "-";
        sscanf(buf, "%15s %511s", method, target);
        size_t clen = 0;
        for (char *l = strstr(buf, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n")) {
            if (!strncasecmp(l + 2, "Cookie: ", 8))
                sscanf(l + 10, "%255[^\r]", cookie);
            if (!strncasecmp(l + 2, "Content-Length: ", 16))
                clen = (size_t)atol(l + 18);
        }
        while (have < hlen + clen) {
            ssize_t n = recv(c, buf + have, sizeof(buf) - have - 1, 0);
            if (n <= 0)
                goto out;
            have += (size_t)n;
        }
        int status = 200;
        char extra[128] = "";
        pthread_mutex_lock(&srv.lock);
        if (strstr(target, "/login"))
            snprintf(extra, sizeof(extra), "Set-Cookie: sid=s%d; Path=/\r\n",
                     ++srv.logins);
        else if (strstr(target, "/flaky") && srv.flaky-- > 0)
            status = 503;
        else if (strstr(target, "/throttle?ra=")) {
            status = 429;
            snprintf(extra, sizeof(extra), "Retry-After: %.60s\r\n",
                     strstr(target, "?ra=") + 4);
        }
        if (srv.n_log < LOG_MAX)
            /* bounded to fit the 256-byte entry (a Debug build's
             * -Werror=format-truncation) */
            snprintf(srv.log[srv.n_log++], 256, "%.15s %.150s %.80s", method,
                     target, cookie);
        if (++srv.active > srv.max_active)
            srv.max_active = srv.active;
        pthread_mutex_unlock(&srv.lock);
        if (strstr(target, "/slow"))
            usleep(150000);
        if (strstr(target, "/held")) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 10;
            pthread_mutex_lock(&srv.lock);
            while (!srv.gate_is_open &&
                   pthread_cond_timedwait(&srv.gate, &srv.lock, &until) == 0)
                ;
            pthread_mutex_unlock(&srv.lock);
        }
        char resp[512];
        int n = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 %d X\r\n%sContent-Length: 2\r\n\r\nok", status,
                         extra);
        pthread_mutex_lock(&srv.lock);
        srv.active--;
        pthread_mutex_unlock(&srv.lock);
        if (send(c, resp, (size_t)n, MSG_NOSIGNAL) != n)
            goto out;
        memmove(buf, buf + hlen + clen, have - hlen - clen);
        have -= hlen + clen;
    }
out:
    close(c);
    pthread_mutex_lock(&srv.lock);
    srv.conns--;
    pthread_mutex_unlock(&srv.lock);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(srv.fd, NULL, NULL);
        if (c < 0)
            return NULL;
        pthread_mutex_lock(&srv.lock);
        srv.conns++;
        pthread_mutex_unlock(&srv.lock);
        pthread_t t;
        pthread_create(&t, NULL, conn_main, (void *)(intptr_t)c);
        pthread_detach(t);
    }
}

/* Let every /held request answer. */
static void gate_open(void)
{
    pthread_mutex_lock(&srv.lock);
    srv.gate_is_open = true;
    pthread_cond_broadcast(&srv.gate);
    pthread_mutex_unlock(&srv.lock);
}

/* At exit: stop accepting, join the acceptor, let the connection threads
 * (their peers are gone once the engine is destroyed) finish, so that
 * valgrind finds no thread stack in flight. */
static void srv_stop(void)
{
    gate_open(); /* a /held request a failed test left waiting */
    shutdown(srv.fd, SHUT_RDWR);
    pthread_join(srv.acceptor, NULL);
    close(srv.fd);
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&srv.lock);
        int n = srv.conns;
        pthread_mutex_unlock(&srv.lock);
        if (!n)
            break;
        usleep(10000);
    }
}

static void srv_start(void)
{
    static bool started;
    pthread_mutex_lock(&srv.lock);
    srv.n_log = srv.logins = srv.flaky = srv.max_active = 0;
    srv.gate_is_open = false;
    pthread_mutex_unlock(&srv.lock);
    if (started)
        return;
    started = true;
    pthread_mutex_init(&srv.lock, NULL);
    pthread_cond_init(&srv.gate, NULL);
    srv.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(srv.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(srv.fd, 128), 0);
    socklen_t al = sizeof(a);
    getsockname(srv.fd, (struct sockaddr *)&a, &al);
    srv.port = ntohs(a.sin_port);
    pthread_create(&srv.acceptor, NULL, accept_main, NULL);
    atexit(srv_stop);
}

static int64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct cfg *g_cfg;
static struct fetch *g_f;

static void engine_start(const char *extra_env)
{
    curl_global_init(CURL_GLOBAL_ALL);
    srv_start();
    char *env[] = {"DEDUPD_FETCH__ALLOW_TARGETS=127.0.0.1/32",
                   "DEDUPD_FETCH__BACKOFF_BASE_MS=5",
                   "DEDUPD_FETCH__BACKOFF_MAX_MS=10",
                   (char *)extra_env, NULL};
    char err[512];
    ck_assert_msg(cfg_load(NULL, env, &g_cfg, err, sizeof(err)) == DD_OK, "%s", err);
    ck_assert_msg(fetch_new(g_cfg, &g_f, err, sizeof(err)) == DD_OK, "%s", err);
}

static void engine_stop(void)
{
    fetch_destroy(g_f);
    cfg_destroy(g_cfg);
    g_f = NULL;
    g_cfg = NULL;
}

static struct fetch_result *wait_one(void)
{
    for (int i = 0; i < 100; i++) {
        struct fetch_result *r = fetch_take(g_f, 100);
        if (r)
            return r;
    }
    ck_abort_msg("no result within 10 s");
    return NULL;
}

static void url(char *buf, size_t n, const char *path)
{
    snprintf(buf, n, "http://127.0.0.1:%d%s", srv.port, path);
}

static bool log_has(const char *line)
{
    bool found = false;
    pthread_mutex_lock(&srv.lock);
    for (int i = 0; i < srv.n_log; i++)
        found |= !strcmp(srv.log[i], line);
    pthread_mutex_unlock(&srv.lock);
    return found;
}

static int log_count(const char *prefix)
{
    int n = 0;
    pthread_mutex_lock(&srv.lock);
    for (int i = 0; i < srv.n_log; i++)
        n += !strncmp(srv.log[i], prefix, strlen(prefix));
    pthread_mutex_unlock(&srv.lock);
    return n;
}

static void submit_wf(const char *const *paths, const char *const *methods, size_t n,
                      bool safe, bool replayable, void *opaque)
{
    char u[8][256];
    struct fetch_step st[8];
    for (size_t i = 0; i < n; i++) {
        url(u[i], sizeof(u[i]), paths[i]);
        st[i] = (struct fetch_step){.url = u[i], .method = methods ? methods[i] : "GET"};
        if (methods && !strcmp(methods[i], "POST")) {
            st[i].body = "a=1";
            st[i].body_len = 3;
        }
    }
    struct fetch_req req = {.steps = st, .n_steps = n, .safe = safe,
                            .replayable = replayable,
                            .deadline_ms = ms_now() + 10000, .opaque = opaque};
    ck_assert_int_eq(fetch_submit(g_f, &req), DD_OK);
}

START_TEST(test_workflow_cookies)
{
    engine_start(NULL);
    const char *a[] = {"/login?op=a", "/account?op=a", "/orders?op=a"};
    submit_wf(a, NULL, 3, true, false, (void *)1);
    struct fetch_result *r = wait_one();
    ck_assert_msg(r->ok, "%s", r->error ? r->error : "");
    ck_assert_uint_eq(r->n_steps_total, 3);
    ck_assert_uint_eq(r->n_steps, 3);
    for (size_t i = 0; i < 3; i++)
        ck_assert_int_eq(r->steps[i].status, 200);
    ck_assert_uint_eq(r->attempts, 3);
    ck_assert_uint_eq(r->restarts, 0);
    ck_assert(log_has("GET /login?op=a -"));
    ck_assert(log_has("GET /account?op=a sid=s1"));
    ck_assert(log_has("GET /orders?op=a sid=s1"));
    fetch_result_destroy(r);
    /* another op: its own jar (no sid=s1) */
    const char *b[] = {"/account?op=b", "/login?op=b", "/orders?op=b"};
    submit_wf(b, NULL, 3, true, false, (void *)2);
    r = wait_one();
    ck_assert(r->ok);
    ck_assert(log_has("GET /account?op=b -"));
    ck_assert(log_has("GET /orders?op=b sid=s2"));
    fetch_result_destroy(r);
    /* a plain request uses no jar */
    char u[256];
    url(u, sizeof(u), "/plain");
    struct fetch_req req = {.url = u, .method = "GET", .safe = true,
                            .deadline_ms = ms_now() + 10000};
    ck_assert_int_eq(fetch_submit(g_f, &req), DD_OK);
    r = wait_one();
    ck_assert(r->ok);
    ck_assert_uint_eq(r->n_steps_total, 0);
    ck_assert(log_has("GET /plain -"));
    fetch_result_destroy(r);
    engine_stop();
}
END_TEST

START_TEST(test_workflow_restart_safe)
{
    engine_start("DEDUPD_FETCH__WORKFLOW_STEP_RETRIES=1");
    srv.flaky = 2; /* the step and its same-session retry get 503 */
    const char *p[] = {"/login?op=r", "/flaky?op=r", "/account?op=r"};
    submit_wf(p, NULL, 3, true, false, NULL);
    struct fetch_result *r = wait_one();
    ck_assert_msg(r->ok, "%s", r->error ? r->error : "");
    ck_assert_uint_eq(r->restarts, 1);
    ck_assert_int_eq(log_count("GET /login?op=r"), 2);
    ck_assert_int_eq(log_count("GET /flaky?op=r"), 3);
    /* the restart starts with an empty jar: the second login's cookie only */
    ck_assert(log_has("GET /login?op=r -"));
    ck_assert(log_has("GET /account?op=r sid=s2"));
    ck_assert_uint_eq(r->n_steps, 3);
    fetch_result_destroy(r);
    engine_stop();
}
END_TEST

START_TEST(test_workflow_unsafe_fails)
{
    engine_start(NULL);
    srv.flaky = 1;
    const char *p[] = {"/login?op=u", "/flaky?op=u", "/account?op=u"};
    const char *m[] = {"POST", "GET", "GET"};
    submit_wf(p, m, 3, false, false, NULL);
    struct fetch_result *r = wait_one();
    ck_assert(!r->ok);
    ck_assert_str_eq(r->category, "server_error");
    ck_assert_int_eq(r->status, 503);
    ck_assert_uint_eq(r->n_steps, 2);
    ck_assert_str_eq(r->steps[1].category, "server_error");
    ck_assert_int_eq(log_count("POST /login?op=u"), 1);
    ck_assert_int_eq(log_count("GET /flaky?op=u"), 1);
    ck_assert_int_eq(log_count("GET /account?op=u"), 0);
    fetch_result_destroy(r);
    /* replayable: restarted (the POST sent twice, as the job allows) */
    srv.flaky = 1;
    const char *q[] = {"/login?op=v", "/flaky?op=v", "/account?op=v"};
    submit_wf(q, m, 3, false, true, NULL);
    r = wait_one();
    ck_assert_msg(r->ok, "%s", r->error ? r->error : "");
    ck_assert_uint_eq(r->restarts, 1);
    ck_assert_int_eq(log_count("POST /login?op=v"), 2);
    fetch_result_destroy(r);
    engine_stop();
}
END_TEST

START_TEST(test_per_host_cap)
{
    engine_start("DEDUPD_FETCH__PER_HOST_MAX_INFLIGHT=1");
    char u[6][256];
    for (int i = 0; i < 6; i++) {
        char p[64];
        snprintf(p, sizeof(p), "/slow?i=%d", i);
        url(u[i], sizeof(u[i]), p);
        struct fetch_req req = {.url = u[i], .method = "GET", .safe = true,
                                .deadline_ms = ms_now() + 10000};
        ck_assert_int_eq(fetch_submit(g_f, &req), DD_OK);
    }
    int64_t t0 = ms_now();
    for (int i = 0; i < 6; i++) {
        struct fetch_result *r = wait_one();
        ck_assert(r->ok);
        ck_assert_uint_eq(r->attempts, 1);
        fetch_result_destroy(r);
    }
    ck_assert_int_ge(ms_now() - t0, 6 * 150 - 50);
    ck_assert_int_eq(srv.max_active, 1);
    struct fetch_stats st;
    fetch_stats_get(g_f, &st);
    ck_assert_uint_ge(st.host_waits, 1);
    engine_stop();
}
END_TEST

/* The retry hook's view: WAIT events and the latest not-before time. */
static struct {
    atomic_int waits, starts;
    int64_t last_not_before;
} hook;

static void hook_cb(void *hook_opaque, void *req_opaque, enum fetch_retry_event ev,
                    int64_t not_before_ms, uint32_t attempts,
                    const struct fetch_attempt *failed)
{
    (void)hook_opaque, (void)req_opaque, (void)attempts, (void)failed;
    if (ev == FETCH_RETRY_WAIT) {
        hook.last_not_before = not_before_ms; /* published by the count */
        atomic_fetch_add(&hook.waits, 1);
    } else {
        atomic_fetch_add(&hook.starts, 1);
    }
}

static void submit_get(const char *path, int64_t deadline_ms)
{
    char u[256];
    url(u, sizeof(u), path);
    struct fetch_req req = {.url = u, .method = "GET", .safe = true,
                            .deadline_ms = deadline_ms};
    ck_assert_int_eq(fetch_submit(g_f, &req), DD_OK);
}

START_TEST(test_deadline_before_retry_after_fails_at_once)
{
    /* issue 14: a Retry-After (600 s, and the 30 s the cap leaves of it)
     * beyond the op's 20 s deadline, one session: no waiting for the
     * deadline (the result within 10 s, wait_one's own limit), no retry
     * recorded, category throttled, the asked wait kept */
    const char *caps[] = {"DEDUPD_FETCH__RETRY_AFTER_MAX_MS=300000",
                          "DEDUPD_FETCH__RETRY_AFTER_MAX_MS=30000"};
    for (int k = 0; k < 2; k++) {
        engine_start(caps[k]);
        memset(&hook, 0, sizeof(hook));
        fetch_set_retry_hook(g_f, hook_cb, NULL);
        int64_t t0 = ms_now();
        submit_get("/throttle?ra=600", t0 + 20000);
        struct fetch_result *r = wait_one();
        int64_t took = ms_now() - t0;
        ck_assert_msg(took < 10000, "result after %lld ms", (long long)took);
        ck_assert(!r->ok);
        ck_assert_str_eq(r->category, "throttled");
        ck_assert_int_eq(r->status, 429);
        ck_assert_uint_eq(r->attempts, 1);
        ck_assert_uint_eq(r->n_attempt_log, 1);
        ck_assert_str_eq(r->attempt_log[0].category, "throttled");
        ck_assert_msg(strstr(r->attempt_log[0].error,
                             "the server asked to wait 600000 ms "
                             "(Retry-After: 600)"),
                      "%s", r->attempt_log[0].error);
        ck_assert_msg(strstr(r->error, "no session can serve the op before its "
                                       "deadline"), "%s", r->error);
        ck_assert_int_eq(hook.waits, 0);
        fetch_result_destroy(r);
        /* the session's cooldown holds for it: a new op (20 s deadline)
         * fails at once without a request; one that outlives it would wait */
        t0 = ms_now();
        submit_get("/plain?after=throttle", t0 + 20000);
        r = wait_one();
        ck_assert_int_lt(ms_now() - t0, 10000);
        ck_assert_str_eq(r->category, "throttled");
        ck_assert_uint_eq(r->attempts, 0);
        ck_assert_int_eq(log_count("GET /plain?after=throttle"), 0);
        fetch_result_destroy(r);
        ck_assert_int_eq(log_count("GET /throttle?ra=600"), 1);
        engine_stop();
    }
}
END_TEST

START_TEST(test_deadline_after_retry_after_waits_it_out)
{
    /* a Retry-After (1 s) inside the deadline is waited out, then retried */
    engine_start("DEDUPD_FETCH__MAX_ATTEMPTS=2");
    memset(&hook, 0, sizeof(hook));
    fetch_set_retry_hook(g_f, hook_cb, NULL);
    int64_t t0 = ms_now();
    submit_get("/throttle?ra=1", t0 + 10000);
    struct fetch_result *r = wait_one();
    ck_assert_str_eq(r->category, "throttled");
    ck_assert_uint_eq(r->attempts, 2);
    ck_assert_int_eq(hook.waits, 1);
    ck_assert_int_eq(hook.starts, 1);
    ck_assert_int_ge(r->attempt_log[1].started_at_ms,
                     r->attempt_log[0].ended_at_ms + 990);
    ck_assert_int_ge(hook.last_not_before, r->attempt_log[0].ended_at_ms + 990);
    /* the asked 1 s, not the default cooldown (fetch.cooldown_default_ms,
     * 5 s): measured by the engine's own clock, from the first attempt's
     * end */
    ck_assert_int_lt(r->attempt_log[1].started_at_ms,
                     r->attempt_log[0].ended_at_ms + 4000);
    fetch_result_destroy(r);
    engine_stop();
}
END_TEST

/* ---- fetch_release ------------------------------------------------------------ */

static void submit_op(const char *path, int64_t deadline_ms, int64_t not_before_ms,
                      void *opaque)
{
    char u[256];
    url(u, sizeof(u), path);
    struct fetch_req req = {.url = u, .method = "GET", .safe = true,
                            .deadline_ms = deadline_ms,
                            .not_before_ms = not_before_ms, .opaque = opaque};
    ck_assert_int_eq(fetch_submit(g_f, &req), DD_OK);
}

/* The next result within \p ms, or NULL. */
static struct fetch_result *take_within(int ms)
{
    int64_t end = ms_now() + ms;
    for (;;) {
        int64_t left = end - ms_now();
        struct fetch_result *r = fetch_take(g_f, left > 0 ? (int)left : 0);
        if (r || left <= 0)
            return r;
    }
}

/* Wait (at most 5 s) until the origin logged \p n requests starting with
 * \p prefix. */
static void wait_log(const char *prefix, int n)
{
    for (int i = 0; i < 500 && log_count(prefix) < n; i++)
        usleep(10000);
    ck_assert_int_ge(log_count(prefix), n);
}

/* Wait (at most 5 s) until the retry hook saw \p n WAIT events. */
static void wait_hook_waits(int n)
{
    for (int i = 0; i < 500 && atomic_load(&hook.waits) < n; i++)
        usleep(10000);
    ck_assert_int_eq(atomic_load(&hook.waits), n);
}

static void assert_released(const struct fetch_result *r, void *opaque)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_eq(r->opaque, opaque);
    ck_assert_msg(r->released, "not released: %s",
                  r->category ? r->category : "ok");
    ck_assert(!r->ok);
    ck_assert_str_eq(r->category, "released");
    ck_assert_ptr_null(r->body);
    ck_assert_uint_eq(r->body_len, 0);
    ck_assert_str_eq(r->body_sha256, "");
}

/* Return once the engine has applied every release queued before this
 * call: a marker op that waits (not_before in 60 s) is submitted and
 * released, and its released result taken.  Releases apply in the order
 * they were queued (intake), so a /held transfer released before is known
 * released before the test lets its answer through. */
static void releases_applied(void)
{
    void *marker = (void *)0x9999;
    int64_t now = ms_now();
    submit_op("/plain?op=marker", now + 120000, now + 60000, marker);
    fetch_release(g_f, marker);
    struct fetch_result *r = take_within(10000);
    ck_assert_msg(r, "the marker's release did not come back within 10 s");
    assert_released(r, marker);
    ck_assert_uint_eq(r->attempts, 0);
    fetch_result_destroy(r);
}

START_TEST(test_release_waiting_retry_after)
{
    /* (1) a 429 with Retry-After: 30 is waited out (one session); the
     * release ends it at once with its not_before, after one request */
    engine_start(NULL);
    memset(&hook, 0, sizeof(hook));
    fetch_set_retry_hook(g_f, hook_cb, NULL);
    void *op = (void *)0x101;
    int64_t t0 = ms_now(); /* before the 429, whose wait ends 30 s after */
    submit_op("/throttle?ra=30", ms_now() + 60000, 0, op);
    wait_hook_waits(1); /* it waits out the Retry-After */
    ck_assert_ptr_null(fetch_take(g_f, 0));
    fetch_release(g_f, op);
    /* at once, not after the 30 s (5 s: a slow machine's margin) */
    struct fetch_result *r = take_within(5000);
    ck_assert_msg(r, "no result within 5 s of the release");
    assert_released(r, op);
    ck_assert_int_eq(r->status, 429);
    ck_assert_uint_eq(r->attempts, 1);
    ck_assert_uint_eq(r->n_attempt_log, 1);
    ck_assert_str_eq(r->attempt_log[0].category, "throttled");
    ck_assert_int_ge(r->not_before_ms, t0 + 29000);
    ck_assert_int_eq(r->not_before_ms, hook.last_not_before);
    fetch_result_destroy(r);
    usleep(100000);
    ck_assert_int_eq(log_count("GET /throttle?ra=30"), 1);
    ck_assert_int_eq(atomic_load(&hook.waits), 1);
    ck_assert_int_eq(atomic_load(&hook.starts), 0); /* no retry started */
    ck_assert_ptr_null(fetch_take(g_f, 0));
    struct fetch_stats st;
    fetch_stats_get(g_f, &st);
    ck_assert_uint_eq(st.released, 1);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_uint_eq(fetch_inflight(g_f), 0);
    engine_stop();
}
END_TEST

START_TEST(test_release_running_completes)
{
    /* (2) a transfer in progress (slow origin) finishes and is delivered as
     * usual; an op queued behind it by the per-host cap ends at once */
    engine_start("DEDUPD_FETCH__PER_HOST_MAX_INFLIGHT=1");
    void *a = (void *)0x201, *b = (void *)0x202;
    submit_op("/held?op=rel2a", ms_now() + 10000, 0, a);
    wait_log("GET /held?op=rel2a", 1); /* a's transfer is in progress */
    submit_op("/plain?op=rel2b", ms_now() + 10000, 0, b);
    fetch_release(g_f, a);
    fetch_release(g_f, b);
    struct fetch_result *rb = take_within(5000);
    assert_released(rb, b); /* b first: a still transfers */
    gate_open(); /* b's release was applied: so was a's, before it */
    ck_assert_uint_eq(rb->attempts, 0);
    ck_assert_int_eq(rb->status, 0);
    struct fetch_result *ra = wait_one();
    ck_assert_ptr_eq(ra->opaque, a);
    ck_assert_msg(ra->ok, "%s", ra->error ? ra->error : "");
    ck_assert(!ra->released);
    ck_assert_int_eq(ra->status, 200);
    ck_assert_uint_eq(ra->body_len, 2);
    ck_assert_str_eq((const char *)ra->body, "ok");
    /* the body's digest, made on the engine thread (sha256sum of "ok") */
    ck_assert_str_eq(ra->body_sha256, "2689367b205c16ce32ed4200942b8b8b1e262dfc70d9bc9fbc77c49699a4f1df");
    ck_assert_uint_eq(ra->attempts, 1);
    ck_assert_int_eq(ra->not_before_ms, 0);
    fetch_result_destroy(ra);
    fetch_result_destroy(rb);
    usleep(100000);
    ck_assert_int_eq(log_count("GET /held?op=rel2a"), 1);
    ck_assert_int_eq(log_count("GET /plain?op=rel2b"), 0);
    ck_assert_ptr_null(fetch_take(g_f, 0));
    engine_stop();
}
END_TEST

/* The done hook (fetch_set_done_hook): once per final result, on the
 * engine thread, after body_sha256; never for a request released while its
 * transfer ran (its result is dropped); what it prepares is freed with the
 * result. */
static atomic_int g_done_calls, g_prep_frees;
static void *_Atomic g_done_last;
static char g_done_sha[65];

static void prep_free(void *p)
{
    atomic_fetch_add(&g_prep_frees, 1);
    free(p);
}

static void done_hook(void *hook, void *opaque, struct fetch_result *r)
{
    (void)hook;
    memcpy(g_done_sha, r->body_sha256, sizeof(g_done_sha));
    r->prepared = malloc(8);
    r->prepared_free = prep_free;
    g_done_last = opaque;
    atomic_fetch_add(&g_done_calls, 1);
}

START_TEST(test_done_hook)
{
    engine_start("DEDUPD_FETCH__PER_HOST_MAX_INFLIGHT=1");
    fetch_set_done_hook(g_f, done_hook, NULL);
    void *a = (void *)0x301, *c = (void *)0x302;
    submit_op("/held?op=dh1", ms_now() + 10000, 0, a);
    wait_log("GET /held?op=dh1", 1); /* a's transfer is in progress */
    fetch_release(g_f, a);
    releases_applied();
    gate_open();
    struct fetch_result *ra = wait_one();
    ck_assert_ptr_eq(ra->opaque, a);
    ck_assert_int_eq(atomic_load(&g_done_calls), 0); /* released: skipped */
    ck_assert_ptr_null(ra->prepared);
    fetch_result_destroy(ra);
    submit_op("/plain?op=dh2", ms_now() + 10000, 0, c);
    struct fetch_result *rc = wait_one();
    ck_assert_ptr_eq(rc->opaque, c);
    ck_assert_int_eq(atomic_load(&g_done_calls), 1);
    ck_assert_ptr_eq(g_done_last, c);
    ck_assert_ptr_nonnull(rc->prepared);
    ck_assert_str_eq(g_done_sha, rc->body_sha256); /* set before the hook */
    ck_assert_str_eq(rc->body_sha256,
                     "2689367b205c16ce32ed4200942b8b8b1e262dfc70d9bc9fbc77c49699a4f1df");
    ck_assert_int_eq(atomic_load(&g_prep_frees), 0);
    fetch_result_destroy(rc);
    ck_assert_int_eq(atomic_load(&g_prep_frees), 1);
    engine_stop();
}
END_TEST

START_TEST(test_release_running_retryable)
{
    /* (3) released while its attempt runs, the attempt fails retryably (a
     * slow 503): delivered released, no second attempt, no hook call */
    engine_start(NULL);
    memset(&hook, 0, sizeof(hook));
    fetch_set_retry_hook(g_f, hook_cb, NULL);
    srv.flaky = 1;
    void *op = (void *)0x301;
    submit_op("/held/flaky?op=rel3", ms_now() + 10000, 0, op);
    wait_log("GET /held/flaky?op=rel3", 1);
    fetch_release(g_f, op);
    releases_applied();
    gate_open();
    struct fetch_result *r = wait_one();
    assert_released(r, op);
    ck_assert_int_eq(r->status, 503);
    ck_assert_uint_eq(r->attempts, 1);
    ck_assert_uint_eq(r->n_attempt_log, 1);
    ck_assert_str_eq(r->attempt_log[0].category, "server_error");
    fetch_result_destroy(r);
    usleep(100000);
    ck_assert_int_eq(log_count("GET /held/flaky?op=rel3"), 1);
    ck_assert_int_eq(atomic_load(&hook.waits), 0);
    ck_assert_int_eq(atomic_load(&hook.starts), 0);
    ck_assert_ptr_null(fetch_take(g_f, 0));
    engine_stop();
}
END_TEST

START_TEST(test_release_unknown_harmless)
{
    /* (4) unknown and finished opaques are ignored; a release covers only
     * requests submitted before it; the others keep waiting */
    engine_start(NULL);
    memset(&hook, 0, sizeof(hook));
    fetch_set_retry_hook(g_f, hook_cb, NULL);
    void *reused = (void *)0x401, *b = (void *)0x402, *c = (void *)0x403,
         *d = (void *)0x404;
    fetch_release(g_f, reused); /* no such request yet */
    fetch_release(g_f, NULL);
    submit_op("/plain?op=rel4a", ms_now() + 10000, 0, reused);
    struct fetch_result *r = wait_one();
    ck_assert_ptr_eq(r->opaque, reused);
    ck_assert(r->ok && !r->released);
    fetch_result_destroy(r);
    fetch_release(g_f, reused); /* finished and taken */
    /* b waits out a Retry-After, c the session's cooldown (never started),
     * d its own not_before (a resumed wait) */
    int64_t tb = ms_now(); /* before b's 429: the cooldown ends 30 s after */
    submit_op("/throttle?ra=30", ms_now() + 60000, 0, b);
    wait_hook_waits(1);
    submit_op("/plain?op=rel4c", ms_now() + 60000, 0, c);
    int64_t d_at = ms_now() + 30000;
    submit_op("/plain?op=rel4d", ms_now() + 60000, d_at, d);
    fetch_release(g_f, (void *)0xbeef);
    fetch_release(g_f, reused);
    ck_assert_ptr_null(take_within(300));
    /* each release ends its op at once, not after the waits of 30 s
     * (5 s: a slow machine's margin) */
    fetch_release(g_f, c);
    r = take_within(5000);
    assert_released(r, c);
    ck_assert_uint_eq(r->attempts, 0);
    ck_assert_int_ge(r->not_before_ms, tb + 29000); /* the cooldown */
    fetch_result_destroy(r);
    fetch_release(g_f, d);
    r = take_within(5000);
    assert_released(r, d);
    ck_assert_uint_eq(r->attempts, 0);
    ck_assert_int_eq(r->not_before_ms, d_at);
    fetch_result_destroy(r);
    ck_assert_ptr_null(take_within(100)); /* b still waits */
    fetch_release(g_f, b);
    fetch_release(g_f, b);
    r = take_within(5000);
    assert_released(r, b);
    ck_assert_uint_eq(r->attempts, 1);
    fetch_result_destroy(r);
    ck_assert_ptr_null(take_within(100));
    ck_assert_int_eq(log_count("GET /throttle?ra=30"), 1);
    ck_assert_int_eq(log_count("GET /plain?op=rel4c"), 0);
    ck_assert_int_eq(log_count("GET /plain?op=rel4d"), 0);
    ck_assert_int_eq(atomic_load(&hook.starts), 0);
    ck_assert_uint_eq(fetch_inflight(g_f), 0);
    engine_stop();
}
END_TEST

START_TEST(test_release_workflow_between_steps)
{
    /* a workflow released while its first step runs: the step's answer is
     * recorded, the second step is never sent */
    engine_start(NULL);
    void *op = (void *)0x501;
    const char *p[] = {"/held?op=rel5a", "/plain?op=rel5b"};
    submit_wf(p, NULL, 2, true, false, op);
    wait_log("GET /held?op=rel5a", 1);
    fetch_release(g_f, op);
    releases_applied();
    gate_open();
    struct fetch_result *r = wait_one();
    assert_released(r, op);
    ck_assert_int_eq(r->status, 200);
    ck_assert_uint_eq(r->attempts, 1);
    ck_assert_uint_eq(r->n_steps_total, 2);
    ck_assert_uint_eq(r->n_steps, 2);
    ck_assert_int_eq(r->steps[0].status, 200);
    ck_assert_str_eq(r->steps[0].category, "");
    ck_assert_str_eq(r->steps[1].category, "released");
    ck_assert_uint_eq(r->steps[1].attempts, 0);
    fetch_result_destroy(r);
    usleep(100000);
    ck_assert_int_eq(log_count("GET /plain?op=rel5b"), 0);
    engine_stop();
}
END_TEST

Suite *fetch_engine_suite(void)
{
    Suite *s = suite_create("fetch_engine");
    TCase *tc = tcase_create("limits");
    tcase_add_test(tc, test_bucket_rate);
    tcase_add_test(tc, test_bucket_burst);
    tcase_add_test(tc, test_hosts_disabled);
    tcase_add_test(tc, test_hosts_cap);
    tcase_add_test(tc, test_hosts_rate);
    tcase_add_test(tc, test_hosts_sweep);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_set_timeout(te, 60);
    tcase_add_test(te, test_workflow_cookies);
    tcase_add_test(te, test_workflow_restart_safe);
    tcase_add_test(te, test_workflow_unsafe_fails);
    tcase_add_test(te, test_per_host_cap);
    tcase_add_test(te, test_deadline_before_retry_after_fails_at_once);
    tcase_add_test(te, test_deadline_after_retry_after_waits_it_out);
    tcase_add_test(te, test_release_waiting_retry_after);
    tcase_add_test(te, test_release_running_completes);
    tcase_add_test(te, test_done_hook);
    tcase_add_test(te, test_release_running_retryable);
    tcase_add_test(te, test_release_unknown_harmless);
    tcase_add_test(te, test_release_workflow_between_steps);
    suite_add_tcase(s, te);
    return s;
}
