/* Per-partition state of the jobs topic.  See partitions.h for the contract. */
#include "partitions.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "dd.h"

/* One tracked message, in consumption order. */
struct entry {
    int64_t offset;
    bool done;
};

struct part {
    uint32_t epoch;       /* bumped at every assignment and revocation */
    bool assigned;
    bool eof;
    bool dirty;           /* commit_at moved, not handed out yet */
    int64_t commit_at;    /* next offset to store (every earlier one done);
                             -1 until it moves in this epoch */
    struct entry *e;      /* e[head..n) not yet passed by commit_at */
    size_t head, n, cap;
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

void partitions_track(struct partitions *p, int32_t partition, int64_t offset,
                      struct partitions_msg *out)
{
    struct part *t = part_get(p, partition);
    /* compact once the passed prefix is at least half the array */
    if (t->head > 0 && t->head * 2 >= t->n) {
        memmove(t->e, t->e + t->head, (t->n - t->head) * sizeof(*t->e));
        t->n -= t->head;
        t->head = 0;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 1024;
        t->e = dd_xrealloc(t->e, t->cap * sizeof(*t->e), "partition tracker");
    }
    t->e[t->n].offset = offset;
    t->e[t->n].done = false;
    t->n++;
    *out = (struct partitions_msg){partition, t->epoch, offset};
}

bool partitions_done(struct partitions *p, const struct partitions_msg *m)
{
    struct part *t = part_get(p, m->partition);
    if (m->epoch != t->epoch || !t->assigned)
        return false; /* void: revoked, or re-assigned since */
    size_t lo = t->head, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->e[mid].offset < m->offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->n && t->e[lo].offset == m->offset)
        t->e[lo].done = true;
    int64_t at = -1;
    while (t->head < t->n && t->e[t->head].done) {
        at = t->e[t->head].offset + 1;
        t->head++;
    }
    if (at < 0)
        return false;
    commit_move(p, t, at);
    return true;
}

void partitions_decided(struct partitions *p, int32_t partition,
                        int64_t offset)
{
    struct part *t = part_get(p, partition);
    if (t->head == t->n) {
        /* Nothing of this partition is outstanding: the offset moves on at
         * once, with no tracking entry (the replay-storm path). */
        if (t->assigned)
            commit_move(p, t, offset + 1);
        return;
    }
    struct partitions_msg m;
    partitions_track(p, partition, offset, &m);
    partitions_done(p, &m);
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
    return t ? t->n - t->head : 0;
}

void partitions_eof_set(struct partitions *p, int32_t partition, bool eof)
{
    part_get(p, partition)->eof = eof;
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

/* Messages tracked and not done: their completions are void from now on. */
static size_t part_undone(const struct part *t)
{
    size_t k = 0;
    for (size_t i = t->head; i < t->n; i++)
        k += !t->e[i].done;
    return k;
}

void partitions_assign(struct partitions *p, const int32_t *ids, size_t n,
                       struct partitions_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    for (size_t i = 0; i < n; i++) {
        struct part *t = part_get(p, ids[i]);
        if (t->assigned) /* assigned again without a revoke in between */
            plan->n_void += part_undone(t);
        t->epoch++;
        t->assigned = true;
        t->eof = false;
        t->dirty = false;
        t->commit_at = -1;
        t->head = t->n = 0;
    }
    p->ever_assigned = true;
    plan->ready = true;
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
    for (size_t i = 0; i < n; i++) {
        struct part *t = part_get(p, ids[i]);
        if (t->assigned)
            plan->n_void += part_undone(t);
        t->assigned = false;
        t->epoch++;
    }
}

void partitions_plan_fini(struct partitions_plan *plan)
{
    free(plan->store);
    plan->store = NULL;
    plan->n_store = 0;
}
