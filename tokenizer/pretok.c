/* tokenizer/pretok.c: see pretok.h. The pattern registry and the piece iterator; the
 * matchers are in pretok_match.c. */
#include "common/errmsg.h"
#include "tokenizer/pretok.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe_vocab.h"
#include "tokenizer/pretok_class.h"

typedef size_t (*pretok_match_fn)(const uint8_t *, size_t, size_t);

struct pretok {
    pretok_match_fn match; /* NULL: no splitting */
};

static const struct {
    const char *names[2]; /* short name, tiktoken's encoding name */
    const char *pattern;
    pretok_match_fn match;
} PATTERNS[] = {
    {{"gpt2", "gpt2"}, PRETOK_GPT2, pretok_match_gpt2},
    {{"cl100k", "cl100k_base"}, PRETOK_CL100K, pretok_match_cl100k},
    {{"o200k", "o200k_base"}, PRETOK_O200K, pretok_match_o200k},
};
enum { N_PATTERNS = sizeof PATTERNS / sizeof PATTERNS[0] };

const char *pretok_pattern_resolve(const char *s) {
    if (!s || strcmp(s, "none") == 0) return "";
    for (int i = 0; i < N_PATTERNS; i++)
        if (strcmp(s, PATTERNS[i].names[0]) == 0 || strcmp(s, PATTERNS[i].names[1]) == 0) return PATTERNS[i].pattern;
    return s;
}

/* Index into PATTERNS, -1 for "" (no splitting), -2 when not implemented. */
static int pattern_index(const char *pattern) {
    if (!pattern || !*pattern) return -1;
    for (int i = 0; i < N_PATTERNS; i++)
        if (strcmp(pattern, PATTERNS[i].pattern) == 0) return i;
    return -2;
}

int pretok_pattern_known(const char *pattern) { return pattern_index(pattern) != -2; }

int pretok_new(pretok_t **out, const char *pattern, char *err, size_t errlen) {
    *out = NULL;
    int k = pattern_index(pattern);
    if (k == -2)
        return err_fail(err, errlen, BPE_EREGEX,
                        "pre-tokenizer pattern \"%.60s%s\" is not implemented (only tiktoken's gpt2, cl100k_base "
                        "and o200k_base patterns, or none)",
                        pattern, strlen(pattern) > 60 ? "..." : "");
    pretok_t *p = calloc(1, sizeof *p);
    if (!p) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    p->match = k >= 0 ? PATTERNS[k].match : NULL;
    *out = p;
    return BPE_OK;
}

void pretok_free(pretok_t **pp) {
    if (!pp || !*pp) return;
    free(*pp);
    *pp = NULL;
}

void pretok_iter_init(pretok_iter_t *it, const uint8_t *text, size_t len) {
    it->text = text;
    it->len = len;
    it->pos = 0;
}

int pretok_next(const pretok_t *p, pretok_iter_t *it, size_t *start, size_t *n) {
    size_t pos = it->pos, len = it->len, next;
    if (pos >= len) return 0;
    size_t end = len;
    if (p->match) {
        if (it->text[pos] >= 0x80 && pt_class_at(it->text, len, pos, &next) == PT_END) { /* a run of invalid bytes */
            end = pos + 1;
            while (end < len && pt_class_at(it->text, len, end, &next) == PT_END) end++;
        } else {
            end = p->match(it->text, len, pos);
        }
    }
    *start = pos;
    *n = end - pos;
    it->pos = end;
    return 1;
}
