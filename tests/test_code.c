/* tests/test_code.c: the code task's pieces without a model: pass@k against exact binomials
 * (n = 10, every c and k) and its unbiasedness, the HumanEval / MBPP formats and the programs
 * they make, stop sequences, given completions, and the sandbox on a few quick programs (the
 * hostile ones run once, in tests/it_code.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evaluator/codeset.h"
#include "evaluator/lm.h"
#include "evaluator/passk.h"
#include "evaluator/sandbox.h"
#include "evaluator/task.h"
#include "tests/check.h"
#include "tests/tmpdir.h"


/* C(n, k) exactly (n <= 60 fits in 64 bits for every k) */
static uint64_t binom(int n, int k) {
    if (k < 0 || k > n) return 0;
    uint64_t r = 1;
    for (int i = 1; i <= k; i++) r = r * (uint64_t)(n - k + i) / (uint64_t)i; /* exact at every step */
    return r;
}

/* n = 10: every c and k against 1 - C(n-c,k)/C(n,k) from exact integers. The ratio of two
 * exact integers below 2^53 is correctly rounded, the product form is within a few ulps of it:
 * 1e-15 absolute. */
static void test_passk_closed_form(void) {
    const int n = 10;
    for (int c = 0; c <= n; c++)
        for (int k = 1; k <= n; k++) {
            double want = 1.0 - (double)binom(n - c, k) / (double)binom(n, k);
            CHECK_CLOSE(eval_pass_at_k(n, c, k), want, 1e-15, 0);
        }
    CHECK(eval_pass_at_k(10, 0, 1) == 0.0);
    CHECK(eval_pass_at_k(10, 10, 1) == 1.0);
    CHECK(eval_pass_at_k(10, 3, 1) == 0.3 || fabs(eval_pass_at_k(10, 3, 1) - 0.3) < 1e-15);
    CHECK(eval_pass_at_k(10, 1, 8) == 0.8 || fabs(eval_pass_at_k(10, 1, 8) - 0.8) < 1e-15); /* c = 1: k / n */
    CHECK(eval_pass_at_k(10, 8, 3) == 1.0);                                                  /* n - c < k */
    CHECK(isnan(eval_pass_at_k(10, 11, 1)) && isnan(eval_pass_at_k(10, 2, 0)) && isnan(eval_pass_at_k(10, 2, 11)));
}

/* n = 200 (Codex's): the binomials overflow doubles near C(200, 100) ~ 9e58 only later, but
 * C(1000, 500) does: the product form must stay finite and agree with lgamma's ratio. */
static void test_passk_large_n(void) {
    const int ns[] = {200, 1000};
    for (int t = 0; t < 2; t++) {
        const int n = ns[t];
        for (int c = 0; c <= n; c += n / 10)
            for (int k = 1; k <= n; k += n / 8) {
                double got = eval_pass_at_k(n, c, k);
                double want = n - c < k ? 1.0 : 1.0 - exp(lgamma(n - c + 1.0) - lgamma(n - c - k + 1.0) - lgamma(n + 1.0) + lgamma(n - k + 1.0));
                /* lgamma of ~1000 carries ~1e-13 relative error into the exponent */
                CHECK(isfinite(got) && fabs(got - want) < 1e-9, "n %d c %d k %d: %.17g vs %.17g", n, c, k, got, want);
            }
    }
}

/* The estimator is unbiased: E over c ~ Bin(n, p) of it is 1 - (1-p)^k; and its variance for
 * k = 1 is p (1 - p) / n. */
static void test_passk_unbiased(void) {
    const double ps[] = {0, 0.03, 0.2, 0.5, 0.9, 1};
    for (int i = 0; i < 6; i++)
        for (int k = 1; k <= 10; k++) {
            double mean, var;
            CHECK(eval_pass_at_k_moments(10, k, ps[i], &mean, &var) == 0);
            CHECK_CLOSE(mean, 1 - pow(1 - ps[i], k), 1e-12, 0);
            if (k == 1) CHECK_CLOSE(var, ps[i] * (1 - ps[i]) / 10, 1e-12, 0);
            const double q = 1 - pow(1 - ps[i], 10);
            if (k == 10) CHECK_CLOSE(var, q * (1 - q), 1e-12, 0); /* k = n: 1 when any passed: a Bernoulli(q) */
        }
    CHECK(eval_pass_at_k_moments(10, 11, 0.5, NULL, NULL) == -1);
}

static void test_humaneval_format(void) {
    write_file(tmp_path("he.jsonl"),
               "{\"task_id\": \"T/0\", \"prompt\": \"def f(x):\\n\", \"entry_point\": \"f\", \"canonical_solution\": \"    return x\\n\","
               " \"test\": \"def check(candidate):\\n    assert candidate(1) == 1\\n\"}\n"
               "\n"
               "{\"task_id\": \"T/1\", \"prompt\": \"def g():\\n\", \"entry_point\": \"g\", \"test\": \"def check(c):\\n    pass\\n\"}\n");
    code_set_t s;
    char err[512];
    CHECK(code_set_read(&s, tmp_path("he.jsonl"), 0, err, sizeof err) == 0, "%s", err);
    if (s.n != 2) return;
    CHECK(s.format == CODE_HUMANEVAL && !strcmp(s.p[0].task_id, "T/0") && !strcmp(s.p[0].canonical, "    return x\n"));
    CHECK(s.p[1].canonical == NULL);
    CHECK(s.nstop == 5 && !strcmp(s.stop[1], "\ndef"));
    char *prog = code_program(&s.p[0], "    return x\n", 0);
    /* human-eval's execution.py: prompt + completion + "\n" + test + "\n" + check(entry_point) */
    CHECK(prog && !strcmp(prog, "def f(x):\n    return x\n\ndef check(candidate):\n    assert candidate(1) == 1\n\ncheck(f)\n"), "%s", prog);
    free(prog);
    prog = code_program(&s.p[0], "def f(x): return x", 1); /* a solution replaces prompt + completion */
    CHECK(prog && !strncmp(prog, "def f(x): return x\ndef check", 28), "%s", prog);
    free(prog);
    CHECK(code_set_find(&s, "T/1") == 1 && code_set_find(&s, "T/2") == -1);
    CHECK(code_set_stops(&s, "[\"\\nreturn\", \"#\"]", err, sizeof err) == 0 && s.nstop == 2);
    CHECK(code_set_stops(&s, "{\"a\": 1}", err, sizeof err) == EVAL_EARG && strstr(err, "JSON array"), "%s", err);
    CHECK(code_set_stops(&s, "[\"\"]", err, sizeof err) == EVAL_EARG);
    code_set_free(&s);
}

/* Scores the completions of file `completions` for the problems of `problems` through the code
 * task (the sandbox, 2 jobs); 0 with v filled, else the task's status (a CHECK failed). */
static int score_given(const char *problems, const char *completions, const char *samples_out, eval_values_t *v) {
    eval_task_cfg_t c = {.task = "code", .batch = 1, .file = problems, .completions = completions, .top_p = 1,
                         .samples_out = samples_out, .sandbox = {.wall_s = 10, .cpu_s = 5, .jobs = 2}};
    eval_task_t *t = NULL;
    char err[1024];
    int rc = eval_task_open(&t, &c, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) return rc;
    rc = eval_task_run(t, NULL, v, NULL, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    eval_task_close(&t);
    return rc;
}

static void expect_read_fails(const char *text, const char *want);

/* HumanEval+ as evalplus distributes it: base_input + plus_input run against the canonical
 * solution (no "test" field needed). The prompt holds quotes, a backslash and UTF-8, which the
 * reference's source must survive as a Python literal. A completion right on the base input
 * only fails; the canonical one passes. */
static void test_humanevalplus_format(void) {
    write_file(tmp_path("hep.jsonl"),
               "{\"task_id\": \"P/0\", \"prompt\": \"def f(x):\\n    \\\"\\\"\\\"|x|: 'a' \\\\\\\\ \\u00e9\\\"\\\"\\\"\\n\", \"entry_point\": \"f\","
               " \"canonical_solution\": \"    return abs(x)\\n\", \"base_input\": [[1], [2]], \"plus_input\": [[-3]], \"atol\": 0}\n");
    write_file(tmp_path("hep_c.jsonl"), "{\"task_id\": \"P/0\", \"completion\": \"    return abs(x)\\n\"}\n"
                                        "{\"task_id\": \"P/0\", \"completion\": \"    return x\\n\"}\n");
    eval_values_t v;
    if (score_given(tmp_path("hep.jsonl"), tmp_path("hep_c.jsonl"), NULL, &v) == 0) CHECK(eval_values_get(&v, "end_passed") == 1 && eval_values_get(&v, "end_failed") == 1 && eval_values_get(&v, "pass@1") == 0.5,
                   "passed %g failed %g", eval_values_get(&v, "end_passed"), eval_values_get(&v, "end_failed"));
    expect_read_fails("{\"task_id\": \"a\", \"prompt\": \"x\", \"entry_point\": \"f\", \"plus_input\": [[1]]}\n", "need a \"canonical_solution\"");
    expect_read_fails("{\"task_id\": \"a\", \"prompt\": \"x\", \"entry_point\": \"f\", \"canonical_solution\": \"y\", \"plus_input\": [[1]],"
                      " \"atol\": \"0\"}\n", "\"atol\" must be a number");
}

/* bigcode's MBPP prompt: a docstring with the text and the first test; the program adds the
 * setup code and every test. task_id integers become text. */
static void test_mbpp_format(void) {
    write_file(tmp_path("mbpp.jsonl"),
               "{\"task_id\": 11, \"text\": \"Write a function.\", \"code\": \"def h(a):\\n    return a\","
               " \"test_list\": [\"assert h(1) == 1\", \"assert h(2) == 2\"], \"test_setup_code\": \"import os\"}\n");
    code_set_t s;
    char err[512];
    CHECK(code_set_read(&s, tmp_path("mbpp.jsonl"), 0, err, sizeof err) == 0, "%s", err);
    if (s.n != 1) return;
    CHECK(s.format == CODE_MBPP && !strcmp(s.p[0].task_id, "11"));
    CHECK(!strcmp(s.p[0].prompt, "\"\"\"\nWrite a function.\nassert h(1) == 1\n\"\"\"\n"), "%s", s.p[0].prompt);
    CHECK(s.nstop == 7 && !strcmp(s.stop[1], "\nassert"));
    char *prog = code_program(&s.p[0], s.p[0].canonical, 0);
    CHECK(prog && !strcmp(prog, "\"\"\"\nWrite a function.\nassert h(1) == 1\n\"\"\"\ndef h(a):\n    return a\nimport os\n"
                                "assert h(1) == 1\nassert h(2) == 2\n"), "%s", prog);
    free(prog);
    code_set_free(&s);
}

static void expect_read_fails(const char *text, const char *want) {
    write_file(tmp_path("bad.jsonl"), text);
    code_set_t s;
    char err[512] = "";
    CHECK(code_set_read(&s, tmp_path("bad.jsonl"), 0, err, sizeof err) == EVAL_EFORMAT, "no error for %s", text);
    CHECK(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
}

static void test_bad_problem_files(void) {
    expect_read_fails("{\"task_id\": \"a\", \"prompt\": \"x\"}\n", "bad.jsonl:1: neither a HumanEval line");
    expect_read_fails("{\"task_id\": \"a\", \"prompt\": \"x\", \"entry_point\": \"f\"}\n", "must be strings");
    expect_read_fails("{\"task_id\": 1.5, \"text\": \"x\", \"test_list\": [\"a\"]}\n", "task_id");
    expect_read_fails("{\"task_id\": 1, \"text\": \"x\", \"test_list\": []}\n", "test_list");
    expect_read_fails("{\"task_id\": 1, \"text\": \"x\", \"test_list\": [\"a\"]}\n{\"task_id\": 1, \"text\": \"y\", \"test_list\": [\"b\"]}\n",
                      "bad.jsonl:2: task_id 1 seen before");
    expect_read_fails("{\"task_id\": 1, \"text\": \"x\", \"test_list\": [\"a\"]}\n"
                      "{\"task_id\": \"b\", \"prompt\": \"x\", \"entry_point\": \"f\", \"test\": \"t\"}\n",
                      "a humaneval line in a mbpp file");
    expect_read_fails("", "no problems");
}

static void test_stop_cut(void) {
    char *stops[] = {"\ndef", "\nif", "\n#"};
    CHECK(code_stop_cut("    return 1\ndef g():", stops, 3) == 12);
    CHECK(code_stop_cut("    return 1\n#x\nif y", stops, 3) == 12);      /* the earliest */
    CHECK(code_stop_cut("    if x:\n        return 1\n", stops, 3) == 27); /* indented: not a stop */
    CHECK(code_stop_cut("abc", stops, 0) == 3);
}

static void test_given_completions(void) {
    write_file(tmp_path("g_prob.jsonl"),
               "{\"task_id\": \"A\", \"prompt\": \"p\", \"entry_point\": \"f\", \"test\": \"t\"}\n"
               "{\"task_id\": \"B\", \"prompt\": \"p\", \"entry_point\": \"f\", \"test\": \"t\"}\n");
    code_set_t s;
    char err[512];
    CHECK(code_set_read(&s, tmp_path("g_prob.jsonl"), 0, err, sizeof err) == 0, "%s", err);
    write_file(tmp_path("g_ok.jsonl"),
               "{\"task_id\": \"B\", \"completion\": \"b0\"}\n{\"task_id\": \"A\", \"completion\": \"a0\"}\n"
               "{\"task_id\": \"A\", \"solution\": \"a1\"}\n{\"task_id\": \"B\", \"completion\": \"b1\"}\n");
    code_given_t g;
    CHECK(code_given_read(&g, &s, tmp_path("g_ok.jsonl"), err, sizeof err) == 0, "%s", err);
    CHECK(g.per == 2 && g.problems == 2);
    if (g.per == 2) {
        CHECK(!strcmp(g.text[0], "a0") && !strcmp(g.text[1], "a1") && !strcmp(g.text[2], "b0") && !strcmp(g.text[3], "b1"));
        CHECK(!g.is_solution[0] && g.is_solution[1] && !g.is_solution[2]);
    }
    code_given_free(&g);
    write_file(tmp_path("g_uneven.jsonl"), "{\"task_id\": \"A\", \"completion\": \"a0\"}\n{\"task_id\": \"A\", \"completion\": \"a1\"}\n"
                                           "{\"task_id\": \"B\", \"completion\": \"b0\"}\n");
    CHECK(code_given_read(&g, &s, tmp_path("g_uneven.jsonl"), err, sizeof err) == EVAL_EFORMAT && strstr(err, "same number"), "%s", err);
    write_file(tmp_path("g_unknown.jsonl"), "{\"task_id\": \"C\", \"completion\": \"c\"}\n");
    CHECK(code_given_read(&g, &s, tmp_path("g_unknown.jsonl"), err, sizeof err) == EVAL_EFORMAT && strstr(err, "task_id C is not"), "%s", err);
    write_file(tmp_path("g_none.jsonl"), "{\"task_id\": \"A\", \"text\": \"c\"}\n");
    CHECK(code_given_read(&g, &s, tmp_path("g_none.jsonl"), err, sizeof err) == EVAL_EFORMAT && strstr(err, "\"completion\""), "%s", err);
    code_set_free(&s);
}

/* Given completions through the task: problem A has 4 passing samples of 10, problem B none;
 * pass@k = (1 - C(6,k)/C(10,k) + 0) / 2 for every k. */
static void test_task_passk(void) {
    write_file(tmp_path("t_prob.jsonl"),
               "{\"task_id\": \"A\", \"prompt\": \"def f(x):\\n\", \"entry_point\": \"f\", \"test\": \"def check(c):\\n    assert c(2) == 2\\n\"}\n"
               "{\"task_id\": \"B\", \"prompt\": \"def g(x):\\n\", \"entry_point\": \"g\", \"test\": \"def check(c):\\n    assert c(2) == 4\\n\"}\n");
    FILE *f = fopen(tmp_path("t_comp.jsonl"), "w");
    for (int j = 0; j < 10; j++) {
        fprintf(f, "{\"task_id\": \"A\", \"completion\": \"    return %s\\n\"}\n", j % 3 == 0 ? "x" : "x + 1"); /* j = 0, 3, 6, 9 */
        fprintf(f, "{\"task_id\": \"B\", \"completion\": \"    return x\\n\"}\n");
    }
    fclose(f);
    eval_values_t v;
    if (score_given(tmp_path("t_prob.jsonl"), tmp_path("t_comp.jsonl"), tmp_path("t_samples.jsonl"), &v)) return;
    for (int k = 1; k <= 10; k++) {
        char name[16];
        snprintf(name, sizeof name, "pass@%d", k);
        double want = (1.0 - (double)binom(6, k) / (double)binom(10, k)) / 2;
        CHECK_CLOSE(eval_values_get(&v, name), want, 1e-15, 0);
    }
    CHECK(isnan(eval_values_get(&v, "pass@11")));
    CHECK(eval_values_get(&v, "problems") == 2 && eval_values_get(&v, "samples") == 10);
    CHECK(eval_values_get(&v, "end_passed") == 4 && eval_values_get(&v, "end_failed") == 16);
    /* per-problem pass@1 0.4 and 0: their standard deviation / sqrt(2) */
    CHECK_CLOSE(eval_values_get(&v, "pass@1_stderr"), sqrt(0.08) / sqrt(2.0), 1e-12, 0);
    FILE *s = fopen(tmp_path("t_samples.jsonl"), "r");
    int lines = 0, passed = 0;
    char line[8192];
    while (s && fgets(line, sizeof line, s)) {
        lines++;
        passed += strstr(line, "\"passed\":true") != NULL;
    }
    if (s) fclose(s);
    CHECK(lines == 20 && passed == 4, "%d lines, %d passed", lines, passed);
}

/* One model generates 3 completions of the problem in `file` through the code task's generation
 * (the sampler's path) at temperature 1; each is at most --max-new bytes long, cut before the
 * stop sequence "e", and run (junk fails, nothing errs). */
static void generate_case(model_kind kind, const char *file) {
    model_config_t cfg = {.kind = kind, .vocab_size = 257, .eot_id = 256, .d_model = 16, .n_layers = 2, .n_heads = 2,
                          .n_kv_heads = 1, .d_ff = 32, .max_seq = 48, .rope_theta = 1e4f, .norm_eps = 1e-5f, .tied = 1,
                          .latent_bits = 4, .kappa_nats = 0.5f, .latent_vectors = 2, .inner_steps = 2, .fast_lr = 0.3f,
                          .fast_lr_end = 0.3f, .fast_lr_steps = 1, .mixer_heads = 1, .mixer_kernel = 1};
    if (kind != MODEL_FREE) cfg.latent_bits = 0;
    eval_lm_t *lm = NULL;
    char err[1024];
    CHECK(eval_lm_create(&lm, NULL, &cfg, 1, 1, 7, err, sizeof err) == 0, "kind %d: %s", (int)kind, err);
    if (!lm) return;
    eval_task_cfg_t c = {.task = "code", .batch = 1, .file = file, .vocab = "bytes", .samples = 3,
                         .max_new = 12, .temperature = 1, .top_p = 1, .seed = 5, .stop_words = "[\"e\"]",
                         .samples_out = tmp_path("gen_samples.jsonl"), .sandbox = {.wall_s = 10, .cpu_s = 5, .jobs = 2}};
    eval_task_t *t = NULL;
    eval_values_t v;
    int rc = eval_task_open(&t, &c, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (!rc) rc = eval_task_run(t, lm, &v, NULL, err, sizeof err);
    CHECK(rc == 0, "kind %d: %s", (int)kind, err);
    eval_task_close(&t);
    eval_lm_free(&lm);
    if (rc) return;
    CHECK(eval_values_get(&v, "samples") == 3 && eval_values_get(&v, "problems") == 1);
    CHECK(eval_values_get(&v, "end_error") == 0 && eval_values_get(&v, "end_passed") + eval_values_get(&v, "end_failed") == 3,
          "kind %d: passed %g failed %g", (int)kind, eval_values_get(&v, "end_passed"), eval_values_get(&v, "end_failed"));
    /* the completions: at most 12 bytes, none holding the stop sequence "e" (json-escaped
     * text is longer; read the "completion" field's escaped form only for the letter) */
    FILE *f = fopen(tmp_path("gen_samples.jsonl"), "r");
    char line[16384];
    int lines = 0, bad = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        const char *a = strstr(line, "\"completion\":\""), *b = a ? strstr(a, "\",\"end\"") : NULL;
        if (!a || !b) continue; /* a completion that is not UTF-8 is left out of the line */
        for (const char *p = a + 14; p < b; p++) bad += *p == 'e' && p[-1] != '\\';
    }
    if (f) fclose(f);
    CHECK(lines == 3 && bad == 0, "kind %d: %d lines, %d stop letters left", (int)kind, lines, bad);
}

/* Every family that generates (baseline, Free Transformer, latent-thought LM, causal mixer;
 * random weights) writes completions of a HumanEval problem through the code task's path. */
static void test_generate_families(void) {
    write_file(tmp_path("gen.jsonl"),
               "{\"task_id\": \"G/0\", \"prompt\": \"def f(x):\\n\", \"entry_point\": \"f\", \"test\": \"def check(c):\\n    assert c(1) == 1\\n\"}\n");
    const model_kind kinds[] = {MODEL_LLAMA, MODEL_FREE, MODEL_LTM, MODEL_MIXER};
    for (int i = 0; i < 4; i++) generate_case(kinds[i], tmp_path("gen.jsonl"));
}

/* Generated completions of an MBPP problem (the prompt built from text and the first test):
 * the baseline and the Free Transformer. */
static void test_generate_mbpp(void) {
    write_file(tmp_path("gen_mbpp.jsonl"),
               "{\"task_id\": 7, \"text\": \"Write f.\", \"code\": \"def f(x):\\n    return x\", "
               "\"test_list\": [\"assert f(1) == 1\"]}\n");
    generate_case(MODEL_LLAMA, tmp_path("gen_mbpp.jsonl"));
    generate_case(MODEL_FREE, tmp_path("gen_mbpp.jsonl"));
}

/* The sandbox on quick programs: exit status, captured output, the output bound, a setup
 * error for a missing interpreter, and the configuration checks. */
static void test_sandbox_basics(void) {
    sandbox_cfg_t c = {.wall_s = 10, .cpu_s = 5, .out_bytes = 1000, .jobs = 2};
    sandbox_t *sb = NULL;
    char err[1024];
    int rc = sandbox_open(&sb, &c, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    const char *progs[] = {"print('out'); import sys; print('err', file=sys.stderr)", "raise SystemExit(3)",
                           "import sys\nwhile True: sys.stdout.write('y' * 4096)", "import os; print(os.getcwd(), os.listdir('.'))"};
    sandbox_result_t r[4];
    CHECK(sandbox_run(sb, progs, 4, r, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(r[0].end == SANDBOX_PASSED && !strcmp(r[0].out, "out\n") && !strcmp(r[0].err, "err\n"), "%s %s", r[0].out, r[0].err);
    CHECK(r[1].end == SANDBOX_FAILED && r[1].code == 3);
    CHECK(r[2].end == SANDBOX_OUTPUT && r[2].out_len == 1000, "%s %zu", sandbox_end_name(r[2].end), r[2].out_len);
    /* a fresh working directory holding the program only */
    CHECK(r[3].end == SANDBOX_PASSED && strstr(r[3].out, "['main.py']"), "%s", r[3].out);
    for (int i = 0; i < 4; i++) sandbox_result_free(&r[i]);
    /* a limit is read from the last exception line, not the last line: a fork bomb's children
     * interleave their tracebacks, and the capture may end inside one (it_code's forkbomb once
     * ended "failed" so); an exception after a handled one is what counts */
    const char *ends[] = {
        "import sys; sys.stderr.write('BlockingIOError: [Errno 11] Resource temporarily unavailable\\n"
        "Traceback (most recent call last):\\n  File \"main.py\", line 4, in f\\n'); sys.exit(1)",
        "import sys; sys.stderr.write('OSError: [Errno 28] No space left on device\\n    f.write(x)\\n'); sys.exit(1)",
        "import sys; sys.stderr.write('OSError: [Errno 28] No space left on device\\nAssertionError\\n  x\\n'); sys.exit(1)",
        "import sys; sys.stderr.write('no exception line here\\n'); sys.exit(1)"};
    CHECK(sandbox_run(sb, ends, 4, r, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    const sandbox_end want[] = {SANDBOX_PROCS, SANDBOX_DISK, SANDBOX_FAILED, SANDBOX_FAILED};
    for (int i = 0; i < 4; i++) {
        CHECK(r[i].end == want[i], "case %d: %s (stderr %s)", i, sandbox_end_name(r[i].end), r[i].err);
        sandbox_result_free(&r[i]);
    }
    sandbox_close(&sb);
    c.interpreter = "/nonexistent/python";
    CHECK(sandbox_open(&sb, &c, err, sizeof err) == SANDBOX_EINTERP && strstr(err, "/nonexistent/python"), "%s", err);
    c.interpreter = "/bin/false"; /* runs, but not an empty program's exit 0 */
    CHECK(sandbox_open(&sb, &c, err, sizeof err) == SANDBOX_EINTERP && strstr(err, "does not run an empty program"), "%s", err);
    c.interpreter = NULL;
    c.jobs = 1000;
    CHECK(sandbox_open(&sb, &c, err, sizeof err) == SANDBOX_EARG && sb == NULL);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/test_code.XXXXXX", getenv("FT_TEST_TMP") ? getenv("FT_TEST_TMP") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_passk_closed_form);
    RUN(test_passk_large_n);
    RUN(test_passk_unbiased);
    RUN(test_humaneval_format);
    RUN(test_humanevalplus_format);
    RUN(test_mbpp_format);
    RUN(test_bad_problem_files);
    RUN(test_stop_cut);
    RUN(test_given_completions);
    RUN(test_task_passk);
    RUN(test_generate_families);
    RUN(test_generate_mbpp);
    RUN(test_sandbox_basics);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
