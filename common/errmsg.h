/* common/errmsg.h: the one-line error report every library call makes.
 *
 * The project's habit: a library function that fails writes one line, "what: why", into a
 * caller's buffer and returns a status; it never prints or exits. This is that line, written
 * once for every component:
 *     return err_fail(err, errlen, DATASET_EFORMAT, "%s: no \"info\" record", path);
 * err may be NULL or errlen 0 (the caller does not want the text). */
#ifndef COMMON_ERRMSG_H
#define COMMON_ERRMSG_H
#include <stddef.h>
#include <stdio.h>

/* Formats into err (always NUL-terminated when errlen > 0) and returns status. */
int err_fail(char *err, size_t errlen, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* For programs: prints each '\n'-separated line of lines (NULL or "" prints nothing) as
 * "<prefix><line>\n", so every line of a multi-line report names the program. */
void err_print_lines(FILE *f, const char *prefix, const char *lines);
#endif
