/* The pipeline's outgoing side: results, dead letters, conflict reports and
 * outbox replays, each kept until the broker acknowledges it and sent again
 * on failure; their delivery reports; the results producer's reset after a
 * fatal error.  See consumer_internal.h. */
#include "consumer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dd.h"
#include "key.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "store.h"

#define DLQ_TRUNCATE_BYTES (512 * 1024) /* DLQ prefix kept when refused whole */

void consumer_out_free(struct outmsg *m)
{
    free(m->value_own);
    if (m->op_id != m->key)
        free(m->op_id);
    for (size_t i = 0; i < m->n_hdrs; i++)
        if (m->hval_own & (1u << i))
            free(m->hval[i]);
    free(m); /* and the key and value, unless taken over */
}

/* Put \p m on the retry list, to be sent again in \p delay_ms. */
static void out_retry_later(struct pipeline *pl, struct outmsg *m,
                            int64_t delay_ms)
{
    m->retry_at_ms = dd_now_ms() + delay_ms;
    m->next = pl->retry;
    pl->retry = m;
}

/* The broker refuses a DLQ record whole: keep a prefix and say so (size and
 * digest of the original) rather than lose the record. */
static void out_truncate_dlq(struct outmsg *m, const char *why)
{
    char note[160], digest[KEY_HEX_LEN + 1];
    key_sha256_hex(m->value, m->value_len, digest);
    snprintf(note, sizeof(note), "%zu bytes, sha256 %s", m->value_len, digest);
    log_msg(LOG_WARNING, "producer",
            "DLQ record refused whole (%s): truncating to %d bytes", why,
            DLQ_TRUNCATE_BYTES);
    m->value_len = DLQ_TRUNCATE_BYTES;
    consumer_out_header(m, "dedupd-truncated", note);
}

void consumer_out_send(struct pipeline *pl, struct outmsg *m)
{
    struct producer_header h[5];
    for (size_t i = 0; i < m->n_hdrs; i++) {
        h[i].name = m->hname[i];
        h[i].value = m->hval[i];
    }
    char err[DD_ERRSTR_SIZE];
    int spun = 0;
    for (;;) {
        dd_err_t e = producer_send_to(pl->h->producer, m->topic,
                                      m->partition, m->key, m->key_len,
                                      m->value, m->value_len, true, h,
                                      m->n_hdrs, m, err, sizeof(err));
        if (e == DD_OK) {
            pl->pending_out++;
            pl->txn_dirty = true;
            return;
        }
        if (e == DD_ERR_TRANSIENT) {
            /* the producer's queue is full (a broker outage): serve reports
             * once, then keep it for later rather than spin here, so the
             * pipeline keeps polling its consumer and honours signals */
            if (!spun++) {
                producer_poll(pl->h->producer, 10);
                continue;
            }
            out_retry_later(pl, m, 100);
            return;
        }
        if (e == DD_ERR_STATE) {
            /* the producer is in a fatal state: producer_check recreates it
             * and the retry list sends this again */
            out_retry_later(pl, m, 100);
            return;
        }
        if (m->kind == OUT_DLQ && m->value_len > DLQ_TRUNCATE_BYTES) {
            out_truncate_dlq(m, err);
            for (size_t i = 0; i < m->n_hdrs; i++)
                h[i] = (struct producer_header){m->hname[i], m->hval[i]};
            continue;
        }
        /* Not sendable (too large for the broker, unknown topic): retry later
         * so nothing is lost; the error is visible in the log. */
        log_msg(LOG_ERR, "producer", "%s; retrying in 5 s", err);
        out_retry_later(pl, m, 5000);
        return;
    }
}

struct outmsg *consumer_out_new(struct pipeline *pl, enum out_kind kind,
                                const char *topic, const void *key,
                                size_t key_len, const void *value,
                                size_t value_len)
{
    if (key_len > SIZE_MAX / 2 - sizeof(struct outmsg) ||
        value_len > SIZE_MAX / 2)
        dd_oom("outgoing message");
    struct outmsg *m = dd_xmalloc(sizeof(*m) + key_len + value_len + 2,
                                  "outgoing message");
    memset(m, 0, sizeof(*m));
    m->pl = pl;
    m->kind = kind;
    m->partition = -1;
    m->src_partition = -1;
    m->topic = topic;
    m->key = (char *)(m + 1);
    memcpy(m->key, key, key_len);
    m->key[key_len] = '\0';
    m->key_len = key_len;
    m->value = m->key + key_len + 1;
    memcpy(m->value, value, value_len);
    m->value[value_len] = '\0';
    m->value_len = value_len;
    return m;
}

void consumer_out_header(struct outmsg *m, const char *name,
                         const char *value)
{
    if (m->n_hdrs < sizeof(m->hname) / sizeof(*m->hname)) {
        size_t n = strlen(value) + 1;
        m->hname[m->n_hdrs] = name;
        if (n <= sizeof(m->hbuf) - m->hbuf_used) {
            m->hval[m->n_hdrs] = memcpy(m->hbuf + m->hbuf_used, value, n);
            m->hbuf_used += n;
        } else {
            m->hval[m->n_hdrs] = dd_xstrdup(value, "outgoing header");
            m->hval_own |= 1u << m->n_hdrs;
        }
        m->n_hdrs++;
    }
}

/* The headers of a result (or its replay) \p m. */
static void out_result_headers(struct outmsg *m, const char *op_id,
                               const char *event_key, uint64_t generation)
{
    char gen[DD_FMT_INT_MAX];
    dd_fmt_u64(gen, generation);
    consumer_out_header(m, "idempotency-key", event_key);
    consumer_out_header(m, "dedupd-op-id", op_id);
    consumer_out_header(m, "dedupd-generation", gen);
}

struct outmsg *consumer_out_result(struct pipeline *pl, enum out_kind kind,
                                   const char *op_id, const char *event_key,
                                   uint64_t generation, const void *value,
                                   size_t len)
{
    struct outmsg *m = consumer_out_new(pl, kind, pl->cfg->topic_results,
                                        event_key, strlen(event_key), value,
                                        len);
    out_result_headers(m, op_id, event_key, generation);
    return m;
}

struct outmsg *consumer_out_result_take(struct pipeline *pl,
                                        enum out_kind kind, const char *op_id,
                                        const char *event_key,
                                        uint64_t generation, char **value,
                                        size_t len)
{
    struct outmsg *m = consumer_out_new(pl, kind, pl->cfg->topic_results,
                                        event_key, strlen(event_key), "", 0);
    m->value = m->value_own = *value;
    m->value_len = len;
    *value = NULL;
    out_result_headers(m, op_id, event_key, generation);
    return m;
}

/* \p op finishes once its completion is durable (store.sync), or \p msg
 * is done. */
static void ack_finish(struct pipeline *pl, struct opctx *op, struct pmsg *msg)
{
    if (op) {
        if (store_durable(pl->store) >= op->ticket) {
            consumer_op_finish(pl, op);
        } else {
            op->await_next = pl->await;
            pl->await = op;
        }
    }
    if (msg)
        consumer_msg_done(pl, msg);
}

/* A changelog record was acknowledged (or there was none to write): the
 * outbox entry \p seq goes, then ack_finish.  With an entry, that waits for
 * consumer_out_acks_flush (one store batch for the acknowledgements the
 * loop collected). */
static void changelog_acked(struct pipeline *pl, uint64_t seq,
                            const char *op_id, struct opctx *op,
                            struct pmsg *msg)
{
    if (!seq) {
        ack_finish(pl, op, msg);
        return;
    }
    if (pl->n_acks == pl->cap_acks) {
        pl->cap_acks = pl->cap_acks ? 2 * pl->cap_acks : 256;
        pl->acks = dd_xrealloc(pl->acks, pl->cap_acks * sizeof(*pl->acks),
                               "outbox acknowledgements");
    }
    pl->acks[pl->n_acks++] = (struct outbox_ack){
        .seq = seq, .op_id = dd_xstrdup(op_id, "outbox acknowledgement"),
        .op = op, .msg = msg};
}

/* The shadow ops whose result was acknowledged: each written once, COMPLETE
 * with its result sent and no outbox entry (store_complete_req.acked), all
 * in one store batch; then their changelog records.  A crash before the
 * write re-consumes their jobs (offsets not committed): claimed again, their
 * results produced again under the same event_key, as an outbox replay
 * would. */
static void acked_flush(struct pipeline *pl)
{
    size_t n = pl->n_acked;
    if (!n)
        return;
    pl->n_acked = 0;
    if (pl->closing) /* the end of the run: their jobs are consumed again */
        return;
    struct dd_scratch local, *sc = dd_scratch_take(&pl->scratch, &local);
    struct store_complete_req *req = consumer_scratch(
        sc, n, sizeof(*req), true, "acknowledged shadow ops");
    unsigned char *clog = consumer_scratch(sc, n, STORE_CHANGELOG_VALUE_MAX,
                                           false, "acknowledged shadow ops");
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = pl->acked[i];
        req[i] = (struct store_complete_req){
            .op_id = o->op_id,
            .generation = o->generation,
            .state = STORE_OP_COMPLETE,
            .acked = true,
            .changelog = clog + i * STORE_CHANGELOG_VALUE_MAX,
            .held = &o->rec,
            .held_unwritten = true,
            .written = &o->rec,
        };
    }
    char e[DD_ERRSTR_SIZE];
    if (store_complete_batch(pl->store, req, n, dd_now_ms(), e, sizeof(e)))
        log_msg(LOG_ERR, "store", "writing %zu shadow ops: %s", n, e);
    for (size_t i = 0; i < n; i++) {
        struct opctx *o = pl->acked[i];
        struct log_ctx lc = {pl->cfg->topic_jobs, -1, -1, o->op_id};
        if (req[i].err == DD_ERR_STATE) { /* written by another since */
            log_ctx_msg(LOG_WARNING, "store", &lc, "shadow op not written: %s",
                        req[i].errstr);
            consumer_op_finish(pl, o);
        } else if (req[i].err) { /* its messages stay uncommitted */
            log_ctx_msg(LOG_ERR, "store", &lc, "%s", req[i].errstr);
        } else {
            o->rec_unwritten = false;
            o->stored = true;
            o->ticket = req[i].ticket;
            if (req[i].changelog_len && o->partition >= 0)
                consumer_out_changelog_value(pl, o->partition, o->op_id,
                                             req[i].changelog,
                                             req[i].changelog_len, 0, o, NULL);
            else
                ack_finish(pl, o, NULL);
        }
    }
    dd_scratch_give(&pl->scratch, sc);
}

void consumer_out_acks_flush(struct pipeline *pl)
{
    acked_flush(pl);
    size_t n = pl->n_acks;
    if (!n)
        return;
    pl->n_acks = 0;
    struct dd_scratch local, *sc = dd_scratch_take(&pl->scratch, &local);
    struct store_outbox_ack_req *req = consumer_scratch(
        sc, n, sizeof(*req), true, "outbox acknowledgements");
    for (size_t i = 0; i < n; i++)
        req[i] = (struct store_outbox_ack_req){
            .seq = pl->acks[i].seq,
            .op_id = pl->acks[i].op_id,
            .held = pl->acks[i].op && pl->acks[i].op->rec_held
                        ? &pl->acks[i].op->rec
                        : NULL};
    char e[DD_ERRSTR_SIZE];
    if (store_outbox_ack_batch(pl->store, req, n, e, sizeof(e)))
        log_msg(LOG_ERR, "store", "acknowledging %zu outbox entries: %s", n,
                e);
    for (size_t i = 0; i < n; i++) {
        if (req[i].err == DD_ERR_INVAL)
            log_msg(LOG_ERR, "store", "outbox entry %llu of %.64s: refused",
                    (unsigned long long)req[i].seq, pl->acks[i].op_id);
        free(pl->acks[i].op_id);
        ack_finish(pl, pl->acks[i].op, pl->acks[i].msg);
    }
    dd_scratch_give(&pl->scratch, sc);
}

/* A conflict report was acknowledged: mark it, then record the mark in the
 * changelog; the message is done when that is acknowledged. */
static void out_conflict_acked(struct pipeline *pl, struct outmsg *m)
{
    char e[DD_ERRSTR_SIZE];
    metrics_add(METRICS_CONFLICTS_REPORTED, 1);
    bool first;
    if (store_conflict_mark(pl->store, m->op_id, m->hash, dd_now_ms(), &first,
                            e, sizeof(e))) {
        log_msg(LOG_ERR, "store", "%s", e);
        /* its record goes out anyway: a restore must read it back */
        consumer_checkpoint_stop(pl, m->msg->m.partition,
                                 "a conflict mark was not written locally");
    }
    struct outmsg **pp = &pl->conflicts_inflight;
    while (*pp && *pp != m)
        pp = &(*pp)->next_conflict;
    if (*pp)
        *pp = m->next_conflict;
    char key[STORE_KEY_MAX + STORE_HASH_LEN + 16], v[STORE_KEY_MAX + 200];
    snprintf(key, sizeof(key), "conflict/%s/%s", m->op_id, m->hash);
    int n = snprintf(v, sizeof(v),
                     "{\"first_reported_at\":%lld,\"request_hash\":\"%s\"}",
                     (long long)dd_now_ms(), m->hash);
    consumer_out_changelog(pl, m->msg->m.partition, key, v, (size_t)n,
                           m->msg);
}

/*
 * Delivery report of the results producer: \p opaque is the outmsg, which
 * names its run.  A failed delivery is sent again; an acknowledged one moves
 * its work on (outbox entry deleted, offsets done).
 *
 * Failpoint for the outbox test (tests/integration/it_outbox_replay.sh):
 * DEDUPD_FAILPOINT_EXIT_BEFORE_ACK=N ends the process (_exit 137, as a
 * SIGKILL would) when the broker acknowledged the Nth result of this run,
 * before its outbox entry is deleted: the deterministic form of a kill between
 * the broker's acknowledgement and the local one.
 * @locality pipeline thread (served by producer_poll/flush/purge there).
 */
void consumer_out_dr(void *opaque, dd_err_t err, const char *errtext,
                     int32_t partition, int64_t offset)
{
    struct outmsg *m = opaque;
    struct pipeline *pl = m->pl;
    pl->pending_out--;
    if (pl->closing) { /* the end of the run: freed with the retry list */
        out_retry_later(pl, m, 0);
        return;
    }
    if (err && pl->eos) {
        /* a failed message makes its transaction abortable: never sent
         * again within it (freed with the retry list at the end) */
        char cause[DD_ERRSTR_SIZE];
        dd_errstr_set(cause, sizeof(cause), "delivery to %s failed: %s",
                      m->topic, errtext);
        consumer_txn_fail(pl, cause);
        out_retry_later(pl, m, 3600 * 1000);
        return;
    }
    if (err) {
        if (!pl->purging)
            log_msg(LOG_WARNING, "producer",
                    "delivery to %s failed (%s); retrying", m->topic, errtext);
        out_retry_later(pl, m, 1000);
        return;
    }
    if (pl->fail_exit_before_ack > 0 && m->kind == OUT_RESULT &&
        pl->st->results + 1 >= (uint64_t)pl->fail_exit_before_ack) {
        log_msg(LOG_CRIT, "producer", "failpoint DEDUPD_FAILPOINT_EXIT_BEFORE_ACK: "
                "result %llu acknowledged by the broker; exiting before the "
                "outbox entry is deleted", (unsigned long long)pl->st->results + 1);
        _exit(137);
    }
    switch (m->kind) {
    case OUT_RESULT:
        pl->st->results++;
        metrics_result(m->op->shadow ? METRICS_RESULT_SHADOW
                       : m->op->failed ? METRICS_RESULT_FAILED
                                       : METRICS_RESULT_FETCHED);
        /* The result is on the topic; now the decision's record: the op's
         * messages are done once it is acknowledged (DESIGN.md section 4:
         * a visible record never names a result not on the topic). */
        if (m->op->rec_unwritten) { /* a shadow op: written now, once */
            if (pl->n_acked == pl->cap_acked) {
                pl->cap_acked = pl->cap_acked ? 2 * pl->cap_acked : 256;
                pl->acked = dd_xrealloc(pl->acked,
                                        pl->cap_acked * sizeof(*pl->acked),
                                        "acknowledged shadow ops");
            }
            pl->acked[pl->n_acked++] = m->op;
        } else if (m->op->clog) /* as its completion wrote it: no read */
            consumer_out_changelog_value(pl, m->op->partition, m->op->op_id,
                                         m->op->clog, m->op->clog_len, m->seq,
                                         m->op, NULL);
        else
            consumer_out_changelog_op(pl, m->op->partition, m->op->op_id,
                                      m->seq, m->op, NULL);
        break;
    case OUT_REPLAY:
        pl->st->results++;
        metrics_add(METRICS_OUTBOX_REPLAYED, 1);
        consumer_out_changelog_op(pl, m->src_partition, m->op_id, m->seq,
                                  NULL, NULL);
        break;
    case OUT_DLQ:
        metrics_add(METRICS_DLQ, 1);
        consumer_msg_done(pl, m->msg);
        break;
    case OUT_CONFLICT:
        out_conflict_acked(pl, m);
        break;
    case OUT_CHANGELOG:
        metrics_add(METRICS_CHANGELOG_RECORDS, 1);
        consumer_checkpoint_acked(pl, partition, offset);
        changelog_acked(pl, m->seq, m->op_id, m->op, m->msg);
        break;
    case OUT_REROUTE:
        consumer_msg_done(pl, m->msg);
        break;
    }
    consumer_out_free(m);
}

void consumer_out_changelog(struct pipeline *pl, int32_t partition,
                            const char *key, const void *value, size_t len,
                            struct pmsg *msg)
{
    struct outmsg *m = consumer_out_new(pl, OUT_CHANGELOG, pl->changelog, key,
                                        strlen(key), value, len);
    m->partition = partition;
    m->msg = msg;
    consumer_out_send(pl, m);
}

void consumer_out_changelog_op(struct pipeline *pl, int32_t partition,
                               const char *op_id, uint64_t seq,
                               struct opctx *op, struct pmsg *msg)
{
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t len = 0;
    char e[DD_ERRSTR_SIZE];
    dd_err_t err = partition < 0 ? DD_ERR_STATE
                                 : store_changelog_value(pl->store, op_id, v,
                                                         &len, NULL, e,
                                                         sizeof(e));
    if (err) {
        /* nothing to record (expired, or an op of unknown partition), or
         * the store cannot say: go on as if recorded (the local copy
         * still decides here) */
        if (err != DD_ERR_STATE)
            log_msg(LOG_ERR, "store", "changelog record of %.64s: %s", op_id,
                    e);
        changelog_acked(pl, seq, op_id, op, msg);
        return;
    }
    consumer_out_changelog_value(pl, partition, op_id, v, len, seq, op, msg);
}

void consumer_out_changelog_value(struct pipeline *pl, int32_t partition,
                                  const char *op_id, const void *v,
                                  size_t len, uint64_t seq, struct opctx *op,
                                  struct pmsg *msg)
{
    struct outmsg *m = consumer_out_new(pl, OUT_CHANGELOG, pl->changelog,
                                        op_id, strlen(op_id), v, len);
    m->partition = partition;
    m->seq = seq;
    m->op = op;
    m->msg = msg;
    m->op_id = m->key; /* the key is the op_id */
    consumer_out_send(pl, m);
}

void consumer_out_retry_due(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
    struct outmsg **pp = &pl->retry;
    while (*pp) {
        struct outmsg *m = *pp;
        if (m->retry_at_ms <= now) {
            *pp = m->next;
            m->next = NULL;
            consumer_out_send(pl, m);
        } else
            pp = &m->next;
    }
}

bool consumer_out_conflict_inflight(struct pipeline *pl, const char *op_id,
                                    const char *hash)
{
    for (struct outmsg *m = pl->conflicts_inflight; m; m = m->next_conflict)
        if (!strcmp(m->op_id, op_id) && !strcmp(m->hash, hash))
            return true;
    return false;
}

/*
 * A fatal producer error (librdkafka's idempotent producer before 2.3.0 can
 * hit one after a broker disconnect, librdkafka issue 4438; DESIGN.md section
 * 6): the producer accepts nothing more.  Purge it (every message it holds
 * comes back through dr_cb onto the retry list), destroy it and send them
 * again through a new one.  Results keep their event_key, so a copy that had
 * reached the topic before the error is dropped downstream; nothing is lost,
 * since offsets move only on acknowledgements.
 *
 * Failpoint for the test of this path (tests/integration/it_producer_fatal.sh):
 * DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER=N raises one fatal error
 * (rd_kafka_test_fatal_error) once N results were acknowledged, at a moment
 * when messages are in flight.
 */
static void producer_reset(struct pipeline *pl)
{
    int64_t now = dd_now_ms();
    if (now < pl->reset_retry_at_ms)
        return;
    pl->reset_retry_at_ms = now + 1000;
    size_t held = pl->pending_out;
    char e[DD_ERRSTR_SIZE];
    /* every report is served before the old producer goes, or its messages
     * (and their ops' offsets) would be lost track of */
    pl->purging = true;
    dd_err_t err = producer_replace(&pl->h->producer, pl->cfg,
                                    consumer_out_dr, e, sizeof(e));
    pl->purging = false;
    if (err) {
        log_msg(LOG_ERR, "producer", "fatal producer error: recreating the "
                "producer: %s; trying again in 1 s", e);
        return;
    }
    metrics_add(METRICS_PRODUCER_RESETS, 1);
    log_msg(LOG_ERR, "producer",
            "fatal producer error: producer recreated; %zu messages it held "
            "(%zu still unacknowledged) are sent again",
            held, pl->pending_out);
}

void consumer_out_producer_check(struct pipeline *pl)
{
    if (pl->fail_fatal_after >= 0 && pl->pending_out > 0 &&
        pl->st->results >= (uint64_t)pl->fail_fatal_after) {
        pl->fail_fatal_after = -1;
        if (producer_test_fatal(pl->h->producer, "failpoint "
                                "DEDUPD_FAILPOINT_PRODUCER_FATAL_AFTER"))
            log_msg(LOG_WARNING, "producer", "failpoint: no fatal error raised");
    }
    if (!producer_fatal(pl->h->producer))
        return;
    if (pl->eos) { /* a transactional producer is never replaced: fenced */
        if (!pl->fatal)
            consumer_txn_fenced(pl, "fatal producer error");
        return;
    }
    producer_reset(pl);
}

