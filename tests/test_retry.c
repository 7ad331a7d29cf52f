/* Unit tests of retry.c: Retry-After (RFC 9110 10.2.3), HTTP-dates (RFC 9110
 * 5.6.7) as validators, the retry plan against a deadline, and full-jitter
 * backoff; field cases C-14 and C-16. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "retry.h"

#define NOW_MS INT64_C(1748779200000) /* 2025-06-01T12:00:00Z (a Sunday) */
#define MAX_MS INT64_C(300000)        /* fetch.retry_after_max_ms default */

static void assert_delay(const char *v, int64_t now_ms, int64_t max_ms,
                         int64_t want)
{
    int64_t d = -12345;
    ck_assert_msg(retry_after_parse(v, now_ms, max_ms, &d),
                  "'%s' should be a valid Retry-After", v);
    ck_assert_msg(d == want, "'%s': delay %lld ms, want %lld", v,
                  (long long)d, (long long)want);
}

static void assert_ignored(const char *v)
{
    int64_t d = -12345;
    ck_assert_msg(!retry_after_parse(v, NOW_MS, MAX_MS, &d),
                  "'%s' should be ignored", v ? v : "(null)");
    ck_assert_msg(d == -12345, "'%s': delay written although ignored",
                  v ? v : "(null)");
}

/* ---- delay-seconds ------------------------------------------------------ */

START_TEST(test_retry_after_seconds)
{
    assert_delay("120", NOW_MS, MAX_MS, 120000);
    assert_delay("1", NOW_MS, MAX_MS, 1000);
    assert_delay("007", NOW_MS, MAX_MS, 7000);
    assert_delay(" 5\t", NOW_MS, MAX_MS, 5000); /* OWS around the value */
}
END_TEST

START_TEST(test_retry_after_seconds_clamped)
{
    assert_delay("301", NOW_MS, MAX_MS, MAX_MS);
    assert_delay("300", NOW_MS, MAX_MS, 300000);
    assert_delay("86400", NOW_MS, 1500, 1500);
    /* overflow-safe: far beyond int64 seconds */
    assert_delay("99999999999999999999999999999999", NOW_MS, MAX_MS, MAX_MS);
    assert_delay("9223372036854775807", NOW_MS, INT64_MAX, INT64_MAX);
    assert_delay("10", NOW_MS, 0, 0);
}
END_TEST

START_TEST(test_retry_after_invalid_ignored)
{
    assert_ignored(NULL);
    assert_ignored("");
    assert_ignored("   ");
    assert_ignored("+5");
    assert_ignored("1.5");
    assert_ignored("5s");
    assert_ignored("5 5");
    assert_ignored("abc");
    assert_ignored("0x10");
    assert_ignored("-0");
}
END_TEST

START_TEST(test_retry_c14_negative_ignored)
{
    /* C-14: "-5" is not delay-seconds: no server delay ... */
    assert_ignored("-5");
    /* ... and the wait before attempt 3 is the normal full-jitter draw for
     * attempt 2 (retry index 1, the second retry): base 1 s, cap 60 s, from
     * [0, 2] s, never negative. */
    const uint64_t rnds[] = { 0, 1, 1999, 2000, 2001, 123456789,
                              UINT64_MAX / 2, UINT64_MAX };
    for (size_t i = 0; i < sizeof(rnds) / sizeof(rnds[0]); i++) {
        int64_t w = retry_backoff_ms(1, 1000, 60000, rnds[i]);
        ck_assert_int_ge(w, 0);
        ck_assert_int_le(w, 2000);
    }
    ck_assert_int_eq(retry_backoff_ms(1, 1000, 60000, 2000), 2000);
    ck_assert_int_eq(retry_backoff_ms(1, 1000, 60000, 2001), 0);
}
END_TEST

/* ---- HTTP-date ---------------------------------------------------------- */

START_TEST(test_retry_c16_http_date_forms)
{
    /* C-16: now + 120 s in the three forms; the case's example instants */
    assert_delay("Sun, 01 Jun 2025 12:02:00 GMT", NOW_MS, MAX_MS, 120000);
    assert_delay("Sunday, 01-Jun-25 12:02:00 GMT", NOW_MS, MAX_MS, 120000);
    assert_delay("Sun Jun  1 12:02:00 2025", NOW_MS, MAX_MS, 120000);
    /* sub-second now: the delay is exact to the millisecond */
    assert_delay("Sun, 01 Jun 2025 12:02:00 GMT", NOW_MS + 400, MAX_MS,
                 119600);
}
END_TEST

START_TEST(test_retry_c16_past_and_zero)
{
    /* C-16: a past date is 0 (never negative, never a wrap-around) */
    assert_delay("Wed, 21 Oct 2015 07:28:00 GMT", NOW_MS, MAX_MS, 0);
    assert_delay("Wednesday, 21-Oct-15 07:28:00 GMT", NOW_MS, MAX_MS, 0);
    assert_delay("Wed Oct 21 07:28:00 2015", NOW_MS, MAX_MS, 0);
    assert_delay("0", NOW_MS, MAX_MS, 0);
    /* the very instant counts as past */
    assert_delay("Sun, 01 Jun 2025 12:00:00 GMT", NOW_MS, MAX_MS, 0);
}
END_TEST

START_TEST(test_retry_c16_live_clock)
{
    /* the same with the real clock, dates formatted by strftime (C locale) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    time_t t = ts.tv_sec + 120;
    struct tm tm;
    gmtime_r(&t, &tm);
    const char *fmts[] = { "%a, %d %b %Y %H:%M:%S GMT",
                           "%A, %d-%b-%y %H:%M:%S GMT",
                           "%a %b %e %H:%M:%S %Y" };
    for (size_t i = 0; i < 3; i++) {
        char v[64];
        int64_t d = -1;
        strftime(v, sizeof(v), fmts[i], &tm);
        ck_assert_msg(retry_after_parse(v, now_ms, MAX_MS, &d), "'%s'", v);
        ck_assert_msg(d >= 119000 && d <= 121000, "'%s': %lld ms", v,
                      (long long)d);
    }
}
END_TEST

START_TEST(test_retry_after_date_clamped)
{
    assert_delay("Fri, 31 Dec 9999 23:59:59 GMT", NOW_MS, MAX_MS, MAX_MS);
    assert_delay("Sun, 01 Jun 2025 13:00:00 GMT", NOW_MS, MAX_MS, MAX_MS);
    assert_delay("Sun, 01 Jun 2025 12:00:01 GMT", NOW_MS, MAX_MS, 1000);
    /* a leap second counts as the next second */
    assert_delay("Sun, 01 Jun 2025 12:00:60 GMT", NOW_MS, MAX_MS, 60000);
}
END_TEST

START_TEST(test_retry_after_rfc850_two_digit_year)
{
    /* RFC 9110 5.6.7: more than 50 years ahead is the previous century */
    assert_delay("Sunday, 06-Nov-94 08:49:37 GMT", NOW_MS, MAX_MS, 0);
    /* 2026 is 1 year ahead: the future */
    assert_delay("Monday, 01-Jun-26 12:00:00 GMT", NOW_MS, INT64_MAX,
                 INT64_C(365) * 86400 * 1000);
}
END_TEST

START_TEST(test_retry_after_date_strict)
{
    assert_ignored("Sun, 1 Jun 2025 12:02:00 GMT");      /* 1-digit day */
    assert_ignored("Sun, 01 Jun 2025 12:02:00 UTC");     /* not GMT */
    assert_ignored("sun, 01 jun 2025 12:02:00 GMT");     /* case-sensitive */
    assert_ignored("Sun,  01 Jun 2025 12:02:00 GMT");    /* double space */
    assert_ignored("Sun, 01 Jun 2025 12:02:00 GMT x");   /* trailing junk */
    assert_ignored("Sun, 31 Jun 2025 12:02:00 GMT");     /* no 31 June */
    assert_ignored("Sat, 29 Feb 2025 12:02:00 GMT");     /* not a leap year */
    assert_ignored("Sun, 01 Jun 2025 24:00:00 GMT");     /* hour 24 */
    assert_ignored("Sun, 01 Jun 2025 12:60:00 GMT");     /* minute 60 */
    assert_ignored("Sun, 01 Jun 2025 12:02 GMT");        /* no seconds */
    assert_ignored("Xyz, 01 Jun 2025 12:02:00 GMT");     /* bad day name */
    assert_ignored("Sun, 01 Foo 2025 12:02:00 GMT");     /* bad month */
    assert_ignored("Sun, 01-Jun-25 12:02:00 GMT");       /* short name, 850 */
    assert_ignored("Sunday, 01-Jun-2025 12:02:00 GMT");  /* 4-digit year, 850 */
    assert_ignored("Sun Jun 1 12:02:00 2025");           /* asctime pad */
    assert_ignored("2025-06-01T12:02:00Z");              /* not an HTTP-date */
    /* leniency kept: a wrong weekday name still means the written instant */
    assert_delay("Mon, 01 Jun 2025 12:02:00 GMT", NOW_MS, MAX_MS, 120000);
    assert_delay("Sat, 29 Feb 2028 12:00:00 GMT", NOW_MS, INT64_MAX,
                 (INT64_C(1835438400) - 1748779200) * 1000);
}
END_TEST

/* ---- HTTP-date as a validator (If-Modified-Since) ------------------------ */

/* \p v parses to \p want_s and formats back as \p imf. */
static void assert_http_date(const char *v, int64_t want_s, const char *imf)
{
    int64_t s = -1;
    ck_assert_msg(retry_http_date_parse(v, NOW_MS, &s), "'%s' is an HTTP-date",
                  v);
    ck_assert_msg(s == want_s, "'%s': %lld s, want %lld", v, (long long)s,
                  (long long)want_s);
    char out[RETRY_HTTP_DATE_SIZE];
    ck_assert(retry_http_date_format(s, out, sizeof(out)));
    ck_assert_str_eq(out, imf);
}

static void assert_not_http_date(const char *v)
{
    int64_t s = -12345;
    ck_assert_msg(!retry_http_date_parse(v, NOW_MS, &s),
                  "'%s' is not an HTTP-date", v ? v : "(null)");
    ck_assert_int_eq(s, -12345);
}

START_TEST(test_http_date_three_forms_to_imf_fixdate)
{
    /* RFC 9110 section 5.6.7's example instant in its three forms */
    const char *imf = "Sun, 06 Nov 1994 08:49:37 GMT";
    assert_http_date(imf, 784111777, imf);
    assert_http_date("Sunday, 06-Nov-94 08:49:37 GMT", 784111777, imf);
    assert_http_date("Sun Nov  6 08:49:37 1994", 784111777, imf);
    assert_http_date(" Sun Nov  6 08:49:37 1994\t", 784111777, imf); /* OWS */
    /* a wrong weekday name keeps the written instant; it is sent right */
    assert_http_date("Mon, 06 Nov 1994 08:49:37 GMT", 784111777, imf);
    /* a leap second is the next second */
    assert_http_date("Sun, 06 Nov 1994 08:49:60 GMT", 784111800,
                     "Sun, 06 Nov 1994 08:50:00 GMT");
    assert_http_date("Thu, 01 Jan 1970 00:00:00 GMT", 0,
                     "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_http_date("Tue, 29 Feb 2028 23:59:59 GMT", 1835481599,
                     "Tue, 29 Feb 2028 23:59:59 GMT");
    assert_http_date("Fri, 31 Dec 9999 23:59:59 GMT", INT64_C(253402300799),
                     "Fri, 31 Dec 9999 23:59:59 GMT");
}
END_TEST

START_TEST(test_http_date_refuses_other_formats)
{
    assert_not_http_date(NULL);
    assert_not_http_date("");
    assert_not_http_date("   ");
    assert_not_http_date("2024-05-01T10:00:00Z");            /* ISO 8601 */
    assert_not_http_date("2024-05-01 10:00:00");
    assert_not_http_date("Wed, 01 May 2024 10:00:00 +0000"); /* RFC 5322 zone */
    assert_not_http_date("Wed, 01 May 2024 10:00:00 UTC");
    assert_not_http_date("Mittwoch, 01. Mai 2024 10:00:00"); /* de_DE */
    assert_not_http_date("mer., 01 mai 2024 10:00:00 GMT");  /* fr_FR */
    assert_not_http_date("01/05/2024 10:00:00");
    assert_not_http_date("1714557600");                      /* epoch seconds */
    assert_not_http_date("Wed, 1 May 2024 10:00:00 GMT");
}
END_TEST

START_TEST(test_http_date_format_bounds)
{
    char out[RETRY_HTTP_DATE_SIZE];
    /* the first and last instants four year digits hold */
    ck_assert(retry_http_date_format(INT64_C(-62167219200), out, sizeof(out)));
    ck_assert_str_eq(out, "Sat, 01 Jan 0000 00:00:00 GMT");
    ck_assert(retry_http_date_format(-1, out, sizeof(out)));
    ck_assert_str_eq(out, "Wed, 31 Dec 1969 23:59:59 GMT");
    strcpy(out, "untouched");
    ck_assert(!retry_http_date_format(INT64_C(253402300800), out, sizeof(out)));
    ck_assert(!retry_http_date_format(INT64_C(-62167219201), out, sizeof(out)));
    ck_assert(!retry_http_date_format(0, out, RETRY_HTTP_DATE_SIZE - 1));
    ck_assert_str_eq(out, "untouched");
    /* every day of a leap year and a plain one round-trips */
    for (int64_t t = INT64_C(1704067200); t < INT64_C(1767225600); t += 86399) {
        char v[RETRY_HTTP_DATE_SIZE];
        int64_t back = -1;
        ck_assert(retry_http_date_format(t, v, sizeof(v)));
        ck_assert_msg(retry_http_date_parse(v, NOW_MS, &back) && back == t,
                      "%lld -> '%s' -> %lld", (long long)t, v, (long long)back);
        struct tm tm;
        time_t tt = (time_t)t;
        char want[64];
        gmtime_r(&tt, &tm);
        strftime(want, sizeof(want), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        ck_assert_str_eq(v, want);
    }
}
END_TEST

/* ---- the retry plan against the deadline ------------------------------- */

START_TEST(test_retry_plan_never_past_the_deadline)
{
    int64_t at = -1;
    /* a session is free now: the backoff decides */
    ck_assert_int_eq(retry_plan(1000, 50, 1000, 5000, &at), RETRY_PLAN_AT);
    ck_assert_int_eq(at, 1050);
    /* a session frees up before the deadline: wait for it */
    ck_assert_int_eq(retry_plan(1000, 50, 3000, 5000, &at), RETRY_PLAN_AT);
    ck_assert_int_eq(at, 3000);
    /* every session cools down until the deadline or later: no session */
    at = -1;
    ck_assert_int_eq(retry_plan(1000, 50, 5000, 5000, &at),
                     RETRY_PLAN_NO_SESSION);
    ck_assert_int_eq(retry_plan(1000, 50, 301000, 5000, &at),
                     RETRY_PLAN_NO_SESSION);
    ck_assert_int_eq(at, -1);
    /* the backoff alone runs out the time: the attempt's own failure */
    ck_assert_int_eq(retry_plan(1000, 4000, 1000, 5000, &at),
                     RETRY_PLAN_PAST_DEADLINE);
    ck_assert_int_eq(retry_plan(1000, 4000, 301000, 5000, &at),
                     RETRY_PLAN_PAST_DEADLINE);
    ck_assert_int_eq(retry_plan(6000, 0, 6000, 5000, &at),
                     RETRY_PLAN_PAST_DEADLINE);
    /* degenerate inputs: negative backoff is 0, no overflow */
    ck_assert_int_eq(retry_plan(1000, -7, 0, 5000, &at), RETRY_PLAN_AT);
    ck_assert_int_eq(at, 1000);
    ck_assert_int_eq(retry_plan(INT64_MAX - 10, INT64_MAX, 0, INT64_MAX, &at),
                     RETRY_PLAN_PAST_DEADLINE);
}
END_TEST

/* ---- backoff ------------------------------------------------------------ */

START_TEST(test_retry_backoff_full_jitter_range)
{
    /* ceiling = min(cap, base * 2^attempt); rnd % (ceiling + 1) */
    ck_assert_int_eq(retry_backoff_ms(0, 1000, 60000, 1000), 1000);
    ck_assert_int_eq(retry_backoff_ms(0, 1000, 60000, 1001), 0);
    ck_assert_int_eq(retry_backoff_ms(2, 1000, 60000, 4000), 4000);
    ck_assert_int_eq(retry_backoff_ms(2, 1000, 60000, 4001), 0);
    ck_assert_int_eq(retry_backoff_ms(5, 1000, 60000, 32000), 32000);
    ck_assert_int_eq(retry_backoff_ms(6, 1000, 60000, 60000), 60000);
    ck_assert_int_eq(retry_backoff_ms(6, 1000, 60000, 60001), 0);
    ck_assert_int_eq(retry_backoff_ms(3, 1000, 60000, 0), 0);
}
END_TEST

START_TEST(test_retry_backoff_overflow_safe)
{
    for (int a = 0; a < 2000; a += 7) {
        int64_t w = retry_backoff_ms(a, 1000, 60000, UINT64_MAX);
        ck_assert_int_ge(w, 0);
        ck_assert_int_le(w, 60000);
    }
    ck_assert_int_eq(retry_backoff_ms(1000, 1000, 60000, 60000), 60000);
    /* doubling saturates at the cap without overflow: (2^62-1) * 2 = 2^63-2,
     * then the cap INT64_MAX; the draw at that ceiling is rnd >> 1 */
    ck_assert_int_eq(retry_backoff_ms(100, INT64_MAX / 2, INT64_MAX,
                                      UINT64_MAX),
                     INT64_MAX);
    ck_assert_int_eq(retry_backoff_ms(1, INT64_MAX / 2, INT64_MAX, 0x10),
                     0x10); /* ceiling 2^63-2: rnd % (2^63-1) */
    ck_assert_int_eq(retry_backoff_ms(100, INT64_MAX, INT64_MAX, UINT64_MAX),
                     INT64_MAX);
    ck_assert_int_eq(retry_backoff_ms(100, INT64_MAX, INT64_MAX, 6),
                     3);
    ck_assert_int_eq(retry_backoff_ms(20, 1, INT64_MAX, 1048576), 1048576);
    ck_assert_int_eq(retry_backoff_ms(20, 1, INT64_MAX, 1048577), 0);
    /* ceiling saturates at INT64_MAX: the draw is the top 63 bits */
    ck_assert_int_eq(retry_backoff_ms(100, 1, INT64_MAX, 12345), 6172);
}
END_TEST

START_TEST(test_retry_backoff_degenerate_inputs)
{
    ck_assert_int_eq(retry_backoff_ms(3, 0, 60000, 999), 0);
    ck_assert_int_eq(retry_backoff_ms(3, -5, 60000, 999), 0);
    ck_assert_int_eq(retry_backoff_ms(3, 1000, 0, 999), 0);
    ck_assert_int_eq(retry_backoff_ms(-4, 1000, 60000, 1000), 1000);
    ck_assert_int_eq(retry_backoff_ms(0, 5000, 2000, 2000), 2000);
}
END_TEST

Suite *retry_suite(void)
{
    Suite *s = suite_create("retry");
    TCase *tc = tcase_create("retry_after_seconds");
    tcase_add_test(tc, test_retry_after_seconds);
    tcase_add_test(tc, test_retry_after_seconds_clamped);
    tcase_add_test(tc, test_retry_after_invalid_ignored);
    tcase_add_test(tc, test_retry_c14_negative_ignored);
    suite_add_tcase(s, tc);

    tc = tcase_create("retry_after_date");
    tcase_add_test(tc, test_retry_c16_http_date_forms);
    tcase_add_test(tc, test_retry_c16_past_and_zero);
    tcase_add_test(tc, test_retry_c16_live_clock);
    tcase_add_test(tc, test_retry_after_date_clamped);
    tcase_add_test(tc, test_retry_after_rfc850_two_digit_year);
    tcase_add_test(tc, test_retry_after_date_strict);
    suite_add_tcase(s, tc);

    tc = tcase_create("http_date");
    tcase_add_test(tc, test_http_date_three_forms_to_imf_fixdate);
    tcase_add_test(tc, test_http_date_refuses_other_formats);
    tcase_add_test(tc, test_http_date_format_bounds);
    suite_add_tcase(s, tc);

    tc = tcase_create("plan");
    tcase_add_test(tc, test_retry_plan_never_past_the_deadline);
    suite_add_tcase(s, tc);

    tc = tcase_create("backoff");
    tcase_add_test(tc, test_retry_backoff_full_jitter_range);
    tcase_add_test(tc, test_retry_backoff_overflow_safe);
    tcase_add_test(tc, test_retry_backoff_degenerate_inputs);
    suite_add_tcase(s, tc);
    return s;
}
