/**
 * @file api.h
 * @brief The job API (`POST /v1/jobs`, `GET /v1/ops/{op_id}`) and the
 *        readiness `/readyz` reports, served over http.h's two listeners.
 *
 * http.c serves both listeners from one server; this module gives it every
 * callback and owns what they use: the job API's own producer (results go
 * through the pipeline's), a borrowed store, and the readiness flag the
 * pipeline sets (api_ready_set).
 *
 * `POST /v1/jobs` (DESIGN.md section 7, Idempotency-Key semantics of the IETF
 * httpapi draft): the body is a job (job.h).  Without an Idempotency-Key it is
 * parsed, produced to the jobs topic keyed by op_id with the headers
 * dedupd-op-id and dedupd-request-hash, and answered 202 once the broker
 * acknowledged it, with the receipt
 * `{"op_id","event_key","request_hash","topic","partition","offset"}`.
 * With a key, the key becomes the job's job_key under scope api.scope, and the
 * receipt is stored (store_receipt_*): a replay for the same payload answers
 * the stored receipt again (202, `Idempotent-Replayed: true`), 409 while the
 * first submit is unacknowledged and can still be in flight (its receipt is
 * pending for the handler's 15 s wait + 5 s; past that window, after a crash
 * between accepting and acknowledging, the same payload is a new submit:
 * produced again, 202, same op_id, which the pipeline deduplicates), 422 for
 * another payload as long as the receipt lives, which is as long as the op
 * it answers for (changelog_retention_ms(): the longest op record life + the
 * longest job deadline + 1 h; or api.receipt_ttl_ms when larger), pending or
 * done; 400 for a malformed key (1..255 printable ASCII, no quote or
 * backslash) or job; 503 when the receipt store cannot be read or the job
 * could not be queued (the receipt is then aborted, so a retry may
 * succeed).  Error bodies are
 * `{"error": "<text>"}`.
 *
 * `GET /v1/ops/{op_id}`: the op record as result_op_encode(RESULT_OP_LIVE)
 * writes it (200); 404 `{"error":"op not found","hint":...}` when this
 * instance's store does not hold it; 500 `{"error":"store read failed"}`.
 *
 * Threads: the job API's handlers run on the api listener's thread, the
 * readiness handler on the admin listener's (http.h).  The job API's producer
 * is used by the api listener's thread only: each request flushes it and
 * serves its own delivery report, so nothing of a request outlives it; after
 * a fatal producer error it is recreated there (producer_replace).  The
 * pipeline thread calls api_ready_set; anything may call api_new and
 * api_destroy but not from a handler.
 */
#ifndef DEDUPD_API_H
#define DEDUPD_API_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"

struct api;
struct cfg;
struct job;
struct job_conf;
struct store;

/**
 * @brief Create the job API's producer (when api.listen is set) and start
 *        both HTTP listeners (admin.listen; api.listen, off when "").
 *
 * Failpoints: (tests/integration/it_admin.sh)
 * DEDUPD_FAILPOINT_API_PRODUCER_FATAL=1 raises a fatal error on the job API's
 * producer before the first request, so its recreation is exercised;
 * (tests/integration/it_api_pending_409.sh) DEDUPD_FAILPOINT_API_TOPIC=T
 * makes POST /v1/jobs produce to topic T instead of topics.jobs, and
 * DEDUPD_FAILPOINT_RECEIPT_PENDING_MS=N sets a pending receipt's in-flight
 * window to N ms (1..the receipt's life) instead of 20 s.
 * @param cfg    Frozen config (borrowed; must outlive the api).
 * @param jconf  Identity settings of job_parse (copied; the lists it points
 *               to are borrowed and must outlive the api).
 * @param store  The store receipts and ops are read from (borrowed; must
 *               outlive the api; its API is thread-safe).
 * @param out    Out: api_destroy().
 * @param errstr Optional (may be NULL).
 * @returns DD_OK; DD_ERR_INVAL (bad listen address or token, producer
 *          config: errstr names the key; not retriable); DD_ERR_IO (a port
 *          is taken; retriable once free); DD_ERR_FATAL (producer);
 *          DD_ERR_NOMEM.  On failure nothing is left running.
 * @locality any thread (main, at start-up).
 */
dd_err_t api_new(const struct cfg *cfg, const struct job_conf *jconf,
                 struct store *store, struct api **out, char *errstr,
                 size_t errstr_size) DD_WUR;

/**
 * @brief The body handling of `POST /v1/jobs`, before the store and Kafka:
 *        the Idempotency-Key check (1..255 printable ASCII, no quote or
 *        backslash), job_with_key() under \p scope, job_parse().  The job
 *        API's handler calls it first; tests/fuzz/fuzz_api_submit.c calls it
 *        on fuzzed keys and bodies.
 * @param scope  api.scope, NUL-terminated (borrowed).
 * @param jconf  Identity settings (borrowed for the call).
 * @param idempotency_key  The header's value, NUL-terminated, or NULL when
 *               absent (borrowed).
 * @param body, len  The request body (borrowed).
 * @param job    Out: the parsed job (job_destroy()) when 0 is returned, else
 *               NULL.
 * @param keyed  Out: the keyed payload job_with_key() wrote (free()), what is
 *               produced, when 0 is returned with a key; else NULL.
 * @param keyed_len  Out: length of the payload produced: *keyed's, or \p len
 *               without a key.
 * @param response_json  Out: on 400 the malloc'd error body
 *               `{"error": "<reason>"}` (NULL only if it could not be
 *               built); NULL when 0 is returned.
 * @returns 0 (go on: receipt, produce) or 400.
 * @locality any thread; reentrant (the api listener's thread).
 */
int api_submit_parse(const char *scope, const struct job_conf *jconf,
                     const char *idempotency_key, const void *body,
                     size_t len, struct job **job, char **keyed,
                     size_t *keyed_len, char **response_json) DD_WUR;

/**
 * @brief Set what `GET /readyz` answers: 200 when \p ready, else 503 "not
 *        consuming: waiting for partitions of <topics.jobs>".  Starts false.
 * @locality any thread (the pipeline's); the flag is atomic.
 */
void api_ready_set(struct api *api, bool ready);

/**
 * @brief Watch \p hurry, the flag a second SIGTERM sets (borrowed: it must
 *        outlive \p api; NULL: none): once it is set, a POST /v1/jobs
 *        waiting for its produce's acknowledgement stops waiting (503, its
 *        pending receipt aborted: the client retries) and api_destroy()
 *        flushes the job API's producer for at most 300 ms.  No-op on NULL
 *        \p api.
 * @locality any thread (the pointer is atomic).
 */
void api_hurry_watch(struct api *api, const volatile sig_atomic_t *hurry);

/**
 * @brief Stop both listeners (no handler runs after it returns: a POST
 *        waits up to 15 s for its acknowledgement, unless hurried), flush
 *        the job API's producer (up to 5 s; 300 ms once the flag of
 *        api_hurry_watch() is set) and free.  api_destroy(NULL) is a
 *        no-op.
 * @locality any thread but a listener's own.
 */
void api_destroy(struct api *api);

#endif
