/*
 * fuzz_retry_after.c - retry_after_parse() on arbitrary bytes.
 *
 * The input (NUL-terminated copy of exactly size + 1 bytes) is parsed at
 * several fixed clocks and clamps (now in 1970, 1994, 2025, 2100, 9999, and
 * before the epoch; max 0, 1 ms, 1500 ms, 5 min, INT64_MAX, and a negative
 * max that means 0), and then at clocks and clamps taken from what the input
 * means, so that the fuzzer's bytes move the edges too: for delay-seconds,
 * max one below, at and one above the value; for an HTTP-date, now one ms
 * before, at and after its instant, and max one below and at the delay.
 *
 * Properties, abort() on violation:
 *  - a returned delay is within [0, max(max_ms, 0)];
 *  - when the value is refused, *delay_ms is left untouched;
 *  - delay-seconds (1*DIGIT after OWS is trimmed: the RFC 9110 grammar,
 *    written here independently) is accepted at every clock and equals
 *    min(seconds * 1000, max) computed here in 128-bit arithmetic
 *    (reference model), at the fixed clamps and at the value's own edges;
 *  - an HTTP-date is one instant: with no clamp (INT64_MAX), two clocks
 *    a < b that both accept it give delays with d(a) - d(b) == b - a while
 *    both are positive, and d(a) >= d(b) always; it is accepted at every
 *    clock or at none; its instant T = now + d gives 1 ms at now = T - 1 and
 *    0 at T and T + 1; a clamp of d - 1 gives d - 1 and one of d gives d.
 *    RFC 850 dates (the only form with '-') are left out of these: their
 *    century depends on the clock.  For them, RFC 9110 5.6.7: a delay is
 *    never more than 50 years (checked as 51 * 366 days, so a wrong century
 *    shows while a calendar is not re-implemented here).
 */
#include <stdint.h>

#include "fuzz_common.h"
#include "retry.h"

static const int64_t nows[] = {
    0,                      /* 1970-01-01 */
    784111777000,           /* 1994-11-06 08:49:37 */
    1748779200000,          /* 2025-06-01 12:00:00 */
    4102444800000,          /* 2100-01-01 */
    253402300799000,        /* 9999-12-31 23:59:59 */
    -86400000,              /* before the epoch */
};
static const int64_t maxes[] = { 0, 1, 1500, 300000, INT64_MAX, -5 };

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Reference for delay-seconds: all of s[0..len) digits; min(v * 1000, max),
 * computed with saturation in unsigned 128-bit arithmetic. */
static int64_t ref_seconds(const char *s, size_t len, int64_t max)
{
    unsigned __int128 v = 0, cap = (unsigned __int128)max;
    for (size_t i = 0; i < len; i++) {
        v = v * 10 + (unsigned)(s[i] - '0');
        if (v * 1000 > cap)
            return max;
    }
    v *= 1000;
    return v > cap ? max : (int64_t)v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);

    /* the value as the parser sees it: OWS (SP / HTAB) trimmed */
    const char *t = s;
    while (*t == ' ' || *t == '\t')
        t++;
    size_t tlen = strlen(t);
    while (tlen > 0 && (t[tlen - 1] == ' ' || t[tlen - 1] == '\t'))
        tlen--;
    bool all_digits = tlen > 0;
    for (size_t i = 0; i < tlen && all_digits; i++)
        all_digits = t[i] >= '0' && t[i] <= '9';

    bool date_ok[N(nows)] = { false };
    int64_t date_d[N(nows)] = { 0 };
    for (size_t i = 0; i < N(nows); i++) {
        for (size_t j = 0; j < N(maxes); j++) {
            int64_t now = nows[i], max = maxes[j];
            int64_t clamp = max < 0 ? 0 : max;
            int64_t d = INT64_MIN + 7; /* sentinel */
            bool ok = retry_after_parse(s, now, max, &d);
            if (!ok) {
                FUZZ_CHECK(d == INT64_MIN + 7, "'%s' refused but delay "
                           "written (%lld)", s, (long long)d);
                FUZZ_CHECK(!all_digits, "'%s' is delay-seconds but was "
                           "refused", s);
                continue;
            }
            FUZZ_CHECK(d >= 0 && d <= clamp, "'%s' now=%lld max=%lld: delay "
                       "%lld out of [0, %lld]", s, (long long)now,
                       (long long)max, (long long)d, (long long)clamp);
            if (all_digits) {
                int64_t want = ref_seconds(t, tlen, clamp);
                FUZZ_CHECK(d == want, "'%s' max=%lld: delay %lld, want %lld",
                           s, (long long)max, (long long)d, (long long)want);
            } else if (max == INT64_MAX) {
                date_ok[i] = true;
                date_d[i] = d;
            }
        }
    }
    if (all_digits) {
        /* the clamp at the value itself: one below, at and one above */
        int64_t v = ref_seconds(t, tlen, INT64_MAX);
        int64_t edges[3] = { v - 1, v, v == INT64_MAX ? v : v + 1 };
        for (size_t j = 0; j < 3; j++) {
            int64_t d = INT64_MIN + 7;
            int64_t clamp = edges[j] < 0 ? 0 : edges[j];
            int64_t want = v < clamp ? v : clamp;
            FUZZ_CHECK(retry_after_parse(s, nows[2], edges[j], &d) &&
                           d == want,
                       "'%s' max=%lld: delay %lld, want %lld", s,
                       (long long)edges[j], (long long)d, (long long)want);
        }
    }
    if (!all_digits && memchr(t, '-', tlen)) {
        /* RFC 850: never more than 50 years ahead */
        const int64_t limit = INT64_C(51) * 366 * 86400 * 1000;
        for (size_t a = 0; a < N(nows); a++)
            FUZZ_CHECK(!date_ok[a] || date_d[a] <= limit, "'%s': RFC 850 "
                       "date %lld ms after now=%lld, more than 50 years", s,
                       (long long)date_d[a], (long long)nows[a]);
    }
    if (!all_digits && !memchr(t, '-', tlen)) {
        /* the edges of the instant and of the clamp, from the first clock
         * at which the date is ahead */
        for (size_t a = 0; a < N(nows); a++) {
            if (!date_ok[a] || date_d[a] <= 0)
                continue;
            int64_t when = nows[a] + date_d[a], d;
            const struct { int64_t now, max, want; } e[] = {
                { when - 1, INT64_MAX, 1 },
                { when, INT64_MAX, 0 },
                { when + 1, INT64_MAX, 0 },
                { nows[a], date_d[a] - 1, date_d[a] - 1 },
                { nows[a], date_d[a], date_d[a] },
            };
            for (size_t k = 0; k < N(e); k++) {
                d = INT64_MIN + 7;
                FUZZ_CHECK(retry_after_parse(s, e[k].now, e[k].max, &d) &&
                               d == e[k].want,
                           "'%s' (instant %lld) now=%lld max=%lld: delay "
                           "%lld, want %lld", s, (long long)when,
                           (long long)e[k].now, (long long)e[k].max,
                           (long long)d, (long long)e[k].want);
            }
            break;
        }
        for (size_t a = 0; a < N(nows); a++) {
            for (size_t b = 0; b < N(nows); b++) {
                if (!date_ok[a] || !date_ok[b] || nows[a] >= nows[b])
                    continue;
                FUZZ_CHECK(date_d[a] >= date_d[b], "'%s': delay %lld at "
                           "now=%lld but %lld at the later now=%lld", s,
                           (long long)date_d[a], (long long)nows[a],
                           (long long)date_d[b], (long long)nows[b]);
                if (date_d[a] > 0 && date_d[b] > 0)
                    FUZZ_CHECK(date_d[a] - date_d[b] == nows[b] - nows[a],
                               "'%s': delays %lld (now=%lld) and %lld "
                               "(now=%lld) are not one instant", s,
                               (long long)date_d[a], (long long)nows[a],
                               (long long)date_d[b], (long long)nows[b]);
            }
        }
        /* the same form is accepted at every clock */
        for (size_t a = 1; a < N(nows); a++)
            FUZZ_CHECK(date_ok[a] == date_ok[0], "'%s': accepted at now=%lld "
                       "but not at now=%lld", s,
                       (long long)(date_ok[a] ? nows[a] : nows[0]),
                       (long long)(date_ok[a] ? nows[0] : nows[a]));
    }
    /* A NULL value is refused. */
    int64_t d = 42;
    FUZZ_CHECK(!retry_after_parse(NULL, 0, 1000, &d) && d == 42,
               "NULL accepted");
    free(s);
    return 0;
}
