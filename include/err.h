/**
 * @file err.h
 * @brief dedupd's error codes, shared by every module.
 *
 * Fallible functions return dd_err_t: DD_OK (0) or a negative code from the closed
 * set below, like rd_kafka_resp_err_t and CURLcode.  Detail text goes in a caller
 * buffer passed last (`char *errstr, size_t errstr_size`, size DD_ERRSTR_SIZE),
 * which may be NULL and is written only on failure.  "Already seen" is a result,
 * never an error.
 */
#ifndef DEDUPD_ERR_H
#define DEDUPD_ERR_H

#include <stddef.h>

/** Recommended size of an errstr buffer (like CURL_ERROR_SIZE). */
#define DD_ERRSTR_SIZE 256

#define DD_WUR __attribute__((warn_unused_result))

typedef enum {
    DD_OK = 0,
    DD_ERR_INVAL = -1,     /**< invalid argument or input; not retriable */
    DD_ERR_NOMEM = -2,     /**< allocation failed */
    DD_ERR_IO = -3,        /**< I/O or storage error; retriable */
    DD_ERR_TIMEOUT = -4,   /**< timed out; retriable */
    DD_ERR_TRANSIENT = -5, /**< temporary condition; retry later */
    DD_ERR_PERMANENT = -6, /**< the input can never succeed (bad job) */
    DD_ERR_FATAL = -7,     /**< the process cannot go on */
    DD_ERR_STATE = -8,     /**< illegal state transition or stale generation */
} dd_err_t;

/**
 * @brief Short constant text for \p err ("invalid argument", ...).
 * @returns a static string; never NULL.
 */
const char *dd_err2str(dd_err_t err);

/**
 * @brief printf into \p errstr when it is not NULL (helper for modules).
 * @param errstr      Optional buffer (may be NULL).
 * @param errstr_size Its size in bytes.
 */
void dd_errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
