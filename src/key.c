/*
 * key.c - identity primitives: URL normalization (on top of libcurl's CURLU
 * parser) and SHA-256 hex digests (OpenSSL EVP).
 *
 * libcurl 7.88 parses but hardly normalizes (it lower-cases the scheme only,
 * keeps default ports, the fragment and escapes as given), so the rules of
 * DESIGN.md section 2 are applied here, in the order of RFC 3986 6.2.2:
 *
 *   1. case: scheme and host lower-cased (host after IDN -> punycode with
 *      CURLU_PUNYCODE); percent-encoding hex upper-cased; path and query case
 *      kept.
 *   2. percent-encoding: an escape of an unreserved character (ALPHA DIGIT
 *      - . _ ~) is decoded; every other escape is kept (%25 %23 %2F %3B %26
 *      %3D...).  Bytes that may not appear raw in a URI (non-ASCII, space,
 *      controls, " < > \ ^ ` { | }) are encoded, so "/é" and "/%C3%A9" are one
 *      key.  A '%' that does not start a valid escape is encoded as %25: a
 *      lenient server reads it as a literal '%', and leaving it would make
 *      "%%341" decode into a new escape on a second pass (not idempotent).
 *   3. dot segments removed (RFC 3986 5.2.4) after step 2, so "%2E%2E" counts
 *      as "..".  CURLU is told CURLU_PATH_AS_IS so that it does not remove them
 *      first, on the undecoded path.
 *   4. scheme-based: default port dropped (CURLU_NO_DEFAULT_PORT, scheme
 *      aware: https://x:80 keeps :80), an empty port dropped, an empty path
 *      becomes "/".
 *   5. the fragment is dropped, an empty query ("?") is dropped, and query
 *      parameters ('&'-separated) are stable-sorted by name (the bytes before
 *      the first '=', after step 2), so repeated names keep their order and
 *      "a" and "a=" stay distinct.
 *
 * Refused (DD_ERR_PERMANENT): schemes other than http/https, a missing "//"
 * authority, userinfo (credentials go in headers), an IPv6 zone id, port 0,
 * anything CURLU refuses (spaces, bad host, bad port...), a host that is not
 * UTF-8 or that IDN conversion refuses (curl answers CURLUE_OUT_OF_MEMORY for
 * those: reported as PERMANENT, not NOMEM).
 *
 * The host is the one curl connects to.  curl normalizes an IPv4 number
 * ("127.1", "0x7f.1", "7") before it percent-decodes the host and long before
 * IDN conversion, so "http://%37" and "http://\u00B9" (superscript one, "1"
 * after IDN) would give host "7" or "1", which the next parse (and the
 * resolver) reads as 0.0.0.7 or 0.0.0.1.  When the authority holds a '%' or a
 * non-ASCII byte, the host after decoding and IDN is therefore parsed once
 * more and the result of that second parse is kept: normalize stays a fixed
 * point (found by fuzz_url, tests/fuzz/regressions/url/).
 *
 * @locality any thread, every function: reentrant, no state but the SHA-256
 * method fetched once (pthread_once).  Callers: the pipeline, the job API's
 * thread (job_parse), the fetch engine and the store (key_sha256_hex).
 */
#include "key.h"
#include "dd.h"
#include "jstr.h"

#include <ctype.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <locale.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Growable string; oom is sticky so appends can be chained and checked once. */
struct sbuf {
    char *p;
    size_t len;
    size_t cap;
    bool oom;
};

static void sbuf_putn(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Room for \p n more bytes (and the NUL) in one allocation: the buffers of
 * a normalization are sized from their input up front, so a URL costs one
 * allocation a buffer where doubling from 64 bytes took two or three. */
static void sbuf_reserve(struct sbuf *b, size_t n)
{
    if (b->oom || b->len + n + 1 <= b->cap)
        return;
    char *p = realloc(b->p, b->len + n + 1);
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    b->p[b->len] = '\0'; /* p stays NULL or a string (append_path) */
    b->cap = b->len + n + 1;
}

static void sbuf_puts(struct sbuf *b, const char *s)
{
    sbuf_putn(b, s, strlen(s));
}

static void sbuf_putc(struct sbuf *b, char c)
{
    sbuf_putn(b, &c, 1);
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* RFC 3986 2.3 unreserved. */
static bool is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
}

/* Bytes that may not appear raw in a URI path or query (RFC 3986 3.3, 3.4):
 * everything outside unreserved / sub-delims / ":" "@" "/" "?" and '%', that
 * is 0x00-0x20, 0x7f-0xff and " # < > [ \ ] ^ ` { | }: one bit a byte (a
 * strchr a byte was a tenth of the normalization). */
static const uint64_t must_encode_bits[4] = {
    UINT64_C(0x5000000DFFFFFFFF), /* 0x00-0x20 " # < > */
    UINT64_C(0xB800000178000000), /* [ \ ] ^ ` { | } 0x7f */
    UINT64_MAX, UINT64_MAX,       /* 0x80-0xff */
};

static bool must_encode(unsigned char c)
{
    return (must_encode_bits[c >> 6] >> (c & 63)) & 1;
}

static void put_escape(struct sbuf *b, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";
    char e[3] = { '%', hex[c >> 4], hex[c & 0x0f] };
    sbuf_putn(b, e, 3);
}

/* Step 2 (and the hex case of step 1) on a path or a query; the bytes kept
 * as they are go out a run at a time. */
static void pct_normalize(struct sbuf *b, const char *s)
{
    sbuf_reserve(b, strlen(s));
    size_t i = 0;
    while (s[i]) {
        size_t run = i;
        while (s[run] && s[run] != '%' && !must_encode((unsigned char)s[run]))
            run++;
        if (run > i)
            sbuf_putn(b, s + i, run - i);
        i = run;
        if (!s[i])
            break;
        unsigned char c = (unsigned char)s[i];
        int hi = c == '%' ? hexval((unsigned char)s[i + 1]) : -1;
        int lo = hi < 0 ? -1 : hexval((unsigned char)s[i + 2]);
        if (hi < 0 || lo < 0) {
            /* a byte to encode, or a stray '%': a literal percent sign */
            put_escape(b, c);
            i++;
            continue;
        }
        unsigned char v = (unsigned char)(hi << 4 | lo);
        if (is_unreserved(v))
            sbuf_putc(b, (char)v);
        else
            put_escape(b, v);
        i += 3;
    }
}

/* Drop the last segment (and its leading '/') of the output buffer. */
static void drop_last_segment(struct sbuf *out)
{
    while (out->len > 0 && out->p[out->len - 1] != '/')
        out->len--;
    if (out->len > 0)
        out->len--;
    if (out->p)
        out->p[out->len] = '\0';
}

/* RFC 3986 5.2.4 remove_dot_segments, \p in NUL-terminated. */
static void remove_dot_segments(struct sbuf *out, const char *in)
{
    sbuf_reserve(out, strlen(in));
    while (*in) {
        if (strncmp(in, "../", 3) == 0) {
            in += 3;                                    /* A */
        } else if (strncmp(in, "./", 2) == 0) {
            in += 2;                                    /* A */
        } else if (strncmp(in, "/./", 3) == 0) {
            in += 2;                                    /* B: "/./" -> "/" */
        } else if (strcmp(in, "/.") == 0) {
            in += 2;                                    /* B: "/." -> "/" */
            sbuf_putc(out, '/');
        } else if (strncmp(in, "/../", 4) == 0) {
            in += 3;                                    /* C */
            drop_last_segment(out);
        } else if (strcmp(in, "/..") == 0) {
            in += 3;                                    /* C */
            drop_last_segment(out);
            sbuf_putc(out, '/');
        } else if (strcmp(in, ".") == 0 || strcmp(in, "..") == 0) {
            in += strlen(in);                           /* D */
        } else {
            size_t n = (*in == '/') ? 1 : 0;            /* E */
            while (in[n] && in[n] != '/')
                n++;
            sbuf_putn(out, in, n);
            in += n;
        }
    }
}

/* One query parameter: a slice of the normalized query. */
struct qparam {
    const char *s;
    size_t len;
    size_t name_len;
    size_t idx;
};

static int qparam_cmp(const void *a, const void *b)
{
    const struct qparam *x = a, *y = b;
    int c = dd_bytes_cmp(x->s, x->name_len, y->s, y->name_len);
    if (c)
        return c;
    /* equal names keep their submitted order: a stable sort */
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

/* Step 5 on a percent-normalized, non-empty query. */
static dd_err_t sort_query(struct sbuf *out, const char *q)
{
    size_t n = 1;
    for (const char *p = q; *p; p++)
        if (*p == '&')
            n++;
    struct qparam *v = calloc(n, sizeof(*v));
    if (!v)
        return DD_ERR_NOMEM;
    const char *p = q;
    for (size_t i = 0; i < n; i++) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        v[i].s = p;
        v[i].len = len;
        v[i].name_len = eq ? (size_t)(eq - p) : len;
        v[i].idx = i;
        p += len + (amp ? 1 : 0);
    }
    qsort(v, n, sizeof(*v), qparam_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i)
            sbuf_putc(out, '&');
        sbuf_putn(out, v[i].s, v[i].len);
    }
    free(v);
    return DD_OK;
}

/* ASCII letters, whatever the locale. */
static bool is_alpha(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/*
 * Checks CURLU does not do for us: a scheme we support, written as
 * "scheme://" followed by an authority (curl accepts "http:/x" and "http:///x"
 * and turns them into host "x", which is not what the submitter meant).
 */
static dd_err_t check_scheme(const char *url, char *errstr,
                             size_t errstr_size)
{
    size_t n = 0;
    if (!is_alpha((unsigned char)url[0])) {
        dd_errstr_set(errstr, errstr_size,
                      "not an absolute URL (no scheme)");
        return DD_ERR_PERMANENT;
    }
    while (is_alpha((unsigned char)url[n]) ||
           (url[n] >= '0' && url[n] <= '9') || url[n] == '+' ||
           url[n] == '-' || url[n] == '.')
        n++;
    if (url[n] != ':') {
        dd_errstr_set(errstr, errstr_size,
                      "not an absolute URL (no scheme)");
        return DD_ERR_PERMANENT;
    }
    bool http = n == 4 && strncasecmp(url, "http", 4) == 0;
    bool https = n == 5 && strncasecmp(url, "https", 5) == 0;
    if (!http && !https) {
        dd_errstr_set(errstr, errstr_size, "scheme '%.*s' is not http or https",
                      (int)(n > 40 ? 40 : n), url);
        return DD_ERR_PERMANENT;
    }
    if (strncmp(url + n + 1, "//", 2) != 0 || url[n + 3] == '/' ||
        url[n + 3] == '\0') {
        dd_errstr_set(errstr, errstr_size,
                      "expected '//' and a host after '%.*s:'", (int)n, url);
        return DD_ERR_PERMANENT;
    }
    return DD_OK;
}

static dd_err_t curlu_error(CURLUcode rc, char *errstr, size_t errstr_size)
{
    switch (rc) {
    case CURLUE_OK:
        return DD_OK;
    case CURLUE_OUT_OF_MEMORY:
        dd_errstr_set(errstr, errstr_size, "curl_url_set: out of memory");
        return DD_ERR_NOMEM;
    case CURLUE_USER_NOT_ALLOWED:
        dd_errstr_set(errstr, errstr_size,
                      "userinfo (user:pass@) is refused: credentials go in "
                      "headers");
        return DD_ERR_PERMANENT;
    default:
        dd_errstr_set(errstr, errstr_size, "malformed URL: %s",
                      curl_url_strerror(rc));
        return DD_ERR_PERMANENT;
    }
}

static dd_err_t nomem(char *errstr, size_t errstr_size)
{
    dd_errstr_set(errstr, errstr_size, "URL normalization: out of memory");
    return DD_ERR_NOMEM;
}

/*
 * What the authority text (after "scheme://", up to the first '/', '?' or
 * '#': curl's host never extends past it) holds that curl transforms before
 * dedupd sees the host: a '%' (percent-decoding) or a non-ASCII byte (IDN).
 * Refuses an authority that is not UTF-8 (curl's IDN step would answer
 * CURLUE_OUT_OF_MEMORY).
 */
static dd_err_t scan_authority(const char *url, bool *transformed,
                               bool *non_ascii, char *errstr,
                               size_t errstr_size)
{
    const char *a = strstr(url, "://");
    *transformed = *non_ascii = false;
    if (!a)
        return DD_OK; /* check_scheme() has refused it already */
    a += 3;
    size_t n = strcspn(a, "/?#");
    for (size_t i = 0; i < n; i++) {
        if (a[i] == '%')
            *transformed = true;
        else if ((unsigned char)a[i] >= 0x80)
            *transformed = *non_ascii = true;
    }
    if (*non_ascii && !jstr_utf8_valid(a, n)) {
        dd_errstr_set(errstr, errstr_size, "host is not valid UTF-8");
        return DD_ERR_PERMANENT;
    }
    return DD_OK;
}

/* A CURLUE_OUT_OF_MEMORY about a host that needed decoding or IDN: libcurl
 * 7.88 answers that for a host its IDN conversion (libidn2) refuses, among
 * them a percent-encoded host that is not UTF-8 once decoded. */
static dd_err_t host_refused(bool non_ascii, char *errstr, size_t errstr_size)
{
    dd_errstr_set(errstr, errstr_size,
                  non_ascii ? "host is not a valid internationalized domain "
                              "name"
                            : "host is not a valid domain name once "
                              "percent-decoded");
    return DD_ERR_PERMANENT;
}

/* After IDN conversion a host is LDH labels (or an IP literal): a
 * compatibility mapping can turn a character into a delimiter (U+037E
 * GREEK QUESTION MARK becomes ';'), so anything else is refused rather
 * than let two URLs share one identity (found by fuzz_url). */
static dd_err_t check_host_chars(const char *host, char *errstr,
                                 size_t errstr_size)
{
    if (host[0] == '\0') {
        dd_errstr_set(errstr, errstr_size, "empty host");
        return DD_ERR_PERMANENT;
    }
    for (const char *c = host; *c; c++) {
        bool okc = isalnum((unsigned char)*c) || *c == '-' || *c == '.' ||
                   *c == '_' ||
                   (host[0] == '[' && (*c == ':' || *c == '[' || *c == ']'));
        if (!okc) {
            dd_errstr_set(errstr, errstr_size,
                          "host has a character (0x%02x) not allowed in a "
                          "domain name (after percent-decoding and IDN "
                          "conversion)",
                          (unsigned char)*c);
            return DD_ERR_PERMANENT;
        }
    }
    return DD_OK;
}

/*
 * The host as curl reads it when it is written out in a URL: \p *host (ASCII,
 * after percent-decoding and IDN) is parsed once more, and replaced by curl's
 * host of that parse (IPv4 numbers normalized: "7" -> "0.0.0.7").
 */
static dd_err_t host_reparse(char **host, char *errstr, size_t errstr_size)
{
    struct sbuf u = { 0 };
    char *again = NULL;
    dd_err_t err;
    CURLU *h = curl_url();
    sbuf_puts(&u, "http://");
    sbuf_puts(&u, *host);
    sbuf_putc(&u, '/');
    if (!h || u.oom) {
        err = nomem(errstr, errstr_size);
        goto out;
    }
    CURLUcode rc = curl_url_set(h, CURLUPART_URL, u.p, CURLU_PATH_AS_IS);
    if (rc == CURLUE_OK)
        rc = curl_url_get(h, CURLUPART_HOST, &again, 0);
    if (rc == CURLUE_OUT_OF_MEMORY) {
        err = nomem(errstr, errstr_size);
        goto out;
    }
    if (rc != CURLUE_OK) {
        dd_errstr_set(errstr, errstr_size,
                      "host is not valid once decoded: %s",
                      curl_url_strerror(rc));
        err = DD_ERR_PERMANENT;
        goto out;
    }
    for (char *p = again; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    err = check_host_chars(again, errstr, errstr_size);
    if (err)
        goto out;
    curl_free(*host);
    *host = again;
    again = NULL;
out:
    curl_free(again);
    free(u.p);
    curl_url_cleanup(h);
    return err;
}

/* The parts of a parsed URL, as CURLU hands them out (curl_free each). */
struct url_parts {
    char *scheme, *host, *port, *path, *query;
};

static void url_parts_fini(struct url_parts *u)
{
    curl_free(u->scheme);
    curl_free(u->host);
    curl_free(u->port);
    curl_free(u->path);
    curl_free(u->query);
    memset(u, 0, sizeof(*u));
}

/* What the authority holds that curl transforms (scan_authority). */
struct authority {
    bool transformed; /* a '%' or a non-ASCII byte: decoded or IDN-converted */
    bool non_ascii;   /* a non-ASCII byte: IDN */
};

/*
 * Parse \p url with CURLU into \p *h (curl_url_cleanup it, also on failure).
 * Refuses a host that is not UTF-8, what CURLU refuses, and userinfo.
 */
static dd_err_t url_parse(const char *url, CURLU **h, struct authority *auth,
                          char *errstr, size_t errstr_size)
{
    char *user = NULL;
    dd_err_t err;

    *h = curl_url();
    if (!*h)
        return nomem(errstr, errstr_size);
    err = scan_authority(url, &auth->transformed, &auth->non_ascii, errstr,
                         errstr_size);
    if (err)
        return err;
    CURLUcode rc = curl_url_set(*h, CURLUPART_URL, url,
                                CURLU_PATH_AS_IS | CURLU_DISALLOW_USER);
    if (rc == CURLUE_OUT_OF_MEMORY && auth->transformed)
        return host_refused(auth->non_ascii, errstr, errstr_size);
    err = curlu_error(rc, errstr, errstr_size);
    if (err)
        return err;
    /* CURLU_DISALLOW_USER already refuses "user@"; belt and braces. */
    if (curl_url_get(*h, CURLUPART_USER, &user, 0) == CURLUE_OK)
        err = curlu_error(CURLUE_USER_NOT_ALLOWED, errstr, errstr_size);
    curl_free(user);
    return err;
}

/*
 * Step 1 on the host, and the host curl connects to: IDN to punycode,
 * lower-cased, LDH labels only, read once more when it was percent-decoded or
 * IDN-converted.  Refuses an IPv6 zone id.
 */
static dd_err_t url_host_get(CURLU *h, const struct authority *auth,
                             char **host, char *errstr, size_t errstr_size)
{
    char *zone = NULL;
    dd_err_t err;
    CURLUcode rc = curl_url_get(h, CURLUPART_HOST, host, CURLU_PUNYCODE);
    if (rc == CURLUE_LACKS_IDN || rc == CURLUE_BAD_HOSTNAME ||
        (rc == CURLUE_OUT_OF_MEMORY && auth->transformed)) {
        /* (BAD_HOSTNAME and LACKS_IDN come from the IDN step) */
        return host_refused(auth->non_ascii || !auth->transformed, errstr,
                            errstr_size);
    }
    err = curlu_error(rc, errstr, errstr_size);
    if (err)
        return err;
    for (char *p = *host; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    err = check_host_chars(*host, errstr, errstr_size);
    if (err)
        return err;
    /* percent-decoded or IDN-converted: the host curl (and the resolver)
     * will read from it, so that normalize is a fixed point */
    if (auth->transformed) {
        err = host_reparse(host, errstr, errstr_size);
        if (err)
            return err;
    }
    if (curl_url_get(h, CURLUPART_ZONEID, &zone, 0) == CURLUE_OK) {
        dd_errstr_set(errstr, errstr_size, "IPv6 zone id is not allowed");
        err = DD_ERR_PERMANENT;
    }
    curl_free(zone);
    return err;
}

/* Step 4 on the port, scheme-aware: NULL when it is the scheme's default or
 * empty; port 0 is refused. */
static dd_err_t url_port_get(CURLU *h, char **port, char *errstr,
                             size_t errstr_size)
{
    CURLUcode rc = curl_url_get(h, CURLUPART_PORT, port,
                                CURLU_NO_DEFAULT_PORT);
    if (rc != CURLUE_OK && rc != CURLUE_NO_PORT)
        return curlu_error(rc, errstr, errstr_size);
    if (*port && strcmp(*port, "0") == 0) {
        dd_errstr_set(errstr, errstr_size, "port 0 is not a valid port");
        return DD_ERR_PERMANENT;
    }
    return DD_OK;
}

/* Every part of \p h that the normalized form keeps (the fragment is not
 * one), in the order of the checks that may refuse the URL. */
static dd_err_t url_parts_get(CURLU *h, const struct authority *auth,
                              struct url_parts *u, char *errstr,
                              size_t errstr_size)
{
    dd_err_t err = curlu_error(curl_url_get(h, CURLUPART_SCHEME, &u->scheme, 0),
                               errstr, errstr_size);
    if (!err)
        err = url_host_get(h, auth, &u->host, errstr, errstr_size);
    if (!err)
        err = url_port_get(h, &u->port, errstr, errstr_size);
    if (!err)
        err = curlu_error(curl_url_get(h, CURLUPART_PATH, &u->path, 0), errstr,
                          errstr_size);
    if (err)
        return err;
    CURLUcode rc = curl_url_get(h, CURLUPART_QUERY, &u->query, 0);
    if (rc != CURLUE_OK && rc != CURLUE_NO_QUERY)
        return curlu_error(rc, errstr, errstr_size);
    return DD_OK;
}

/* Steps 2 and 3 on the path: percent-encoding, then dot segments, then
 * "" -> "/". */
static dd_err_t append_path(struct sbuf *res, const char *path, char *errstr,
                            size_t errstr_size)
{
    struct sbuf pct = { 0 }, dots = { 0 };
    dd_err_t err = DD_OK;
    pct_normalize(&pct, path);
    if (!pct.oom)
        remove_dot_segments(&dots, pct.p ? pct.p : "");
    if (pct.oom || dots.oom)
        err = nomem(errstr, errstr_size);
    else
        sbuf_puts(res, dots.len ? dots.p : "/");
    free(dots.p);
    free(pct.p);
    return err;
}

/* Steps 2 and 5 on a query: percent-encoding, then the stable sort by name;
 * an empty query is dropped. */
static dd_err_t append_query(struct sbuf *res, const char *query, char *errstr,
                             size_t errstr_size)
{
    struct sbuf pct = { 0 };
    dd_err_t err = DD_OK;
    if (!query || query[0] == '\0')
        return DD_OK;
    pct_normalize(&pct, query);
    if (pct.oom) {
        err = nomem(errstr, errstr_size);
    } else {
        sbuf_putc(res, '?');
        if (sort_query(res, pct.p))
            err = nomem(errstr, errstr_size);
    }
    free(pct.p);
    return err;
}

/* scheme://host[:port]path[?query], the scheme lower-cased. */
static dd_err_t url_assemble(struct url_parts *u, char **out, char *errstr,
                             size_t errstr_size)
{
    struct sbuf res = { 0 };
    dd_err_t err;
    for (char *p = u->scheme; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    /* the normalized path and query are about as long as curl's (longer by
     * what an escape adds: then one more allocation) */
    sbuf_reserve(&res, strlen(u->scheme) + 4 + strlen(u->host)
                           + (u->port ? strlen(u->port) : 0)
                           + strlen(u->path)
                           + (u->query ? strlen(u->query) + 1 : 0));
    sbuf_puts(&res, u->scheme);
    sbuf_puts(&res, "://");
    sbuf_puts(&res, u->host);
    if (u->port) {
        sbuf_putc(&res, ':');
        sbuf_puts(&res, u->port);
    }
    err = append_path(&res, u->path, errstr, errstr_size);
    if (!err)
        err = append_query(&res, u->query, errstr, errstr_size);
    if (!err && res.oom)
        err = nomem(errstr, errstr_size);
    if (err) {
        free(res.p);
        return err;
    }
    *out = res.p;
    return DD_OK;
}

dd_err_t key_url_normalize(const char *url, char **out, char *errstr,
                           size_t errstr_size)
{
    dd_err_t err;
    CURLU *h = NULL;
    struct authority auth = { false, false };
    struct url_parts parts = { 0 };

    *out = NULL;
    err = check_scheme(url, errstr, errstr_size);
    if (err)
        goto out;
    err = url_parse(url, &h, &auth, errstr, errstr_size);
    if (err)
        goto out;
    err = url_parts_get(h, &auth, &parts, errstr, errstr_size);
    if (err)
        goto out;
    err = url_assemble(&parts, out, errstr, errstr_size);
out:
    url_parts_fini(&parts);
    curl_url_cleanup(h);
    return err;
}

void key_global_init(void)
{
    /* CURLU_PUNYCODE converts the host from the locale's charset (libidn2):
     * under the "C" locale every non-ASCII host would be refused. */
    if (!setlocale(LC_CTYPE, "C.UTF-8"))
        (void)setlocale(LC_CTYPE, "C.utf8");
}

static void to_hex(const unsigned char *md, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 0x0f];
    }
    out[2 * n] = '\0';
}

/*
 * OpenSSL 3 resolves EVP_sha256() through an implicit fetch (a provider
 * lookup under a lock) on every digest; fetching once saves that on the hot
 * path.  The method lives for the process (still reachable at exit).  Each
 * thread keeps one digest context (a pthread key frees it when the thread
 * ends) and starts every digest on it again with EVP_DigestInit_ex2, which
 * reuses the provider's context when the method is the same: EVP_Digest
 * would allocate, reference, clean and free one per call (EVP_DigestInit(3):
 * "EVP_DigestInit_ex2() can be called to initialize a new digest operation"
 * on a context after EVP_DigestFinal_ex()).
 */
static const EVP_MD *sha256_md;
static pthread_key_t sha256_ctx_key;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (pthread_key_create(&sha256_ctx_key, sha256_ctx_free))
        dd_oom("SHA-256 context key (pthread_key_create)");
}

/* This thread's digest context, initialized for SHA-256.  Fails only when
 * OpenSSL cannot allocate: there is no safe fallback value for an identity
 * hash (a constant would merge unrelated jobs), so stop as any failed
 * allocation does (dd.h). */
static EVP_MD_CTX *sha256_begin(void)
{
    pthread_once(&sha256_once, sha256_fetch);
    EVP_MD_CTX *ctx = pthread_getspecific(sha256_ctx_key);
    if (!ctx) {
        ctx = EVP_MD_CTX_new();
        if (!ctx || pthread_setspecific(sha256_ctx_key, ctx))
            dd_oom("SHA-256 digest context (EVP_MD_CTX)");
    }
    if (EVP_DigestInit_ex2(ctx, sha256_md ? sha256_md : EVP_sha256(),
                           NULL) != 1)
        dd_oom("SHA-256 digest (EVP_DigestInit_ex2)");
    return ctx;
}

/* Finish the digest begun by sha256_begin() into \p out (64 hex digits). */
static void sha256_end(EVP_MD_CTX *ctx, char out[KEY_HEX_LEN + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != KEY_HEX_LEN / 2)
        dd_oom("SHA-256 digest (EVP_DigestFinal_ex)");
    to_hex(md, mdlen, out);
}

void key_sha256_hex(const void *data, size_t len, char out[KEY_HEX_LEN + 1])
{
    /* the empty input's digest (FIPS 180-4; every job without a body) */
    static const char empty[KEY_HEX_LEN + 1] =
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    if (len == 0) {
        memcpy(out, empty, sizeof(empty));
        return;
    }
    EVP_MD_CTX *ctx = sha256_begin();
    if (EVP_DigestUpdate(ctx, data, len) != 1)
        dd_oom("SHA-256 digest (EVP_DigestUpdate)");
    sha256_end(ctx, out);
}

/* SHA-256 of "result:v1:" + op_id + "\n" + request_hash, then + "\n" +
 * \p suffix when \p suffix is not NULL.  @locality any thread. */
static void event_key_of(const char *op_id, const char *request_hash,
                         const char *suffix, char out[KEY_HEX_LEN + 1])
{
    static const char prefix[] = "result:v1:";
    EVP_MD_CTX *ctx = sha256_begin();
    if (EVP_DigestUpdate(ctx, prefix, sizeof(prefix) - 1) != 1 ||
        EVP_DigestUpdate(ctx, op_id, strlen(op_id)) != 1 ||
        EVP_DigestUpdate(ctx, "\n", 1) != 1 ||
        EVP_DigestUpdate(ctx, request_hash, strlen(request_hash)) != 1 ||
        (suffix && (EVP_DigestUpdate(ctx, "\n", 1) != 1 ||
                    EVP_DigestUpdate(ctx, suffix, strlen(suffix)) != 1)))
        dd_oom("SHA-256 digest (EVP_DigestUpdate)");
    sha256_end(ctx, out);
}

void key_event_key(const char *op_id, const char *request_hash,
                   char out[KEY_HEX_LEN + 1])
{
    event_key_of(op_id, request_hash, NULL, out);
}

void key_event_key_epoch(const char *op_id, const char *request_hash,
                         uint32_t retry_epoch, char out[KEY_HEX_LEN + 1])
{
    if (retry_epoch == 0) {
        event_key_of(op_id, request_hash, NULL, out);
        return;
    }
    char n[16];
    snprintf(n, sizeof(n), "%" PRIu32, retry_epoch);
    event_key_of(op_id, request_hash, n, out);
}
