/* common/errmsg.c: see errmsg.h. */
#include "common/errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int err_fail(char *err, size_t errlen, int status, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}
