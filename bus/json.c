/* bus/json.c: wire_to_json, one message as one line of JSON (for `bin/bus tap | jq`).
 *
 * Written by hand rather than with jansson because wire strings are not guaranteed to be
 * UTF-8: invalid bytes become U+FFFD here instead of failing the whole line. Doubles print
 * in the shortest of %.15g/%.17g that reads back exactly; NaN and infinities, which JSON
 * lacks, print as null. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "bus/utf8.h"
#include "bus/wire.h"
#include "bus/wire_schema.h"

typedef struct {
    char *out;
    size_t cap, len;
    int full; /* something did not fit */
} jw_t;

static void jw_put(jw_t *w, const char *s, size_t n) {
    if (w->full || n >= w->cap - w->len) { /* keep one byte for the NUL */
        w->full = 1;
        return;
    }
    memcpy(w->out + w->len, s, n);
    w->len += n;
    w->out[w->len] = 0;
}

static void jw_puts(jw_t *w, const char *s) { jw_put(w, s, strlen(s)); }

static void jw_str(jw_t *w, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    jw_put(w, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            jw_put(w, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            jw_put(w, esc, 6);
            i++;
        } else {
            size_t k = wire_utf8_len(u + i, n - i);
            if (k) jw_put(w, s + i, k), i += k;
            else jw_puts(w, "\\ufffd"), i++;
        }
    }
    jw_put(w, "\"", 1);
}

static void jw_key(jw_t *w, const char *k) {
    jw_put(w, ",", 1);
    jw_str(w, k, strlen(k));
    jw_put(w, ":", 1);
}

static void jw_double(jw_t *w, double v) {
    char b[40];
    if (!isfinite(v)) {
        jw_puts(w, "null");
        return;
    }
    snprintf(b, sizeof b, "%.15g", v);
    if (strtod(b, NULL) != v) snprintf(b, sizeof b, "%.17g", v);
    jw_puts(w, b);
}

static void jw_u64(jw_t *w, unsigned long long v) {
    char b[24];
    snprintf(b, sizeof b, "%llu", v);
    jw_puts(w, b);
}

static void jw_fields(jw_t *w, const wire_schema_t *s, const char *base);

static void jw_field(jw_t *w, const wire_field_t *f, const char *base) {
    const char *p = base + f->off;
    char b[24];
    switch (f->kind) {
    case WF_U64: jw_u64(w, *(const uint64_t *)p); break;
    case WF_U32: jw_u64(w, *(const uint32_t *)p); break;
    case WF_I32:
        snprintf(b, sizeof b, "%d", (int)*(const int32_t *)p);
        jw_puts(w, b);
        break;
    case WF_F64: jw_double(w, *(const double *)p); break;
    case WF_LAYOUT: jw_puts(w, *(const uint8_t *)p == WIRE_PACK ? "\"pack\"" : "\"pad\""); break;
    case WF_SPLIT: jw_puts(w, *(const uint8_t *)p == WIRE_TRAIN ? "\"train\"" : "\"val\""); break;
    case WF_BOOL: jw_puts(w, *(const uint8_t *)p ? "true" : "false"); break;
    case WF_STR: {
        const char *s = *(char *const *)p;
        if (s) jw_str(w, s, strlen(s));
        else jw_puts(w, "null");
        break;
    }
    case WF_NAME: jw_str(w, p, strnlen(p, WIRE_NAME_LEN)); break;
    case WF_TOKENS: case WF_MASK: {
        /* summarised: a batch holds up to millions of ids, nobody wants them in a log */
        const msg_batch_t *bt = (const msg_batch_t *)base;
        uint64_t n = f->kind == WF_TOKENS ? (uint64_t)bt->B * ((uint64_t)bt->T + 1)
                                          : (uint64_t)bt->B * bt->T;
        if (*(void *const *)p == NULL && f->kind == WF_MASK) {
            jw_puts(w, "null");
            break;
        }
        jw_puts(w, "{\"count\":");
        jw_u64(w, n);
        jw_puts(w, "}");
        break;
    }
    case WF_VALUES: {
        uint32_t n = *(const uint32_t *)(base + f->off_n);
        const wire_kv_t *kv = (const wire_kv_t *)p;
        jw_put(w, "{", 1);
        for (uint32_t i = 0; i < n && i < WIRE_MAX_KV; i++) {
            if (i) jw_put(w, ",", 1);
            jw_str(w, kv[i].name, strnlen(kv[i].name, WIRE_NAME_LEN));
            jw_put(w, ":", 1);
            jw_double(w, kv[i].value);
        }
        jw_put(w, "}", 1);
        break;
    }
    case WF_ITEMS: {
        uint32_t n = *(const uint32_t *)(base + f->off_n);
        const msg_ckpt_t *items = *(msg_ckpt_t *const *)p;
        jw_put(w, "[", 1);
        for (uint32_t i = 0; items && i < n; i++) {
            if (i) jw_put(w, ",", 1);
            jw_fields(w, wire_schema_get(MSG_CKPT), (const char *)&items[i]);
        }
        jw_put(w, "]", 1);
        break;
    }
    }
}

/* An object of the fields of s (a ckpt inside a ckpt_index). */
static void jw_fields(jw_t *w, const wire_schema_t *s, const char *base) {
    jw_put(w, "{", 1);
    for (int i = 0, first = 1; i < s->n_fields; i++) {
        if (s->fields[i].kind == WF_NAME && !wire_field_present(&s->fields[i], base)) continue;
        if (!first) jw_put(w, ",", 1);
        first = 0;
        jw_str(w, s->fields[i].name, strlen(s->fields[i].name));
        jw_put(w, ":", 1);
        jw_field(w, &s->fields[i], base);
    }
    jw_put(w, "}", 1);
}

int wire_to_json(const char *topic, const wire_msg_t *m, char *out, size_t cap) {
    if (!m || !out || cap == 0) return WIRE_ERR_ARG;
    const wire_schema_t *s = wire_schema_get(m->type);
    if (!s) return WIRE_ERR_ARG;
    jw_t w = {out, cap, 0, 0};
    out[0] = 0;
    jw_puts(&w, "{");
    if (topic) {
        jw_str(&w, "topic", 5);
        jw_put(&w, ":", 1);
        jw_str(&w, topic, strlen(topic));
        jw_put(&w, ",", 1);
    }
    jw_puts(&w, "\"v\":");
    jw_u64(&w, WIRE_VERSION);
    jw_key(&w, "type");
    jw_str(&w, s->name, strlen(s->name));
    for (int i = 0; i < s->n_fields; i++) {
        /* an optional name left empty is absent on the wire: absent here too (a missing mask
         * prints null, as it always has) */
        if (s->fields[i].kind == WF_NAME && !wire_field_present(&s->fields[i], (const char *)&m->u)) continue;
        jw_key(&w, s->fields[i].name);
        jw_field(&w, &s->fields[i], (const char *)&m->u);
    }
    jw_puts(&w, "}");
    if (w.full) {
        out[0] = 0;
        return WIRE_ERR_OVERSIZE;
    }
    return (int)w.len;
}

int bus_error_json(const char *topic, const char *error, char *out, size_t cap) {
    if (!out || cap == 0) return WIRE_ERR_ARG;
    jw_t w = {out, cap, 0, 0};
    out[0] = 0;
    jw_puts(&w, "{\"topic\":");
    if (topic) jw_str(&w, topic, strlen(topic));
    else jw_puts(&w, "null");
    jw_puts(&w, ",\"error\":");
    jw_str(&w, error ? error : "", error ? strlen(error) : 0);
    jw_puts(&w, "}");
    if (w.full) {
        out[0] = 0;
        return WIRE_ERR_OVERSIZE;
    }
    return (int)w.len;
}
