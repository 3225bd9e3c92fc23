/* common/flags.c: see flags.h. */
#include "common/flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const flag_t *flags_find(const flag_t *flags, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(flags[i].name, name)) return &flags[i];
    return NULL;
}

static int in_range(const flag_t *f, double v) { return f->min == f->max || (v >= f->min && v <= f->max); }

static int set_value(flag_t *f, const char *val, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case FLAG_INT:
    case FLAG_I64: {
        long long v = strtoll(val, &end, 10);
        if (errno == ERANGE || (!errno && end != val && !*end && f->kind == FLAG_INT && (v > 2147483647LL || v < -2147483647LL))) {
            /* an integer, too large for the flag: say so, with its range where it has one */
            if (f->min != f->max) snprintf(err, errlen, "--%s: %s is outside [%.0f, %.0f]", f->name, val, f->min, f->max);
            else snprintf(err, errlen, "--%s: %s is too large", f->name, val);
            return -1;
        }
        if (errno || end == val || *end) {
            snprintf(err, errlen, "--%s: '%s' is not an integer", f->name, val);
            return -1;
        }
        if (!in_range(f, (double)v)) {
            snprintf(err, errlen, "--%s: %lld is outside [%.0f, %.0f]", f->name, v, f->min, f->max); /* integers as such, not 1.07374e+09 */
            return -1;
        }
        if (f->kind == FLAG_INT) *(int *)f->dst = (int)v;
        else *(long long *)f->dst = v;
        return 0;
    }
    case FLAG_U64: {
        unsigned long long v = strtoull(val, &end, 10);
        char sign = val[strspn(val, " \t")]; /* strtoull would take "-1" as 2^64-1 */
        if (errno || end == val || *end || sign == '-' || sign == '+') {
            snprintf(err, errlen, "--%s: '%s' is not an integer in [0, 2^64-1]", f->name, val);
            return -1;
        }
        if (!in_range(f, (double)v)) {
            snprintf(err, errlen, "--%s: %llu is outside [%.0f, %.0f]", f->name, v, f->min, f->max);
            return -1;
        }
        *(unsigned long long *)f->dst = v;
        return 0;
    }
    case FLAG_FLOAT:
    case FLAG_DOUBLE: {
        double v = strtod(val, &end);
        if (errno || end == val || *end || !isfinite(v)) {
            snprintf(err, errlen, "--%s: '%s' is not a finite number", f->name, val);
            return -1;
        }
        if (!in_range(f, v)) {
            snprintf(err, errlen, "--%s: %g is outside [%g, %g]", f->name, v, f->min, f->max);
            return -1;
        }
        if (f->kind == FLAG_FLOAT) *(float *)f->dst = (float)v;
        else *(double *)f->dst = v;
        return 0;
    }
    case FLAG_STR:
        *(const char **)f->dst = val;
        return 0;
    case FLAG_BOOL:
        *(int *)f->dst = 1;
        return 0;
    }
    return -1;
}

int flags_parse(int argc, char **argv, int first, flag_t *flags, int n, const char **pos, int *npos,
                int pos_cap, char *err, size_t errlen) {
    if (npos) *npos = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        /* before the positional rule, which would take "-h" for an argument */
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (strncmp(a, "--", 2) != 0 || !strcmp(a, "-") || !strcmp(a, "--")) {
            if (!pos || !npos || *npos >= pos_cap) {
                snprintf(err, errlen, "unexpected argument '%s'", a);
                return -1;
            }
            pos[(*npos)++] = a;
            continue;
        }
        char name[64];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, a + 2, len);
        name[len] = 0;
        flag_t *f = (flag_t *)flags_find(flags, n, name);
        if (!f) {
            snprintf(err, errlen, "unknown flag --%s (see --help)", name);
            return -1;
        }
        const char *val = NULL;
        if (f->kind == FLAG_BOOL) {
            if (eq) {
                snprintf(err, errlen, "--%s takes no value", name);
                return -1;
            }
        } else if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            snprintf(err, errlen, "--%s needs a value", name);
            return -1;
        }
        if (set_value(f, val, err, errlen)) return -1;
        f->seen = 1;
    }
    return 0;
}

void flags_usage(FILE *out, const flag_t *flags, int n) {
    for (int i = 0; i < n; i++) {
        const flag_t *f = &flags[i];
        char def[96] = "";
        double v = 0;
        switch (f->kind) {
        case FLAG_INT: snprintf(def, sizeof def, "%d", *(int *)f->dst), v = *(int *)f->dst; break;
        case FLAG_I64: snprintf(def, sizeof def, "%lld", *(long long *)f->dst), v = (double)*(long long *)f->dst; break;
        case FLAG_U64: snprintf(def, sizeof def, "%llu", *(unsigned long long *)f->dst), v = (double)*(unsigned long long *)f->dst; break;
        case FLAG_FLOAT: snprintf(def, sizeof def, "%g", *(float *)f->dst), v = *(float *)f->dst; break;
        case FLAG_DOUBLE: snprintf(def, sizeof def, "%g", *(double *)f->dst), v = *(double *)f->dst; break;
        case FLAG_STR: snprintf(def, sizeof def, "%s", *(const char **)f->dst ? *(const char **)f->dst : ""); break;
        case FLAG_BOOL: break;
        }
        /* a number the flag's own range refuses is no default but "not given": the program
         * needs the flag (bin/loader get's --B and --T start at 0, their range at 1) */
        if (f->kind != FLAG_STR && f->kind != FLAG_BOOL && !in_range(f, v))
            def[0] = 0;
        char lhs[80];
        snprintf(lhs, sizeof lhs, "--%s%s", f->name, f->kind == FLAG_BOOL ? "" : " V");
        fprintf(out, "  %-22s %s", lhs, f->help);
        if (def[0]) fprintf(out, " (default: %s)", def);
        fputc('\n', out);
    }
}

int flags_count(const flag_t *flags, int cap) {
    int n = 0;
    while (n < cap && flags[n].name) n++;
    return n;
}
