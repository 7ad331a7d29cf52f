/* jstr: JSON string literals of large byte strings (see jstr.h).
 * @locality any thread, every function: pure (constant tables only). */
#include "jstr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Append the literal of p[0..n) at w (room for 6 n + 2 bytes not needed:
 * the caller sized it by a first pass).  @returns the end, or NULL if the
 * bytes are refused. */
static char *quote_into(const unsigned char *p, size_t n, char *w)
{
    static const char hex[] = "0123456789ABCDEF";
    static const char two[256] = {['"'] = '"', ['\\'] = '\\', ['\b'] = 'b',
                                  ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
                                  ['\t'] = 't'};
    *w++ = '"';
    size_t i = 0;
    while (i < n) {
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
    const unsigned char *p = data;
    size_t q = quoted_size(p, n);
    if (!q)
        return DD_ERR_INVAL;
    char *s = malloc(q + 1);
    if (!s)
        return DD_ERR_NOMEM;
    char *w = quote_into(p, n, s);
    *w = '\0';
    *out = s;
    *out_len = (size_t)(w - s);
    return DD_OK;
}
