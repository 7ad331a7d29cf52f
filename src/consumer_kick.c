/*
 * The prefetch kick (consumer_internal.h): wakes librdkafka's fetcher when
 * the pipeline drains a backlog, because librdkafka 2.0.2 does not.
 *
 * Why: a partition whose local fetch queue holds queued.min.messages or
 * queued.max.messages.kbytes (both counted over the queue it is forwarded
 * to, the consumer's) is "not fetchable"; its broker thread decides again
 * only when it next wakes, for an op, socket IO or its 1 s block timeout
 * (rdkafka_fetcher.c rd_kafka_toppar_fetch_decide, rdkafka_broker.c
 * rd_kafka_broker_consumer_serve: a not-fetchable partition's backoff is
 * RD_TS_MAX).  Consuming from the queue wakes nothing.  So a pipeline that
 * drains the queue in less than that second waits for the rest of it with
 * no fetch in flight (librdkafka issue #2879; 2.2.0 added
 * fetch.queue.backoff.ms for it).  Measured in bench row 1 (issue 13): idle
 * spells of 0.3 s, replays of the same 1M messages between 182k and 325k/s
 * when the raw consumer drained them at 296k to 329k/s.
 *
 * The kick: "any op enqueued on the broker ops queue (rkb_ops) will
 * automatically trigger a wakeup of the broker thread" (rdkafka_broker.c),
 * and a request to a broker is such an op.  rd_kafka_offsets_for_times()
 * of the assigned partitions at "latest" (-1) sends one ListOffsets request
 * to each partition's leader, the broker whose thread fetches it (unless
 * a follower was preferred: client.rack, KIP-392); that thread then runs
 * its fetch decision again.  It blocks for a round trip, so it runs on
 * this module's thread, at most once per interval, and only when the
 * pipeline pokes it: while a backlog drains (poll_batch: from a poll that
 * found a full batch to one that found nothing) and the consumer's queue
 * holds fewer than queued.min.messages / 2.  A steady trickle never pokes;
 * a 1M-message replay kicks 15 to 20 times.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer_internal.h"
#include "dd.h"
#include "log.h"

#define KICK_TIMEOUT_MS 1000 /* one ListOffsets round trip at most */

struct prefetch_kick {
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue; /* the consumer's queue (every partition's
                                fetch queue is forwarded to it) */
    int low_water;           /* poked below it: queued.min.messages / 2 */
    int interval_ms;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool poked; /* under lock */
    bool stop;  /* under lock */
    atomic_bool pending; /* poked and not yet taken: the poke's fast path */
    atomic_uint_fast64_t kicks;
};

/* One kick: ListOffsets ("latest") of the current assignment, grouped by
 * leader by librdkafka.  Errors are of no consequence (the wake-up is the
 * request itself): logged at debug level.
 * @locality the kick thread. */
static void kick_once(struct prefetch_kick *k)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    rd_kafka_resp_err_t e = rd_kafka_assignment(k->rk, &a);
    if (!e && a && a->cnt) {
        for (int i = 0; i < a->cnt; i++)
            a->elems[i].offset = -1; /* a timestamp: -1 is the latest */
        e = rd_kafka_offsets_for_times(k->rk, a, KICK_TIMEOUT_MS);
        if (!e) /* answered: the request went through the broker threads */
            atomic_fetch_add_explicit(&k->kicks, 1, memory_order_relaxed);
    }
    if (e)
        log_msg(LOG_DEBUG, "consumer", "prefetch kick: %s", rd_kafka_err2str(e));
    if (a)
        rd_kafka_topic_partition_list_destroy(a);
}

/* @locality the kick thread. */
static void *kick_main(void *arg)
{
    struct prefetch_kick *k = arg;
    pthread_mutex_lock(&k->lock);
    for (;;) {
        while (!k->poked && !k->stop)
            pthread_cond_wait(&k->cond, &k->lock);
        if (k->stop)
            break;
        k->poked = false;
        atomic_store_explicit(&k->pending, false, memory_order_relaxed);
        pthread_mutex_unlock(&k->lock);
        kick_once(k);
        /* not again within the interval (pokes meanwhile are kept) */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)k->interval_ms * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&k->lock);
        while (!k->stop &&
               pthread_cond_timedwait(&k->cond, &k->lock, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

struct prefetch_kick *prefetch_kick_start(rd_kafka_t *rk, int interval_ms)
{
    struct prefetch_kick *k = dd_xcalloc(1, sizeof(*k), "prefetch kick");
    k->rk = rk;
    k->interval_ms = interval_ms > 0 ? interval_ms : 1;
    /* the count threshold is compared with the forwarded queue's length
     * (rd_kafka_q_len follows the forward): kick while the drain still has
     * half of it to go */
    char v[32];
    size_t vsize = sizeof(v);
    long q = 0;
    if (rd_kafka_conf_get(rd_kafka_conf(rk), "queued.min.messages", v,
                          &vsize) == RD_KAFKA_CONF_OK)
        q = strtol(v, NULL, 10);
    k->low_water = q > 1 ? (int)(q / 2) : 1;
    k->queue = rd_kafka_queue_get_consumer(rk);
    if (!k->queue) { /* not a group consumer: nothing to kick for */
        free(k);
        return NULL;
    }
    pthread_mutex_init(&k->lock, NULL);
    pthread_cond_init(&k->cond, NULL);
    if (pthread_create(&k->thread, NULL, kick_main, k)) {
        /* a backlog's drain is slower without it; nothing is wrong */
        log_msg(LOG_WARNING, "consumer", "prefetch kick: no thread (%s): "
                "backlogs drain with librdkafka's fetch pauses",
                strerror(errno));
        pthread_cond_destroy(&k->cond);
        pthread_mutex_destroy(&k->lock);
        rd_kafka_queue_destroy(k->queue);
        free(k);
        return NULL;
    }
    return k;
}

void prefetch_kick_poke(struct prefetch_kick *k)
{
    if (!k || atomic_load_explicit(&k->pending, memory_order_relaxed) ||
        (int)rd_kafka_queue_length(k->queue) >= k->low_water)
        return;
    atomic_store_explicit(&k->pending, true, memory_order_relaxed);
    pthread_mutex_lock(&k->lock);
    k->poked = true;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->lock);
}

uint64_t prefetch_kick_count(const struct prefetch_kick *k)
{
    return k ? (uint64_t)atomic_load_explicit(
                   &((struct prefetch_kick *)k)->kicks, memory_order_relaxed)
             : 0;
}

void prefetch_kick_stop(struct prefetch_kick *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&k->lock);
    k->stop = true;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    pthread_cond_destroy(&k->cond);
    pthread_mutex_destroy(&k->lock);
    rd_kafka_queue_destroy(k->queue);
    free(k);
}
