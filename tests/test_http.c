/* Unit tests of http.c: both listeners on loopback, driven with libcurl. */
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http.h"
#include "log.h"
#include "metrics.h"

#define TOKEN "s3cret-Token_42"
#define MAX_BODY 64

/* ---- what the callbacks saw (written on the api/admin threads) ---------- */

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int submit_calls, op_calls;
    bool key_null;
    char key[128];
    char body[256];
    size_t len;
    bool body_nul_terminated;
    char op_id[HTTP_OP_ID_MAX + 1];
    void *opaque;
} seen;

static bool ready_flag;
static const char *ready_reason = "";
static int submit_status = 202;
static const char *submit_hname = "Location";
static const char *submit_hvalue = "/v1/ops/op-1";

static bool cb_ready(void *opaque, char *reason, size_t reason_size)
{
    (void)opaque;
    ck_assert_str_eq(reason, "");
    ck_assert_uint_eq(reason_size, HTTP_REASON_SIZE);
    if (!ready_flag)
        snprintf(reason, reason_size, "%s", ready_reason);
    return ready_flag;
}

static int cb_submit(void *opaque, const char *key, const void *body,
                     size_t len, char **json, char **hname, char **hvalue)
{
    pthread_mutex_lock(&seen_lock);
    seen.submit_calls++;
    seen.opaque = opaque;
    seen.key_null = key == NULL;
    snprintf(seen.key, sizeof seen.key, "%s", key ? key : "");
    seen.len = len;
    if (len < sizeof seen.body) {
        memcpy(seen.body, body, len);
        seen.body[len] = '\0';
    }
    seen.body_nul_terminated = ((const char *)body)[len] == '\0';
    pthread_mutex_unlock(&seen_lock);

    *json = strdup("{\"op_id\":\"op-1\",\"status\":\"accepted\"}");
    if (submit_hname) {
        *hname = strdup(submit_hname);
        *hvalue = strdup(submit_hvalue);
    }
    return submit_status;
}

static int cb_op(void *opaque, const char *op_id, char **json)
{
    pthread_mutex_lock(&seen_lock);
    seen.op_calls++;
    seen.opaque = opaque;
    snprintf(seen.op_id, sizeof seen.op_id, "%s", op_id);
    pthread_mutex_unlock(&seen_lock);
    if (strcmp(op_id, "known") == 0 || strcmp(op_id, "a b") == 0) {
        *json = strdup("{\"op_id\":\"known\",\"state\":\"complete\"}");
        return 200;
    }
    *json = strdup("{\"error\":\"not_found\"}");
    return 404;
}

static int opaque_marker;
static struct http *srv;

static void start(const char *api_listen, const char *token)
{
    memset(&seen, 0, sizeof seen);
    ready_flag = true;
    ready_reason = "";
    submit_status = 202;
    submit_hname = "Location";
    submit_hvalue = "/v1/ops/op-1";
    metrics_reset();

    struct http_conf conf = {
        .admin_listen = "127.0.0.1:0",
        .api_listen = api_listen,
        .api_token = token,
        .max_body_bytes = MAX_BODY,
    };
    struct http_callbacks cb = {
        .ready = cb_ready, .submit = cb_submit, .op = cb_op,
        .opaque = &opaque_marker,
    };
    char errstr[DD_ERRSTR_SIZE] = "";
    dd_err_t err = http_new(&conf, &cb, &srv, errstr, sizeof errstr);
    ck_assert_msg(err == DD_OK, "http_new: %s", errstr);
    ck_assert_uint_ne(http_admin_port(srv), 0);
}

static void setup_token(void)
{
    start("127.0.0.1:0", TOKEN);
}

static void setup_open(void)
{
    start("127.0.0.1:0", NULL);
}

static void teardown(void)
{
    http_destroy(srv);
    srv = NULL;
}

/* ---- a tiny libcurl client ---------------------------------------------- */

struct resp {
    long status;
    char body[65536];
    size_t len;
    char headers[8192];
    size_t hlen;
};

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct resp *r = ud;
    size_t len = size * n;
    size_t room = sizeof r->body - 1 - r->len;
    if (len > room)
        len = room;
    memcpy(r->body + r->len, p, len);
    r->len += len;
    r->body[r->len] = '\0';
    return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct resp *r = ud;
    size_t len = size * n;
    size_t room = sizeof r->headers - 1 - r->hlen;
    if (len > room)
        len = room;
    memcpy(r->headers + r->hlen, p, len);
    r->hlen += len;
    r->headers[r->hlen] = '\0';
    return size * n;
}

/* Chunked upload source. */
struct src {
    const char *p;
    size_t left;
};

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
    struct src *s = ud;
    size_t len = size * n;
    if (len > s->left)
        len = s->left;
    if (len > 16)
        len = 16; /* several chunks */
    memcpy(buf, s->p, len);
    s->p += len;
    s->left -= len;
    return len;
}

struct req_opts {
    const char *method;      /* default GET */
    const char *const *hdrs; /* NULL-terminated extra headers */
    const char *body;        /* POST body (Content-Length) */
    bool chunked;            /* send body chunked instead */
    bool may_fail;           /* a transport error is expected */
};

static void request(uint16_t port, const char *path,
                    const struct req_opts *o, struct resp *r)
{
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", (unsigned)port, path);
    memset(r, 0, sizeof *r);

    CURL *c = curl_easy_init();
    ck_assert_ptr_nonnull(c);
    struct curl_slist *hl = NULL;
    struct src src = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (o && o->method && strcmp(o->method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (o && o->method)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, o->method);
    if (o && o->body && !o->chunked) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, o->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(o->body));
    } else if (o && o->body) {
        src.p = o->body;
        src.left = strlen(o->body);
        curl_easy_setopt(c, CURLOPT_POST, 1L); /* body from on_read */
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &src);
        hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
    }
    /* no "Expect: 100-continue" round trip for small bodies */
    hl = curl_slist_append(hl, "Expect:");
    for (const char *const *h = o ? o->hdrs : NULL; h && *h; h++)
        hl = curl_slist_append(hl, *h);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);

    CURLcode rc = curl_easy_perform(c);
    if (o && o->may_fail && rc != CURLE_OK)
        r->status = -1;
    else
        ck_assert_msg(rc == CURLE_OK, "%s: %s", url, curl_easy_strerror(rc));
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
}

/* Case-insensitive "Name: value" line present in the response headers. */
static bool has_header(const struct resp *r, const char *name,
                       const char *value)
{
    char want[512];
    snprintf(want, sizeof want, "%s: %s\r\n", name, value);
    size_t n = strlen(want);
    for (const char *p = r->headers; *p; p++)
        if (strncasecmp(p, want, n) == 0 && (p == r->headers || p[-1] == '\n'))
            return true;
    return false;
}

static void get_admin(const char *path, const char *method, struct resp *r)
{
    struct req_opts o = {.method = method};
    request(http_admin_port(srv), path, &o, r);
}

/* ---- admin listener ----------------------------------------------------- */

START_TEST(test_http_healthz_ok)
{
    struct resp r;
    get_admin("/healthz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok\n");
    ck_assert(has_header(&r, "Content-Type", "text/plain; charset=utf-8"));
    get_admin("/healthz", "HEAD", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
}
END_TEST

START_TEST(test_http_readyz_follows_callback)
{
    struct resp r;
    get_admin("/readyz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ready\n");

    ready_flag = false;
    ready_reason = "consumer not assigned";
    get_admin("/readyz", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(r.body, "consumer not assigned\n");

    ready_reason = "";
    get_admin("/readyz", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(r.body, "not ready\n");

    ready_flag = true;
    get_admin("/readyz", NULL, &r);
    ck_assert_int_eq(r.status, 200);
}
END_TEST

START_TEST(test_http_metrics_exposition)
{
    metrics_job(METRICS_JOB_DUPLICATE);
    metrics_fetch_attempt("dns", 0.02);
    metrics_observe(METRICS_JOB_LATENCY_SECONDS, 2.5);
    struct resp r;
    get_admin("/metrics", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.headers, "Content-Type: text/plain; version=0.0.4")
                      != NULL,
                  "headers: %s", r.headers);
    ck_assert_ptr_nonnull(strstr(r.body, "# TYPE dedupd_jobs_total counter"));
    ck_assert_ptr_nonnull(
        strstr(r.body, "\ndedupd_jobs_total{outcome=\"duplicate\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(
        r.body, "\ndedupd_fetch_attempts_total{category=\"dns\"} 1\n"));
}
END_TEST

/* promtool (Debian package prometheus) lints the served exposition; the
 * test passes with a note when promtool is not installed. */
START_TEST(test_http_metrics_pass_promtool_check)
{
    const char *promtool = getenv("PROMTOOL");
    if (!promtool)
        promtool = "/usr/bin/promtool";
    if (access(promtool, X_OK) != 0) {
        fprintf(stderr, "note: %s not found; promtool check skipped\n",
                promtool);
        return;
    }
    metrics_job(METRICS_JOB_NEW);
    metrics_observe(METRICS_FETCH_DURATION_SECONDS, 0.3);
    metrics_gauge_set(METRICS_READY, 1);
    struct resp r;
    get_admin("/metrics", NULL, &r);
    ck_assert_int_eq(r.status, 200);

    char path[] = "/tmp/dedupd-metrics-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, r.body, r.len), (ssize_t)r.len);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s check metrics < %s 2>&1", promtool, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[4096] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    unlink(path);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "promtool check metrics failed:\n%s", out);
    ck_assert_msg(n == 0, "promtool lint findings:\n%s", out);
}
END_TEST

START_TEST(test_http_admin_unknown_path_404_and_wrong_method_405)
{
    struct resp r;
    get_admin("/nope", NULL, &r);
    ck_assert_int_eq(r.status, 404);
    get_admin("/v1/jobs", NULL, &r); /* the API is not on the admin port */
    ck_assert_int_eq(r.status, 404);
    get_admin("/healthz", "POST", &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert(has_header(&r, "Allow", "GET, HEAD"));
    get_admin("/metrics", "DELETE", &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert(has_header(&r, "Allow", "GET, HEAD"));
}
END_TEST

/* ---- api listener: authentication --------------------------------------- */

static void api(const char *path, const struct req_opts *o, struct resp *r)
{
    request(http_api_port(srv), path, o, r);
}

START_TEST(test_http_api_requires_bearer_token)
{
    struct resp r;
    api("/v1/ops/known", NULL, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert(has_header(&r, "WWW-Authenticate", "Bearer realm=\"dedupd\""));
    ck_assert(strstr(r.body, "\"error\":\"unauthorized\""));

    const char *wrong[] = {"Authorization: Bearer s3cret-Token_43", NULL};
    struct req_opts o = {.hdrs = wrong};
    api("/v1/ops/known", &o, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert(has_header(&r, "WWW-Authenticate",
                         "Bearer realm=\"dedupd\", error=\"invalid_token\""));

    const char *prefix[] = {"Authorization: Bearer s3cret", NULL};
    o.hdrs = prefix;
    api("/v1/ops/known", &o, &r);
    ck_assert_int_eq(r.status, 401);

    const char *basic[] = {"Authorization: Basic " TOKEN, NULL};
    o.hdrs = basic;
    api("/v1/ops/known", &o, &r);
    ck_assert_int_eq(r.status, 401);

    /* unknown paths are not revealed without a token */
    o.hdrs = NULL;
    api("/nope", &o, &r);
    ck_assert_int_eq(r.status, 401);

    const char *post[] = {"Content-Type: application/json", NULL};
    o.hdrs = post;
    o.body = "{}";
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 401);
    ck_assert_int_eq(seen.submit_calls + seen.op_calls, 0);

    const char *right[] = {"Authorization: bearer  " TOKEN, NULL};
    struct req_opts ok = {.hdrs = right};
    api("/v1/ops/known", &ok, &r);
    ck_assert_int_eq(r.status, 200);
}
END_TEST

START_TEST(test_http_api_without_token_is_open)
{
    struct resp r;
    api("/v1/ops/known", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    const char *any[] = {"Authorization: Bearer whatever", NULL};
    struct req_opts o = {.hdrs = any};
    api("/v1/ops/known", &o, &r);
    ck_assert_int_eq(r.status, 200);
}
END_TEST

/* ---- api listener: routes ----------------------------------------------- */

#define AUTH "Authorization: Bearer " TOKEN

START_TEST(test_http_api_op_lookup_delegated)
{
    const char *h[] = {AUTH, NULL};
    struct req_opts o = {.hdrs = h};
    struct resp r;
    api("/v1/ops/known", &o, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"op_id\":\"known\",\"state\":\"complete\"}");
    ck_assert(has_header(&r, "Content-Type", "application/json"));
    ck_assert_str_eq(seen.op_id, "known");
    ck_assert_ptr_eq(seen.opaque, &opaque_marker);

    api("/v1/ops/unknown-op", &o, &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(seen.op_id, "unknown-op");
    ck_assert_str_eq(r.body, "{\"error\":\"not_found\"}");

    api("/v1/ops/a%20b", &o, &r); /* URL-decoded */
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(seen.op_id, "a b");
    ck_assert_int_eq(seen.op_calls, 3);

    /* not op ids: empty, nested, too long */
    api("/v1/ops/", &o, &r);
    ck_assert_int_eq(r.status, 404);
    api("/v1/ops/a/b", &o, &r);
    ck_assert_int_eq(r.status, 404);
    char longpath[HTTP_OP_ID_MAX + 32];
    snprintf(longpath, sizeof longpath, "/v1/ops/");
    memset(longpath + 8, 'x', HTTP_OP_ID_MAX + 1);
    longpath[8 + HTTP_OP_ID_MAX + 1] = '\0';
    api(longpath, &o, &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_int_eq(seen.op_calls, 3);

    struct req_opts post = {.method = "POST", .hdrs = h};
    api("/v1/ops/known", &post, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert(has_header(&r, "Allow", "GET, HEAD"));
}
END_TEST

START_TEST(test_http_api_unknown_path_404_and_wrong_method_405)
{
    const char *h[] = {AUTH, NULL};
    struct req_opts o = {.hdrs = h};
    struct resp r;
    api("/v2/jobs", &o, &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert(strstr(r.body, "\"error\":\"not_found\""));
    api("/healthz", &o, &r); /* probes are not on the api port */
    ck_assert_int_eq(r.status, 404);
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert(has_header(&r, "Allow", "POST"));
    o.method = "PUT";
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 405);
    ck_assert_int_eq(seen.submit_calls, 0);
}
END_TEST

START_TEST(test_http_api_submit_delegated)
{
    const char *h[] = {AUTH, "Content-Type: application/json",
                       "Idempotency-Key: order-17", NULL};
    struct req_opts o = {.hdrs = h, .body = "{\"url\":\"https://x/\"}"};
    struct resp r;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
    ck_assert_str_eq(r.body, "{\"op_id\":\"op-1\",\"status\":\"accepted\"}");
    ck_assert(has_header(&r, "Content-Type", "application/json"));
    ck_assert(has_header(&r, "Location", "/v1/ops/op-1"));
    ck_assert_int_eq(seen.submit_calls, 1);
    ck_assert(!seen.key_null);
    ck_assert_str_eq(seen.key, "order-17");
    ck_assert_str_eq(seen.body, "{\"url\":\"https://x/\"}");
    ck_assert_uint_eq(seen.len, strlen("{\"url\":\"https://x/\"}"));
    ck_assert(seen.body_nul_terminated);
    ck_assert_ptr_eq(seen.opaque, &opaque_marker);

    /* no Idempotency-Key; the callback's status is passed through */
    submit_status = 409;
    submit_hname = "Retry-After";
    submit_hvalue = "1";
    const char *h2[] = {AUTH, "Content-Type: application/json; charset=utf-8",
                        NULL};
    o.hdrs = h2;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 409);
    ck_assert(has_header(&r, "Retry-After", "1"));
    ck_assert(seen.key_null);

    submit_status = 422;
    submit_hname = NULL;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 422);
    ck_assert_int_eq(seen.submit_calls, 3);
}
END_TEST

START_TEST(test_http_api_submit_empty_and_limit_bodies)
{
    const char *h[] = {AUTH, "Content-Type: application/json", NULL};
    struct req_opts o = {.method = "POST", .hdrs = h};
    struct resp r;
    api("/v1/jobs", &o, &r); /* no body at all */
    ck_assert_int_eq(r.status, 202);
    ck_assert_uint_eq(seen.len, 0);
    ck_assert(seen.body_nul_terminated);

    char body[MAX_BODY + 1];
    memset(body, 'a', MAX_BODY);
    body[MAX_BODY] = '\0';
    struct req_opts full = {.hdrs = h, .body = body};
    api("/v1/jobs", &full, &r); /* exactly the limit */
    ck_assert_int_eq(r.status, 202);
    ck_assert_uint_eq(seen.len, MAX_BODY);
    full.chunked = true;
    api("/v1/jobs", &full, &r);
    ck_assert_int_eq(r.status, 202);
    ck_assert_uint_eq(seen.len, MAX_BODY);
    ck_assert_str_eq(seen.body, body);
    ck_assert_int_eq(seen.submit_calls, 3);
}
END_TEST

START_TEST(test_http_api_body_over_limit_413)
{
    const char *h[] = {AUTH, "Content-Type: application/json", NULL};
    char body[MAX_BODY + 2];
    memset(body, 'a', MAX_BODY + 1);
    body[MAX_BODY + 1] = '\0';
    struct req_opts o = {.hdrs = h, .body = body};
    struct resp r;
    api("/v1/jobs", &o, &r); /* declared by Content-Length */
    ck_assert_int_eq(r.status, 413);
    ck_assert(strstr(r.body, "\"error\":\"too_large\""));

    o.chunked = true; /* discovered while reading */
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 413);

    static char big[40000];
    memset(big, 'b', sizeof big - 1);
    o.body = big;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 413);
    o.chunked = false;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 413);
    ck_assert_int_eq(seen.submit_calls, 0);

    /* the listener still serves afterwards */
    o.body = "{}";
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
}
END_TEST

START_TEST(test_http_api_endless_chunked_body_closes_connection)
{
    const char *h[] = {AUTH, "Content-Type: application/json", NULL};
    size_t n = 2u * 1024 * 1024;
    char *big = malloc(n + 1);
    ck_assert_ptr_nonnull(big);
    memset(big, 'c', n);
    big[n] = '\0';
    struct req_opts o = {.hdrs = h, .body = big, .chunked = true,
                         .may_fail = true};
    struct resp r;
    api("/v1/jobs", &o, &r);
    free(big);
    ck_assert_int_eq(r.status, -1); /* closed, not answered */
    ck_assert_int_eq(seen.submit_calls, 0);

    o = (struct req_opts){.hdrs = h, .body = "{}"};
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
}
END_TEST

START_TEST(test_http_api_requires_json_content_type_415)
{
    const char *text[] = {AUTH, "Content-Type: text/plain", NULL};
    struct req_opts o = {.hdrs = text, .body = "{}"};
    struct resp r;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 415);
    ck_assert(strstr(r.body, "\"error\":\"unsupported_media_type\""));

    const char *similar[] = {AUTH, "Content-Type: application/jsonx", NULL};
    o.hdrs = similar;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 415);

    const char *none[] = {AUTH, "Content-Type:", NULL}; /* curl drops it */
    o.hdrs = none;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 415);
    ck_assert_int_eq(seen.submit_calls, 0);

    const char *upper[] = {AUTH, "Content-Type: Application/JSON", NULL};
    o.hdrs = upper;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
}
END_TEST

START_TEST(test_http_api_bad_callback_status_and_header)
{
    const char *h[] = {AUTH, "Content-Type: application/json", NULL};
    struct req_opts o = {.hdrs = h, .body = "{}"};
    struct resp r;
    submit_status = 42;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 500);

    submit_status = 202;
    submit_hname = "Bad Header";
    submit_hvalue = "x";
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
    ck_assert_ptr_null(strstr(r.headers, "Bad Header"));

    submit_hname = "X-Ok";
    submit_hvalue = "a\r\nSet-Cookie: evil=1";
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
    ck_assert_ptr_null(strstr(r.headers, "evil"));
}
END_TEST

/* The token is never written to the log, even at debug level. */
START_TEST(test_http_token_never_logged)
{
    char path[] = "/tmp/dedupd-httplog-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    int saved = dup(2);
    ck_assert_int_ge(dup2(fd, 2), 0);
    log_configure(LOG_DEBUG, "all");

    http_destroy(srv); /* restart so start-up lines are captured too */
    srv = NULL;
    start("127.0.0.1:0", TOKEN);
    struct resp r;
    const char *right[] = {AUTH, "Content-Type: application/json", NULL};
    const char *wrong[] = {"Authorization: Bearer " TOKEN "x", NULL};
    struct req_opts o = {.hdrs = right, .body = "{}"};
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 202);
    o.hdrs = wrong;
    api("/v1/jobs", &o, &r);
    ck_assert_int_eq(r.status, 401);
    http_destroy(srv);
    srv = NULL;

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[65536];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    ck_assert_msg(strstr(buf, "s3cret") == NULL, "token in log:\n%s", buf);
}
END_TEST

/* ---- construction ------------------------------------------------------- */

static dd_err_t try_new(const char *admin, const char *api_addr,
                        const char *token, size_t max_body, char *errstr,
                        struct http **out)
{
    struct http_conf conf = {.admin_listen = admin, .api_listen = api_addr,
                             .api_token = token, .max_body_bytes = max_body};
    struct http_callbacks cb = {0};
    return http_new(&conf, &cb, out, errstr, DD_ERRSTR_SIZE);
}

START_TEST(test_http_new_rejects_bad_listen_addresses)
{
    static const char *const bad[] = {
        "x", "", "127.0.0.1", "127.0.0.1:", ":9464", "127.0.0.1:99999",
        "127.0.0.1:-1", "127.0.0.1:9x", "localhost:9464", "::1:9464",
        "[::1]9464", "[]:1", "256.0.0.1:1", "127.0.0.1:123456",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char errstr[DD_ERRSTR_SIZE] = "";
        struct http *h = (struct http *)&opaque_marker;
        dd_err_t err = try_new(bad[i], NULL, NULL, 10, errstr, &h);
        ck_assert_msg(err == DD_ERR_INVAL, "'%s' accepted", bad[i]);
        ck_assert_ptr_eq(h, (struct http *)&opaque_marker); /* untouched */
        char want[128];
        snprintf(want, sizeof want, "admin.listen: '%s' is not ADDR:PORT",
                 bad[i]);
        ck_assert_msg(strncmp(errstr, want, strlen(want)) == 0,
                      "errstr '%s'", errstr);
    }

    char errstr[DD_ERRSTR_SIZE] = "";
    struct http *h = NULL;
    ck_assert_int_eq(try_new(NULL, NULL, NULL, 10, errstr, &h),
                     DD_ERR_INVAL);
    ck_assert_str_eq(errstr, "admin.listen: '' is not ADDR:PORT (an IPv4 "
                             "address or [IPv6 address], port 0..65535)");
    ck_assert_int_eq(try_new("127.0.0.1:0", "nope", NULL, 10, errstr, &h),
                     DD_ERR_INVAL);
    ck_assert(strncmp(errstr, "api.listen: 'nope' is not ADDR:PORT", 35) == 0);
    ck_assert_ptr_null(h);
}
END_TEST

START_TEST(test_http_new_rejects_bad_limits_and_token)
{
    char errstr[DD_ERRSTR_SIZE] = "";
    struct http *h = NULL;
    ck_assert_int_eq(try_new("127.0.0.1:0", NULL, NULL, 0, errstr, &h),
                     DD_ERR_INVAL);
    ck_assert_str_eq(errstr, "api.max_body_bytes: must be at least 1");
    ck_assert_int_eq(
        try_new("127.0.0.1:0", "127.0.0.1:0", "has space", 10, errstr, &h),
        DD_ERR_INVAL);
    ck_assert_str_eq(errstr,
                     "api.token: must be printable ASCII without spaces");
    ck_assert_ptr_null(strstr(errstr, "has space"));
    ck_assert_ptr_null(h);
}
END_TEST

START_TEST(test_http_new_port_in_use_is_io_error)
{
    char addr[64], errstr[DD_ERRSTR_SIZE] = "";
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)http_admin_port(srv));
    struct http *h = NULL;
    ck_assert_int_eq(try_new(addr, NULL, NULL, 10, errstr, &h), DD_ERR_IO);
    char want[128];
    snprintf(want, sizeof want, "bind %s: Address already in use", addr);
    ck_assert_str_eq(errstr, want);
    ck_assert_ptr_null(h);

    /* the api listener failing stops the admin one it already started */
    ck_assert_int_eq(try_new("127.0.0.1:0", addr, NULL, 10, errstr, &h),
                     DD_ERR_IO);
    ck_assert_str_eq(errstr, want);
    ck_assert_ptr_null(h);
}
END_TEST

START_TEST(test_http_api_off_and_destroy_null)
{
    char errstr[DD_ERRSTR_SIZE] = "";
    struct http *h = NULL;
    ck_assert_int_eq(try_new("127.0.0.1:0", "", NULL, 10, errstr, &h), DD_OK);
    ck_assert_uint_eq(http_api_port(h), 0);
    ck_assert_uint_ne(http_admin_port(h), 0);
    /* callbacks all NULL: always ready */
    struct resp r;
    struct req_opts o = {0};
    request(http_admin_port(h), "/readyz", &o, &r);
    ck_assert_int_eq(r.status, 200);
    http_destroy(h);
    http_destroy(NULL);
}
END_TEST

START_TEST(test_http_ipv6_loopback)
{
    char errstr[DD_ERRSTR_SIZE] = "";
    struct http *h = NULL;
    dd_err_t err = try_new("[::1]:0", NULL, NULL, 10, errstr, &h);
    /* No skip: the machines dedupd is tested on have ::1; a host without it
     * fails here rather than passing with nothing tested. */
    ck_assert_msg(err == DD_OK, "[::1]:0: %s (IPv6 loopback unavailable: "
                  "nothing was tested)", errstr);
    char url[64];
    snprintf(url, sizeof url, "http://[::1]:%u/healthz",
             (unsigned)http_admin_port(h));
    CURL *c = curl_easy_init();
    struct resp r = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(c);
    ck_assert_int_eq(r.status, 200);
    http_destroy(h);
}
END_TEST

Suite *http_suite(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    Suite *s = suite_create("http");

    TCase *tc = tcase_create("admin");
    tcase_add_checked_fixture(tc, setup_token, teardown);
    tcase_add_test(tc, test_http_healthz_ok);
    tcase_add_test(tc, test_http_readyz_follows_callback);
    tcase_add_test(tc, test_http_metrics_exposition);
    tcase_add_test(tc, test_http_metrics_pass_promtool_check);
    tcase_add_test(tc, test_http_admin_unknown_path_404_and_wrong_method_405);
    suite_add_tcase(s, tc);

    tc = tcase_create("auth");
    tcase_add_checked_fixture(tc, setup_token, teardown);
    tcase_add_test(tc, test_http_api_requires_bearer_token);
    tcase_add_test(tc, test_http_token_never_logged);
    suite_add_tcase(s, tc);

    tc = tcase_create("auth_off");
    tcase_add_checked_fixture(tc, setup_open, teardown);
    tcase_add_test(tc, test_http_api_without_token_is_open);
    suite_add_tcase(s, tc);

    tc = tcase_create("api");
    tcase_add_checked_fixture(tc, setup_token, teardown);
    tcase_add_test(tc, test_http_api_op_lookup_delegated);
    tcase_add_test(tc, test_http_api_unknown_path_404_and_wrong_method_405);
    tcase_add_test(tc, test_http_api_submit_delegated);
    tcase_add_test(tc, test_http_api_submit_empty_and_limit_bodies);
    tcase_add_test(tc, test_http_api_body_over_limit_413);
    tcase_add_test(tc, test_http_api_endless_chunked_body_closes_connection);
    tcase_add_test(tc, test_http_api_requires_json_content_type_415);
    tcase_add_test(tc, test_http_api_bad_callback_status_and_header);
    suite_add_tcase(s, tc);

    tc = tcase_create("construction");
    tcase_add_checked_fixture(tc, setup_token, teardown);
    tcase_add_test(tc, test_http_new_rejects_bad_listen_addresses);
    tcase_add_test(tc, test_http_new_rejects_bad_limits_and_token);
    tcase_add_test(tc, test_http_new_port_in_use_is_io_error);
    tcase_add_test(tc, test_http_api_off_and_destroy_null);
    tcase_add_test(tc, test_http_ipv6_loopback);
    suite_add_tcase(s, tc);
    return s;
}
