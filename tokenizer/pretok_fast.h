/* tokenizer/pretok_fast.h: hand-written matchers for the gpt2 and cl100k patterns on ASCII.
 *
 * The regex engine spends most of its time on Unicode property tests; on ASCII text the two
 * tiktoken patterns are simple enough to decide by table lookups. Each function returns the
 * end of the match that the PCRE2 pattern would find starting at pos (same alternative, same
 * backtracking), or 0 when deciding needs a non-ASCII character's class: the caller then
 * asks PCRE2. Both patterns match at every ASCII position, so a match found here always
 * starts at pos. Checked against PCRE2 by tests/test_tokenizer.c (random mixed text) and
 * against tiktoken by the fixtures. */
#ifndef TOKENIZER_PRETOK_FAST_H
#define TOKENIZER_PRETOK_FAST_H
#include <stddef.h>
#include <stdint.h>

size_t pretok_fast_gpt2(const uint8_t *t, size_t len, size_t pos);
size_t pretok_fast_cl100k(const uint8_t *t, size_t len, size_t pos);
#endif
