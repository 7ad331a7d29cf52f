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
 * '#') holds a '%' or a non-ASCII byte.  key_url_normalize() then lets
 * curl's percent-decoding or IDN mapping produce a host that is not a
 * fixed point: "http://%37" -> "http://7/" -> "http://0.0.0.7/", U+FF0F
 * (fullwidth '/') in the host becomes a path separator, U+037E becomes ';',
 * "http://ex%a0/" is DD_ERR_NOMEM.
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

static inline bool fuzz_known_host_bug(const char *url)
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
