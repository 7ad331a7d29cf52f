/*
 * fuzz_common.h - helpers shared by the libFuzzer targets in tests/fuzz/.
 *
 * A violated property prints what was expected and calls abort(), which
 * libFuzzer reports as a crash (with the input saved as crash-<sha1>).
 */
#ifndef DEDUPD_FUZZ_COMMON_H
#define DEDUPD_FUZZ_COMMON_H

#include <ctype.h>
#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: property violated: %s\n  ", __FILE__,     \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* NUL-terminated copy of exactly size + 1 bytes (malloc'd, so ASan sees any
 * read past the terminator). */
static inline char *fuzz_cstr(const unsigned char *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* true when \p s has no C0 control character and no DEL: error texts travel
 * in Kafka headers, HTTP bodies and log lines. */
static inline bool fuzz_no_ctl(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

/* true when \p s is exactly \p n lower-case hex digits. */
static inline bool fuzz_is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return s[n] == '\0';
}

/* curl's view of the host of \p url (the flags key.c uses); NULL if none. */
static inline char *fuzz_curl_host(const char *url)
{
    CURLU *h = curl_url();
    char *host = NULL, *out = NULL;
    if (!h)
        abort();
    if (curl_url_set(h, CURLUPART_URL, url,
                     CURLU_PATH_AS_IS | CURLU_DISALLOW_USER) == CURLUE_OK &&
        curl_url_get(h, CURLUPART_HOST, &host, CURLU_PUNYCODE) == CURLUE_OK) {
        out = strdup(host);
        for (char *p = out; p && *p; p++)
            *p = (char)tolower((unsigned char)*p);
    }
    curl_free(host);
    curl_url_cleanup(h);
    return out;
}

/*
 * Known, reported, not yet fixed bug classes (tests/fuzz/README.md, "Known
 * bugs"): with FUZZ_SKIP_KNOWN=1 in the environment the targets do
 * not check their properties on inputs of these classes (memory safety is
 * still checked), so that a long run can look past them.  run.sh never sets
 * it for the regressions, which must fail until the bugs are fixed.
 *
 * Class "host": the authority of the URL (after "://", up to '/', '?' or
 * '#') holds a '%'.  curl_url_set() percent-decodes the host before
 * key_url_normalize() sees it, after its own IPv4 normalization, so
 * "http://%37" -> "http://7/" -> "http://0.0.0.7/" (not a fixed point), and
 * "http://ex%a0/" (invalid UTF-8 once decoded) is DD_ERR_NOMEM.  More
 * generally curl_url_set() answers CURLUE_OUT_OF_MEMORY for any non-ASCII
 * host that its IDN conversion (libidn2) refuses, which key.c reports as
 * DD_ERR_NOMEM: "http://\xbb" (not UTF-8), "http://b\u05FCch/" (an
 * unassigned code point); fuzz_known_nomem() covers those.  (The IDN
 * half of this class, non-ASCII hosts mapped to '/' or ';', was fixed in
 * f899387 and is checked again.)  Also covered: a non-ASCII host that IDN
 * maps to an IPv4 number form ("http://\u00B9/" -> "http://1/" ->
 * "http://0.0.0.1/"; "http://\u2460\u2461\u2466.1/" is 127.0.0.1), since
 * curl normalizes IPv4 before, not after, IDN conversion.
 */
static inline bool fuzz_skip_known(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("FUZZ_SKIP_KNOWN");
        on = v && *v && strcmp(v, "0") != 0;
    }
    return on;
}

/* true when s[0..n) is well-formed UTF-8 (RFC 3629). */
static inline bool fuzz_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xbf;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            if (c == 0xe0)
                lo = 0xa0;
            if (c == 0xed)
                hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            if (c == 0xf0)
                lo = 0x90;
            if (c == 0xf4)
                hi = 0x8f;
        } else {
            return false;
        }
        if (i + k >= n) /* truncated sequence */
            return false;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xbf)
                return false;
        i += k + 1;
    }
    return true;
}

static inline bool fuzz_known_host_bug(const char *url)
{
    if (!fuzz_skip_known())
        return false;
    const char *p = strstr(url, "://");
    if (!p)
        return false;
    const char *a = p + 3;
    size_t n = strcspn(a, "/?#");
    if (memchr(a, '%', n) != NULL ||
        !fuzz_utf8_valid((const unsigned char *)a, n))
        return true;
    /* IDN that yields an IPv4 number form ("http://\u00B9/" -> "1", which
     * curl reads as 0.0.0.1 only on the next parse) */
    bool ascii = true;
    for (size_t i = 0; i < n && ascii; i++)
        ascii = (unsigned char)a[i] < 0x80;
    if (ascii)
        return false;
    char *h = fuzz_curl_host(url);
    bool numeric = h && h[0] && strspn(h, "0123456789abcdefx.") == strlen(h);
    free(h);
    return numeric;
}

/* DD_ERR_NOMEM for a URL whose authority has '%' or a non-ASCII byte. */
static inline bool fuzz_known_nomem(const char *url)
{
    if (!fuzz_skip_known())
        return false;
    const char *p = strstr(url, "://");
    if (!p)
        return false;
    for (p += 3; *p && *p != '/' && *p != '?' && *p != '#'; p++)
        if (*p == '%' || (unsigned char)*p >= 0x80)
            return true;
    return false;
}

/*
 * Class "reason-utf8": the reason is not UTF-8, so the API's JSON error body
 * cannot be built.  job.c's echo() copies at most 64 bytes of a field name,
 * header name or method and can cut a UTF-8 sequence in two; jansson's
 * error text quotes the bytes read so far ("invalid escape near '"\<0xC3>'"),
 * which job.c's load_error() and job_with_key() copy.  Recognised by the
 * messages that carry them.
 */
static inline bool fuzz_known_reason_bug(const char *reason)
{
    return fuzz_skip_known() &&
           (strstr(reason, "unknown field '") ||
            strstr(reason, "' is not an HTTP token") ||
            strstr(reason, "' is not an HTTP method token") ||
            strstr(reason, "is not valid JSON: ") ||
            strstr(reason, "is not a JSON object: "));
}

#endif
