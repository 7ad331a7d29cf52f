/**
 * @file job.h
 * @brief Scrape job: payload bytes -> validated job with its identity.
 *
 * job_parse() validates a job (DESIGN.md section 3) and derives its identity
 * (section 2): the canonical request (JSON, sorted keys, "v":1), op_id,
 * request_hash and event_key.  JSON (jansson) stays inside this module and
 * result encoding.  A job that is not valid data is DD_ERR_PERMANENT with a
 * one-sentence reason in errstr; the pipeline sends it to the DLQ with that reason.
 * A reason is valid UTF-8 without control characters, so that it can be the
 * API's JSON error body, a Kafka header and a log line: quoted input is cut at
 * a character boundary, control characters show as '?' and bytes that are not
 * UTF-8 as "\xNN".
 *
 * The struct is a read-only record: fields are owned by the job and valid until
 * job_destroy().
 *
 * Validation decisions where DESIGN.md is silent (reasons name the field, e.g.
 * "field 'url': scheme 'ftp' is not http or https"):
 * - unknown fields are refused, at the top level and in steps, with a hint for
 *   a near miss ("unknown field 'job_kee' (did you mean 'job_key'?)");
 * - a field set to JSON null counts as absent;
 * - a workflow job carries its requests in "steps" only: url, method, headers,
 *   body or body_base64 next to "steps" are refused;
 * - header names are HTTP tokens, unique case-insensitively; values have no
 *   control character but HTAB; Content-Length and Transfer-Encoding are
 *   refused (libcurl frames the body); CONNECT is refused as a method;
 * - body_base64 is strict RFC 4648 (standard alphabet, '=' padding, no
 *   whitespace, zero pad bits);
 * - scheduled_for is RFC 3339 with at most 9 fractional digits and no leap
 *   second; "-00:00" is read as UTC;
 * - safe: GET/HEAD (every step, for a workflow) unless "safe" is given, which
 *   wins either way.
 *
 * Canonical request (sorted keys, compact): {"body_sha256", "country",
 * "credentials", "headers", "method", "parser_version", "scheduled_for",
 * "steps", "url", "v":1}; every key is always present (null when unset).  For
 * a workflow, method/url/headers/credentials/body_sha256 are null and "steps"
 * holds one {"body_sha256","credentials","headers","method","url"} per step;
 * otherwise "steps" is null.  Variance header values and credential digests
 * use the value trimmed of SP/HTAB.  job_key and scope are not in it (they
 * make op_id); neither are rotation, deadline_s, safe, replayable, meta.
 *
 * Call key_global_init() once before job_parse() (IDN hosts need it), and
 * job_global_init() (its parse arena: optional, a speed-up).
 */
#ifndef DEDUPD_JOB_H
#define DEDUPD_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define JOB_HEX_LEN 64          /**< hex SHA-256 length, without NUL */
#define JOB_OP_ID_MAX (64 + 1 + 256) /**< scope ":" job_key, without NUL */

/** One request header as submitted (name case kept for the wire). */
struct job_header {
    char *name;   /**< NUL-terminated, no CR/LF/NUL/':' */
    char *value;  /**< NUL-terminated, no CR/LF/NUL */
};

/** One HTTP request: the job itself, or one step of a workflow. */
struct job_request {
    char *url;                   /**< as submitted (parsed and validated) */
    char *normalized_url;        /**< identity form (key_url_normalize) */
    char *method;                /**< upper-cased, e.g. "GET" */
    struct job_header *headers;  /**< array of n_headers */
    size_t n_headers;
    unsigned char *body;         /**< decoded body bytes; NULL when absent,
                                      non-NULL when given (even empty); a NUL
                                      byte follows the body_len bytes */
    size_t body_len;             /**< 0 when absent or empty */
};

/** A validated job. */
struct job {
    struct job_request req;      /**< the request; with steps, a shallow copy
                                      of steps[0] whose pointers are borrowed
                                      from it (freed once, through steps) */
    struct job_request *steps;   /**< workflow steps (1..32), NULL when none */
    size_t n_steps;
    char *job_key;               /**< NULL when absent */
    char *scope;                 /**< "default" unless given */
    char *country;               /**< upper-cased ISO 3166-1 alpha-2 or NULL */
    int64_t parser_version;      /**< default 0 */
    char *scheduled_for;         /**< normalized RFC 3339 UTC or NULL */
    char *rotation;              /**< sticky/timed/per_request or NULL */
    int64_t deadline_s;          /**< 0 = policy default */
    bool safe;                   /**< method is safe (GET/HEAD or "safe":true) */
    bool replayable;             /**< "replayable": true */
    char *meta_json;             /**< compact JSON of "meta" (member order
                                      kept) or NULL */
    char *canonical;             /**< canonical request JSON (identity input) */
    char op_id[JOB_OP_ID_MAX + 1];
    char request_hash[JOB_HEX_LEN + 1];
    char event_key[JOB_HEX_LEN + 1]; /**< epoch 0's from job_parse; the
                                          pipeline sets the key of the
                                          op's retry_epoch once it wins
                                          the claim (key_event_key_epoch) */
    uint32_t retry_epoch;        /**< 0 from job_parse; the op's
                                      retry_epoch (store.h) once claimed */
    char resource_key[JOB_HEX_LEN + 1]; /**< SHA-256 hex of the canonical
                                             request without parser_version
                                             and scheduled_for: what
                                             validators and single-flight
                                             key on (DESIGN.md 4, 5) */
    bool one_block;              /**< job_parse's: the struct, its arrays
                                      and strings in one allocation (read
                                      only; job_destroy frees it at once) */
};

/** Identity and validation settings (borrowed; must outlive the call). */
struct job_conf {
    const char *const *variance_headers;  /**< lower-case names; NULL = default
                                               {"accept","accept-language"} */
    size_t n_variance_headers;
    const char *const *credential_headers; /**< extra credential header names
                                                (lower-case) beyond the built-in
                                                authorization, cookie,
                                                proxy-authorization, x-api-key */
    size_t n_credential_headers;
    size_t max_job_bytes;                 /**< 0 = 1 MiB */
    bool canonical_tree;                  /**< tests: derive the identity
                                               through the jansson tree (the
                                               reference the direct writer is
                                               compared with); false in the
                                               product */
};

/**
 * @brief Parse, validate and derive the identity of one job.
 * @param conf     Settings (borrowed for the call).
 * @param payload  Job JSON bytes (RFC 8259, UTF-8), not NUL-terminated
 *                 (borrowed); non-NULL even when \p len is 0.
 * @param len      Length in bytes; above conf->max_job_bytes the job is
 *                 refused before parsing.
 * @param out      Out: the job, owned by the caller: job_destroy().  NULL on
 *                 failure.  Always one block (struct job.one_block): the
 *                 pieces it is built from (from the parse arena, when
 *                 job_global_init installed it) are freed before return.
 * @param errstr   Optional (may be NULL): the reason, one sentence, when
 *                 invalid (clean UTF-8, see the preamble).
 * @param errstr_size  Size of \p errstr in bytes (DD_ERRSTR_SIZE).
 * @returns DD_OK; DD_ERR_PERMANENT (not a valid job: DLQ with errstr; never
 *          retriable); DD_ERR_NOMEM (not retriable by the caller).
 * @locality any thread; reentrant (the pipeline and the job API's thread).
 */
dd_err_t job_parse(const struct job_conf *conf, const void *payload, size_t len,
                   struct job **out, char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief The job of `POST /v1/jobs` under an Idempotency-Key: \p payload with
 *        "job_key" set to \p job_key and "scope" to \p scope (DESIGN.md
 *        section 7), as compact JSON to produce and then job_parse().
 * @param payload  Request body, \p len bytes, not NUL-terminated (borrowed).
 * @param job_key  The Idempotency-Key, NUL-terminated (borrowed); not
 *                 validated here (job_parse() checks it).
 * @param scope    api.scope, NUL-terminated (borrowed).
 * @param out      Out: the new JSON, NUL-terminated; the caller owns it
 *                 (free()).  Untouched on failure.
 * @param out_len  Out: its length in bytes, without the NUL.
 * @param errstr   Optional (may be NULL); clean UTF-8 as job_parse()'s.
 * @param errstr_size  Size of \p errstr in bytes.
 * @returns DD_OK; DD_ERR_PERMANENT (not a JSON object, its own job_key or
 *          scope differs, or the key or scope is not UTF-8: errstr says
 *          which; a 400, not retriable); DD_ERR_NOMEM.
 * @locality any thread; reentrant (the job API's thread).
 */
dd_err_t job_with_key(const void *payload, size_t len, const char *job_key,
                      const char *scope, char **out, size_t *out_len,
                      char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Let jansson's allocations during job_parse() come from a bump arena
 *        of the calling thread (64 KB, malloc'd at its first parse, freed
 *        when the thread ends) instead of one malloc
 *        and free per JSON value, key and buffer: jansson frees all of them
 *        before the parse returns, and the arena is reused once every one is
 *        freed.  So do the job's own pieces (strings, header arrays, the
 *        canonical request) before they are copied into its one block.
 *        Outside a parse, on a thread not parsing, and for what does not
 *        fit, jansson allocates with malloc(3) as before
 *        (json_set_alloc_funcs(3), jansson's "Custom Memory Allocation").
 *        Not installed under AddressSanitizer or valgrind, whose checks of
 *        every jansson allocation stay as they were.  Without this call
 *        job_parse() works the same, only slower.
 * @locality call once, before any other thread uses jansson (main(), a
 *           test's set-up); later calls do nothing.
 */
void job_global_init(void);

/**
 * @brief For tests: how many of this thread's arena allocations are not yet
 *        freed.  0 after every job_parse() returns: a
 *        jansson value that outlived its parse (an escape or a leak) keeps
 *        it above 0, and the arena is then never reset under it.
 * @locality the calling thread's own arena.
 */
size_t job_arena_live(void);

/**
 * @brief For tests: how many blocks this thread's arena has handed out since
 *        the thread began (0 when job_global_init did not install it, or
 *        under AddressSanitizer or valgrind): a parse that leaves it where
 *        it was ran on malloc alone.
 * @locality the calling thread's own arena.
 */
uint64_t job_arena_served(void);

/** @brief Free a job; job_destroy(NULL) is a no-op.
 *  @locality any thread, once nothing borrows from \p job. */
void job_destroy(struct job *job);

/**
 * @brief Look up a header of \p req case-insensitively (RFC 9110 section
 *        5.1: field names are case-insensitive).
 * @param req   Borrowed.
 * @param name  NUL-terminated header name (borrowed).
 * @returns the value as submitted (borrowed, valid while the job lives) or
 *          NULL when absent.
 * @locality any thread.
 */
const char *job_header_get(const struct job_request *req, const char *name);

/**
 * @brief true if \p name (any case) is a credential header for \p conf: one
 *        of the built-in authorization, cookie, proxy-authorization,
 *        x-api-key, or of conf->credential_headers.
 * @param conf  Borrowed; NULL = the built-in names only.
 * @param name  NUL-terminated (borrowed).
 * @locality any thread; pure.
 */
bool job_is_credential_header(const struct job_conf *conf, const char *name);

#endif
