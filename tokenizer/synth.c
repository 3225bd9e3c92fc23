/* tokenizer/synth.c: the synthetic sequences of seed 000 §4.1 (tokenizer/synth.h).
 *
 * Draw order (fixed, so sequence i of a seed never changes): letter = rng_below(26),
 * start = rng_below(57), then for each of the 64 body positions in order one
 * rng_below(16) == 0 decides whether it becomes '!'. */
#include "tokenizer/synth.h"

#include "common/rng.h"

#define SYNTH_N_STARTS (SYNTH_BODY_LEN - SYNTH_TARGET_LEN + 1) /* 57 */

void synth_sequence(uint64_t seed, uint64_t index, char out[SYNTH_LINE_LEN + 1], synth_info_t *info) {
    rng_t r;
    rng_seed2(&r, seed, index);
    char letter = (char)('A' + rng_below(&r, 26));
    int start = (int)rng_below(&r, SYNTH_N_STARTS);
    char *body = out + SYNTH_PROMPT_LEN;
    int n_noise = 0;
    out[0] = letter;
    out[1] = '>';
    for (int i = 0; i < SYNTH_BODY_LEN; i++) {
        body[i] = (i >= start && i < start + SYNTH_TARGET_LEN) ? letter : '_';
        if (rng_below(&r, SYNTH_NOISE_DENOM) == 0) {
            body[i] = '!';
            n_noise++;
        }
    }
    out[SYNTH_LINE_LEN] = 0;
    if (info) {
        info->letter = letter;
        info->start = start;
        info->n_noise = n_noise;
    }
}

/* The rule for '!' (a wildcard: noise may hide a target letter or an underscore):
 *   - every character is `letter`, '_' or '!';
 *   - at least one `letter` is visible (a run hidden entirely by noise is not a run we can
 *     see; a generated sequence has that with probability 16^-8, about 2e-10);
 *   - the visible letters, from the first to the last, lie within 8 consecutive positions
 *     holding only `letter` or '!' (a '_' between them means two runs);
 *   - some window of exactly 8 positions inside the body covers all visible letters and holds
 *     only `letter` or '!' (too short a run with '_' on both sides fails here).
 * When '!' at a run's edges leaves several windows possible, *start receives the LEFTMOST
 * one; the true start is always one of the possible windows, and when both ends of the run
 * are visible letters the window is unique. */
int synth_judge(char letter, const char *body, int body_len, int *start) {
    if (!body || body_len != SYNTH_BODY_LEN || letter < 'A' || letter > 'Z') return 0;
    int first = -1, last = -1;
    for (int i = 0; i < body_len; i++) {
        char c = body[i];
        if (c == letter) {
            if (first < 0) first = i;
            last = i;
        } else if (c != '_' && c != '!') {
            return 0;
        }
    }
    if (first < 0 || last - first + 1 > SYNTH_TARGET_LEN) return 0;
    for (int i = first; i <= last; i++)
        if (body[i] == '_') return 0;
    int lo = last - SYNTH_TARGET_LEN + 1;
    if (lo < 0) lo = 0;
    int hi = first < SYNTH_N_STARTS - 1 ? first : SYNTH_N_STARTS - 1;
    for (int s = lo; s <= hi; s++) {
        int ok = 1;
        for (int i = s; i < s + SYNTH_TARGET_LEN && ok; i++) ok = body[i] != '_';
        if (ok) {
            if (start) *start = s;
            return 1;
        }
    }
    return 0;
}
