/* tokenizer/pyfuncs.h: a toy language of small Python functions, the code task's own data
 * (its end-to-end test trains a tiny model on it and scores pass@k on held-out problems).
 *
 * A problem is a one-line function: a name (12 choices), an argument (4), an operation (plus,
 * minus, times) and a constant 1..9 (written as a word in the docstring, a digit in the code);
 * 1296 combinations. The prompt is the signature and a docstring saying what to return, the
 * solution the return line:
 *
 *     def shift(x):
 *         """Return x plus three."""
 *         return x + 3
 *
 * and the test a HumanEval check(candidate) asserting three values. Every combination belongs
 * to one split for good (a hash of it: about 1 in 5 is "test"), so problems of the test split
 * are held out from any amount of training text: a model can only solve them by composing
 * what it learnt of names, arguments, words and digits. Problem i of (seed, split) is a pure
 * function of them. */
#ifndef TOKENIZER_PYFUNCS_H
#define TOKENIZER_PYFUNCS_H
#include <stdint.h>

enum { PYFUNCS_TRAIN = 0, PYFUNCS_TEST = 1 };
#define PYFUNCS_COMBOS 1296

typedef struct {
    char task_id[48];
    char entry[32];    /* the function's name */
    char prompt[160];  /* "def name(arg):\n    \"\"\"Return arg plus three.\"\"\"\n" */
    char solution[64]; /* "    return arg + 3\n" */
    char test[256];    /* "\n\ndef check(candidate):\n    assert candidate(4) == 7\n..." */
} pyfunc_t;

/* Problem `index` of (seed, split): a combination of that split drawn uniformly. */
void pyfuncs_problem(uint64_t seed, uint64_t index, int split, pyfunc_t *out);
/* The split of combination c (0 <= c < PYFUNCS_COMBOS). */
int pyfuncs_split(int combo);
#endif
