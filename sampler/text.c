/* sampler/text.c: see text.h. */
#include "sampler/text.h"

#include <stdlib.h>
#include <string.h>

#include "bus/utf8.h"
#include "tokenizer/bpe.h"

int sampler_text_encode(const bpe_vocab_t *v, const char *text, size_t len, int eot_prefix,
                        uint32_t eot, uint32_t **ids, int *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    bpe_t *b = NULL;
    bpe_ids_t out = {0};
    if (bpe_new(&b, v, err, errlen) < 0) return -1;
    int rc = eot_prefix ? bpe_ids_push(&out, eot) : 0;
    if (!rc && len) rc = bpe_encode(b, (const uint8_t *)text, len, 0, &out);
    bpe_free(&b);
    if (rc < 0) {
        snprintf(err, errlen, "encoding the prompt: %s", bpe_strerror(rc));
        bpe_ids_free(&out);
        return -1;
    }
    *ids = out.v;
    *n = (int)out.n;
    return 0;
}

char *sampler_text_decode(const bpe_vocab_t *v, const uint32_t *ids, int n, size_t *len) {
    bpe_bytes_t out = {0};
    for (int i = 0; i < n; i++) {
        uint32_t tl;
        const uint8_t *t = bpe_vocab_token(v, ids[i], &tl);
        if (t && bpe_bytes_append(&out, t, tl) < 0) { bpe_bytes_free(&out); return NULL; }
    }
    if (bpe_bytes_append(&out, "", 1) < 0) { bpe_bytes_free(&out); return NULL; }
    *len = out.n - 1;
    return (char *)out.v;
}

void sampler_text_print_line(FILE *f, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '\\') fputs("\\\\", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else fputc(c, f);
    }
    fputc('\n', f);
}

char *sampler_text_utf8(const char *s, size_t len) {
    char *o = malloc(len * 3 + 1); /* every byte may become the 3-byte U+FFFD */
    if (o) wire_utf8_clean(o, len * 3 + 1, s, len);
    return o;
}

char *sampler_text_read_all(FILE *f, size_t max, size_t *len, char *err, size_t errlen) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { snprintf(err, errlen, "out of memory"); return NULL; }
    for (;;) {
        if (n == cap) {
            if (cap >= max) { free(buf); snprintf(err, errlen, "prompt on stdin exceeds %zu bytes", max); return NULL; }
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); snprintf(err, errlen, "out of memory"); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) { free(buf); snprintf(err, errlen, "reading stdin failed"); return NULL; }
    if (n > max) { free(buf); snprintf(err, errlen, "prompt on stdin exceeds %zu bytes", max); return NULL; }
    if (n && buf[n - 1] == '\n') n--;
    buf[n] = 0;
    *len = n;
    return buf;
}
