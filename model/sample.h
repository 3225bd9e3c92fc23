/* model/sample.h: picking the next token from a row of logits.
 *
 * The distribution is softmax(logits / temperature), then restricted to the top_k most
 * probable tokens (top_k <= 0 or >= V: no limit), then to the smallest set of most probable
 * tokens whose probability reaches top_p of what is left (nucleus; top_p >= 1: no limit),
 * renormalised. Ties in probability are ordered by id, so the kept set is a function of the
 * logits alone. temperature == 0 is greedy: the first id of the largest logit, no draw.
 * A sampled pick consumes exactly one rng_f64 draw, so a sequence's stream of draws (and its
 * text) depends only on its seed, not on what other sequences do.
 *
 * A sample_t holds the (V) work buffers; one per thread. */
#ifndef MODEL_SAMPLE_H
#define MODEL_SAMPLE_H
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"

typedef struct {
    float temperature;   /* 0: greedy; > 0 divides the logits */
    int top_k;           /* <= 0: all */
    float top_p;         /* in (0, 1]; 1: all */
} sample_opts_t;

#define SAMPLE_OPTS_DEFAULT ((sample_opts_t){1.0f, 0, 1.0f})

typedef struct sample sample_t;

/* 0, or -1 with a line in err (bad V, out of memory). */
int sample_create(sample_t **s, int V, char *err, size_t errlen);
void sample_destroy(sample_t **s);
/* Checks the options: temperature >= 0 and finite, 0 < top_p <= 1. 0 or -1 with a line. */
int sample_opts_check(const sample_opts_t *o, char *err, size_t errlen);

/* The distribution a pick draws from: probs (V) receives it (zeros outside the kept set).
 * Greedy puts 1 on the argmax. Returns the number of kept tokens. */
int sample_probs(sample_t *s, const float *logits, const sample_opts_t *o, float *probs);
/* Draws one id from that distribution with r (one rng_f64 draw unless greedy). */
uint32_t sample_pick(sample_t *s, const float *logits, const sample_opts_t *o, rng_t *r);
/* First id of the largest logit. */
uint32_t sample_argmax(const float *logits, int V);
#endif
