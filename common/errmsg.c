/* common/errmsg.c: see errmsg.h. */
#include "common/errmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_fail(char *err, size_t errlen, int status, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

void err_print_lines(FILE *f, const char *prefix, const char *lines) {
    for (const char *p = lines; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (n) fprintf(f, "%s%.*s\n", prefix, (int)n, p);
        p += n + (p[n] == '\n');
    }
}
