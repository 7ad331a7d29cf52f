#include "err.h"

#include <stdarg.h>
#include <stdio.h>

const char *dd_err2str(dd_err_t err)
{
    switch (err) {
    case DD_OK: return "success";
    case DD_ERR_INVAL: return "invalid argument";
    case DD_ERR_NOMEM: return "out of memory";
    case DD_ERR_IO: return "I/O error";
    case DD_ERR_TIMEOUT: return "timed out";
    case DD_ERR_TRANSIENT: return "temporary failure";
    case DD_ERR_PERMANENT: return "permanent failure";
    case DD_ERR_FATAL: return "fatal error";
    case DD_ERR_STATE: return "illegal state";
    }
    return "unknown error";
}

void dd_errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
{
    if (!errstr || errstr_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
}
