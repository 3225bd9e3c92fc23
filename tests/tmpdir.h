/* tests/tmpdir.h: a unit test's scratch directory (main() fills tmpdir) and files in it. */
#ifndef TESTS_TMPDIR_H
#define TESTS_TMPDIR_H
#include <stdio.h>

static char tmpdir[512];

/* tmpdir/name in one of 8 rotating buffers (a call may hold several paths at once). */
static const char *tmp_path(const char *name) {
    static char buf[8][700];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 700, "%s/%s", tmpdir, name);
    return p;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}
#endif
