/*
 * processing.guarantee exactly_once (DESIGN.md section 6), on the pipeline
 * thread: one transactional producer (transactional.id
 * `<consumer.group_id>-<instance.id>`) holds every message the pipeline
 * produces (results, DLQ and conflict records, changelog records, re-routed
 * jobs) and the consumed offsets, sent with the consumer's group metadata
 * (KIP-447), in one transaction committed every
 * processing.commit_interval_ms, at every revoke and at the stop.
 *
 * Within a transaction the pipeline works as under at_least_once: a delivery
 * report moves the work on (a result's report produces its changelog
 * record, a changelog record's report finishes the op and moves the commit
 * point).  Before the commit every message is delivered and what their
 * reports produce too, so a committed transaction holds each result with
 * its changelog record and only offsets whose work it (or an earlier one)
 * holds.  The local store runs ahead of the last commit in between: an
 * abort, a fenced producer or an unclean exit drops the local copy, which is
 * then restored from the changelog as committed (consumer_txn_store_open);
 * fetched bodies are not reused, decisions never are.
 * See consumer_internal.h.
 */
#include "consumer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dd.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "store.h"

#define TXN_SETTLE_WAIT_MS 100 /* one flush of the settle loop */
#define TXN_CALL_TIMEOUT_MS 5000 /* one send_offsets or commit attempt */
#define TXN_ABORT_TIMEOUT_MS 10000

void consumer_txn_init(struct pipeline *pl)
{
    pl->eos = pl->h->exactly_once;
    if (!pl->eos)
        return;
    pl->n_txn_offsets = pl->clinfo.partitions > 0 ? pl->clinfo.partitions : 0;
    pl->txn_offsets = dd_xcalloc((size_t)pl->n_txn_offsets + 1,
                                 sizeof(*pl->txn_offsets), "transaction");
    for (int32_t i = 0; i < pl->n_txn_offsets; i++)
        pl->txn_offsets[i] = -1;
    const char *fp = getenv("DEDUPD_FAILPOINT_TXN_ABORT_AFTER");
    pl->txn_fail_abort_after = fp && *fp ? atol(fp) : -1;
    pl->txn_next_ms = dd_now_ms() + pl->cfg->processing_commit_interval_ms;
    char e[DD_ERRSTR_SIZE];
    if (producer_txn_begin(pl->h->producer, e, sizeof(e))) {
        pl->fatal = DD_ERR_FATAL;
        dd_errstr_set(pl->fatal_msg, sizeof(pl->fatal_msg),
                      "exactly_once: %s", e);
    }
}

void consumer_txn_fini(struct pipeline *pl)
{
    free(pl->txn_offsets);
    pl->txn_offsets = NULL;
}

void consumer_txn_offsets(struct pipeline *pl,
                          const struct partitions_offset *o, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (o[i].partition >= 0 && o[i].partition < pl->n_txn_offsets) {
            pl->txn_offsets[o[i].partition] = o[i].offset;
            pl->txn_dirty = true;
        }
}

void consumer_txn_assigned(struct pipeline *pl,
                           const rd_kafka_topic_partition_list_t *committed)
{
    for (int i = 0; i < committed->cnt; i++) {
        const rd_kafka_topic_partition_t *p = &committed->elems[i];
        if (p->partition >= 0 && p->partition < pl->n_txn_offsets)
            pl->txn_offsets[p->partition] =
                !p->err && p->offset >= 0 ? p->offset : -1;
    }
}

void consumer_txn_revoked(struct pipeline *pl, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < pl->n_txn_offsets)
            pl->txn_offsets[ids[i]] = -1;
}

void consumer_txn_fail(struct pipeline *pl, const char *cause)
{
    if (!pl->txn_fail[0])
        dd_errstr_set(pl->txn_fail, sizeof(pl->txn_fail), "%s", cause);
}

void consumer_txn_abort(struct pipeline *pl, const char *cause)
{
    char e[DD_ERRSTR_SIZE];
    /* the purged messages' reports only free them from here on */
    pl->closing = true;
    pl->leave_now = true;
    metrics_add(METRICS_TXN_ABORTED, 1);
    dd_err_t err = producer_txn_abort(pl->h->producer, TXN_ABORT_TIMEOUT_MS,
                                      e, sizeof(e));
    if (err) /* the coordinator aborts it at transaction.timeout.ms */
        log_msg(LOG_ERR, "producer", "%s", e);
    pl->h->wipe = err != DD_ERR_FATAL;
    pl->fatal = err == DD_ERR_FATAL ? DD_ERR_FATAL : DD_ERR_STATE;
    dd_errstr_set(pl->fatal_msg, sizeof(pl->fatal_msg),
                  "transaction aborted (%s): %s", cause,
                  pl->h->wipe ? "the local copy is dropped and restored from "
                                "the changelog; the pipeline starts again"
                              : "the producer is fenced: stopping");
    log_msg(LOG_CRIT, "producer", "%s", pl->fatal_msg);
}

/* The producer is fenced (a newer one of the same transactional.id, or the
 * coordinator timed the transaction out while this instance stalled). */
void consumer_txn_fenced(struct pipeline *pl, const char *e)
{
    pl->closing = true;
    pl->leave_now = true;
    pl->fatal = DD_ERR_FATAL;
    dd_errstr_set(pl->fatal_msg, sizeof(pl->fatal_msg),
                  "transactional producer fenced or failed (%s): stopping; "
                  "the next start drops the local copy and restores it", e);
    log_msg(LOG_CRIT, "producer", "%s", pl->fatal_msg);
}

/* Every message of the open transaction delivered, and what their reports
 * produced (changelog records after results) too, within \p deadline.
 * @returns whether it settled. */
static bool txn_settle(struct pipeline *pl, int64_t deadline)
{
    for (;;) {
        consumer_out_retry_due(pl);
        if (producer_flush(pl->h->producer, TXN_SETTLE_WAIT_MS) == DD_OK)
            producer_poll(pl->h->producer, 0);
        consumer_out_producer_check(pl);
        consumer_release_durable(pl);
        if (pl->fatal || pl->txn_fail[0])
            return false;
        if (producer_outq_len(pl->h->producer) == 0 && !pl->retry &&
            pl->pending_out == 0)
            return true;
        if (dd_now_ms() >= deadline)
            return false;
    }
}

/* The offsets to send (every partition owned or being revoked whose
 * position is known), or NULL when none is. */
static rd_kafka_topic_partition_list_t *txn_offset_list(struct pipeline *pl)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int32_t p = 0; p < pl->n_txn_offsets; p++) {
        /* every partition with a position: those of a revoke too (the
         * revoke's commit runs after partitions_revoke gave them up and
         * before consumer_txn_revoked forgets them) */
        if (pl->txn_offsets[p] < 0)
            continue;
        if (!l)
            l = rd_kafka_topic_partition_list_new(pl->n_txn_offsets);
        rd_kafka_topic_partition_list_add(l, pl->cfg->topic_jobs, p)->offset =
            pl->txn_offsets[p];
    }
    return l;
}

/* Call \p what (send_offsets when \p offsets, else commit) until it is not
 * retriable or \p deadline passes.  @returns its result. */
static dd_err_t txn_call(struct pipeline *pl,
                         const rd_kafka_topic_partition_list_t *offsets,
                         int64_t deadline, char *e, size_t esz)
{
    for (;;) {
        dd_err_t err =
            offsets ? producer_txn_send_offsets(pl->h->producer, pl->rk,
                                                offsets, TXN_CALL_TIMEOUT_MS,
                                                e, esz)
                    : producer_txn_commit(pl->h->producer,
                                          TXN_CALL_TIMEOUT_MS, e, esz);
        if (err != DD_ERR_TIMEOUT || dd_now_ms() >= deadline)
            return err;
        log_msg(LOG_WARNING, "producer", "%s; trying again", e);
    }
}

bool consumer_txn_commit(struct pipeline *pl, const char *why)
{
    if (!pl->eos || pl->fatal)
        return false;
    int64_t now = dd_now_ms();
    pl->txn_next_ms = now + pl->cfg->processing_commit_interval_ms;
    if (pl->txn_fail[0]) {
        consumer_txn_abort(pl, pl->txn_fail);
        return false;
    }
    int64_t deadline = now + pl->cfg->processing_transaction_timeout_ms / 2;
    if (!txn_settle(pl, deadline)) {
        if (!pl->fatal)
            consumer_txn_abort(pl, pl->txn_fail[0]
                                       ? pl->txn_fail
                                       : "its messages were not delivered "
                                         "within half the transaction "
                                         "timeout");
        return false;
    }
    consumer_flush_offsets(pl);
    if (!pl->txn_dirty)
        return true;
    char e[DD_ERRSTR_SIZE];
    rd_kafka_topic_partition_list_t *offsets = txn_offset_list(pl);
    dd_err_t err = offsets ? txn_call(pl, offsets, deadline, e, sizeof(e))
                           : DD_OK;
    if (offsets)
        rd_kafka_topic_partition_list_destroy(offsets);
    if (!err && pl->txn_fail_abort_after > 0 &&
        pl->txn_commits + 1 >= (uint64_t)pl->txn_fail_abort_after) {
        unsetenv("DEDUPD_FAILPOINT_TXN_ABORT_AFTER"); /* this run only */
        pl->txn_fail_abort_after = -1;
        dd_errstr_set(e, sizeof(e), "failpoint DEDUPD_FAILPOINT_TXN_ABORT_AFTER "
                      "at commit %llu", (unsigned long long)pl->txn_commits + 1);
        err = DD_ERR_STATE;
    }
    if (!err)
        err = txn_call(pl, NULL, deadline, e, sizeof(e));
    if (err == DD_ERR_FATAL) {
        consumer_txn_fenced(pl, e);
        return false;
    }
    if (err) { /* abortable, or retriable past half the timeout */
        consumer_txn_abort(pl, e);
        return false;
    }
    pl->txn_dirty = false;
    pl->txn_commits++;
    metrics_add(METRICS_TXN_COMMITTED, 1);
    log_msg(LOG_DEBUG, "producer", "transaction %llu committed (%s)",
            (unsigned long long)pl->txn_commits, why);
    err = producer_txn_begin(pl->h->producer, e, sizeof(e));
    if (err) {
        consumer_txn_fenced(pl, e);
        return false;
    }
    return true;
}

void consumer_txn_tick(struct pipeline *pl)
{
    if (!pl->eos || pl->fatal)
        return;
    if (pl->txn_fail[0])
        consumer_txn_abort(pl, pl->txn_fail);
    else if (dd_now_ms() >= pl->txn_next_ms)
        consumer_txn_commit(pl, "interval");
}

/* ---- the local copy and the producer --------------------------------------- */

/* Write \p path (empty) and make it durable (file and directory fsync'd). */
static dd_err_t marker_write(const char *path, char *errstr,
                             size_t errstr_size)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || fsync(fd) != 0) {
        dd_errstr_set(errstr, errstr_size, "exactly_once marker %s: %s",
                      path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return DD_ERR_IO;
    }
    close(fd);
    char *dir = dd_xstrdup(path, "marker");
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    free(dir);
    return DD_OK;
}

dd_err_t consumer_txn_store_open(const struct store_conf *sc,
                                 struct store **out, char **marker,
                                 char *errstr, size_t errstr_size)
{
    size_t n = strlen(sc->path) + sizeof(".eos-open");
    char *m = dd_xmalloc(n, "marker");
    snprintf(m, n, "%s.eos-open", sc->path);
    dd_err_t err = DD_OK;
    if (access(m, F_OK) == 0) {
        log_msg(LOG_WARNING, "store",
                "exactly_once: unclean exit of the last run (%s is there): "
                "the local copy %s may hold uncommitted decisions; dropping "
                "it, the changelog restores it", m, sc->path);
        err = store_drop(sc->path, errstr, errstr_size);
    }
    if (!err)
        err = store_open(sc, out, errstr, errstr_size);
    if (!err) {
        err = marker_write(m, errstr, errstr_size);
        if (err) {
            store_close(*out);
            *out = NULL;
        }
    }
    if (err) {
        free(m);
        return err;
    }
    *marker = m;
    return DD_OK;
}

void consumer_txn_store_closed(char *marker, bool clean)
{
    if (marker && clean && unlink(marker) != 0 && errno != ENOENT)
        log_msg(LOG_WARNING, "store", "exactly_once marker %s: %s", marker,
                strerror(errno));
    free(marker);
}

dd_err_t consumer_txn_producer_new(const struct cfg *cfg,
                                   struct producer **out, char *errstr,
                                   size_t errstr_size)
{
    size_t n = strlen(cfg->group_id) + strlen(cfg->instance_id) + 2;
    char *id = dd_xmalloc(n, "transactional.id");
    snprintf(id, n, "%s-%s", cfg->group_id, cfg->instance_id);
    int timeout = (int)cfg->processing_transaction_timeout_ms + 30000;
    dd_err_t err = producer_new_txn(cfg, consumer_out_dr, id, timeout, out,
                                    errstr, errstr_size);
    if (!err)
        log_msg(LOG_INFO, "producer",
                "exactly_once: transactional.id %s, transactions every %lld "
                "ms (timeout %lld ms)", id,
                (long long)cfg->processing_commit_interval_ms,
                (long long)cfg->processing_transaction_timeout_ms);
    free(id);
    return err;
}
