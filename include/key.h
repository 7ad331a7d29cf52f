/**
 * @file key.h
 * @brief Identity primitives: URL normalization and hashes.  Pure functions.
 *
 * URL normalization (DESIGN.md section 2) parses with libcurl's URL API (CURLU)
 * and applies, in the order of RFC 3986 section 6.2.2: case (lower-case scheme and
 * host, upper-case percent-encoding hex), percent-encoding (decode only unreserved
 * characters, RFC 3986 section 2.3; never %25 %23 %2F %3B %26 %3D), dot segments
 * (RFC 3986 section 5.2.4); then IDN to punycode, default port dropped (80 for
 * http, 443 for https; any other port kept, an empty port dropped), fragment
 * dropped, query parameters stable-sorted by name only, an empty query dropped.
 * normalize(normalize(u)) == normalize(u).  The normalized form is for identity
 * only; requests go out to the URL as submitted.
 *
 * Beyond DESIGN.md: bytes that may not appear raw in a URI (non-ASCII, space,
 * controls, " < > \ ^ ` { | } [ ]) are percent-encoded in path and query, so
 * "/café" and "/caf%C3%A9" are one key; a '%' that starts no valid escape is
 * a literal percent sign and becomes %25 (needed for idempotence); '+' stays
 * '+'.  Refused: a scheme other than http/https, no "//" + host after the
 * scheme (curl would read "http:/x" and "http:///x" as host "x"), userinfo,
 * an IPv6 zone id, port 0, a host that is not UTF-8, that IDN refuses or that
 * is not LDH labels (or an IP literal) once decoded and converted, and
 * whatever CURLU refuses.  The host is the one curl connects to: a host that
 * was percent-decoded or IDN-converted is read once more as curl reads it, so
 * "http://%37" and "http://\u00B9" (IDN: "1") become http://0.0.0.7/ and
 * http://0.0.0.1/.
 */
#ifndef DEDUPD_KEY_H
#define DEDUPD_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define KEY_HEX_LEN 64  /**< hex SHA-256 length without NUL */

/**
 * @brief Normalize \p url for identity (the rules of the preamble: RFC 3986
 *        section 6.2.2, DESIGN.md section 2).
 * @param url  NUL-terminated absolute http or https URL (borrowed).
 * @param out  Out: normalized URL, NUL-terminated, printable ASCII; the caller
 *             owns it (free()).  Set to NULL on failure.
 * @param errstr Optional (may be NULL): why the URL was refused, ASCII.
 * @param errstr_size Size of \p errstr in bytes (DD_ERRSTR_SIZE).
 * @returns DD_OK; DD_ERR_PERMANENT (not a valid absolute http(s) URL, userinfo
 *          present, bad host: errstr says why; never retriable);
 *          DD_ERR_NOMEM (not retriable by the caller).
 * @locality any thread; reentrant (call key_global_init() once first).
 */
dd_err_t key_url_normalize(const char *url, char **out, char *errstr,
                           size_t errstr_size) DD_WUR;

/**
 * @brief One-time process set-up for IDN (setlocale(LC_CTYPE, "C.UTF-8"), which
 *        CURLU_PUNYCODE needs).  Call from main before threads start.
 * @locality the main thread, before any other thread starts (setlocale(3) is
 *           not thread-safe).
 */
void key_global_init(void);

/**
 * @brief Lowercase hex SHA-256 (FIPS 180-4; OpenSSL EVP_Digest) of \p len
 *        bytes at \p data.
 * @param data  Bytes, not NUL-terminated (borrowed); non-NULL even when
 *              \p len is 0.
 * @param len   Length in bytes, any.
 * @param out   Out: KEY_HEX_LEN lowercase hex chars + NUL (caller's buffer).
 * Cannot fail: OpenSSL fails only when it cannot allocate, and then the
 * process stops by dd_oom() (dd.h: an identity hash has no safe fallback).
 * @locality any thread; reentrant.
 */
void key_sha256_hex(const void *data, size_t len, char out[KEY_HEX_LEN + 1]);

/**
 * @brief event_key = hex SHA-256 of "result:v1:" + op_id + "\n" + request_hash
 *        (DESIGN.md section 2: the key of the result event).
 * @param op_id, request_hash NUL-terminated (borrowed).
 * @param out  Out: KEY_HEX_LEN lowercase hex chars + NUL (caller's buffer).
 * Cannot fail (out of memory: dd_oom(), as key_sha256_hex()).
 * @locality any thread; reentrant.
 */
void key_event_key(const char *op_id, const char *request_hash,
                   char out[KEY_HEX_LEN + 1]);

/**
 * @brief The event_key of retry epoch \p retry_epoch of an op (DESIGN.md
 *        section 2): epoch 0 is key_event_key(); epoch n > 0 is the hex
 *        SHA-256 of "result:v1:" + op_id + "\n" + request_hash + "\n" + n,
 *        n in decimal without leading zeros.  A failed op claimed again
 *        after store.failed_ttl_ms is published under the key of its next
 *        epoch, so a consumer that drops replays keeps the recovered result.
 * @param op_id, request_hash NUL-terminated (borrowed).
 * @param retry_epoch  The op record's retry_epoch (store.h), any u32.
 * @param out  Out: KEY_HEX_LEN lowercase hex chars + NUL (caller's buffer).
 * Cannot fail (out of memory: dd_oom(), as key_sha256_hex()).
 * @locality any thread; reentrant.
 */
void key_event_key_epoch(const char *op_id, const char *request_hash,
                         uint32_t retry_epoch, char out[KEY_HEX_LEN + 1]);

#endif
