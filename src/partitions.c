/* Per-partition state of the jobs topic.  See partitions.h for the contract. */
#include "partitions.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "dd.h"

/* One entry of a partition's queue: a tracked message, in consumption
 * order. */
struct entry {
    int64_t offset;
    bool done;
};

/* A partition's queue is a ring of cap entries (a power of two, or 0): the
 * entry of sequence number s is e[s & (cap - 1)] for head <= s < tail. */
struct part {
    uint32_t epoch;       /* bumped at every assignment and revocation */
    bool assigned;
    bool eof;
    bool dirty;           /* commit_at moved, not handed out yet */
    int64_t commit_at;    /* next offset to store (the last popped entry's
                             offset + 1); -1 until it moves in this epoch */
    struct entry *e;
    uint64_t head;        /* seq of the first entry not yet popped */
    uint64_t tail;        /* seq of the next entry tracked */
    size_t cap;
    size_t undone;        /* entries in [head, tail) not done */
};

struct partitions {
    struct part *v;       /* indexed by partition id */
    size_t n;
    bool dirty;           /* some part is dirty */
    bool ever_assigned;
};

struct partitions *partitions_new(void)
{
    return dd_xcalloc(1, sizeof(struct partitions), "partitions");
}

void partitions_destroy(struct partitions *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i].e);
    free(p->v);
    free(p);
}

/* The state of \p partition, created (unassigned, epoch 0) on first use. */
static struct part *part_get(struct partitions *p, int32_t partition)
{
    assert(partition >= 0);
    if ((size_t)partition >= p->n) {
        size_t n = (size_t)partition + 1;
        p->v = dd_xrealloc(p->v, n * sizeof(*p->v), "partitions");
        memset(p->v + p->n, 0, (n - p->n) * sizeof(*p->v));
        for (size_t i = p->n; i < n; i++)
            p->v[i].commit_at = -1;
        p->n = n;
    }
    return &p->v[partition];
}

/* Read-only lookup: NULL for a partition never seen. */
static const struct part *part_find(const struct partitions *p,
                                    int32_t partition)
{
    return partition >= 0 && (size_t)partition < p->n ? &p->v[partition]
                                                       : NULL;
}

static void commit_move(struct partitions *p, struct part *t, int64_t at)
{
    t->commit_at = at;
    t->dirty = true;
    p->dirty = true;
}

/* Double \p t's ring, keeping each entry at its sequence number's slot. */
static void ring_grow(struct part *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    struct entry *e = dd_xcalloc(cap, sizeof(*e), "partition tracker");
    for (uint64_t s = t->head; s != t->tail; s++)
        e[s & (cap - 1)] = t->e[s & (t->cap - 1)];
    free(t->e);
    t->e = e;
    t->cap = cap;
}

/* Append an entry at the tail of \p t's queue; returns its seq. */
static uint64_t ring_push(struct part *t, int64_t offset, bool done)
{
    if (t->tail - t->head == t->cap)
        ring_grow(t);
    struct entry *x = &t->e[t->tail & (t->cap - 1)];
    x->offset = offset;
    x->done = done;
    t->undone += !done;
    return t->tail++;
}

void partitions_track(struct partitions *p, int32_t partition, int64_t offset,
                      struct partitions_msg *out)
{
    struct part *t = part_get(p, partition);
    uint64_t seq = ring_push(t, offset, false);
    *out = (struct partitions_msg){partition, t->epoch, seq, offset};
}

/* Pop the done prefix of \p t's queue; move the commit point past its last
 * entry.  Returns true when something was popped. */
static bool pop_done_prefix(struct partitions *p, struct part *t)
{
    bool popped = false;
    int64_t at = -1;
    while (t->head != t->tail) {
        const struct entry *x = &t->e[t->head & (t->cap - 1)];
        if (!x->done)
            break;
        at = x->offset + 1;
        t->head++;
        popped = true;
    }
    if (popped)
        commit_move(p, t, at);
    return popped;
}

bool partitions_done(struct partitions *p, const struct partitions_msg *m)
{
    struct part *t = part_get(p, m->partition);
    if (m->epoch != t->epoch || !t->assigned)
        return false; /* void: revoked, or re-assigned since */
    if (m->seq < t->head || m->seq >= t->tail)
        return false; /* popped already (reported twice), or not ours */
    struct entry *x = &t->e[m->seq & (t->cap - 1)];
    if (x->done)
        return false; /* reported twice */
    x->done = true;
    t->undone--;
    if (m->seq != t->head)
        return false; /* behind an entry not done: just marked */
    return pop_done_prefix(p, t);
}

void partitions_decided(struct partitions *p, int32_t partition,
                        int64_t offset)
{
    struct part *t = part_get(p, partition);
    if (!t->assigned)
        return; /* its completion would be void */
    if (t->head == t->tail) {
        /* Nothing of this partition is outstanding: the offset moves on at
         * once, with no queue entry (the replay-storm path). */
        commit_move(p, t, offset + 1);
        return;
    }
    /* Behind outstanding work: a done entry, passed with the prefix. */
    ring_push(t, offset, true);
}

bool partitions_commit_pending(const struct partitions *p)
{
    return p->dirty;
}

size_t partitions_commit_take(struct partitions *p,
                              struct partitions_offset *out, size_t cap)
{
    assert(cap >= 1);
    size_t k = 0;
    if (!p->dirty)
        return 0;
    for (size_t i = 0; i < p->n; i++) {
        struct part *t = &p->v[i];
        if (!t->dirty)
            continue;
        if (k == cap)
            return k; /* p->dirty stays set: the rest on the next call */
        t->dirty = false;
        if (t->assigned)
            out[k++] = (struct partitions_offset){(int32_t)i, t->commit_at};
    }
    p->dirty = false;
    return k;
}

int64_t partitions_commit_point(const struct partitions *p, int32_t partition)
{
    const struct part *t = part_find(p, partition);
    return t ? t->commit_at : -1;
}

uint32_t partitions_epoch(const struct partitions *p, int32_t partition)
{
    const struct part *t = part_find(p, partition);
    return t ? t->epoch : 0;
}

bool partitions_assigned(const struct partitions *p, int32_t partition)
{
    const struct part *t = part_find(p, partition);
    return t && t->assigned;
}

size_t partitions_outstanding(const struct partitions *p, int32_t partition)
{
    const struct part *t = part_find(p, partition);
    return t ? (size_t)(t->tail - t->head) : 0;
}

void partitions_eof_set(struct partitions *p, int32_t partition, bool eof)
{
    part_get(p, partition)->eof = eof;
}

bool partitions_at_eof(const struct partitions *p, int32_t partition)
{
    const struct part *t = part_find(p, partition);
    return t && t->assigned && t->eof;
}

bool partitions_all_eof(const struct partitions *p)
{
    bool any = false;
    for (size_t i = 0; i < p->n; i++) {
        if (!p->v[i].assigned)
            continue;
        any = true;
        if (!p->v[i].eof)
            return false;
    }
    return any;
}

bool partitions_ever_assigned(const struct partitions *p)
{
    return p->ever_assigned;
}

void partitions_assign(struct partitions *p, const int32_t *ids, size_t n,
                       struct partitions_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    for (size_t i = 0; i < n; i++) {
        struct part *t = part_get(p, ids[i]);
        if (t->assigned) /* assigned again without a revoke in between */
            plan->n_void += t->undone;
        t->epoch++;
        t->assigned = true;
        t->eof = false;
        t->dirty = false;
        t->commit_at = -1;
        /* an empty queue; seqs go on, so no earlier handle names an entry */
        t->head = t->tail;
        t->undone = 0;
    }
    p->ever_assigned = true;
    plan->ready = true;
}

/* The \p n partitions \p ids are given up: no longer assigned, a new epoch
 * (late completions are void); their undone entries counted in \p plan. */
static void give_up(struct partitions *p, const int32_t *ids, size_t n,
                    struct partitions_plan *plan)
{
    for (size_t i = 0; i < n; i++) {
        struct part *t = part_get(p, ids[i]);
        if (t->assigned)
            plan->n_void += t->undone;
        t->assigned = false;
        t->epoch++;
    }
}

void partitions_revoke(struct partitions *p, const int32_t *ids, size_t n,
                       struct partitions_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    /* Every moved commit point is stored and committed before the
     * partitions go; work still in flight drains, and its offsets are no
     * longer ours to store: the next owner sees a duplicate. */
    if (p->dirty) {
        plan->store = dd_xcalloc(p->n, sizeof(*plan->store), "revoke plan");
        plan->n_store = partitions_commit_take(p, plan->store, p->n);
    }
    plan->commit = true;
    give_up(p, ids, n, plan);
}

void partitions_lose(struct partitions *p, const int32_t *ids, size_t n,
                     struct partitions_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    /* Another member owns them already: nothing of theirs is stored or
     * committed.  Their pending moves are dropped by partitions_commit_take
     * (not assigned); other partitions' moves stay pending. */
    give_up(p, ids, n, plan);
}

void partitions_plan_fini(struct partitions_plan *plan)
{
    free(plan->store);
    plan->store = NULL;
    plan->n_store = 0;
}
