/*
 * retry.c - Retry-After parsing (RFC 9110 10.2.3), HTTP-dates (RFC 9110
 *           5.6.7), full-jitter backoff and the retry plan against a deadline.
 *
 * Retry-After is parsed by hand rather than with strptime(3): strptime depends
 * on the locale, accepts one or more spaces anywhere, and happily takes
 * out-of-range fields; the grammar of RFC 9110 5.6.7 is small and fixed.
 *
 * Decisions:
 * - delay-seconds is 1*DIGIT and nothing else: "-5", "+5", "1.5", "5s" are
 *   not Retry-After values (ignored, so the caller's normal backoff applies,
 *   case C-14).  Huge values saturate instead of overflowing and are clamped.
 * - An HTTP-date must match one of the three forms exactly (case-sensitive
 *   names, "GMT", single spaces, asctime's space-padded day).  The weekday
 *   name must be a valid name but is not checked against the date: a server
 *   with a wrong weekday still means the instant it wrote.  Seconds 60 (a leap
 *   second) is accepted and counts as the next second.
 * - RFC 850 two-digit years: a year that would be more than 50 years after
 *   now means the most recent past year with those digits (RFC 9110 5.6.7).
 * - A date in the past means 0 (clock skew is normal, case C-16).
 * - The same parser decides which Last-Modified may become If-Modified-Since
 *   (retry_http_date_parse, then retry_http_date_format: conditional refetch
 *   sends only IMF-fixdate), so the two never disagree on what a date is.
 *
 * @locality any thread, every function: pure.  Callers: the fetch engine and
 * the proxy pool (Retry-After, backoff, plan), the pipeline (If-Modified-Since).
 */
#include "dd.h"
#include "retry.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const wkday[] = { "Mon", "Tue", "Wed", "Thu",
                                     "Fri", "Sat", "Sun" };
static const char *const weekday[] = { "Monday", "Tuesday", "Wednesday",
                                       "Thursday", "Friday", "Saturday",
                                       "Sunday" };
static const char *const month[] = { "Jan", "Feb", "Mar", "Apr",
                                     "May", "Jun", "Jul", "Aug",
                                     "Sep", "Oct", "Nov", "Dec" };

static int days_in_month(int y, int m)
{
    static const int dim[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return 29;
    return dim[m - 1];
}

/* Exactly \p n ASCII digits at \p s; -1 otherwise. */
static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Match one of \p names at \p s; returns the length consumed or 0. */
static size_t match_name(const char *s, const char *const *names, size_t n,
                         int *idx)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (strncmp(s, names[i], len) == 0) {
            *idx = (int)i;
            return len;
        }
    }
    return 0;
}

/* "HH:MM:SS" */
static bool parse_time(const char *s, int *h, int *mi, int *sec)
{
    if (s[2] != ':' || s[5] != ':')
        return false;
    *h = digits(s, 2);
    *mi = digits(s + 3, 2);
    *sec = digits(s + 6, 2);
    return *h >= 0 && *h <= 23 && *mi >= 0 && *mi <= 59 && *sec >= 0 &&
           *sec <= 60;
}

static bool to_epoch(int y, int m, int d, int h, int mi, int sec,
                     int64_t *epoch_s)
{
    if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m))
        return false;
    *epoch_s = dd_days_from_civil(y, (unsigned)m, (unsigned)d) * 86400 +
               h * 3600 + mi * 60 + sec;
    return true;
}

/* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" (exactly 29 bytes). */
static bool parse_imf(const char *s, size_t len, int64_t *epoch_s)
{
    int wd, mon;
    if (len != 29 || match_name(s, wkday, 7, &wd) != 3 ||
        strncmp(s + 3, ", ", 2) != 0 || s[7] != ' ' ||
        match_name(s + 8, month, 12, &mon) != 3 || s[11] != ' ' ||
        s[16] != ' ' || strncmp(s + 25, " GMT", 4) != 0)
        return false;
    int d = digits(s + 5, 2), y = digits(s + 12, 4), h, mi, sec;
    if (d < 0 || y < 0 || !parse_time(s + 17, &h, &mi, &sec))
        return false;
    return to_epoch(y, mon + 1, d, h, mi, sec, epoch_s);
}

/* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT". */
static bool parse_rfc850(const char *s, size_t len, int64_t now_ms,
                         int64_t *epoch_s)
{
    int wd, mon;
    size_t n = match_name(s, weekday, 7, &wd);
    if (n == 0 || len != n + 24)
        return false;
    s += n;
    if (strncmp(s, ", ", 2) != 0 || s[4] != '-' ||
        match_name(s + 5, month, 12, &mon) != 3 || s[8] != '-' ||
        s[11] != ' ' || strncmp(s + 20, " GMT", 4) != 0)
        return false;
    int d = digits(s + 2, 2), yy = digits(s + 9, 2), h, mi, sec;
    if (d < 0 || yy < 0 || !parse_time(s + 12, &h, &mi, &sec))
        return false;
    /* RFC 9110 5.6.7: more than 50 years ahead means the previous century. */
    int64_t now_days = now_ms / 1000 / 86400;
    int now_year = 1970;
    while (dd_days_from_civil(now_year + 1, 1, 1) <= now_days)
        now_year++;
    int y = now_year / 100 * 100 + yy;
    if (y > now_year + 50)
        y -= 100;
    return to_epoch(y, mon + 1, d, h, mi, sec, epoch_s);
}

/* asctime: "Sun Nov  6 08:49:37 1994" (exactly 24 bytes). */
static bool parse_asctime(const char *s, size_t len, int64_t *epoch_s)
{
    int wd, mon;
    if (len != 24 || match_name(s, wkday, 7, &wd) != 3 || s[3] != ' ' ||
        match_name(s + 4, month, 12, &mon) != 3 || s[7] != ' ' ||
        s[10] != ' ' || s[19] != ' ')
        return false;
    int d;
    if (s[8] == ' ')
        d = digits(s + 9, 1);
    else
        d = digits(s + 8, 2);
    int y = digits(s + 20, 4), h, mi, sec;
    if (d < 0 || y < 0 || !parse_time(s + 11, &h, &mi, &sec))
        return false;
    return to_epoch(y, mon + 1, d, h, mi, sec, epoch_s);
}

/* The field value of \p value without its OWS (SP / HTAB) on either side:
 * *start and the length. */
static size_t trim_ows(const char *value, const char **start)
{
    while (*value == ' ' || *value == '\t')
        value++;
    size_t len = strlen(value);
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    *start = value;
    return len;
}

/* One of the three HTTP-date forms, exactly \p len bytes at \p s. */
static bool parse_http_date(const char *s, size_t len, int64_t now_ms,
                            int64_t *epoch_s)
{
    return parse_imf(s, len, epoch_s) ||
           parse_rfc850(s, len, now_ms, epoch_s) ||
           parse_asctime(s, len, epoch_s);
}

bool retry_http_date_parse(const char *value, int64_t now_ms, int64_t *epoch_s)
{
    if (!value)
        return false;
    size_t len = trim_ows(value, &value);
    return len > 0 && parse_http_date(value, len, now_ms, epoch_s);
}

bool retry_http_date_format(int64_t epoch_s, char *out, size_t size)
{
    /* years 0000..9999: what the four digits of IMF-fixdate can hold */
    static const int64_t min_s = INT64_C(-62167219200);  /* 0000-01-01 */
    static const int64_t max_s = INT64_C(253402300799);  /* 9999-12-31 */
    if (size < RETRY_HTTP_DATE_SIZE || epoch_s < min_s || epoch_s > max_s)
        return false;
    int64_t days = epoch_s >= 0 ? epoch_s / 86400 : -((-epoch_s + 86399) / 86400);
    int64_t secs = epoch_s - days * 86400;
    int64_t y;
    unsigned m, d;
    dd_civil_from_days(days, &y, &m, &d);
    /* 1970-01-01 was a Thursday (index 3 from Monday) */
    int64_t wd = ((days % 7) + 7 + 3) % 7;
    snprintf(out, size, "%s, %02u %s %04d %02d:%02d:%02d GMT", wkday[wd], d,
             month[m - 1], (int)y, (int)(secs / 3600), (int)(secs / 60 % 60),
             (int)(secs % 60));
    return true;
}

bool retry_after_parse(const char *value, int64_t now_ms, int64_t max_ms,
                       int64_t *delay_ms)
{
    if (!value)
        return false;
    if (max_ms < 0)
        max_ms = 0;
    size_t len = trim_ows(value, &value);
    if (len == 0)
        return false;

    if (value[0] >= '0' && value[0] <= '9') {
        /* delay-seconds = 1*DIGIT; saturate at max_ms */
        int64_t ms = 0;
        for (size_t i = 0; i < len; i++) {
            if (value[i] < '0' || value[i] > '9')
                return false;
            if (ms < max_ms) {
                int64_t secs = ms / 1000 * 10 + (value[i] - '0');
                ms = secs > max_ms / 1000 ? max_ms : secs * 1000;
            }
        }
        *delay_ms = ms < max_ms ? ms : max_ms;
        return true;
    }

    int64_t epoch_s;
    if (!parse_http_date(value, len, now_ms, &epoch_s))
        return false;
    /* epoch_s is within years 0..9999, so * 1000 cannot overflow; now_ms
     * may be anything, so compare before subtracting. */
    int64_t date_ms = epoch_s * 1000;
    if (date_ms <= now_ms) {
        *delay_ms = 0;
    } else if (now_ms < 0 && date_ms > INT64_MAX + now_ms) {
        *delay_ms = max_ms;
    } else {
        int64_t d = date_ms - now_ms;
        *delay_ms = d < max_ms ? d : max_ms;
    }
    return true;
}

int64_t retry_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms,
                         uint64_t rnd)
{
    if (base_ms <= 0 || cap_ms <= 0)
        return 0;
    if (attempt < 0)
        attempt = 0;
    /* ceiling = min(cap, base * 2^attempt), doubling without overflow */
    int64_t ceil_ms = base_ms < cap_ms ? base_ms : cap_ms;
    for (int i = 0; i < attempt && ceil_ms < cap_ms; i++)
        ceil_ms = ceil_ms > cap_ms / 2 ? cap_ms : ceil_ms * 2;
    if (ceil_ms == INT64_MAX)
        return (int64_t)(rnd >> 1);
    /* uniform in [0, ceil_ms]; the modulo bias is below 2^-60 for any
     * realistic ceiling */
    return (int64_t)(rnd % ((uint64_t)ceil_ms + 1));
}

enum retry_plan retry_plan(int64_t now_ms, int64_t backoff_ms,
                           int64_t free_at_ms, int64_t deadline_ms,
                           int64_t *at_ms)
{
    if (backoff_ms < 0)
        backoff_ms = 0;
    /* now_ms + backoff_ms without overflow */
    int64_t after = backoff_ms > INT64_MAX - now_ms ? INT64_MAX
                                                    : now_ms + backoff_ms;
    if (after >= deadline_ms)
        return RETRY_PLAN_PAST_DEADLINE;
    if (free_at_ms >= deadline_ms)
        return RETRY_PLAN_NO_SESSION;
    *at_ms = free_at_ms > after ? free_at_ms : after;
    return RETRY_PLAN_AT;
}
