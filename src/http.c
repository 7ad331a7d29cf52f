/* The admin and api listeners on libmicrohttpd; the only user of MHD.
 *
 * Threads: http_new(), the port getters and http_destroy() run on the caller's
 * thread (main); everything a request reaches runs on the thread of its
 * listener (each function says which). */
#include "http.h"
#include "log.h"
#include "metrics.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define FAC "HTTP"
#define CT_JSON "application/json"
#define CT_TEXT "text/plain; charset=utf-8"
#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define ALLOW_GET "GET, HEAD"
#define ALLOW_POST "POST"
#define PATH_JOBS "/v1/jobs"
#define PATH_OPS "/v1/ops/"
#define TOKEN_DIGEST_LEN 32 /* SHA-256 */
#define CONN_TIMEOUT_S 30u
#define ADMIN_CONN_LIMIT 64u
#define API_CONN_LIMIT 256u
#define DRAIN_MAX_BYTES (1024u * 1024u)

enum listener_kind { LISTENER_ADMIN, LISTENER_API };

/* One daemon.  Lives inside struct http, so its address is stable for the
 * daemon's lifetime (MHD callbacks get it as their closure). */
struct listener {
    struct http *http;
    enum listener_kind kind;
    const char *conf_key;       /* "admin.listen" / "api.listen" */
    char addr_text[64];         /* as configured, for messages */
    struct MHD_Daemon *daemon;
    uint16_t port;
    /* First MHD message since the daemon was created: explains a failed
     * start.  Written once (the flag), read only after a failed start. */
    atomic_bool log_taken;
    char first_log[256];
};

struct http {
    struct http_callbacks cb;
    size_t max_body_bytes;
    bool has_token;
    unsigned char token_digest[TOKEN_DIGEST_LEN];
    struct listener admin, api;
};

/* Per-request state (MHD's con_cls), freed by request_completed(). */
struct req {
    bool responded;  /* a response is queued; discard any further body */
    bool too_large;  /* the body passed max_body_bytes: drain, then 413 */
    size_t drained;  /* bytes of a too large body read so far */
    char *body;      /* NUL-terminated extra byte */
    size_t len, cap;
};

/* ---- address parsing ---------------------------------------------------- */

union sockaddr_any {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
};

/* "1.2.3.4:80" or "[::1]:80" -> sockaddr.  @locality http_new's caller.  Numeric only: the listeners bind
 * at start-up, before any resolver is worth trusting. */
static bool parse_listen(const char *s, union sockaddr_any *sa, bool *ipv6)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *port_s;
    size_t hlen;

    if (!s || !*s)
        return false;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return false;
        hlen = (size_t)(close - s - 1);
        if (hlen == 0 || hlen >= sizeof host)
            return false;
        memcpy(host, s + 1, hlen);
        port_s = close + 2;
        *ipv6 = true;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon)
            return false;
        hlen = (size_t)(colon - s);
        if (hlen == 0 || hlen >= sizeof host)
            return false;
        memcpy(host, s, hlen);
        port_s = colon + 1;
        *ipv6 = false;
    }
    host[hlen] = '\0';

    if (!*port_s || strlen(port_s) > 5)
        return false;
    unsigned long port = 0;
    for (const char *p = port_s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return false;
        port = port * 10 + (unsigned long)(*p - '0');
    }
    if (port > 65535)
        return false;

    memset(sa, 0, sizeof *sa);
    if (*ipv6) {
        sa->in6.sin6_family = AF_INET6;
        sa->in6.sin6_port = htons((uint16_t)port);
        return inet_pton(AF_INET6, host, &sa->in6.sin6_addr) == 1;
    }
    sa->in4.sin_family = AF_INET;
    sa->in4.sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->in4.sin_addr) == 1;
}

/* ---- responses ---------------------------------------------------------- */

struct hdr {
    const char *name, *value;
};

/* Queue a response; body is copied (MHD_RESPMEM_MUST_COPY).  Headers with a
 * NULL name are skipped.  @locality a listener's thread. */
static enum MHD_Result respond(struct MHD_Connection *conn, struct req *r,
                               unsigned status, const char *ctype,
                               const void *body, size_t len,
                               const struct hdr *hdrs, size_t n_hdrs)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    for (size_t i = 0; i < n_hdrs; i++)
        if (hdrs[i].name && hdrs[i].value)
            MHD_add_response_header(resp, hdrs[i].name, hdrs[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    if (r)
        r->responded = true;
    return ret;
}

/* @locality a listener's thread (MHD internal polling thread). */
static enum MHD_Result respond_text(struct MHD_Connection *conn,
                                    struct req *r, unsigned status,
                                    const char *text, const struct hdr *hdrs,
                                    size_t n_hdrs)
{
    return respond(conn, r, status, CT_TEXT, text, strlen(text), hdrs,
                   n_hdrs);
}

/* API errors: {"error":"code","message":"text"} (constant texts only).
 * @locality the api listener's thread. */
static enum MHD_Result respond_error(struct MHD_Connection *conn,
                                     struct req *r, unsigned status,
                                     const char *code, const char *message,
                                     const struct hdr *hdrs, size_t n_hdrs)
{
    char body[256];
    int n = snprintf(body, sizeof body, "{\"error\":\"%s\",\"message\":\"%s\"}",
                     code, message);
    if (n < 0 || (size_t)n >= sizeof body)
        n = 0;
    return respond(conn, r, status, CT_JSON, body, (size_t)n, hdrs, n_hdrs);
}

/* @locality a listener's thread (MHD internal polling thread). */
static enum MHD_Result respond_405(struct MHD_Connection *conn, struct req *r,
                                   const char *allow, bool json)
{
    struct hdr h = {MHD_HTTP_HEADER_ALLOW, allow};
    if (json)
        return respond_error(conn, r, MHD_HTTP_METHOD_NOT_ALLOWED,
                             "method_not_allowed", "method not allowed", &h,
                             1);
    return respond_text(conn, r, MHD_HTTP_METHOD_NOT_ALLOWED,
                        "method not allowed\n", &h, 1);
}

/* @locality any thread; pure. */
static bool is_get(const char *method)
{
    return strcmp(method, MHD_HTTP_METHOD_GET) == 0
        || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
}

/* ---- admin listener ----------------------------------------------------- */

/* @locality the admin listener's thread. */
static enum MHD_Result admin_handle(struct http *h,
                                    struct MHD_Connection *conn,
                                    struct req *r, const char *url,
                                    const char *method)
{
    bool healthz = strcmp(url, "/healthz") == 0;
    bool readyz = strcmp(url, "/readyz") == 0;
    bool metrics = strcmp(url, "/metrics") == 0;

    if (!healthz && !readyz && !metrics)
        return respond_text(conn, r, MHD_HTTP_NOT_FOUND, "not found\n", NULL,
                            0);
    if (!is_get(method))
        return respond_405(conn, r, ALLOW_GET, false);

    if (healthz)
        return respond_text(conn, r, MHD_HTTP_OK, "ok\n", NULL, 0);

    if (readyz) {
        char reason[HTTP_REASON_SIZE] = "";
        if (!h->cb.ready || h->cb.ready(h->cb.opaque, reason, sizeof reason))
            return respond_text(conn, r, MHD_HTTP_OK, "ready\n", NULL, 0);
        reason[sizeof reason - 1] = '\0';
        char body[HTTP_REASON_SIZE + 16];
        snprintf(body, sizeof body, "%s\n", reason[0] ? reason : "not ready");
        return respond_text(conn, r, MHD_HTTP_SERVICE_UNAVAILABLE, body, NULL,
                            0);
    }

    size_t len = 0;
    char *text = metrics_render(&len);
    if (!text)
        return respond_text(conn, r, MHD_HTTP_INTERNAL_SERVER_ERROR,
                            "out of memory\n", NULL, 0);
    enum MHD_Result ret =
        respond(conn, r, MHD_HTTP_OK, CT_METRICS, text, len, NULL, 0);
    free(text);
    return ret;
}

/* ---- api listener ------------------------------------------------------- */

/* @locality any thread (http_new's caller, the api listener). */
static void token_digest(const char *token, size_t len,
                         unsigned char out[TOKEN_DIGEST_LEN])
{
    unsigned int n = 0;
    if (!EVP_Digest(token, len, out, &n, EVP_sha256(), NULL)
        || n != TOKEN_DIGEST_LEN)
        /* Cannot happen with a working libcrypto; fail closed: a digest
         * of all 0xff never matches a computed one in practice, and the
         * configured digest is computed the same way. */
        memset(out, 0xff, TOKEN_DIGEST_LEN);
}

/* Constant-time check of "Authorization: Bearer <token>": both sides are
 * hashed, so the time depends on neither the token's bytes nor its length.
 * @locality the api listener's thread. */
static bool authorized(const struct http *h, struct MHD_Connection *conn,
                       bool *presented)
{
    *presented = false;
    if (!h->has_token)
        return true;
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v)
        return false;
    *presented = true;
    if (strncasecmp(v, "Bearer", 6) != 0 || (v[6] != ' ' && v[6] != '\t'))
        return false;
    v += 6;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t len = strlen(v);
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    unsigned char d[TOKEN_DIGEST_LEN];
    token_digest(v, len, d);
    return CRYPTO_memcmp(d, h->token_digest, TOKEN_DIGEST_LEN) == 0;
}

/* application/json, optionally followed by parameters ("; charset=utf-8").
 * @locality any thread; pure. */
static bool is_json_content_type(const char *ct)
{
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strlen(CT_JSON);
    if (strncasecmp(ct, CT_JSON, n) != 0)
        return false;
    ct += n;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* @locality any thread; pure. */
static bool is_http_token(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
            return false;
    return true;
}

/* @locality any thread; pure. */
static bool is_header_value(const char *s)
{
    for (; *s; s++)
        if (*s == '\r' || *s == '\n')
            return false;
    return true;
}

/* @locality the api listener's thread. */
static unsigned check_status(int status, const char *what)
{
    if (status >= 100 && status <= 599)
        return (unsigned)status;
    log_msg(LOG_ERR, FAC, "%s callback returned status %d; answering 500",
            what, status);
    return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

/* @locality the api listener's thread. */
static enum MHD_Result api_submit(struct http *h, struct MHD_Connection *conn,
                                  struct req *r)
{
    char *json = NULL, *hname = NULL, *hvalue = NULL;
    const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                  "Idempotency-Key");
    if (!h->cb.submit)
        return respond_error(conn, r, MHD_HTTP_SERVICE_UNAVAILABLE,
                             "unavailable", "job submission is not enabled",
                             NULL, 0);

    int status = h->cb.submit(h->cb.opaque, key, r->body ? r->body : "",
                              r->len, &json, &hname, &hvalue);
    unsigned st = check_status(status, "submit");
    struct hdr extra = {NULL, NULL};
    if (hname && hvalue) {
        if (is_http_token(hname) && is_header_value(hvalue)) {
            extra.name = hname;
            extra.value = hvalue;
        } else {
            log_msg(LOG_WARNING, FAC,
                    "submit callback returned an invalid header; dropped");
        }
    }
    enum MHD_Result ret = respond(conn, r, st, json ? CT_JSON : NULL, json,
                                  json ? strlen(json) : 0, &extra, 1);
    free(json);
    free(hname);
    free(hvalue);
    return ret;
}

/* @locality the api listener's thread. */
static enum MHD_Result api_op(struct http *h, struct MHD_Connection *conn,
                              struct req *r, const char *op_id)
{
    char *json = NULL;
    if (!h->cb.op)
        return respond_error(conn, r, MHD_HTTP_SERVICE_UNAVAILABLE,
                             "unavailable", "op lookup is not enabled", NULL,
                             0);
    unsigned st = check_status(h->cb.op(h->cb.opaque, op_id, &json), "op");
    enum MHD_Result ret = respond(conn, r, st, json ? CT_JSON : NULL, json,
                                  json ? strlen(json) : 0, NULL, 0);
    free(json);
    return ret;
}

/* First call of a request on the api listener: headers only.
 * @locality the api listener's thread. */
static enum MHD_Result api_begin(struct http *h, struct MHD_Connection *conn,
                                 struct req *r, const char *url,
                                 const char *method)
{
    bool presented;
    if (!authorized(h, conn, &presented)) {
        struct hdr www = {MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                          presented ? "Bearer realm=\"dedupd\", "
                                      "error=\"invalid_token\""
                                    : "Bearer realm=\"dedupd\""};
        return respond_error(conn, r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                             "missing or invalid bearer token", &www, 1);
    }

    if (strcmp(url, PATH_JOBS) == 0) {
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
            return respond_405(conn, r, ALLOW_POST, true);
        const char *ct = MHD_lookup_connection_value(
            conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!is_json_content_type(ct))
            return respond_error(conn, r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                 "unsupported_media_type",
                                 "Content-Type must be application/json",
                                 NULL, 0);
        const char *cl = MHD_lookup_connection_value(
            conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            errno = 0;
            char *end = NULL;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno == ERANGE || n > h->max_body_bytes)
                return respond_error(conn, r, MHD_HTTP_CONTENT_TOO_LARGE,
                                     "too_large", "request body too large",
                                     NULL, 0);
        }
        return MHD_YES; /* wait for the body */
    }

    if (strncmp(url, PATH_OPS, strlen(PATH_OPS)) == 0) {
        const char *op_id = url + strlen(PATH_OPS);
        size_t n = strlen(op_id);
        if (n == 0 || n > HTTP_OP_ID_MAX || strchr(op_id, '/'))
            return respond_error(conn, r, MHD_HTTP_NOT_FOUND, "not_found",
                                 "no such resource", NULL, 0);
        if (!is_get(method))
            return respond_405(conn, r, ALLOW_GET, true);
        return api_op(h, conn, r, op_id);
    }

    return respond_error(conn, r, MHD_HTTP_NOT_FOUND, "not_found",
                         "no such resource", NULL, 0);
}

/* Later calls: body chunks, then a last call with *upload_data_size == 0.
 * libmicrohttpd 0.9.75 refuses MHD_queue_response() while a body is being
 * received, so a body that passes the limit without a declared length is
 * drained and answered 413 at its end, up to DRAIN_MAX_BYTES; beyond that the
 * connection is closed without an answer.  @locality the api listener's
 * thread. */
static enum MHD_Result api_body(struct http *h, struct MHD_Connection *conn,
                                struct req *r, const char *data,
                                size_t *data_size)
{
    if (*data_size) {
        size_t n = *data_size;
        *data_size = 0;
        if (!r->too_large && n > h->max_body_bytes - r->len) {
            r->too_large = true;
            r->drained = r->len;
            free(r->body);
            r->body = NULL;
            r->len = r->cap = 0;
        }
        if (r->too_large) {
            r->drained += n;
            if (r->drained > DRAIN_MAX_BYTES) {
                log_msg(LOG_WARNING, FAC,
                        "api.listen: body over %zu bytes without a declared "
                        "length; connection closed", (size_t)DRAIN_MAX_BYTES);
                return MHD_NO;
            }
            return MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 1024;
            while (cap < r->len + n + 1)
                cap *= 2;
            if (cap > h->max_body_bytes + 1)
                cap = h->max_body_bytes + 1;
            char *p = realloc(r->body, cap);
            if (!p)
                return MHD_NO; /* drop the connection */
            r->body = p;
            r->cap = cap;
        }
        memcpy(r->body + r->len, data, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    if (r->too_large)
        return respond_error(conn, r, MHD_HTTP_CONTENT_TOO_LARGE, "too_large",
                             "request body too large", NULL, 0);
    return api_submit(h, conn, r);
}

/* ---- MHD glue ----------------------------------------------------------- */

/* MHD's access handler.  @locality the listener's thread (cls). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    struct listener *l = cls;
    struct req *r = *con_cls;
    (void)version;

    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        if (l->kind == LISTENER_ADMIN)
            return admin_handle(l->http, conn, r, url, method);
        return api_begin(l->http, conn, r, url, method);
    }
    if (r->responded) {
        *data_size = 0; /* already answered: discard the rest */
        return MHD_YES;
    }
    return api_body(l->http, conn, r, data, data_size);
}

/* MHD's request-completed callback.  @locality the listener's thread. */
static void on_completed(void *cls, struct MHD_Connection *conn,
                         void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct req *r = *con_cls;
    if (r) {
        free(r->body);
        free(r);
        *con_cls = NULL;
    }
}

/* MHD's logger.  @locality the listener's thread, or http_new's caller
 * while the daemon starts. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct listener *l = cls;
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    if (!atomic_exchange(&l->log_taken, true))
        snprintf(l->first_log, sizeof l->first_log, "%s", msg);
    log_msg(LOG_WARNING, FAC, "%s %s: %s", l->conf_key, l->addr_text, msg);
}

/* @locality http_new's caller. */
static dd_err_t listener_start(struct http *h, struct listener *l,
                               enum listener_kind kind, const char *conf_key,
                               const char *addr, char *errstr,
                               size_t errstr_size)
{
    union sockaddr_any sa;
    bool ipv6 = false;

    l->http = h;
    l->kind = kind;
    l->conf_key = conf_key;
    snprintf(l->addr_text, sizeof l->addr_text, "%s", addr ? addr : "");
    if (!parse_listen(addr, &sa, &ipv6)) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: '%s' is not ADDR:PORT (an IPv4 address or "
                      "[IPv6 address], port 0..65535)",
                      conf_key, addr ? addr : "");
        return DD_ERR_INVAL;
    }

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ipv6)
        flags |= MHD_USE_IPv6;
    atomic_store(&l->log_taken, false);
    l->first_log[0] = '\0';
    errno = 0;
    l->daemon = MHD_start_daemon(
        flags, ntohs(ipv6 ? sa.in6.sin6_port : sa.in4.sin_port), NULL, NULL,
        on_request, l,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, l,
        MHD_OPTION_SOCK_ADDR, &sa.sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
        MHD_OPTION_CONNECTION_TIMEOUT, CONN_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT,
        kind == LISTENER_ADMIN ? ADMIN_CONN_LIMIT : API_CONN_LIMIT,
        MHD_OPTION_END);
    if (!l->daemon) {
        int e = errno;
        /* MHD says why through its logger ("Failed to bind to port N: ...")
         * and leaves errno from the failing call. */
        if (strstr(l->first_log, "bind") && e)
            dd_errstr_set(errstr, errstr_size, "bind %s: %s", l->addr_text,
                          strerror(e));
        else if (l->first_log[0])
            dd_errstr_set(errstr, errstr_size, "listen %s: %s", l->addr_text,
                          l->first_log);
        else
            dd_errstr_set(errstr, errstr_size, "listen %s: %s", l->addr_text,
                          e ? strerror(e) : "MHD_start_daemon failed");
        return DD_ERR_IO;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_BIND_PORT);
    l->port = info ? info->port : 0;
    log_msg(LOG_INFO, FAC, "%s listening on %s (port %u)", conf_key,
            l->addr_text, (unsigned)l->port);
    return DD_OK;
}

/* @locality http_new's caller; pure. */
static bool token_ok(const char *t)
{
    for (; *t; t++)
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
            return false;
    return true;
}

dd_err_t http_new(const struct http_conf *conf, const struct http_callbacks *cb,
                  struct http **out, char *errstr, size_t errstr_size)
{
    dd_err_t err;
    struct http *h = NULL;

    if (conf->max_body_bytes == 0) {
        dd_errstr_set(errstr, errstr_size,
                      "api.max_body_bytes: must be at least 1");
        return DD_ERR_INVAL;
    }
    if (conf->api_token && *conf->api_token && !token_ok(conf->api_token)) {
        /* never echo the value: it is a secret */
        dd_errstr_set(errstr, errstr_size,
                      "api.token: must be printable ASCII without spaces");
        return DD_ERR_INVAL;
    }

    h = calloc(1, sizeof *h);
    if (!h) {
        dd_errstr_set(errstr, errstr_size, "http_new: out of memory");
        return DD_ERR_NOMEM;
    }
    if (cb)
        h->cb = *cb;
    h->max_body_bytes = conf->max_body_bytes;
    if (conf->api_token && *conf->api_token) {
        h->has_token = true;
        token_digest(conf->api_token, strlen(conf->api_token),
                     h->token_digest);
    }

    err = listener_start(h, &h->admin, LISTENER_ADMIN, "admin.listen",
                         conf->admin_listen, errstr, errstr_size);
    if (err)
        goto out;
    if (conf->api_listen && *conf->api_listen) {
        err = listener_start(h, &h->api, LISTENER_API, "api.listen",
                             conf->api_listen, errstr, errstr_size);
        if (err)
            goto out;
    }
    *out = h;
    h = NULL;
out:
    http_destroy(h);
    return err;
}

uint16_t http_admin_port(const struct http *h)
{
    return h->admin.port;
}

uint16_t http_api_port(const struct http *h)
{
    return h->api.daemon ? h->api.port : 0;
}

void http_destroy(struct http *h)
{
    if (!h)
        return;
    if (h->api.daemon)
        MHD_stop_daemon(h->api.daemon);
    if (h->admin.daemon)
        MHD_stop_daemon(h->admin.daemon);
    OPENSSL_cleanse(h->token_digest, sizeof h->token_digest);
    free(h);
}
