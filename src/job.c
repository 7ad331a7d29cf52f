/*
 * job.c - job payload -> validated struct job with its identity
 * (DESIGN.md sections 2 and 3).  jansson stays inside this file.
 *
 * Decisions where the design is silent (also in job.h):
 * - Unknown fields are refused, at the top level and in steps, with a hint
 *   for a near miss ("job_kee" -> "did you mean 'job_key'?").
 * - A field whose value is JSON null is treated as absent (producers that
 *   serialize optional fields as null are common); "url": null without steps
 *   is still "required".
 * - A workflow job carries its requests in "steps" only: url, method,
 *   headers, body and body_base64 next to "steps" are refused, since it would
 *   be unclear which request they belong to.
 * - Header names are compared case-insensitively: "Accept" and "accept" in one
 *   object is refused.  Content-Length and Transfer-Encoding are refused:
 *   libcurl frames the body, and a second framing is request smuggling.
 * - Header values may not contain control characters other than HTAB (CR, LF
 *   and NUL would inject headers); identity uses them trimmed of SP/HTAB, and
 *   so do credential digests (HTTP ignores that whitespace on the wire).
 * - "safe": GET and HEAD (every step's method, for a workflow) are safe by
 *   default, anything else is not; an explicit "safe" wins either way (a GET
 *   that triggers an action may be marked "safe": false).
 * - CONNECT is refused as a method: it is not a fetch.
 * - body_base64 is RFC 4648 base64 with the standard alphabet and '='
 *   padding, without whitespace and with zero pad bits: anything else is
 *   refused rather than guessed at.
 * - scheduled_for: RFC 3339 date-time ('T' or 't', 'Z' or 'z' or a numeric
 *   offset, "-00:00" read as UTC), at most 9 fractional digits, no leap
 *   second; the result must stay within years 0000..9999.
 * - The canonical request of a workflow job has "method", "url", "headers",
 *   "credentials" and "body_sha256" set to null and its requests in "steps";
 *   a plain job has "steps": null.  Every key is always present.
 *
 * @locality any thread, every function: reentrant, no shared state but
 * job_global_init's, set once before threads (each thread's parse arena is
 * its own).  Callers: the pipeline and the job API's thread.
 */
#include "dd.h"
#include "job.h"
#include "jstr.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "key.h"

#include <pthread.h>

#if defined(__SANITIZE_ADDRESS__)
#define JOB_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JOB_UNDER_ASAN 1
#endif
#endif
#ifndef JOB_UNDER_ASAN
#define JOB_UNDER_ASAN 0
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

/* ---- the parse arena (job_global_init) --------------------------------------
 * json_loadb allocates each value, key, hash table and string buffer of a
 * job on its own, and the parse frees them all before it returns (the job
 * keeps copies): a few dozen malloc/free pairs a job, a fifth of the parse.
 * Between arena_begin and arena_end, jansson's allocations come from this
 * thread's bump arena; its space is reused at arena_end once every block is
 * freed again (live == 0): a block that outlived its parse would keep the
 * arena from being reset under it.  A free of a pointer outside this
 * thread's arena is free(3): jansson values made with malloc (before the
 * parse, outside it, on other threads) are freed as before.  No value of a
 * parse leaves it (job_parse frees its trees; dump_compact's json_dumps
 * runs outside the arena), so none is freed on another thread. */
#define JOB_ARENA_BYTES (64 * 1024)

struct job_arena {
    char *base;   /* JOB_ARENA_BYTES, or NULL */
    size_t used;  /* bytes handed out since the last reset */
    size_t live;  /* blocks handed out and not freed */
    uint64_t served; /* blocks handed out since the thread began */
    bool active;  /* inside a parse */
};

static _Thread_local struct job_arena arena;
static pthread_key_t arena_key; /* frees a thread's arena at its end */
static bool arena_installed;

static void *arena_malloc(size_t n)
{
    struct job_arena *a = &arena;
    if (a->active && a->base) {
        size_t need = (n + 15) & ~(size_t)15; /* max_align_t on x86-64 */
        if (need >= n && need <= JOB_ARENA_BYTES - a->used) {
            void *p = a->base + a->used;
            a->used += need;
            a->live++;
            a->served++;
            return p;
        }
    }
    return malloc(n);
}

static void arena_free(void *p)
{
    struct job_arena *a = &arena;
    /* as integers: p and the arena may be two objects (C11 6.5.8) */
    if (a->base && (uintptr_t)p - (uintptr_t)a->base < JOB_ARENA_BYTES) {
        a->live--;
        return;
    }
    free(p);
}

/* A job's own pieces during job_parse (they are copied into one block and
 * freed before it returns): from the arena like jansson's, else malloc.
 * Every piece of a job is freed with arena_free, which frees malloc's
 * blocks with free(3), so a job built outside a parse is freed alike. */
static void *arena_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = arena_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

/* pthread key destructor, on the ending thread itself */
static void arena_thread_end(void *base)
{
    free(base);
    arena.base = NULL;
    arena.used = arena.live = 0;
}

static void arena_begin(void)
{
    if (!arena_installed)
        return;
    if (!arena.base) {
        arena.base = malloc(JOB_ARENA_BYTES);
        if (arena.base && pthread_setspecific(arena_key, arena.base)) {
            free(arena.base);
            arena.base = NULL;
        }
    }
    arena.active = true;
}

/* Every block freed (a partial tree decref'd): its space is used again
 * from the start, inside the same parse. */
static void arena_rewind(void)
{
    if (arena.live == 0)
        arena.used = 0;
}

static void arena_end(void)
{
    arena.active = false;
    if (arena.live == 0)
        arena.used = 0;
}

void job_global_init(void)
{
    /* under AddressSanitizer, its checks of each jansson block stay */
    if (arena_installed || JOB_UNDER_ASAN)
        return;
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND)
        return; /* so do memcheck's */
#endif
    if (pthread_key_create(&arena_key, arena_thread_end))
        return; /* no arena: malloc, as without this call */
    json_set_alloc_funcs(arena_malloc, arena_free);
    arena_installed = true;
}

size_t job_arena_live(void)
{
    return arena.live;
}

uint64_t job_arena_served(void)
{
    return arena.served;
}

/* json_dumps(v, JSON_COMPACT | (sort ? JSON_SORT_KEYS : 0)), the same bytes
 * in one pass (jstr_dump_compact); jansson's own dump for what that leaves
 * to it (reals).  NULL when out of memory. */
static char *dump_compact(const json_t *v, bool sort)
{
    char *out = NULL;
    size_t len;
    dd_err_t err = jstr_dump_compact(v, sort, &out, &len);
    if (err == DD_ERR_INVAL) {
        /* its string is the caller's to free(3): from malloc, not the
         * parse arena */
        bool was = arena.active;
        arena.active = false;
        out = json_dumps(v, JSON_COMPACT | (sort ? JSON_SORT_KEYS : 0));
        arena.active = was;
        return out;
    }
    return err ? NULL : out;
}

#define JOB_MAX_BYTES_DEFAULT ((size_t)1024 * 1024)
#define JOB_STEPS_MAX 32
#define JOB_KEY_MAX 256
#define JOB_SCOPE_MAX 64
#define JOB_DEADLINE_MAX_S 86400
#define JOB_FIELD_NAME_MAX 48

static const char *const builtin_credentials[] = {
    "authorization", "cookie", "proxy-authorization", "x-api-key",
};
static const char *const default_variance[] = { "accept", "accept-language" };

static const char *const job_fields[] = {
    "url",         "method",        "headers",  "body",       "body_base64",
    "job_key",     "scope",         "country",  "parser_version",
    "scheduled_for", "rotation",    "steps",    "deadline_s", "meta",
    "safe",        "replayable",
};
static const char *const step_fields[] = {
    "url", "method", "headers", "body", "body_base64",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- reasons: valid UTF-8, no control characters ----------------------- */

/*
 * Copy \p len bytes of \p src into \p dst (\p cap bytes with the NUL) as text
 * that can travel anywhere a reason goes (the JSON error body of the API, a
 * Kafka header, a log line): well-formed UTF-8 sequences as they are, a C0
 * control character or DEL as '?', a byte that starts no well-formed sequence
 * as "\xNN".  Stops before a character or escape that does not fit, so the
 * output is never cut inside a character.  Idempotent.
 */
static void text_clean(char *dst, size_t cap, const char *src, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    if (!dst || cap == 0)
        return;
    for (size_t i = 0; i < len;) {
        size_t k = jstr_utf8_seq(s + i, len - i);
        if (k == 1 && (s[i] < 0x20 || s[i] == 0x7f)) {
            if (o + 1 >= cap)
                break;
            dst[o++] = '?';
            i++;
        } else if (k == 0) {
            if (o + 4 >= cap)
                break;
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[s[i] >> 4];
            dst[o++] = hex[s[i] & 0x0f];
            i++;
        } else {
            if (o + k >= cap)
                break;
            memcpy(dst + o, s + i, k);
            o += k;
            i += k;
        }
    }
    dst[o] = '\0';
}

#define JOB_REASON_MAX 1024 /* formatted before cleaning */

/* Set errstr (cleaned by text_clean) and return DD_ERR_PERMANENT: the job is
 * not valid data. */
static dd_err_t invalid(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static dd_err_t invalid(char *errstr, size_t errstr_size, const char *fmt, ...)
{
    if (errstr && errstr_size) {
        char text[JOB_REASON_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        size_t len = n < 0 ? 0
                           : ((size_t)n < sizeof(text) ? (size_t)n
                                                       : sizeof(text) - 1);
        text_clean(errstr, errstr_size, text, len);
    }
    return DD_ERR_PERMANENT;
}

static dd_err_t nomem(char *errstr, size_t errstr_size)
{
    dd_errstr_set(errstr, errstr_size, "job_parse: out of memory");
    return DD_ERR_NOMEM;
}

/* ---- small validators --------------------------------------------------- */

/* ASCII only, whatever the locale (key_global_init sets C.UTF-8). */
static bool a_alpha(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool a_alnum(unsigned char c)
{
    return a_alpha(c) || (c >= '0' && c <= '9');
}

/* RFC 9110 5.6.2 tchar */
static bool is_tchar(unsigned char c)
{
    return a_alnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool is_token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s))
            return false;
    return true;
}

static bool has_ctl(const char *s, size_t len, bool allow_htab)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && !(allow_htab && c == '\t')) || c == 0x7f)
            return true;
    }
    return false;
}

static bool in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(name, list[i]) == 0)
            return true;
    return false;
}

#define JOB_ECHO_MAX 64

/* At most JOB_ECHO_MAX bytes of \p s for an error message, cut at a
 * character boundary, control characters as '?' and bytes that are not UTF-8
 * as "\xNN" (text_clean): reasons travel in the API's JSON error body, DLQ
 * headers and logs. */
static const char *echo(const char *s, char buf[JOB_ECHO_MAX + 1])
{
    /* the output holds at most JOB_ECHO_MAX input bytes; 3 more show
     * whether the last character is complete */
    text_clean(buf, JOB_ECHO_MAX + 1, s, strnlen(s, JOB_ECHO_MAX + 3));
    return buf;
}

/* Levenshtein distance, capped: only used for "did you mean" hints. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 32 || lb > 32)
        return SIZE_MAX;
    size_t row[33];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (tolower((unsigned char)a[i - 1]) !=
                                  tolower((unsigned char)b[j - 1]));
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static dd_err_t check_unknown(json_t *obj, const char *const *known, size_t n,
                              const char *where, char *errstr,
                              size_t errstr_size)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        /* field names are case-sensitive: "URL" is a typo, not a field */
        bool exact = false;
        for (size_t i = 0; i < n && !exact; i++)
            exact = strcmp(k, known[i]) == 0;
        if (exact)
            continue;
        const char *hint = NULL;
        size_t best = 3;
        for (size_t i = 0; i < n; i++) {
            size_t d = edit_distance(k, known[i]);
            if (d < best) {
                best = d;
                hint = known[i];
            }
        }
        char e[JOB_ECHO_MAX + 1];
        if (hint)
            return invalid(errstr, errstr_size,
                           "unknown field '%s%s' (did you mean '%s%s'?)",
                           where, echo(k, e), where, hint);
        return invalid(errstr, errstr_size, "unknown field '%s%s'", where,
                       echo(k, e));
    }
    return DD_OK;
}

/* The value of field \p key, NULL when absent or JSON null. */
static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = arena_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static char *arena_strdup(const char *s)
{
    return dup_n(s, strlen(s));
}

/* ---- base64 (RFC 4648 section 4, strict) -------------------------------- */

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/*
 * Validate first (EVP_DecodeBlock skips leading and trailing whitespace and
 * does not report padding), then decode with EVP_DecodeBlock and subtract
 * the padding from its length.
 */
static dd_err_t b64_decode(const char *s, size_t len, unsigned char **out,
                           size_t *out_len, const char *fname, char *errstr,
                           size_t errstr_size)
{
    size_t pad = 0;
    if (len % 4 != 0 || len > INT_MAX)
        goto bad;
    if (len >= 4 && s[len - 1] == '=')
        pad = s[len - 2] == '=' ? 2 : 1;
    for (size_t i = 0; i < len - pad; i++)
        if (b64val((unsigned char)s[i]) < 0)
            goto bad;
    /* the bits under the padding must be zero (canonical encoding) */
    if (pad == 2 && (b64val((unsigned char)s[len - 3]) & 0x0f) != 0)
        goto bad;
    if (pad == 1 && (b64val((unsigned char)s[len - 2]) & 0x03) != 0)
        goto bad;

    unsigned char *buf = arena_malloc(len / 4 * 3 + 1);
    if (!buf)
        return nomem(errstr, errstr_size);
    int n = len ? EVP_DecodeBlock(buf, (const unsigned char *)s, (int)len) : 0;
    if (n < 0 || (size_t)n < pad) {
        arena_free(buf);
        goto bad;
    }
    *out_len = (size_t)n - pad;
    buf[*out_len] = '\0';
    *out = buf;
    return DD_OK;
bad:
    return invalid(errstr, errstr_size,
                   "field '%s': not valid base64 (RFC 4648 standard alphabet "
                   "with '=' padding, no whitespace)",
                   fname);
}

/* ---- RFC 3339 ----------------------------------------------------------- */

static int ndigits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static int days_in_month(int y, int m)
{
    static const int dim[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return 29;
    return dim[m - 1];
}

#define RFC3339_MAX 32 /* "YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ" + NUL */

/* Normalize an RFC 3339 date-time to UTC 'Z' without trailing fractional
 * zeros; returns NULL (ok) or the reason it is not one. */
static const char *rfc3339_normalize(const char *s, char out[RFC3339_MAX])
{
    size_t len = strlen(s);
    if (len < 19 || s[4] != '-' || s[7] != '-' ||
        (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':')
        return "not an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SSZ)";
    int y = ndigits(s, 4), mo = ndigits(s + 5, 2), d = ndigits(s + 8, 2);
    int h = ndigits(s + 11, 2), mi = ndigits(s + 14, 2);
    int sec = ndigits(s + 17, 2);
    if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || sec < 0)
        return "not an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SSZ)";
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
        mi > 59)
        return "date or time out of range";
    if (sec > 59)
        return "leap seconds are not supported";

    const char *p = s + 19;
    char frac[10] = "";
    if (*p == '.') {
        size_t n = 0;
        p++;
        while (p[n] >= '0' && p[n] <= '9')
            n++;
        if (n == 0)
            return "not an RFC 3339 date-time (digits must follow '.')";
        if (n > 9)
            return "more than 9 fractional digits";
        memcpy(frac, p, n);
        p += n;
        while (n > 0 && frac[n - 1] == '0')
            n--;
        frac[n] = '\0';
    }
    int64_t off_s = 0;
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        off_s = 0;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int oh = ndigits(p + 1, 2), om = ndigits(p + 4, 2);
        if (oh < 0 || om < 0 || oh > 23 || om > 59)
            return "time zone offset out of range";
        off_s = (int64_t)oh * 3600 + om * 60;
        if (*p == '-')
            off_s = -off_s;
    } else {
        return "not an RFC 3339 date-time (time zone must be Z or +HH:MM)";
    }

    int64_t t = dd_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 +
                h * 3600 + mi * 60 + sec - off_s;
    int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
    int64_t rem = t - days * 86400;
    int64_t uy;
    unsigned um, ud;
    dd_civil_from_days(days, &uy, &um, &ud);
    if (uy < 0 || uy > 9999)
        return "date out of range in UTC";
    snprintf(out, RFC3339_MAX, "%04d-%02u-%02uT%02d:%02d:%02d%s%sZ", (int)uy,
             um, ud, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60),
             frac[0] ? "." : "", frac);
    return NULL;
}

/* ---- requests ----------------------------------------------------------- */

static void request_fini(struct job_request *req)
{
    arena_free(req->url);
    arena_free(req->normalized_url);
    arena_free(req->method);
    for (size_t i = 0; i < req->n_headers; i++) {
        arena_free(req->headers[i].name);
        arena_free(req->headers[i].value);
    }
    arena_free(req->headers);
    arena_free(req->body);
    memset(req, 0, sizeof(*req));
}

static dd_err_t parse_headers(json_t *obj, const char *prefix,
                              struct job_request *req, char *errstr,
                              size_t errstr_size)
{
    if (!json_is_object(obj))
        return invalid(errstr, errstr_size,
                       "field '%sheaders': must be an object of strings",
                       prefix);
    size_t n = json_object_size(obj);
    if (n == 0)
        return DD_OK;
    req->headers = arena_calloc(n, sizeof(*req->headers));
    if (!req->headers)
        return nomem(errstr, errstr_size);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        char e[JOB_ECHO_MAX + 1];
        if (!is_token(k))
            return invalid(errstr, errstr_size,
                           "field '%sheaders': header name '%s' is not an "
                           "HTTP token",
                           prefix, echo(k, e));
        if (!json_is_string(v))
            return invalid(errstr, errstr_size,
                           "field '%sheaders': header '%s' must be a string",
                           prefix, echo(k, e));
        const char *val = json_string_value(v);
        size_t vlen = json_string_length(v);
        if (has_ctl(val, vlen, true))
            return invalid(errstr, errstr_size,
                           "field '%sheaders': header '%s' contains a "
                           "control character (CR, LF or NUL would inject "
                           "headers)",
                           prefix, echo(k, e));
        if (strcasecmp(k, "content-length") == 0 ||
            strcasecmp(k, "transfer-encoding") == 0)
            return invalid(errstr, errstr_size,
                           "field '%sheaders': header '%s' is not allowed "
                           "(libcurl frames the body)",
                           prefix, echo(k, e));
        for (size_t i = 0; i < req->n_headers; i++)
            if (strcasecmp(req->headers[i].name, k) == 0)
                return invalid(errstr, errstr_size,
                               "field '%sheaders': header '%s' is given "
                               "twice (names are case-insensitive)",
                               prefix, echo(k, e));
        struct job_header *h = &req->headers[req->n_headers];
        h->name = arena_strdup(k);
        h->value = dup_n(val, vlen);
        if (!h->name || !h->value) {
            arena_free(h->name);
            arena_free(h->value);
            h->name = h->value = NULL;
            return nomem(errstr, errstr_size);
        }
        req->n_headers++;
    }
    return DD_OK;
}

/* One request object: the job's own fields, or one step. */
static dd_err_t parse_request(json_t *obj, const char *prefix,
                              struct job_request *req, char *errstr,
                              size_t errstr_size)
{
    dd_err_t err;
    char fname[JOB_FIELD_NAME_MAX];
    json_t *v;

    /* url */
    v = field(obj, "url");
    if (!v)
        return invalid(errstr, errstr_size, "field '%surl': required%s",
                       prefix, prefix[0] ? "" : " (or give 'steps')");
    if (!json_is_string(v))
        return invalid(errstr, errstr_size, "field '%surl': must be a string",
                       prefix);
    req->url = arena_strdup(json_string_value(v));
    if (!req->url)
        return nomem(errstr, errstr_size);
    char why[DD_ERRSTR_SIZE] = "";
    err = key_url_normalize(req->url, &req->normalized_url, why, sizeof(why));
    if (err == DD_ERR_NOMEM)
        return nomem(errstr, errstr_size);
    if (err)
        return invalid(errstr, errstr_size, "field '%surl': %s", prefix, why);

    /* method */
    v = field(obj, "method");
    if (v && !json_is_string(v))
        return invalid(errstr, errstr_size,
                       "field '%smethod': must be a string", prefix);
    const char *m = v ? json_string_value(v) : "GET";
    if (!is_token(m) || strlen(m) > 32) {
        char e[JOB_ECHO_MAX + 1];
        return invalid(errstr, errstr_size,
                       "field '%smethod': '%s' is not an HTTP method token",
                       prefix, echo(m, e));
    }
    req->method = arena_strdup(m);
    if (!req->method)
        return nomem(errstr, errstr_size);
    for (char *p = req->method; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    if (strcmp(req->method, "CONNECT") == 0)
        return invalid(errstr, errstr_size,
                       "field '%smethod': CONNECT is not a fetch", prefix);

    /* headers */
    v = field(obj, "headers");
    if (v) {
        err = parse_headers(v, prefix, req, errstr, errstr_size);
        if (err)
            return err;
    }

    /* body / body_base64 */
    json_t *body = field(obj, "body");
    json_t *b64 = field(obj, "body_base64");
    if (body && b64)
        return invalid(errstr, errstr_size,
                       "fields '%sbody' and '%sbody_base64' are exclusive: "
                       "give one",
                       prefix, prefix);
    if (body) {
        if (!json_is_string(body))
            return invalid(errstr, errstr_size,
                           "field '%sbody': must be a string (use body_base64 "
                           "for binary bodies)",
                           prefix);
        req->body_len = json_string_length(body);
        req->body = (unsigned char *)dup_n(json_string_value(body),
                                           req->body_len);
        if (!req->body)
            return nomem(errstr, errstr_size);
    } else if (b64) {
        snprintf(fname, sizeof(fname), "%sbody_base64", prefix);
        if (!json_is_string(b64))
            return invalid(errstr, errstr_size,
                           "field '%s': must be a string", fname);
        err = b64_decode(json_string_value(b64), json_string_length(b64),
                         &req->body, &req->body_len, fname, errstr,
                         errstr_size);
        if (err)
            return err;
    }
    return DD_OK;
}

static bool method_is_safe(const struct job_request *req)
{
    return strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
}

/* ---- top-level fields --------------------------------------------------- */

/* "job_key": 1..JOB_KEY_MAX bytes without control characters. */
static dd_err_t parse_job_key(json_t *v, struct job *job, char *errstr,
                              size_t errstr_size)
{
    if (!json_is_string(v))
        return invalid(errstr, errstr_size,
                       "field 'job_key': must be a string");
    size_t n = json_string_length(v);
    if (n < 1 || n > JOB_KEY_MAX)
        return invalid(errstr, errstr_size,
                       "field 'job_key': must be 1..%d bytes, not %zu",
                       JOB_KEY_MAX, n);
    if (has_ctl(json_string_value(v), n, false))
        return invalid(errstr, errstr_size,
                       "field 'job_key': contains a control character");
    job->job_key = dup_n(json_string_value(v), n);
    if (!job->job_key)
        return nomem(errstr, errstr_size);
    return DD_OK;
}

/* "scope": [A-Za-z0-9._-]{1,64}, "default" when absent. */
static dd_err_t parse_scope(json_t *v, struct job *job, char *errstr,
                            size_t errstr_size)
{
    const char *scope = "default";
    if (v) {
        if (!json_is_string(v))
            return invalid(errstr, errstr_size,
                           "field 'scope': must be a string");
        scope = json_string_value(v);
        size_t n = json_string_length(v);
        bool ok = n >= 1 && n <= JOB_SCOPE_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = a_alnum((unsigned char)scope[i]) || scope[i] == '.' ||
                 scope[i] == '_' || scope[i] == '-';
        if (!ok)
            return invalid(errstr, errstr_size,
                           "field 'scope': must match [A-Za-z0-9._-]{1,64}");
    }
    job->scope = arena_strdup(scope);
    if (!job->scope)
        return nomem(errstr, errstr_size);
    return DD_OK;
}

/* "country": ISO 3166-1 alpha-2, kept upper-cased. */
static dd_err_t parse_country(json_t *v, struct job *job, char *errstr,
                              size_t errstr_size)
{
    const char *c = json_is_string(v) ? json_string_value(v) : NULL;
    if (!c || json_string_length(v) != 2 || !a_alpha((unsigned char)c[0]) ||
        !a_alpha((unsigned char)c[1]))
        return invalid(errstr, errstr_size,
                       "field 'country': must be an ISO 3166-1 alpha-2 "
                       "code (two letters)");
    job->country = arena_malloc(3);
    if (!job->country)
        return nomem(errstr, errstr_size);
    job->country[0] = (char)toupper((unsigned char)c[0]);
    job->country[1] = (char)toupper((unsigned char)c[1]);
    job->country[2] = '\0';
    return DD_OK;
}

/* "scheduled_for": RFC 3339, kept normalized to UTC (rfc3339_normalize). */
static dd_err_t parse_scheduled_for(json_t *v, struct job *job, char *errstr,
                                    size_t errstr_size)
{
    char norm[RFC3339_MAX];
    const char *why = json_is_string(v)
                          ? rfc3339_normalize(json_string_value(v), norm)
                          : "must be an RFC 3339 date-time string";
    if (why)
        return invalid(errstr, errstr_size, "field 'scheduled_for': %s", why);
    job->scheduled_for = arena_strdup(norm);
    if (!job->scheduled_for)
        return nomem(errstr, errstr_size);
    return DD_OK;
}

/* "rotation": sticky, timed or per_request. */
static dd_err_t parse_rotation(json_t *v, struct job *job, char *errstr,
                               size_t errstr_size)
{
    const char *r = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(r, "sticky") != 0 && strcmp(r, "timed") != 0 &&
        strcmp(r, "per_request") != 0)
        return invalid(errstr, errstr_size,
                       "field 'rotation': must be sticky, timed or "
                       "per_request");
    job->rotation = arena_strdup(r);
    if (!job->rotation)
        return nomem(errstr, errstr_size);
    return DD_OK;
}

/* The top-level fields other than the request(s) and "safe", checked in a
 * fixed order so that a job with several faults always names the same one. */
static dd_err_t parse_fields(json_t *root, struct job *job, char *errstr,
                             size_t errstr_size)
{
    dd_err_t err;
    json_t *v;

    v = field(root, "job_key");
    if (v) {
        err = parse_job_key(v, job, errstr, errstr_size);
        if (err)
            return err;
    }
    err = parse_scope(field(root, "scope"), job, errstr, errstr_size);
    if (err)
        return err;
    v = field(root, "country");
    if (v) {
        err = parse_country(v, job, errstr, errstr_size);
        if (err)
            return err;
    }

    v = field(root, "parser_version");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return invalid(errstr, errstr_size,
                           "field 'parser_version': must be an integer >= 0");
        job->parser_version = (int64_t)json_integer_value(v);
    }

    v = field(root, "scheduled_for");
    if (v) {
        err = parse_scheduled_for(v, job, errstr, errstr_size);
        if (err)
            return err;
    }
    v = field(root, "rotation");
    if (v) {
        err = parse_rotation(v, job, errstr, errstr_size);
        if (err)
            return err;
    }

    v = field(root, "deadline_s");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > JOB_DEADLINE_MAX_S)
            return invalid(errstr, errstr_size,
                           "field 'deadline_s': must be an integer 1..%d",
                           JOB_DEADLINE_MAX_S);
        job->deadline_s = (int64_t)json_integer_value(v);
    }

    v = field(root, "meta");
    if (v) {
        if (!json_is_object(v))
            return invalid(errstr, errstr_size,
                           "field 'meta': must be an object");
        job->meta_json = dump_compact(v, false);
        if (!job->meta_json)
            return nomem(errstr, errstr_size);
    }

    v = field(root, "replayable");
    if (v) {
        if (!json_is_boolean(v))
            return invalid(errstr, errstr_size,
                           "field 'replayable': must be true or false");
        job->replayable = json_is_true(v);
    }
    return DD_OK;
}

/* ---- identity ----------------------------------------------------------- */

static const char *trimmed(const char *s, size_t *len)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    *len = n;
    return s;
}

static char *lower_dup(const char *s)
{
    char *p = arena_strdup(s);
    if (p)
        for (char *q = p; *q; q++)
            *q = (char)tolower((unsigned char)*q);
    return p;
}

/* Set \p key of \p obj to a new reference \p v (stolen); false on NOMEM. */
static bool put(json_t *obj, const char *key, json_t *v)
{
    return v && json_object_set_new(obj, key, v) == 0;
}

static bool is_variance_header(const struct job_conf *conf, const char *name)
{
    if (!conf->variance_headers)
        return in_list(name, default_variance, NELEM(default_variance));
    return in_list(name, conf->variance_headers, conf->n_variance_headers);
}

/* {method, url, headers, credentials, body_sha256} of one request. */
static json_t *canonical_request(const struct job_conf *conf,
                                 const struct job_request *req)
{
    json_t *o = json_object(), *hdrs = json_object(), *creds = json_object();
    char hex[KEY_HEX_LEN + 1];
    bool ok = o && hdrs && creds;

    for (size_t i = 0; ok && i < req->n_headers; i++) {
        const struct job_header *h = &req->headers[i];
        size_t vlen;
        const char *val = trimmed(h->value, &vlen);
        char *lname = lower_dup(h->name);
        if (!lname) {
            ok = false;
            break;
        }
        if (job_is_credential_header(conf, h->name)) {
            /* never the raw value: its digest, so two accounts never merge */
            key_sha256_hex(val, vlen, hex);
            ok = put(creds, lname, json_string(hex));
        } else if (is_variance_header(conf, h->name)) {
            ok = put(hdrs, lname, json_stringn(val, vlen));
        }
        arena_free(lname);
    }
    key_sha256_hex(req->body ? (const void *)req->body : "", req->body_len,
                   hex);
    ok = ok && put(o, "method", json_string(req->method)) &&
         put(o, "url", json_string(req->normalized_url));
    ok = ok && json_object_set(o, "headers", hdrs) == 0 &&
         json_object_set(o, "credentials", creds) == 0 &&
         put(o, "body_sha256", json_string(hex));
    json_decref(hdrs);
    json_decref(creds);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- the canonical request, written directly ---------------------------- */

/* The bytes derive_identity's jansson tree dumps (JSON_COMPACT |
 * JSON_SORT_KEYS), written straight from the job: the tree (a few dozen
 * allocations) and its two dumps were most of a job's parse (issue 13).
 * canonical_request() and the tree in derive_identity() stay the reference:
 * tests/test_job.c compares both on generated jobs, and the tree decides
 * what this writer refuses (a string jstr refuses). */
#define CW_LIT(w, s) jstr_buf_put((w), (s), sizeof(s) - 1)

static void cw_str_or_null(struct jstr_buf *w, const char *s)
{
    if (s)
        jstr_buf_quote(w, s, strlen(s));
    else
        CW_LIT(w, "null");
}

/* One header of a canonical object. */
struct chdr {
    const char *name, *val;
    size_t nlen, vlen, order;
};

/* By lower-cased name bytes (jansson's key order), then input order. */
static int chdr_cmp(const void *a, const void *b)
{
    const struct chdr *x = a, *y = b;
    size_t min = x->nlen < y->nlen ? x->nlen : y->nlen;
    for (size_t i = 0; i < min; i++) {
        int c = tolower((unsigned char)x->name[i]);
        int d = tolower((unsigned char)y->name[i]);
        if (c != d)
            return c - d;
    }
    if (x->nlen != y->nlen)
        return x->nlen < y->nlen ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static bool chdr_same(const struct chdr *x, const struct chdr *y)
{
    return x->nlen == y->nlen && strncasecmp(x->name, y->name, x->nlen) == 0;
}

/* {"name":value,...}: lower-cased names, values as given or as their
 * SHA-256 hex; of a repeated name the last, as the tree's json_object_set
 * keeps it (parse_headers refuses repeated names: the writer stays the
 * tree's for any request all the same). */
static void cw_headers(struct jstr_buf *w, struct chdr *h, size_t n, bool digest)
{
    qsort(h, n, sizeof(*h), chdr_cmp);
    CW_LIT(w, "{");
    bool first = true;
    for (size_t i = 0; i < n && !w->err; i++) {
        if (i + 1 < n && chdr_same(&h[i], &h[i + 1]))
            continue;
        if (!first)
            CW_LIT(w, ",");
        first = false;
        char *lname = lower_dup(h[i].name);
        if (!lname) {
            w->err = DD_ERR_NOMEM;
            return;
        }
        jstr_buf_quote(w, lname, h[i].nlen);
        arena_free(lname);
        CW_LIT(w, ":");
        if (digest) {
            char hex[KEY_HEX_LEN + 1];
            key_sha256_hex(h[i].val, h[i].vlen, hex);
            jstr_buf_quote(w, hex, KEY_HEX_LEN);
        } else {
            jstr_buf_quote(w, h[i].val, h[i].vlen);
        }
    }
    CW_LIT(w, "}");
}

/* The members of canonical_request()'s object (sorted): body_sha256,
 * credentials, headers, method, url.  For the root of a job without steps
 * (\p job), its own members interleave: country, then (at *obs_at, where the
 * canonical form adds parser_version and scheduled_for) steps, and v. */
static void cw_request(struct jstr_buf *w, const struct job_conf *conf,
                       const struct job_request *req, const struct job *job,
                       size_t *obs_at)
{
    struct chdr *creds = arena_calloc(2 * req->n_headers + 1, sizeof(*creds));
    if (!creds) {
        w->err = DD_ERR_NOMEM;
        return;
    }
    struct chdr *vars = creds + req->n_headers;
    size_t nc = 0, nv = 0;
    for (size_t i = 0; i < req->n_headers; i++) {
        const struct job_header *h = &req->headers[i];
        size_t vlen;
        const char *val = trimmed(h->value, &vlen);
        struct chdr e = {h->name, val, strlen(h->name), vlen, i};
        if (job_is_credential_header(conf, h->name))
            creds[nc++] = e;
        else if (is_variance_header(conf, h->name))
            vars[nv++] = e;
    }
    char hex[KEY_HEX_LEN + 1];
    key_sha256_hex(req->body ? (const void *)req->body : "", req->body_len,
                   hex);
    CW_LIT(w, "\"body_sha256\":");
    jstr_buf_quote(w, hex, KEY_HEX_LEN);
    if (job) {
        CW_LIT(w, ",\"country\":");
        cw_str_or_null(w, job->country);
    }
    CW_LIT(w, ",\"credentials\":");
    cw_headers(w, creds, nc, true);
    CW_LIT(w, ",\"headers\":");
    cw_headers(w, vars, nv, false);
    CW_LIT(w, ",\"method\":");
    cw_str_or_null(w, req->method);
    CW_LIT(w, ",");
    if (job) {
        *obs_at = w->len;
        CW_LIT(w, "\"steps\":null,");
    }
    CW_LIT(w, "\"url\":");
    cw_str_or_null(w, req->normalized_url);
    if (job)
        CW_LIT(w, ",\"v\":1");
    arena_free(creds);
}

/* The resource form and the canonical form of \p job (both malloc'd), as
 * the tree below would dump them; false when the tree must decide (out of
 * memory, a string jstr refuses). */
static bool canonical_direct(const struct job_conf *conf,
                             const struct job *job, char **resource,
                             char **canonical)
{
    struct jstr_buf w = {0}, obs = {0};
    size_t obs_at = 0;
    if (job->steps) {
        CW_LIT(&w, "{\"body_sha256\":null,\"country\":");
        cw_str_or_null(&w, job->country);
        CW_LIT(&w, ",\"credentials\":null,\"headers\":null,\"method\":null,");
        obs_at = w.len;
        CW_LIT(&w, "\"steps\":[");
        for (size_t i = 0; i < job->n_steps; i++) {
            if (i)
                CW_LIT(&w, ",");
            CW_LIT(&w, "{");
            cw_request(&w, conf, &job->steps[i], NULL, NULL);
            CW_LIT(&w, "}");
        }
        CW_LIT(&w, "],\"url\":null,\"v\":1}");
    } else {
        CW_LIT(&w, "{");
        cw_request(&w, conf, &job->req, job, &obs_at);
        CW_LIT(&w, "}");
    }
    char num[DD_FMT_INT_MAX]; /* jansson's "%" JSON_INTEGER_FORMAT */
    size_t nn = dd_fmt_i64(num, (int64_t)(json_int_t)job->parser_version);
    CW_LIT(&obs, "\"parser_version\":");
    jstr_buf_put(&obs, num, nn);
    CW_LIT(&obs, ",\"scheduled_for\":");
    cw_str_or_null(&obs, job->scheduled_for);
    CW_LIT(&obs, ",");
    char *c = NULL;
    if (!w.err && !obs.err && jstr_buf_room(&w, 1))
        c = arena_malloc(w.len + obs.len + 1);
    if (!c) {
        arena_free(w.p);
        arena_free(obs.p);
        return false;
    }
    memcpy(c, w.p, obs_at);
    memcpy(c + obs_at, obs.p, obs.len);
    memcpy(c + obs_at + obs.len, w.p + obs_at, w.len - obs_at);
    c[w.len + obs.len] = '\0';
    w.p[w.len] = '\0';
    arena_free(obs.p);
    *resource = w.p;
    *canonical = c;
    return true;
}

/* The identity of \p job from its canonical and resource forms. */
static void identity_of(struct job *job, const char *resource)
{
    key_sha256_hex(resource, strlen(resource), job->resource_key);
    key_sha256_hex(job->canonical, strlen(job->canonical), job->request_hash);
    if (job->job_key)
        snprintf(job->op_id, sizeof(job->op_id), "%s:%s", job->scope,
                 job->job_key);
    else
        memcpy(job->op_id, job->request_hash, sizeof(job->request_hash));
    key_event_key(job->op_id, job->request_hash, job->event_key);
}

static dd_err_t derive_identity(const struct job_conf *conf, struct job *job,
                                char *errstr, size_t errstr_size)
{
    char *resource = NULL;
    if (!conf->canonical_tree && canonical_direct(conf, job, &resource,
                                                  &job->canonical)) {
        identity_of(job, resource);
        arena_free(resource);
        return DD_OK;
    }
    json_t *root = json_object();
    bool ok = root != NULL;

    ok = ok && put(root, "v", json_integer(1));
    if (ok && job->steps) {
        json_t *steps = json_array();
        ok = steps != NULL;
        for (size_t i = 0; ok && i < job->n_steps; i++) {
            json_t *s = canonical_request(conf, &job->steps[i]);
            ok = s && json_array_append_new(steps, s) == 0;
        }
        if (ok)
            ok = put(root, "steps", steps); /* steals steps, even on error */
        else
            json_decref(steps);
        static const char *const nulls[] = { "method", "url", "headers",
                                             "credentials", "body_sha256" };
        for (size_t i = 0; ok && i < NELEM(nulls); i++)
            ok = put(root, nulls[i], json_null());
    } else if (ok) {
        json_t *r = canonical_request(conf, &job->req);
        ok = r && json_object_update(root, r) == 0;
        json_decref(r);
        ok = ok && put(root, "steps", json_null());
    }
    ok = ok &&
         put(root, "country",
             job->country ? json_string(job->country) : json_null());
    if (ok) {
        /* The resource key: the canonical request without the observation
         * fields (DESIGN.md section 4, validators); job_key and scope are
         * not in it anyway. */
        resource = dump_compact(root, true);
        ok = resource != NULL;
    }
    ok = ok &&
         put(root, "parser_version", json_integer(job->parser_version)) &&
         put(root, "scheduled_for", job->scheduled_for
                                        ? json_string(job->scheduled_for)
                                        : json_null());
    if (ok)
        job->canonical = dump_compact(root, true);
    json_decref(root);
    if (!ok || !job->canonical) {
        arena_free(resource);
        return nomem(errstr, errstr_size);
    }
    identity_of(job, resource);
    arena_free(resource);
    return DD_OK;
}

/* ---- public ------------------------------------------------------------- */

/* Length of jansson's error text without its " near '...'" quote: the quoted
 * bytes are the job's (a Cookie or Authorization value cut short or
 * mis-escaped), never echoed.  "near end of file" stays. */
static int json_error_kind_len(const char *text)
{
    const char *near = strstr(text, " near '");
    size_t n = near ? (size_t)(near - text) : strlen(text);
    return n > INT_MAX ? INT_MAX : (int)n;
}

static dd_err_t load_error(const json_error_t *je, char *errstr,
                           size_t errstr_size)
{
    switch (json_error_code(je)) {
    case json_error_out_of_memory:
        return nomem(errstr, errstr_size);
    case json_error_invalid_utf8:
        return invalid(errstr, errstr_size,
                       "payload is not valid UTF-8 (near byte %d)",
                       je->position);
    case json_error_null_character:
    case json_error_null_byte_in_key:
        return invalid(errstr, errstr_size,
                       "payload contains a NUL character (\\u0000) at line "
                       "%d column %d; send binary bodies as body_base64",
                       je->line, je->column);
    case json_error_duplicate_key:
        return invalid(errstr, errstr_size,
                       "payload has a duplicate object key at line %d column "
                       "%d",
                       je->line, je->column);
    default:
        /* the kind of error only: the text's quote of the bytes near it is
         * job content (json_error_kind_len) */
        return invalid(errstr, errstr_size,
                       "payload is not valid JSON: %.*s at line %d column %d "
                       "(byte %d)",
                       json_error_kind_len(je->text), je->text, je->line,
                       je->column, je->position);
    }
}

/* A workflow job's requests: "steps", 1..JOB_STEPS_MAX request objects, and
 * no request field beside it; req becomes a shallow copy of steps[0]. */
static dd_err_t parse_steps(json_t *root, json_t *steps, struct job *job,
                            char *errstr, size_t errstr_size)
{
    static const char *const req_fields[] = { "url", "method", "headers",
                                              "body", "body_base64" };
    dd_err_t err;
    for (size_t i = 0; i < NELEM(req_fields); i++) {
        if (field(root, req_fields[i]))
            return invalid(errstr, errstr_size,
                           "field '%s': not allowed with 'steps' (each "
                           "step carries its own request)",
                           req_fields[i]);
    }
    size_t n = json_is_array(steps) ? json_array_size(steps) : 0;
    if (n < 1 || n > JOB_STEPS_MAX)
        return invalid(errstr, errstr_size,
                       "field 'steps': must be an array of 1..%d request "
                       "objects",
                       JOB_STEPS_MAX);
    job->steps = arena_calloc(n, sizeof(*job->steps));
    if (!job->steps)
        return nomem(errstr, errstr_size);
    for (size_t i = 0; i < n; i++) {
        char prefix[JOB_FIELD_NAME_MAX];
        json_t *s = json_array_get(steps, i);
        snprintf(prefix, sizeof(prefix), "steps[%zu].", i);
        if (!json_is_object(s))
            return invalid(errstr, errstr_size,
                           "field 'steps[%zu]': must be a request object", i);
        err = check_unknown(s, step_fields, NELEM(step_fields), prefix, errstr,
                            errstr_size);
        if (err)
            return err;
        /* counted before parsing so job_destroy frees a partial step */
        job->n_steps = i + 1;
        err = parse_request(s, prefix, &job->steps[i], errstr, errstr_size);
        if (err)
            return err;
    }
    /* req is a shallow copy of steps[0]: it borrows its pointers */
    job->req = job->steps[0];
    return DD_OK;
}

/* "safe" when given; else GET/HEAD, for a workflow on every step. */
static dd_err_t parse_safe(json_t *root, struct job *job, char *errstr,
                           size_t errstr_size)
{
    json_t *safe = field(root, "safe");
    if (safe && !json_is_boolean(safe))
        return invalid(errstr, errstr_size,
                       "field 'safe': must be true or false");
    if (safe) {
        job->safe = json_is_true(safe);
    } else if (job->steps) {
        job->safe = true;
        for (size_t i = 0; i < job->n_steps; i++)
            job->safe = job->safe && method_is_safe(&job->steps[i]);
    } else {
        job->safe = method_is_safe(&job->req);
    }
    return DD_OK;
}

/* ---- one block ------------------------------------------------------- */

/* A walk over a job's arrays and strings that either measures them (base
 * NULL: arr and w count bytes from 0) or copies them into the block at base
 * (arr and w point into it).  One walk for both, so that the sizes and the
 * copy cannot disagree. */
struct ob {
    char *base;
    size_t arr, w; /* the next array's and the next string's offset */
};

/* Offsets rounded up for an array of pointers and sizes. */
static size_t ob_align(size_t off)
{
    return (off + 15) & ~(size_t)15;
}

/* \p n bytes of \p src (and a NUL after them) at the string offset; their
 * place in the block, or NULL when measuring or \p src is NULL. */
static void *ob_bytes(struct ob *b, const void *src, size_t n)
{
    if (!src)
        return NULL;
    char *d = b->base ? b->base + b->w : NULL;
    if (d) {
        memcpy(d, src, n);
        d[n] = '\0';
    }
    b->w += n + 1;
    return d;
}

static char *ob_str(struct ob *b, const char *s)
{
    return ob_bytes(b, s, s ? strlen(s) : 0);
}

/* Room for \p n bytes of array at the array offset. */
static void *ob_array(struct ob *b, size_t n)
{
    void *d = b->base && n ? b->base + b->arr : NULL;
    b->arr += ob_align(n);
    return d;
}

/* Request \p src into \p dst (NULL when measuring). */
static void ob_req(struct ob *b, struct job_request *dst,
                   const struct job_request *src)
{
    struct job_header *h =
        ob_array(b, src->n_headers * sizeof(*src->headers));
    char *url = ob_str(b, src->url);
    char *nurl = ob_str(b, src->normalized_url);
    char *method = ob_str(b, src->method);
    for (size_t i = 0; i < src->n_headers; i++) {
        char *name = ob_str(b, src->headers[i].name);
        char *value = ob_str(b, src->headers[i].value);
        if (h)
            h[i] = (struct job_header){name, value};
    }
    unsigned char *body = ob_bytes(b, src->body, src->body_len);
    if (dst) {
        *dst = *src;
        dst->headers = h;
        dst->url = url;
        dst->normalized_url = nurl;
        dst->method = method;
        dst->body = body;
    }
}

/* Every array and string of \p j walked into \p o (NULL when measuring). */
static void ob_job(struct ob *b, struct job *o, const struct job *j)
{
    if (j->steps) {
        struct job_request *steps =
            ob_array(b, j->n_steps * sizeof(*j->steps));
        for (size_t i = 0; i < j->n_steps; i++)
            ob_req(b, steps ? &steps[i] : NULL, &j->steps[i]);
        if (o) {
            o->steps = steps;
            o->req = steps[0]; /* the shallow copy, as parse_steps makes it */
        }
    } else {
        ob_req(b, o ? &o->req : NULL, &j->req);
    }
    char *strs[7];
    const char *from[7] = {j->job_key,  j->scope,     j->country,
                           j->scheduled_for, j->rotation, j->meta_json,
                           j->canonical};
    for (size_t i = 0; i < 7; i++)
        strs[i] = ob_str(b, from[i]);
    if (o) {
        o->job_key = strs[0];
        o->scope = strs[1];
        o->country = strs[2];
        o->scheduled_for = strs[3];
        o->rotation = strs[4];
        o->meta_json = strs[5];
        o->canonical = strs[6];
    }
}

/* \p j (borrowed) copied into one allocation: the struct, the steps and
 * header arrays, then every string; NULL when out of memory (the caller
 * keeps \p j). */
static struct job *job_one_block(const struct job *j)
{
    size_t head = ob_align(sizeof(*j));
    struct ob m = {NULL, 0, 0};
    ob_job(&m, NULL, j);
    char *base = malloc(head + m.arr + m.w); /* outlives the parse */
    if (!base)
        return NULL;
    struct job *o = (struct job *)(void *)base;
    *o = *j;
    struct ob c = {base, head, head + m.arr};
    ob_job(&c, o, j);
    o->one_block = true;
    return o;
}

dd_err_t job_parse(const struct job_conf *conf, const void *payload, size_t len,
                   struct job **out, char *errstr, size_t errstr_size)
{
    dd_err_t err;
    json_t *root = NULL;
    json_error_t je;
    struct job *job = NULL;
    size_t max = conf->max_job_bytes ? conf->max_job_bytes
                                     : JOB_MAX_BYTES_DEFAULT;

    *out = NULL;
    if (len > max) {
        err = invalid(errstr, errstr_size,
                      "payload is %zu bytes, over limits.max_job_bytes (%zu)",
                      len, max);
        goto out;
    }
    arena_begin();
    /* the one-pass loader for the common jobs; jansson's lexer for the
     * rest, and for every error's text */
    root = jstr_load_object(payload, len);
    if (!root) {
        arena_rewind(); /* what the loader built before it gave up */
        root = json_loadb(payload, len,
                          JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    }
    if (!root) {
        err = load_error(&je, errstr, errstr_size);
        goto out;
    }
    if (!json_is_object(root)) {
        err = invalid(errstr, errstr_size, "payload must be a JSON object");
        goto out;
    }
    err = check_unknown(root, job_fields, NELEM(job_fields), "", errstr,
                        errstr_size);
    if (err)
        goto out;

    job = arena_calloc(1, sizeof(*job));
    if (!job) {
        err = nomem(errstr, errstr_size);
        goto out;
    }
    json_t *steps = field(root, "steps");
    if (steps)
        err = parse_steps(root, steps, job, errstr, errstr_size);
    else
        err = parse_request(root, "", &job->req, errstr, errstr_size);
    if (!err)
        err = parse_fields(root, job, errstr, errstr_size);
    if (!err)
        err = parse_safe(root, job, errstr, errstr_size);
    if (!err)
        err = derive_identity(conf, job, errstr, errstr_size);
    if (err)
        goto out;
    /* one block instead of a dozen: one free when its op ends, on
     * whichever thread that is, and the job's bytes side by side; the
     * pieces may be in the arena, so only the one block leaves */
    struct job *one = job_one_block(job);
    if (!one) {
        err = nomem(errstr, errstr_size);
        goto out;
    }
    *out = one;

out:
    job_destroy(job);
    json_decref(root);
    arena_end();
    return err;
}

void job_destroy(struct job *job)
{
    if (!job)
        return;
    if (job->one_block) {
        free(job);
        return;
    }
    if (job->steps) {
        /* req is a shallow copy of steps[0]: freed through steps only */
        for (size_t i = 0; i < job->n_steps; i++)
            request_fini(&job->steps[i]);
        arena_free(job->steps);
    } else {
        request_fini(&job->req);
    }
    arena_free(job->job_key);
    arena_free(job->scope);
    arena_free(job->country);
    arena_free(job->scheduled_for);
    arena_free(job->rotation);
    arena_free(job->meta_json);
    arena_free(job->canonical);
    arena_free(job);
}

const char *job_header_get(const struct job_request *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

bool job_is_credential_header(const struct job_conf *conf, const char *name)
{
    if (in_list(name, builtin_credentials, NELEM(builtin_credentials)))
        return true;
    return conf && conf->credential_headers &&
           in_list(name, conf->credential_headers, conf->n_credential_headers);
}

dd_err_t job_with_key(const void *payload, size_t len, const char *job_key,
                      const char *scope, char **out, size_t *out_len,
                      char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    json_t *root = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        /* jansson's text without its quote of the body (a credential may
         * be there); invalid() keeps the reason clean UTF-8 for the 400's
         * JSON body */
        json_decref(root);
        if (!root && json_error_code(&jerr) == json_error_out_of_memory)
            return nomem(errstr, errstr_size);
        if (root)
            return invalid(errstr, errstr_size, "the body is not a JSON object");
        return invalid(errstr, errstr_size, "the body is not a JSON object: "
                       "%.*s at line %d column %d (byte %d)",
                       json_error_kind_len(jerr.text), jerr.text, jerr.line,
                       jerr.column, jerr.position);
    }
    const char *own = json_string_value(json_object_get(root, "job_key"));
    if (own && strcmp(own, job_key)) {
        json_decref(root);
        return invalid(errstr, errstr_size,
                       "field 'job_key' differs from the Idempotency-Key "
                       "header");
    }
    const char *own_scope = json_string_value(json_object_get(root, "scope"));
    if (own_scope && strcmp(own_scope, scope)) {
        char e[JOB_ECHO_MAX + 1];
        json_decref(root);
        return invalid(errstr, errstr_size,
                       "field 'scope' differs from the API's scope '%s'",
                       echo(scope, e));
    }
    /* json_string() is NULL for a string that is not UTF-8 */
    json_t *jk = json_string(job_key), *js = json_string(scope);
    if (!jk || !js) {
        json_decref(jk);
        json_decref(js);
        json_decref(root);
        return invalid(errstr, errstr_size,
                       "the %s is not valid UTF-8",
                       jk ? "scope" : "Idempotency-Key");
    }
    if (json_object_set_new(root, "job_key", jk) != 0 ||
        json_object_set_new(root, "scope", js) != 0) {
        json_decref(root);
        return nomem(errstr, errstr_size);
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        return nomem(errstr, errstr_size);
    *out = s;
    *out_len = strlen(s);
    return DD_OK;
}
