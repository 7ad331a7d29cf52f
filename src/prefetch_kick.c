/* The prefetch kick: see include/prefetch_kick.h for why and when. */
#include "prefetch_kick.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dd.h"
#include "log.h"
#include "metrics.h"

/* The leader look-up's and the request's timeout (each). */
#define KICK_TIMEOUT_MS 250

struct prefetch_kick {
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue; /* the consumer's (every assigned partition's
                                fetch queue is forwarded to it) */
    int interval_ms;
    /* the consumer's thread only (prefetch_kick_polled) */
    int64_t half_msgs;        /* queued.min.messages / 2 */
    uint64_t half_bytes;      /* queued.max.messages.kbytes * 1024 / 2 */
    uint64_t seen_msgs, seen_bytes; /* for the average value size */
    bool full;                /* the queue held half of a threshold since
                                 the last kick was asked for */
    /* the kick's thread and the poke */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;      /* on CLOCK_MONOTONIC */
    bool poked;               /* under lock */
    bool stop;                /* under lock */
    atomic_uint_fast64_t kicks;
};

/* One kick: ListOffsets ("latest") of the current assignment, one request
 * per leader (librdkafka groups them).  The wake-up is the request itself:
 * an error is of no consequence, logged at debug level.
 * @locality the kick's thread. */
static void kick_once(struct prefetch_kick *k)
{
    rd_kafka_topic_partition_list_t *a = NULL;
    rd_kafka_resp_err_t e = rd_kafka_assignment(k->rk, &a);
    if (!e && a && a->cnt) {
        for (int i = 0; i < a->cnt; i++)
            a->elems[i].offset = -1; /* a timestamp: -1 is the latest */
        e = rd_kafka_offsets_for_times(k->rk, a, KICK_TIMEOUT_MS);
        if (!e) {
            atomic_fetch_add_explicit(&k->kicks, 1, memory_order_relaxed);
            metrics_add(METRICS_PREFETCH_KICKS, 1);
        }
    }
    if (e)
        log_msg(LOG_DEBUG, "consumer", "prefetch kick: %s",
                rd_kafka_err2str(e));
    if (a)
        rd_kafka_topic_partition_list_destroy(a);
}

/* @locality the kick's thread. */
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
        pthread_mutex_unlock(&k->lock);
        kick_once(k);
        /* not again within the interval */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)k->interval_ms * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&k->lock);
        while (!k->stop &&
               pthread_cond_timedwait(&k->cond, &k->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

/* A numeric property of \p rk's configuration, \p dflt when unreadable. */
static int64_t conf_int(rd_kafka_t *rk, const char *name, int64_t dflt)
{
    char v[32];
    size_t size = sizeof(v);
    if (rd_kafka_conf_get(rd_kafka_conf(rk), name, v, &size) !=
        RD_KAFKA_CONF_OK)
        return dflt;
    char *end;
    long long x = strtoll(v, &end, 10);
    return end != v && x > 0 ? (int64_t)x : dflt;
}

struct prefetch_kick *prefetch_kick_start(rd_kafka_t *rk, int interval_ms)
{
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    if (!q) {
        log_msg(LOG_WARNING, "consumer", "prefetch kick: the consumer has "
                "no consumer queue (no group.id): off");
        return NULL;
    }
    struct prefetch_kick *k = dd_xcalloc(1, sizeof(*k), "prefetch kick");
    k->rk = rk;
    k->queue = q;
    k->interval_ms = interval_ms > 0 ? interval_ms : 1;
    /* librdkafka 2.0.2's defaults: 100000 messages, 65536 KB */
    k->half_msgs = conf_int(rk, "queued.min.messages", 100000) / 2;
    if (k->half_msgs < 1)
        k->half_msgs = 1;
    k->half_bytes =
        (uint64_t)conf_int(rk, "queued.max.messages.kbytes", 65536) * 512u;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&k->lock, NULL);
    pthread_cond_init(&k->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&k->thread, NULL, kick_main, k);
    if (rc) {
        log_msg(LOG_WARNING, "consumer", "prefetch kick: no thread (%s): "
                "backlogs drain with librdkafka's fetch pauses",
                strerror(rc));
        pthread_cond_destroy(&k->cond);
        pthread_mutex_destroy(&k->lock);
        rd_kafka_queue_destroy(k->queue);
        free(k);
        return NULL;
    }
    return k;
}

void prefetch_kick_polled(struct prefetch_kick *k,
                          rd_kafka_message_t *const *msgs, size_t n)
{
    if (!k || !n)
        return;
    k->seen_msgs += n;
    for (size_t i = 0; i < n; i++) /* values: what librdkafka counts */
        k->seen_bytes += msgs[i]->len;
    uint64_t avg = k->seen_bytes / k->seen_msgs;
    int64_t len = (int64_t)rd_kafka_queue_length(k->queue);
    /* full: what the queue held before this poll took its n (one poll may
     * take it from the stop threshold to below half); drained: what it
     * holds now */
    int64_t before = len + (int64_t)n;
    if (before >= k->half_msgs || (uint64_t)before * avg >= k->half_bytes)
        k->full = true;
    if (!k->full || len >= k->half_msgs || (uint64_t)len * avg >= k->half_bytes)
        return;
    k->full = false;
    pthread_mutex_lock(&k->lock);
    k->poked = true;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->lock);
}

uint64_t prefetch_kick_stop(struct prefetch_kick *k)
{
    if (!k)
        return 0;
    pthread_mutex_lock(&k->lock);
    k->stop = true;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    uint64_t kicks = (uint64_t)atomic_load(&k->kicks);
    pthread_cond_destroy(&k->cond);
    pthread_mutex_destroy(&k->lock);
    rd_kafka_queue_destroy(k->queue);
    free(k);
    return kicks;
}
