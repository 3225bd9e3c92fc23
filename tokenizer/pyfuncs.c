/* tokenizer/pyfuncs.c: the toy language of small Python functions (tokenizer/pyfuncs.h).
 *
 * Draw order (fixed): combinations rng_below(PYFUNCS_COMBOS) until one of the wanted split. */
#include "tokenizer/pyfuncs.h"

#include <stdio.h>

#include "common/rng.h"

static const char *const names[] = {"shift", "bump", "scale", "step", "adjust", "move",
                                    "calc", "apply", "next_value", "transform", "update", "tweak"};
static const char *const args[] = {"x", "n", "a", "v"};
static const char *const words[] = {"plus", "minus", "times"};
static const char ops[] = {'+', '-', '*'};
static const char *const numbers[] = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine"};
enum { N_NAMES = 12, N_ARGS = 4, N_OPS = 3, N_K = 9 };
_Static_assert(N_NAMES * N_ARGS * N_OPS * N_K == PYFUNCS_COMBOS, "combination count");

int pyfuncs_split(int combo) {
    uint64_t x = (uint64_t)combo * 0x2545F4914F6CDD1DULL;
    return rng_splitmix64(&x) % 5 == 0 ? PYFUNCS_TEST : PYFUNCS_TRAIN;
}

static long long apply(int op, long long v, int k) { return op == 0 ? v + k : op == 1 ? v - k : v * k; }

void pyfuncs_problem(uint64_t seed, uint64_t index, int split, pyfunc_t *out) {
    rng_t r;
    rng_seed2(&r, seed ^ 0x7079667563ULL, index);
    int c;
    do c = (int)rng_below(&r, PYFUNCS_COMBOS);
    while (pyfuncs_split(c) != split);
    const int k = 1 + c % N_K, op = c / N_K % N_OPS, a = c / (N_K * N_OPS) % N_ARGS, nm = c / (N_K * N_OPS * N_ARGS);
    snprintf(out->task_id, sizeof out->task_id, "PyFuncs/%s/%llu", split == PYFUNCS_TEST ? "test" : "train",
             (unsigned long long)index);
    snprintf(out->entry, sizeof out->entry, "%s", names[nm]);
    snprintf(out->prompt, sizeof out->prompt, "def %s(%s):\n    \"\"\"Return %s %s %s.\"\"\"\n", names[nm], args[a], args[a],
             words[op], numbers[k - 1]);
    snprintf(out->solution, sizeof out->solution, "    return %s %c %d\n", args[a], ops[op], k);
    static const int probe[3] = {4, -2, 11};
    snprintf(out->test, sizeof out->test,
             "\n\ndef check(candidate):\n    assert candidate(%d) == %lld\n    assert candidate(%d) == %lld\n"
             "    assert candidate(%d) == %lld\n",
             probe[0], apply(op, probe[0], k), probe[1], apply(op, probe[1], k), probe[2], apply(op, probe[2], k));
}
