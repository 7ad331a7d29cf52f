/**
 * @file partitions.h
 * @brief Per-partition state of the jobs topic: which consumed messages are
 *        done, the commit point of each partition, the assignment epochs, and
 *        what the pipeline does when partitions are assigned or revoked.
 *
 * Concept.  Work completes out of order (fetches take different times, a
 * duplicate waits for the op it duplicates), but Kafka keeps one offset per
 * partition: the next offset to consume, every earlier one being processed.
 * So each partition keeps, in consumption order, the messages handed to the
 * pipeline (partitions_track) and whether each one's work is done
 * (partitions_done), and derives from them the offset the consumer may store.
 * Partitions are int32 ids (>= 0), offsets int64; no Kafka client type
 * appears here: the pipeline (consumer.c) translates to and from librdkafka.
 *
 * Invariants (the contract):
 *  - Consumption order, not offset order.  Each partition keeps a queue of
 *    its tracked messages in the order they were tracked, whatever their
 *    offsets: within one assignment offsets may go backwards (a reset after
 *    OFFSET_OUT_OF_RANGE, a truncated log, a seek), repeat (the same offset
 *    consumed twice is two entries) and skip (compacted topics, transaction
 *    markers).  A tracked message's handle (struct partitions_msg) names its
 *    own entry by the partition's consumption sequence number and the epoch,
 *    never by its offset.
 *  - The commit point of a partition is the offset to store: the offset of
 *    the last entry of the done prefix of the queue, plus 1.  It moves only
 *    when the head of the queue is done: an entry done behind one not done
 *    moves nothing; once the earlier one is done, the point passes both at
 *    once.  It follows consumption, so it moves backwards when consumption
 *    went backwards (Kafka accepts storing a lower offset: the messages from
 *    there on are consumed again and found duplicates) and forwards over
 *    gaps.  It is -1 until the first move of the current epoch.
 *  - Cost: O(1) amortized per tracked message (a ring per partition): a done
 *    in the middle of the queue only marks its entry; the done prefix is
 *    popped when the head is done.
 *  - Each move of a commit point is handed out once (partitions_commit_take),
 *    and only for a partition assigned at that moment; the pipeline stores
 *    what it is handed (rd_kafka_offsets_store) and the consumer commits it.
 *  - Every assignment and every revocation of a partition starts a new epoch.
 *    A tracked message carries the epoch it was consumed in
 *    (partitions_msg.epoch); completing it in a later epoch, or while its
 *    partition is not assigned, is void: nothing moves.  A revoked
 *    partition's late completions are therefore void (its next owner
 *    consumes those messages again and finds duplicates), and a re-assigned
 *    partition starts from an empty queue, never from the previous one
 *    (sequence numbers are not reused either: a handle of an earlier epoch
 *    names no entry of the new queue).
 *  - Rebalance decisions (partitions_assign, partitions_revoke,
 *    partitions_lose) are plain data (struct partitions_plan) that the
 *    pipeline carries out: today, on revoke, store every moved commit point
 *    and commit synchronously before giving the partitions up, while the
 *    work still in flight for them drains (it finishes and publishes its
 *    result; its completion is void); on a lost assignment (the partitions
 *    already belong to another member), store and commit nothing and give
 *    them up, the work in flight draining as on revoke; on assign, start
 *    tracking and report ready.  Nothing is paused and no release record is
 *    written yet.
 *
 * Scale-out (DESIGN.md section 6) grows this module: per-partition pause
 * reasons (restoring, backpressure) set explicitly at every assign, the
 * changelog checkpoint and restore progress of each partition, releases of
 * unfinished ops before a revoke completes (none on a lost assignment).
 * They belong in struct partitions_plan and in the state kept per partition
 * here.
 *
 * Threads: not thread-safe.  One thread owns it: the pipeline thread, which
 * also runs librdkafka's rebalance callback (from within the consumer poll).
 * Memory: grows with the highest partition id and the messages in flight;
 * allocation failure follows dd.h's out-of-memory policy (abort).
 */
#ifndef DEDUPD_PARTITIONS_H
#define DEDUPD_PARTITIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct partitions;

/** A tracked message: the handle its completion is reported with.  Plain
 *  data, copied freely; valid until reported done once (a second report is
 *  ignored).  Its entry is (partition, epoch, seq); the offset is carried for
 *  logs only and never used to find the entry. */
struct partitions_msg {
    int32_t partition;
    uint32_t epoch;     /**< the partition's epoch when it was tracked */
    uint64_t seq;       /**< its place in the partition's consumption order
                             (never reused within one partitions object) */
    int64_t offset;     /**< the message's offset (for logs) */
};

/** An offset to store for a partition: the next one to consume. */
struct partitions_offset {
    int32_t partition;
    int64_t offset;
};

/** What the pipeline does for one assignment, revocation or loss.  Filled
 *  by partitions_assign()/partitions_revoke()/partitions_lose(); release
 *  with partitions_plan_fini(). */
struct partitions_plan {
    /** Commit points to store before anything else (revoke: every moved
     *  one, of all assigned partitions, taken as by partitions_commit_take;
     *  lost: none); owned by the plan, NULL when n_store is 0. */
    struct partitions_offset *store;
    size_t n_store;
    /** Commit the stored offsets synchronously before the partitions are
     *  given up (revoke; never on a loss). */
    bool commit;
    /** Messages of these partitions still in flight whose completions this
     *  decision voids: their work drains (finishes, publishes its result)
     *  but moves no commit point. */
    size_t n_void;
    /** The pipeline consumes: report ready (assign). */
    bool ready;
};

/**
 * @brief Create the per-partition state (no partition assigned).
 * @returns never NULL (dd.h's out-of-memory policy); partitions_destroy().
 * @locality pipeline thread.
 */
struct partitions *partitions_new(void);

/** @brief Free; partitions_destroy(NULL) is a no-op. */
void partitions_destroy(struct partitions *p);

/**
 * @brief Track the message at \p offset of \p partition, consumed now: a new
 *        entry at the tail of the partition's queue.  Any offset is accepted
 *        in any order (lower than, equal to or past earlier ones).
 * @param partition  >= 0.
 * @param out        Out: the handle to report it done with.
 * @locality pipeline thread.  O(1) amortized.
 */
void partitions_track(struct partitions *p, int32_t partition, int64_t offset,
                      struct partitions_msg *out);

/**
 * @brief The work of \p m is done (durable and acknowledged): mark its entry,
 *        and when it is the head of the queue pop the done prefix and move
 *        the commit point to the offset of the last popped entry + 1 (which
 *        may be lower than the point before).  Void (nothing changes) when
 *        \p m's epoch is not the partition's current one, the partition is
 *        not assigned, or \p m was already reported (its entry is done or
 *        popped).
 * @returns true when the commit point moved (to a new value or the same).
 * @locality pipeline thread.  O(1) amortized (each entry is popped once).
 */
bool partitions_done(struct partitions *p, const struct partitions_msg *m);

/**
 * @brief A message decided as it was consumed (the fast path: a duplicate
 *        needing no work): as partitions_track then partitions_done.  Without
 *        a queue entry when nothing of \p partition is outstanding (the
 *        commit point moves to \p offset + 1 at once, lower or higher than
 *        before); otherwise a done entry at the tail, passed with the prefix
 *        before it.  Nothing when \p partition is not assigned.
 * @locality pipeline thread.  O(1) amortized.
 */
void partitions_decided(struct partitions *p, int32_t partition,
                        int64_t offset);

/**
 * @brief Is some commit point's move not handed out yet?
 * @locality pipeline thread.
 */
bool partitions_commit_pending(const struct partitions *p);

/**
 * @brief Hand out the moved commit points of assigned partitions, at most
 *        \p cap of them, in partition order; each move is handed out once
 *        (moves of partitions no longer assigned are dropped).  Call again
 *        while it returns \p cap.
 * @param out  Array of \p cap entries (cap >= 1).
 * @returns how many entries of \p out were filled.
 * @locality pipeline thread.
 */
size_t partitions_commit_take(struct partitions *p,
                              struct partitions_offset *out, size_t cap);

/**
 * @returns the commit point of \p partition in its current epoch (the next
 *          offset to consume), or -1 when it has not moved yet.
 * @locality pipeline thread.
 */
int64_t partitions_commit_point(const struct partitions *p, int32_t partition);

/** @returns the current epoch of \p partition (0 before its first assign). */
uint32_t partitions_epoch(const struct partitions *p, int32_t partition);

/** @returns true when \p partition is assigned. */
bool partitions_assigned(const struct partitions *p, int32_t partition);

/** @returns the entries of \p partition's queue not yet passed by its
 *           commit point (done or not). */
size_t partitions_outstanding(const struct partitions *p, int32_t partition);

/**
 * @brief Record whether \p partition's consumer is at the end of the
 *        partition (librdkafka's partition EOF), in poll order.
 * @locality pipeline thread.
 */
void partitions_eof_set(struct partitions *p, int32_t partition, bool eof);

/**
 * @returns whether \p partition is assigned and at its end (its last event
 *          was a PARTITION_EOF): the consumer lag gauge counts it 0 also
 *          before any message of the assignment was consumed (when
 *          rd_kafka_position is still unknown).
 * @locality pipeline thread.
 */
bool partitions_at_eof(const struct partitions *p, int32_t partition);

/**
 * @returns true when some partition is assigned and every assigned one is
 *          at its end (the idle exit of `run --exit-when-idle`).
 */
bool partitions_all_eof(const struct partitions *p);

/** @returns true once any partition was ever assigned. */
bool partitions_ever_assigned(const struct partitions *p);

/**
 * @brief Decide an assignment of the \p n partitions \p ids: each starts a
 *        new epoch with an empty tracker, no commit point and not at its end
 *        (what an earlier epoch tracked is void).  \p plan: ready; n_void
 *        counts the dropped messages not yet passed; nothing to store or
 *        commit.
 * @param plan  Out: partitions_plan_fini() it.
 * @locality pipeline thread (librdkafka's rebalance callback).
 */
void partitions_assign(struct partitions *p, const int32_t *ids, size_t n,
                       struct partitions_plan *plan);

/**
 * @brief Decide a revocation of the \p n partitions \p ids: \p plan holds
 *        every moved commit point (as partitions_commit_take would hand out,
 *        before the revocation) and commit = true; then each revoked
 *        partition is no longer assigned and starts a new epoch, so its late
 *        completions are void; n_void counts its messages still in flight.
 * @param plan  Out: partitions_plan_fini() it.
 * @locality pipeline thread (librdkafka's rebalance callback).
 */
void partitions_revoke(struct partitions *p, const int32_t *ids, size_t n,
                       struct partitions_plan *plan);

/**
 * @brief Decide the loss of the \p n partitions \p ids (librdkafka's
 *        rd_kafka_assignment_lost(): the session timed out or the member was
 *        fenced, and the partitions already belong to another member): \p
 *        plan has n_store = 0 (store NULL) and commit = false, since their
 *        offsets are no longer ours to store or commit; each lost partition is
 *        no longer assigned and starts a new epoch, its commit point's move
 *        not handed out is dropped, its late completions are void; n_void
 *        counts its messages still in flight.  Moves of partitions not in
 *        \p ids stay pending for partitions_commit_take.
 * @param plan  Out: partitions_plan_fini() it.
 * @locality pipeline thread (librdkafka's rebalance callback).
 */
void partitions_lose(struct partitions *p, const int32_t *ids, size_t n,
                     struct partitions_plan *plan);

/** @brief Free what \p plan owns (not \p plan itself). */
void partitions_plan_fini(struct partitions_plan *plan);

#endif
