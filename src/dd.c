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
