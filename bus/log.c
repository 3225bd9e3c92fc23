/* bus/log.c: a program's lines on stderr and on the bus (bus/log.h). */
#include "bus/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "bus/utf8.h"

/* Bytes src[0..n) takes once cleaned (wire_utf8_clean: a bad byte or a NUL becomes 3). */
static size_t clean_len(const char *src, size_t n) {
    const unsigned char *u = (const unsigned char *)src;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t k = wire_utf8_len(u + i, n - i);
        w += k && u[i] ? k : 3;
        i += k ? k : 1;
    }
    return w;
}

size_t bus_log_fit(char *out, size_t cap, const char *src, size_t n) {
    static const char ellipsis[] = "\xe2\x80\xa6"; /* U+2026 */
    if (cap < sizeof ellipsis) {
        if (cap) out[0] = 0;
        return 0;
    }
    if (clean_len(src, n) <= cap - 1) return wire_utf8_clean(out, cap, src, n);
    /* cut on a character boundary, leaving room for the mark that says so */
    size_t w = wire_utf8_clean(out, cap - (sizeof ellipsis - 1), src, n);
    memcpy(out + w, ellipsis, sizeof ellipsis);
    return w + sizeof ellipsis - 1;
}

static int publish_line(const bus_log_t *lg, const char *line, size_t n) {
    size_t pn = strlen(lg->program);
    if (!pn || pn >= WIRE_NAME_LEN) return BUS_ERR_ARG; /* the schema's name; the topic's too */
    wire_msg_t m = {.type = MSG_LOG};
    memcpy(m.u.log.program, lg->program, pn + 1);
    char text[BUS_LOG_MAX + 1], topic[WIRE_NAME_LEN + 8];
    bus_log_fit(text, sizeof text, line, n);
    m.u.log.line = text;
    snprintf(topic, sizeof topic, "log/%s", lg->program);
    return bus_publish(lg->pub, topic, &m); /* ZMQ_DONTWAIT: dropped, never waited for */
}

int bus_log(const bus_log_t *lg, const char *fmt, ...) {
    if (!lg || !lg->program || !fmt) return BUS_ERR_ARG;
    char small[1024], *text = small;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small) { /* a long line (paths, a quoted error): whole on stderr */
        char *big = malloc((size_t)n + 1);
        if (big) vsnprintf(big, (size_t)n + 1, fmt, again), text = big;
    }
    va_end(again);
    if (n < 0) return BUS_ERR_ARG;
    int rc = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len) {
            if (!lg->quiet) fprintf(stderr, "%s: %.*s\n", lg->program, (int)len, p);
            int r = lg->pub ? publish_line(lg, p, len) : 0;
            if (r && !rc) rc = r;
        }
        p += len + (e != NULL);
    }
    if (text != small) free(text);
    return rc;
}
