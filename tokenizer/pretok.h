/* tokenizer/pretok.h: the pre-tokenizer, splitting text into pieces with a PCRE2 pattern
 * (UTF + UCP, JIT compiled) before byte-pair merging, as tiktoken does.
 *
 * Pieces tile the text: the matches, plus every stretch the pattern does not match (a "gap")
 * as a piece of its own. tiktoken drops gaps; the gpt2/cl100k patterns leave none in valid
 * UTF-8, so on valid text the two agree, and keeping gaps makes encoding lossless for any
 * pattern. Invalid UTF-8 (PCRE2_MATCH_INVALID_UTF): invalid bytes never match, so each
 * stretch of them becomes a gap piece and is byte-pair merged like any other bytes.
 *
 * Unicode classes: PCRE2's \s under UCP includes U+0085 (NEL) like Rust's regex (tiktoken);
 * the fixtures check NEL, NBSP, U+3000 and U+2028. The two libraries may carry different
 * Unicode versions, so a letter assigned only in the newer one can split differently. */
#ifndef TOKENIZER_PRETOK_H
#define TOKENIZER_PRETOK_H
#include <stddef.h>
#include <stdint.h>

/* tiktoken's patterns, as in the npm package's encoders/<name>.json */
#define PRETOK_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define PRETOK_CL100K                                                                        \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "             \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pretok pretok_t;

/* Resolves an alias ("gpt2", "cl100k", "cl100k_base") to its pattern; other strings are
 * returned unchanged. */
const char *pretok_pattern_resolve(const char *name_or_regex);

/* Compiles pattern ("" or NULL: no splitting, the whole text is one piece). */
int pretok_new(pretok_t **p, const char *pattern, char *err, size_t errlen);
void pretok_free(pretok_t **p);
/* The gpt2 and cl100k patterns get a hand-written ASCII matcher (pretok_fast.h) that defers
 * to PCRE2 on non-ASCII; on by default, switchable so tests can compare the two. */
void pretok_set_fast(pretok_t *p, int on);

typedef struct {
    const uint8_t *text;
    size_t len, pos;
    size_t mstart, mend; /* the pending match, when have_match */
    int have_match;
} pretok_iter_t;

void pretok_iter_init(pretok_iter_t *it, const uint8_t *text, size_t len);
/* Next piece: returns 1 and sets *start and *n, 0 at the end, negative BPE_EREGEX when the
 * matcher failed (e.g. JIT stack exhausted on a pathological input). */
int pretok_next(pretok_t *p, pretok_iter_t *it, size_t *start, size_t *n);
#endif
