/*
 * INTERNAL to the consumer module (consumer.c, consumer_out.c,
 * consumer_rebalance.c, consumer_stop.c): the
 * pipeline's state, shared by the pipeline proper (poll, claim, hand-off,
 * completion, run) and its outgoing side (results, dead letters, conflict
 * reports and outbox replays kept until acknowledged; delivery reports; the
 * producer's reset).  Not a contract for other modules: include consumer.h.
 * Everything here runs on the pipeline thread unless marked otherwise.
 */
#ifndef DEDUPD_CONSUMER_INTERNAL_H
#define DEDUPD_CONSUMER_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "changelog.h"
#include "dd.h"
#include "consumer.h"
#include "err.h"
#include "job.h"
#include "partitions.h"
#include "prefetch_kick.h"
#include "retry.h"
#include "store.h"

/* One consumed message whose work is not done yet. */
struct pmsg {
    struct partitions_msg m; /* its completion handle (partitions.h) */
    struct pmsg *next;    /* waiters of one op */
};

/* An op this run claimed, from the claim until its result is acknowledged
 * and its completion durable (or it is fenced off). */
struct opctx {
    struct opctx *hnext;
    char *op_id;
    struct job *job;
    uint64_t generation;
    struct pmsg *msgs;    /* the claiming message and its in-flight
                             duplicates */
    uint64_t seq;
    uint32_t base_attempts; /* attempts of earlier generations (from the
                               store) */
    int64_t not_before_ms;  /* reclaimed retryable op: its stored retry time */
    bool stored;          /* result committed to the store (lease no longer
                             needed) */
    uint64_t ticket;      /* group commit: durable once store_durable()
                             reaches it */
    struct opctx *await_next; /* acknowledged, waiting for durability */
    bool failed;          /* result outcome failed */
    bool shadow;          /* result outcome shadow */
    int64_t deadline_ms;  /* of its fetch (absolute) */
    /* single-flight (DESIGN.md section 5): a leader's transfer serves the
     * followers waiting on the same resource_key */
    struct opctx *sf_hnext;     /* leader map chain */
    struct opctx *sf_followers; /* leader: its waiters */
    struct opctx *sf_next;      /* follower: next waiter of its leader */
    bool sf_leading;            /* in the leader map */
    bool sf_waiting;            /* follower, waiting */
    struct store_validator *cond; /* validators sent with its request
                                     (conditional refetch), or NULL */
    char ims[RETRY_HTTP_DATE_SIZE]; /* its If-Modified-Since: the stored
                                     Last-Modified as IMF-fixdate, "" when
                                     that is not an HTTP-date (not sent) */
    bool no_cond;               /* refetch without validators (a 304 not
                                   trusted, or its stored body gone) */
    bool sf_alone;              /* its leader failed transiently: it fetches
                                   on its own (never chained behind another
                                   waiter, so every wait stays bounded) */
    int32_t partition;          /* of the claiming message: its changelog
                                   records go to this partition */
    bool released;              /* given up at a revoke (release record
                                   written): out of the op map, freed when
                                   its fetch returns, whose result is
                                   dropped */
    bool fetching;              /* handed to the fetch engine, its result
                                   not taken back yet */
    unsigned char *clog;        /* its changelog value as its completion
                                   wrote it (store_complete_req.changelog),
                                   produced on the result's acknowledgement
                                   without a read; NULL before */
    size_t clog_len;
    struct store_op rec;        /* its record as this run last wrote it:
                                   the claim's, then the completion's */
    bool rec_held;              /* rec is the completion's: its outbox
                                   acknowledgement reads nothing */
    bool rec_unwritten;         /* rec is a claim not written yet
                                   (store_claim_req.deferred: shadow): it is
                                   written once, when its result is
                                   acknowledged (consumer_out_acks_flush) */
    bool rec_renewed;           /* a lease renewal rewrote the record since
                                   rec (pipeline thread) */
    atomic_bool rec_retried;    /* the retry hook rewrote the record since
                                   rec (set on the fetch engine's thread
                                   before the op's result is queued, read
                                   by the pipeline after taking it) */
};

enum out_kind {
    OUT_RESULT,    /* a result; then its changelog record (OUT_CHANGELOG) */
    OUT_DLQ,
    OUT_CONFLICT,  /* a conflict report; then its changelog mark */
    OUT_REPLAY,    /* an outbox entry sent again; then its changelog record */
    OUT_CHANGELOG, /* a changelog record: on its acknowledgement the op's
                      outbox entry goes (seq), the op finishes (op) or the
                      message is done (msg) */
    OUT_REROUTE,   /* a misrouted job re-produced keyed by op_id */
};

/* A message to produce, kept until its delivery report (re-sent on failure);
 * librdkafka reads its value in place until then (producer_send_to,
 * borrowed): never changed nor freed while it is in flight. */
struct outmsg {
    struct pipeline *pl;  /* the run its delivery report goes to */
    struct outmsg *next;  /* retry list */
    enum out_kind kind;
    int32_t partition;    /* explicit partition, or -1: the key's */
    const char *topic;    /* borrowed: the run's topic names (cfg, the
                             changelog's), which outlive its messages */
    char *key;            /* key, NUL, value, NUL: after the struct, in
                             its allocation (consumer_out_new) */
    size_t key_len;
    char *value;          /* in key's allocation, or value_own */
    size_t value_len;
    char *value_own;      /* a value taken over (consumer_out_result_take),
                             freed with the message; or NULL */
    const char *hname[4]; /* string literals */
    char *hval[4];        /* in hbuf, or malloc'd when it did not fit */
    size_t n_hdrs;
    char hbuf[192];       /* header values (a result's three: 64 + op_id +
                             20 bytes) */
    size_t hbuf_used;
    unsigned hval_own;    /* bit i: hval[i] was malloc'd (not in hbuf) */
    struct opctx *op;     /* OUT_RESULT, OUT_CHANGELOG */
    struct pmsg *msg;     /* OUT_DLQ, OUT_CONFLICT, OUT_CHANGELOG,
                             OUT_REROUTE */
    uint64_t seq;         /* OUT_RESULT, OUT_REPLAY, OUT_CHANGELOG (0: no
                             outbox entry to acknowledge) */
    char *op_id;          /* OUT_REPLAY, OUT_CONFLICT, OUT_CHANGELOG: its own
                             copy, or the key (OUT_CHANGELOG, whose key is
                             the op_id) */
    int32_t src_partition; /* OUT_REPLAY: the op's partition (its source),
                              -1 when unknown */
    char hash[STORE_HASH_LEN + 1]; /* OUT_CONFLICT: the conflicting hash */
    struct outmsg *next_conflict;  /* conflict reports in flight */
    int64_t retry_at_ms;
};

/* An outbox entry whose changelog record was acknowledged, waiting for
 * consumer_out_acks_flush. */
struct outbox_ack {
    uint64_t seq;
    char *op_id;
    struct opctx *op;     /* finishes after the flush, or NULL */
    struct pmsg *msg;     /* done after the flush, or NULL */
};

/* A message held for a later claim (store trouble, or an op leased by
 * another owner). */
struct blocked {
    struct blocked *next;
    struct pmsg *pm;
    struct job *job;
    int64_t recheck_at_ms;
};


/* One run of the pipeline (consumer_run's frame). */
struct pipeline {
    const struct cfg *cfg;
    const struct consumer_opts *opts;
    struct consumer_stats *st;
    struct job_conf jconf;
    struct consumer_handles *h; /* the producer may be replaced in it */
    rd_kafka_t *rk;
    struct fetch *fetch;
    struct store *store;
    struct api *api;
    struct partitions *parts;
    struct opctx **opmap;
    size_t n_ops;
    struct opctx **sfmap; /* resource_key -> leader fetching it */
    struct outmsg *retry;
    struct blocked *blocked;
    size_t n_blocked;
    struct outmsg *conflicts_inflight; /* reports not yet acknowledged */
    size_t pending_out;   /* produced, not yet acknowledged */
    struct opctx *await;  /* results acknowledged whose completion is not
                             fsync'd yet (group commit): their offsets wait */
    bool purging;         /* producer_reset: reports of purged messages */
    bool closing;         /* pipeline_fini's purge: every report only
                             frees its message (nothing follows any more) */
    int64_t reset_retry_at_ms; /* producer_reset: not again before */
    long fail_fatal_after; /* test failpoint (see producer_reset), -1 off */
    long fail_exit_before_ack; /* test failpoint (see consumer_out_dr), -1 off */
    int64_t last_activity_ms;
    int64_t next_renew_ms;
    int64_t next_gauges_ms;
    bool index_warned; /* the hot index's loss of completeness (past its
                          bound, or off) is logged once a run */
    int64_t next_unpin_ms;    /* store_outbox_unpin_old: after a failure,
                                 not again before this */
    bool rechecking;      /* claim() of a held message: already counted */
    struct opctx **shadow_pending; /* shadow ops claimed, to complete */
    size_t n_shadow, cap_shadow;
    /* the changelog (changelog.h) */
    char changelog[CHANGELOG_TOPIC_MAX]; /* its topic */
    struct changelog_info clinfo;        /* partitions, retention */
    char *identity;                      /* the identity record's value */
    struct changelog_restorer *restorer;
    bool restored_once;   /* the start-up restore is done (readiness) */
    /* per changelog partition (clinfo.partitions, allocated at the first
     * assignment): the offset after the last of this instance's own records
     * acknowledged one after the other since the partition's restore ended,
     * which the local copy therefore reflects (each is written locally
     * before it is produced); -1 when not followed (not assigned,
     * exactly_once: transaction markers take offsets, or a record not ours
     * came in between).  Written as the partition's checkpoint at most
     * every CHECKPOINT_EVERY_MS and at a revoke, so a restart with the
     * local store restores only what it does not hold */
    int64_t *clog_next;
    bool *clog_dirty;
    int64_t clog_written_ms;
    bool paused;          /* backpressure: the assigned partitions are
                             paused (consumer_backpressure) */
    int64_t paused_at_ms;
    int64_t at_capacity_ms; /* since when the pipeline is at capacity, 0 */
    int64_t stop_at_ms;   /* a stop's end of grace (consumer_stop_begin), 0 */
    bool stop_paused;     /* consumer_stop_poll paused the assignment */
    struct opctx *released; /* ops given up at a revoke whose fetch (or
                               leader's) is still out, chained by hnext:
                               freed when it returns, or at the end */
    bool leave_now;       /* hurried, or the store failed: no drain at the
                             revoke (consumer_stop.c) */
    dd_err_t fatal;       /* a rebalance decided the run cannot go on */
    char fatal_msg[DD_ERRSTR_SIZE];
    struct outbox_ack *acks; /* collected, for consumer_out_acks_flush */
    size_t n_acks, cap_acks;
    struct opctx **acked;  /* shadow ops whose result was acknowledged, to
                              write (consumer_out_acks_flush) */
    size_t n_acked, cap_acked;
    /* the batch functions' temporary arrays (handle_batch, handle_fetched,
     * consumer_shadow_flush, consumer_out_acks_flush; dd.h,
     * dd_scratch_take): kept from batch to batch instead of malloc()ed per
     * batch; the run loop calls them one after another */
    struct dd_scratch scratch;
    /* processing.guarantee exactly_once (consumer_txn.c) */
    bool eos;
    bool txn_dirty;       /* produced or an offset moved since the last
                             commit */
    char txn_fail[DD_ERRSTR_SIZE]; /* why the open transaction must be
                                      aborted ("" none), set where aborting
                                      is not allowed (delivery reports) */
    int64_t txn_next_ms;  /* the next commit is due then */
    int64_t *txn_offsets; /* per jobs partition: the offset the next commit
                             sends (next to consume), -1 none */
    int32_t n_txn_offsets;
    long txn_fail_abort_after; /* failpoint DEDUPD_FAILPOINT_TXN_ABORT_AFTER */
    uint64_t txn_commits;
    struct prefetch_kick *kick; /* prefetch_kick.h, NULL when off */
};

/* The jobs topic's consumer: librdkafka's rebalance callback reaches the
 * run through it (its conf opaque). */
struct consumer {
    rd_kafka_t *rk;
    struct pipeline *pl;  /* the run it serves, or NULL outside consumer_run */
};

/* ---- consumer.c ----------------------------------------------------------- */

#define CONSUMER_OPMAP_BUCKETS 65536

/* Take \p o out of the op map (its messages and memory stay the
 * caller's). */
void consumer_op_unlink(struct pipeline *pl, struct opctx *o);

/* Hand \p n commit points to librdkafka in one offsets_store call. */
void consumer_offsets_store(struct pipeline *pl,
                            const struct partitions_offset *o, size_t n);

/* Store every moved commit point (partitions_commit_take). */
void consumer_flush_offsets(struct pipeline *pl);

/* Take every finished fetch (waiting at most \p timeout_ms for the first)
 * and commit them in batches.  @returns how many were taken. */
size_t consumer_drain_fetched(struct pipeline *pl, int timeout_ms);

/* Shadow mode: complete the ops claimed in this loop iteration. */
void consumer_shadow_flush(struct pipeline *pl);

/* Acknowledge the outbox entries collected since (consumer_out_acks_flush),
 * then finish the acknowledged ops whose completion is durable since. */
void consumer_release_durable(struct pipeline *pl);

/* The work of \p pm is durable and acknowledged: its partition's commit
 * point may move (partitions_done); frees \p pm. */
void consumer_msg_done(struct pipeline *pl, struct pmsg *pm);

/* Remove \p o from the op map, complete its messages and free it. */
void consumer_op_finish(struct pipeline *pl, struct opctx *o);

/* Free \p o's own memory (not its messages: the caller's). */
void consumer_op_free(struct opctx *o);

/* Free \p o, an op given up at a revoke (on pl->released). */
void consumer_released_free(struct pipeline *pl, struct opctx *o);

/* ---- consumer_rebalance.c ------------------------------------------------- */

/* A changelog record of this instance was acknowledged at \p offset of
 * \p partition: the partition's checkpoint may follow (pipeline.clog_next). */
void consumer_checkpoint_acked(struct pipeline *pl, int32_t partition,
                               int64_t offset);

/* Stop following \p partition (logged with \p why): a record of it may not
 * be reflected locally (a local write behind it failed). */
void consumer_checkpoint_stop(struct pipeline *pl, int32_t partition,
                              const char *why);

/* Write the checkpoints that moved (all of them when \p force, else at most
 * every CHECKPOINT_EVERY_MS); a failed write stops following the partition
 * (logged: the next restore reads more, nothing is lost). */
void consumer_checkpoint_flush(struct pipeline *pl, bool force);

/* librdkafka's rebalance callback (eager assignors; the conf opaque is the
 * struct consumer).  @locality pipeline thread (inside
 * rd_kafka_consumer_poll and rd_kafka_consumer_close). */
void consumer_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t *parts,
                           void *opaque);

/* ---- consumer_handles.c --------------------------------------------------- */

/* The parse settings of \p cfg (identity headers, size limit) into \p jc;
 * its pointers borrow \p cfg. */
void consumer_job_conf(const struct cfg *cfg, struct job_conf *jc);

/* ---- consumer_stop.c ----------------------------------------------------- */

/* The first look at a stop request: no longer ready, finish what is in
 * flight within shutdown.grace_ms.  @returns the time to leave at. */
int64_t consumer_stop_begin(struct pipeline *pl);

/* While stopping: pause the assignment once (no new work) and serve the
 * consumer (rd_kafka_consumer_poll with no wait), so the member stays in its
 * group while the ops in flight finish; a message fetched before the pause
 * is dropped untracked (its offset is never stored). */
void consumer_stop_poll(struct pipeline *pl);

/* Leave now (a second signal, or a failed store): the revoke at the close
 * does not drain, commits are not waited for. */
bool consumer_stop_hurried(const struct pipeline *pl);

/* A second signal: mark the run hurried (pl->leave_now) and log what is
 * left behind (ops in flight keep their lease, unacknowledged results stay
 * in the outbox). */
void consumer_stop_hurry(struct pipeline *pl);

/* Did a store write or the WAL fsync fail?  Then \p cause (may be NULL) is
 * the first failed write's error. */
bool consumer_stop_store_broken(struct pipeline *pl, char *cause,
                           size_t cause_size);

/* The store failed (\p cause): stop claiming and taking fetches back, wait
 * (at most min(shutdown.grace_ms, 10 s)) for the acknowledgements of the
 * results already stored and their changelog records, store the offsets of
 * what is done.  @returns DD_ERR_IO, \p errstr naming the cause and the ops
 * abandoned. */
dd_err_t consumer_stop_store_failed(struct pipeline *pl, const char *cause,
                                    char *errstr, size_t errstr_size);

/* Leave: flush the results producer (10 s; 300 ms when hurried), make the
 * last completions durable (unless the run failed or is hurried), store the
 * offsets and commit them (asynchronously when hurried). */
void consumer_stop_leave(struct pipeline *pl, dd_err_t err);

/* Backpressure (DESIGN.md section 9): \p on pauses every assigned partition
 * (rd_kafka_pause_partitions) so the pipeline can go on polling without
 * taking new work; off resumes exactly what it paused.  A revoke resumes
 * the partitions it takes and clears the state (librdkafka 2.0.2 would keep
 * the pause across unassign and assign).  Logs each change. */
void consumer_backpressure(struct pipeline *pl, bool on);

/* ---- consumer_txn.c ------------------------------------------------------ */

/* processing.guarantee exactly_once (DESIGN.md section 6): the transactional
 * producer's transaction over the pipeline's output and offsets.  Nothing
 * here runs unless pl->eos. */

/* Open the store at sc->path for exactly_once: when its marker file
 * (`<store.path>.eos-open`) is there, the last run did not end clean (a
 * kill, a crash, an abort, a fenced producer, a hurried stop): the copy may
 * hold decisions no committed transaction holds, so it is dropped first
 * (store_drop) and the restore rebuilds it from the changelog.  Then the
 * marker is written (fsync'd) for this run.  *\p marker: its path, owned
 * (consumer_txn_store_closed frees it).  @returns store_open's errors;
 * DD_ERR_IO (the marker or the drop failed: errstr). */
dd_err_t consumer_txn_store_open(const struct store_conf *sc,
                                 struct store **out, char **marker,
                                 char *errstr, size_t errstr_size);

/* The store is closed: remove the marker \p marker (NULL: nothing) when
 * the run ended \p clean; frees \p marker. */
void consumer_txn_store_closed(char *marker, bool clean);

/* The exactly_once producer (producer_new_txn): transactional.id
 * `<consumer.group_id>-<instance.id>`. */
dd_err_t consumer_txn_producer_new(const struct cfg *cfg,
                                   struct producer **out, char *errstr,
                                   size_t errstr_size);

/* A fatal transactional producer error (\p e): fenced, stop (pl->fatal);
 * the next start drops the local copy. */
void consumer_txn_fenced(struct pipeline *pl, const char *e);

/* Set up (offsets per partition, the failpoint) and begin the first
 * transaction; a failure is pl->fatal. */
void consumer_txn_init(struct pipeline *pl);

/* Free what consumer_txn_init allocated. */
void consumer_txn_fini(struct pipeline *pl);

/* Commit points of the pipeline (instead of rd_kafka_offsets_store): sent
 * with the next commit. */
void consumer_txn_offsets(struct pipeline *pl,
                          const struct partitions_offset *o, size_t n);

/* An assignment: \p committed holds its committed offsets (fetched
 * stable, rd_kafka_committed); each valid one is sent with every commit
 * until the partition's commit point moves, so a fenced member's
 * transaction is refused (KIP-447) even when nothing moved. */
void consumer_txn_assigned(struct pipeline *pl,
                           const rd_kafka_topic_partition_list_t *committed);

/* A revoke: partitions \p ids are no longer sent. */
void consumer_txn_revoked(struct pipeline *pl, const int32_t *ids, size_t n);

/* Settle (every message of the transaction delivered, what their reports
 * produce delivered too), send the offsets, commit, begin the next.
 * \p why names the occasion in logs.  @returns whether it committed; if
 * not, pl->fatal says why (an abort sets pl->h->wipe). */
bool consumer_txn_commit(struct pipeline *pl, const char *why);

/* The run loop's turn: abort when a report asked for it, commit when due. */
void consumer_txn_tick(struct pipeline *pl);

/* The open transaction must be aborted (\p cause): from a delivery report
 * or a rebalance callback, where aborting is not allowed; the next
 * consumer_txn_tick does it. */
void consumer_txn_fail(struct pipeline *pl, const char *cause);

/* Abort the open transaction now (\p cause): its messages are purged,
 * the run ends (pl->fatal, pl->leave_now) and the local copy is dropped
 * before the next run (pl->h->wipe). */
void consumer_txn_abort(struct pipeline *pl, const char *cause);

/* ---- consumer_out.c ------------------------------------------------------- */

/* A new message of \p kind to \p topic (borrowed: one of the run's topic
 * names, which outlive its messages; key and value copied); send it with
 * consumer_out_send, which owns it from then on. */
struct outmsg *consumer_out_new(struct pipeline *pl, enum out_kind kind,
                                const char *topic, const void *key,
                                size_t key_len, const void *value,
                                size_t value_len);

/* Add a header: \p name a string literal (kept as is), \p value copied;
 * at most 4 per message, more are ignored. */
void consumer_out_header(struct outmsg *m, const char *name,
                         const char *value);

/* A result (OUT_RESULT or OUT_REPLAY) of \p op_id to topics.results, keyed
 * by \p event_key with the headers idempotency-key, dedupd-op-id and
 * dedupd-generation. */
struct outmsg *consumer_out_result(struct pipeline *pl, enum out_kind kind,
                                   const char *op_id, const char *event_key,
                                   uint64_t generation, const void *value,
                                   size_t len);

/* consumer_out_result() taking over \p value (malloc'd, NUL-terminated at
 * value[len]) instead of copying it: *value is NULL afterwards. */
struct outmsg *consumer_out_result_take(struct pipeline *pl,
                                        enum out_kind kind, const char *op_id,
                                        const char *event_key,
                                        uint64_t generation, char **value,
                                        size_t len);

/* Produce the changelog record of \p op_id as stored now to changelog
 * partition \p partition; on its acknowledgement: the outbox entry \p seq
 * (if not 0) is acknowledged, then \p op finishes (if not NULL) or \p msg
 * is done (if not NULL).  When the op is absent (expired), that happens at
 * once. */
void consumer_out_changelog_op(struct pipeline *pl, int32_t partition,
                               const char *op_id, uint64_t seq,
                               struct opctx *op, struct pmsg *msg);

/* consumer_out_changelog_op() with the record's value \p v (\p len
 * bytes, borrowed) known: no read of the store. */
void consumer_out_changelog_value(struct pipeline *pl, int32_t partition,
                                  const char *op_id, const void *v,
                                  size_t len, uint64_t seq, struct opctx *op,
                                  struct pmsg *msg);

/* Produce a changelog record \p key -> \p value (borrowed) to partition
 * \p partition; \p msg (if not NULL) is done on its acknowledgement. */
void consumer_out_changelog(struct pipeline *pl, int32_t partition,
                            const char *key, const void *value, size_t len,
                            struct pmsg *msg);

/* Produce \p m (owned from here on): until its delivery report it counts in
 * pl->pending_out; what cannot be sent now goes on the retry list. */
void consumer_out_send(struct pipeline *pl, struct outmsg *m);

/* Free \p m (not its pmsg). */
void consumer_out_free(struct outmsg *m);

/* The results producer's delivery report (producer_dr_cb): \p opaque is the
 * outmsg, which names its run.  @locality pipeline thread (served by
 * producer_poll/flush/purge there). */
void consumer_out_dr(void *opaque, dd_err_t err, const char *errtext,
                     int32_t partition, int64_t offset);

/* Acknowledge the outbox entries collected since the last call in one
 * store batch (store_outbox_ack_batch), then finish their ops (or await
 * their durability) and mark their messages done.  consumer_release_durable
 * calls it (every serving of delivery reports is followed by one), and the
 * end of the run. */
void consumer_out_acks_flush(struct pipeline *pl);

/* Send again the messages of the retry list whose time has come. */
void consumer_out_retry_due(struct pipeline *pl);

/* Is a conflict report of (\p op_id, \p hash) produced and not yet
 * acknowledged? */
bool consumer_out_conflict_inflight(struct pipeline *pl, const char *op_id,
                                    const char *hash);

/* After a fatal producer error, replace the results producer (its messages
 * are sent again); also raises the failpoint's fatal error. */
void consumer_out_producer_check(struct pipeline *pl);

/* \p nmemb * \p size bytes of the batch scratch \p sc (dd.h), zeroed when
 * \p zero; out of memory is dd_oom(\p what), as dd_xmalloc.  Released by the
 * batch's dd_scratch_give(). */
static inline void *consumer_scratch(struct dd_scratch *sc, size_t nmemb,
                                     size_t size, bool zero, const char *what)
{
    void *p = size && nmemb > SIZE_MAX / size
                  ? NULL
                  : zero ? dd_scratch_calloc(sc, nmemb, size)
                         : dd_scratch_alloc(sc, nmemb * size);
    if (!p)
        dd_oom(what);
    return p;
}

#endif
