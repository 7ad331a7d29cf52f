/*
 * The pipeline's ways out (consumer_internal.h), apart from the loop itself:
 *   - a first SIGTERM: no longer ready; the loop finishes what is in flight
 *     within shutdown.grace_ms, then run_leave flushes, commits, and the
 *     consumer's close drains the revoked partitions (rebalance.grace_ms);
 *   - a second SIGTERM (opts->hurry): leave now.  No long flush (at most
 *     CONSUMER_HURRY_FLUSH_MS for what is in flight), no fsync, no
 *     synchronous commit, a close without the revoke's drain (it checks
 *     pl->leave_now), the job API's waits cut short.  Nothing is lost:
 *     offsets only moved on acknowledgements, the ops in flight keep a lease
 *     of this run (void for the next run of the instance), unacknowledged
 *     results stay in the outbox and the changelog records follow them;
 *   - a failed store write (disk full, I/O error) or WAL fsync: stop
 *     claiming and fetching, publish the results already stored (and their
 *     changelog records), commit what is done, and fail the run naming the
 *     cause and the number of ops abandoned.
 */
#include <librdkafka/rdkafka.h>

#include "api.h"
#include "config.h"
#include "consumer_internal.h"
#include "dd.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "store.h"

/* A hurried stop waits this long for what is already in flight. */
#define CONSUMER_HURRY_FLUSH_MS 300
/* A failed store waits at most this long (or shutdown.grace_ms when
 * shorter) for the acknowledgements of the results it already stored. */
#define CONSUMER_STORE_FAILED_WAIT_MS 10000

int64_t consumer_stop_begin(struct pipeline *pl)
{
    if (pl->api)
        api_ready_set(pl->api, false);
    metrics_gauge_set(METRICS_READY, 0);
    log_msg(LOG_INFO, "consumer",
            "stopping: finishing %zu ops in flight (grace %lld ms)", pl->n_ops,
            (long long)pl->cfg->shutdown_grace_ms);
    pl->stop_at_ms = dd_now_ms() + pl->cfg->shutdown_grace_ms;
    return pl->stop_at_ms;
}

void consumer_stop_poll(struct pipeline *pl)
{
    if (!pl->stop_paused) {
        /* no new work while stopping; the poll keeps the member in its
         * group (max.poll.interval.ms) while the ops finish */
        pl->stop_paused = true;
        rd_kafka_topic_partition_list_t *a = NULL;
        if (!rd_kafka_assignment(pl->rk, &a) && a) {
            rd_kafka_pause_partitions(pl->rk, a);
            rd_kafka_topic_partition_list_destroy(a);
        }
    }
    /* a message fetched before the pause is left to the next owner: it is
     * not tracked, so no offset passes it */
    rd_kafka_message_t *m = rd_kafka_consumer_poll(pl->rk, 0);
    if (m)
        rd_kafka_message_destroy(m);
}

bool consumer_stop_hurried(const struct pipeline *pl)
{
    return pl->leave_now || (pl->opts->hurry && *pl->opts->hurry);
}

void consumer_stop_hurry(struct pipeline *pl)
{
    pl->leave_now = true;
    log_msg(LOG_WARNING, "consumer",
            "second signal: leaving now: %zu ops in flight keep their lease "
            "(the next run takes them over), %zu messages unacknowledged "
            "(their results are replayed from the outbox)",
            pl->n_ops, pl->pending_out);
}

bool consumer_stop_store_broken(struct pipeline *pl, char *cause,
                           size_t cause_size)
{
    if (store_write_failed(pl->store, cause, cause_size))
        return true;
    if (!store_sync_failed(pl->store))
        return false;
    dd_errstr_set(cause, cause_size, "the WAL fsync failed (see the log)");
    return true;
}

/* Results stored and produced, not yet done: acknowledged messages still
 * awaited (pending, or on the retry list). */
static bool out_pending(const struct pipeline *pl)
{
    return pl->pending_out || pl->retry;
}

dd_err_t consumer_stop_store_failed(struct pipeline *pl, const char *cause,
                                    char *errstr, size_t errstr_size)
{
    pl->leave_now = true; /* no revoke drain at the close */
    if (pl->api)
        api_ready_set(pl->api, false);
    metrics_gauge_set(METRICS_READY, 0);
    int64_t wait = pl->cfg->shutdown_grace_ms;
    if (wait > CONSUMER_STORE_FAILED_WAIT_MS)
        wait = CONSUMER_STORE_FAILED_WAIT_MS;
    int64_t end = dd_now_ms() + wait;
    /* No claim, no fetch taken back (its completion could not be written):
     * only the outgoing side, until what was stored is acknowledged. */
    while (out_pending(pl) && dd_now_ms() < end &&
           !(pl->opts->hurry && *pl->opts->hurry)) {
        producer_poll(pl->h->producer, 10);
        consumer_out_producer_check(pl);
        consumer_out_retry_due(pl);
        consumer_release_durable(pl);
        consumer_flush_offsets(pl);
    }
    consumer_release_durable(pl);
    consumer_flush_offsets(pl);
    /* the counts first: the cause (RocksDB's text) may be cut short */
    dd_errstr_set(errstr, errstr_size,
                  "store write failed, stopped: %zu ops abandoned (their jobs "
                  "are redelivered to the next run), %zu messages "
                  "unacknowledged: %s",
                  pl->n_ops, pl->pending_out, cause);
    return DD_ERR_IO;
}

void consumer_stop_leave(struct pipeline *pl, dd_err_t err)
{
    struct producer *prod = pl->h->producer;
    bool hurried = pl->opts->hurry && *pl->opts->hurry;
    /* within the stop's grace (+1 s): what is still unacknowledged then is
     * in the outbox, replayed at the next start */
    int64_t flush_ms = 10000;
    if (pl->stop_at_ms) {
        flush_ms = pl->stop_at_ms - dd_now_ms() + 1000;
        flush_ms = flush_ms < 1000 ? 1000 : flush_ms > 10000 ? 10000 : flush_ms;
    }
    if (producer_flush(prod, hurried ? CONSUMER_HURRY_FLUSH_MS : (int)flush_ms))
        log_msg(LOG_WARNING, "producer",
                "%d messages unacknowledged at exit; their outbox entries are "
                "replayed at the next start", producer_outq_len(prod));
    producer_poll(prod, 0);
    /* The results acknowledged last wait for their fsync: make it now, so
     * their offsets are committed with the others (not when hurried, nor
     * after a failed store: never fsync again after a failed write). */
    if (!err && !hurried) {
        char se[DD_ERRSTR_SIZE];
        if (store_sync_now(pl->store, se, sizeof(se)))
            log_msg(LOG_ERR, "store", "%s", se);
    }
    consumer_release_durable(pl);
    consumer_flush_offsets(pl);
    /* exactly_once: the last transaction (not after a failure or when
     * hurried: the next start drops the copy) */
    if (pl->eos) {
        if (!err && !hurried)
            consumer_txn_commit(pl, "stop");
        return;
    }
    /* hurried: the commit goes out, nobody waits for it (the close commits
     * the stored offsets again) */
    rd_kafka_commit(pl->rk, NULL, hurried ? 1 : 0);
}

/* ---- the run's figures ---------------------------------------------------- */

void consumer_stats_print(const struct consumer_stats *st, FILE *fp)
{
    double secs = st->last_msg_ms > st->first_msg_ms
                      ? (double)(st->last_msg_ms - st->first_msg_ms) / 1000.0
                      : 0.0;
    fprintf(fp,
            "{\"consumed\":%llu,\"new\":%llu,\"reclaimed\":%llu,"
            "\"duplicates\":%llu,\"duplicates_inflight\":%llu,"
            "\"conflicts\":%llu,\"conflicts_reported\":%llu,\"invalid\":%llu,"
            "\"misrouted\":%llu,\"results\":%llu,\"failed\":%llu,"
            "\"replayed_outbox\":%llu,\"fast_path\":%llu,\"fetch_attempts\":%llu,"
            "\"rotations\":%llu,\"throttled\":%llu,\"bytes\":%llu,"
            "\"single_flight\":%llu,\"not_modified\":%llu,\"prefetch_kicks\":%llu,"
            "\"seconds\":%.3f,\"messages_per_second\":%.1f,"
            "\"pipeline_cpu_seconds\":%.3f,"
            "\"pipeline_cpu_us_per_message\":%.1f}\n",
            (unsigned long long)st->consumed, (unsigned long long)st->new_ops,
            (unsigned long long)st->reclaimed,
            (unsigned long long)st->duplicates,
            (unsigned long long)st->duplicates_inflight,
            (unsigned long long)st->conflicts,
            (unsigned long long)st->conflicts_reported,
            (unsigned long long)st->invalid, (unsigned long long)st->misrouted,
            (unsigned long long)st->results, (unsigned long long)st->failed,
            (unsigned long long)st->replayed_outbox,
            (unsigned long long)st->fast_path,
            (unsigned long long)st->fetch_attempts,
            (unsigned long long)st->rotations,
            (unsigned long long)st->throttled, (unsigned long long)st->bytes,
            (unsigned long long)st->single_flight,
            (unsigned long long)st->not_modified,
            (unsigned long long)st->prefetch_kicks, secs,
            secs > 0 ? (double)st->consumed / secs : 0.0, st->pipeline_cpu_s,
            st->consumed ? st->pipeline_cpu_s * 1e6 / (double)st->consumed
                         : 0.0);
}
