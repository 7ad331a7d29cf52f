/* The per-host limits' table of the fetch engine (fetch_hosts.h) and the
 * token bucket (fetch_bucket_take, fetch.h). */
#include "fetch_hosts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dd.h"
#include "fetch.h"

#define HOST_BUCKETS 1024

/* Per-host limits: running requests and the token bucket of one host. */
struct fetch_host {
    struct fetch_host *next;
    char *host;
    int inflight;
    struct fetch_bucket bucket;
    int64_t last_ms;
};

struct fetch_hosts {
    struct fetch_hosts_conf conf;
    struct fetch_host *buckets[HOST_BUCKETS];
    size_t n;
    int64_t swept_ms;
};

/* @locality any thread; pure on \p b */
int64_t fetch_bucket_take(struct fetch_bucket *b, int64_t now, int64_t rate_per_min,
                          int64_t burst)
{
    if (rate_per_min <= 0)
        return 0;
    if (burst < 1)
        burst = 1;
    if (b->at_ms == 0) {
        b->tokens = (double)burst;
        b->at_ms = now;
    } else if (now > b->at_ms) {
        b->tokens += (double)(now - b->at_ms) * (double)rate_per_min / 60000.0;
        if (b->tokens > (double)burst)
            b->tokens = (double)burst;
        b->at_ms = now;
    }
    if (b->tokens >= 1.0 - 1e-9) {
        b->tokens -= 1.0;
        return 0;
    }
    double ms = (1.0 - b->tokens) * 60000.0 / (double)rate_per_min;
    int64_t w = (int64_t)ceil(ms - 1e-6); /* float noise must not add 1 ms */
    return w < 1 ? 1 : w;
}

/* @locality the thread that starts the engine */
struct fetch_hosts *fetch_hosts_new(const struct fetch_hosts_conf *conf)
{
    struct fetch_hosts *h = dd_xcalloc(1, sizeof(*h), "per-host limits");
    h->conf = *conf;
    return h;
}

/* @locality the thread that stops the engine */
void fetch_hosts_destroy(struct fetch_hosts *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < HOST_BUCKETS; i++)
        while (h->buckets[i]) {
            struct fetch_host *s = h->buckets[i];
            h->buckets[i] = s->next;
            free(s->host);
            free(s);
        }
    free(h);
}

/* @locality fetch-engine thread */
bool fetch_hosts_enabled(const struct fetch_hosts *h)
{
    return h->conf.max_inflight > 0 || h->conf.rate_per_min > 0;
}

/* The slot of \p host, or NULL.
 * @locality fetch-engine thread */
static struct fetch_host *slot_find(const struct fetch_hosts *h, const char *host)
{
    for (struct fetch_host *s = h->buckets[dd_fnv1a64_str(host) % HOST_BUCKETS];
         s; s = s->next)
        if (!strcmp(s->host, host))
            return s;
    return NULL;
}

/* The slot of \p host, created when missing.
 * @locality fetch-engine thread */
static struct fetch_host *slot_get(struct fetch_hosts *h, const char *host)
{
    struct fetch_host *s = slot_find(h, host);
    if (s)
        return s;
    struct fetch_host **b = &h->buckets[dd_fnv1a64_str(host) % HOST_BUCKETS];
    s = dd_xcalloc(1, sizeof(*s), "per-host slot");
    s->host = dd_xstrdup(host, "per-host slot");
    s->next = *b;
    *b = s;
    h->n++;
    return s;
}

/* @locality fetch-engine thread */
enum fetch_hosts_verdict fetch_hosts_check(struct fetch_hosts *h,
                                           const char *host, int64_t now,
                                           struct fetch_host **slot,
                                           int64_t *wait_ms)
{
    const struct fetch_hosts_conf *c = &h->conf;
    *slot = NULL;
    if (!fetch_hosts_enabled(h))
        return FETCH_HOSTS_GO;
    struct fetch_host *s = slot_get(h, host);
    s->last_ms = now;
    if (c->max_inflight > 0 && s->inflight >= c->max_inflight)
        return FETCH_HOSTS_FULL;
    if (c->rate_per_min > 0) {
        struct fetch_bucket probe = s->bucket;
        int64_t w = fetch_bucket_take(&probe, now, c->rate_per_min, c->burst);
        if (w > 0) {
            *wait_ms = w;
            return FETCH_HOSTS_RATE;
        }
    }
    *slot = s;
    return FETCH_HOSTS_GO;
}

/* @locality fetch-engine thread */
void fetch_hosts_take(struct fetch_hosts *h, struct fetch_host *slot,
                      int64_t now)
{
    if (!slot)
        return;
    if (h->conf.rate_per_min > 0)
        (void)fetch_bucket_take(&slot->bucket, now, h->conf.rate_per_min,
                                h->conf.burst);
    slot->inflight++;
}

/* @locality fetch-engine thread */
void fetch_hosts_release(struct fetch_host *slot)
{
    if (slot)
        slot->inflight--;
}

/* @locality fetch-engine thread */
void fetch_hosts_sweep(struct fetch_hosts *h, int64_t now)
{
    if (now - h->swept_ms < 10000)
        return;
    h->swept_ms = now;
    const struct fetch_hosts_conf *c = &h->conf;
    int64_t idle = 60000;
    if (c->rate_per_min > 0) {
        int64_t refill = c->burst * 60000 / c->rate_per_min + 1;
        if (refill > idle)
            idle = refill;
    }
    for (size_t i = 0; i < HOST_BUCKETS; i++) {
        struct fetch_host **pp = &h->buckets[i];
        while (*pp) {
            struct fetch_host *s = *pp;
            if (s->inflight == 0 && now - s->last_ms > idle) {
                *pp = s->next;
                free(s->host);
                free(s);
                h->n--;
            } else
                pp = &s->next;
        }
    }
}

/* @locality fetch-engine thread */
size_t fetch_hosts_count(const struct fetch_hosts *h)
{
    return h->n;
}

/* @locality fetch-engine thread */
int fetch_hosts_inflight(const struct fetch_hosts *h, const char *host)
{
    struct fetch_host *s = slot_find(h, host);
    return s ? s->inflight : 0;
}
