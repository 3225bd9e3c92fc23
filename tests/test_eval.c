/* tests/test_eval.c: every evaluator metric on models whose log-probabilities are fixed by
 * construction (a Llama with zero weights: uniform logits; stub models defined here), the
 * Free Transformer's no-leak rule (the encoder never reads a choice or an answer), the
 * results file, and bad task files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evaluator/latent.h"
#include "evaluator/lm.h"
#include "evaluator/results.h"
#include "evaluator/task.h"
#include "loader/batch.h"
#include "model/llama.h"
#include "tests/check.h"
#include "tests/fault_device.h"
#include "tests/tmpdir.h"
#include "tokenizer/dataset.h"


/* A dataset of n_docs documents of `len` tokens each, token ids cycling over [1, vocab-1),
 * every token counted as 2 bytes of text (so bits per byte is half the bits per token). */
static void make_dataset(const char *path, int vocab, int n_docs, int len) {
    dataset_meta_t meta;
    memset(&meta, 0, sizeof meta);
    meta.vocab_size = (uint32_t)vocab;
    meta.eot_id = 0;
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "test");
    snprintf(meta.tokenizer_hash, sizeof meta.tokenizer_hash, "0");
    dataset_writer_t *w = NULL;
    char err[256];
    CHECK(dataset_writer_open(&w, path, &meta, 1, err, sizeof err) == 0, "%s", err);
    uint32_t *t = malloc(sizeof(uint32_t) * len);
    for (int d = 0; d < n_docs; d++) {
        for (int i = 0; i < len; i++) t[i] = 1 + (uint32_t)((d * 7 + i * 3) % (vocab - 1));
        CHECK(dataset_writer_add(w, t, (uint32_t)len, 2 * (uint64_t)len, err, sizeof err) == 0, "%s", err);
    }
    free(t);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
}

static model_config_t small_cfg(int vocab, int eot) {
    model_config_t c = {.kind = MODEL_LLAMA, .vocab_size = vocab, .d_model = 8, .n_layers = 1,
                        .n_heads = 2, .n_kv_heads = 1, .d_ff = 16, .max_seq = 32,
                        .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 0, .eot_id = eot};
    return c;
}

/* A Llama whose weights are all zero: every hidden state is 0, so the logits are 0 and the
 * next-token distribution is uniform, log p = -ln V exactly for every token. */
static eval_lm_t *zero_llama(int vocab, int eot, int B) {
    model_config_t c = small_cfg(vocab, eot);
    eval_lm_t *lm = NULL;
    char err[256];
    CHECK(eval_lm_create(&lm, NULL, &c, B, 0, 1, err, sizeof err) == 0, "%s", err);
    size_t n;
    float *p = llama_param_data(eval_lm_model(lm), &n);
    memset(p, 0, n * sizeof *p);
    return lm;
}

/* ---- stub models ----------------------------------------------------------------------- */
/* logits row for position t of row b = table[last token] (a bigram table, V x V), or when
 * `fixed` a context-free row. For latent stubs, encode returns `bitlogit` everywhere and
 * records the longest T it was ever given. */
typedef struct {
    int V, H;
    float *table;      /* (V, V): row = previous token */
    float *buf;
    float bitlogit;
    int enc_calls, enc_T_max;
    float *bits;
} stub_t;

static const float *stub_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B, int T,
                                char *err, size_t errlen) {
    stub_t *s = lm->impl;
    if (lm->latent_bits && !z) {
        snprintf(err, errlen, "stub: no z");
        return NULL;
    }
    for (int i = 0; i < B * T; i++) memcpy(s->buf + (size_t)i * s->V, s->table + (size_t)tokens[i] * s->V, sizeof(float) * s->V);
    return s->buf;
}
static const float *stub_encode(eval_lm_t *lm, const uint32_t *tokens, int B, int T, char *err, size_t errlen) {
    stub_t *s = lm->impl;
    s->enc_calls++;
    if (T > s->enc_T_max) s->enc_T_max = T;
    for (int i = 0; i < B * T * s->H; i++) s->bits[i] = s->bitlogit;
    return s->bits;
}
static void stub_release(eval_lm_t *lm) {
    stub_t *s = lm->impl;
    free(s->table);
    free(s->buf);
    free(s->bits);
    free(s);
}

static eval_lm_t *stub_new(int V, int eot, int H, int Bmax, int Tmax) {
    eval_lm_t *lm = calloc(1, sizeof *lm);
    stub_t *s = calloc(1, sizeof *s);
    s->V = V;
    s->H = H;
    s->table = calloc((size_t)V * V, sizeof(float));
    s->buf = calloc((size_t)Bmax * Tmax * V, sizeof(float));
    s->bits = calloc((size_t)Bmax * Tmax * (H ? H : 1), sizeof(float));
    lm->cfg = small_cfg(V, eot);
    lm->cfg.max_seq = Tmax;
    lm->Bmax = Bmax;
    lm->Tmax = Tmax;
    lm->latent_bits = H;
    lm->impl = s;
    lm->logits = stub_logits;
    lm->encode = H ? stub_encode : NULL;
    lm->release = stub_release;
    return lm;
}
static stub_t *stub_of(eval_lm_t *lm) { return lm->impl; }
/* Every row of the table = row (context-free). */
static void stub_fixed(eval_lm_t *lm, const float *row) {
    stub_t *s = stub_of(lm);
    for (int p = 0; p < s->V; p++) memcpy(s->table + (size_t)p * s->V, row, sizeof(float) * s->V);
}

static eval_task_cfg_t base_cfg(const char *task) {
    eval_task_cfg_t c = {.task = task, .batches = 0, .batch = 4, .seq_len = 8, .seed = 3,
                         .vocab = "bytes", .iw_samples = 4, .draws = 4};
    return c;
}

static int run_task(eval_task_cfg_t *c, eval_lm_t *lm, eval_values_t *v) {
    eval_task_t *t = NULL;
    char err[512];
    int rc = eval_task_open(&t, c, err, sizeof err);
    CHECK(rc == 0, "open %s: %s", c->task, err);
    if (rc) return rc;
    rc = eval_task_run(t, lm, v, NULL, err, sizeof err);
    CHECK(rc == 0, "run %s: %s", c->task, err);
    eval_task_close(&t);
    return rc;
}

/* ---- val ------------------------------------------------------------------------------ */
static void test_val_uniform(void) {
    const int V = 16;
    const char *ds = tmp_path("ds16");
    make_dataset(ds, V, 30, 20);
    eval_lm_t *lm = zero_llama(V, 0, 4);
    eval_task_cfg_t c = base_cfg("val");
    c.data = ds;
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        /* logits exactly 0: log-softmax is -ln V up to double rounding */
        CHECK_CLOSE(eval_values_get(&v, "ce"), log(V), 1e-9, 0);
        CHECK_CLOSE(eval_values_get(&v, "ppl"), V, 1e-7, 0);
        /* 2 bytes per token in the metadata: bpb = ln V * n_tokens / (n_bytes ln 2) = log2(V) / 2 */
        CHECK_CLOSE(eval_values_get(&v, "bpb"), log2(V) / 2, 1e-9, 0);
        /* the whole split, batches of 4 x 8 targets from the packed stream of 30*(20+1) tokens */
        CHECK(eval_values_get(&v, "tokens") == 4 * 8 * floor(floor(30 * 21 / 9.0) / 4), "tokens %g",
              eval_values_get(&v, "tokens"));
    }
    /* --val-docs: the last 10 documents only; --batches caps the count */
    c.val_docs = 10;
    c.batches = 2;
    if (run_task(&c, lm, &v) == 0) {
        CHECK_CLOSE(eval_values_get(&v, "ce"), log(V), 1e-9, 0);
        CHECK(eval_values_get(&v, "tokens") == 2 * 4 * 8, "tokens %g", eval_values_get(&v, "tokens"));
    }
    eval_lm_free(&lm);
    CHECK(lm == NULL);
}

/* A context-free model p = softmax(row): the expected cross-entropy is computed here from the
 * targets of the same batches (the loader's batch function), with our own log-softmax. */
static void test_val_fixed_distribution(void) {
    const int V = 16;
    const char *ds = tmp_path("ds16");
    eval_lm_t *lm = stub_new(V, 0, 0, 4, 8);
    float row[16];
    for (int i = 0; i < V; i++) row[i] = (float)(0.25 * i - 1.0);
    stub_fixed(lm, row);
    double lse = 0;
    for (int i = 0; i < V; i++) lse += exp(row[i]);
    lse = log(lse);
    loader_src_t *src = NULL;
    char err[256];
    CHECK(loader_src_open(&src, ds, NULL, 0, err, sizeof err) == 0, "%s", err);
    loader_params_t p = {.seed = 3, .world = 1, .B = 4, .T = 8, .layout = 0, .split = 0};
    uint32_t rows[4 * 9];
    double nll = 0;
    int count = 0;
    for (p.step = 0; p.step < 3; p.step++) {
        CHECK(loader_batch_make(src, &p, rows, NULL, NULL, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < 4; b++)
            for (int t = 0; t < 8; t++) {
                nll += lse - row[rows[b * 9 + t + 1]];
                count++;
            }
    }
    loader_src_close(&src);
    eval_task_cfg_t c = base_cfg("val");
    c.data = ds;
    c.batches = 3;
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        /* float logits, double sums: agreement to ~1e-7 relative */
        CHECK_CLOSE(eval_values_get(&v, "ce"), nll / count, 1e-6, 1e-6);
        CHECK(eval_values_get(&v, "tokens") == count);
    }
    eval_lm_free(&lm);
}

static void test_val_mismatch(void) {
    eval_lm_t *lm = zero_llama(12, 0, 4); /* the dataset has 16 ids: they do not fit */
    eval_task_cfg_t c = base_cfg("val");
    c.data = tmp_path("ds16");
    eval_task_t *t = NULL;
    eval_values_t v;
    char err[512];
    CHECK(eval_task_open(&t, &c, err, sizeof err) == 0, "%s", err);
    CHECK(eval_task_run(t, lm, &v, NULL, err, sizeof err) == EVAL_EMISMATCH);
    CHECK(strstr(err, "does not match") != NULL, "%s", err);
    eval_task_close(&t);
    eval_lm_free(&lm);
    c.data = tmp_path("no-such-dataset");
    CHECK(eval_task_open(&t, &c, err, sizeof err) == EVAL_EIO && t == NULL);
    CHECK(strstr(err, "no-such-dataset") != NULL, "%s", err);
}

/* ---- mc ------------------------------------------------------------------------------- */
/* A stub that loves 'K': the choice spelled with K wins whatever the context. */
static void test_mc_forced(void) {
    eval_lm_t *lm = stub_new(257, 256, 0, 4, 64);
    float row[257] = {0};
    row['K'] = 3;
    stub_fixed(lm, row);
    write_file(tmp_path("mc_right.jsonl"),
               "{\"context\": \"A>__\", \"choices\": [\"UUUU\", \"KKKK\", \"NNNN\"], \"label\": 1}\n"
               "\n"
               "{\"query\": \"B>_\", \"choices\": [\"KKKK\", \"UUUU\"], \"gold\": 0}\n");
    write_file(tmp_path("mc_wrong.jsonl"),
               "{\"context\": \"A>__\", \"choices\": [\"UUUU\", \"KKKK\", \"NNNN\"], \"label\": 2}\n");
    eval_task_cfg_t c = base_cfg("mc");
    c.file = tmp_path("mc_right.jsonl");
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        CHECK(eval_values_get(&v, "acc_completion") == 1.0);
        CHECK(eval_values_get(&v, "acc_char") == 1.0);
        CHECK(eval_values_get(&v, "n") == 2);
    }
    c.file = tmp_path("mc_wrong.jsonl");
    if (run_task(&c, lm, &v) == 0) CHECK(eval_values_get(&v, "acc_completion") == 0.0);
    eval_lm_free(&lm);
}

/* Uniform model over bytes: every token costs ln 257. "éé" is 4 byte tokens but 2
 * characters, "ab" 2 and 2: per token they tie (the first wins), per character "ab" wins. */
static void test_mc_normalisations(void) {
    eval_lm_t *lm = zero_llama(257, 256, 4);
    write_file(tmp_path("mc_norm0.jsonl"), "{\"context\": \"x\", \"choices\": [\"\xc3\xa9\xc3\xa9\", \"ab\"], \"label\": 0}\n");
    write_file(tmp_path("mc_norm1.jsonl"), "{\"context\": \"x\", \"choices\": [\"\xc3\xa9\xc3\xa9\", \"ab\"], \"label\": 1}\n");
    eval_task_cfg_t c = base_cfg("mc");
    eval_values_t v;
    c.file = tmp_path("mc_norm0.jsonl");
    if (run_task(&c, lm, &v) == 0) {
        CHECK(eval_values_get(&v, "acc_completion") == 1.0);
        CHECK(eval_values_get(&v, "acc_char") == 0.0);
        CHECK(eval_values_get(&v, "acc") == 0.0);
    }
    c.file = tmp_path("mc_norm1.jsonl");
    if (run_task(&c, lm, &v) == 0) {
        CHECK(eval_values_get(&v, "acc_completion") == 0.0);
        CHECK(eval_values_get(&v, "acc_char") == 1.0);
        CHECK(eval_values_get(&v, "acc") == 1.0);
    }
    eval_lm_free(&lm);
}

static void expect_open_fails(const char *task, const char *text, const char *want);

/* macro_avg over subjects against a hand count: the stub prefers K, so an item is right when
 * its label is the K choice. s1: 1 of 2 right, s2: 1 of 1, s3: 1 of 3 (one of them an MMLU line
 * as distributed, its answer a letter, its subject under "category"). micro = 3/6; macro =
 * (1/2 + 1 + 1/3) / 3 = 11/18. */
static void test_mc_macro(void) {
    eval_lm_t *lm = stub_new(257, 256, 0, 4, 64);
    float row[257] = {0};
    row['K'] = 3;
    stub_fixed(lm, row);
    write_file(tmp_path("mc_macro.jsonl"),
               "{\"context\": \"a\", \"choices\": [\"UUUU\", \"KKKK\"], \"label\": 1, \"subject\": \"s1\"}\n"
               "{\"context\": \"b\", \"choices\": [\"UUUU\", \"KKKK\"], \"label\": 0, \"subject\": \"s1\"}\n"
               "{\"context\": \"c\", \"choices\": [\"KKKK\", \"UUUU\"], \"label\": 0, \"subject\": \"s2\"}\n"
               "{\"question\": \"d?\", \"choices\": [\"UU\", \"KK\", \"NN\"], \"answer\": \"B\", \"category\": \"s3\"}\n"
               "{\"question\": \"e?\", \"choices\": [\"UU\", \"KK\", \"NN\"], \"answer\": 2, \"subject\": \"s3\"}\n"
               "{\"context\": \"f\", \"choices\": [\"KKKK\", \"UUUU\"], \"label\": 1, \"subject\": \"s3\"}\n");
    eval_task_cfg_t c = base_cfg("mc");
    c.file = tmp_path("mc_macro.jsonl");
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        CHECK_CLOSE(eval_values_get(&v, "acc_char"), 0.5, 1e-15, 0);
        CHECK_CLOSE(eval_values_get(&v, "macro_avg/acc_char"), 11.0 / 18, 1e-15, 0);
        CHECK_CLOSE(eval_values_get(&v, "macro_avg/acc_completion"), 11.0 / 18, 1e-15, 0);
        CHECK(eval_values_get(&v, "subjects") == 3 && eval_values_get(&v, "n") == 6);
    }
    /* without subjects there is no macro average to report */
    c.file = tmp_path("mc_right.jsonl");
    if (run_task(&c, lm, &v) == 0) CHECK(isnan(eval_values_get(&v, "macro_avg/acc_char")));
    eval_lm_free(&lm);
}

/* GSM8K lines: the stub answers " 7" after "Answer:" and stops at the blank line; the final
 * number decides (7.0 is 7; 1,007 is not). With --fewshot the examples go before the question
 * and the answer is the same. */
static void test_em_gsm8k(void) {
    eval_lm_t *lm = stub_new(257, 256, 0, 4, 96);
    stub_t *s = stub_of(lm);
    for (int p = 0; p < 257; p++) {
        int next = p == ':' ? ' ' : p == ' ' ? '7' : p == '7' || p == '\n' ? '\n' : 'K';
        s->table[(size_t)p * 257 + next] = 5;
    }
    write_file(tmp_path("gsm.jsonl"),
               "{\"question\": \"2+5?\", \"answer\": \"2 + 5 = <<2+5=7>>7\\n#### 7\"}\n"
               "{\"question\": \"3+5?\", \"answer\": \"#### 8\"}\n"
               "{\"question\": \"14/2?\", \"answer\": \"#### 7.0\"}\n"
               "{\"question\": \"big?\", \"answer\": \"#### 1,007\"}\n");
    write_file(tmp_path("gsm_shots.jsonl"), "{\"question\": \"1+1?\", \"answer\": \"#### 2\"}\n");
    eval_task_cfg_t c = base_cfg("em");
    c.file = tmp_path("gsm.jsonl");
    c.max_new = 8;
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) CHECK_CLOSE(eval_values_get(&v, "em"), 0.5, 1e-15, 0);
    c.fewshot = tmp_path("gsm_shots.jsonl");
    if (run_task(&c, lm, &v) == 0) CHECK_CLOSE(eval_values_get(&v, "em"), 0.5, 1e-15, 0);
    eval_lm_free(&lm);
    expect_open_fails("em", "{\"question\": \"q\", \"answer\": \"no mark\"}\n", "\"#### <number>\"");
}

static void expect_open_fails(const char *task, const char *text, const char *want) {
    write_file(tmp_path("bad.jsonl"), text);
    eval_task_cfg_t c = base_cfg(task);
    c.file = tmp_path("bad.jsonl");
    eval_task_t *t = NULL;
    char err[512] = "";
    int rc = eval_task_open(&t, &c, err, sizeof err);
    CHECK(rc == EVAL_EFORMAT && t == NULL, "rc %d", rc);
    CHECK(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
}

static void test_bad_task_files(void) {
    expect_open_fails("mc", "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 2}\n", "bad.jsonl:1: \"label\"");
    expect_open_fails("mc", "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 0}\n{\"context\": 5}\n", "bad.jsonl:2: \"context\"");
    expect_open_fails("mc", "{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}\n", "\"choices\"");
    expect_open_fails("mc", "{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"label\": 0}\n", "choice 1 is empty");
    expect_open_fails("mc", "not json\n", "bad.jsonl:1: not a JSON object");
    expect_open_fails("mc", "[1, 2]\n", "not a JSON object");
    expect_open_fails("mc", "", "no questions");
    expect_open_fails("em", "{\"prompt\": \"a\"}\n", "\"answer\"");
    expect_open_fails("em", "{\"prompt\": \"a\", \"answer\": \"b\", \"max_tokens\": 0}\n", "max_tokens");
    expect_open_fails("em", "{\"prompt\": \"a\", \"answer\": \"b\", \"stop\": 3}\n", "\"stop\"");
    eval_task_cfg_t c = base_cfg("mc");
    c.file = tmp_path("missing.jsonl");
    eval_task_t *t = NULL;
    char err[512];
    CHECK(eval_task_open(&t, &c, err, sizeof err) == EVAL_EIO && strstr(err, "missing.jsonl"), "%s", err);
    c = base_cfg("nope");
    CHECK(eval_task_open(&t, &c, err, sizeof err) == EVAL_EARG && strstr(err, "unknown task"), "%s", err);
    c = base_cfg("mc");
    c.file = tmp_path("mc_right.jsonl");
    c.vocab = "no-such-vocabulary";
    CHECK(eval_task_open(&t, &c, err, sizeof err) == EVAL_EIO && strstr(err, "no-such-vocabulary"), "%s", err);
}

/* ---- em ------------------------------------------------------------------------------- */
/* Bigram stub over bytes: after 'K' comes '\n', after anything else 'K'. Greedy text after
 * any prompt is therefore "K\nK\n...". */
static void test_em(void) {
    eval_lm_t *lm = stub_new(257, 256, 0, 4, 64);
    stub_t *s = stub_of(lm);
    for (int p = 0; p < 257; p++) s->table[(size_t)p * 257 + (p == 'K' ? '\n' : 'K')] = 5;
    write_file(tmp_path("em.jsonl"),
               "{\"prompt\": \"x\", \"answer\": \"K\", \"max_tokens\": 10}\n"   /* stops at \\n: K */
               "{\"prompt\": \"xy\", \"answer\": \" K \"}\n"                    /* trimmed: K */
               "{\"prompt\": \"x\", \"answer\": \"KK\"}\n"                       /* K then stop */
               "{\"prompt\": \"x\", \"answer\": \"K\\nK\", \"stop\": \"\", \"max_tokens\": 3}\n"
               "{\"prompt\": \"x\", \"answer\": \"K\\nK\", \"stop\": \"\", \"max_tokens\": 5}\n");
    eval_task_cfg_t c = base_cfg("em");
    c.file = tmp_path("em.jsonl");
    c.batch = 2; /* 5 items: batches of 2, 2, 1 */
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        CHECK_CLOSE(eval_values_get(&v, "em"), 3.0 / 5, 1e-12, 0);
        CHECK(eval_values_get(&v, "n") == 5);
    }
    c.limit = 2;
    if (run_task(&c, lm, &v) == 0) CHECK(eval_values_get(&v, "em") == 1.0 && eval_values_get(&v, "n") == 2);
    eval_lm_free(&lm);
}

/* The KV-cache path (a real Llama's gen_start/gen_next) and the full-forward path give the
 * greedy text this test decodes itself with full forwards. The head is rigged so greedy picks
 * letters: rows of non-letters are zero (logit 0), letter rows scaled up so their logits are far
 * apart (no near-ties for float rounding to flip). */
static void test_em_cached(void) {
    model_config_t cfg = small_cfg(257, 256);
    eval_lm_t *lm = NULL;
    char err[256];
    CHECK(eval_lm_create(&lm, NULL, &cfg, 4, 32, 11, err, sizeof err) == 0, "%s", err);
    if (!lm) return;
    CHECK(lm->gen_start && lm->gen_next, "a llama offers its KV cache");
    tensor_view_t views[64];
    int nv = llama_params(eval_lm_model(lm), views, 64);
    for (int i = 0; i < nv; i++) {
        if (strcmp(views[i].name, "lm_head.weight")) continue;
        const int64_t D = views[i].shape[1];
        for (int v = 0; v < 257; v++)
            for (int64_t d = 0; d < D; d++) views[i].data[v * D + d] *= (v >= 'a' && v <= 'z') ? 200.f : 0.f;
    }
    const char *prompts[3] = {"ab", "q", "hello"};
    char lines[1024] = "";
    for (int p = 0; p < 3; p++) {
        uint32_t row[16];
        int len = 0;
        row[len++] = 256;
        for (const char *c = prompts[p]; *c; c++) row[len++] = (unsigned char)*c;
        char ans[8];
        for (int k = 0; k < 5; k++) {
            const float *lg = lm->logits(lm, row, NULL, 1, len, err, sizeof err);
            CHECK(lg != NULL, "%s", err);
            if (!lg) return;
            row[len] = eval_argmax(lg + (size_t)(len - 1) * 257, 257);
            ans[k] = (char)row[len++];
        }
        ans[5] = 0;
        CHECK(ans[0] >= 'a' && ans[0] <= 'z', "greedy picks letters: %d", ans[0]);
        char line[128];
        snprintf(line, sizeof line, "{\"prompt\": \"%s\", \"answer\": \"%s\", \"stop\": \"\"}\n", prompts[p], ans);
        strcat(lines, line);
    }
    write_file(tmp_path("em_greedy.jsonl"), lines);
    eval_task_cfg_t c = base_cfg("em");
    c.file = tmp_path("em_greedy.jsonl");
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) CHECK(eval_values_get(&v, "em") == 1.0, "cached: %g", eval_values_get(&v, "em"));
    lm->gen_start = NULL; /* the batched full-forward path */
    if (run_task(&c, lm, &v) == 0) CHECK(eval_values_get(&v, "em") == 1.0, "full: %g", eval_values_get(&v, "em"));
    eval_lm_free(&lm);
}

/* ---- Free Transformer ----------------------------------------------------------------- */
/* A latent stub whose decoder ignores Z (uniform over V) and whose encoder gives every bit
 * the logit l. Then ce_enc = ce_prior = ln V exactly, kl = H (ln 2 + p ln p + (1-p) ln(1-p))
 * with p = sigmoid(l), elbo = ln V + kl, and for l = 0 (q = prior) every importance weight is
 * p(x), so iw_bound = ln V exactly too. */
static void test_free_val(void) {
    const int V = 16, H = 3;
    eval_lm_t *lm = stub_new(V, 0, H, 4, 8);
    eval_task_cfg_t c = base_cfg("val");
    c.data = tmp_path("ds16");
    c.batches = 2;
    eval_values_t v;
    stub_of(lm)->bitlogit = 0;
    if (run_task(&c, lm, &v) == 0) {
        CHECK_CLOSE(eval_values_get(&v, "ce_enc"), log(V), 1e-9, 0);
        CHECK_CLOSE(eval_values_get(&v, "ce_prior"), log(V), 1e-9, 0);
        CHECK_CLOSE(eval_values_get(&v, "kl"), 0, 1e-7, 0);
        CHECK_CLOSE(eval_values_get(&v, "elbo"), log(V), 1e-7, 0);
        CHECK_CLOSE(eval_values_get(&v, "iw_bound"), log(V), 1e-7, 0);
        CHECK_CLOSE(eval_values_get(&v, "iw_prior"), log(V), 1e-9, 0);
        CHECK_CLOSE(eval_values_get(&v, "nll_bound"), log(V), 1e-7, 0);
        CHECK(isnan(eval_values_get(&v, "ce")), "a latent model reports no plain ce");
    }
    stub_of(lm)->bitlogit = 2;
    if (run_task(&c, lm, &v) == 0) {
        double p = 1 / (1 + exp(-2.0)), kl = H * (M_LN2 + p * log(p) + (1 - p) * log(1 - p));
        /* KL in float (the model's binmap_kl) summed in double: 1e-6 */
        CHECK_CLOSE(eval_values_get(&v, "kl"), kl, 1e-6, 0);
        CHECK_CLOSE(eval_values_get(&v, "elbo"), log(V) + kl, 1e-6, 0);
        CHECK_CLOSE(eval_values_get(&v, "ce_enc"), log(V), 1e-9, 0);
        /* the importance-weighted bound lies between the true NLL (ln V) and... nothing sure
         * for finite K, but in expectation below the ELBO: a loose sanity band */
        double iw = eval_values_get(&v, "iw_bound");
        CHECK(iw > log(V) - 0.5 && iw < log(V) + kl + 0.5, "iw %g", iw);
        /* the prior proposal sees a decoder that ignores Z: exact, and here the smaller bound;
         * nll_bound is the posterior proposal's all the same (fixed in advance: a min of two
         * noisy bounds would be biased down), and ppl follows it */
        CHECK_CLOSE(eval_values_get(&v, "iw_prior"), log(V), 1e-9, 0);
        CHECK(eval_values_get(&v, "nll_bound") == iw, "nll_bound %g, iw_bound %g", eval_values_get(&v, "nll_bound"), iw);
        CHECK_CLOSE(eval_values_get(&v, "ppl"), exp(iw), 0, 1e-12);
    }
    eval_lm_free(&lm);
}

/* The encoder must never read a token it is asked to predict: in mc it gets [eot] + context
 * (2 + 4 = 6 tokens here, never the 4 of a choice), in em [eot] + prompt. */
static void test_free_no_leak(void) {
    eval_lm_t *lm = stub_new(257, 256, 2, 4, 64);
    float row[257] = {0};
    row['K'] = 3;
    stub_fixed(lm, row);
    eval_task_cfg_t c = base_cfg("mc");
    c.file = tmp_path("mc_right.jsonl"); /* contexts "A>__" (4) and "B>_" (3) */
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        CHECK(eval_values_get(&v, "acc_completion") == 1.0);
        CHECK(stub_of(lm)->enc_calls == 5, "one encoder call per choice, %d", stub_of(lm)->enc_calls);
        CHECK(stub_of(lm)->enc_T_max == 5, "encoder saw %d tokens", stub_of(lm)->enc_T_max);
    }
    stub_of(lm)->enc_calls = stub_of(lm)->enc_T_max = 0;
    c = base_cfg("em");
    c.file = tmp_path("em.jsonl"); /* prompts "x", "xy": at most 3 tokens with the eot */
    if (run_task(&c, lm, &v) == 0) {
        CHECK(stub_of(lm)->enc_calls == 5, "one encoder call per item, %d", stub_of(lm)->enc_calls);
        CHECK(stub_of(lm)->enc_T_max == 3, "encoder saw %d tokens", stub_of(lm)->enc_T_max);
    }
    eval_lm_free(&lm);
}

/* A real (random) Free Transformer through eval_lm_create: the identities that hold for any
 * model, and the same numbers for the same seed. */
static void test_free_real(void) {
    model_config_t cfg = small_cfg(16, 0);
    cfg.kind = MODEL_FREE;
    cfg.n_layers = 2;
    cfg.latent_bits = 3;
    cfg.kappa_nats = 0.1f;
    eval_lm_t *lm = NULL;
    char err[256];
    CHECK(eval_lm_create(&lm, NULL, &cfg, 4, 8, 5, err, sizeof err) == 0, "%s", err);
    if (!lm) return;
    CHECK(lm->latent_bits == 3 && lm->encode != NULL);
    eval_task_cfg_t c = base_cfg("val");
    c.data = tmp_path("ds16");
    c.batches = 2;
    eval_values_t v, w;
    if (run_task(&c, lm, &v) == 0 && run_task(&c, lm, &w) == 0) {
        double ce = eval_values_get(&v, "ce_enc"), kl = eval_values_get(&v, "kl");
        CHECK(kl >= 0 && isfinite(ce));
        CHECK_CLOSE(eval_values_get(&v, "elbo"), ce + kl, 1e-12, 0);
        CHECK(isfinite(eval_values_get(&v, "iw_bound")) && isfinite(eval_values_get(&v, "ce_prior")));
        for (uint32_t i = 0; i + 1 < v.n; i++) /* eval_s-free: all numbers deterministic */
            CHECK(v.kv[i].value == w.kv[i].value, "%s differs between runs", v.kv[i].name);
    }
    /* em through the Free Transformer's cache (encoder on the prompt, prior Z after) */
    eval_lm_free(&lm);
    cfg.vocab_size = 257;
    cfg.eot_id = 256;
    CHECK(eval_lm_create(&lm, NULL, &cfg, 4, 32, 5, err, sizeof err) == 0, "%s", err);
    if (!lm) return;
    CHECK(lm->gen_start && lm->gen_next);
    eval_task_cfg_t e = base_cfg("em");
    e.file = tmp_path("em.jsonl");
    e.temperature = 1;
    if (run_task(&e, lm, &v) == 0 && run_task(&e, lm, &w) == 0)
        CHECK(eval_values_get(&v, "n") == 5 && eval_values_get(&v, "em") == eval_values_get(&w, "em"));
    const uint32_t tok[2] = {1, 2};
    CHECK(lm->logits(lm, tok, NULL, 1, 2, err, sizeof err) == NULL && strstr(err, "latent"), "%s", err);
    eval_lm_free(&lm);
}

static void test_latent_helpers(void) {
    double a[3] = {log(1.0), log(2.0), log(6.0)};
    CHECK_CLOSE(eval_logmeanexp(a, 3), log(3.0), 1e-12, 0);
    double big[2] = {1000, 1000};
    CHECK_CLOSE(eval_logmeanexp(big, 2), 1000, 1e-9, 0);
    /* log q sums to 1 over all 2^H values */
    float l[3] = {0.3f, -1.2f, 2.5f};
    double s = 0;
    for (uint32_t d = 0; d < 8; d++) s += exp(eval_z_logq(l, d, 3));
    CHECK_CLOSE(s, 1.0, 1e-12, 0);
    /* posterior draws follow q: bit 2 (p = sigmoid(2.5) = 0.924) over 20000 draws, 5 sigma */
    rng_t r;
    rng_seed(&r, 9);
    uint32_t z[1];
    int ones = 0;
    for (int i = 0; i < 20000; i++) {
        eval_z_posterior(&r, l, z, NULL, 1, 3);
        ones += (z[0] >> 2) & 1;
    }
    double p = 1 / (1 + exp(-2.5));
    CHECK(fabs(ones / 20000.0 - p) < 5 * sqrt(p * (1 - p) / 20000), "%d", ones);
}

/* ---- synth (Figure 4 measures) -------------------------------------------------------- */
/* A stub that writes the perfect synthetic line: at body position 10..17 the prompt's letter
 * (row token 1), '_' elsewhere, with a margin of 30 nats so sampling at temperature 1 picks
 * it (the other 256 ids together have probability ~256 e^-30 = 2e-11). */
static int line_prefix; /* 1: rows are [eot] L > body (--eot-prefix), 0: L > body */
static const float *line_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B, int T,
                                char *err, size_t errlen) {
    stub_t *s = lm->impl;
    memset(s->buf, 0, sizeof(float) * (size_t)B * T * s->V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int body = t + 1 - (line_prefix + 2); /* [eot] L > (or L >) then the body */
            uint32_t c = body >= 10 && body < 18 ? tokens[(size_t)b * T + line_prefix] : '_';
            s->buf[((size_t)b * T + t) * s->V + c] = 30;
        }
    return s->buf;
}

/* Lines with noise: '!' at body position 2 on every row, and at 40 + b on the rows of the
 * independent group (b < 5) only, so inside that group a pair shares 1 of 3 '!' positions and
 * inside the shared group (b >= 5, all '!' at {2, 40}) all of them. */
static const float *noisy_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B, int T,
                                 char *err, size_t errlen) {
    stub_t *s = lm->impl;
    memset(s->buf, 0, sizeof(float) * (size_t)B * T * s->V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int body = t + 1 - 2;
            uint32_t c = body >= 10 && body < 18 ? tokens[(size_t)b * T] : '_';
            if (body == 2 || body == (b < 5 ? 40 + b : 40)) c = '!';
            s->buf[((size_t)b * T + t) * s->V + c] = 30;
        }
    return s->buf;
}

/* The LTM's bounds from S draws (eval_ltm_accumulate): worked by hand for S = 4 draws of
 * B = 2 rows, K' = 2 (two groups). Row 0's -log p(x|z_s) = 1, 2, 3, 4 (mean 2.5, sample
 * variance 5/3, so the mean's variance 5/12); row 1's all 2 (variance 0). Draw s of row b sits
 * at s * B + b. Row 0's log weights -1, -1, -3, -3: group bounds 1 and 3; row 1's 0, log 3, 0,
 * log 3: -log mean(1, 3) = -log 2 in both groups. */
static void test_ltm_accumulate(void) {
    const double ce[8] = {1, 2, 2, 2, 3, 2, 4, 2}, kl[2] = {0.5, 0.25};
    const double logw[8] = {-1, 0, -1, log(3.0), -3, 0, -3, log(3.0)};
    eval_ltm_acc_t a = {0};
    CHECK(eval_ltm_accumulate(&a, ce, kl, logw, 4, 2, 2) == 0, "accumulate");
    CHECK_CLOSE(a.ce, 2.5 + 2, 1e-12, 0);
    CHECK_CLOSE(a.kl, 0.75, 1e-12, 0);
    CHECK_CLOSE(a.var_nelbo, (5.0 / 3) / 4, 1e-12, 0);
    /* row 0: groups 1 and 3 -> mean 2, sample variance 2, of the mean 1; row 1: -log 2, 0 */
    CHECK_CLOSE(a.iw, 2 - log(2.0), 1e-12, 0);
    CHECK_CLOSE(a.var_iw, 1, 1e-12, 0);
    /* a second batch adds */
    CHECK(eval_ltm_accumulate(&a, ce, kl, logw, 4, 2, 2) == 0, "accumulate again");
    CHECK_CLOSE(a.ce, 9, 1e-12, 0);
    /* fewer than two groups: refused (no standard error) */
    CHECK(eval_ltm_accumulate(&a, ce, kl, logw, 4, 2, 3) == -1, "S < 2 K' refused");
}

static void test_synth(void) {
    for (int k = 0; k < 4; k++) { /* latent bits H in {0, 2} x eot prefix in {0, 1} */
        const int H = (k >> 1) * 2;
        line_prefix = k & 1;
        eval_lm_t *lm = stub_new(257, 256, H, 10, 80);
        lm->logits = line_logits;
        eval_task_cfg_t c = base_cfg("synth");
        c.limit = 3;
        c.eot_prefix = line_prefix;
        eval_values_t v;
        if (run_task(&c, lm, &v) == 0) {
            CHECK(eval_values_get(&v, "valid") == 1.0, "H=%d valid %g", H, eval_values_get(&v, "valid"));
            CHECK(eval_values_get(&v, "independent_pos_diff") == 0.0);
            CHECK(eval_values_get(&v, "n") == (H ? 30 : 15));
            if (H) {
                CHECK(eval_values_get(&v, "shared_pos_diff") == 0.0);
                CHECK(stub_of(lm)->enc_T_max == 2 + line_prefix, "the encoder reads the prompt only: %d", stub_of(lm)->enc_T_max);
            } else {
                CHECK(isnan(eval_values_get(&v, "shared_pos_diff")));
            }
        }
        eval_lm_free(&lm);
    }
    /* noise agreement */
    {
        eval_lm_t *ln = stub_new(257, 256, 2, 10, 80);
        ln->logits = noisy_logits;
        eval_task_cfg_t cn = base_cfg("synth");
        cn.limit = 2;
        eval_values_t vn;
        if (run_task(&cn, ln, &vn) == 0) {
            CHECK(eval_values_get(&vn, "valid") == 1.0, "noisy lines valid: %g", eval_values_get(&vn, "valid"));
            CHECK(fabs(eval_values_get(&vn, "independent_noise_agree") - 1.0 / 3) < 1e-12,
                  "independent pairs share 1 of 3 '!' positions: %g", eval_values_get(&vn, "independent_noise_agree"));
            CHECK(eval_values_get(&vn, "shared_noise_agree") == 1.0, "shared pairs share all: %g",
                  eval_values_get(&vn, "shared_noise_agree"));
        }
        eval_lm_free(&ln);
    }
    /* every line '_' only: nothing valid, no pairs */
    eval_lm_t *lm = stub_new(257, 256, 0, 10, 80);
    float row[257] = {0};
    row['_'] = 30;
    stub_fixed(lm, row);
    eval_task_cfg_t c = base_cfg("synth");
    c.limit = 2;
    eval_values_t v;
    if (run_task(&c, lm, &v) == 0) {
        CHECK(eval_values_get(&v, "valid") == 0.0);
        CHECK(isnan(eval_values_get(&v, "independent_pos_diff")));
        CHECK(isnan(eval_values_get(&v, "independent_noise_agree")), "no valid pairs, no noise agreement");
    }
    eval_lm_free(&lm);
}

/* ---- results file --------------------------------------------------------------------- */
static void test_results_file(void) {
    const char *path = tmp_path("results.jsonl");
    unlink(path);
    eval_values_t v = {0};
    eval_values_add(&v, "ce", 1.25);
    eval_values_add(&v, "bad", NAN);
    char err[256];
    eval_record_t r = {"run1", "val", "/x/ckpt-00000010", 10, 1.5, &v};
    CHECK(eval_results_append(path, &r, err, sizeof err) == 0, "%s", err);
    r.task = "mc";
    r.step = 20;
    CHECK(eval_results_append(path, &r, err, sizeof err) == 0, "%s", err);
    /* a predecessor killed mid-line */
    FILE *f = fopen(path, "a");
    fputs("{\"run\":\"run1\",\"task\":\"val\",\"st", f);
    fclose(f);
    r.task = "val";
    r.step = 30;
    CHECK(eval_results_append(path, &r, err, sizeof err) == 0, "%s", err);
    int64_t *steps = NULL;
    int n = 0;
    CHECK(eval_results_done(path, "run1", "val", &steps, &n, err, sizeof err) == 0);
    CHECK(n == 2 && steps && steps[0] == 10 && steps[1] == 30, "n %d", n);
    free(steps);
    CHECK(eval_results_done(path, "run2", "val", &steps, &n, err, sizeof err) == 0 && n == 0);
    CHECK(eval_results_done(tmp_path("none.jsonl"), "run1", "val", &steps, &n, err, sizeof err) == 0 && n == 0);
    char *line = eval_record_json(&r);
    CHECK(line && strstr(line, "\"ce\":1.25") && strstr(line, "\"bad\":null"), "%s", line ? line : "");
    free(line);
    unlink(path);
}

/* Every scoring call of every family (logits, the encoder, chunk logits, the latent inference,
 * the generator's prompt and step) whose device faults: for lack of memory lm->nomem says so
 * (the evaluator retries, no damage), for another fault it does not (the checkpoint is skipped);
 * a task over it stops with the model's failure and nomem set. Then the same calls work. */
static void test_scoring_nomem(void) {
    device_t *dev = fault_device();
    model_config_t kinds[5];
    const char *names[5] = {"llama", "free", "ltm", "mixer", "mixer-ae"};
    kinds[0] = small_cfg(16, 0);
    kinds[1] = small_cfg(16, 0), kinds[1].kind = MODEL_FREE, kinds[1].n_layers = 2, kinds[1].latent_bits = 3;
    kinds[1].kappa_nats = 0.1f;
    kinds[2] = (model_config_t){.kind = MODEL_LTM, .vocab_size = 16, .d_model = 8, .n_layers = 2, .n_heads = 2,
                                .n_kv_heads = 1, .d_ff = 16, .max_seq = 32, .rope_theta = 10000.0f, .norm_eps = 1e-5f,
                                .tied = 1, .latent_vectors = 2, .inner_steps = 2, .fast_lr = 0.3f, .fast_lr_end = 0.3f,
                                .fast_lr_steps = 1};
    kinds[3] = (model_config_t){.kind = MODEL_MIXER, .vocab_size = 16, .d_model = 8, .n_layers = 2, .n_heads = 2,
                                .n_kv_heads = 1, .d_ff = 16, .max_seq = 8, .rope_theta = 1e4f, .norm_eps = 1e-5f,
                                .tied = 1, .mixer_heads = 1, .mixer_kernel = 1};
    kinds[4] = kinds[3], kinds[4].kind = MODEL_MIXER_AE, kinds[4].encoder_layers = 1, kinds[4].embed_dim = 4;
    kinds[4].unroll = 1, kinds[4].no_mask_encoder = 1;
    const int B = 2, T = 4;
    const uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, z[8] = {0};
    float u[2 * 4 * 3];
    for (int i = 0; i < 24; i++) u[i] = 0.5f;
    for (int k = 0; k < 5; k++) {
        eval_lm_t *lm = NULL;
        char err[512] = "";
        fault_rc = 0;
        CHECK(eval_lm_create(&lm, dev, &kinds[k], B, 8, 3, err, sizeof err) == 0, "%s: %s", names[k], err);
        if (!lm) continue;
        for (int pass = 0; pass < 3; pass++) {
            fault_rc = pass == 0 ? DEVICE_ENOMEM : pass == 1 ? DEVICE_EFAULT : 0;
            const int want = pass == 0; /* nomem */
#define SCORES(what, ok)                                                                                   \
    do {                                                                                                   \
        lm->nomem = !want;                                                                                 \
        err[0] = 0;                                                                                        \
        const int ok_ = (ok);                                                                              \
        if (fault_rc) CHECK(!ok_ && lm->nomem == want && err[0], "%s %s, %s: ok %d nomem %d: %s", names[k], what, \
                            want ? "out of memory" : "a fault", ok_, lm->nomem, err);                      \
        else CHECK(ok_, "%s %s after the fault: %s", names[k], what, err);                                 \
    } while (0)
            if (lm->ltm_infer) SCORES("ltm_infer", lm->ltm_infer(lm, tok, tok, NULL, B, T, 2, 1, 0, err, sizeof err) == 0);
            if (lm->logits && lm->ltm_infer && fault_rc) { /* logits read an inference that worked */
                fault_rc = 0;
                CHECK(lm->ltm_infer(lm, tok, tok, NULL, B, T, 2, 1, 0, err, sizeof err) == 0, "%s", err);
                fault_rc = want ? DEVICE_ENOMEM : DEVICE_EFAULT;
            }
            if (lm->logits) SCORES("logits", lm->logits(lm, tok, z, B, T, err, sizeof err) != NULL);
            if (lm->encode) SCORES("encode", lm->encode(lm, tok, B, T, err, sizeof err) != NULL);
            if (lm->chunk_logits) SCORES("chunk_logits", lm->chunk_logits(lm, tok, NULL, 32, 0, B, T, err, sizeof err) != NULL);
            if (lm->gen_start) SCORES("gen_start", lm->gen_start(lm, tok, B, T, u, err, sizeof err) != NULL);
            if (lm->gen_next && !fault_rc) SCORES("gen_next", lm->gen_next(lm, tok, z, B, err, sizeof err) != NULL);
            if (lm->gen_next && fault_rc) { /* a step after a prompt that worked */
                const int f = fault_rc;
                fault_rc = 0;
                CHECK(lm->gen_start(lm, tok, B, T, u, err, sizeof err) != NULL, "%s", err);
                fault_rc = f;
                SCORES("gen_next", lm->gen_next(lm, tok, z, B, err, sizeof err) != NULL);
            }
#undef SCORES
        }
        if (k == 0) { /* a task: the model's failure, nomem set */
            eval_task_cfg_t c = base_cfg("val");
            c.data = tmp_path("ds16");
            c.batches = 1, c.batch = B;
            eval_task_t *t = NULL;
            eval_values_t v;
            CHECK(eval_task_open(&t, &c, err, sizeof err) == 0, "%s", err);
            fault_rc = DEVICE_ENOMEM;
            lm->nomem = 0;
            int rc = t ? eval_task_run(t, lm, &v, NULL, err, sizeof err) : 0;
            CHECK(rc == EVAL_EMODEL && lm->nomem && strstr(err, "out of memory"), "task val: rc %d nomem %d: %s", rc, lm->nomem, err);
            eval_task_close(&t);
        }
        fault_rc = 0;
        eval_lm_free(&lm);
    }
}

int main(void) {
    const char *base = getenv("FT_TEST_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_eval.%d", base ? base : "/tmp", (int)getpid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    RUN(test_val_uniform);
    RUN(test_val_fixed_distribution);
    RUN(test_val_mismatch);
    RUN(test_mc_forced);
    RUN(test_mc_normalisations);
    RUN(test_mc_macro);
    RUN(test_em_gsm8k);
    RUN(test_bad_task_files);
    RUN(test_em);
    RUN(test_em_cached);
    RUN(test_free_val);
    RUN(test_free_no_leak);
    RUN(test_free_real);
    RUN(test_latent_helpers);
    RUN(test_ltm_accumulate);
    RUN(test_synth);
    RUN(test_results_file);
    RUN(test_scoring_nomem);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
