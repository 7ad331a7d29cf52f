/**
 * @file store.h
 * @brief The op lifecycle store: the only RocksDB user.
 *
 * Column families (DESIGN.md section 4): "ops" (op_id -> op record), "attempts"
 * (op_id + "\n" + attempt number -> attempt record), "outbox" (sequence ->
 * pending event), "conflicts" (op_id + request_hash -> first report), "seen"
 * (generic put-if-absent keys, used by `dedupd tail`), "receipts" (submit API
 * Idempotency-Keys), "validators" (resource key -> ETag, Last-Modified, body
 * digest and what rebuilds a result) and "bodies" (body SHA-256 -> body,
 * content-addressed) for conditional refetch, "meta" (schema version).
 *
 * Every expiring value (ops, attempts, conflicts, seen, receipts, validators,
 * bodies) starts with the same 16-byte header:
 *   byte 0      layout version (STORE_LAYOUT_V1)
 *   byte 1      record type
 *   bytes 2..7  reserved (0)
 *   bytes 8..15 expires_at, int64 ms since the Unix epoch, little-endian
 * so one compaction filter drops expired records by reading 8 bytes at a fixed
 * offset.  Reads treat an expired record as absent, so behaviour never depends on
 * when compaction runs (RocksDB 7.8 runs the filter on compaction only, not on
 * flush).  A record is expired when expires_at < now: it is still live at
 * exactly expires_at (case C-28), for reads and the filter alike.  outbox and
 * meta never expire.
 *
 * Atomicity: store_claim() is put-if-absent under a striped mutex keyed by op_id,
 * so two claims on one op_id never both win, from any number of threads of one
 * process (one RocksDB per instance, opened by one process).  Multi-record changes
 * (result + op state + outbox entry) are one WriteBatch.  An entry whose
 * result's body the same batch writes to "bodies" names that body instead of
 * holding it (store_complete_req.body_lit_off), and the bodies' compaction
 * filter keeps every body a pending entry may name (DESIGN.md section 4).
 *
 * Hot index (DESIGN.md section 4): an exact in-memory table in front of the
 * ops column family, keyed by a 128-bit keyed digest of op_id (SipHash-2-4-128,
 * random key per open) and holding a 64-bit digest of request_hash, the state,
 * the outbox state and expires_at: 32 bytes a slot, 40 to 60 bytes per op_id,
 * bounded by store_conf.index_max_bytes.  store_open rebuilds it from the ops
 * column family in a background thread.  While it is complete (rebuilt, never
 * past its bound) a miss proves absence, so a NEW claim needs no read; a
 * finished op with the same request_hash digest is a duplicate without a read
 * (store_claim_batch, store_index_duplicate).  Otherwise RocksDB answers.
 * Every op write updates it under the op's stripe; RocksDB stays the durable
 * record.
 *
 * State machine (every transition conditional on state and generation):
 *   (absent) -claim-> running -complete-> complete | failed
 *   running with an expired lease, or a lease of a previous run of this instance,
 *   -claim-> running with generation + 1 (RECLAIMED).
 *
 * @locality every function is safe from any thread.
 */
#ifndef DEDUPD_STORE_H
#define DEDUPD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define STORE_LAYOUT_V1 1
#define STORE_KEY_MAX 512          /**< max op_id / key length, bytes */
#define STORE_HASH_LEN 64          /**< hex SHA-256 length */
#define STORE_OWNER_MAX 127        /**< max lease owner length */
#define STORE_SOURCE_MAX 255       /**< max "topic/partition/offset" length */
#define STORE_CATEGORY_MAX 31      /**< max failure category length */

struct store;

/** Store settings (copied by store_open). */
struct store_conf {
    const char *path;          /**< RocksDB directory, created if missing */
    const char *instance;      /**< instance name; lease owners are
                                    "<instance>#<run_id>" */
    const char *run_id;        /**< this process's run id (fresh every start) */
    int64_t ops_ttl_ms;        /**< TTL of complete ops; 0 = 72 h */
    int64_t failed_ttl_ms;     /**< delay after which a failed op may be
                                    claimed again (RECLAIMED at
                                    retry_epoch + 1); its record is kept
                                    for the ops TTL from the failure, or
                                    for this + half the ops TTL when
                                    longer; 0 = 1 h */
    int64_t lease_ms;          /**< lease duration; 0 = 60 s */
    size_t block_cache_bytes;  /**< 0 = 64 MiB */
    size_t max_wal_bytes;      /**< bound of the WAL files together
                                    (RocksDB DBOptions::max_total_wal_size,
                                    options.h): past it RocksDB flushes the
                                    column families holding the oldest WAL
                                    file so it can be deleted; a soft bound
                                    (writes go on while that flush runs);
                                    0 = 128 MiB (RocksDB's own default, four
                                    times write_buffer_size x
                                    max_write_buffer_number summed over the
                                    column families, is 2.5 GiB with these
                                    ten: 10 x 32 MiB x 2 x 4) */
    bool sync;                 /**< fsync the WAL on every write batch */
    bool group_commit;         /**< with sync: store_complete_batch() does
                                    not wait for its fsync; a store thread
                                    fsyncs the WAL as soon as the previous
                                    fsync ended (one fsync covers every
                                    write before it) and store_durable()
                                    says how far it got.  The caller holds
                                    back what must follow durability
                                    (Kafka offsets) until then */
    size_t index_max_bytes;    /**< bound of the hot index; 0 = 64 MiB
                                    (room for about 1.6M op_ids: 32-byte
                                    slots filled to 4/5; an op_id costs 40
                                    to 60 bytes below the bound); past it
                                    the index is a cache only (not
                                    complete) until reopen */
    int64_t validators_ttl_ms; /**< TTL of validators and of the bodies
                                    they name, from their write; 0 = 7 d */
    size_t max_body_bytes;     /**< largest body stored for conditional
                                    refetch (larger ones are refused, see
                                    store_complete_req); 0 = 8 MiB */
};

enum store_op_state {
    STORE_OP_RUNNING = 1,
    STORE_OP_RETRYABLE = 2,
    STORE_OP_COMPLETE = 3,
    STORE_OP_FAILED = 4,
    STORE_OP_FORGOTTEN = 5, /**< dropped by `dedupd forget` (a record, not a
                                 deletion, so the changelog keeps it): a
                                 claim treats it as absent and continues
                                 from its generation + 1 */
};

enum store_outbox_state {
    STORE_OUTBOX_NONE = 0,     /**< no result yet */
    STORE_OUTBOX_PENDING = 1,  /**< result written, not acknowledged by Kafka */
    STORE_OUTBOX_SENT = 2,     /**< broker acknowledged the result */
};

enum store_claim_result {
    STORE_CLAIM_NEW = 1,        /**< absent (or expired): now running, gen 1 */
    STORE_CLAIM_DUPLICATE = 2,  /**< same request_hash; see op.state */
    STORE_CLAIM_CONFLICT = 3,   /**< same op_id, another request_hash */
    STORE_CLAIM_RECLAIMED = 4,  /**< lease void or expired: running (a
                                     retryable op stays retryable: its new
                                     holder waits for not_before_ms, then
                                     store_op_resume), gen + 1; or a failed
                                     op past failed_ttl_ms: running, gen + 1,
                                     retry_epoch + 1, event_key of that
                                     epoch (key_event_key_epoch), attempts
                                     kept, category cleared */
};

/** A decoded op record (plain copy; owns nothing). */
struct store_op {
    enum store_op_state state;
    enum store_outbox_state outbox_state;
    uint64_t generation;
    int64_t lease_expires_at_ms;
    int64_t created_at_ms;
    int64_t updated_at_ms;                     /**< the last change of
                                                    state, lease or result:
                                                    its time, or 1 ms after
                                                    the change before it in
                                                    one generation */
    int64_t expires_at_ms;
    uint32_t attempts;
    uint64_t outbox_seq;                       /**< valid when PENDING */
    char request_hash[STORE_HASH_LEN + 1];
    char event_key[STORE_HASH_LEN + 1];
    char lease_owner[STORE_OWNER_MAX + 1];
    char source[STORE_SOURCE_MAX + 1];         /**< first source */
    char category[STORE_CATEGORY_MAX + 1];     /**< failure category or "":
                                                    final when failed, the
                                                    last attempt's when
                                                    retryable */
    int64_t not_before_ms;  /**< retryable: its next attempt starts no
                                 earlier (ms since epoch); else 0 */
    uint32_t retry_epoch;   /**< DESIGN.md section 2: how many times this
                                 op was claimed again after it failed (0
                                 for a new op); event_key is the key of
                                 this epoch */
};

/**
 * @brief How long an op record can live after its last change, in ms: the
 *        ops TTL, or \p failed_ttl_ms + half the ops TTL when longer (a
 *        failed op may be claimed again at its next retry_epoch for at least
 *        half the ops TTL after \p failed_ttl_ms, DESIGN.md sections 2 and
 *        4; a complete op lives the ops TTL).  The defaults (72 h, 1 h) give
 *        the ops TTL.  The changelog's retention and a submit receipt's
 *        life are counted from it (changelog.h).
 * @param ops_ttl_ms, failed_ttl_ms  The resolved TTLs (> 0; store_conf's 0
 *        defaults already applied).
 * @returns the life, saturating at INT64_MAX.  Pure; any thread.
 */
int64_t store_record_life_ms(int64_t ops_ttl_ms, int64_t failed_ttl_ms);

/**
 * @brief Open (creating if needed) the store at conf->path.
 * @param out  Out: the store; close with store_close().
 * @returns DD_OK; DD_ERR_IO (rocksdb_open failed: errstr names the call, the
 *          path and RocksDB's message); DD_ERR_FATAL (store written by a newer
 *          layout version, or corrupt meta); DD_ERR_INVAL (path, instance or
 *          run_id missing, '#' in instance, owner longer than STORE_OWNER_MAX,
 *          negative TTL); DD_ERR_NOMEM.
 */
dd_err_t store_open(const struct store_conf *conf, struct store **out,
                    char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Close; store_close(NULL) is a no-op.  After a failed write
 *        (store_write_failed) the RocksDB handle is not closed but left to
 *        the process's exit (RocksDB 7.8's close would flush the WAL writer
 *        that saw the error: an assertion, SIGABRT); the next open replays
 *        its WAL.
 */
void store_close(struct store *store);

/**
 * @brief Drop the store at \p path whole (rocksdb_destroy_db: its files,
 *        then the directory when empty), as processing.guarantee
 *        exactly_once does with a copy that may hold uncommitted decisions
 *        (DESIGN.md section 6).  Not open anywhere: RocksDB's LOCK refuses a
 *        store another process holds.  A missing store is DD_OK.
 * @returns DD_OK; DD_ERR_IO (errstr: the path and RocksDB's message).
 */
dd_err_t store_drop(const char *path, char *errstr, size_t errstr_size) DD_WUR;

/** @returns this run's lease owner string "<instance>#<run_id>" (borrowed). */
const char *store_owner(const struct store *store);

/**
 * @brief Claim \p op_id: put-if-absent of a running op leased to this run.
 * @param op_id         NUL-terminated, 1..STORE_KEY_MAX bytes.
 * @param request_hash  64 hex chars, NUL-terminated.
 * @param event_key     64 hex chars, NUL-terminated (kept in the record).
 * @param source        "topic/partition/offset" of the message (kept as the first
 *                      source on NEW), NUL-terminated.
 * @param now_ms        Current time, ms since the epoch.
 * Written without fsync, as store_claim_batch() (see there).
 * @param result        Out: NEW, DUPLICATE, CONFLICT or RECLAIMED.
 * @param op            Out: the record after the claim (for DUPLICATE/CONFLICT,
 *                      the existing one).
 * @returns DD_OK; DD_ERR_INVAL (bad op_id length, request_hash or event_key
 *          longer than STORE_HASH_LEN, empty request_hash); DD_ERR_IO
 *          (retriable); DD_ERR_FATAL (stored record of an unknown layout).
 */
dd_err_t store_claim(struct store *store, const char *op_id,
                     const char *request_hash, const char *event_key,
                     const char *source, int64_t now_ms,
                     enum store_claim_result *result, struct store_op *op,
                     char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Read an op.  An expired record is reported as absent.
 * @param found Out: false when absent or expired (op untouched).
 * @returns DD_OK; DD_ERR_IO; DD_ERR_FATAL (record of an unknown layout).
 */
dd_err_t store_op_get(struct store *store, const char *op_id, int64_t now_ms,
                      struct store_op *op, bool *found, char *errstr,
                      size_t errstr_size) DD_WUR;

/**
 * @brief Extend the lease of a running or retryable op held by this run at
 *        \p generation
 *        (to now + lease; expires_at is raised to the lease end if below it).
 *        Written without fsync: a renewal lost with the machine only lets
 *        another instance take the op over at the older expiry.
 * @returns DD_OK; DD_ERR_STATE (not running nor retryable, other owner or
 *          stale generation); DD_ERR_IO; DD_ERR_FATAL (stored record of an
 *          unknown layout).
 */
dd_err_t store_lease_renew(struct store *store, const char *op_id,
                           uint64_t generation, int64_t now_ms, char *errstr,
                           size_t errstr_size) DD_WUR;

struct store_attempt;

/**
 * @brief running -> retryable (DESIGN.md section 4): the op's attempt failed
 *        and its holder will try again at \p not_before_ms (backoff, or a
 *        Retry-After of RFC 9110 section 10.2.3).  The retry stays with the
 *        holder (in its fetch timers); the record tells `dedupd inspect` why
 *        the op waits and, should the holder die, makes the op's next holder
 *        (a claim that reclaims it gets it still retryable, with
 *        not_before_ms) wait out the same delay instead of hitting the target
 *        again at once.
 *
 * Fencing: running (or retryable: a retry whose resume was not recorded),
 * leased by this run, at \p generation.  The lease is renewed to now + lease
 * (store_lease_renew keeps renewing a retryable op).
 * \p attempt, when not NULL, is written in the same WriteBatch, without
 * fsync (the next synced write persists it; lost with the machine, the op
 * is reclaimed as running, without the wait).
 * @param not_before_ms  Absolute, ms since epoch (>= 0).
 * @param attempts       Attempts made so far, every generation included.
 * @param category       The failed attempt's category, 1..STORE_CATEGORY_MAX.
 * @param attempt        The failed attempt's record, or NULL.
 * @returns DD_OK; DD_ERR_STATE (not running nor retryable, another holder or
 *          a stale generation: errstr says which); DD_ERR_INVAL (empty or long
 *          category, negative not_before, a bad attempt record); DD_ERR_IO;
 *          DD_ERR_FATAL (stored record of an unknown layout).
 */
dd_err_t store_op_retry(struct store *store, const char *op_id,
                        uint64_t generation, int64_t not_before_ms,
                        uint32_t attempts, const char *category,
                        const struct store_attempt *attempt, int64_t now_ms,
                        char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief retryable -> running: the holder starts the next attempt
 *        (not_before_ms is cleared).
 * @returns DD_OK; DD_ERR_STATE (not retryable, another holder, a stale
 *          generation, or \p now_ms before the op's not_before: an attempt
 *          may not start early); DD_ERR_IO; DD_ERR_FATAL.
 */
dd_err_t store_op_resume(struct store *store, const char *op_id,
                         uint64_t generation, int64_t now_ms, char *errstr,
                         size_t errstr_size) DD_WUR;

/**
 * @brief Finish a running op: op state (COMPLETE or FAILED, with \p category),
 *        attempts and a new outbox entry holding \p value, in one WriteBatch.
 *
 * Fencing: fails with DD_ERR_STATE unless the op is running or retryable (a
 * retry wait that ran out of deadline fails from there), leased by this run,
 * at \p generation.  expires_at = now + TTL of the final state.  Writes no
 * validator nor body: store_complete_batch() does (store_complete_req).
 * @param state     STORE_OP_COMPLETE or STORE_OP_FAILED.
 * @param category  Failure category ("" or NULL when complete).
 * @param attempts  Number of fetch attempts made.
 * @param value     Result event bytes to publish (copied into the outbox).
 * @param seq       Out: the outbox sequence number.
 * @returns DD_OK; DD_ERR_STATE (errstr says which condition failed);
 *          DD_ERR_INVAL (state not final, category too long); DD_ERR_IO;
 *          DD_ERR_NOMEM; DD_ERR_FATAL (stored record of an unknown layout).
 */
dd_err_t store_complete(struct store *store, const char *op_id,
                        uint64_t generation, enum store_op_state state,
                        const char *category, uint32_t attempts,
                        const void *value, size_t value_len, int64_t now_ms,
                        uint64_t *seq, char *errstr, size_t errstr_size) DD_WUR;


/* ---- validators and bodies (conditional refetch, DESIGN.md sections 4, 5) --
 *
 * CF "validators": resource key (1..STORE_KEY_MAX bytes; dedupd uses the
 * 64-hex digest of the canonical request without the observation fields) ->
 * the validators of the last stored response of that resource and what
 * rebuilds a result from it.  CF "bodies": hex SHA-256 of a body -> the body,
 * content-addressed (one record per distinct body, shared by every resource
 * that has it).  Both are written only by store_complete_batch(), in the
 * WriteBatch of the op's completion, both with expires_at = completion time +
 * store_conf.validators_ttl_ms (a body shared by several resources takes the
 * expiry of its latest write).  Reads treat an expired record as absent, and
 * a validator whose body is absent or expired as absent; the TTL compaction
 * filter drops both.
 */

#define STORE_ETAG_MAX 1023           /**< max ETag length, bytes */
#define STORE_LAST_MODIFIED_MAX 127   /**< max Last-Modified length */
#define STORE_CONTENT_TYPE_MAX 255    /**< max Content-Type length */
#define STORE_URL_MAX 8191            /**< max final URL length */

/** What store_complete_batch() did with a request's validator fields. */
enum store_validator_write {
    STORE_VALIDATOR_NONE = 0,      /**< nothing: no resource_key, state not
                                        COMPLETE, or the completion itself
                                        was refused, fenced or not written */
    STORE_VALIDATOR_WRITTEN = 1,   /**< validator and body written */
    STORE_VALIDATOR_CLEARED = 2,   /**< neither etag nor last_modified: the
                                        resource's stored validator (if any)
                                        was deleted, being stale now */
    STORE_VALIDATOR_TOO_LARGE = 3, /**< body_len > store_conf.max_body_bytes:
                                        nothing stored, the resource's old
                                        validator deleted */
    STORE_VALIDATOR_REFUSED = 4,   /**< a field out of range (resource_key
                                        length, a string longer than its
                                        STORE_*_MAX or holding a control
                                        character, body_sha256 not 64
                                        lowercase hex, body NULL with
                                        body_len > 0): nothing stored, the
                                        old validator deleted when
                                        resource_key is valid */
};

/** A decoded validator (plain copy; owns nothing).  Strings "" when absent. */
struct store_validator {
    char etag[STORE_ETAG_MAX + 1];                   /**< as received */
    char last_modified[STORE_LAST_MODIFIED_MAX + 1]; /**< as received */
    char body_sha256[STORE_HASH_LEN + 1];   /**< key of the body in "bodies" */
    uint64_t body_len;                      /**< bytes of that body */
    int32_t status;                         /**< HTTP status of the response */
    char content_type[STORE_CONTENT_TYPE_MAX + 1];
    char final_url[STORE_URL_MAX + 1];      /**< after redirects */
    int64_t stored_at_ms;                   /**< completion time, ms epoch */
    int64_t expires_at_ms;                  /**< stored_at + validators TTL */
};

/** One completion of a batch: inputs, then outputs of store_complete_batch. */
struct store_complete_req {
    const char *op_id;                 /**< in */
    uint64_t generation;               /**< in: the lease's generation */
    enum store_op_state state;         /**< in: COMPLETE or FAILED */
    const char *category;              /**< in: failure category or NULL */
    uint32_t attempts;                 /**< in: attempts made in all */
    const void *value;                 /**< in: result event bytes */
    size_t value_len;                  /**< in: bytes */
    const struct store_attempt *attempt_log; /**< in: attempt records */
    size_t n_attempt_log;              /**< in */
    /* Optional, for conditional refetch (all NULL/0: nothing of it is
     * touched, the answers are as before).  Honoured only when resource_key
     * is non-NULL and state is STORE_OP_COMPLETE.  Then, in this
     * completion's WriteBatch: with etag or last_modified set (non-NULL,
     * non-empty) and body_len <= store_conf.max_body_bytes, the validator of
     * resource_key and the body are written; otherwise the resource's
     * stored validator is deleted (a newer answer without usable validators
     * supersedes it).  They never fail the completion: see validator_write.
     * Strings are NUL-terminated, borrowed for the call. */
    const char *resource_key;          /**< in: 1..STORE_KEY_MAX bytes */
    const char *etag;                  /**< in: ETag as received, or NULL */
    const char *last_modified;         /**< in: Last-Modified, or NULL */
    const char *content_type;          /**< in: or NULL */
    const char *final_url;             /**< in: or NULL */
    int32_t http_status;               /**< in: status of the response */
    const void *body;                  /**< in: the body as the result has
                                            it (decoded) */
    size_t body_len;                   /**< in: bytes */
    const char *body_sha256;           /**< in: hex SHA-256 of body (64
                                            lowercase hex, trusted as given),
                                            or NULL: the store computes it,
                                            before taking any lock */
    /* Optional (0, 0: none): value[body_lit_off, body_lit_off +
     * body_lit_len) is jstr_body_literal() of body (jstr.h; trusted as
     * given, as body_sha256).  When the body is written with this batch
     * (validator_write STORE_VALIDATOR_WRITTEN), the outbox entry keeps
     * value without those bytes and names the body, so the page is written
     * once (issue 13); store_outbox_foreach() rebuilds the same bytes, and
     * no body is dropped by TTL compaction while an entry naming it is
     * pending (DESIGN.md section 4, "outbox"). */
    size_t body_lit_off;               /**< in: where the literal starts */
    size_t body_lit_len;               /**< in: its bytes, with quotes */
    enum store_validator_write validator_write; /**< out */
    uint64_t seq;                      /**< out: outbox sequence number */
    uint64_t ticket;                   /**< out: group commit: durable once
                                            store_durable() >= ticket; else 0 */
    unsigned char *changelog;          /**< in: NULL, or STORE_CHANGELOG_VALUE_MAX
                                            bytes (caller's) that get the
                                            op's changelog value as written
                                            (store_changelog_encode: what
                                            store_changelog_value() would read
                                            back), so the result's record
                                            needs no read */
    size_t changelog_len;              /**< out: its length; 0 on failure */
    const struct store_op *held;       /**< in, optional (NULL): the record
                                            as this run's claim wrote it
                                            (store_claim_req.op); while the
                                            hot index still holds it
                                            (store_index_holds), the fence
                                            is decided on it without a read */
    bool acked;                        /**< in: its result is already on
                                            the topic (a shadow op written
                                            once, at its result's
                                            acknowledgement): the record is
                                            written with its outbox state
                                            SENT and no outbox entry (seq 0);
                                            \p value is not stored */
    bool held_unwritten;               /**< in: \p held was never written
                                            (store_claim_req.deferred): an
                                            op absent from RocksDB is that
                                            claim's, not a fenced one */
    struct store_op *written;          /**< out, optional (NULL): when the
                                            completion was written, the
                                            record as written (for
                                            store_outbox_ack_req.held) */
    dd_err_t err;                      /**< out: as store_complete */
    char errstr[DD_ERRSTR_SIZE];       /**< out: why, when err != DD_OK */
};

/**
 * @brief Group commit (DESIGN.md section 4): finish \p n running ops, with
 *        their attempt records, in ONE WriteBatch and one WAL write (one fsync
 *        under store.sync, or, with store_conf.group_commit, none here: see
 *        req.ticket and store_durable()), with the answers store_complete()
 *        would give each.
 *
 * Holds the stripes of all its op_ids (ascending order) for the call.  An op
 * fenced (DD_ERR_STATE) or refused (DD_ERR_INVAL) writes nothing, not even its
 * attempts or its validator; the others still commit.  An op_id repeated in
 * the batch: the first completes, the later ones get DD_ERR_STATE.
 * Validators and bodies (resource_key, see store_complete_req) go in the same
 * WriteBatch; a body shared by several requests of the batch is put once;
 * requests naming the same resource_key apply in array order (the last
 * wins).  The batch holds a copy of every body: n bodies of up to
 * max_body_bytes each.
 * @param reqs    n requests; inputs borrowed for the call, outputs written.
 * @param errstr  Optional: the first failure's text.
 * @returns DD_OK (see each req->err); DD_ERR_IO when the write failed (no
 *          completion took effect; those not refused before get DD_ERR_IO;
 *          retriable); DD_ERR_NOMEM.
 */
dd_err_t store_complete_batch(struct store *store,
                              struct store_complete_req *reqs, size_t n,
                              int64_t now_ms, char *errstr,
                              size_t errstr_size) DD_WUR;

/**
 * @brief The last group-commit ticket whose writes are on disk: a completion
 *        of store_complete_batch() is durable once store_durable() >=
 *        its req.ticket.  Without group commit (store_conf.group_commit off,
 *        or sync off) every write counts as done when it returns:
 *        UINT64_MAX.  Any thread.
 */
uint64_t store_durable(struct store *store);

/**
 * @brief Did a group-commit fsync fail?  Then no completion written after the
 *        last durable ticket will ever be reported durable (a second fsync
 *        after a failed one proves nothing: the kernel may have dropped the
 *        pages), and the caller should stop: what it did not acknowledge is
 *        redelivered to the next run.  Any thread.
 */
bool store_sync_failed(struct store *store);

/**
 * @brief Did a write of the store fail (disk full, I/O error)?  From the
 *        first failed write on, the WAL is never fsync'd again (a second
 *        fsync after a failed write proves nothing, and RocksDB 7.8 asserts
 *        on it), store_sync_failed() is true too, and store_close() leaves
 *        the RocksDB handle to the process's exit (RocksDB's close would
 *        flush the failed WAL writer); the caller should stop: what it did
 *        not acknowledge is redelivered to the next run.  Any thread.
 * @param cause  Optional (may be NULL): the first failed write's error.
 * @returns true after a failed write; false otherwise (also for NULL).
 */
bool store_write_failed(struct store *store, char *cause, size_t cause_size);

/**
 * @brief Make every completion written so far durable now (one fsync on the
 *        calling thread) and publish it to store_durable(): for a clean exit.
 *        No-op without group commit.
 * @returns DD_OK; DD_ERR_IO (the fsync failed, or one had failed before).
 */
dd_err_t store_sync_now(struct store *store, char *errstr,
                        size_t errstr_size) DD_WUR;

/**
 * @brief Read the validator of \p resource_key (CF "validators").
 *
 * Absent (*found false, *out untouched) when there is none, when it is
 * expired at \p now_ms, or when its body (CF "bodies") is absent or expired at
 * \p now_ms.  The body's presence is checked with a pinned read (no copy; its
 * blocks stay in the block cache for a following store_body_get()).  The body
 * can still expire or be compacted away between this call and
 * store_body_get(): a caller must handle a body reported absent then (fetch
 * again without validators).
 * @param resource_key NUL-terminated, 1..STORE_KEY_MAX bytes.
 * @param now_ms       Current time, ms since the epoch.
 * @param out          Out: the validator when found (about 9.7 KB).
 * @param found        Out.
 * @returns DD_OK; DD_ERR_INVAL (bad resource_key length); DD_ERR_IO
 *          (retriable); DD_ERR_FATAL (a record of an unknown layout or
 *          corrupt, or a body whose length differs from the validator's).
 */
dd_err_t store_validator_get(struct store *store, const char *resource_key,
                             int64_t now_ms, struct store_validator *out,
                             bool *found, char *errstr,
                             size_t errstr_size) DD_WUR;

/**
 * @brief Read the body whose hex SHA-256 is \p body_sha256 (CF "bodies").
 * @param body_sha256 64 lowercase hex chars, NUL-terminated (a validator's
 *                    body_sha256).
 * @param body   Out: when found, a malloc()ed copy with one extra NUL byte
 *               after its \p len bytes (free() it); else NULL.
 * @param len    Out: its length in bytes (0 when absent).
 * @param found  Out: false when absent or expired at \p now_ms.
 * @returns DD_OK; DD_ERR_INVAL (body_sha256 not 64 lowercase hex); DD_ERR_IO
 *          (retriable); DD_ERR_NOMEM; DD_ERR_FATAL (unknown layout or corrupt
 *          record).
 */
dd_err_t store_body_get(struct store *store, const char *body_sha256,
                        int64_t now_ms, void **body, size_t *len, bool *found,
                        char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief The broker acknowledged outbox entry \p seq of \p op_id: delete the entry
 *        and mark the op's outbox state SENT, in one WriteBatch.  Idempotent.
 *        Written without fsync (whatever store.sync says): an ack lost in a
 *        crash only means the entry is produced again at start-up under the
 *        same event_key, a duplicate consumers drop.
 * @returns DD_OK; DD_ERR_IO; DD_ERR_INVAL (entry \p seq belongs to another
 *          op); DD_ERR_FATAL (corrupt entry or op record).
 */
dd_err_t store_outbox_ack(struct store *store, uint64_t seq, const char *op_id,
                          char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Callback of store_outbox_foreach.  \p op_id and \p value are borrowed for
 *        the call only.  Return non-zero to stop.
 */
typedef int (store_outbox_cb)(void *opaque, uint64_t seq, const char *op_id,
                              const char *event_key, uint64_t generation,
                              const void *value, size_t value_len);

/** One acknowledgement of store_outbox_ack_batch(). */
struct store_outbox_ack_req {
    uint64_t seq;               /**< in: the outbox entry */
    const char *op_id;          /**< in: its op (borrowed for the call) */
    const struct store_op *held; /**< in, optional (NULL): the op's record
                                      as its completion wrote it
                                      (store_complete_req.held); while the
                                      hot index still holds it, it is not
                                      read again */
    dd_err_t err;               /**< out: as store_outbox_ack() */
};

/**
 * @brief store_outbox_ack() of \p n entries at once (the acknowledgements
 *        a loop of the pipeline collected): their ops are read with one
 *        batched MultiGet (those the caller holds, req.held, not at all),
 *        and every entry whose op still names it (the
 *        usual case: pending under that seq) is deleted and its op marked
 *        sent in ONE WriteBatch (no fsync), under the ops' stripes; the rare
 *        others (op expired, forgotten or completed again since) go through
 *        store_outbox_ack() one by one.
 * @param errstr  Optional: the first failure's text.
 * @returns DD_OK (see each req->err); DD_ERR_IO when the batch write failed
 *          (every request of it gets DD_ERR_IO); DD_ERR_NOMEM.
 * @locality any thread.
 */
dd_err_t store_outbox_ack_batch(struct store *store,
                                struct store_outbox_ack_req *reqs, size_t n,
                                char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Visit every pending outbox entry in sequence order (start-up replay).
 *        An entry that names its body (store_complete_req.body_lit_off) is
 *        handed to \p cb whole: its event rebuilt from the body (read
 *        whatever its expiry), byte for byte the event completed.
 * @returns DD_OK; DD_ERR_IO; DD_ERR_NOMEM; DD_ERR_FATAL (corrupt entry, or
 *          an entry whose body is absent, of another length, or gives a
 *          literal of another length: named in errstr).
 */
dd_err_t store_outbox_foreach(struct store *store, store_outbox_cb *cb,
                              void *opaque, char *errstr,
                              size_t errstr_size) DD_WUR;

/**
 * @brief Rewrite as whole events the outbox entries that name their body
 *        (store_complete_req.body_lit_off) and have been pending for more
 *        than half the validators TTL at \p now_ms (a result the broker keeps
 *        refusing), so that they stop holding back the TTL compaction of
 *        every body written since (DESIGN.md section 4).  Cheap when there
 *        is none (one atomic read); else up to 64 entries within about 20
 *        ms (the first one however long it takes: each call makes
 *        progress), then one WAL fsync before their pins go.  An entry
 *        whose body is gone is logged (LOG_ERR; the replay will stop on it)
 *        and unpinned; the others go on.
 * @param rewritten  Out: entries rewritten.
 * @returns DD_OK; DD_ERR_IO (a read or write failed, or the WAL cannot be
 *          synced: an earlier fsync failed, store_sync_failed(); the pins
 *          stay; errstr); DD_ERR_NOMEM.
 * @locality any thread (the pipeline calls it once a second).
 */
dd_err_t store_outbox_unpin_old(struct store *store, int64_t now_ms,
                                size_t *rewritten, char *errstr,
                                size_t errstr_size) DD_WUR;

/** @returns the number of pending outbox entries (approximate is fine). */
uint64_t store_outbox_pending(struct store *store);

/**
 * @brief Record that the conflict (\p op_id, \p request_hash) was reported.
 * @param first Out: true the first time this pair is seen (report it then).
 * @returns DD_OK; DD_ERR_INVAL (bad op_id or request_hash length); DD_ERR_IO;
 *          DD_ERR_FATAL (stored record of an unknown layout).
 */
dd_err_t store_conflict_mark(struct store *store, const char *op_id,
                             const char *request_hash, int64_t now_ms,
                             bool *first, char *errstr,
                             size_t errstr_size) DD_WUR;

/**
 * @brief Read-only: was the conflict (\p op_id, \p request_hash) marked as
 *        reported (store_conflict_mark) and not expired?  The pipeline reports
 *        a conflict when this is false and marks it after the broker
 *        acknowledged the record, so a crash in between re-reports it (at least
 *        once) rather than losing it.
 * @returns DD_OK; DD_ERR_INVAL; DD_ERR_IO; DD_ERR_FATAL (unknown layout).
 */
dd_err_t store_conflict_reported(struct store *store, const char *op_id,
                                 const char *request_hash, int64_t now_ms,
                                 bool *reported, char *errstr,
                                 size_t errstr_size) DD_WUR;

/**
 * @brief Read-only: is \p key present and unexpired in CF "seen"?  `dedupd
 *        tail` prints a result when this is false and marks the key with
 *        store_mark_seen() after the line is flushed, so a crash in between
 *        prints it again (at least once) rather than losing it.
 * @returns DD_OK; DD_ERR_INVAL (bad key length); DD_ERR_IO; DD_ERR_FATAL.
 */
dd_err_t store_seen_contains(struct store *store, const void *key,
                             size_t key_len, int64_t now_ms, bool *present,
                             char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Generic put-if-absent of \p key with a TTL (CF "seen").
 * @param key      Bytes, 1..STORE_KEY_MAX (borrowed).
 * @param ttl_ms   Time to live from now_ms.
 * @param seen     Out: true if the key was already present and unexpired.
 * @returns DD_OK; DD_ERR_INVAL (bad key_len, negative ttl_ms); DD_ERR_IO;
 *          DD_ERR_FATAL (stored record of an unknown layout).
 */
dd_err_t store_mark_seen(struct store *store, const void *key, size_t key_len,
                         int64_t ttl_ms, int64_t now_ms, bool *seen,
                         char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Drop an op so that its next job is fetched again (`dedupd forget`).
 * @param found Out: whether a live record existed (live at the filter clock of
 *              store_set_filter_clock() when set, else at the wall clock).
 * @returns DD_OK; DD_ERR_INVAL (bad op_id length); DD_ERR_IO; DD_ERR_FATAL.
 */
dd_err_t store_forget(struct store *store, const char *op_id, bool *found,
                      char *errstr, size_t errstr_size) DD_WUR;

/* ---- attempts (CF "attempts": op_id + "\n" + 4-byte big-endian number) --- */

#define STORE_ERROR_MAX 255
#define STORE_SESSION_MAX 127

/** One fetch attempt of an op (plain copy; owns nothing).  Never credentials. */
struct store_attempt {
    uint32_t number;                          /**< 1-based */
    uint64_t generation;                      /**< op generation it ran under */
    int64_t started_at_ms, ended_at_ms;
    int32_t status;                           /**< HTTP status, 0 if none */
    uint64_t bytes;                           /**< body bytes received */
    char session[STORE_SESSION_MAX + 1];      /**< session name */
    char exit_addr[STORE_SESSION_MAX + 1];    /**< exit (proxy host:port,
                                                   "direct") */
    char category[STORE_CATEGORY_MAX + 1];    /**< "" when it succeeded */
    char error[STORE_ERROR_MAX + 1];          /**< error text or "" */
};

/**
 * @brief Record attempts of \p op_id in one WriteBatch (TTL of ops, from
 *        \p now_ms).  Written when the op finishes, just before store_complete;
 *        an existing record with the same number is overwritten.  n == 0
 *        writes nothing.
 * @returns DD_OK; DD_ERR_INVAL (op_id not 1..STORE_KEY_MAX bytes, an attempt
 *          number 0, a string not NUL-terminated within its array: nothing
 *          written); DD_ERR_IO (retriable).
 */
dd_err_t store_attempts_put(struct store *store, const char *op_id,
                            const struct store_attempt *attempts, size_t n,
                            int64_t now_ms, char *errstr,
                            size_t errstr_size) DD_WUR;

/**
 * @brief Read every unexpired attempt of \p op_id in number order.
 * @param out  Out: array to free() (NULL when *n == 0, and on failure).
 * @returns DD_OK; DD_ERR_INVAL (op_id not 1..STORE_KEY_MAX bytes); DD_ERR_IO;
 *          DD_ERR_NOMEM; DD_ERR_FATAL (unknown layout or corrupt record).
 */
dd_err_t store_attempts_get(struct store *store, const char *op_id,
                            int64_t now_ms, struct store_attempt **out,
                            size_t *n, char *errstr, size_t errstr_size) DD_WUR;

/* ---- batched claims and the hot index ----------------------------------- */

/** One claim of a batch: inputs, then outputs filled by store_claim_batch. */
struct store_claim_req {
    const char *op_id;          /**< in */
    const char *request_hash;   /**< in */
    const char *event_key;      /**< in */
    const char *source;         /**< in */
    bool defer_new;             /**< in: a NEW op (absent before, not a
                                     forgotten one) is not written here: the
                                     caller completes it later (shadow mode:
                                     at its result's acknowledgement) with
                                     store_complete_batch (req.held, with
                                     held_unwritten), whose write carries the
                                     whole op.  Until then only the hot index
                                     knows it; a crash in between re-consumes
                                     its job (the offset was not committed)
                                     and claims it again.  The caller claims that
                                     op_id again only after the completion
                                     (the store would answer NEW: there is
                                     no record yet) */
    bool deferred;              /**< out: this request's NEW op was not
                                     written (defer_new) */
    enum store_claim_result result; /**< out */
    struct store_op op;         /**< out: as store_claim, except for a
                                     DUPLICATE the hot index decided, marked
                                     by op.generation == 0: then only state,
                                     outbox_state, expires_at_ms and
                                     request_hash are set, the rest is zero
                                     (store_op_get reads the whole record) */
    dd_err_t err;               /**< out: per-request error: DD_OK;
                                     DD_ERR_INVAL (as store_claim);
                                     DD_ERR_IO (retriable); DD_ERR_NOMEM;
                                     DD_ERR_FATAL (unknown layout) */
};

/**
 * @brief Claim \p n ops at once, with the same answers as calling store_claim()
 *        on each in array order (a repeated op_id in the batch: the first wins,
 *        later ones see it running under this run's lease).  Keys the hot index
 *        cannot decide are read with one batched MultiGet (sorted); every new
 *        or reclaimed op is written in one WriteBatch, to the WAL without
 *        fsync whatever store.sync says: the next synced write (the
 *        completions' group commit) persists it, and a claim lost in a crash
 *        only means the redelivered job (its offset was not committed) is
 *        claimed and fetched again, as a fetch in flight at the crash is.
 *        Holds the stripes of all its op_ids for the call, so it is atomic
 *        against store_claim and other batches from any thread.
 * @param reqs    n requests; inputs borrowed for the call, outputs written.
 * @param errstr  Optional: the first failure's text (a request's, or the
 *                batch's), written even when DD_OK is returned.
 * @returns DD_OK (see each req->err); DD_ERR_IO when the batch write failed
 *          (then no claim of the batch took effect and every req->err is
 *          DD_ERR_IO; retriable); DD_ERR_NOMEM; DD_ERR_INVAL (n > 2^30).
 */
dd_err_t store_claim_batch(struct store *store, struct store_claim_req *reqs,
                           size_t n, int64_t now_ms, char *errstr,
                           size_t errstr_size) DD_WUR;

/**
 * @brief Fast path (DESIGN.md section 2): does the in-memory hot index prove
 *        that \p op_id is a complete, unexpired op whose request_hash is
 *        \p request_hash?  Never reads RocksDB, takes no stripe (one index
 *        segment's read lock).  A failed op is never proven here (whether
 *        it may be claimed again after failed_ttl_ms is in RocksDB); nor
 *        does store_claim_batch answer one from the index.
 * @param op_id        Bytes, not NUL-terminated (e.g. a Kafka key).
 * @param op_id_len    Its length; 0 or more than STORE_KEY_MAX: false.
 * @param request_hash NUL-terminated (equality is of 64-bit digests).
 * @param state Out (may be NULL): the op's state when true (complete).
 * @returns true only when proven; false means "take the full path" (also
 *          for a running, failed, conflicting, expired, unknown or not yet
 *          indexed op).
 * @locality any thread.
 */
bool store_index_duplicate(struct store *store, const char *op_id,
                           size_t op_id_len, const char *request_hash,
                           int64_t now_ms, enum store_op_state *state);

/** An op_id's hot-index key, computed once for a poll batch by
 *  store_index_prepare (a keyed SipHash digest; opaque to callers). */
struct store_fast_key {
    uint64_t k0, k1; /**< k1 == 0: no key (the op_id's length was 0 or
                          above STORE_KEY_MAX): never proven */
};

/**
 * @brief Prepare the fast-path look-ups of a poll batch (issue 13): each
 *        op_id's hot-index key, and its home slot brought toward the cache
 *        with one segment read lock per segment touched, so that the
 *        store_index_duplicate_key calls that follow find it there instead
 *        of each waiting for memory (on a 1M-op index most look-ups miss
 *        every cache).  Changes nothing; the index may change between this
 *        call and the look-ups (they read it again under its lock).
 * @param op_ids  n op_ids, bytes, not NUL-terminated (Kafka keys),
 *                borrowed; lens[i] each.  A NULL op_id, a length of 0 or
 *                above STORE_KEY_MAX gives a key never proven.
 * @param keys    Out: n keys.
 * @locality any thread.
 */
void store_index_prepare(struct store *store, const void *const *op_ids,
                         const size_t *lens, size_t n,
                         struct store_fast_key *keys);

/**
 * @brief store_index_duplicate for a key of store_index_prepare: the same
 *        answer, without computing the op_id's digest again.
 * @param request_hash  \p hash_len bytes, not NUL-terminated.
 * @param now_ms  The wall clock (dd_now_ms) as the caller read it (a poll
 *                batch reads it once, so it may be that batch's age old).
 *                The compaction filter's clock (store_set_filter_clock, else
 *                the wall clock) is read here: an entry live at \p now_ms
 *                that the filter may have dropped since is not proven.
 * @returns as store_index_duplicate.
 * @locality any thread.
 */
bool store_index_duplicate_key(struct store *store,
                               const struct store_fast_key *k,
                               const char *request_hash, size_t hash_len,
                               int64_t now_ms, enum store_op_state *state);

/** Hot index counters. */
struct store_index_stats {
    uint64_t entries;        /**< op_ids indexed (forgotten and expired ones
                                  included until purged) */
    uint64_t capacity;       /**< slots */
    uint64_t bytes;          /**< memory of the index */
    uint64_t rehashes;       /**< segment rehashes: growths, shrinks and,
                                  at the bound, purges (after a purge that
                                  freed under capacity / 16 slots, the next
                                  one only after capacity / 16 + 1 more
                                  refused inserts) */
    bool complete;           /**< holds every live op_id (rebuild done, under
                                  its bound): absence is proven.  Once the
                                  bound was reached (or an ops write
                                  failed) false until reopen */
    bool off;                /**< off after an ops write failed: every
                                  verdict is left to RocksDB until reopen */
    bool rebuilding;         /**< its rebuild from the store is running */
    uint64_t hits, misses;   /**< per op_id looked up by store_claim,
                                  store_claim_batch (once per distinct
                                  op_id) and store_index_duplicate:
                                  decided by the index / left to RocksDB
                                  (one read each for the claims, the full
                                  path for the fast path) */
};

/** @brief Copy the hot index counters (any thread). */
void store_index_stats_get(struct store *store, struct store_index_stats *st);

/**
 * @brief Wait until the hot index's rebuild from the ops column family
 *        (started by store_open) is over, or can no longer make the index
 *        complete (it reached store_conf.index_max_bytes), at most
 *        \p timeout_ms.  Until it
 *        is, a duplicate whose op the rebuild has not reached yet takes the
 *        full path (DESIGN.md section 2, the fast path), about ten times the
 *        cost: a replay storm right after a restart would run at that cost.
 * @returns true when the rebuild is over (store_index_stats.complete then
 *          says whether a miss proves absence: not when the index hit its
 *          bound), false at the timeout (still rebuilding).
 * @locality any thread; sleeps in steps of 10 ms.
 */
bool store_index_wait(struct store *store, int64_t timeout_ms);

/* ---- receipts of the submit API (CF "receipts") ---------------------------
 *
 * A receipt is pending while its submit can be in flight (pending_ms from
 * store_receipt_begin, the job API's wait for its acknowledgement plus a
 * margin) and lives, pending or done, as long as the op it answers for
 * (ttl_ms: the job API passes the ops TTL plus the longest time to an op's
 * last state).  Past its window a pending receipt is unsettled: the process
 * that wrote it ended before the acknowledgement (one store, one process),
 * so its job may or may not have been produced; the same payload takes it
 * over (a new submit, produced again with the same op_id, which the pipeline
 * deduplicates), another payload is a conflict with what may be a live op.
 */

enum store_receipt_state {
    STORE_RECEIPT_NEW = 0,      /**< absent: now recorded as pending */
    STORE_RECEIPT_PENDING = 1,  /**< a submit with this key is in flight */
    STORE_RECEIPT_DONE = 2,     /**< acknowledged: the receipt is stored */
    STORE_RECEIPT_UNSETTLED = 3, /**< store_receipt_begin's answer only (never
                                      stored): a pending receipt past its
                                      window, for another payload */
};

/**
 * @brief Begin a submit under Idempotency-Key \p key (IETF httpapi
 *        idempotency-key draft): put-if-absent of a pending record holding
 *        \p request_hash, in flight until \p now_ms + \p pending_ms and
 *        kept until \p now_ms + \p ttl_ms.  A pending record past its
 *        window with the same \p request_hash is replaced (NEW).
 * @param pending_ms The in-flight window (> 0): how long a submit may wait
 *                  for its acknowledgement, with a margin.
 * @param ttl_ms    How long the record lives (>= pending_ms): the op's life.
 * @param state     Out: NEW (go on and produce), PENDING (another submit with
 *                  this key is in flight: 409, or 422 when existing_hash
 *                  differs), DONE (replay *receipt, or 422 when existing_hash
 *                  differs) or UNSETTLED (a pending record past its window,
 *                  existing_hash differs: 422).
 * @param existing_hash Out: the stored request_hash when not NEW.
 * @param receipt   Out: the stored receipt JSON when DONE (free()), else NULL.
 * @returns DD_OK; DD_ERR_INVAL; DD_ERR_IO; DD_ERR_FATAL (corrupt record).
 * @locality any thread.
 */
dd_err_t store_receipt_begin(struct store *store, const char *key,
                             const char *request_hash, int64_t now_ms,
                             int64_t pending_ms, int64_t ttl_ms,
                             enum store_receipt_state *state,
                             char existing_hash[STORE_HASH_LEN + 1],
                             char **receipt, char *errstr,
                             size_t errstr_size) DD_WUR;

/**
 * @brief Store the receipt of an acknowledged submit (state DONE, expiring
 *        at \p now_ms + \p ttl_ms: the op's life, as for
 *        store_receipt_begin).  \p receipt is JSON, at most 4096 bytes.
 * @returns DD_OK; DD_ERR_INVAL; DD_ERR_NOMEM; DD_ERR_IO.
 * @locality any thread.
 */
dd_err_t store_receipt_done(struct store *store, const char *key,
                            const char *request_hash, const char *receipt,
                            int64_t now_ms, int64_t ttl_ms, char *errstr,
                            size_t errstr_size) DD_WUR;

/**
 * @brief Drop a pending receipt whose submit failed, so the client may retry.
 * @returns DD_OK; DD_ERR_IO.
 * @locality any thread.
 */
dd_err_t store_receipt_abort(struct store *store, const char *key, char *errstr,
                             size_t errstr_size) DD_WUR;

/* ---- the changelog's side of the store (DESIGN.md sections 4 and 6) -------
 *
 * The durable record of every decision is the compacted changelog topic
 * `<consumer.group_id>-changelog` (changelog.h); the store is this
 * instance's copy of the partitions it owns.  A changelog record of an op is
 * keyed by op_id and its value is the op's record in the ops column
 * family's layout (store_codec.h, "ops"), as read back from the store after
 * the change it records, with the outbox state normalized (a record is
 * produced only after the result it names was acknowledged: PENDING is
 * written as SENT, and no outbox sequence travels).  A conflict mark is keyed
 * "conflict/<op_id>/<request_hash>" with the conflicts column family's value.
 * Each partition's checkpoint (meta "checkpoint/<partition>") is the
 * changelog offset the copy reflects and the wall time it was taken.
 */

/** Room for any changelog value of an op (STORE_CODEC_OP_VALUE_MAX). */
#define STORE_CHANGELOG_VALUE_MAX 1024

/**
 * @brief The changelog value of \p op (a record as store_claim and friends
 *        return it) into \p buf (STORE_CHANGELOG_VALUE_MAX bytes).
 * @returns its length (> 0).  @locality any thread (pure).
 */
size_t store_changelog_encode(const struct store_op *op, unsigned char *buf);

/**
 * @brief The changelog value of \p op_id's current record (see above).
 * @param buf  STORE_CHANGELOG_VALUE_MAX bytes; *len gets the value's length.
 * @param op   Out (optional): the record as stored.
 * @returns DD_OK; DD_ERR_STATE (absent or expired: nothing to record);
 *          DD_ERR_INVAL (op_id length); DD_ERR_IO; DD_ERR_FATAL (corrupt).
 * @locality any thread (takes the op's stripe).
 */
dd_err_t store_changelog_value(struct store *store, const char *op_id,
                               unsigned char *buf, size_t *len,
                               struct store_op *op, char *errstr,
                               size_t errstr_size) DD_WUR;

/**
 * @brief Release an unfinished op at a revoke (DESIGN.md section 6): when it
 *        is running or retryable at \p generation, its lease owner becomes
 *        empty and its lease expiry 0 (its not_before is kept), so the next
 *        owner takes it at once; \p buf gets the release's changelog value.
 * @returns DD_OK; DD_ERR_STATE (finished, absent, or another generation:
 *          nothing to release); DD_ERR_INVAL; DD_ERR_IO; DD_ERR_FATAL.
 * @locality pipeline thread (any thread is safe: the op's stripe).
 */
dd_err_t store_op_release(struct store *store, const char *op_id,
                          uint64_t generation, int64_t now_ms,
                          unsigned char *buf, size_t *len, char *errstr,
                          size_t errstr_size) DD_WUR;

/**
 * @brief Forget \p op_id (DESIGN.md section 6, `dedupd forget`): its record
 *        becomes FORGOTTEN at generation + 1 (lease and outbox cleared,
 *        expiring after the ops TTL from \p now_ms), so the next job of the
 *        op is fetched again; \p buf gets its changelog value.
 * @param found  Out: false when the op was absent or expired (nothing
 *               written).
 * @returns DD_OK; DD_ERR_INVAL; DD_ERR_IO; DD_ERR_FATAL.
 * @locality any thread (the op's stripe).
 */
dd_err_t store_op_forget(struct store *store, const char *op_id,
                         int64_t now_ms, unsigned char *buf, size_t *len,
                         bool *found, char *errstr, size_t errstr_size) DD_WUR;

/** One changelog record to restore (borrowed bytes). */
struct store_restore_rec {
    const void *key;
    size_t key_len;
    const void *value;      /**< NULL: a tombstone (ignored) */
    size_t value_len;
};

/** What store_restore_apply() did with the records it was given. */
struct store_restore_counts {
    uint64_t applied;   /**< ops written (the record won) */
    uint64_t kept;      /**< ops whose local record outranks the record
                             (store_restore_apply) */
    uint64_t expired;   /**< records already expired (absent on both sides) */
    uint64_t conflicts; /**< conflict marks written */
    uint64_t skipped;   /**< tombstones, and keys that are neither an op nor
                             a conflict mark (the identity record) */
};

/**
 * @brief Apply restored changelog records (DESIGN.md section 6, Restore):
 *        a record replaces the local one unless the local generation is
 *        higher, or equal with a later updated_at (one generation is one
 *        holder's, on one clock, and each change of its state, lease or
 *        result is stamped at least 1 ms after the one it replaces), or
 *        equal in both with the local record finished (complete, failed
 *        or forgotten) and the record not; an expired record counts as
 *        absent.  A restored running or retryable op of another owner
 *        keeps its owner with a lease of store_conf.lease_ms from \p now_ms
 *        on this instance's clock; one whose owner is empty (a release) or
 *        this run's is free at once.
 *        The hot index follows every write.  One WriteBatch, no fsync.
 * @param c  Counts, added to (not cleared).
 * @returns DD_OK; DD_ERR_FATAL (a record that does not decode: errstr names
 *          its key); DD_ERR_IO.
 * @locality the pipeline thread (the restore runs in the rebalance).
 */
dd_err_t store_restore_apply(struct store *store,
                             const struct store_restore_rec *recs, size_t n,
                             int64_t now_ms, struct store_restore_counts *c,
                             char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Read partition \p partition's checkpoint: the changelog offset the
 *        local copy reflects (the next one to restore) and the wall time (ms
 *        since the epoch) it was taken.  *found false: none (restore from the
 *        log start).
 * @returns DD_OK; DD_ERR_IO; DD_ERR_FATAL (corrupt value).
 */
dd_err_t store_checkpoint_get(struct store *store, int32_t partition,
                              int64_t *offset, int64_t *taken_at_ms,
                              bool *found, char *errstr,
                              size_t errstr_size) DD_WUR;

/**
 * @brief Write partition \p partition's checkpoint (see
 *        store_checkpoint_get()); \p offset < 0 deletes it.  Written after
 *        the records it covers (WAL order), so a crash never leaves a
 *        checkpoint ahead of its records.
 * @returns DD_OK; DD_ERR_IO.
 */
dd_err_t store_checkpoint_put(struct store *store, int32_t partition,
                              int64_t offset, int64_t taken_at_ms,
                              char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Read the identity record (changelog.h: changelog_identity_value)
 *        this copy was last checked against for changelog \p topic (meta
 *        "identity/<topic>").  A restart whose restore reads nothing (its
 *        checkpoints at the log's end) checks its settings against it.
 * @param value  Out: malloc'd bytes (the caller frees), NULL when absent.
 * @returns DD_OK (*found says whether there is one); DD_ERR_IO.
 */
dd_err_t store_identity_get(struct store *store, const char *topic,
                            char **value, size_t *len, bool *found,
                            char *errstr, size_t errstr_size) DD_WUR;

/**
 * @brief Write the identity record checked for \p topic (see
 *        store_identity_get()).
 * @returns DD_OK; DD_ERR_IO.
 */
dd_err_t store_identity_put(struct store *store, const char *topic,
                            const void *value, size_t len, char *errstr,
                            size_t errstr_size) DD_WUR;

/** @brief Compact every column family over its whole range, which runs the TTL
 *        compaction filter (tests, maintenance).
 */
void store_compact(struct store *store);

/**
 * @brief Set the clock the compaction filter compares expires_at to (tests);
 *        0 restores the wall clock.
 */
void store_set_filter_clock(struct store *store, int64_t now_ms);

/** @returns a static text for a claim result ("new", "duplicate", ...). */
const char *store_claim_result2str(enum store_claim_result r);

/** @returns a static text for an op state ("running", "complete", ...). */
const char *store_op_state2str(enum store_op_state s);

#endif
