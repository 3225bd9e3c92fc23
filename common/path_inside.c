/* common/path_inside.c: see path_inside.h. */
#include "common/path_inside.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int path_inside(const char *dir, const char *path) {
    if (!dir || !path || !*dir || !*path) return 0;
    char d[PATH_MAX], p[PATH_MAX];
    if (!realpath(dir, d) || !realpath(path, p)) return 0;
    size_t n = strlen(d);
    if (n == 1) n = 0; /* dir is "/": the entry is "/name" */
    return strncmp(p, d, n) == 0 && p[n] == '/' && p[n + 1] && !strchr(p + n + 1, '/');
}
