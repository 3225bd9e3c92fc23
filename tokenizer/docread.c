/* tokenizer/docread.c: see docread.h. */
#include "common/errmsg.h"
#include "tokenizer/docread.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/bpe_vocab.h"

struct docread {
    FILE *f;
    int own; /* close f at the end (not stdin) */
    char *path;
    docread_format_t fmt;
    char *line;
    size_t cap;
    long lineno;
    uint64_t skipped; /* blank lines */
    uint64_t offset, size;
    json_t *doc; /* the JSON object whose "text" the caller is reading */
};

int docread_format_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "text") == 0) return DOCREAD_TEXT;
    if (strcmp(s, "jsonl") == 0) return DOCREAD_JSONL;
    return -1;
}

int docread_open(docread_t **out, const char *path, docread_format_t fmt, char *err, size_t errlen) {
    *out = NULL;
    docread_t *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    }
    r->fmt = fmt;
    if (strcmp(path, "-") == 0) {
        r->f = stdin;
    } else {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            free(r->path);
            free(r);
            return err_fail(err, errlen, BPE_EARG, "%s: is a directory", path);
        }
        r->f = fopen(path, "rb");
        if (!r->f) {
            int e = errno;
            free(r->path);
            free(r);
            return err_fail(err, errlen, e == ENOENT ? BPE_ENOENT : BPE_EIO, "%s: %s", path, strerror(e));
        }
        r->own = 1;
        if (fstat(fileno(r->f), &st) == 0 && S_ISREG(st.st_mode)) r->size = (uint64_t)st.st_size;
    }
    *out = r;
    return BPE_OK;
}

int docread_next(docread_t *r, const char **text, size_t *len, char *err, size_t errlen) {
    json_decref(r->doc);
    r->doc = NULL;
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->line, &r->cap, r->f);
        if (n < 0) {
            if (ferror(r->f)) return err_fail(err, errlen, BPE_EIO, "%s: read error: %s", r->path, strerror(errno));
            return 0;
        }
        r->lineno++;
        r->offset += (uint64_t)n;
        if (n > 0 && r->line[n - 1] == '\n') n--;
        if (n > 0 && r->line[n - 1] == '\r') n--;
        if (r->fmt == DOCREAD_TEXT) {
            if (n == 0) {
                r->skipped++;
                continue;
            }
            *text = r->line;
            *len = (size_t)n;
            return 1;
        }
        size_t k = 0;
        while (k < (size_t)n && (r->line[k] == ' ' || r->line[k] == '\t')) k++;
        if (k == (size_t)n) { /* blank line */
            r->skipped++;
            continue;
        }
        json_error_t je;
        r->doc = json_loadb(r->line, (size_t)n, JSON_ALLOW_NUL, &je);
        if (!r->doc)
            return err_fail(err, errlen, BPE_EFORMAT, "%s:%ld: bad JSON: %s", r->path, r->lineno, je.text);
        json_t *t = json_object_get(r->doc, "text");
        if (!json_is_string(t))
            return err_fail(err, errlen, BPE_EFORMAT, "%s:%ld: no \"text\" string field", r->path, r->lineno);
        *text = json_string_value(t);
        *len = json_string_length(t);
        return 1;
    }
}

uint64_t docread_offset(const docread_t *r) { return r->offset; }
uint64_t docread_size(const docread_t *r) { return r->size; }
uint64_t docread_skipped(const docread_t *r) { return r->skipped; }

void docread_close(docread_t **pr) {
    if (!pr || !*pr) return;
    docread_t *r = *pr;
    json_decref(r->doc);
    if (r->own) fclose(r->f);
    free(r->line);
    free(r->path);
    free(r);
    *pr = NULL;
}
