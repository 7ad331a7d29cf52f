/* Rebalances of the jobs topic (DESIGN.md section 6), carried out on the
 * pipeline thread inside librdkafka's rebalance callback:
 *  - assign: start tracking (partitions.h), restore each assigned
 *    partition's copy from the changelog before any of its messages is
 *    processed (the restore runs inside the callback, so none is), write
 *    the identity record to each, and report ready after the first one;
 *  - revoke: take no new work for the partitions; let their transfers in
 *    flight finish, with their results and changelog records acknowledged,
 *    within rebalance.grace_ms; release at once the ops waiting out a retry
 *    delay and, at the grace's end, whatever did not finish (a release
 *    record: owner empty, not_before kept), so the next owner takes them at
 *    once; wait for the acknowledgements; store and commit; give up;
 *  - a lost assignment (the group moved on without this member) releases
 *    and commits nothing: the partitions are already someone else's.
 * See consumer_internal.h. */
#include "consumer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "changelog.h"
#include "config.h"
#include "dd.h"
#include "fetch.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "store.h"

#define DRAIN_CHECK_MS 50 /* how often a drain looks for retry waits */
#define STOP_DRAIN_MS 2000 /* a stop's revoke, after shutdown.grace_ms */
/* An assignment waits this long at most for the hot index's rebuild (a
 * 10M-op store rebuilds in about 20 s here; 1M: 2.2 s, bench row 1's log),
 * and never past rebalance.grace_ms (below max.poll.interval.ms, checked at
 * start-up: the wait runs in the rebalance callback, like the restore). */
#define INDEX_WAIT_MS 120000
#define CHECKPOINT_EVERY_MS 1000 /* a moved checkpoint is written this often */


/* The partition ids of \p parts (librdkafka's list) for partitions.h. */
static int32_t *partition_ids(const rd_kafka_topic_partition_list_t *parts)
{
    int32_t *ids = dd_xcalloc((size_t)parts->cnt + 1, sizeof(*ids),
                              "rebalance");
    for (int i = 0; i < parts->cnt; i++)
        ids[i] = parts->elems[i].partition;
    return ids;
}

static bool in_set(const int32_t *ids, size_t n, int32_t p)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == p)
            return true;
    return false;
}

/* ---- backpressure ---------------------------------------------------------- */

/* Pause (\p pause) or resume the current assignment. */
static void pause_assignment(struct pipeline *pl, bool pause)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    if (rd_kafka_assignment(pl->rk, &a) || !a)
        return;
    rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(pl->rk, a)
                                  : rd_kafka_resume_partitions(pl->rk, a);
    if (e)
        log_msg(LOG_WARNING, "consumer", "%s %d partitions: %s",
                pause ? "pausing" : "resuming", a->cnt, rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(a);
}

void consumer_backpressure(struct pipeline *pl, bool on)
{
    if (on == pl->paused)
        return;
    pl->paused = on;
    pause_assignment(pl, on);
    if (on) {
        pl->paused_at_ms = dd_now_ms();
        log_msg(LOG_NOTICE, "consumer",
                "backpressure: %zu ops in flight or unacknowledged (%zu "
                "messages unacknowledged): partitions paused, polling goes on",
                pl->n_ops, pl->pending_out);
    } else {
        log_msg(LOG_NOTICE, "consumer",
                "backpressure over after %lld ms: partitions resumed",
                (long long)(dd_now_ms() - pl->paused_at_ms));
    }
}

/* ---- checkpoints of the owner's own records ------------------------------- */

/* Follow \p ids from where their restore ended (the checkpoint it wrote).
 * Not under exactly_once (commit markers take offsets between records). */
static void checkpoint_follow(struct pipeline *pl, const int32_t *ids,
                              size_t n)
{
    size_t np = pl->clinfo.partitions > 0 ? (size_t)pl->clinfo.partitions : 0;
    if (pl->eos || !np)
        return;
    if (!pl->clog_next) {
        pl->clog_next = dd_xmalloc(np * sizeof(*pl->clog_next), "checkpoints");
        pl->clog_dirty = dd_xcalloc(np, sizeof(*pl->clog_dirty), "checkpoints");
        for (size_t i = 0; i < np; i++)
            pl->clog_next[i] = -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= np)
            continue;
        int64_t off = -1, at = 0;
        bool found = false;
        char e[DD_ERRSTR_SIZE];
        if (store_checkpoint_get(pl->store, ids[i], &off, &at, &found, e,
                                 sizeof(e)) || !found)
            off = -1;
        pl->clog_next[ids[i]] = off;
        pl->clog_dirty[ids[i]] = false;
    }
}

void consumer_checkpoint_acked(struct pipeline *pl, int32_t partition,
                               int64_t offset)
{
    if (!pl->clog_next || partition < 0 ||
        partition >= pl->clinfo.partitions || pl->clog_next[partition] < 0)
        return;
    if (offset == pl->clog_next[partition]) {
        pl->clog_next[partition] = offset + 1;
        pl->clog_dirty[partition] = true;
    } else if (offset > pl->clog_next[partition]) {
        /* another writer's record in between (a zombie's), or one of ours
         * re-sent: stop here */
        consumer_checkpoint_stop(pl, partition, "a record not acknowledged "
                                 "to this instance came in between");
    } /* below: before the restore's end, which covered it */
}

void consumer_checkpoint_stop(struct pipeline *pl, int32_t partition,
                              const char *why)
{
    if (!pl->clog_next || partition < 0 ||
        partition >= pl->clinfo.partitions || pl->clog_next[partition] < 0)
        return;
    consumer_checkpoint_flush(pl, true);
    log_msg(LOG_INFO, "consumer", "changelog partition %d: its checkpoint "
            "stays at %lld until the next assignment: %s", (int)partition,
            (long long)pl->clog_next[partition], why);
    pl->clog_next[partition] = -1;
}

void consumer_checkpoint_flush(struct pipeline *pl, bool force)
{
    int64_t now = dd_now_ms();
    if (!pl->clog_next || (!force && now - pl->clog_written_ms <
                                         CHECKPOINT_EVERY_MS))
        return;
    pl->clog_written_ms = now;
    for (int32_t p = 0; p < pl->clinfo.partitions; p++) {
        if (!pl->clog_dirty[p] || pl->clog_next[p] < 0)
            continue;
        pl->clog_dirty[p] = false;
        char e[DD_ERRSTR_SIZE];
        if (store_checkpoint_put(pl->store, p, pl->clog_next[p], now, e,
                                 sizeof(e))) {
            log_msg(LOG_WARNING, "store", "checkpoint of changelog partition "
                    "%d: %s (its next restore reads from the last one)",
                    (int)p, e);
            pl->clog_next[p] = -1;
        }
    }
}

/* \p ids are no longer this instance's: their checkpoints are written
 * (unless \p lost: another member may be writing already) and no longer
 * followed. */
static void checkpoint_unfollow(struct pipeline *pl, const int32_t *ids,
                                size_t n, bool lost)
{
    if (!pl->clog_next)
        return;
    if (!lost)
        consumer_checkpoint_flush(pl, true);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < pl->clinfo.partitions)
            pl->clog_next[ids[i]] = -1;
}

/* ---- assign ---------------------------------------------------------------- */

/* Restore \p ids from the changelog; then the identity record to each (the
 * owner writes it at every assignment, so retention never removes it). */
static void assign_restore(struct pipeline *pl, const int32_t *ids, size_t n)
{
    struct changelog_restore_stats st;
    char e[DD_ERRSTR_SIZE];
    dd_err_t err = changelog_restore(pl->restorer, pl->store, pl->cfg,
                                     &pl->clinfo, ids, n, &st, e, sizeof(e));
    if (err) {
        pl->fatal = err == DD_ERR_INVAL ? DD_ERR_INVAL : DD_ERR_FATAL;
        dd_errstr_set(pl->fatal_msg, sizeof(pl->fatal_msg),
                      "restore of the changelog %s: %s", pl->changelog, e);
        log_msg(LOG_CRIT, "restore", "%s", pl->fatal_msg);
        return;
    }
    /* the identity this copy was last checked against: a restart whose
     * checkpoints follow its own records (consumer_checkpoint_acked) reads
     * no identity record back, so it is checked here */
    char *stored = NULL;
    size_t len = 0;
    bool found = false;
    err = store_identity_get(pl->store, pl->changelog, &stored, &len, &found,
                             e, sizeof(e));
    if (!err && found)
        err = changelog_identity_check(pl->cfg, stored, len, e, sizeof(e));
    free(stored);
    if (!err)
        err = store_identity_put(pl->store, pl->changelog, pl->identity,
                                 strlen(pl->identity), e, sizeof(e));
    if (err) {
        pl->fatal = err == DD_ERR_INVAL ? DD_ERR_INVAL : DD_ERR_FATAL;
        dd_errstr_set(pl->fatal_msg, sizeof(pl->fatal_msg),
                      "the local store's identity record for %s: %s",
                      pl->changelog, e);
        log_msg(LOG_CRIT, "restore", "%s", pl->fatal_msg);
        return;
    }
    for (size_t i = 0; i < n; i++)
        consumer_out_changelog(pl, ids[i], CHANGELOG_IDENTITY_KEY,
                               pl->identity, strlen(pl->identity), NULL);
}

/* exactly_once: fetch the committed offsets of \p parts before the
 * restore.  Under read_committed librdkafka asks for stable offsets
 * (OffsetFetch require_stable, KIP-447): the answer waits until no
 * transaction holding offsets of these partitions is open, so a zombie's
 * last transaction has committed (its changelog records are then visible to
 * the restore) or aborted.  The offsets found are sent with every commit
 * until the partition moves (consumer_txn_assigned).  @returns true when
 * the consumer is closing (the stop): nothing else of the assignment is
 * done then. */
static bool assign_committed(struct pipeline *pl, rd_kafka_t *rk,
                             const rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_topic_partition_list_t *c =
        rd_kafka_topic_partition_list_copy(parts);
    int timeout = (int)pl->cfg->processing_transaction_timeout_ms + 30000;
    int64_t t0 = dd_now_ms();
    rd_kafka_resp_err_t e = rd_kafka_committed(rk, c, timeout);
    bool closing = e == RD_KAFKA_RESP_ERR__DESTROY && pl->stop_at_ms;
    if (closing) {
        /* the stop's rd_kafka_consumer_close: the group gave this member
         * the partitions its peers left (seen in it_eos's last phase);
         * nothing of them is consumed, their next owner takes them */
        log_msg(LOG_INFO, "consumer", "exactly_once: %d partitions "
                "assigned while the consumer closes: left to their next "
                "owner", parts->cnt);
    } else if (e) {
        pl->fatal = DD_ERR_FATAL;
        dd_errstr_set(pl->fatal_msg, sizeof(pl->fatal_msg),
                      "exactly_once: the committed offsets of the assigned "
                      "partitions (stable, waited %lld ms): %s",
                      (long long)(dd_now_ms() - t0), rd_kafka_err2str(e));
        log_msg(LOG_CRIT, "consumer", "%s", pl->fatal_msg);
    } else {
        consumer_txn_assigned(pl, c);
        if (dd_now_ms() - t0 >= 1000)
            log_msg(LOG_INFO, "consumer",
                    "exactly_once: waited %lld ms for stable committed "
                    "offsets (a transaction of the partitions' last owner "
                    "was open)", (long long)(dd_now_ms() - t0));
    }
    rd_kafka_topic_partition_list_destroy(c);
    return closing;
}

/* Before the first messages of an assignment: the hot index's rebuild from
 * the local store (store_open) is over, so a redelivered job of an op the
 * rebuild had not reached yet does not take the full path (issue 13: a
 * replay storm right after a restart; the rebuild runs at about 450k ops/s,
 * a group join takes seconds, so only stores of a few million ops wait).
 * Runs before the restore produces anything (under exactly_once nothing of
 * the open transaction waits on it, and the wait stays under half its
 * timeout too); a stop ends it. */
static void assign_index_wait(struct pipeline *pl, size_t n)
{
    int64_t t0 = dd_now_ms();
    if (!n || store_index_wait(pl->store, 0))
        return;
    int64_t bound = INDEX_WAIT_MS;
    if (pl->cfg->rebalance_grace_ms < bound)
        bound = pl->cfg->rebalance_grace_ms;
    if (pl->eos && pl->cfg->processing_transaction_timeout_ms / 2 < bound)
        bound = pl->cfg->processing_transaction_timeout_ms / 2;
    log_msg(LOG_INFO, "consumer", "waiting for the hot index (rebuilt from "
            "the local store) before consuming, at most %lld ms",
            (long long)bound);
    bool over = false;
    while (!(over = store_index_wait(pl->store, 100)) && *pl->opts->run &&
           dd_now_ms() - t0 < bound)
        ;
    struct store_index_stats is;
    store_index_stats_get(pl->store, &is);
    if (over)
        log_msg(LOG_INFO, "consumer", "hot index rebuilt after %lld ms "
                "waited: %llu op_ids%s", (long long)(dd_now_ms() - t0),
                (unsigned long long)is.entries,
                is.complete ? "" : " (at its bound: a cache only)");
    else
        log_msg(LOG_WARNING, "consumer", "hot index still rebuilding after "
                "%lld ms (%llu op_ids so far): consuming; until it is done a "
                "duplicate it has not reached takes the full path",
                (long long)(dd_now_ms() - t0),
                (unsigned long long)is.entries);
}

static void on_assign(struct pipeline *pl, rd_kafka_t *rk,
                      rd_kafka_topic_partition_list_t *parts)
{
    int32_t *ids = partition_ids(parts);
    size_t n = (size_t)parts->cnt;
    struct partitions_plan plan;
    partitions_assign(pl->parts, ids, n, &plan);
    log_msg(LOG_INFO, "consumer", "assigned %d partitions", parts->cnt);
    metrics_gauge_set(METRICS_PARTITIONS_ASSIGNED, (int64_t)n);
    assign_index_wait(pl, n);
    bool closing = pl->eos && assign_committed(pl, rk, parts);
    if (pl->restorer && !pl->fatal && !closing) {
        assign_restore(pl, ids, n);
        checkpoint_follow(pl, ids, n);
    }
    /* Fetching starts now, not before the waits above: librdkafka 2.0.2
     * fills a partition's fetch queue up to queued.max.messages.kbytes
     * meanwhile and stops fetching it; once the pipeline drains the queue,
     * its broker thread decides to fetch again only when it next wakes (up
     * to a second later).  Measured in bench row 1 (issue 13): after the
     * first 120,000 messages, 0.4 to 0.7 s without one. */
    rd_kafka_assign(rk, parts);
    if (plan.ready && !pl->fatal && !closing) {
        pl->restored_once = true;
        if (pl->api)
            api_ready_set(pl->api, true);
        metrics_gauge_set(METRICS_READY, 1);
    }
    partitions_plan_fini(&plan);
    free(ids);
}

/* ---- revoke ---------------------------------------------------------------- */

/* Give \p o up: a release record (its next owner takes it at once), out of
 * the op map; its messages are void (the revoke starts a new epoch).  A
 * fetch in flight makes no new attempt (fetch_release) and its result is
 * dropped when it comes back; a single-flight waiter is dropped by its
 * leader. */
static void op_release(struct pipeline *pl, struct opctx *o)
{
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t len = 0;
    char e[DD_ERRSTR_SIZE];
    if (!store_op_release(pl->store, o->op_id, o->generation, dd_now_ms(), v,
                          &len, e, sizeof(e))) {
        consumer_out_changelog(pl, o->partition, o->op_id, v, len, NULL);
        metrics_add(METRICS_RELEASES, 1);
    } else {
        struct log_ctx lc = {pl->cfg->topic_jobs, o->partition, -1, o->op_id};
        log_ctx_msg(LOG_WARNING, "store", &lc, "release: %s", e);
    }
    consumer_op_unlink(pl, o);
    while (o->msgs) {
        struct pmsg *m = o->msgs;
        o->msgs = m->next;
        free(m);
    }
    o->released = true;
    if (o->fetching || o->sf_waiting) {
        /* freed when its fetch (or its leader's) returns, or at the end */
        o->hnext = pl->released;
        pl->released = o;
        if (o->fetching)
            fetch_release(pl->fetch, o);
    } else {
        consumer_op_free(o);
    }
}

/* The ops of partitions \p ids still to wait for (not released); with
 * \p release_waiting, those waiting out a retry delay (stored retryable)
 * are released first; with \p release_all, every unfinished one is. */
static size_t revoked_ops(struct pipeline *pl, const int32_t *ids, size_t n,
                          bool release_waiting, bool release_all)
{
    size_t left = 0;
    char e[DD_ERRSTR_SIZE];
    for (size_t b = 0; b < CONSUMER_OPMAP_BUCKETS; b++) {
        struct opctx *o = pl->opmap[b];
        while (o) {
            struct opctx *next = o->hnext;
            if (in_set(ids, n, o->partition)) {
                struct store_op op;
                bool found = false;
                /* a shadow op not written yet has no lease to give up and
                 * may have its result in flight: it drains like a stored
                 * one */
                bool holds = !o->stored && !o->rec_unwritten;
                if (holds && release_all) {
                    op_release(pl, o);
                } else if (holds && release_waiting &&
                           !store_op_get(pl->store, o->op_id, dd_now_ms(),
                                         &op, &found, e, sizeof(e)) &&
                           found && op.state == STORE_OP_RETRYABLE) {
                    op_release(pl, o);
                } else {
                    left++;
                }
            }
            o = next;
        }
    }
    return left;
}

/* Held messages of partitions \p ids are dropped: their next owner consumes
 * them again. */
static void drop_blocked(struct pipeline *pl, const int32_t *ids, size_t n)
{
    struct blocked **pp = &pl->blocked;
    while (*pp) {
        struct blocked *b = *pp;
        if (!in_set(ids, n, b->pm->m.partition)) {
            pp = &b->next;
            continue;
        }
        *pp = b->next;
        pl->n_blocked--;
        job_destroy(b->job);
        free(b->pm);
        free(b);
    }
}

/* One turn of the pipeline's outgoing side while a revoke waits. */
static void revoke_turn(struct pipeline *pl, int wait_ms)
{
    if (pl->fetch)
        consumer_drain_fetched(pl, wait_ms);
    producer_poll(pl->h->producer, pl->fetch ? 0 : wait_ms);
    consumer_out_producer_check(pl);
    consumer_out_retry_due(pl);
    consumer_shadow_flush(pl);
    consumer_release_durable(pl);
}

static bool hurried(const struct pipeline *pl)
{
    return consumer_stop_hurried(pl);
}

/* Drain the revoked partitions \p ids within rebalance.grace_ms (see the
 * file comment). */
static void revoke_drain(struct pipeline *pl, const int32_t *ids, size_t n)
{
    int64_t t0 = dd_now_ms(), deadline = t0 + pl->cfg->rebalance_grace_ms;
    /* the revoke of a stop (rd_kafka_consumer_close): shutdown.grace_ms
     * was the time to finish; what is left gets a short drain only */
    if (!*pl->opts->run && deadline > t0 + STOP_DRAIN_MS)
        deadline = t0 + STOP_DRAIN_MS;
    int64_t next_check = 0;
    size_t left = 0, first = 0;
    for (;;) {
        int64_t now = dd_now_ms();
        bool check = now >= next_check;
        if (check)
            next_check = now + DRAIN_CHECK_MS;
        left = revoked_ops(pl, ids, n, check, false);
        if (!first)
            first = left;
        if (!left || now >= deadline || hurried(pl))
            break;
        revoke_turn(pl, 5);
    }
    if (left) {
        size_t waiting = revoked_ops(pl, ids, n, false, true);
        log_msg(LOG_WARNING, "consumer",
                "revoke: %zu ops of the revoked partitions did not finish "
                "within %s: %zu released (their next owner takes them at "
                "once), %zu with a result awaiting its acknowledgement",
                left, hurried(pl) ? "the hurried stop" : "its drain",
                left - waiting, waiting);
    }
    drop_blocked(pl, ids, n);
    /* what was produced for them is acknowledged before they are given up
     * (results, changelog records, releases) */
    while (pl->pending_out && dd_now_ms() < deadline && !hurried(pl))
        revoke_turn(pl, 10);
    if (first || pl->pending_out)
        log_msg(LOG_INFO, "consumer",
                "revoke: drained %zu ops in %lld ms; %zu messages "
                "unacknowledged", first, (long long)(dd_now_ms() - t0),
                pl->pending_out);
}

static void on_revoke(struct pipeline *pl, rd_kafka_t *rk,
                      rd_kafka_topic_partition_list_t *parts)
{
    int32_t *ids = partition_ids(parts);
    size_t n = (size_t)parts->cnt;
    bool lost = rd_kafka_assignment_lost(rk);
    if (!lost)
        revoke_drain(pl, ids, n);
    struct partitions_plan plan;
    if (lost)
        partitions_lose(pl->parts, ids, n, &plan);
    else
        partitions_revoke(pl->parts, ids, n, &plan);
    if (plan.n_store)
        consumer_offsets_store(pl, plan.store, plan.n_store);
    checkpoint_unfollow(pl, ids, n, lost);
    if (pl->eos && lost) /* its offsets would be refused (KIP-447) */
        consumer_txn_fail(pl, "assignment lost");
    else if (pl->eos && plan.commit && !hurried(pl))
        consumer_txn_commit(pl, "revoke");
    else if (!pl->eos && plan.commit) /* hurried: not waited for (the close
                                         commits too) */
        rd_kafka_commit(rk, NULL, hurried(pl) ? 1 : 0);
    if (pl->eos)
        consumer_txn_revoked(pl, ids, n);
    if (lost)
        log_msg(LOG_WARNING, "consumer",
                "assignment lost: %d partitions given up without draining or "
                "committing (another member owns them now)", parts->cnt);
    else
        log_msg(LOG_INFO, "consumer", "revoked %d partitions", parts->cnt);
    if (pl->paused) {
        /* leave no application pause behind: librdkafka 2.0.2 keeps it
         * across unassign and assign; the run loop pauses again if it is
         * still at capacity */
        rd_kafka_resume_partitions(rk, parts);
        pl->paused = false;
        pl->at_capacity_ms = 0;
    }
    rd_kafka_assign(rk, NULL);
    metrics_gauge_set(METRICS_PARTITIONS_ASSIGNED, 0);
    partitions_plan_fini(&plan);
    free(ids);
}

/* A cooperative (incremental) rebalance cannot happen: consumer_new()
 * refuses the cooperative assignors; should one come anyway, the process
 * stops at once (exit 1) without taking the partitions: the drain, release
 * and restore here are built for eager revocations of everything. */
void consumer_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t *parts,
                           void *opaque)
{
    struct consumer *c = opaque;
    struct pipeline *pl = c->pl;
    const char *proto = rd_kafka_rebalance_protocol(rk);
    if (proto && !strcmp(proto, "COOPERATIVE")) {
        log_msg(LOG_CRIT, "consumer",
                "rebalance protocol COOPERATIVE (%s of %d partitions): "
                "dedupd's rebalance (drain, release, restore of the "
                "changelog) is built for the eager protocol; stopping "
                "without taking the partitions (exit 1)",
                err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS ? "assignment"
                                                           : "revocation",
                parts->cnt);
        _exit(1); /* crash-safe: unacknowledged jobs are redelivered */
    }
    if (!pl) { /* outside a run: follow the group, decide nothing */
        rd_kafka_assign(rk, err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS
                                ? parts : NULL);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        on_assign(pl, rk, parts);
    else
        on_revoke(pl, rk, parts);
    pl->last_activity_ms = dd_now_ms();
}
