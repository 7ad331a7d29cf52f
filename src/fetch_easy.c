/* The fetch engine's libcurl easy handles (fetch_internal.h): the options
 * of an attempt, the session's proxy and credentials, the request, a
 * workflow's cookie jar, the write/header callbacks that collect the
 * response (body cap, header cap, the headers kept), and the SSRF guard at
 * the libcurl boundary (a URL's IP literal; the open-socket callback for
 * the resolved address of a direct connection).  The transfer state
 * machine that drives them is fetch.c's.
 *
 * Threads: everything here runs on the fetch-engine thread (libcurl calls
 * the callbacks from curl_multi_perform there), except the cookie-jar
 * clean-up of a failed submit (the submitter's). */
#include "dd.h"
#include "fetch_internal.h"

#include <ctype.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "config.h"
#include "fetch_outcome.h"
#include "guard.h"
#include "proxy_pool.h"

/* ---- SSRF guard (guard.h) at the libcurl boundary ---------------------- */

/* Refuse the target of \p url if it is an internal IP literal.
 * @locality fetch-engine thread */
bool fetch_easy_target_refused(struct fetch *f, const char *url)
{
    CURLU *u = curl_url();
    bool refused = false;
    char *host = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK)
        refused = guard_host_refused(f->guard, host);
    curl_free(host);
    curl_url_cleanup(u);
    return refused;
}

/* Direct fetches: check the address libcurl is about to connect to (it has
 * resolved the name), so a name that resolves inside is refused too.
 * @locality fetch-engine thread (libcurl callback) */
static curl_socket_t open_socket_cb(void *clientp, curlsocktype purpose,
                                    struct curl_sockaddr *addr)
{
    struct xfer *x = clientp;
    (void)purpose;
    if (!x->proxied) {
        const void *a = NULL;
        if (addr->family == AF_INET)
            a = &((struct sockaddr_in *)&addr->addr)->sin_addr;
        else if (addr->family == AF_INET6)
            a = &((struct sockaddr_in6 *)&addr->addr)->sin6_addr;
        if (a && guard_addr_refused(x->f->guard, addr->family, a)) {
            x->refused_target = true;
            return CURL_SOCKET_BAD;
        }
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

/* libcurl before 8.8.0 URL-decodes CURLOPT_PROXYUSERNAME and
 * CURLOPT_PROXYPASSWORD (curl issue 13265), so "%41" would reach the proxy as
 * "A".  On those versions every byte outside RFC 3986 unreserved is
 * percent-encoded, which that decoding turns back into the exact bytes.
 * @locality fetch-engine thread */
static char *cred_for_curl(const char *v)
{
    static int must_encode = -1;
    if (must_encode < 0) {
        const curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
        must_encode = vi->version_num < 0x080800;
    }
    if (!must_encode)
        return dd_xstrdup(v, "proxy credentials");
    size_t n = strlen(v);
    char *out = dd_xmalloc(n * 3 + 1, "proxy credentials"), *o = out;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~')
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    *o = '\0';
    return out;
}

/* ---- the response: write and header callbacks ------------------------ */

/* @locality fetch-engine thread (libcurl callback) */
static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct xfer *x = userdata;
    size_t n = size * nmemb;
    size_t max = (size_t)x->f->cfg->fetch_max_body_bytes;
    if (x->rlen + n > max) {
        x->too_large = true;
        return 0; /* aborts with CURLE_WRITE_ERROR */
    }
    if (x->rlen + n + 1 > x->rcap) {
        size_t cap = x->rcap ? x->rcap : 16384;
        while (cap < x->rlen + n + 1)
            cap *= 2;
        x->rbody = dd_xrealloc(x->rbody, cap, "response body");
        x->rcap = cap;
    }
    memcpy(x->rbody + x->rlen, ptr, n);
    x->rlen += n;
    return n;
}

/* @locality fetch-engine thread */
static void set_str(char **dst, const char *v, size_t n)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    free(*dst);
    *dst = dd_xmalloc(n + 1, "response header");
    memcpy(*dst, v, n);
    (*dst)[n] = '\0';
}

/* @locality fetch-engine thread (libcurl callback) */
static size_t header_cb(char *buf, size_t size, size_t nitems, void *userdata)
{
    struct xfer *x = userdata;
    size_t n = size * nitems;
    /* Our own cap on a header block, below libcurl's (300 KB in 7.88, other
     * codes in other versions): oversized headers are a protocol failure. */
    x->header_bytes += n;
    if (x->header_bytes > FETCH_MAX_HEADER_BYTES) {
        x->headers_too_large = true;
        return 0;
    }
    if (n >= 5 && !strncmp(buf, "HTTP/", 5)) {
        x->header_bytes = n;
        /* A new header block (after CONNECT, 1xx or a redirect): reset. */
        free(x->retry_after), x->retry_after = NULL;
        free(x->etag), x->etag = NULL;
        free(x->last_modified), x->last_modified = NULL;
        free(x->content_type), x->content_type = NULL;
        return n;
    }
    static const struct { const char *name; size_t off; } want[] = {
        {"retry-after:", offsetof(struct xfer, retry_after)},
        {"etag:", offsetof(struct xfer, etag)},
        {"last-modified:", offsetof(struct xfer, last_modified)},
        {"content-type:", offsetof(struct xfer, content_type)},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        size_t k = strlen(want[i].name);
        if (n > k && !strncasecmp(buf, want[i].name, k)) {
            set_str((char **)((char *)x + want[i].off), buf + k, n - k);
            break;
        }
    }
    return n;
}

/* @locality fetch-engine thread */
void fetch_easy_reset_response(struct xfer *x)
{
    x->rlen = 0;
    x->too_large = x->refused_target = x->headers_too_large = false;
    x->header_bytes = 0;
    x->asked_wait_ms = -1;
    free(x->retry_after), x->retry_after = NULL;
    free(x->etag), x->etag = NULL;
    free(x->last_modified), x->last_modified = NULL;
    free(x->content_type), x->content_type = NULL;
    x->errbuf[0] = '\0';
}

/* Drop the op's cookie jar (a new session starts with none).
 * @locality fetch-engine thread (or the submitter's, for a failed submit) */
void fetch_easy_jar_drop(struct xfer *x)
{
    if (!x->jar)
        return;
    if (x->easy)
        curl_easy_setopt(x->easy, CURLOPT_SHARE, NULL);
    curl_share_cleanup(x->jar);
    x->jar = NULL;
}

/* libcurl 7.88 keeps CURLOPT_COOKIEFILE names in a list that only a
 * transfer start consumes, and neither curl_easy_reset nor
 * curl_easy_cleanup frees it (LeakSanitizer: 16 + 1 bytes per set-up that
 * never ran); setting it to NULL frees the list (lib/setopt.c) and leaves a
 * shared jar's cookies alone.
 * @locality fetch-engine thread (or the submitter's, for a failed submit) */
void fetch_easy_cookiefile_clear(struct xfer *x)
{
    if (x->easy && x->workflow)
        curl_easy_setopt(x->easy, CURLOPT_COOKIEFILE, (char *)NULL);
}

/* ---- the easy handle's options ------------------------------------------- */

/* A new or reset easy handle for \p x, with the options every attempt sets.
 * @locality fetch-engine thread */
static CURL *easy_prepare(struct fetch *f, struct xfer *x)
{
    if (!x->easy) {
        x->easy = curl_easy_init();
        if (!x->easy)
            dd_oom("curl easy handle");
    } else {
        fetch_easy_cookiefile_clear(x);
        curl_easy_reset(x->easy);
    }
    CURL *e = x->easy;
    const struct cfg *c = f->cfg;
    curl_easy_setopt(e, CURLOPT_URL, x->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->fetch_timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->fetch_connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L); /* followed by hand */
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, c->fetch_user_agent);
    if (x->fresh_connect) {
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        x->fresh_connect = false;
    }
    return e;
}

/* The op's cookie jar: a per-op share, so that cookies survive
 * curl_easy_reset and never meet another op's.  A jar belongs to one
 * session (and one exit of it): a new one starts empty.
 * @locality fetch-engine thread */
static void easy_set_jar(struct xfer *x, CURL *e,
                         const struct proxy_pool_session_info *s)
{
    if (x->jar && (x->jar_session != x->session ||
                   x->jar_renewals != s->renewals || x->jar_epoch != s->epoch))
        fetch_easy_jar_drop(x);
    if (!x->jar) {
        x->jar = curl_share_init();
        if (!x->jar)
            dd_oom("cookie jar");
        curl_share_setopt(x->jar, CURLSHOPT_SHARE, CURL_LOCK_DATA_COOKIE);
        x->jar_session = x->session;
        x->jar_renewals = s->renewals;
        x->jar_epoch = s->epoch;
    }
    curl_easy_setopt(e, CURLOPT_SHARE, x->jar);
    curl_easy_setopt(e, CURLOPT_COOKIEFILE, "");
}

/* The proxy of \p x's session, its credentials and its connection reuse.
 * @locality fetch-engine thread */
static void easy_set_proxy(struct fetch *f, struct xfer *x, CURL *e, int64_t now)
{
    struct proxy_pool_session_info s;
    proxy_pool_session_get(f->pool, x->session, &s);
    x->proxied = s.proxy != NULL;
    if (!s.proxy) {
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        return;
    }
    curl_easy_setopt(e, CURLOPT_PROXY, s.proxy);
    if (s.username) {
        /* Never spliced into the proxy URL (DESIGN.md section 5). */
        char *u = cred_for_curl(s.username);
        char *pw = cred_for_curl(s.password);
        curl_easy_setopt(e, CURLOPT_PROXYUSERNAME, u);
        curl_easy_setopt(e, CURLOPT_PROXYPASSWORD, pw);
        memset(pw, 0, strlen(pw));
        free(u);
        free(pw);
    }
    if (s.per_request || !strcmp(x->rotation, "per_request")) {
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    } else if (s.timed) {
        /* No connection (tunnel) of an earlier interval: its exit is
         * gone.  CURLOPT_MAXLIFETIME_CONN counts whole seconds of a
         * connection's age, so early in an interval every connection is
         * fresh, later only those younger than the interval are reused. */
        proxy_pool_refresh(f->pool, x->session, now);
        proxy_pool_session_get(f->pool, x->session, &s);
        int64_t in = now - s.epoch_start_ms;
        if (in < 2000)
            curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        else
            curl_easy_setopt(e, CURLOPT_MAXLIFETIME_CONN, (long)(in / 1000 - 1));
    }
}

/* The current step's headers, method and body.
 * @locality fetch-engine thread */
static void easy_set_request(struct xfer *x, CURL *e)
{
    struct wstep *w = &x->steps[x->step];
    curl_slist_free_all(x->slist);
    x->slist = NULL;
    for (size_t i = 0; i < w->n_headers; i++) {
        size_t n = strlen(w->hdr_names[i]) + strlen(w->hdr_values[i]) + 3;
        char *line = dd_xmalloc(n, "request header");
        if (w->hdr_values[i][0])
            snprintf(line, n, "%s: %s", w->hdr_names[i], w->hdr_values[i]);
        else
            snprintf(line, n, "%s;", w->hdr_names[i]);
        x->slist = curl_slist_append(x->slist, line);
        free(line);
    }
    if (x->slist)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->slist);
    if (!strcmp(x->method, "HEAD"))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(x->method, "GET") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x->method);
    if (x->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
    }
}

/* @locality fetch-engine thread */
void fetch_easy_setup(struct fetch *f, struct xfer *x, int64_t now)
{
    struct proxy_pool_session_info s;
    proxy_pool_session_get(f->pool, x->session, &s);
    fetch_easy_reset_response(x);
    CURL *e = easy_prepare(f, x);
    if (x->workflow)
        easy_set_jar(x, e, &s);
    easy_set_proxy(f, x, e, now);
    easy_set_request(x, e);
}
