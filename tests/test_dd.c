/*
 * test_dd.c - the small helpers of dd.h: the batch scratch (dd_scratch_*),
 * whose reuse is what keeps the pipeline's per-batch arrays off malloc.
 */
#include <check.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dd.h"

START_TEST(test_dd_fmt_matches_printf)
{
    static const int64_t v[] = {0, 1, -1, 9, 10, -10, 99, 100, 12345,
                                -987654321, INT64_MAX, INT64_MIN,
                                INT64_MAX - 1, INT64_MIN + 1, 1000000000000};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char a[DD_FMT_INT_MAX], b[64];
        size_t n = dd_fmt_i64(a, v[i]);
        snprintf(b, sizeof(b), "%lld", (long long)v[i]);
        ck_assert_str_eq(a, b);
        ck_assert_uint_eq(n, strlen(b));
    }
    static const uint64_t u[] = {0, 7, 10, 18446744073709551615ULL,
                                 9223372036854775808ULL};
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
        char a[DD_FMT_INT_MAX], b[64];
        size_t n = dd_fmt_u64(a, u[i]);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)u[i]);
        ck_assert_str_eq(a, b);
        ck_assert_uint_eq(n, strlen(b));
    }
}
END_TEST

START_TEST(test_dd_strlcpy_cuts_and_terminates)
{
    char d[6];
    memset(d, 'x', sizeof(d));
    ck_assert_uint_eq(dd_strlcpy(d, "abc", sizeof(d)), 3);
    ck_assert_str_eq(d, "abc");
    ck_assert_uint_eq(dd_strlcpy(d, "abcdefgh", sizeof(d)), 8);
    ck_assert_str_eq(d, "abcde"); /* as snprintf(d, 6, "%s", ...) */
    ck_assert_uint_eq(dd_strlcpy(d, "", sizeof(d)), 0);
    ck_assert_str_eq(d, "");
    d[0] = 'q';
    ck_assert_uint_eq(dd_strlcpy(d, "zz", 0), 2); /* nothing written */
    ck_assert_int_eq(d[0], 'q');
    ck_assert_uint_eq(dd_strlcpy(d, "zz", 1), 2);
    ck_assert_str_eq(d, "");
}
END_TEST

static bool aligned(const void *p)
{
    return (uintptr_t)p % alignof(max_align_t) == 0;
}

/* The first batch allocates beyond the (empty) kept block; the reset keeps
 * room for twice that, and a second batch of the same size is served from
 * the kept block alone, at the same addresses. */
START_TEST(test_dd_scratch_reused_after_the_first_batch)
{
    struct dd_scratch sc = {0};
    void *a = dd_scratch_alloc(&sc, 1000);
    unsigned char *b = dd_scratch_calloc(&sc, 300, 7);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert(aligned(a) && aligned(b));
    ck_assert_ptr_null(sc.base); /* nothing kept yet */
    ck_assert_ptr_nonnull(sc.more);
    for (size_t i = 0; i < 2100; i++)
        ck_assert_uint_eq(b[i], 0);
    memset(a, 0xab, 1000);
    memset(b, 0xcd, 2100);
    dd_scratch_reset(&sc);
    ck_assert_ptr_null(sc.more);
    ck_assert_uint_ge(sc.cap, 2 * (1000 + 2100));
    ck_assert_uint_eq(sc.used, 0);

    unsigned char *base = sc.base;
    unsigned char *a2 = dd_scratch_alloc(&sc, 1000);
    unsigned char *b2 = dd_scratch_calloc(&sc, 300, 7);
    ck_assert_ptr_eq(a2, base);
    ck_assert(b2 >= a2 + 1000 && b2 + 2100 <= base + sc.cap); /* disjoint */
    ck_assert(aligned(b2));
    ck_assert_ptr_null(sc.more); /* no malloc this time */
    for (size_t i = 0; i < 2100; i++)
        ck_assert_uint_eq(b2[i], 0);
    memset(a2, 0x11, 1000);
    memset(b2, 0x22, 2100);
    for (size_t i = 0; i < 1000; i++) /* neither array wrote the other */
        ck_assert_uint_eq(a2[i], 0x11);
    for (size_t i = 0; i < 2100; i++)
        ck_assert_uint_eq(b2[i], 0x22);
    dd_scratch_reset(&sc);
    ck_assert_ptr_eq(sc.base, base); /* kept as it was */

    /* a third batch gets the same memory again, and calloc zeroes what the
     * second one left there */
    ck_assert_ptr_eq(dd_scratch_alloc(&sc, 1000), a2);
    unsigned char *b3 = dd_scratch_calloc(&sc, 300, 7);
    ck_assert_ptr_eq(b3, b2);
    for (size_t i = 0; i < 2100; i++)
        ck_assert_uint_eq(b3[i], 0);
    ck_assert_ptr_null(sc.more);
    dd_scratch_reset(&sc);
    dd_scratch_fini(&sc);
    ck_assert_ptr_null(sc.base);
    ck_assert_uint_eq(sc.cap, 0);
}
END_TEST

/* A batch larger than the kept block goes on in blocks of its own, whose
 * memory stays valid until the reset; the kept block then grows, but never
 * past DD_SCRATCH_KEEP_MAX. */
START_TEST(test_dd_scratch_grows_to_a_bound)
{
    struct dd_scratch sc = {0};
    void *p = dd_scratch_alloc(&sc, 64);
    dd_scratch_reset(&sc);
    size_t cap = sc.cap;
    ck_assert_uint_ge(cap, 64);
    unsigned char *x = dd_scratch_alloc(&sc, cap); /* more than is left */
    unsigned char *y = dd_scratch_alloc(&sc, 5000);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert(y < sc.base || y >= sc.base + sc.cap);
    memset(x, 1, cap);
    memset(y, 2, 5000);
    ck_assert_uint_eq(x[cap - 1], 1); /* neither overwrote the other */
    ck_assert_uint_eq(y[0], 2);
    dd_scratch_reset(&sc);
    ck_assert_uint_ge(sc.cap, cap + 5000);
    (void)p;

    void *big = dd_scratch_alloc(&sc, DD_SCRATCH_KEEP_MAX + 1);
    ck_assert_ptr_nonnull(big);
    dd_scratch_reset(&sc);
    ck_assert_uint_eq(sc.cap, DD_SCRATCH_KEEP_MAX);
    /* refused sizes leave the scratch as it was */
    ck_assert_ptr_null(dd_scratch_alloc(&sc, SIZE_MAX));
    ck_assert_ptr_null(dd_scratch_calloc(&sc, SIZE_MAX / 2, 3));
    ck_assert_uint_eq(sc.used, 0);
    ck_assert_ptr_null(sc.more);
    dd_scratch_fini(&sc);
}
END_TEST

/* A batch begun while another holds the scratch (a nested or re-entered
 * one) gets memory of its own, so the outer batch's arrays survive the
 * inner one's end. */
START_TEST(test_dd_scratch_take_nested_gets_its_own)
{
    struct dd_scratch sc = {0};
    struct dd_scratch l1, l2;
    struct dd_scratch *outer = dd_scratch_take(&sc, &l1);
    ck_assert_ptr_eq(outer, &sc);
    char *o = dd_scratch_alloc(outer, 32);
    strcpy(o, "outer batch");
    struct dd_scratch *inner = dd_scratch_take(&sc, &l2);
    ck_assert_ptr_eq(inner, &l2);
    char *in = dd_scratch_alloc(inner, 32);
    strcpy(in, "inner batch");
    dd_scratch_give(&sc, inner);
    ck_assert(sc.busy);
    ck_assert_str_eq(o, "outer batch");
    dd_scratch_give(&sc, outer);
    ck_assert(!sc.busy);
    ck_assert_ptr_eq(dd_scratch_take(&sc, &l1), &sc); /* free again */
    dd_scratch_give(&sc, &sc);
    dd_scratch_fini(&sc);
}
END_TEST

Suite *dd_suite(void)
{
    Suite *s = suite_create("dd");
    TCase *tc = tcase_create("scratch");
    tcase_add_test(tc, test_dd_scratch_reused_after_the_first_batch);
    tcase_add_test(tc, test_dd_scratch_grows_to_a_bound);
    tcase_add_test(tc, test_dd_scratch_take_nested_gets_its_own);
    tcase_add_test(tc, test_dd_fmt_matches_printf);
    tcase_add_test(tc, test_dd_strlcpy_cuts_and_terminates);
    suite_add_tcase(s, tc);
    return s;
}
