/* Unit tests of partitions.c: the per-partition done tracking, the commit
 * point (only over a prefix of done offsets), the assignment epochs (a
 * revoked or re-assigned partition voids late completions) and the rebalance
 * decisions, with exact offsets.  No Kafka: partitions are plain ids. */

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
    partitions_eof_set(P, 1, false);   /* a message polled after the EOF */
    ck_assert(!partitions_all_eof(P));

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

    TCase *te = tcase_create("epochs");
    tcase_add_checked_fixture(te, setup, teardown);
    tcase_add_test(te, test_partitions_late_completion_after_revoke_is_void);
    tcase_add_test(te, test_partitions_reassignment_gets_a_new_epoch_and_empty_tracker);
    tcase_add_test(te, test_partitions_assign_without_revoke_voids_what_was_tracked);
    suite_add_tcase(s, te);

    TCase *tr = tcase_create("rebalance_decisions");
    tcase_add_checked_fixture(tr, setup, teardown);
    tcase_add_test(tr, test_partitions_assign_plan_reports_ready_and_commits_nothing);
    tcase_add_test(tr, test_partitions_revoke_plan_stores_every_move_then_gives_up);
    tcase_add_test(tr, test_partitions_revoke_with_nothing_moved_stores_nothing);
    tcase_add_test(tr, test_partitions_all_eof_over_assigned_partitions_only);
    suite_add_tcase(s, tr);
    return s;
}
