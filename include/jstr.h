/**
 * @file jstr.h
 * @brief JSON fast paths beside jansson: the string literal of a large byte
 *        string (a fetched body), compact dumps, and a one-pass loader of
 *        the common job objects (jstr_load_object).
 *
 * jansson stays the JSON library of dedupd; this module exists only because
 * json_stringn() + json_dumps() cost about 40 ns per byte of a page body
 * (850 us for a 21 KB page, measured; the bench of issue 6 named it the limit
 * of the new-claim path), where one pass over the bytes costs about 1 ns.
 * The output is the bytes jansson writes for the same string with its
 * default flags (RFC 8259 section 7): `"` and `\` escaped, \b \f \n \r \t,
 * other control characters as \u00XX (upper-case hex), everything else,
 * including `/`, DEL and every non-ASCII character, as is.
 */
#ifndef DEDUPD_JSTR_H
#define DEDUPD_JSTR_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/**
 * @brief Quote \p n bytes at \p p as a JSON string literal, with its quotes.
 * @param p    Bytes, not NUL-terminated (borrowed); must be UTF-8 (RFC 3629
 *             section 4: no overlong forms, no surrogates, nothing above
 *             U+10FFFF) without NUL.
 * @param n    Length in bytes, any (0 gives `""`).
 * @param out  Out: malloc'd literal, NUL-terminated; the caller owns it
 *             (free()).  Untouched on failure.
 * @param out_len Out: its length in bytes (without the NUL), at most 6 n + 2.
 * @returns DD_OK; DD_ERR_INVAL (not UTF-8, or a NUL byte: nothing written;
 *          send such bytes as base64; not retriable); DD_ERR_NOMEM.
 * @locality any thread; reentrant.
 */
dd_err_t jstr_quote(const void *p, size_t n, char **out, size_t *out_len) DD_WUR;

/**
 * @brief jstr_quote() into the caller's buffer: the literal of \p n bytes at
 *        \p p, with its quotes, written at \p w.
 * @param w  Room for at least 6 n + 2 bytes (the most a literal takes); no
 *           NUL is written.
 * @returns the end of the literal (w + its length), or NULL when the bytes
 *          are refused as by jstr_quote() (some of \p w may be written).
 * @locality any thread; reentrant.
 */
char *jstr_quote_into(const void *p, size_t n, char *w);

/**
 * @brief The JSON literal a result carries for a body (DESIGN.md section 3:
 *        "body" when the bytes are UTF-8 without NUL, else "body_base64"):
 *        jstr_quote() of the bytes, or, when it refuses them, their base64
 *        (RFC 4648 section 4, with padding) in quotes.  Deterministic: the
 *        same bytes give the same literal, so a result the store keeps
 *        without its body (store.h, the outbox's body reference) is rebuilt
 *        byte for byte.
 * @param p        Bytes, not NUL-terminated (borrowed); any content.
 * @param n        Length in bytes (at most INT_MAX for base64).
 * @param out      Out: malloc'd literal with its quotes, NUL-terminated;
 *                 the caller owns it (free()).  Untouched on failure.
 * @param out_len  Out: its length in bytes (without the NUL).
 * @param key      Out, optional: static "body" or "body_base64".
 * @returns DD_OK; DD_ERR_NOMEM; DD_ERR_INVAL (n above INT_MAX, base64).
 * @locality any thread; reentrant.
 */
dd_err_t jstr_body_literal(const void *p, size_t n, char **out,
                           size_t *out_len, const char **key) DD_WUR;

/** A growing JSON text (start with {0}; free(p) when done). */
struct jstr_buf {
    char *p;        /**< the bytes, not NUL-terminated; malloc'd */
    size_t len;     /**< bytes written */
    size_t cap;     /**< bytes allocated */
    dd_err_t err;   /**< the first failure (DD_ERR_NOMEM, DD_ERR_INVAL for
                         a string refused); later appends do nothing */
};

/** @brief Room for \p n more bytes: false (err set) when out of memory.
 *  @locality any thread; the buffer is the caller's. */
bool jstr_buf_room(struct jstr_buf *b, size_t n);

/** @brief Append \p n bytes at \p s as they are.
 *  @locality any thread; the buffer is the caller's. */
void jstr_buf_put(struct jstr_buf *b, const char *s, size_t n);

/** @brief Append the literal of \p n bytes at \p s (jstr_quote_into); err
 *         DD_ERR_INVAL when they are refused.
 *  @locality any thread; the buffer is the caller's. */
void jstr_buf_quote(struct jstr_buf *b, const char *s, size_t n);

/**
 * @brief Length of the well-formed UTF-8 sequence at \p p[0..n), n >= 1
 *        (RFC 3629 section 4: no overlong form, no surrogate, nothing above
 *        U+10FFFF): 1 for an ASCII byte (NUL included), 2..4 otherwise, 0
 *        when p[0] starts none (a stray continuation byte, a cut sequence).
 * @param p  Bytes (borrowed); only p[0..min(n, 4)) are read.
 * @locality any thread; pure.
 */
size_t jstr_utf8_seq(const void *p, size_t n);

/**
 * @brief Is \p p[0..n) UTF-8 without NUL (the rule of jstr_quote)?
 * @param p  Bytes, not NUL-terminated (borrowed); n may be 0 (valid).
 * @returns non-zero when valid, 0 when not.
 * @locality any thread; pure.
 */
int jstr_utf8_valid(const void *p, size_t n);

/**
 * @brief Make the error text \p s one line of UTF-8, in place: each C0
 *        control character, DEL, and byte that starts no well-formed UTF-8
 *        sequence (jstr_utf8_seq() 0: a stray byte, a character cut by a
 *        precision such as "%.64s" or by the buffer's end) becomes '?'.
 *        Nothing else changes, and the length stays the same.
 * @param s     A NUL-terminated text within \p size bytes (an errstr);
 *              left alone when no NUL is within \p size (an errstr that was
 *              never written) or when \p s is NULL.
 * @param size  Bytes of \p s that may be read.
 * @locality any thread; pure.
 */
void jstr_text_clean(char *s, size_t size);

/**
 * @brief The bytes json_dumps(\p v, JSON_COMPACT | (\p sort_keys ?
 *        JSON_SORT_KEYS : 0)) writes for \p v, in one pass: the canonical
 *        form behind request_hash and resource_key and a job's meta
 *        (job.c), where jansson's dump (a callback per token, its own key
 *        sort, a malloc per object) cost about 9 us of the 20 us a job's
 *        parse took (issue 13's profile).
 * Objects `{"k":v,...}`, members sorted by key bytes when \p sort_keys
 * (jansson 2.14's compare_keys: memcmp over the shorter length, then the
 * shorter first), else in insertion order (jansson's own order since 2.8);
 * arrays `[a,b]`; strings as jstr_quote; integers as `%lld`
 * (JSON_INTEGER_FORMAT); true, false, null.
 * @param v          A jansson value (borrowed), any type but real.
 * @param sort_keys  Sort object members (JSON_SORT_KEYS).
 * @param out        Out: malloc'd text, NUL-terminated; the caller owns it
 *                   (free()).  Untouched on failure.
 * @param out_len    Out: its length in bytes (without the NUL).
 * @returns DD_OK; DD_ERR_INVAL when \p v holds what this writer leaves to
 *          jansson (a real: jansson's "%.17g" rules; a string or key with a
 *          NUL byte; nesting deeper than 64): call json_dumps() instead;
 *          DD_ERR_NOMEM.
 * @locality any thread; reentrant (reads \p v only).
 */
struct json_t;
dd_err_t jstr_dump_compact(const struct json_t *v, bool sort_keys, char **out,
                           size_t *out_len) DD_WUR;

/**
 * @brief A JSON object's bytes as a jansson tree, in one pass, or NULL for
 *        anything outside the subset loaded here; the caller then calls
 *        json_loadb(), whose answer (the tree, or its error) is the one.
 *
 * What json_loadb(p, n, JSON_REJECT_DUPLICATES) gives for the same bytes
 * (with JSON_DECODE_ANY too: the same for an object),
 * built with jansson's own constructors (its allocator, json_set_alloc_funcs,
 * included): members in document order, strings as they are.  The subset
 * (RFC 8259): a top-level object, nesting up to 32 deep; strings with no
 * escape and no control character (U+0000..U+001F, section 7; DEL is
 * allowed, as jansson does), UTF-8 (RFC 3629 section 4); integers of
 * at most 18 digits, no leading zero, not "-0"; true, false, null; JSON
 * whitespace.  NULL for everything else: a fraction or an exponent, an
 * escape, a duplicate key, a syntax error, out of memory.  jansson's lexer
 * reads a byte at a time through its stream functions (json_loadb was about
 * 25,000 instructions for a 160-byte job under callgrind, issue 13); most
 * jobs are in this subset.
 * @param p Bytes, not NUL-terminated (borrowed).
 * @returns a new reference (json_decref()), or NULL as above.
 * @locality any thread; reentrant.
 */
struct json_t *jstr_load_object(const void *p, size_t n);

#endif
