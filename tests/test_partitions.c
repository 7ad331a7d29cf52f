/* Unit tests of partitions.c: the per-partition done tracking in consumption
 * order (offsets that go backwards, repeat or skip), the commit point (only
 * over a done prefix of the queue), the assignment epochs (a revoked or
 * re-assigned partition voids late completions) and the rebalance decisions
 * (revoke, lost assignment), with exact offsets.  No Kafka: partitions are
 * plain ids.  Tests that say "old tracker" fail on the tracker that assumed
 * increasing offsets and found a message's entry by a sorted search. */

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "partitions.h"

static struct partitions *P;

static void setup(void)
{
    P = partitions_new();
}

static void teardown(void)
{
    partitions_destroy(P);
    P = NULL;
}

static void assign(const int32_t *ids, size_t n)
{
    struct partitions_plan plan;
    partitions_assign(P, ids, n, &plan);
    partitions_plan_fini(&plan);
}

static void assign1(int32_t id)
{
    assign(&id, 1);
}

/* Take every moved commit point; ck_assert that exactly \p n came out. */
static void take_expect(size_t n, struct partitions_offset *out)
{
    size_t k = partitions_commit_take(P, out, 64);
    ck_assert_uint_eq(k, n);
    ck_assert(!partitions_commit_pending(P));
}

/* ---- done tracking and the commit point ------------------------------------ */

START_TEST(test_partitions_out_of_order_completion_moves_only_over_done_prefix)
{
    assign1(0);
    struct partitions_msg m[4];
    for (int i = 0; i < 4; i++)
        partitions_track(P, 0, 10 + i, &m[i]);
    ck_assert_int_eq(m[2].partition, 0);
    ck_assert_int_eq(m[2].offset, 12);
    ck_assert_uint_eq(m[2].epoch, 1);

    /* 12 and 11 finish first: 10 is not done, nothing moves */
    ck_assert(!partitions_done(P, &m[2]));
    ck_assert(!partitions_done(P, &m[1]));
    ck_assert_int_eq(partitions_commit_point(P, 0), -1);
    ck_assert(!partitions_commit_pending(P));
    ck_assert_uint_eq(partitions_outstanding(P, 0), 4);

    /* 10 finishes: the point passes 10, 11 and 12 at once, stops at 13 */
    ck_assert(partitions_done(P, &m[0]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 13);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 1);
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 0);
    ck_assert_int_eq(o[0].offset, 13);

    ck_assert(partitions_done(P, &m[3]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 14);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);
    take_expect(1, o);
    ck_assert_int_eq(o[0].offset, 14);
}
END_TEST

START_TEST(test_partitions_commit_point_moves_are_handed_out_once)
{
    assign1(2);
    struct partitions_msg a, b;
    partitions_track(P, 2, 100, &a);
    partitions_track(P, 2, 101, &b);
    ck_assert(partitions_done(P, &a));
    ck_assert(partitions_done(P, &b));
    struct partitions_offset o[64];
    /* two moves before a take: one entry, the latest point */
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 2);
    ck_assert_int_eq(o[0].offset, 102);
    take_expect(0, o);
    ck_assert_int_eq(partitions_commit_point(P, 2), 102);
}
END_TEST

START_TEST(test_partitions_reverse_completion_of_many_moves_once_at_the_end)
{
    assign1(0);
    enum { N = 5000 };
    struct partitions_msg *m = calloc(N, sizeof(*m));
    for (int i = 0; i < N; i++)
        partitions_track(P, 0, 7 + i, &m[i]);
    for (int i = N - 1; i > 0; i--)
        ck_assert(!partitions_done(P, &m[i]));
    ck_assert_int_eq(partitions_commit_point(P, 0), -1);
    ck_assert(partitions_done(P, &m[0]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 7 + N);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);
    /* the tracker compacts and goes on: in order now */
    for (int i = 0; i < N; i++) {
        struct partitions_msg x;
        partitions_track(P, 0, 7 + N + i, &x);
        ck_assert(partitions_done(P, &x));
        ck_assert_int_eq(partitions_commit_point(P, 0), 7 + N + i + 1);
    }
    free(m);
}
END_TEST

START_TEST(test_partitions_decided_moves_at_once_only_when_nothing_outstanding)
{
    assign1(0);
    partitions_decided(P, 0, 5);
    ck_assert_int_eq(partitions_commit_point(P, 0), 6);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);

    /* 7 is in flight: a decided 8 waits behind it */
    struct partitions_msg m7;
    partitions_track(P, 0, 7, &m7);
    partitions_decided(P, 0, 8);
    ck_assert_int_eq(partitions_commit_point(P, 0), 6);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 2);
    ck_assert(partitions_done(P, &m7));
    ck_assert_int_eq(partitions_commit_point(P, 0), 9);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);

    /* a partition not assigned moves nothing */
    partitions_decided(P, 1, 3);
    ck_assert_int_eq(partitions_commit_point(P, 1), -1);
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 0);
    ck_assert_int_eq(o[0].offset, 9);
}
END_TEST

START_TEST(test_partitions_commit_take_in_partition_order_within_cap)
{
    const int32_t ids[] = {4, 0, 2};
    assign(ids, 3);
    partitions_decided(P, 4, 40);
    partitions_decided(P, 0, 0);
    partitions_decided(P, 2, 20);
    struct partitions_offset o[2];
    ck_assert_uint_eq(partitions_commit_take(P, o, 2), 2);
    ck_assert_int_eq(o[0].partition, 0);
    ck_assert_int_eq(o[0].offset, 1);
    ck_assert_int_eq(o[1].partition, 2);
    ck_assert_int_eq(o[1].offset, 21);
    ck_assert(partitions_commit_pending(P));
    ck_assert_uint_eq(partitions_commit_take(P, o, 2), 1);
    ck_assert_int_eq(o[0].partition, 4);
    ck_assert_int_eq(o[0].offset, 41);
    ck_assert(!partitions_commit_pending(P));
    ck_assert_uint_eq(partitions_commit_take(P, o, 2), 0);
}
END_TEST

/* ---- consumption order: offsets backwards, repeated, with gaps ------------ */

/* Old tracker: the sorted search finds neither 5 nor 6 nor (once 10 and 11
 * are passed) 12, and the commit point freezes at 12. */
START_TEST(test_partitions_backwards_offsets_keep_consumption_order)
{
    assign1(0);
    const int64_t off[] = {10, 11, 12, 5, 6}; /* a seek back to 5 */
    struct partitions_msg m[5];
    for (int i = 0; i < 5; i++)
        partitions_track(P, 0, off[i], &m[i]);
    ck_assert_int_eq(m[3].offset, 5);

    /* 5 and 6 are done first: they are behind 10, nothing moves */
    ck_assert(!partitions_done(P, &m[3]));
    ck_assert(!partitions_done(P, &m[4]));
    ck_assert(!partitions_done(P, &m[1]));
    ck_assert_int_eq(partitions_commit_point(P, 0), -1);
    ck_assert(partitions_done(P, &m[0]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 12);
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].offset, 12);

    /* 12 done: the point passes 12, 5 and 6 and ends after 6, lower than
     * before (what follows 6 is consumed again and found duplicate) */
    ck_assert(partitions_done(P, &m[2]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 7);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 0);
    ck_assert_int_eq(o[0].offset, 7);
}
END_TEST

/* Old tracker: the done of the second 5 marks the first 5 (same offset),
 * and the commit point passes a message whose work is not done. */
START_TEST(test_partitions_repeated_offset_is_two_entries)
{
    assign1(0);
    struct partitions_msg a, b, c, d;
    partitions_track(P, 0, 5, &a);
    partitions_track(P, 0, 6, &b);
    partitions_track(P, 0, 5, &c); /* consumed again (a seek back) */
    partitions_track(P, 0, 6, &d);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 4);

    ck_assert(!partitions_done(P, &c)); /* a is not done: nothing moves */
    ck_assert_int_eq(partitions_commit_point(P, 0), -1);
    ck_assert(!partitions_done(P, &c)); /* reported twice: ignored */
    ck_assert_uint_eq(partitions_outstanding(P, 0), 4);

    ck_assert(partitions_done(P, &a));
    ck_assert_int_eq(partitions_commit_point(P, 0), 6);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 3);
    ck_assert(!partitions_done(P, &a)); /* popped already: ignored */

    /* b passes b and c: the point ends after c's 5 */
    ck_assert(partitions_done(P, &b));
    ck_assert_int_eq(partitions_commit_point(P, 0), 6);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 1);
    ck_assert(partitions_done(P, &d));
    ck_assert_int_eq(partitions_commit_point(P, 0), 7);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);
}
END_TEST

START_TEST(test_partitions_gaps_are_passed_over)
{
    assign1(0);
    /* a compacted topic or transaction markers: offsets skip */
    const int64_t off[] = {10, 13, 20, 21};
    struct partitions_msg m[4];
    for (int i = 0; i < 4; i++)
        partitions_track(P, 0, off[i], &m[i]);
    ck_assert(!partitions_done(P, &m[1]));
    ck_assert(!partitions_done(P, &m[2]));
    ck_assert(partitions_done(P, &m[0]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 21);
    ck_assert(partitions_done(P, &m[3]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 22);
    partitions_decided(P, 0, 40); /* nothing outstanding: at once */
    ck_assert_int_eq(partitions_commit_point(P, 0), 41);
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].offset, 41);
}
END_TEST

/* Old tracker: after the reset the sorted search over 102..104, 0..2 finds
 * none of them, and the commit point freezes at 102. */
START_TEST(test_partitions_reset_mid_stream_done_out_of_order)
{
    assign1(1);
    struct partitions_msg hi[5], lo[2];
    for (int i = 0; i < 5; i++)
        partitions_track(P, 1, 100 + i, &hi[i]);
    ck_assert(!partitions_done(P, &hi[1]));
    ck_assert(partitions_done(P, &hi[0]));
    ck_assert_int_eq(partitions_commit_point(P, 1), 102);
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].offset, 102);

    /* OFFSET_OUT_OF_RANGE: auto.offset.reset=earliest starts again at 0;
     * 1 is a duplicate decided on the fast path, behind outstanding work */
    partitions_track(P, 1, 0, &lo[0]);
    partitions_decided(P, 1, 1);
    partitions_track(P, 1, 2, &lo[1]);
    ck_assert_uint_eq(partitions_outstanding(P, 1), 6);

    /* the new messages finish first, then the old ones, last to first */
    ck_assert(!partitions_done(P, &lo[1]));
    ck_assert(!partitions_done(P, &lo[0]));
    ck_assert(!partitions_done(P, &hi[4]));
    ck_assert(!partitions_done(P, &hi[3]));
    ck_assert_int_eq(partitions_commit_point(P, 1), 102);
    ck_assert(!partitions_commit_pending(P));
    ck_assert(partitions_done(P, &hi[2]));
    ck_assert_int_eq(partitions_commit_point(P, 1), 3);
    ck_assert_uint_eq(partitions_outstanding(P, 1), 0);
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 1);
    ck_assert_int_eq(o[0].offset, 3);
}
END_TEST

/* Old tracker: the sorted search over 50, 40, 41 finds none of them, and
 * the commit point never moves. */
START_TEST(test_partitions_decided_behind_work_at_lower_offsets)
{
    assign1(0);
    struct partitions_msg a;
    partitions_track(P, 0, 50, &a);
    partitions_decided(P, 0, 40);
    partitions_decided(P, 0, 41);
    ck_assert_int_eq(partitions_commit_point(P, 0), -1);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 3);
    ck_assert(partitions_done(P, &a));
    ck_assert_int_eq(partitions_commit_point(P, 0), 42);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);

    /* nothing outstanding: a lower decided offset moves the point back */
    partitions_decided(P, 0, 7);
    ck_assert_int_eq(partitions_commit_point(P, 0), 8);
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].offset, 8);
}
END_TEST

/* The queue's ring wraps and grows with its head in the middle; entries keep
 * their order and their handles. */
START_TEST(test_partitions_ring_wraps_and_grows_in_consumption_order)
{
    assign1(0);
    enum { N = 5050 };
    struct partitions_msg *m = calloc(N, sizeof(*m));
    /* offsets cycle: 0..99, 0..99, ... (a seek back every 100 messages) */
    for (int i = 0; i < 700; i++)
        partitions_track(P, 0, i % 100, &m[i]);
    for (int i = 0; i < 600; i++)
        ck_assert(partitions_done(P, &m[i]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 100);
    for (int i = 700; i < N; i++) /* wraps, then grows past 1024 */
        partitions_track(P, 0, i % 100, &m[i]);
    ck_assert_uint_eq(partitions_outstanding(P, 0), N - 600);
    for (int i = N - 1; i > 600; i--)
        ck_assert(!partitions_done(P, &m[i]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 100);
    ck_assert(partitions_done(P, &m[600]));
    ck_assert_int_eq(partitions_commit_point(P, 0), (N - 1) % 100 + 1);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 0);
    free(m);
}
END_TEST

/* ---- epochs: revoke and re-assignment ------------------------------------- */

START_TEST(test_partitions_late_completion_after_revoke_is_void)
{
    assign1(0);
    struct partitions_msg m[3];
    for (int i = 0; i < 3; i++)
        partitions_track(P, 0, i, &m[i]);
    ck_assert(partitions_done(P, &m[0]));

    int32_t id = 0;
    struct partitions_plan plan;
    partitions_revoke(P, &id, 1, &plan);
    ck_assert(plan.commit);
    ck_assert(!plan.ready);
    ck_assert_uint_eq(plan.n_store, 1); /* the move not yet handed out */
    ck_assert_int_eq(plan.store[0].partition, 0);
    ck_assert_int_eq(plan.store[0].offset, 1);
    ck_assert_uint_eq(plan.n_void, 2);  /* offsets 1 and 2 in flight */
    partitions_plan_fini(&plan);
    ck_assert(!partitions_assigned(P, 0));
    ck_assert_uint_eq(partitions_epoch(P, 0), 2);

    /* the work of 1 and 2 finishes after the revoke: void */
    ck_assert(!partitions_done(P, &m[1]));
    ck_assert(!partitions_done(P, &m[2]));
    ck_assert_int_eq(partitions_commit_point(P, 0), 1);
    ck_assert(!partitions_commit_pending(P));
}
END_TEST

START_TEST(test_partitions_reassignment_gets_a_new_epoch_and_empty_tracker)
{
    ck_assert_uint_eq(partitions_epoch(P, 3), 0);
    ck_assert(!partitions_ever_assigned(P));
    assign1(3);
    ck_assert_uint_eq(partitions_epoch(P, 3), 1);
    ck_assert(partitions_ever_assigned(P));
    struct partitions_msg old;
    partitions_track(P, 3, 50, &old);
    ck_assert_uint_eq(old.epoch, 1);

    int32_t id = 3;
    struct partitions_plan plan;
    partitions_revoke(P, &id, 1, &plan);
    ck_assert_uint_eq(plan.n_store, 0);
    ck_assert_uint_eq(plan.n_void, 1);
    partitions_plan_fini(&plan);
    ck_assert_uint_eq(partitions_epoch(P, 3), 2);

    partitions_assign(P, &id, 1, &plan);
    ck_assert_uint_eq(plan.n_void, 0); /* voided at the revoke already */
    partitions_plan_fini(&plan);
    ck_assert_uint_eq(partitions_epoch(P, 3), 3);
    ck_assert(partitions_assigned(P, 3));
    ck_assert_int_eq(partitions_commit_point(P, 3), -1);
    ck_assert_uint_eq(partitions_outstanding(P, 3), 0);

    /* the message of epoch 1 completes now: void, even though assigned */
    ck_assert(!partitions_done(P, &old));
    ck_assert_int_eq(partitions_commit_point(P, 3), -1);
    ck_assert(!partitions_commit_pending(P));

    /* the new owner consumes offset 50 again: its own completion counts */
    struct partitions_msg again;
    partitions_track(P, 3, 50, &again);
    ck_assert_uint_eq(again.epoch, 3);
    ck_assert(partitions_done(P, &again));
    ck_assert_int_eq(partitions_commit_point(P, 3), 51);
}
END_TEST

START_TEST(test_partitions_assign_without_revoke_voids_what_was_tracked)
{
    assign1(1);
    struct partitions_msg a, b;
    partitions_track(P, 1, 8, &a);
    partitions_track(P, 1, 9, &b);
    ck_assert(!partitions_done(P, &b));
    int32_t id = 1;
    struct partitions_plan plan;
    partitions_assign(P, &id, 1, &plan);
    ck_assert_uint_eq(plan.n_void, 1); /* 8 (9 was done) */
    ck_assert(plan.ready);
    partitions_plan_fini(&plan);
    ck_assert(!partitions_done(P, &a));
    ck_assert_int_eq(partitions_commit_point(P, 1), -1);
}
END_TEST

/* A handle of an earlier epoch names no entry of the new queue, even at the
 * same offset; nor does a handle with a forged epoch.  Old tracker: an old
 * handle given the current epoch marks the new entry at its offset. */
START_TEST(test_partitions_earlier_epoch_handle_does_not_mark_a_new_entry)
{
    assign1(0);
    struct partitions_msg old, cur;
    partitions_track(P, 0, 7, &old);
    assign1(0); /* assigned again without a revoke: a new epoch */
    partitions_track(P, 0, 7, &cur);
    ck_assert_uint_ne(old.epoch, cur.epoch);
    ck_assert(!partitions_done(P, &old));
    ck_assert_int_eq(partitions_commit_point(P, 0), -1);
    ck_assert_uint_eq(partitions_outstanding(P, 0), 1);
    struct partitions_msg forged = cur;
    forged.epoch = old.epoch;
    ck_assert(!partitions_done(P, &forged));
    forged = old;
    forged.epoch = cur.epoch; /* an old seq under the current epoch */
    ck_assert(!partitions_done(P, &forged));
    ck_assert_uint_eq(partitions_outstanding(P, 0), 1);
    ck_assert(partitions_done(P, &cur));
    ck_assert_int_eq(partitions_commit_point(P, 0), 8);
}
END_TEST

/* ---- rebalance decisions ---------------------------------------------------- */

START_TEST(test_partitions_assign_plan_reports_ready_and_commits_nothing)
{
    const int32_t ids[] = {0, 1};
    struct partitions_plan plan;
    partitions_assign(P, ids, 2, &plan);
    ck_assert(plan.ready);
    ck_assert(!plan.commit);
    ck_assert_uint_eq(plan.n_store, 0);
    ck_assert_ptr_null(plan.store);
    ck_assert_uint_eq(plan.n_void, 0);
    partitions_plan_fini(&plan);
    ck_assert(partitions_assigned(P, 0));
    ck_assert(partitions_assigned(P, 1));
    ck_assert(!partitions_assigned(P, 2));
}
END_TEST

START_TEST(test_partitions_revoke_plan_stores_every_move_then_gives_up)
{
    const int32_t ids[] = {0, 3};
    assign(ids, 2);
    partitions_decided(P, 0, 4);           /* p0 -> 5 */
    struct partitions_msg m[3];
    for (int i = 0; i < 3; i++)
        partitions_track(P, 3, 7 + i, &m[i]);
    ck_assert(partitions_done(P, &m[0]));  /* p3 -> 8 */
    ck_assert(!partitions_done(P, &m[2])); /* done, behind 8 */

    int32_t gone = 3;
    struct partitions_plan plan;
    partitions_revoke(P, &gone, 1, &plan);
    ck_assert(plan.commit);
    ck_assert(!plan.ready);
    ck_assert_uint_eq(plan.n_store, 2);
    ck_assert_int_eq(plan.store[0].partition, 0);
    ck_assert_int_eq(plan.store[0].offset, 5);
    ck_assert_int_eq(plan.store[1].partition, 3);
    ck_assert_int_eq(plan.store[1].offset, 8);
    ck_assert_uint_eq(plan.n_void, 1); /* offset 8; 9 was done */
    partitions_plan_fini(&plan);
    ck_assert_ptr_null(plan.store);
    ck_assert(partitions_assigned(P, 0));
    ck_assert(!partitions_assigned(P, 3));
    ck_assert(!partitions_commit_pending(P));

    /* p0 goes on in its epoch; p3's late completion is void */
    partitions_decided(P, 0, 5);
    ck_assert(!partitions_done(P, &m[1]));
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 0);
    ck_assert_int_eq(o[0].offset, 6);
}
END_TEST

START_TEST(test_partitions_revoke_with_nothing_moved_stores_nothing)
{
    assign1(0);
    partitions_decided(P, 0, 0);
    struct partitions_offset o[64];
    take_expect(1, o); /* handed out before the revoke */
    int32_t id = 0;
    struct partitions_plan plan;
    partitions_revoke(P, &id, 1, &plan);
    ck_assert(plan.commit);
    ck_assert_uint_eq(plan.n_store, 0);
    ck_assert_ptr_null(plan.store);
    ck_assert_uint_eq(plan.n_void, 0);
    partitions_plan_fini(&plan);
}
END_TEST

/* Old behaviour (revoke on a lost assignment): the moved points of the lost
 * partitions are stored and committed. */
START_TEST(test_partitions_lose_plan_stores_and_commits_nothing)
{
    const int32_t ids[] = {0, 3};
    assign(ids, 2);
    partitions_decided(P, 0, 4);           /* p0 -> 5, not handed out */
    struct partitions_msg m[3];
    for (int i = 0; i < 3; i++)
        partitions_track(P, 3, 7 + i, &m[i]);
    ck_assert(partitions_done(P, &m[0]));  /* p3 -> 8, not handed out */

    int32_t gone = 3;
    struct partitions_plan plan;
    partitions_lose(P, &gone, 1, &plan);
    ck_assert(!plan.commit);
    ck_assert(!plan.ready);
    ck_assert_uint_eq(plan.n_store, 0);
    ck_assert_ptr_null(plan.store);
    ck_assert_uint_eq(plan.n_void, 2);     /* offsets 8 and 9 */
    partitions_plan_fini(&plan);
    ck_assert(!partitions_assigned(P, 3));
    ck_assert_uint_eq(partitions_epoch(P, 3), 2);

    /* late completions are void; p3's move is dropped, p0's still pending */
    ck_assert(!partitions_done(P, &m[1]));
    ck_assert(partitions_commit_pending(P));
    struct partitions_offset o[64];
    take_expect(1, o);
    ck_assert_int_eq(o[0].partition, 0);
    ck_assert_int_eq(o[0].offset, 5);

    /* the whole assignment lost (eager: every partition at once) */
    partitions_decided(P, 0, 5);
    gone = 0;
    partitions_lose(P, &gone, 1, &plan);
    ck_assert(!plan.commit);
    ck_assert_uint_eq(plan.n_store, 0);
    ck_assert_uint_eq(plan.n_void, 0);
    partitions_plan_fini(&plan);
    take_expect(0, o);
    ck_assert(!partitions_assigned(P, 0));
}
END_TEST

START_TEST(test_partitions_all_eof_over_assigned_partitions_only)
{
    ck_assert(!partitions_all_eof(P)); /* nothing assigned */
    const int32_t ids[] = {0, 1};
    assign(ids, 2);
    partitions_eof_set(P, 0, true);
    ck_assert(!partitions_all_eof(P));
    partitions_eof_set(P, 7, false);   /* not assigned: does not count */
    partitions_eof_set(P, 1, true);
    ck_assert(partitions_all_eof(P));
    ck_assert(partitions_at_eof(P, 0) && partitions_at_eof(P, 1));
    ck_assert(!partitions_at_eof(P, 7)); /* not assigned */
    partitions_eof_set(P, 1, false);   /* a message polled after the EOF */
    ck_assert(!partitions_all_eof(P));
    ck_assert(!partitions_at_eof(P, 1) && partitions_at_eof(P, 0));

    int32_t one = 1;
    struct partitions_plan plan;
    partitions_revoke(P, &one, 1, &plan);
    partitions_plan_fini(&plan);
    ck_assert(partitions_all_eof(P));  /* only 0 left, at its end */
    assign1(1);                        /* a new assignment is not at its end */
    ck_assert(!partitions_all_eof(P));
    assign1(0);
    partitions_eof_set(P, 1, true);
    ck_assert(!partitions_all_eof(P)); /* 0's EOF was reset by its assign */
}
END_TEST

Suite *partitions_suite(void)
{
    Suite *s = suite_create("partitions");
    TCase *tc = tcase_create("done_tracking");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_partitions_out_of_order_completion_moves_only_over_done_prefix);
    tcase_add_test(tc, test_partitions_commit_point_moves_are_handed_out_once);
    tcase_add_test(tc, test_partitions_reverse_completion_of_many_moves_once_at_the_end);
    tcase_add_test(tc, test_partitions_decided_moves_at_once_only_when_nothing_outstanding);
    tcase_add_test(tc, test_partitions_commit_take_in_partition_order_within_cap);
    suite_add_tcase(s, tc);

    TCase *to = tcase_create("consumption_order");
    tcase_add_checked_fixture(to, setup, teardown);
    tcase_add_test(to, test_partitions_backwards_offsets_keep_consumption_order);
    tcase_add_test(to, test_partitions_repeated_offset_is_two_entries);
    tcase_add_test(to, test_partitions_gaps_are_passed_over);
    tcase_add_test(to, test_partitions_reset_mid_stream_done_out_of_order);
    tcase_add_test(to, test_partitions_decided_behind_work_at_lower_offsets);
    tcase_add_test(to, test_partitions_ring_wraps_and_grows_in_consumption_order);
    suite_add_tcase(s, to);

    TCase *te = tcase_create("epochs");
    tcase_add_checked_fixture(te, setup, teardown);
    tcase_add_test(te, test_partitions_late_completion_after_revoke_is_void);
    tcase_add_test(te, test_partitions_reassignment_gets_a_new_epoch_and_empty_tracker);
    tcase_add_test(te, test_partitions_assign_without_revoke_voids_what_was_tracked);
    tcase_add_test(te, test_partitions_earlier_epoch_handle_does_not_mark_a_new_entry);
    suite_add_tcase(s, te);

    TCase *tr = tcase_create("rebalance_decisions");
    tcase_add_checked_fixture(tr, setup, teardown);
    tcase_add_test(tr, test_partitions_assign_plan_reports_ready_and_commits_nothing);
    tcase_add_test(tr, test_partitions_revoke_plan_stores_every_move_then_gives_up);
    tcase_add_test(tr, test_partitions_revoke_with_nothing_moved_stores_nothing);
    tcase_add_test(tr, test_partitions_lose_plan_stores_and_commits_nothing);
    tcase_add_test(tr, test_partitions_all_eof_over_assigned_partitions_only);
    suite_add_tcase(s, tr);
    return s;
}
