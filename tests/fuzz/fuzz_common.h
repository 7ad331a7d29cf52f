/*
 * fuzz_common.h - helpers shared by the libFuzzer targets in tests/fuzz/.
 *
 * A violated property prints what was expected and calls abort(), which
 * libFuzzer reports as a crash (with the input saved as crash-<sha1>).
 */
#ifndef DEDUPD_FUZZ_COMMON_H
#define DEDUPD_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: property violated: %s\n  ", __FILE__,     \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* NUL-terminated copy of exactly size + 1 bytes (malloc'd, so ASan sees any
 * read past the terminator). */
static inline char *fuzz_cstr(const unsigned char *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* true when \p s has no C0 control character and no DEL: error texts travel
 * in Kafka headers, HTTP bodies and log lines. */
static inline bool fuzz_no_ctl(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

/* true when \p s is exactly \p n lower-case hex digits. */
static inline bool fuzz_is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return s[n] == '\0';
}

#endif
