/*
 * store_internal.h: INTERNAL to the store's files (src/store*.c), not an
 * API: what they share.
 *
 *   store.c        the op state machine: claims, batched claims, fenced
 *                  transitions, completions, attempts, forget
 *   store_outbox.c the outbox's acknowledgements, replay and old entries
 *   store_db.c     RocksDB options, column families, layout check, the
 *                  compaction filter, the group-commit thread, open and
 *                  close, the index rebuild
 *   store_cond.c   validators and bodies (conditional refetch)
 *   store_pins.c   the outbox entries that name their body, and the floor
 *                  below which the bodies' TTL filter may drop a body
 *   store_marks.c  conflicts, seen marks, receipts
 *   store_changelog.c  the changelog's side: changelog values, releases,
 *                  restore, checkpoints
 *   store_index.c  the hot index and SipHash (include/store_index.h; no
 *                  RocksDB)
 *   store_codec.c  every record's layout (include/store_codec.h; no RocksDB)
 *
 * Only these files use RocksDB.  Locking: one mutex of STORE_STRIPES per key
 * (an op's stripe is chosen by its index key, other keys' by FNV-1a); every
 * change of one op (its record, outbox entry, attempts, validator and the
 * index entry) happens under its stripe; batches take their stripes in
 * ascending order.
 */
#ifndef DEDUPD_STORE_INTERNAL_H
#define DEDUPD_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <rocksdb/c.h>

#include "dd.h"
#include "store.h"
#include "store_codec.h"
#include "store_index.h"

#define STORE_STRIPES 256
#define STORE_SEQ_BLOCK 1024 /* outbox seqs reserved in meta per write */

enum store_cf {
    CF_DEFAULT,
    CF_OPS,        /* hash-skiplist memtable: iterate only by store_ops_iter */
    CF_OUTBOX,
    CF_CONFLICTS,
    CF_SEEN,
    CF_META,
    CF_ATTEMPTS,
    CF_RECEIPTS,
    CF_VALIDATORS,
    CF_BODIES,
    CF_N
};

/* Column family names, by enum store_cf (store_db.c). */
extern const char *const store_cf_names[CF_N];

/* Meta keys (store_codec.h has their values' layout). */
#define STORE_META_LAYOUT_KEY "layout_version"
#define STORE_META_SEQ_KEY "outbox_seq_reserved"

/* The outbox entries that name their body, and the floor of their
 * completion times (store_pins.c). */
struct store_pin {
    uint64_t seq;    /* the outbox entry */
    int64_t bucket;  /* second of its completion; INT64_MIN: removed */
};
struct store_pin_bucket {
    int64_t bucket;  /* a second (ms / 1000) */
    uint64_t count;  /* pins of it */
};
struct store_pins {
    pthread_mutex_t mu;
    struct store_pin *pins;          /* [head, n) sorted by seq */
    size_t head, n, cap;
    size_t live;                     /* pins in [head, n) not removed */
    struct store_pin_bucket *buckets; /* [bhead, bn) sorted by bucket */
    size_t bhead, bn, bcap;
    size_t blive;                    /* buckets in [bhead, bn) counting */
    bool ready;                      /* the open's scan is done */
    /* the bodies' TTL filter drops no body with expires_at >= this: the
     * first pinned second, INT64_MAX with none, INT64_MIN until ready */
    _Atomic int64_t floor_ms;
};

/* The state of a TTL compaction filter (store_db.c): the store, and
 * whether it filters CF bodies (then the pins' floor applies too). */
struct store_filter {
    struct store *store;
    bool bodies;
};

struct store {
    rocksdb_t *db;
    rocksdb_options_t *opts;     /* DB options (and unknown CFs') */
    rocksdb_options_t *ttl_opts; /* expiring CFs (is_ttl_cf): + TTL filter */
    rocksdb_options_t *ttl_nobloom_opts; /* CF attempts: + TTL filter, no
                                            memtable bloom */
    rocksdb_options_t *ops_opts; /* CFs ops, validators: + TTL filter, a
                                    hash-skiplist memtable (set_options) */
    rocksdb_block_based_table_options_t *bbto;
    rocksdb_cache_t *cache;
    rocksdb_compactionfilter_t *filter;
    rocksdb_options_t *body_opts; /* CF bodies: + the pins' TTL filter,
                                     a hash-skiplist memtable */
    rocksdb_options_t *nobloom_opts; /* CFs outbox, default, meta: no
                                       memtable bloom */
    rocksdb_compactionfilter_t *body_filter;
    struct store_filter filter_state, body_filter_state;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_writeoptions_t *wopts_nosync; /* never synced: claims, outbox
                                            acks (see store.h) */
    /* group commit (store_conf.group_commit): store_complete_batch writes
     * without fsync and takes a ticket; the syncer thread fsyncs the WAL
     * (rocksdb_flush_wal, sync) whenever tickets are pending, so one fsync
     * covers every write before it, and publishes the last ticket covered */
    bool group_commit;
    pthread_t sync_thread;
    bool sync_thread_started;
    pthread_mutex_t sync_mu;
    pthread_cond_t sync_cv;
    bool sync_mu_init;
    bool sync_stop;                      /* under sync_mu */
    _Atomic uint64_t ticket_issued;      /* last ticket handed out */
    _Atomic uint64_t ticket_durable;     /* last ticket fsync'd */
    _Atomic bool sync_failed;            /* an fsync failed: no ticket after
                                            it will ever be durable */
    /* a write failed (store_write_fail): the WAL is never fsync'd again
     * (sync_failed is set too) and rocksdb_close is skipped (RocksDB 7.8
     * flushes the failed WAL writer there: an assertion, SIGABRT) */
    _Atomic bool write_failed;
    _Atomic bool write_cause_taken;      /* write_cause is being set */
    char write_cause[DD_ERRSTR_SIZE];    /* the first failed write's error,
                                            readable once write_failed */
    struct store *left_next;             /* left open (store_close) */
    rocksdb_column_family_handle_t *cf[CF_N];
    rocksdb_column_family_handle_t **extra_cf; /* CFs of a newer layout */
    size_t extra_cf_n;

    pthread_mutex_t stripes[STORE_STRIPES];
    int stripes_init;
    pthread_mutex_t seq_mu;
    bool seq_mu_init;

    _Atomic int64_t filter_clock_ms;     /* 0 = wall clock */
    _Atomic uint64_t next_seq;           /* next outbox seq to hand out */
    _Atomic uint64_t seq_reserved;       /* persisted bound (exclusive) */
    _Atomic uint64_t pending;            /* outbox entries */
    struct store_pins pins;              /* entries naming their body */
    _Atomic int64_t body_clock_ms;       /* store_body_clock */
    /* a cleared WriteBatch kept for the next batch (store_wb_take): its
     * buffer keeps its capacity, so a completion batch of pages does not
     * grow it by copies again */
    _Atomic(rocksdb_writebatch_t *) wb_spare;
    /* the batch calls' arrays (dd_scratch_take: a concurrent call gets its
     * own), reused from batch to batch */
    struct dd_scratch scratch;

    /* hot index, and its rebuild thread (store_db.c) */
    struct store_index *idx;
    _Atomic bool idx_stop;               /* store_close: stop the rebuild */
    pthread_t idx_thread;
    bool idx_thread_started;

    char *path;
    char owner[STORE_OWNER_MAX + 1];        /* "<instance>#<run_id>" */
    char owner_prefix[STORE_OWNER_MAX + 1]; /* "<instance>#" */
    int64_t ops_ttl_ms;
    int64_t failed_ttl_ms;
    int64_t lease_ms;
    int64_t validators_ttl_ms;
    size_t max_body_bytes;
};

/* The store's clock: the filter clock when set (tests), else wall time.
 * @locality any thread (also the compaction filter's). */
static inline int64_t store_clock_ms(struct store *s)
{
    int64_t c = atomic_load(&s->filter_clock_ms);
    return c ? c : dd_now_ms();
}

/* a + b, saturating at INT64_MAX (a TTL never wraps an expiry).
 * @locality any thread. */
static inline int64_t store_add_ms(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    return a + b;
}

/* Stamp a change of the live record \p op within its generation (its
 * state, lease or result; under its stripe): its updated_at becomes
 * \p now_ms, or 1 ms after the record it replaces when \p now_ms is not
 * later (two changes in one millisecond, or a clock that went back).  A
 * restore decides between two records of one generation by updated_at
 * (store_restore_apply), so a later change must never carry the time of the
 * one before it: a retryable record stamped in its claim's millisecond lost
 * to the claim record, and its Retry-After wait with it.  A change that
 * starts a generation takes \p now_ms as it is (one generation is one
 * holder's, on its own clock).
 * @locality any thread (under the op's stripe). */
static inline void store_op_stamp(struct store_op *op, int64_t now_ms)
{
    op->updated_at_ms = now_ms > op->updated_at_ms
                            ? now_ms
                            : store_add_ms(op->updated_at_ms, 1);
}

/* The stripe of the op whose index key is \p k.  @locality any thread. */
static inline pthread_mutex_t *store_key_stripe(struct store *s,
                                                const struct store_index_key *k)
{
    return &s->stripes[k->k0 % STORE_STRIPES];
}

/* The stripe of \p op_id; \p k gets its index key.  @locality any thread. */
static inline pthread_mutex_t *store_op_stripe(struct store *s,
                                               const char *op_id,
                                               struct store_index_key *k)
{
    store_index_digest(s->idx, op_id, strlen(op_id), k);
    return store_key_stripe(s, k);
}

/* Lock the stripes whose bits are set in \p mask, in ascending order (no
 * deadlock with anyone).  @locality any thread. */
static inline void store_stripes_lock(struct store *s,
                                      const uint64_t mask[STORE_STRIPES / 64])
{
    for (uint32_t st = 0; st < STORE_STRIPES; st++)
        if (mask[st / 64] >> (st % 64) & 1)
            pthread_mutex_lock(&s->stripes[st]);
}

static inline void store_stripes_unlock(struct store *s,
                                        const uint64_t mask[STORE_STRIPES / 64])
{
    for (uint32_t st = 0; st < STORE_STRIPES; st++)
        if (mask[st / 64] >> (st % 64) & 1)
            pthread_mutex_unlock(&s->stripes[st]);
}

/* Add the stripe of index key \p k to \p mask. */
static inline void store_stripes_add(uint64_t mask[STORE_STRIPES / 64],
                                     const struct store_index_key *k)
{
    uint32_t st = (uint32_t)(k->k0 % STORE_STRIPES);
    mask[st / 64] |= UINT64_C(1) << (st % 64);
}

/* An iterator over the ops column family in total order (store_db.c): the
 * ops' memtable is a hash of skiplists, whose prefix-mode iterator skips
 * what it holds.  \p ro is the caller's; total_order_seek is set on it. */
rocksdb_iterator_t *store_ops_iter(struct store *s, rocksdb_readoptions_t *ro);

/* Convert a RocksDB error at the boundary: "call(what): message" in errstr,
 * then rocksdb_free(rerr).  @returns DD_ERR_IO.  @locality any thread.
 * (store_db.c) */
dd_err_t store_rdb_fail(char *rerr, const char *call, const char *what,
                        char *errstr, size_t errstr_size);

/* A write (put, delete, WriteBatch) failed: as store_rdb_fail, and the
 * store remembers it (store_write_failed): the first cause is kept, the WAL
 * is never fsync'd again.  @returns DD_ERR_IO.  @locality any thread.
 * (store_db.c) */
dd_err_t store_write_fail(struct store *s, char *rerr, const char *call,
                          const char *what, char *errstr, size_t errstr_size);

/* DD_ERR_INVAL unless op_id is 1..STORE_KEY_MAX bytes ("fn: op_id of N
 * bytes (must be 1..512)").  @locality any thread.  (store.c) */
dd_err_t store_op_id_check(const char *fn, const char *op_id, char *errstr,
                           size_t errstr_size);

/* Read op_id's record.  *found is false when absent, or when expired at
 * \p now_ms unless \p include_expired.  Caller holds the op's stripe when it
 * will write.  @locality any thread.  (store.c) */
dd_err_t store_op_read(struct store *s, const char *op_id, int64_t now_ms,
                       bool include_expired, struct store_op *op, bool *found,
                       char *errstr, size_t errstr_size);

/* Put op_id's record (no fsync); the caller updates the hot index.  Caller
 * holds the op's stripe.  @locality any thread.  (store.c) */
dd_err_t store_op_write(struct store *s, const char *op_id,
                        const struct store_op *op, char *errstr,
                        size_t errstr_size);

/* A write of ops failed: the hot index is off until reopen.  @locality any
 * thread.  (store.c) */
void store_index_write_failed(struct store *s);

/* The event of outbox entry \p seq, which names its body (ent->body_sha256
 * set): prefix + the body's literal + suffix, malloc'd into *out (the caller
 * frees it).  The body is read whatever its expiry (the pins kept it).
 * @returns DD_OK; DD_ERR_FATAL when the body is absent or does not give the
 * literal the entry recorded (named in errstr); DD_ERR_IO; DD_ERR_NOMEM.
 * @locality any thread.  (store_cond.c) */
struct store_codec_outbox;
dd_err_t store_cond_outbox_rebuild(struct store *s,
                                   const struct store_codec_outbox *ent,
                                   uint64_t seq, char **out, size_t *out_len,
                                   char *errstr, size_t errstr_size);

/* A WriteBatch, empty: the spare one when there is one (its buffer keeps
 * the capacity of its last use), else a new one.  store_wb_give() takes it
 * back.  @locality any thread.  (store_db.c) */
rocksdb_writebatch_t *store_wb_take(struct store *s);

/* Hand \p wb back (NULL: nothing): cleared and kept as the spare, unless
 * one is kept already or it held more than STORE_WB_KEEP_BYTES (then
 * destroyed).  @locality any thread.  (store_db.c) */
void store_wb_give(struct store *s, rocksdb_writebatch_t *wb);

/* Sync the WAL now, for \p why (named in the log line of a failure).
 * Never after a failed fsync (store_sync_failed): false then; a failure
 * here is final too (logged at LOG_CRIT).  With group commit, what it
 * covered is published durable.  @returns whether the WAL is on disk.
 * @locality any thread.  (store_db.c) */
bool store_wal_sync(struct store *s, const char *why);

/* store_pins.c.  @locality any thread (the filter reads floor_ms only). */
void store_pins_init(struct store_pins *p);
void store_pins_destroy(struct store_pins *p);
/* Pin outbox entry \p seq, completed at \p written_at_ms (before the write
 * that puts it).  @returns false when out of memory (or \p seq is pinned
 * already, which a fresh seq never is): the caller then keeps
 * the whole event in the entry. */
bool store_pins_add(struct store_pins *p, uint64_t seq,
                    int64_t written_at_ms);
/* Unpin \p seq (after the write that deleted its entry); no-op when it is
 * not pinned. */
void store_pins_remove(struct store_pins *p, uint64_t seq);
/* The completion time \p seq is pinned at (to the second), or INT64_MIN
 * when it is not pinned. */
int64_t store_pins_time(struct store_pins *p, uint64_t seq);
/* Up to \p max seqs pinned at a second before \p before_ms, into \p out
 * (in seq order).  @returns how many. */
size_t store_pins_older(struct store_pins *p, int64_t before_ms,
                        uint64_t *out, size_t max);
/* The open's scan pinned every pending entry: the floor applies. */
void store_pins_ready(struct store_pins *p);
/* Live pins (tests and the open's log line). */
size_t store_pins_count(struct store_pins *p);

/* Group commit: a ticket for the write just made (durable once
 * store_durable() reaches it), waking the syncer; 0 without group commit.
 * (store_db.c) */
uint64_t store_sync_ticket(struct store *s);

/* What a completion does with its validator fields, decided before any lock
 * is taken; for STORE_VALIDATOR_WRITTEN, \p digest gets the body's key.
 * (store_cond.c) */
enum store_validator_write store_cond_prep(struct store *s,
                                           const struct store_complete_req *r,
                                           char digest[STORE_HASH_LEN + 1]);

/* Under the op's stripe, after its completion was staged: its validator
 * (put or delete) and, when \p put_body, its body, into \p wb.
 * (store_cond.c) */
void store_cond_stage(struct store *s, rocksdb_writebatch_t *wb,
                      const struct store_complete_req *r, const char *digest,
                      bool put_body, int64_t now_ms, int64_t body_now_ms);

/* The time a body written now is written at: \p now_ms, or the latest such
 * time handed out before when later (the wall clock stepped back), so a
 * body put again by a later completion never expires before one put by an
 * earlier one (the pins' argument, store_pins.c).  @locality any thread. */
int64_t store_body_clock(struct store *s, int64_t now_ms);

#endif
