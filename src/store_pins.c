/*
 * store_pins.c: the outbox entries that name their body instead of holding
 * it (store_codec.h, record OUTBOX_REF), and the floor of their completion
 * times, which the bodies' TTL filter (store_db.c) never drops a body at or
 * above.  A pending entry's body was written with it, at its completion
 * time t, with expires_at = t + the validators TTL >= t >= the floor, so
 * no pending entry loses its body to compaction however long the broker
 * keeps it waiting (issue 13: the page is written once; DESIGN.md
 * section 4).
 *
 * Two arrays, each sorted and consumed from its head: the pins (seq ->
 * second of completion) in seq order, where the acknowledgements mostly
 * arrive in order, and a count per second, whose first live entry is the
 * floor.  Removing a pin marks it; the heads step over marked pins and
 * empty seconds, and an array whose marked entries outnumber its live ones
 * is compacted, so one entry pending for days costs no more than itself.
 */
#include "store_internal.h"

#include <stdlib.h>
#include <string.h>

#define PIN_BUCKET_MS 1000 /* the floor's resolution */
#define PIN_DEAD INT64_MIN

/* The second of \p t_ms; times before the epoch (a corrupt entry's) count
 * as 0, so bucket * PIN_BUCKET_MS never overflows. */
static int64_t bucket_of(int64_t t_ms)
{
    return t_ms > 0 ? t_ms / PIN_BUCKET_MS : 0;
}

/* Under mu: drop the removed pins and the empty seconds once they
 * outnumber the live ones (amortized O(1) per removal). */
static void compact(struct store_pins *p)
{
    size_t span = p->n - p->head;
    if (span > 64 && span - p->live > p->live) {
        size_t w = 0;
        for (size_t i = p->head; i < p->n; i++)
            if (p->pins[i].bucket != PIN_DEAD)
                p->pins[w++] = p->pins[i];
        p->head = 0;
        p->n = w;
    }
    size_t bspan = p->bn - p->bhead;
    if (bspan > 64 && bspan - p->blive > p->blive) {
        size_t w = 0;
        for (size_t i = p->bhead; i < p->bn; i++)
            if (p->buckets[i].count)
                p->buckets[w++] = p->buckets[i];
        p->bhead = 0;
        p->bn = w;
    }
}

void store_pins_init(struct store_pins *p)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    atomic_init(&p->floor_ms, INT64_MIN); /* before the open's scan */
}

void store_pins_destroy(struct store_pins *p)
{
    pthread_mutex_destroy(&p->mu);
    free(p->pins);
    free(p->buckets);
}

/* Room for one more element at the end of an array consumed from *head:
 * slide the live part down when the head passed half, else grow. */
static bool room(void **v, size_t elem, size_t *head, size_t *n, size_t *cap)
{
    if (*n < *cap)
        return true;
    if (*head > *cap / 2) {
        memmove(*v, (char *)*v + *head * elem, (*n - *head) * elem);
        *n -= *head;
        *head = 0;
        return true;
    }
    size_t c = *cap ? *cap * 2 : 64;
    void *w = realloc(*v, c * elem);
    if (!w)
        return false;
    *v = w;
    *cap = c;
    return true;
}

/* Under mu: the floor from the first second still counted. */
static void floor_update(struct store_pins *p)
{
    while (p->bhead < p->bn && p->buckets[p->bhead].count == 0)
        p->bhead++;
    if (p->bhead == p->bn)
        p->bhead = p->bn = 0;
    int64_t f = p->bhead < p->bn ? p->buckets[p->bhead].bucket * PIN_BUCKET_MS
                                 : INT64_MAX;
    if (p->ready)
        atomic_store(&p->floor_ms, f);
}

/* Under mu: the count of second \p b, created when absent (NULL: out of
 * memory). */
static struct store_pin_bucket *bucket_get(struct store_pins *p, int64_t b)
{
    size_t i = p->bn;
    while (i > p->bhead && p->buckets[i - 1].bucket > b)
        i--;
    if (i > p->bhead && p->buckets[i - 1].bucket == b)
        return &p->buckets[i - 1];
    size_t at = i - p->bhead;
    if (!room((void **)&p->buckets, sizeof(*p->buckets), &p->bhead, &p->bn,
              &p->bcap))
        return NULL;
    i = p->bhead + at;
    memmove(&p->buckets[i + 1], &p->buckets[i],
            (p->bn - i) * sizeof(*p->buckets));
    p->bn++;
    p->buckets[i] = (struct store_pin_bucket){b, 0};
    return &p->buckets[i];
}

/* Under mu: index of the pin of \p seq in [head, n), or n. */
static size_t pin_find(const struct store_pins *p, uint64_t seq)
{
    size_t lo = p->head, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->pins[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && p->pins[lo].seq == seq ? lo : p->n;
}

bool store_pins_add(struct store_pins *p, uint64_t seq, int64_t written_at_ms)
{
    int64_t b = bucket_of(written_at_ms);
    pthread_mutex_lock(&p->mu);
    bool ok = false;
    struct store_pin_bucket *bk = bucket_get(p, b);
    if (!bk)
        goto out;
    /* the position before the room is made: room() may slide the array */
    size_t i = p->n;
    while (i > p->head && p->pins[i - 1].seq > seq)
        i--;
    if (i > p->head && p->pins[i - 1].seq == seq) /* already pinned */
        goto out;
    size_t at = i - p->head;
    if (!room((void **)&p->pins, sizeof(*p->pins), &p->head, &p->n,
              &p->cap))
        goto out;
    i = p->head + at;
    memmove(&p->pins[i + 1], &p->pins[i], (p->n - i) * sizeof(*p->pins));
    p->n++;
    p->pins[i] = (struct store_pin){seq, b};
    p->live++;
    if (bk->count++ == 0)
        p->blive++;
    ok = true;
out:
    floor_update(p); /* drops the second created for nothing */
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void store_pins_remove(struct store_pins *p, uint64_t seq)
{
    pthread_mutex_lock(&p->mu);
    size_t i = pin_find(p, seq);
    if (i < p->n && p->pins[i].bucket != PIN_DEAD) {
        int64_t b = p->pins[i].bucket;
        p->pins[i].bucket = PIN_DEAD;
        size_t lo = p->bhead, hi = p->bn;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (p->buckets[mid].bucket < b)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < p->bn && p->buckets[lo].bucket == b
            && --p->buckets[lo].count == 0)
            p->blive--;
        p->live--;
        while (p->head < p->n && p->pins[p->head].bucket == PIN_DEAD)
            p->head++;
        if (p->head == p->n)
            p->head = p->n = 0;
        floor_update(p);
        compact(p);
    }
    pthread_mutex_unlock(&p->mu);
}

void store_pins_ready(struct store_pins *p)
{
    pthread_mutex_lock(&p->mu);
    p->ready = true;
    floor_update(p);
    pthread_mutex_unlock(&p->mu);
}

size_t store_pins_count(struct store_pins *p)
{
    pthread_mutex_lock(&p->mu);
    size_t c = p->live;
    pthread_mutex_unlock(&p->mu);
    return c;
}

int64_t store_pins_time(struct store_pins *p, uint64_t seq)
{
    pthread_mutex_lock(&p->mu);
    size_t i = pin_find(p, seq);
    int64_t t = i < p->n && p->pins[i].bucket != PIN_DEAD
                    ? p->pins[i].bucket * PIN_BUCKET_MS
                    : INT64_MIN;
    pthread_mutex_unlock(&p->mu);
    return t;
}

size_t store_pins_older(struct store_pins *p, int64_t before_ms,
                        uint64_t *out, size_t max)
{
    size_t k = 0;
    pthread_mutex_lock(&p->mu);
    for (size_t i = p->head; i < p->n && k < max; i++)
        if (p->pins[i].bucket != PIN_DEAD
            && p->pins[i].bucket * PIN_BUCKET_MS < before_ms)
            out[k++] = p->pins[i].seq;
    pthread_mutex_unlock(&p->mu);
    return k;
}
