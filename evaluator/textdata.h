/* evaluator/textdata.h: what the text tasks (mc, em) share: reading a JSONL task file line by
 * line, and turning text into token ids and back with the run's tokenizer. */
#ifndef EVALUATOR_TEXTDATA_H
#define EVALUATOR_TEXTDATA_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/bpe.h"

/* Calls fn on every non-blank line of path parsed as a JSON object (line numbers from 1).
 * A line that is not a JSON object, or fn returning non-zero, stops with EVAL_EFORMAT and
 * "<path>:<line>: <why>" in err. limit > 0 reads that many objects only. */
typedef int (*eval_jsonl_fn)(json_t *obj, int line, void *ctx, char *why, size_t whylen);
int eval_jsonl_read(const char *path, int limit, eval_jsonl_fn fn, void *ctx, char *err,
                    size_t errlen);

typedef struct {
    bpe_vocab_t *vocab;
    bpe_t *bpe;
} eval_tok_t;

int eval_tok_open(eval_tok_t *t, const char *spec, char *err, size_t errlen);
void eval_tok_close(eval_tok_t *t);
/* The ids of s as a malloc'd array (*n of them; an empty string gives *n = 0 and a valid
 * pointer). Special-token text stays ordinary text. */
int eval_tok_encode(eval_tok_t *t, const char *s, uint32_t **ids, int *n);
/* Appends the bytes of ids to out (NUL-terminated); ids outside the vocabulary are dropped. */
int eval_tok_decode(eval_tok_t *t, const uint32_t *ids, int n, bpe_bytes_t *out);

/* Makes room for element n of the array *pp (elements of elem bytes, *cap allocated; grown
 * by doubling from 64): 0, or EVAL_ENOMEM with the array unchanged. */
int eval_grow(void *pp, int *cap, int n, size_t elem);

/* Number of UTF-8 characters (code points) of s: the "characters" of acc_char. */
int eval_utf8_chars(const char *s);
#endif
