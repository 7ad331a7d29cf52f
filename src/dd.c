#include "dd.h"

#include "log.h"

#include <stddef.h>
#include <stdint.h>
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

size_t dd_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

size_t dd_fmt_u64(char *out, uint64_t v)
{
    char tmp[DD_FMT_INT_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}

size_t dd_fmt_i64(char *out, int64_t v)
{
    if (v >= 0)
        return dd_fmt_u64(out, (uint64_t)v);
    out[0] = '-';
    /* -(v + 1) + 1: INT64_MIN's magnitude without overflow */
    return 1 + dd_fmt_u64(out + 1, (uint64_t)(-(v + 1)) + 1);
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

/* ---------------------------------------------------------------------- */
/* scratch                                                                 */

struct dd_scratch_block {
    struct dd_scratch_block *next;
    max_align_t data[]; /* aligned for any type */
};

#define SCRATCH_ALIGN (sizeof(max_align_t))

/* The kept block is one allocation to malloc, so the sanitizers would not
 * see an array overrun into the next one, nor a use after the reset: under
 * ASan its free parts are poisoned and each allocation is followed by a
 * poisoned red zone; under valgrind (memcheck's client requests, a few
 * instructions otherwise) free parts are no-access and each allocation
 * starts undefined, as malloc's would. */
#if defined(__SANITIZE_ADDRESS__)
#define SCRATCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SCRATCH_ASAN 1
#endif
#endif
#ifdef SCRATCH_ASAN
#include <sanitizer/asan_interface.h>
#define SCRATCH_REDZONE (2 * SCRATCH_ALIGN)
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define SCRATCH_REDZONE 0
#endif
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define SCRATCH_MEMCHECK 1
#endif
#endif
#ifndef SCRATCH_MEMCHECK
#define VALGRIND_MAKE_MEM_NOACCESS(p, n) ((void)(p), (void)(n))
#define VALGRIND_MAKE_MEM_UNDEFINED(p, n) ((void)(p), (void)(n))
#endif

/* The kept block's free part (from \p used on) becomes inaccessible. */
static void scratch_seal(struct dd_scratch *sc)
{
    if (!sc->base)
        return;
    ASAN_POISON_MEMORY_REGION(sc->base + sc->used, sc->cap - sc->used);
    (void)VALGRIND_MAKE_MEM_NOACCESS(sc->base + sc->used, sc->cap - sc->used);
}

void *dd_scratch_alloc(struct dd_scratch *sc, size_t n)
{
    if (n > SIZE_MAX - SCRATCH_ALIGN - SCRATCH_REDZONE)
        return NULL;
    size_t asked = n;
    n = n ? (n + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN
          : SCRATCH_ALIGN;
    if (sc->cap - sc->used >= n + SCRATCH_REDZONE) {
        unsigned char *p = sc->base + sc->used;
        sc->used += n + SCRATCH_REDZONE;
        ASAN_UNPOISON_MEMORY_REGION(p, asked);
        (void)VALGRIND_MAKE_MEM_UNDEFINED(p, asked);
        return p;
    }
    if (n > SIZE_MAX - sizeof(struct dd_scratch_block))
        return NULL;
    struct dd_scratch_block *b = malloc(sizeof(*b) + n);
    if (!b)
        return NULL;
    b->next = sc->more;
    sc->more = b;
    sc->over += n;
    return b->data;
}

void *dd_scratch_calloc(struct dd_scratch *sc, size_t nmemb, size_t size)
{
    if (size && nmemb > SIZE_MAX / size)
        return NULL;
    void *p = dd_scratch_alloc(sc, nmemb * size);
    if (p)
        memset(p, 0, nmemb * size);
    return p;
}

static void scratch_free_more(struct dd_scratch *sc)
{
    while (sc->more) {
        struct dd_scratch_block *b = sc->more;
        sc->more = b->next;
        free(b);
    }
}

void dd_scratch_reset(struct dd_scratch *sc)
{
    size_t need = sc->used + sc->over;
    scratch_free_more(sc);
    sc->used = sc->over = 0;
    if (need > sc->cap && sc->cap < DD_SCRATCH_KEEP_MAX) {
        size_t cap = need > DD_SCRATCH_KEEP_MAX / 2 ? DD_SCRATCH_KEEP_MAX
                                                    : 2 * need;
        unsigned char *p = malloc(cap);
        if (p) { /* else the smaller block stays */
            if (sc->base)
                ASAN_UNPOISON_MEMORY_REGION(sc->base, sc->cap);
            free(sc->base);
            sc->base = p;
            sc->cap = cap;
        }
    }
    scratch_seal(sc);
}

void dd_scratch_fini(struct dd_scratch *sc)
{
    scratch_free_more(sc);
    if (sc->base)
        ASAN_UNPOISON_MEMORY_REGION(sc->base, sc->cap);
    free(sc->base);
    memset(sc, 0, sizeof(*sc));
}

struct dd_scratch *dd_scratch_take(struct dd_scratch *sc,
                                   struct dd_scratch *local)
{
    if (!atomic_exchange(&sc->busy, true))
        return sc;
    memset(local, 0, sizeof(*local));
    return local;
}

void dd_scratch_give(struct dd_scratch *sc, struct dd_scratch *got)
{
    if (got != sc) {
        dd_scratch_fini(got);
        return;
    }
    dd_scratch_reset(sc);
    atomic_store(&sc->busy, false);
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
