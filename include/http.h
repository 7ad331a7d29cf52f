/**
 * @file http.h
 * @brief dedupd's two HTTP listeners (libmicrohttpd): probes and metrics on the
 *        admin listener, the job API on the api listener.
 *
 * Admin listener (admin.listen, default 0.0.0.0:9464, reachable on the pod IP
 * by kubelet probes and Prometheus; read-only, no authentication):
 *  - `GET /healthz`  200 "ok" while the process runs (liveness).
 *  - `GET /readyz`   200 "ready" when the ready callback says so, else 503 with
 *                    its short reason (readiness).
 *  - `GET /metrics`  metrics_render(), `text/plain; version=0.0.4`.
 *  - another path is 404; a method other than GET or HEAD on a known path is
 *    405 with `Allow: GET, HEAD`.
 *
 * API listener (api.listen, default 127.0.0.1:9465, only for containers of the
 * same pod; off when NULL or ""), optional bearer token (RFC 6750):
 *  - every request must carry `Authorization: Bearer <api_token>` when a token
 *    is set, else 401 with `WWW-Authenticate: Bearer realm="dedupd"`.  The
 *    comparison is constant-time (SHA-256 of both, CRYPTO_memcmp) and the token
 *    is never logged.
 *  - `POST /v1/jobs`: Content-Type must be application/json (parameters such as
 *    charset allowed), else 415; a body above max_body_bytes is 413: refused
 *    from Content-Length before the body is read when the length is declared;
 *    a chunked body is buffered up to the limit, then drained (not kept) and
 *    answered 413 at its end, and past 1 MiB the connection is closed without
 *    an answer (libmicrohttpd 0.9.75 cannot answer in the middle of a body).
 *    Only bodies within the limit are buffered (max_body_bytes + 1 bytes at
 *    most per request).  The body is then handed to the submit callback,
 *    which owns the semantics (202 receipt, replay, 409, 422, 400).
 *  - `GET /v1/ops/{op_id}` (HEAD too): handed to the op callback (200/404).
 *    op_id is the URL-decoded rest of the path, 1..HTTP_OP_ID_MAX bytes without
 *    '/'; anything else is 404.
 *  - another path is 404; a known path with another method is 405 with Allow.
 *  Error bodies of the API are JSON: `{"error":"<code>","message":"<text>"}`.
 *
 * Threads: each listener is one libmicrohttpd daemon with its own internal
 * polling thread (MHD_USE_INTERNAL_POLLING_THREAD): the ready callback runs on
 * the admin thread, the submit and op callbacks on the api thread, one request
 * at a time per listener, so a slow callback delays only its own listener.
 * Callbacks must be thread-safe with respect to the rest of the process (the
 * store and producer APIs are).  metrics are read from atomics (metrics.h).
 */
#ifndef DEDUPD_HTTP_H
#define DEDUPD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct http;

/** Longest op_id accepted in `GET /v1/ops/{op_id}`, in bytes. */
#define HTTP_OP_ID_MAX 256

/** Size of the reason buffer handed to http_ready_cb, in bytes. */
#define HTTP_REASON_SIZE 128

/** Configuration of http_new().  Strings are borrowed for the call only. */
struct http_conf {
    /** "ADDR:PORT" of the admin listener: an IPv4 literal ("0.0.0.0:9464") or
     *  a bracketed IPv6 literal ("[::]:9464"); port 0..65535, 0 picks a free
     *  port (see http_admin_port()).  Required. */
    const char *admin_listen;
    /** "ADDR:PORT" of the job API, same syntax; NULL or "" = no API. */
    const char *api_listen;
    /** Bearer token the API requires; NULL or "" = none.  Printable ASCII
     *  without spaces.  Secret: copied as a digest, never logged or echoed. */
    const char *api_token;
    /** Largest accepted body of POST /v1/jobs, in bytes; > 0. */
    size_t max_body_bytes;
};

/**
 * @brief Readiness of the process, asked by each `GET /readyz`.
 * @param opaque  http_callbacks.opaque.
 * @param reason  Buffer of \p reason_size bytes, "" on entry; when not ready
 *                the callback may write a short NUL-terminated reason
 *                ("consumer not assigned") for the 503 body; left empty, the
 *                body is "not ready".  Never put secrets in it.
 * @returns true when ready (200).
 * @locality the admin listener's thread.
 */
typedef bool(http_ready_cb)(void *opaque, char *reason, size_t reason_size);

/**
 * @brief Handle `POST /v1/jobs` (authorised, JSON content type, body within
 *        max_body_bytes).
 * @param opaque           http_callbacks.opaque.
 * @param idempotency_key  Value of the Idempotency-Key header, NUL-terminated,
 *                         or NULL when absent (borrowed for the call).
 * @param body             The request body, \p len bytes, followed by a NUL
 *                         byte that \p len does not count (borrowed for the
 *                         call; never NULL, "" when empty).
 * @param len              Body length in bytes, 0..max_body_bytes.
 * @param response_json    Out: NULL or a malloc'd NUL-terminated JSON body;
 *                         http frees it.  NULL sends an empty body.
 * @param extra_header_name   Out: NULL or a malloc'd header name (e.g.
 *                            "Location" or "Retry-After"); http frees it.
 * @param extra_header_value  Out: its malloc'd value (NULL = header skipped);
 *                            http frees it.  A name that is not an HTTP token
 *                            or a value with CR/LF is dropped (logged).
 * @returns the HTTP status, 100..599 (anything else is answered 500).
 * @locality the api listener's thread.
 */
typedef int(http_submit_cb)(void *opaque, const char *idempotency_key,
                            const void *body, size_t len, char **response_json,
                            char **extra_header_name,
                            char **extra_header_value);

/**
 * @brief Handle `GET /v1/ops/{op_id}` (authorised).
 * @param opaque         http_callbacks.opaque.
 * @param op_id          URL-decoded op id, NUL-terminated, 1..HTTP_OP_ID_MAX
 *                       bytes, no '/' (borrowed for the call; not validated
 *                       further: the callback checks its syntax).
 * @param response_json  Out: NULL or a malloc'd NUL-terminated JSON body; http
 *                       frees it.
 * @returns the HTTP status, normally 200 or 404 (100..599, else 500 is sent).
 * @locality the api listener's thread.
 */
typedef int(http_op_cb)(void *opaque, const char *op_id, char **response_json);

/** Callbacks of http_new() (copied; opaque is borrowed until http_destroy). */
struct http_callbacks {
    http_ready_cb *ready;   /**< NULL = always ready */
    http_submit_cb *submit; /**< NULL = POST /v1/jobs answers 503 */
    http_op_cb *op;         /**< NULL = GET /v1/ops/{id} answers 503 */
    void *opaque;           /**< passed to every callback */
};

/**
 * @brief Bind both listeners and start serving.
 * @param conf    Configuration (borrowed for the call).
 * @param cb      Callbacks (copied; cb->opaque must outlive the server).
 * @param out     Out: the server; stop and free with http_destroy().
 * @param errstr  Optional (may be NULL); on failure, e.g.
 *                "admin.listen: 'x' is not ADDR:PORT (...)",
 *                "bind 127.0.0.1:9464: Address already in use".
 * @returns DD_OK;
 *          DD_ERR_INVAL (bad listen address, max_body_bytes 0, token with
 *          spaces or control characters; not retriable);
 *          DD_ERR_IO (bind/listen or daemon start failed; retriable once the
 *          port is free);
 *          DD_ERR_NOMEM.
 *          On failure nothing is left running and *out is untouched.
 * @locality any thread (normally main, at start-up).
 */
dd_err_t http_new(const struct http_conf *conf, const struct http_callbacks *cb,
                  struct http **out, char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief The admin listener's bound port (the real one when 0 was asked).
 * @locality any thread.
 */
uint16_t http_admin_port(const struct http *h);

/**
 * @brief The api listener's bound port, or 0 when the API is off.
 * @locality any thread.
 */
uint16_t http_api_port(const struct http *h);

/**
 * @brief Stop both listeners (closes the sockets, joins their threads: no
 *        callback runs after it returns) and free.  http_destroy(NULL) is a
 *        no-op.
 * @locality any thread except a listener's own (i.e. not from a callback).
 */
void http_destroy(struct http *h);

#endif
