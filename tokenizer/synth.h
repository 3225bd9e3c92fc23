/* tokenizer/synth.h: the synthetic sequences of the Free Transformer paper (seed 000, §4.1).
 *
 * Each sequence is 64 characters: underscores, with one upper-case letter repeated
 * SYNTH_TARGET_LEN times at a uniformly random start position (0..64-8), then every one of the
 * 64 characters independently replaced by '!' with probability 1/16; the prompt "L>" (the
 * target's letter and '>') is put in front, so a full line is 66 characters.
 * Sequence i of a seed is a pure function of (seed, i): any process can regenerate any line. */
#ifndef TOKENIZER_SYNTH_H
#define TOKENIZER_SYNTH_H
#include <stdint.h>

#define SYNTH_BODY_LEN 64
#define SYNTH_TARGET_LEN 8
#define SYNTH_PROMPT_LEN 2
#define SYNTH_LINE_LEN (SYNTH_PROMPT_LEN + SYNTH_BODY_LEN) /* 66 */
#define SYNTH_NOISE_DENOM 16                             /* '!' with probability 1/16 */

typedef struct {
    char letter;   /* 'A'..'Z' */
    int start;     /* first position of the target run in the 64-character body */
    int n_noise;   /* number of '!' in the body */
} synth_info_t;

/* Writes sequence `index` of `seed` into out (SYNTH_LINE_LEN chars + NUL). info may be NULL. */
void synth_sequence(uint64_t seed, uint64_t index, char out[SYNTH_LINE_LEN + 1], synth_info_t *info);

/* Judges a generated 64-character body against the prompt's letter, the paper's Figure-4
 * criterion: valid when, treating '!' as a wildcard noise character, the body holds exactly one
 * run of `letter` of length SYNTH_TARGET_LEN and nothing else but '_' and '!'. On success
 * returns 1 and *start receives the run's start; returns 0 when invalid. body_len must be 64. */
int synth_judge(char letter, const char *body, int body_len, int *start);
#endif
