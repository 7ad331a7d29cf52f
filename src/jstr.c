/* jstr: JSON fast paths beside jansson: string literals of large byte
 * strings, compact dumps, the one-pass object loader (see jstr.h).
 * @locality any thread, every function: reentrant (constant tables only;
 * the loader and the dumps allocate through jansson's allocator). */
#include "jstr.h"

#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__) && !defined(JSTR_NO_SSE2)
#include <emmintrin.h>
#endif

#include "dd.h"

/* Length of the UTF-8 sequence at p[i..n) (RFC 3629 section 4, the table of
 * well-formed byte sequences), 0 if ill-formed. */
static size_t utf8_len(const unsigned char *p, size_t i, size_t n)
{
    unsigned char c = p[i];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;          /* overlong */
        else if (c == 0xED)
            hi = 0x9F;          /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;          /* overlong */
        else if (c == 0xF4)
            hi = 0x8F;          /* above U+10FFFF */
    } else
        return 0;
    if (n - i < len)
        return 0;
    if (p[i + 1] < lo || p[i + 1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (p[i + k] < 0x80 || p[i + k] > 0xBF)
            return 0;
    return len;
}

/* Class of each byte: 0 written as is, 1 a two-byte escape, 2 \u00XX,
 * 3 the lead byte of a multi-byte sequence, 4 never valid (NUL is refused:
 * result.c sends such bodies as base64). */
static const unsigned char cls[256] = {
    4, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 1, 1, 2, 2, /* \b \t \n \f \r */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* '\\' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, /* continuation */
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* C0 C1 overlong */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, /* F5.. */
};

/* The bytes of the word at p that are not written as is (class 0:
 * 0x20..0x7F but '"' and '\\'): one high bit per such byte, by the "has
 * zero byte" and "has byte less than" word tricks (Sean Anderson, Bit
 * Twiddling Hacks).  A borrow can flag a byte above a flagged one, never
 * below: the lowest flag is exact, so 0 means eight plain bytes and the
 * trailing zero count the length of the plain run.  Most of a page is such
 * runs, copied a word at a time (issue 13: the byte loop was 11% of the
 * pipeline thread on fetched pages). */
#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)
static inline uint64_t special8(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\');
    return (x | ((x - ONES * 0x20) & ~x) | ((q - ONES) & ~q)
            | ((b - ONES) & ~b)) & HIGHS;
}

/* The plain bytes at the start of a word whose flags (special8) are \p m,
 * m != 0: its lowest flag's byte index (little-endian; a big-endian host
 * says 0, and the byte loop takes the word). */
static inline size_t run_len(uint64_t m)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (size_t)__builtin_ctzll(m) >> 3;
#else
    (void)m;
    return 0;
#endif
}

/* The scan step: how many bytes one look at the input covers, and the
 * plain bytes at its start (all of them when none is special).  With SSE2
 * (every x86-64) sixteen bytes a step: one signed compare flags 0x00..0x1F
 * and 0x80..0xFF at once, two more '"' and '\\', and the mask's trailing
 * zero count is the run (issue 13: quoting a 14 KB page went from 2.3 to
 * under 1 ns a byte on the pages of bench row 2a, a special byte every 22
 * bytes there).  Otherwise the word of special8. */
#if defined(__SSE2__) && !defined(JSTR_NO_SSE2)
#define SCAN_STEP 16
struct scan_bytes {
    __m128i v;
};
static inline size_t scan_plain(const unsigned char *p, struct scan_bytes *b)
{
    b->v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i m = _mm_or_si128(
        _mm_cmplt_epi8(b->v, _mm_set1_epi8(0x20)),
        _mm_or_si128(_mm_cmpeq_epi8(b->v, _mm_set1_epi8('"')),
                     _mm_cmpeq_epi8(b->v, _mm_set1_epi8('\\'))));
    unsigned bits = (unsigned)_mm_movemask_epi8(m);
    return bits ? (size_t)__builtin_ctz(bits) : SCAN_STEP;
}
static inline void scan_store(char *w, const struct scan_bytes *b)
{
    _mm_storeu_si128((__m128i *)(void *)w, b->v);
}
#else
#define SCAN_STEP 8
struct scan_bytes {
    uint64_t v;
};
static inline size_t scan_plain(const unsigned char *p, struct scan_bytes *b)
{
    memcpy(&b->v, p, 8);
    uint64_t m = special8(p);
    return m ? run_len(m) : SCAN_STEP;
}
static inline void scan_store(char *w, const struct scan_bytes *b)
{
    memcpy(w, &b->v, 8);
}
#endif

/* Plain bytes from p[i] on, a step at a time, up to n - SCAN_STEP at most;
 * with \p w, each step's bytes are stored at *w too, which moves past the
 * plain ones (the caller has room for a whole step: quote_into).
 * @returns the index of the first byte that is not plain or not checked. */
static inline size_t scan_run(const unsigned char *p, size_t i, size_t n,
                              char **w)
{
    while (n - i >= SCAN_STEP) {
        struct scan_bytes b;
        size_t k = scan_plain(p + i, &b);
        if (w) {
            scan_store(*w, &b);
            *w += k;
        }
        i += k;
        if (k < SCAN_STEP)
            break;
    }
    return i;
}

static inline size_t plain_run(const unsigned char *p, size_t i, size_t n)
{
    return scan_run(p, i, n, NULL);
}

/* Append the literal of p[0..n) at w, which has room for the literal
 * (quoted_size) or for 6 n + 2 bytes, the most one takes: a step's 16-byte
 * store lands inside either.  @returns the end, or NULL if the bytes are
 * refused (some of the room written). */
static char *quote_into(const unsigned char *p, size_t n, char *w)
{
    static const char hex[] = "0123456789ABCDEF";
    static const char two[256] = {['"'] = '"', ['\\'] = '\\', ['\b'] = 'b',
                                  ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
                                  ['\t'] = 't'};
    *w++ = '"';
    size_t i = 0;
    while (i < n) {
        /* a whole step is stored, the run's length kept: the rest of the
         * literal (a byte at least for each byte left, and the closing
         * quote) has room for it */
        i = scan_run(p, i, n, &w);
        if (i == n)
            break;
        unsigned char c = p[i];
        switch (cls[c]) {
        case 0:
            *w++ = (char)c;
            i++;
            break;
        case 1:
            *w++ = '\\';
            *w++ = two[c];
            i++;
            break;
        case 2:
            *w++ = '\\';
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 15];
            i++;
            break;
        case 3: {
            size_t len = utf8_len(p, i, n);
            if (!len)
                return NULL;
            memcpy(w, p + i, len);
            w += len;
            i += len;
            break;
        }
        default:
            return NULL;
        }
    }
    *w++ = '"';
    return w;
}

/* Output bytes of the literal; 0 when the bytes are refused. */
static size_t quoted_size(const unsigned char *p, size_t n)
{
    static const unsigned char extra[5] = {0, 1, 5, 0, 0};
    size_t q = 2;
    size_t i = 0;
    while (i < n) {
        size_t e = plain_run(p, i, n);
        q += e - i;
        i = e;
        if (i == n)
            break;
        unsigned char c = p[i];
        unsigned k = cls[c];
        if (k < 3) {
            q += 1 + extra[k];
            i++;
        } else if (k == 3) {
            size_t len = utf8_len(p, i, n);
            if (!len)
                return 0;
            q += len;
            i += len;
        } else
            return 0;
    }
    return q;
}

char *jstr_quote_into(const void *p, size_t n, char *w)
{
    if (memchr(p, '\0', n))
        return NULL;
    return quote_into(p, n, w);
}

size_t jstr_utf8_seq(const void *p, size_t n)
{
    const unsigned char *s = p;
    return s[0] < 0x80 ? 1 : utf8_len(s, 0, n);
}

int jstr_utf8_valid(const void *p, size_t n)
{
    return quoted_size(p, n) != 0;
}

void jstr_text_clean(char *s, size_t size)
{
    if (!s)
        return;
    size_t n = strnlen(s, size);
    if (n == size)
        return;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = jstr_utf8_seq(s + i, n - i);
        if (k == 0 || (k == 1 && (c < 0x20 || c == 0x7f))) {
            s[i] = '?';
            k = 1;
        }
        i += k;
    }
}

dd_err_t jstr_quote(const void *data, size_t n, char **out, size_t *out_len)
{
    /* One pass into room for the longest literal (6 n + 2), then the block
     * cut to the literal: a first pass to size it exactly cost as much as
     * the quoting itself (issue 13).  The room's untouched pages are never
     * faulted in; a refused body (not UTF-8, a NUL) stops the pass where it
     * is found.  Past 1 MiB of input, or when that room is refused (a
     * strict overcommit policy), the literal is sized first. */
    if (memchr(data, '\0', n)) /* most binary bodies: no room asked */
        return DD_ERR_INVAL;
    char *s = n <= ((size_t)1 << 20) ? malloc(6 * n + 3) : NULL;
    if (!s) { /* large, or refused: the exact size */
        size_t room = quoted_size(data, n);
        if (!room)
            return DD_ERR_INVAL;
        s = malloc(room + 1);
        if (!s)
            return DD_ERR_NOMEM;
    }
    char *w = quote_into(data, n, s);
    if (!w) {
        free(s);
        return DD_ERR_INVAL;
    }
    *w = '\0';
    size_t len = (size_t)(w - s);
    char *fit = realloc(s, len + 1);
    *out = fit ? fit : s;
    *out_len = len;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* jstr_dump_compact                                                       */

bool jstr_buf_room(struct jstr_buf *b, size_t n)
{
    if (b->err)
        return false;
    if (b->cap - b->len > n)
        return true;
    /* a request, a result: one malloc; under glibc's large-bin size (1024
     * bytes a chunk), whose requests consolidate the fastbins first
     * (malloc_consolidate: 1.5% of the pipeline thread in shadow runs
     * when this was 1024) */
    size_t cap = b->cap ? b->cap : 1000;
    while (cap - b->len <= n)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->err = DD_ERR_NOMEM;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void jstr_buf_put(struct jstr_buf *b, const char *s, size_t n)
{
    if (jstr_buf_room(b, n)) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

void jstr_buf_quote(struct jstr_buf *b, const char *s, size_t n)
{
    if (!jstr_buf_room(b, 6 * n + 2))
        return;
    char *w = jstr_quote_into(s, n, b->p + b->len);
    if (!w) /* NUL (jansson writes \u0000), or not UTF-8: left to it */
        b->err = DD_ERR_INVAL;
    else
        b->len = (size_t)(w - b->p);
}

struct dkey {
    const char *key;
    size_t len;
    json_t *value;
};

/* jansson 2.14 dump.c compare_keys */
static int dkey_cmp(const void *a, const void *b)
{
    const struct dkey *x = a, *y = b;
    return dd_bytes_cmp(x->key, x->len, y->key, y->len);
}

static void dump_value(struct jstr_buf *b, const json_t *v, bool sort, int depth);

static void dump_object(struct jstr_buf *b, const json_t *v, bool sort, int depth)
{
    size_t n = json_object_size(v);
    if (!n) {
        jstr_buf_put(b, "{}", 2);
        return;
    }
    struct dkey stack[16];
    struct dkey *keys = n <= 16 ? stack : malloc(n * sizeof(*keys));
    if (!keys) {
        b->err = DD_ERR_NOMEM;
        return;
    }
    size_t i = 0;
    const char *k;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach((json_t *)v, k, klen, val)
        keys[i++] = (struct dkey){k, klen, val};
    if (sort && i > 16) {
        qsort(keys, i, sizeof(*keys), dkey_cmp);
    } else if (sort) { /* a request's few members: no qsort setup */
        for (size_t j = 1; j < i; j++) {
            struct dkey t = keys[j];
            size_t m = j;
            for (; m > 0 && dkey_cmp(&keys[m - 1], &t) > 0; m--)
                keys[m] = keys[m - 1];
            keys[m] = t;
        }
    }
    jstr_buf_put(b, "{", 1);
    for (size_t j = 0; j < i && !b->err; j++) {
        if (j)
            jstr_buf_put(b, ",", 1);
        jstr_buf_quote(b, keys[j].key, keys[j].len);
        jstr_buf_put(b, ":", 1);
        dump_value(b, keys[j].value, sort, depth + 1);
    }
    jstr_buf_put(b, "}", 1);
    if (keys != stack)
        free(keys);
}

static void dump_value(struct jstr_buf *b, const json_t *v, bool sort, int depth)
{
    if (b->err)
        return;
    if (depth > 64) {
        b->err = DD_ERR_INVAL;
        return;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        dump_object(b, v, sort, depth);
        return;
    case JSON_ARRAY: {
        jstr_buf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v) && !b->err; i++) {
            if (i)
                jstr_buf_put(b, ",", 1);
            dump_value(b, json_array_get(v, i), sort, depth + 1);
        }
        jstr_buf_put(b, "]", 1);
        return;
    }
    case JSON_STRING:
        jstr_buf_quote(b, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER: {
        char num[DD_FMT_INT_MAX]; /* jansson's "%" JSON_INTEGER_FORMAT */
        jstr_buf_put(b, num, dd_fmt_i64(num, (int64_t)json_integer_value(v)));
        return;
    }
    case JSON_TRUE:
        jstr_buf_put(b, "true", 4);
        return;
    case JSON_FALSE:
        jstr_buf_put(b, "false", 5);
        return;
    case JSON_NULL:
        jstr_buf_put(b, "null", 4);
        return;
    default: /* JSON_REAL: jansson's own rules */
        b->err = DD_ERR_INVAL;
        return;
    }
}

dd_err_t jstr_dump_compact(const struct json_t *v, bool sort_keys, char **out,
                           size_t *out_len)
{
    struct jstr_buf b = {0};
    dump_value(&b, v, sort_keys, 0);
    if (!b.err && jstr_buf_room(&b, 1))
        b.p[b.len] = '\0';
    if (b.err) {
        free(b.p);
        return b.err;
    }
    *out = b.p;
    *out_len = b.len;
    return DD_OK;
}

dd_err_t jstr_body_literal(const void *p, size_t n, char **out,
                           size_t *out_len, const char **key)
{
    dd_err_t err = jstr_quote(p, n, out, out_len);
    if (key)
        *key = "body";
    if (err != DD_ERR_INVAL)
        return err;
    if (n > INT_MAX / 4 * 3)
        return DD_ERR_INVAL;
    if (key)
        *key = "body_base64";
    size_t b64 = 4 * ((n + 2) / 3);
    char *b = malloc(b64 + 3);
    if (!b)
        return DD_ERR_NOMEM;
    b[0] = '"';
    int w = EVP_EncodeBlock((unsigned char *)b + 1, p, (int)n);
    b[1 + w] = '"';
    b[2 + w] = '\0';
    *out = b;
    *out_len = (size_t)w + 2;
    return DD_OK;
}

/* ---------------------------------------------------------------------- */
/* jstr_load_object                                                        */

/* The loader's cursor: the bytes left, and the containers open around it. */
struct jload {
    const unsigned char *p, *end;
    int depth;
};

#define JLOAD_MAX_DEPTH 32
#define JLOAD_MAX_DIGITS 18 /* below json_int_t's 19 */

static void jload_ws(struct jload *l)
{
    while (l->p < l->end
           && (*l->p == ' ' || *l->p == '\n' || *l->p == '\r' || *l->p == '\t'))
        l->p++;
}

/* A string without escapes: its bytes (between the quotes) at *s, *n. */
static bool jload_string(struct jload *l, const char **s, size_t *n)
{
    if (l->p >= l->end || *l->p != '"')
        return false;
    const unsigned char *b = ++l->p;
    size_t len = (size_t)(l->end - b);
    size_t i = 0;
    while (i < len) {
        i = plain_run(b, i, len);
        if (i == len)
            break;
        unsigned char c = b[i];
        if (c == '"') {
            *s = (const char *)b;
            *n = i;
            l->p = b + i + 1;
            return true;
        }
        if (cls[c] == 0) { /* the tail plain_run leaves unchecked */
            i++;
            continue;
        }
        if (cls[c] != 3)
            return false; /* an escape, a control character, not UTF-8 */
        size_t k = utf8_len(b, i, len);
        if (!k)
            return false;
        i += k;
    }
    return false; /* unterminated */
}

static json_t *jload_value(struct jload *l);

/* One member of the open container \p c, added to it: a value for an
 * array; for an object a key, ':' and a value, its key new to \p c (a key
 * seen before would replace its value, the size staying: jansson's
 * JSON_REJECT_DUPLICATES refuses it). */
static bool jload_member(struct jload *l, json_t *c)
{
    if (json_is_array(c)) {
        json_t *v = jload_value(l);
        return v && !json_array_append_new(c, v); /* takes v either way */
    }
    const char *k;
    size_t klen;
    jload_ws(l);
    if (!jload_string(l, &k, &klen))
        return false;
    jload_ws(l);
    if (l->p >= l->end || *l->p != ':')
        return false;
    l->p++;
    json_t *v = jload_value(l);
    if (!v)
        return false;
    size_t had = json_object_size(c);
    return !json_object_setn_new_nocheck(c, k, klen, v) /* takes v */
           && json_object_size(c) > had;
}

/* The object or array \p c (new, or NULL when it could not be made) from
 * its opening byte at l->p to \p close. */
static json_t *jload_container(struct jload *l, json_t *c, unsigned char close)
{
    if (!c)
        return NULL;
    l->p++; /* '{' or '[' */
    jload_ws(l);
    if (l->p < l->end && *l->p == close) {
        l->p++;
        return c;
    }
    while (jload_member(l, c)) {
        jload_ws(l);
        if (l->p < l->end && *l->p == ',') {
            l->p++;
            continue;
        }
        if (l->p < l->end && *l->p == close) {
            l->p++;
            return c;
        }
        break;
    }
    json_decref(c);
    return NULL;
}

/* An integer of at most JLOAD_MAX_DIGITS digits, not "-0", no leading
 * zero; a fraction or an exponent (a real) is not loaded here. */
static json_t *jload_integer(struct jload *l)
{
    const unsigned char *q = l->p;
    bool neg = q < l->end && *q == '-';
    if (neg)
        q++;
    const unsigned char *d = q;
    json_int_t v = 0;
    while (q < l->end && *q >= '0' && *q <= '9') {
        if (q - d < JLOAD_MAX_DIGITS)
            v = v * 10 + (*q - '0');
        q++;
    }
    size_t nd = (size_t)(q - d);
    if (nd == 0 || nd > JLOAD_MAX_DIGITS || (*d == '0' && (nd > 1 || neg)))
        return NULL;
    if (q < l->end && (*q == '.' || *q == 'e' || *q == 'E'))
        return NULL;
    l->p = q;
    return json_integer(neg ? -v : v);
}

static json_t *jload_literal(struct jload *l, const char *word, json_t *v)
{
    size_t n = strlen(word);
    if ((size_t)(l->end - l->p) < n || memcmp(l->p, word, n))
        return NULL;
    l->p += n;
    return v;
}

static json_t *jload_value(struct jload *l)
{
    jload_ws(l);
    if (l->p >= l->end)
        return NULL;
    switch (*l->p) {
    case '{':
    case '[': {
        if (++l->depth > JLOAD_MAX_DEPTH)
            return NULL;
        json_t *v = *l->p == '{' ? jload_container(l, json_object(), '}')
                                 : jload_container(l, json_array(), ']');
        l->depth--;
        return v;
    }
    case '"': {
        const char *s;
        size_t n;
        return jload_string(l, &s, &n) ? json_stringn_nocheck(s, n) : NULL;
    }
    case 't':
        return jload_literal(l, "true", json_true());
    case 'f':
        return jload_literal(l, "false", json_false());
    case 'n':
        return jload_literal(l, "null", json_null());
    default:
        return jload_integer(l);
    }
}

json_t *jstr_load_object(const void *p, size_t n)
{
    struct jload l = {p, (const unsigned char *)p + n, 0};
    jload_ws(&l);
    if (l.p >= l.end || *l.p != '{')
        return NULL;
    json_t *v = jload_value(&l);
    if (!v)
        return NULL;
    jload_ws(&l);
    if (l.p != l.end) {
        json_decref(v);
        return NULL;
    }
    return v;
}
