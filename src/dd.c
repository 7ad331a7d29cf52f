#include "dd.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

int64_t dd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int dd_bytes_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen;
}

uint64_t dd_fnv1a64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint64_t dd_fnv1a64_str(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void dd_oom(const char *what)
{
    log_msg(LOG_CRIT, "MAIN", "out of memory: %s", what);
    abort();
}

void *dd_xmalloc(size_t n, const char *what)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        dd_oom(what);
    return p;
}

void *dd_xcalloc(size_t nmemb, size_t size, const char *what)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p)
        dd_oom(what);
    return p;
}

void *dd_xrealloc(void *p, size_t n, const char *what)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        dd_oom(what);
    return q;
}

char *dd_xstrdup(const char *s, const char *what)
{
    char *p = strdup(s);
    if (!p)
        dd_oom(what);
    return p;
}

/* H. Hinnant, "chrono-Compatible Low-Level Date Algorithms" (days_from_civil,
 * civil_from_days): exact for every proleptic Gregorian date. */
int64_t dd_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void dd_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}
