/* tests/test_synth.c: the synthetic sequences (tokenizer/synth.c): statistics over 100k
 * sequences, line shape, determinism, and the judge on generated and broken bodies. */
#include <math.h>
#include <string.h>

#include "tests/check.h"
#include "tokenizer/synth.h"

#define N_SEQ 100000

/* Chi-square goodness of fit against the uniform distribution over k cells. With k-1 degrees
 * of freedom the statistic has mean k-1 and sd sqrt(2(k-1)); we fail beyond mean + 6 sd
 * (p < 1e-6 for a correct generator, while a biased one, e.g. a letter missing, gives a
 * statistic in the thousands). */
static double chi2_uniform(const long *count, int k, long n) {
    double e = (double)n / k, x = 0;
    for (int i = 0; i < k; i++) x += (count[i] - e) * (count[i] - e) / e;
    return x;
}

static void test_shape_and_statistics(void) {
    long letters[26] = {0}, starts[57] = {0}, noise = 0;
    int bad_shape = 0, bad_info = 0;
    char line[SYNTH_LINE_LEN + 1];
    for (long i = 0; i < N_SEQ; i++) {
        synth_info_t info;
        synth_sequence(42, (uint64_t)i, line, &info);
        if (strlen(line) != SYNTH_LINE_LEN || line[1] != '>' || line[0] != info.letter) bad_shape++;
        int n_noise = 0, n_letter = 0;
        for (int j = 0; j < SYNTH_BODY_LEN; j++) {
            char c = line[SYNTH_PROMPT_LEN + j];
            int in_run = j >= info.start && j < info.start + SYNTH_TARGET_LEN;
            if (c == '!') n_noise++;
            else if (c == info.letter && in_run) n_letter++;
            else if (c != '_' || in_run) bad_shape++;
        }
        if (n_noise != info.n_noise || n_letter + n_noise < SYNTH_TARGET_LEN) bad_info++;
        if (info.letter < 'A' || info.letter > 'Z' || info.start < 0 || info.start > 56) { bad_info++; continue; }
        letters[info.letter - 'A']++;
        starts[info.start]++;
        noise += n_noise;
    }
    CHECK(bad_shape == 0, "%d malformed characters/lines", bad_shape);
    CHECK(bad_info == 0, "%d infos disagree with the line", bad_info);
    double x_letter = chi2_uniform(letters, 26, N_SEQ), x_start = chi2_uniform(starts, 57, N_SEQ);
    CHECK(x_letter < 25 + 6 * sqrt(50), "letter chi2 %.1f (25 dof)", x_letter);
    CHECK(x_start < 56 + 6 * sqrt(112), "start chi2 %.1f (56 dof)", x_start);
    /* '!' rate: N_SEQ*64 Bernoulli(1/16) draws; fail beyond 5 standard errors. */
    double n = (double)N_SEQ * SYNTH_BODY_LEN, p = 1.0 / SYNTH_NOISE_DENOM;
    double rate = noise / n, se = sqrt(p * (1 - p) / n);
    CHECK(fabs(rate - p) < 5 * se, "noise rate %.5f vs %.5f (se %.5f)", rate, p, se);
}

static void test_deterministic(void) {
    char a[SYNTH_LINE_LEN + 1], b[SYNTH_LINE_LEN + 1];
    int same_seed_diff = 0, other_seed_same = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        synth_sequence(7, i, a, NULL);
        synth_sequence(7, i, b, NULL);
        same_seed_diff += strcmp(a, b) != 0;
        synth_sequence(8, i, b, NULL);
        other_seed_same += strcmp(a, b) == 0;
    }
    CHECK(same_seed_diff == 0, "(seed, index) is not a pure function");
    CHECK(other_seed_same < 5, "%d of 1000 lines equal under another seed", other_seed_same);
}

/* Every generated body is accepted; the reported start is a consistent window at or before
 * the true one, and equals it when both run ends are visible letters. */
static void test_judge_accepts_generated(void) {
    int rejected = 0, wrong_start = 0, ambiguous = 0;
    char line[SYNTH_LINE_LEN + 1];
    for (long i = 0; i < N_SEQ; i++) {
        synth_info_t info;
        synth_sequence(99, (uint64_t)i, line, &info);
        const char *body = line + SYNTH_PROMPT_LEN;
        int s = -1;
        if (!synth_judge(line[0], body, SYNTH_BODY_LEN, &s)) {
            /* only legitimate when noise hid all 8 letters (probability ~2e-10) */
            int all_hidden = 1;
            for (int j = 0; j < SYNTH_TARGET_LEN; j++) all_hidden &= body[info.start + j] == '!';
            rejected += !all_hidden;
            continue;
        }
        int exact = body[info.start] == info.letter && body[info.start + SYNTH_TARGET_LEN - 1] == info.letter;
        if (exact) wrong_start += s != info.start;
        else {
            ambiguous++;
            wrong_start += s > info.start;
        }
    }
    CHECK(rejected == 0, "%d generated sequences rejected", rejected);
    CHECK(wrong_start == 0, "%d wrong starts", wrong_start);
    CHECK(ambiguous > 1000, "only %d sequences with noise at a run edge: test not exercising it", ambiguous);
}

static void body_make(char *body, char letter, int start, int len) {
    memset(body, '_', SYNTH_BODY_LEN);
    for (int i = start; i < start + len && i < SYNTH_BODY_LEN; i++) body[i] = letter;
}

static void test_judge_rejects_broken(void) {
    char body[SYNTH_BODY_LEN + 1] = {0};
    int s = -1;
    body_make(body, 'Q', 10, 8);
    CHECK(synth_judge('Q', body, 64, &s) == 1 && s == 10, "clean run, start %d", s);
    CHECK(synth_judge('R', body, 64, &s) == 0, "wrong letter accepted");
    CHECK(synth_judge('Q', body, 63, &s) == 0, "wrong body length accepted");
    body_make(body, 'Q', 10, 7);
    CHECK(synth_judge('Q', body, 64, &s) == 0, "run of 7 accepted");
    body_make(body, 'Q', 10, 9);
    CHECK(synth_judge('Q', body, 64, &s) == 0, "run of 9 accepted");
    body_make(body, 'Q', 10, 8);
    body[40] = 'Q';
    CHECK(synth_judge('Q', body, 64, &s) == 0, "second run accepted");
    body_make(body, 'Q', 10, 8);
    body[12] = '_';
    CHECK(synth_judge('Q', body, 64, &s) == 0, "run with a hole accepted");
    body_make(body, 'Q', 10, 8);
    body[40] = 'Z';
    CHECK(synth_judge('Q', body, 64, &s) == 0, "other letter accepted");
    body[40] = 'a';
    CHECK(synth_judge('Q', body, 64, &s) == 0, "foreign character accepted");
    body_make(body, 'Q', 0, 0);
    CHECK(synth_judge('Q', body, 64, &s) == 0, "empty body accepted");
    /* 7 letters + '!' on one side: the '!' completes the run (leftmost rule when both sides) */
    body_make(body, 'Q', 11, 7);
    body[10] = '!';
    CHECK(synth_judge('Q', body, 64, &s) == 1 && s == 10, "noisy edge: start %d", s);
    body[18] = '!';
    CHECK(synth_judge('Q', body, 64, &s) == 1 && s == 10, "ambiguous edges: start %d, leftmost is 10", s);
    /* runs at the very ends of the body */
    body_make(body, 'Q', 56, 8);
    CHECK(synth_judge('Q', body, 64, &s) == 1 && s == 56, "run at the end: %d", s);
    body_make(body, 'Q', 57, 7);
    CHECK(synth_judge('Q', body, 64, &s) == 0, "run cut by the end accepted");
    body_make(body, 'Q', 0, 8);
    body[3] = '!';
    CHECK(synth_judge('Q', body, 64, &s) == 1 && s == 0, "run at start with noise: %d", s);
}

int main(void) {
    RUN(test_shape_and_statistics);
    RUN(test_deterministic);
    RUN(test_judge_accepts_generated);
    RUN(test_judge_rejects_broken);
    return check_summary();
}
