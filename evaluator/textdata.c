/* evaluator/textdata.c: JSONL task files and the tokenizer wrapper (see textdata.h). */
#include "evaluator/textdata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/lm.h"
#include "tokenizer/bpe_io.h"

int eval_jsonl_read(const char *path, int limit, eval_jsonl_fn fn, void *ctx, char *err,
                    size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return EVAL_EIO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, got = 0, rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
        if (i == (size_t)len) continue;
        json_error_t je;
        json_t *obj = json_loadb(line, (size_t)len, 0, &je);
        if (!obj || !json_is_object(obj)) {
            snprintf(err, errlen, "%s:%d: not a JSON object%s%s", path, lineno, obj ? "" : ": ",
                     obj ? "" : je.text);
            json_decref(obj);
            rc = EVAL_EFORMAT;
            break;
        }
        char why[256] = "";
        int r = fn(obj, lineno, ctx, why, sizeof why);
        json_decref(obj);
        if (r) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            rc = r == EVAL_ENOMEM ? r : EVAL_EFORMAT;
            break;
        }
        if (limit > 0 && ++got >= limit) break;
    }
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = EVAL_EIO;
    }
    free(line);
    fclose(f);
    return rc;
}

int eval_tok_open(eval_tok_t *t, const char *spec, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    char why[256];
    if (!spec) {
        snprintf(err, errlen, "this task needs --vocab (the run's tokenizer: bytes, gpt2, a file...)");
        return EVAL_EARG;
    }
    if (bpe_vocab_open(&t->vocab, spec, why, sizeof why) < 0) {
        snprintf(err, errlen, "vocabulary %s: %s", spec, why);
        return EVAL_EIO;
    }
    if (bpe_new(&t->bpe, t->vocab, why, sizeof why) < 0) {
        snprintf(err, errlen, "vocabulary %s: %s", spec, why);
        bpe_vocab_free(&t->vocab);
        return EVAL_EFORMAT;
    }
    return 0;
}

void eval_tok_close(eval_tok_t *t) {
    bpe_free(&t->bpe);
    bpe_vocab_free(&t->vocab);
}

int eval_tok_encode(eval_tok_t *t, const char *s, uint32_t **ids, int *n) {
    bpe_ids_t a = {0};
    if (bpe_encode(t->bpe, (const uint8_t *)s, strlen(s), 0, &a) < 0) {
        bpe_ids_free(&a);
        return EVAL_ENOMEM;
    }
    if (!a.v) {
        a.v = malloc(sizeof(uint32_t));
        if (!a.v) return EVAL_ENOMEM;
    }
    *ids = a.v;
    *n = (int)a.n;
    return 0;
}

int eval_tok_decode(eval_tok_t *t, const uint32_t *ids, int n, bpe_bytes_t *out) {
    for (int i = 0; i < n; i++) {
        size_t bad;
        /* one id at a time so an id the tokenizer lacks (a model vocabulary padded beyond the
         * tokenizer's) drops out instead of failing the whole text */
        if (bpe_decode(t->vocab, ids + i, 1, out, &bad) < 0) continue;
    }
    if (bpe_bytes_append(out, "", 1) < 0) return EVAL_ENOMEM;
    out->n--;
    return 0;
}

int eval_grow(void *pp, int *cap, int n, size_t elem) {
    if (n < *cap) return 0;
    int nc = *cap ? 2 * *cap : 64;
    void *q = realloc(*(void **)pp, elem * (size_t)nc);
    if (!q) return EVAL_ENOMEM;
    *(void **)pp = q;
    *cap = nc;
    return 0;
}

int eval_utf8_chars(const char *s) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xC0) != 0x80) n++;
    return n;
}
