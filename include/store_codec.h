/**
 * @file store_codec.h
 * @brief INTERNAL to the store (src/store*.c), its unit tests and fuzzers:
 *        the byte layout of every record the store writes, with its encoder
 *        and decoder.  Not an API: the layouts are the store's layout
 *        version STORE_LAYOUT_V1 and change with it.
 *
 * Pure: no RocksDB, no clock, no allocation, no lock; every function is safe
 * from any thread (@locality any thread, for all of them).  Decoders bound
 * every read by the value's length and refuse anything unexpected with
 * DD_ERR_FATAL and a text naming the column family and the key (its first
 * 64 bytes; the text is one line of UTF-8, jstr_text_clean()); encoders
 * write a whole record or nothing of use (they return 0 when the buffer is
 * too small or a string is not NUL-terminated within its array).
 *
 * On-disk layout V1.  Integers are little-endian (except outbox and attempt
 * keys, big-endian so that iteration order is number order), strings are a
 * u16 length and that many bytes.  Every value of an expiring column family
 * starts with the 16-byte header (STORE_CODEC_HDR_LEN):
 *   [0] layout version (STORE_LAYOUT_V1), [1] record type
 *   (enum store_codec_kind), [2..3] zero (reserved, not read), [4..7]
 *   zero (reserved, not read) but in an ops record: its retry_epoch, u32
 *   LE (below), [8..15] expires_at, i64 ms since the epoch
 * so one compaction filter drops expired records by reading 8 bytes at a
 * fixed offset.
 *
 * retry_epoch (DESIGN.md section 2, added without a layout bump) lives in
 * header bytes 4..7 of an ops record rather than in a trailing field or a
 * layout V2, because those bytes are compatible both ways: every dedupd
 * before it wrote them as zero (so an older record decodes as epoch 0)
 * and none read them (so an older dedupd reads a newer record, its epoch
 * aside).  That matters for the changelog, whose values are op records:
 * in a rolling deploy an older pod restores records written by newer
 * ones, and a trailing field would make it call them corrupt and fail
 * the restore (a layout bump refuses them likewise, and needs a
 * migration of every stored op).  The cost: an older dedupd that rewrites
 * such a record writes epoch 0 back (its results use the epoch-0
 * event_key anyway).  No size changes (STORE_CODEC_OP_VALUE_MAX, the
 * changelog's bound).
 *
 *   ops        key op_id
 *              value header(OP; bytes 4..7: u32 retry_epoch) u8 state
 *                    (1..5; 5, forgotten, added without a layout bump: a
 *                    dedupd from before it calls such a record corrupt),
 *                    u8 outbox_state, u64 generation,
 *                    i64 lease_expires_at, i64 created_at, i64 updated_at,
 *                    u32 attempts, u64 outbox_seq, then the strings
 *                    request_hash, event_key, lease_owner, source, category,
 *                    then, in state retryable only, i64 not_before (the
 *                    next attempt's earliest start; added without a layout
 *                    bump: no earlier dedupd wrote state retryable.  One way:
 *                    a dedupd from before it calls such a record corrupt, so
 *                    going back needs no retryable op in the store)
 *   attempts   key op_id "\n" u32 number, big-endian (iteration order = number
 *              order; the key length tells op "a" from op "a\n...")
 *              value header(ATTEMPT, expires_at = written + ops TTL)
 *                    u32 number, u64 generation, i64 started_at, i64 ended_at,
 *                    i32 status, u64 bytes, then the strings session,
 *                    exit_addr, category, error
 *   outbox     key u64 seq, big-endian (iteration order = sequence order)
 *              value header(OUTBOX, expires_at 0) str op_id, str event_key,
 *                    u64 generation, u32 value_len, value bytes
 *              or, the event without its body's literal (issue 13: the page
 *              written once, in "bodies"; added without a layout bump: a
 *              dedupd from before it calls such an entry corrupt, so going
 *              back needs an empty outbox)
 *              header(OUTBOX_REF, expires_at 0) str op_id, str event_key,
 *                    u64 generation, i64 written_at, str body_sha256 (64
 *                    hex), u64 body_len, u32 literal_len, u32 prefix_len,
 *                    prefix bytes, u32 suffix_len, suffix bytes; the event
 *                    is prefix + jstr_body_literal(body) + suffix
 *   conflicts  key op_id "\n" request_hash
 *              value header(CONFLICT) i64 first_seen_at
 *   seen       key caller bytes
 *              value header(SEEN) i64 created_at
 *   receipts   key Idempotency-Key
 *              value header(RECEIPT, expires_at = the end of the op's
 *                    life) u8 state (1 pending, 2 done), str request_hash,
 *                    str receipt (empty when pending), then when pending
 *                    i64 pending_until (the end of the in-flight window;
 *                    absent in a record of an older dedupd: 0)
 *   validators key resource key (caller bytes, 1..STORE_KEY_MAX)
 *              value header(VALIDATOR, expires_at = stored_at +
 *                    validators TTL) i64 stored_at, i32 status,
 *                    u64 body_len, then the strings body_sha256 (64 hex),
 *                    etag, last_modified, content_type, final_url
 *   bodies     key hex SHA-256 of the body (64 bytes)
 *              value header(BODY, expires_at as its latest validator)
 *                    u64 body_len, then the body_len bytes of the body
 *   meta       "layout_version"       u32 LE (kept trivially simple so that every
 *                                     past and future dedupd can read it)
 *              "outbox_seq_reserved"  u64 LE: sequence numbers below it may have
 *                                     been handed out; a restart starts above it
 *              "checkpoint/<p>"       i64 offset, i64 taken_at (ms), LE: the
 *                                     changelog offset partition p's copy
 *                                     reflects (store_changelog.c)
 *
 * The attempts, receipts, validators and bodies column families were added
 * without a layout bump: their records use the V1 header, store_open creates
 * them in an existing store, and an older dedupd opens them as column
 * families of a newer layout (no TTL filter there, untouched otherwise).
 *
 * Expiry: a record is expired when expires_at < now (C-28: written at t with
 * TTL d it is still live at t + d): store_record_expired(), the one test of
 * reads, the hot index and the compaction filter.
 */
#ifndef DEDUPD_STORE_CODEC_H
#define DEDUPD_STORE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "store.h"

#define STORE_CODEC_HDR_LEN 16

/** Record kinds: byte 1 of the header. */
enum store_codec_kind {
    STORE_CODEC_OP = 1,
    STORE_CODEC_OUTBOX = 2,
    STORE_CODEC_CONFLICT = 3,
    STORE_CODEC_SEEN = 4,
    STORE_CODEC_ATTEMPT = 5,
    STORE_CODEC_RECEIPT = 6,
    STORE_CODEC_VALIDATOR = 7,
    STORE_CODEC_BODY = 8,
    STORE_CODEC_OUTBOX_REF = 9, /**< an outbox entry naming its body */
};

/** The largest op value: header, fixed fields, 5 strings, not_before. */
#define STORE_CODEC_OP_VALUE_MAX                                              \
    (STORE_CODEC_HDR_LEN + 1 + 1 + 8 + 8 + 8 + 8 + 4 + 8 + 5 * 2              \
     + STORE_HASH_LEN * 2 + STORE_OWNER_MAX + STORE_SOURCE_MAX                \
     + STORE_CATEGORY_MAX + 8)

/** The largest attempt value: header, fixed fields, 4 strings. */
#define STORE_CODEC_ATTEMPT_VALUE_MAX                                         \
    (STORE_CODEC_HDR_LEN + 4 + 8 + 8 + 8 + 4 + 8 + 4 * 2                      \
     + 2 * STORE_SESSION_MAX + STORE_CATEGORY_MAX + STORE_ERROR_MAX)

/** The largest attempt key: op_id, "\n", u32 number. */
#define STORE_CODEC_ATTEMPT_KEY_MAX (STORE_KEY_MAX + 1 + 4)

/** The largest conflict key: op_id, "\n", request_hash. */
#define STORE_CODEC_CONFLICT_KEY_MAX (STORE_KEY_MAX + 1 + STORE_HASH_LEN)

/** An outbox key: u64 seq, big-endian. */
#define STORE_CODEC_OUTBOX_KEY_LEN 8

/** The largest validator value: header, fixed fields, 5 strings. */
#define STORE_CODEC_VALIDATOR_VALUE_MAX                                       \
    (STORE_CODEC_HDR_LEN + 8 + 4 + 8 + 5 * 2 + STORE_HASH_LEN                 \
     + STORE_ETAG_MAX + STORE_LAST_MODIFIED_MAX + STORE_CONTENT_TYPE_MAX      \
     + STORE_URL_MAX)

/** The part of a body value before the body's bytes. */
#define STORE_CODEC_BODY_HEAD_LEN (STORE_CODEC_HDR_LEN + 8)

/** A conflict or seen mark: header, i64 time. */
#define STORE_CODEC_MARK_LEN (STORE_CODEC_HDR_LEN + 8)

/** The largest receipt text, bytes. */
#define STORE_CODEC_RECEIPT_MAX 4096

/** A meta "layout_version" value: u32 LE. */
#define STORE_CODEC_LAYOUT_LEN 4

/** A meta "checkpoint/<partition>" value: i64 offset, i64 taken_at, LE. */
#define STORE_CODEC_CHECKPOINT_LEN 16

/**
 * @brief The one expiry rule (C-28): live up to and including expires_at.
 * @locality any thread; pure.
 */
static inline bool store_record_expired(int64_t expires_at_ms, int64_t now_ms)
{
    return expires_at_ms < now_ms;
}

/** @brief Write \p v little-endian into p[0..7]. */
static inline void store_codec_le64_put(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/** @brief Read p[0..7] little-endian. */
static inline uint64_t store_codec_le64_get(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/** @brief Write \p v big-endian into p[0..7]. */
static inline void store_codec_be64_put(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (56 - 8 * i));
}

/** @brief Read p[0..7] big-endian. */
static inline uint64_t store_codec_be64_get(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/** @returns whether \p h is 64 lowercase hex chars and a NUL (a body key). */
bool store_codec_hex64_ok(const char *h);

/* ---- header ------------------------------------------------------------ */

/**
 * @brief Write the header of a record of \p kind expiring at \p expires_at_ms
 *        (0: never) into \p out.
 * @returns STORE_CODEC_HDR_LEN.
 */
size_t store_codec_header(enum store_codec_kind kind, int64_t expires_at_ms,
                          unsigned char out[STORE_CODEC_HDR_LEN]);

/**
 * @brief Check the header of \p val, a record of \p kind stored at \p key
 *        (\p key_len bytes, not NUL-terminated; only named in errstr), and
 *        read its expiry.  The rest of the value is not read.
 * @returns DD_OK; DD_ERR_FATAL (shorter than a header, or another layout
 *          version or record type: errstr names the column family, the key
 *          and what was found).
 */
dd_err_t store_codec_header_decode(const void *val, size_t len,
                                   enum store_codec_kind kind, const char *key,
                                   size_t key_len, int64_t *expires_at_ms,
                                   char *errstr, size_t errstr_size) DD_WUR;

/* ---- ops ----------------------------------------------------------------- */

/**
 * @brief The value of \p op (its expires_at_ms and retry_epoch go into the
 *        header; not_before_ms is written in state retryable only).
 * @param cap  >= STORE_CODEC_OP_VALUE_MAX.
 * @returns the value's length; 0 (nothing written) when \p cap is too small
 *          or a string of \p op is not NUL-terminated within its array.
 */
size_t store_codec_op_encode(const struct store_op *op, unsigned char *buf,
                             size_t cap);

/**
 * @brief Decode the value \p val of op \p op_id (NUL-terminated; only named
 *        in errstr).
 * @returns DD_OK; DD_ERR_FATAL (corrupt: errstr says why; *op undefined).
 */
dd_err_t store_codec_op_decode(const void *val, size_t len, const char *op_id,
                               struct store_op *op, char *errstr,
                               size_t errstr_size) DD_WUR;

/* ---- attempts ------------------------------------------------------------ */

/**
 * @brief The key of attempt \p number of \p op_id (\p op_id_len bytes,
 *        1..STORE_KEY_MAX) into \p key.
 * @returns its length, op_id_len + 5.
 */
size_t store_codec_attempt_key(const char *op_id, size_t op_id_len,
                               uint32_t number,
                               char key[STORE_CODEC_ATTEMPT_KEY_MAX]);

/**
 * @brief The attempt number of \p key, an attempts key of an op_id of
 *        \p op_id_len bytes.
 * @returns false when the key has another length (an attempt of an op whose
 *          op_id starts with this one's and a "\n").
 */
bool store_codec_attempt_key_number(const char *key, size_t key_len,
                                    size_t op_id_len, uint32_t *number);

/**
 * @brief The value of attempt \p a, expiring at \p expires_at_ms.
 * @param cap  >= STORE_CODEC_ATTEMPT_VALUE_MAX.
 * @returns its length; 0 (nothing written) when \p cap is too small or a
 *          string of \p a is not NUL-terminated within its array.
 */
size_t store_codec_attempt_encode(const struct store_attempt *a,
                                  int64_t expires_at_ms, unsigned char *buf,
                                  size_t cap);

/**
 * @brief Decode the value \p val of attempt \p number of \p op_id
 *        (NUL-terminated; only named in errstr).
 * @returns DD_OK; DD_ERR_FATAL (corrupt, or its number is not \p number).
 */
dd_err_t store_codec_attempt_decode(const void *val, size_t len,
                                    const char *op_id, uint32_t number,
                                    struct store_attempt *a,
                                    int64_t *expires_at_ms, char *errstr,
                                    size_t errstr_size) DD_WUR;

/* ---- outbox -------------------------------------------------------------- */

/** An outbox entry.  Decoded, its pointers borrow the decoded value. */
struct store_codec_outbox {
    const char *op_id;      /**< 1..STORE_KEY_MAX bytes, not NUL-terminated */
    size_t op_id_len;
    const char *event_key;  /**< 0..STORE_HASH_LEN bytes */
    size_t event_key_len;
    uint64_t generation;
    const void *value;      /**< the result event; with body_sha256, the
                                 part before the body's literal */
    size_t value_len;       /**< <= UINT32_MAX */
    /* With body_sha256 (record OUTBOX_REF), the event is value +
     * jstr_body_literal(the body) + suffix; body_sha256 NULL: value is the
     * whole event and the fields below are 0. */
    const char *body_sha256; /**< STORE_HASH_LEN hex, not NUL-terminated */
    uint64_t body_len;       /**< the body's bytes */
    uint32_t literal_len;    /**< the literal's bytes (checked on rebuild) */
    int64_t written_at_ms;   /**< the completion's body clock
                                  (store_body_clock): the body it names
                                  expires no earlier than this + the
                                  validators TTL */
    const void *suffix;      /**< after the literal */
    size_t suffix_len;       /**< <= UINT32_MAX */
};

/** @brief Outbox key of \p seq (big-endian) into \p key. */
void store_codec_outbox_key(uint64_t seq,
                            unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN]);

/** @returns the length of the value of an outbox entry of these sizes
 *  (a whole event: no body reference). */
size_t store_codec_outbox_size(size_t op_id_len, size_t event_key_len,
                               size_t value_len);

/** @returns the length of the value of outbox entry \p ent (either form). */
size_t store_codec_outbox_len(const struct store_codec_outbox *ent);

/**
 * @brief The value of outbox entry \p ent (expires_at 0: it never expires).
 * @param cap  >= store_codec_outbox_size() of its sizes.
 * @returns its length; 0 when \p cap is too small or a length does not fit
 *          its field (strings 65535 bytes, the value UINT32_MAX).
 */
size_t store_codec_outbox_encode(const struct store_codec_outbox *ent,
                                 unsigned char *buf, size_t cap);

/**
 * @brief store_codec_outbox_encode without the value's bytes: the head
 *        that precedes them (header, op_id, event_key, generation,
 *        value_len), so that a caller writes head and value as two slices
 *        of one record (rocksdb_writebatch_putv_cf) without copying the
 *        value first.  Head then value equal store_codec_outbox_encode.
 * @param cap  >= store_codec_outbox_size(op_id_len, event_key_len, 0).
 * @returns the head's length; 0 as store_codec_outbox_encode.
 */
size_t store_codec_outbox_encode_head(const struct store_codec_outbox *ent,
                                      unsigned char *buf, size_t cap);

/**
 * @brief With a body reference, the 4 bytes between value (the prefix) and
 *        the suffix: u32 suffix_len.  A caller writes head, value, these and
 *        suffix as four slices; together they equal
 *        store_codec_outbox_encode.
 * @returns 4; 0 when \p ent has no body reference or suffix_len does not
 *          fit.
 */
size_t store_codec_outbox_encode_mid(const struct store_codec_outbox *ent,
                                     unsigned char buf[4]);

/**
 * @brief Decode the value \p val of outbox entry \p seq.
 * @returns DD_OK; DD_ERR_FATAL (corrupt, or an empty op_id).
 */
dd_err_t store_codec_outbox_decode(const void *val, size_t len, uint64_t seq,
                                   struct store_codec_outbox *ent,
                                   char *errstr, size_t errstr_size) DD_WUR;

/* ---- conflicts and seen marks -------------------------------------------- */

/**
 * @brief The key of conflict (\p op_id, \p request_hash) into \p key.
 * @returns its length, op_id_len + 1 + hash_len.
 */
size_t store_codec_conflict_key(const char *op_id, size_t op_id_len,
                                const char *request_hash, size_t hash_len,
                                char key[STORE_CODEC_CONFLICT_KEY_MAX]);

/**
 * @brief A conflict or seen mark (\p kind STORE_CODEC_CONFLICT or
 *        STORE_CODEC_SEEN) made at \p now_ms, expiring at \p expires_at_ms.
 * @returns STORE_CODEC_MARK_LEN.
 */
size_t store_codec_mark_encode(enum store_codec_kind kind,
                               int64_t expires_at_ms, int64_t now_ms,
                               unsigned char out[STORE_CODEC_MARK_LEN]);

/* ---- receipts ------------------------------------------------------------ */

/** A decoded receipt; receipt borrows the decoded value. */
struct store_codec_receipt {
    enum store_receipt_state state;       /**< PENDING or DONE */
    char request_hash[STORE_HASH_LEN + 1];
    const char *receipt;                  /**< not NUL-terminated */
    size_t receipt_len;                   /**< 0..STORE_CODEC_RECEIPT_MAX */
    int64_t pending_until_ms;             /**< PENDING: the end of its
                                               in-flight window (0 when the
                                               record has none); DONE: 0 */
};

/** @returns the length of a receipt value of these sizes. */
size_t store_codec_receipt_size(size_t hash_len, size_t receipt_len);

/**
 * @brief A receipt value in \p state (PENDING or DONE).
 * @param cap  >= store_codec_receipt_size().
 * @returns its length; 0 when \p cap is too small or a string does not fit
 *          a u16 length.
 */
size_t store_codec_receipt_encode(int64_t expires_at_ms,
                                  enum store_receipt_state state,
                                  const char *request_hash, size_t hash_len,
                                  const char *receipt, size_t receipt_len,
                                  unsigned char *buf, size_t cap);

/**
 * @brief A pending receipt value: no receipt text, then \p pending_until_ms
 *        (the end of its submit's in-flight window).
 * @param cap  >= store_codec_receipt_size(hash_len, 0) + 8.
 * @returns its length; 0 when \p cap is too small.
 */
size_t store_codec_receipt_pending_encode(int64_t expires_at_ms,
                                          int64_t pending_until_ms,
                                          const char *request_hash,
                                          size_t hash_len, unsigned char *buf,
                                          size_t cap);

/**
 * @brief Decode the receipt \p val stored at Idempotency-Key \p key
 *        (NUL-terminated; only named in errstr).  Trailing bytes (past a
 *        pending record's pending_until) are not
 *        checked (as dedupd always read them).
 * @returns DD_OK; DD_ERR_FATAL (bad header, as store_codec_header_decode;
 *          or "receipts: corrupt record at <key>").
 */
dd_err_t store_codec_receipt_decode(const void *val, size_t len,
                                    const char *key,
                                    struct store_codec_receipt *r,
                                    char *errstr, size_t errstr_size) DD_WUR;

/* ---- validators and bodies ----------------------------------------------- */

/** What a validator value is made of (strings NULL: written as ""). */
struct store_codec_validator {
    int64_t stored_at_ms;
    int32_t status;
    uint64_t body_len;
    const char *body_sha256;    /**< 64 lowercase hex, the body's key */
    const char *etag;           /**< <= STORE_ETAG_MAX bytes, or NULL */
    const char *last_modified;  /**< <= STORE_LAST_MODIFIED_MAX, or NULL */
    const char *content_type;   /**< <= STORE_CONTENT_TYPE_MAX, or NULL */
    const char *final_url;      /**< <= STORE_URL_MAX, or NULL */
};

/**
 * @brief The value of validator \p v, expiring at \p expires_at_ms.
 * @param cap  >= STORE_CODEC_VALIDATOR_VALUE_MAX.
 * @returns its length; 0 when \p cap is too small, body_sha256 is not 64
 *          lowercase hex or a string is longer than its STORE_*_MAX.
 */
size_t store_codec_validator_encode(const struct store_codec_validator *v,
                                    int64_t expires_at_ms, unsigned char *buf,
                                    size_t cap);

/**
 * @brief Decode the value \p val of the validator of resource key \p key
 *        (NUL-terminated; only named in errstr).
 * @returns DD_OK; DD_ERR_FATAL (corrupt; *v undefined).
 */
dd_err_t store_codec_validator_decode(const void *val, size_t len,
                                      const char *key,
                                      struct store_validator *v, char *errstr,
                                      size_t errstr_size) DD_WUR;

/**
 * @brief The head of a body value (header and u64 body_len): the body's
 *        \p body_len bytes follow it.
 * @returns STORE_CODEC_BODY_HEAD_LEN.
 */
size_t store_codec_body_head(int64_t expires_at_ms, uint64_t body_len,
                             unsigned char out[STORE_CODEC_BODY_HEAD_LEN]);

/**
 * @brief Decode the value \p val of body \p digest (NUL-terminated; only
 *        named in errstr).
 * @param body  Out: points into \p val.
 * @returns DD_OK; DD_ERR_FATAL (corrupt: its length field disagrees).
 */
dd_err_t store_codec_body_decode(const void *val, size_t len,
                                 const char *digest, int64_t *expires_at_ms,
                                 const void **body, size_t *body_len,
                                 char *errstr, size_t errstr_size) DD_WUR;

/* ---- meta ---------------------------------------------------------------- */

/** @brief The meta "layout_version" value of \p version into \p out. */
void store_codec_layout_encode(uint32_t version,
                               unsigned char out[STORE_CODEC_LAYOUT_LEN]);

/**
 * @brief Read a meta "layout_version" value.
 * @returns false when it is not STORE_CODEC_LAYOUT_LEN bytes long.
 */
bool store_codec_layout_decode(const void *val, size_t len,
                               uint32_t *version);

/** @brief A checkpoint value (\p offset, \p taken_at_ms) into \p out. */
void store_codec_checkpoint_encode(int64_t offset, int64_t taken_at_ms,
                                   unsigned char out[STORE_CODEC_CHECKPOINT_LEN]);

/**
 * @brief Read a checkpoint value.
 * @returns false when it is not STORE_CODEC_CHECKPOINT_LEN bytes long.
 */
bool store_codec_checkpoint_decode(const void *val, size_t len,
                                   int64_t *offset, int64_t *taken_at_ms);

#endif
