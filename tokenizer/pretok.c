/* tokenizer/pretok.c: see pretok.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/errmsg.h"
#include "tokenizer/pretok.h"

#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe_vocab.h"
#include "tokenizer/pretok_fast.h"

struct pretok {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_jit_stack *stack;
    pcre2_match_context *mctx;
    int jit; /* JIT available; otherwise the interpreter runs (slower, same result) */
    size_t (*fast)(const uint8_t *, size_t, size_t); /* ASCII matcher for this pattern, or NULL */
    size_t (*fast_saved)(const uint8_t *, size_t, size_t);
};

const char *pretok_pattern_resolve(const char *s) {
    if (!s) return "";
    if (strcmp(s, "gpt2") == 0) return PRETOK_GPT2;
    if (strcmp(s, "cl100k") == 0 || strcmp(s, "cl100k_base") == 0) return PRETOK_CL100K;
    return s;
}

int pretok_new(pretok_t **out, const char *pattern, char *err, size_t errlen) {
    *out = NULL;
    pretok_t *p = calloc(1, sizeof *p);
    if (!p) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    if (!pattern || !*pattern) {
        *out = p; /* no code: one piece per text */
        return BPE_OK;
    }
    int ec;
    PCRE2_SIZE eo;
    p->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        free(p);
        return err_fail(err, errlen, BPE_EREGEX, "pattern does not compile: %s", (char *)msg);
    }
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    p->md = pcre2_match_data_create_from_pattern(p->code, NULL);
    p->mctx = pcre2_match_context_create(NULL);
    /* Long runs (e.g. a megabyte of spaces under \s+(?!\S)) need more than the 32 KiB default. */
    p->stack = p->jit ? pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL) : NULL;
    if (!p->md || !p->mctx || (p->jit && !p->stack)) {
        pretok_free(&p);
        return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    }
    if (p->jit) pcre2_jit_stack_assign(p->mctx, NULL, p->stack);
    if (strcmp(pattern, PRETOK_GPT2) == 0) p->fast = pretok_fast_gpt2;
    if (strcmp(pattern, PRETOK_CL100K) == 0) p->fast = pretok_fast_cl100k;
    p->fast_saved = p->fast;
    *out = p;
    return BPE_OK;
}

void pretok_free(pretok_t **pp) {
    if (!pp || !*pp) return;
    pretok_t *p = *pp;
    pcre2_match_data_free(p->md);
    pcre2_match_context_free(p->mctx);
    pcre2_jit_stack_free(p->stack);
    pcre2_code_free(p->code);
    free(p);
    *pp = NULL;
}

void pretok_set_fast(pretok_t *p, int on) { p->fast = on ? p->fast_saved : NULL; }

void pretok_iter_init(pretok_iter_t *it, const uint8_t *text, size_t len) {
    memset(it, 0, sizeof *it);
    it->text = text;
    it->len = len;
}

int pretok_next(pretok_t *p, pretok_iter_t *it, size_t *start, size_t *n) {
    if (it->pos >= it->len) return 0;
    if (!p->code) {
        *start = it->pos;
        *n = it->len - it->pos;
        it->pos = it->len;
        return 1;
    }
    if (!it->have_match && p->fast) {
        size_t e = p->fast(it->text, it->len, it->pos);
        if (e) {
            it->mstart = it->pos;
            it->mend = e;
            it->have_match = 1;
        }
    }
    if (!it->have_match) {
        /* NOTEMPTY: an empty match would not advance; such positions fall into a gap. */
        int rc = p->jit ? pcre2_jit_match(p->code, it->text, it->len, it->pos, PCRE2_NOTEMPTY, p->md, p->mctx)
                        : pcre2_match(p->code, it->text, it->len, it->pos, PCRE2_NOTEMPTY, p->md, p->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->mstart = it->mend = it->len;
        } else if (rc < 0) {
            return BPE_EREGEX;
        } else {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
            it->mstart = ov[0];
            it->mend = ov[1];
        }
        it->have_match = 1;
    }
    if (it->mstart > it->pos) { /* the gap before the match */
        *start = it->pos;
        *n = it->mstart - it->pos;
        it->pos = it->mstart;
        return 1;
    }
    *start = it->mstart;
    *n = it->mend - it->mstart;
    it->pos = it->mend;
    it->have_match = 0;
    return 1;
}
