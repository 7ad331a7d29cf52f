/**
 * @file result.h
 * @brief Encoding of the events dedupd publishes (DESIGN.md section 3): results,
 *        conflict records, and the submit receipt line; and the one encoder
 *        of an op record as `dedupd inspect --json` and `GET /v1/ops/{op_id}`
 *        show it.  JSON via jansson.
 *
 * A result carries event_key, op_id, job_key, url, final_url, status, selected
 * response headers (content-type, etag, last-modified), body (UTF-8 text) or
 * body_base64, body_sha256, bytes, fetched_at (RFC 3339 UTC), attempts,
 * rotations, outcome (fetched | not_modified | failed | shadow), category when
 * failed, session (exit name, never credentials), generation, retry_epoch
 * (0, or n for the n-th claim of a failed op after store.failed_ttl_ms: its
 * event_key is then that epoch's, key_event_key_epoch()) and the job's
 * meta.  not_modified: the origin answered 304 to the validators dedupd sent
 * (conditional refetch), and body, body_sha256 and bytes are the stored ones.
 *
 * "session" is {"exit": NAME} plus, for a session of a provider with timed
 * rotation, "rotates_at" (RFC 3339 UTC): the end of the provider's interval
 * the result was fetched in (its exit is not current after that; nothing may
 * reuse the answer as "through this session" beyond it).
 *
 * A workflow job (steps) adds:
 *   "restarts": N   times it restarted from its first step on another session
 *   "steps": [ {"step": i, "method", "url" (as submitted), "status",
 *               "final_url" (only when a redirect changed it), "bytes",
 *               "body_sha256" (when the step has a complete body), "attempts"
 *               (in the run that produced the result), "exit" (session name),
 *               "category" (the failing step only)}, ... ]
 * with one record per step of the last run: all of them when fetched, up to
 * and including the failing one when failed.  status, final_url, headers and
 * body are the last step's (the failing one's when failed).
 */
#ifndef DEDUPD_RESULT_H
#define DEDUPD_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct job;
struct fetch_result;
struct store_op;
struct store_attempt;

/**
 * @brief Encode the result event of \p job from \p r (r may be NULL only for
 *        outcome "shadow").
 * @param job        Borrowed.
 * @param r          The fetch's result (borrowed), or NULL: outcome "shadow".
 * @param generation The op's generation (store.h), written as is.
 * @param max_bytes  limits.max_result_bytes, in bytes: above it the event is
 *                   re-encoded without body and meta as outcome failed,
 *                   category too_large; if even that is above it (a huge
 *                   URL), a minimal one with url_sha256 instead of the URLs
 *                   (which may still be above it: the caller checks).
 * @param out        Out: compact JSON (RFC 8259), NUL-terminated; the caller
 *                   owns it (free()).  Untouched on failure.
 * @param out_len    Out: its length in bytes, without the NUL.
 * @param outcome    Out: static text of the outcome ("fetched",
 *                   "not_modified", "failed", "shadow").
 * @param body_at    Out, optional (NULL): where the body's literal
 *                   (jstr_body_literal of r->body) starts in *out; it
 *                   runs to the last byte, the object's closing brace.
 *                   0 when the event carries no body (none, or dropped for
 *                   max_bytes).  The store keeps a completion's outbox
 *                   entry without that literal when the body goes to its
 *                   "bodies" column family anyway (store_complete_req).
 * @returns DD_OK; DD_ERR_NOMEM (not retriable by the caller).
 * @locality any thread; reentrant (the pipeline thread).
 */
dd_err_t result_encode(const struct job *job, const struct fetch_result *r,
                       uint64_t generation, size_t max_bytes, char **out,
                       size_t *out_len, const char **outcome,
                       size_t *body_at) DD_WUR;

/**
 * @brief Encode a conflict record (DESIGN.md section 3): one op_id, two
 *        request hashes.
 * @param op_id, first_hash, first_source, new_hash, new_source
 *             NUL-terminated UTF-8 (borrowed): the op, the request_hash and
 *             source ("topic/partition/offset") first stored, and the ones of
 *             the job that conflicts with it.
 * @param out      Out: compact JSON, NUL-terminated; the caller owns it
 *                 (free()).  Untouched on failure.
 * @param out_len  Out: its length in bytes, without the NUL.
 * @returns DD_OK; DD_ERR_NOMEM.
 * @locality any thread; reentrant.
 */
dd_err_t result_conflict_encode(const char *op_id, const char *first_hash,
                                const char *first_source, const char *new_hash,
                                const char *new_source, char **out,
                                size_t *out_len) DD_WUR;

/**
 * Which fields result_op_encode() writes.  The two views have differed since
 * they were written and tests read each, so each keeps its fields.
 */
enum result_op_view {
    /** `GET /v1/ops/{op_id}` (the live view), compact: op_id, state,
     *  request_hash, event_key, generation, retry_epoch, attempts, outbox,
     *  category (only when set), not_before_ms (only when retryable),
     *  expires_at_ms. */
    RESULT_OP_LIVE = 0,
    /** `dedupd inspect --json`, indented by 2: op_id, state, request_hash,
     *  event_key, generation, retry_epoch, lease_owner,
     *  lease_expires_at_ms, created_at_ms, updated_at_ms, expires_at_ms, attempts, outbox,
     *  first_source, category, not_before_ms (only when set), attempt_log
     *  (one object per attempt: number, generation, started_at_ms,
     *  ended_at_ms, status, bytes, session, exit, category, error). */
    RESULT_OP_FULL = 1,
};

/**
 * @brief Encode the op record \p op of \p op_id as JSON, in the field order
 *        listed for \p view ("outbox" is "none", "pending" or "sent").
 * @param op_id  NUL-terminated (borrowed).
 * @param att    RESULT_OP_FULL: the op's \p n_att attempt records (borrowed;
 *               may be NULL when n_att is 0); ignored by RESULT_OP_LIVE.
 * @param out    Out: NUL-terminated JSON without a trailing newline; free()
 *               it.
 * @returns DD_OK; DD_ERR_NOMEM.
 * @locality any thread; pure.
 */
dd_err_t result_op_encode(const char *op_id, const struct store_op *op,
                          const struct store_attempt *att, size_t n_att,
                          enum result_op_view view, char **out) DD_WUR;

/** @returns "none", "pending" or "sent": the outbox state of \p op (static). */
const char *result_op_outbox_str(const struct store_op *op);

/**
 * @brief Format \p ms since the epoch as RFC 3339 (section 5.6) UTC with
 *        milliseconds: "YYYY-MM-DDTHH:MM:SS.mmmZ".
 * @param ms    Time in ms since the Unix epoch, >= 0.
 * @param buf   Out: caller's buffer; 25 bytes hold the text and its NUL (a
 *              smaller one gets a cut, NUL-terminated text).
 * @param size  Size of \p buf in bytes, > 0.
 * @locality any thread; reentrant (gmtime_r).
 */
void result_time_format(int64_t ms, char *buf, size_t size);

#endif
