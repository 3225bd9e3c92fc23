/* tokenizer/pretok.h: the pre-tokenizer, splitting text into the pieces that byte-pair merging
 * works on, exactly as tiktoken's regex does (Rust fancy-regex: leftmost-first alternation,
 * greedy backtracking quantifiers, Unicode 16.0.0 classes).
 *
 * There is no regex engine: each of tiktoken's patterns has a hand-written matcher
 * (pretok_match.c) over the generated Unicode tables of ucd.h, so the ids never depend on a
 * library's Unicode version. A vocabulary's pattern must be one of them (or "": the whole
 * text is one piece); any other pattern is refused by pretok_new with BPE_EREGEX.
 *   gpt2       tiktoken's gpt2, r50k_base, p50k_base and p50k_edit
 *   cl100k     cl100k_base
 *   o200k      o200k_base
 *
 * Pieces tile the text. Invalid UTF-8 (tiktoken's input is a string, so it has none): a match
 * never includes an invalid byte and sees it as the end of the text; each run of invalid bytes
 * is a piece of its own, merged like any bytes, so encoding stays lossless. */
#ifndef TOKENIZER_PRETOK_H
#define TOKENIZER_PRETOK_H
#include <stddef.h>
#include <stdint.h>

/* tiktoken's patterns, exactly as in the npm package's encoders/<name>.json "pat_str" (the
 * text is what a vocabulary records and what its canonical hash covers) */
#define PRETOK_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define PRETOK_CL100K                                                                        \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "             \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PRETOK_O200K                                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "                    \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pretok pretok_t;

/* Resolves a name ("gpt2", "cl100k", "cl100k_base", "o200k", "o200k_base"; "none" -> "") to
 * its pattern; other strings are returned unchanged. */
const char *pretok_pattern_resolve(const char *name_or_pattern);
/* 1 when pattern (a pattern text, not a name) is "" or one this pre-tokenizer implements. */
int pretok_pattern_known(const char *pattern);

/* A pre-tokenizer for pattern (a pattern text; NULL or "": no splitting). BPE_EREGEX with one
 * line in err for a pattern that is not implemented. */
int pretok_new(pretok_t **p, const char *pattern, char *err, size_t errlen);
void pretok_free(pretok_t **p);

typedef struct {
    const uint8_t *text;
    size_t len, pos;
} pretok_iter_t;

void pretok_iter_init(pretok_iter_t *it, const uint8_t *text, size_t len);
/* Next piece: returns 1 and sets *start and *n, 0 at the end. Never fails. */
int pretok_next(const pretok_t *p, pretok_iter_t *it, size_t *start, size_t *n);

/* The matchers (pretok_match.c): the end of the pattern's match at pos, where t[pos] is a
 * valid character (pt_class_at(t, len, pos) != PT_END); every such position has a match. */
size_t pretok_match_gpt2(const uint8_t *t, size_t len, size_t pos);
size_t pretok_match_cl100k(const uint8_t *t, size_t len, size_t pos);
size_t pretok_match_o200k(const uint8_t *t, size_t len, size_t pos);
#endif
