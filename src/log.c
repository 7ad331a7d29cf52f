/* Structured logging (log.h).  Every function but log_configure runs on any
 * thread: the pipeline, the fetch engine, the store's fsync thread, the HTTP
 * listeners and librdkafka's threads all log. */
#include "log.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_INFO;
static char debug_ctx[256];

void log_configure(int level, const char *debug)
{
    log_level = level;
    snprintf(debug_ctx, sizeof(debug_ctx), "%s", debug ? debug : "");
}

/* @locality any thread (reads debug_ctx, set before threads start). */
static bool fac_in_debug(const char *fac)
{
    if (!debug_ctx[0])
        return false;
    if (strcmp(debug_ctx, "all") == 0)
        return true;
    size_t n = strlen(fac);
    const char *p = debug_ctx;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, fac, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

bool log_enabled(int level, const char *fac)
{
    if (level <= log_level && level < LOG_DEBUG)
        return true;
    if (level == LOG_DEBUG)
        return log_level >= LOG_DEBUG || fac_in_debug(fac);
    return false;
}

int log_level_parse(const char *name)
{
    static const struct { const char *n; int l; } t[] = {
        {"emerg", LOG_EMERG}, {"alert", LOG_ALERT}, {"crit", LOG_CRIT},
        {"error", LOG_ERR},   {"err", LOG_ERR},     {"warning", LOG_WARNING},
        {"warn", LOG_WARNING}, {"notice", LOG_NOTICE}, {"info", LOG_INFO},
        {"debug", LOG_DEBUG},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcasecmp(name, t[i].n) == 0)
            return t[i].l;
    return -1;
}

/* @locality any thread; pure. */
static const char *level_name(int level)
{
    static const char *names[] = {"emerg", "alert", "crit", "error",
                                  "warning", "notice", "info", "debug"};
    return (level >= 0 && level <= 7) ? names[level] : "info";
}

/* Append \p s JSON-escaped to buf[*len..cap).  @locality any thread. */
static void put_escaped(char *buf, size_t *len, size_t cap, const char *s)
{
    for (; *s && *len + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[(*len)++] = '\\';
            buf[(*len)++] = (char)c;
        } else if (c < 0x20) {
            *len += (size_t)snprintf(buf + *len, cap - *len, "\\u%04x", c);
        } else {
            buf[(*len)++] = (char)c;
        }
    }
}

/* @locality any thread. */
static void put_raw(char *buf, size_t *len, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (*len + n >= cap)
        n = cap - *len - 1;
    memcpy(buf + *len, s, n);
    *len += n;
}

void log_write(int level, const char *fac, const struct log_ctx *ctx,
               const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[64];
    snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);

    char line[4096];
    size_t len = 0, cap = sizeof(line) - 2;
    put_raw(line, &len, cap, "{\"time\":\"");
    put_raw(line, &len, cap, when);
    put_raw(line, &len, cap, "\",\"level\":\"");
    put_raw(line, &len, cap, level_name(level));
    put_raw(line, &len, cap, "\",\"facility\":\"");
    put_escaped(line, &len, cap, fac);
    put_raw(line, &len, cap, "\",\"message\":\"");
    put_escaped(line, &len, cap, msg);
    put_raw(line, &len, cap, "\"");
    if (ctx) {
        char num[64];
        if (ctx->topic) {
            put_raw(line, &len, cap, ",\"topic\":\"");
            put_escaped(line, &len, cap, ctx->topic);
            put_raw(line, &len, cap, "\"");
        }
        if (ctx->partition >= 0) {
            snprintf(num, sizeof(num), ",\"partition\":%d", (int)ctx->partition);
            put_raw(line, &len, cap, num);
        }
        if (ctx->offset >= 0) {
            snprintf(num, sizeof(num), ",\"offset\":%lld", (long long)ctx->offset);
            put_raw(line, &len, cap, num);
        }
        if (ctx->op_id) {
            put_raw(line, &len, cap, ",\"op_id\":\"");
            put_escaped(line, &len, cap, ctx->op_id);
            put_raw(line, &len, cap, "\"");
        }
    }
    line[len++] = '}';
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
