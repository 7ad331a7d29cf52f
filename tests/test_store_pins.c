/*
 * test_store_pins.c - the pins of outbox entries that name their body
 * (src/store_pins.c, internal to the store): the floor is the first second
 * of a pending completion, whatever the order of adds and removals.
 */
#include <check.h>
#include <stdint.h>

#include "../src/store_internal.h"

static int64_t floor_of(struct store_pins *p)
{
    return atomic_load(&p->floor_ms);
}

START_TEST(test_store_pins_floor_is_the_oldest_pending_second)
{
    struct store_pins p;
    store_pins_init(&p);
    ck_assert(store_pins_add(&p, 5, 7500));
    /* before the open's scan is done, nothing may be dropped */
    ck_assert_int_eq(floor_of(&p), INT64_MIN);
    store_pins_ready(&p);
    ck_assert_int_eq(floor_of(&p), 7000);
    /* seqs out of order, times out of order (two threads' batches) */
    ck_assert(store_pins_add(&p, 3, 9100));
    ck_assert(store_pins_add(&p, 9, 4999));
    ck_assert(store_pins_add(&p, 4, 12000));
    ck_assert_int_eq(floor_of(&p), 4000);
    ck_assert_uint_eq(store_pins_count(&p), 4);
    /* pinned twice: counted once */
    ck_assert(!store_pins_add(&p, 9, 4999));
    ck_assert_uint_eq(store_pins_count(&p), 4);
    store_pins_remove(&p, 9);
    ck_assert_int_eq(floor_of(&p), 7000);
    store_pins_remove(&p, 9); /* again: nothing */
    store_pins_remove(&p, 77); /* never pinned: nothing */
    ck_assert_int_eq(floor_of(&p), 7000);
    store_pins_remove(&p, 5);
    ck_assert_int_eq(floor_of(&p), 9000);
    store_pins_remove(&p, 3);
    ck_assert_int_eq(floor_of(&p), 12000);
    store_pins_remove(&p, 4);
    ck_assert_int_eq(floor_of(&p), INT64_MAX);
    ck_assert_uint_eq(store_pins_count(&p), 0);
    store_pins_destroy(&p);
}
END_TEST

/* Many entries acknowledged about in order, as a run does: the arrays
 * slide and grow, and the floor stays the oldest pending second. */
START_TEST(test_store_pins_survive_a_long_run_in_about_ack_order)
{
    struct store_pins p;
    store_pins_init(&p);
    store_pins_ready(&p);
    const uint64_t n = 20000;
    uint64_t next_ack = 1;
    for (uint64_t seq = 1; seq <= n; seq++) {
        ck_assert(store_pins_add(&p, seq, (int64_t)seq * 100));
        /* keep about 300 pending; acknowledge two at a time, swapped */
        if (seq >= next_ack + 300) {
            store_pins_remove(&p, next_ack + 1);
            store_pins_remove(&p, next_ack);
            next_ack += 2;
            ck_assert_int_eq(floor_of(&p),
                             (int64_t)(next_ack * 100) / 1000 * 1000);
        }
    }
    ck_assert_uint_eq(store_pins_count(&p), n - next_ack + 1);
    for (uint64_t seq = n; seq >= next_ack; seq--)
        store_pins_remove(&p, seq);
    ck_assert_int_eq(floor_of(&p), INT64_MAX);
    store_pins_destroy(&p);
}
END_TEST

/* One entry pending while 200,000 others come and go: the arrays are
 * compacted, not grown by each removal. */
START_TEST(test_store_pins_one_stuck_entry_does_not_grow_the_arrays)
{
    struct store_pins p;
    store_pins_init(&p);
    store_pins_ready(&p);
    ck_assert(store_pins_add(&p, 1, 1000)); /* never acknowledged */
    for (uint64_t seq = 2; seq < 200000; seq++) {
        ck_assert(store_pins_add(&p, seq, (int64_t)seq * 10));
        store_pins_remove(&p, seq);
    }
    ck_assert_uint_eq(store_pins_count(&p), 1);
    ck_assert_int_eq(floor_of(&p), 1000);
    ck_assert_uint_le(p.cap, 256);
    ck_assert_uint_le(p.bcap, 256);
    ck_assert_int_eq(store_pins_time(&p, 1), 1000);
    ck_assert_int_eq(store_pins_time(&p, 2), INT64_MIN);
    uint64_t old[4];
    ck_assert_uint_eq(store_pins_older(&p, 1000, old, 4), 0);
    ck_assert_uint_eq(store_pins_older(&p, 2000, old, 4), 1);
    ck_assert_uint_eq(old[0], 1);
    store_pins_destroy(&p);
}
END_TEST

Suite *store_pins_suite(void)
{
    Suite *s = suite_create("store_pins");
    TCase *tc = tcase_create("pins");
    /* loops of 20,000-200,000 rounds: 2-3 s under ASan, near Check's 4 s
     * default on a slower machine */
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_store_pins_floor_is_the_oldest_pending_second);
    tcase_add_test(tc, test_store_pins_survive_a_long_run_in_about_ack_order);
    tcase_add_test(tc, test_store_pins_one_stuck_entry_does_not_grow_the_arrays);
    suite_add_tcase(s, tc);
    return s;
}
