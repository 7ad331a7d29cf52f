/**
 * @file store_codec.h
 * @brief INTERNAL TEST HOOK, not an API: the value codecs of the store's op,
 *        attempt, outbox, validator and body records (static in store.c), for
 *        tests/fuzz/fuzz_record.c and unit tests.
 *
 * The wrappers are defined in a block at the end of src/store.c and call the
 * static encoder/decoders unchanged.  Production code uses store.h only; the
 * layouts may change with the store's layout version.
 *
 * Value layout (little-endian; strings are a u16 length and that many bytes):
 *   header (STORE_CODEC_HDR_LEN = 16 bytes): [0] layout version, [1] record
 *   type, [2..7] zero, [8..15] expires_at_ms (i64);
 *   op:      u8 state, u8 outbox_state, u64 generation, i64 lease_expires_at,
 *            i64 created_at, i64 updated_at, u32 attempts, u64 outbox_seq,
 *            str request_hash, str event_key, str lease_owner, str source,
 *            str category, then i64 not_before in state retryable only;
 *   attempt: u32 number, u64 generation, i64 started_at, i64 ended_at,
 *            u32 status, u64 bytes, str session, str exit_addr, str category,
 *            str error (written by store_attempts_put());
 *   outbox:  str op_id, str event_key, u64 generation, u32 value_len, value
 *            (written by store_complete(); expires_at 0);
 *   validator: i64 stored_at, i32 status, u64 body_len, str body_sha256,
 *            str etag, str last_modified, str content_type, str final_url
 *            (written by store_complete_batch());
 *   body:    u64 body_len, then body_len bytes (key: the body's hex SHA-256).
 */
#ifndef DEDUPD_STORE_CODEC_H
#define DEDUPD_STORE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "store.h"

#define STORE_CODEC_HDR_LEN 16

/** Record kinds for store_codec_header(). */
enum store_codec_kind {
    STORE_CODEC_OP = 1,
    STORE_CODEC_OUTBOX = 2,
    STORE_CODEC_ATTEMPT = 5,
    STORE_CODEC_VALIDATOR = 7,
    STORE_CODEC_BODY = 8,
};

/** A decoded outbox entry: pointers borrow the decoded value. */
struct store_codec_outbox {
    const char *op_id;
    size_t op_id_len;
    const char *event_key;
    size_t event_key_len;
    uint64_t generation;
    const void *value;
    size_t value_len;
};

/** @brief Size of the largest op value (a buffer for store_codec_op_encode). */
size_t store_codec_op_value_max(void);

/**
 * @brief Write the record header of \p kind (the store's own enc_header) into
 *        \p out (STORE_CODEC_HDR_LEN bytes).
 * @returns STORE_CODEC_HDR_LEN.
 */
size_t store_codec_header(enum store_codec_kind kind, int64_t expires_at_ms,
                          unsigned char *out);

/**
 * @brief op_encode(): the value of \p op.
 * @param cap  >= store_codec_op_value_max().
 * @returns the value's length; 0 (nothing written) when cap is too small or a
 *          string of \p op is not NUL-terminated within its array.
 */
size_t store_codec_op_encode(const struct store_op *op, unsigned char *buf,
                             size_t cap);

/**
 * @brief op_decode(): the value \p val of op \p op_id (NUL-terminated,
 *        1..STORE_KEY_MAX bytes; only named in errstr).
 * @returns DD_OK; DD_ERR_FATAL (corrupt: errstr says why; *op undefined).
 */
dd_err_t store_codec_op_decode(const void *val, size_t len, const char *op_id,
                               struct store_op *op, char *errstr,
                               size_t errstr_size);

/**
 * @brief attempt_decode(): the value \p val of attempt \p number of \p op_id.
 * @returns DD_OK; DD_ERR_FATAL (corrupt, or its number is not \p number).
 */
dd_err_t store_codec_attempt_decode(const void *val, size_t len,
                                    const char *op_id, uint32_t number,
                                    struct store_attempt *a,
                                    int64_t *expires_at_ms, char *errstr,
                                    size_t errstr_size);

/**
 * @brief outbox_decode(): the value \p val of outbox entry \p seq.
 * @returns DD_OK; DD_ERR_FATAL (corrupt, or an empty op_id).
 */
dd_err_t store_codec_outbox_decode(const void *val, size_t len, uint64_t seq,
                                   struct store_codec_outbox *ent,
                                   char *errstr, size_t errstr_size);

/**
 * @brief validator_decode(): the value \p val of the validator of resource
 *        key \p key (NUL-terminated; only named in errstr).
 * @returns DD_OK; DD_ERR_FATAL (corrupt; *v undefined).
 */
dd_err_t store_codec_validator_decode(const void *val, size_t len,
                                      const char *key,
                                      struct store_validator *v, char *errstr,
                                      size_t errstr_size);

/**
 * @brief body_decode(): the value \p val of body \p digest (NUL-terminated;
 *        only named in errstr).
 * @param body  Out: points into \p val.
 * @returns DD_OK; DD_ERR_FATAL (corrupt: its length field disagrees).
 */
dd_err_t store_codec_body_decode(const void *val, size_t len,
                                 const char *digest, int64_t *expires_at_ms,
                                 const void **body, size_t *body_len,
                                 char *errstr, size_t errstr_size);

#endif
