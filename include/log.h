/**
 * @file log.h
 * @brief Structured logging: one JSON object per line on stderr.
 *
 * Each line carries time (RFC 3339 UTC, ms), level (syslog name), facility tag,
 * message and, when given, topic/partition/offset and op_id.  The macros test the
 * level before evaluating their arguments (Redis serverLog), so debug logging costs
 * nothing when off.  Debug contexts (`log.debug=store,fetch`) enable LOG_DEBUG for
 * the named facilities only ("all" enables every facility).
 *
 * Never pass credentials or payload bytes above debug level: callers redact.
 * @locality any thread (each line is written with one write(2)).
 */
#ifndef DEDUPD_LOG_H
#define DEDUPD_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

/** Optional context of a log line; unset fields are NULL / -1. */
struct log_ctx {
    const char *topic;     /**< Kafka topic or NULL */
    int32_t partition;     /**< -1 when unknown */
    int64_t offset;        /**< -1 when unknown */
    const char *op_id;     /**< NUL-terminated or NULL */
};

/** Current threshold (syslog level); lines above it are dropped. */
extern int log_level;

/**
 * @brief Set the threshold and the debug contexts.
 * @param level  syslog level LOG_EMERG..LOG_DEBUG.
 * @param debug  Comma-separated facility names to log at LOG_DEBUG, "all", or
 *               NULL / "" for none (copied; at most 255 bytes are kept).
 * @locality the main thread, before other threads start (not synchronized
 *           with concurrent log_enabled()).
 */
void log_configure(int level, const char *debug);

/**
 * @brief Would a line of \p level for facility \p fac (NUL-terminated,
 *        compared case-insensitively with log.debug) be written?
 * @locality any thread.
 */
bool log_enabled(int level, const char *fac);

/**
 * @brief Parse a syslog level name (emerg, alert, crit, error or err, warning
 *        or warn, notice, info, debug; any case).
 * @param name  NUL-terminated (borrowed).
 * @returns LOG_EMERG..LOG_DEBUG, or -1 if unknown.
 * @locality any thread; pure.
 */
int log_level_parse(const char *name);

/**
 * @brief Write one line.  Use the macros instead.
 * @param level  syslog level; names outside 0..7 are written as "info".
 * @param fac    Facility tag, NUL-terminated (borrowed).
 * @param ctx    Optional (may be NULL): topic/partition/offset/op_id.
 * @param fmt    printf format; the message is cut at 2047 bytes and the line
 *               at 4 KiB, never inside the closing "}\n".
 * @locality any thread (one write(2) per line).
 */
void log_write(int level, const char *fac, const struct log_ctx *ctx,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/** @brief Log \p fmt at \p level for facility tag \p fac (e.g. "STORE"). */
#define log_msg(level, fac, ...)                                              \
    do {                                                                      \
        if (log_enabled((level), (fac)))                                      \
            log_write((level), (fac), NULL, __VA_ARGS__);                     \
    } while (0)

/** @brief As log_msg, with a struct log_ctx * for topic/partition/offset/op_id. */
#define log_ctx_msg(level, fac, ctx, ...)                                     \
    do {                                                                      \
        if (log_enabled((level), (fac)))                                      \
            log_write((level), (fac), (ctx), __VA_ARGS__);                    \
    } while (0)

#endif
