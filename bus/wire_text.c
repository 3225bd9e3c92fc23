/* bus/wire_text.c: wire_field_set, a message field from text (for `bin/bus send` and
 * scripts): the schema says how to parse each key. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "bus/wire.h"
#include "bus/wire_schema.h"

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
    char *end;
    if (!*s || *s == '-' || *s == '+') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    if (!*s) return -1;
    errno = 0;
    *out = strtod(s, &end);
    return (*end || errno == ERANGE) ? -1 : 0;
}

int wire_field_set(wire_msg_t *m, const char *key, const char *value, char *err, size_t errlen) {
    if (!m || !key || !value) return err_fail(err, errlen, WIRE_ERR_ARG, "NULL argument");
    const wire_schema_t *s = wire_schema_get(m->type);
    if (!s) return err_fail(err, errlen, WIRE_ERR_ARG, "message type not set");
    char *base = (char *)&m->u;
    const wire_field_t *f = NULL;
    for (int i = 0; i < s->n_fields; i++)
        if (strcmp(s->fields[i].name, key) == 0) f = &s->fields[i];
    if (!f) {
        /* metrics/eval: any other key is a value name */
        for (int i = 0; i < s->n_fields; i++)
            if (s->fields[i].kind == WF_VALUES) f = &s->fields[i];
        if (!f)
            return err_fail(err, errlen, WIRE_ERR_ARG, "%s has no field \"%s\"", s->name, key);
        double v;
        if (parse_double(value, &v))
            return err_fail(err, errlen, WIRE_ERR_MISTYPED, "value \"%s\" is not a number", key);
        int rc = wire_kv_add((wire_kv_t *)(base + f->off), (uint32_t *)(base + f->off_n), key, v);
        if (rc) return err_fail(err, errlen, rc, "value \"%s\": name too long or too many values", key);
        return 0;
    }
    char *p = base + f->off;
    uint64_t u;
    switch (f->kind) {
    case WF_U64: case WF_U32:
        if (parse_u64(value, f->kind == WF_U32 ? UINT32_MAX : UINT64_MAX, &u))
            return err_fail(err, errlen, WIRE_ERR_MISTYPED, "%s: \"%s\" is not an unsigned integer",
                        key, value);
        if (f->kind == WF_U64) *(uint64_t *)p = u;
        else *(uint32_t *)p = (uint32_t)u;
        return 0;
    case WF_I32: {
        char *end;
        errno = 0;
        long v = strtol(value, &end, 10);
        if (!*value || *end || errno || v < INT32_MIN || v > INT32_MAX)
            return err_fail(err, errlen, WIRE_ERR_MISTYPED, "%s: \"%s\" is not an int32", key, value);
        *(int32_t *)p = (int32_t)v;
        return 0;
    }
    case WF_F64:
        if (parse_double(value, (double *)p))
            return err_fail(err, errlen, WIRE_ERR_MISTYPED, "%s: \"%s\" is not a number", key, value);
        return 0;
    case WF_LAYOUT: case WF_SPLIT: {
        const char *a = f->kind == WF_LAYOUT ? "pack" : "train";
        const char *b = f->kind == WF_LAYOUT ? "pad" : "val";
        if (strcmp(value, a) && strcmp(value, b))
            return err_fail(err, errlen, WIRE_ERR_MISTYPED, "%s: must be %s or %s", key, a, b);
        *(uint8_t *)p = strcmp(value, a) == 0 ? 0 : 1;
        return 0;
    }
    case WF_BOOL:
        if (strcmp(value, "true") && strcmp(value, "false"))
            return err_fail(err, errlen, WIRE_ERR_MISTYPED, "%s: must be true or false", key);
        *(uint8_t *)p = strcmp(value, "true") == 0;
        return 0;
    case WF_NAME:
        if (strlen(value) > WIRE_NAME_LEN - 1)
            return err_fail(err, errlen, WIRE_ERR_OVERSIZE, "%s: longer than %d bytes", key,
                        WIRE_NAME_LEN - 1);
        memset(p, 0, WIRE_NAME_LEN);
        memcpy(p, value, strlen(value));
        return 0;
    case WF_STR: {
        if (strlen(value) > WIRE_MAX_STR)
            return err_fail(err, errlen, WIRE_ERR_OVERSIZE, "%s: longer than %d bytes", key,
                        WIRE_MAX_STR);
        char *dup = strdup(value);
        if (!dup) return err_fail(err, errlen, WIRE_ERR_NOMEM, "%s: out of memory", key);
        free(*(char **)p);
        *(char **)p = dup;
        return 0;
    }
    default:
        return err_fail(err, errlen, WIRE_ERR_ARG, "%s: cannot be set from text", key);
    }
}
