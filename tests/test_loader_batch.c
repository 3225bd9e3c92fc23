/* tests/test_loader_batch.c: the batch function (loader/batch.c) against an independent
 * reconstruction of the documented rule, plus determinism, rank disjointness, coverage,
 * splits and parameter errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rng.h"
#include "bus/wire.h"
#include "loader/batch.h"
#include "loader/mkdata.h"
#include "tests/check.h"

static char tmp[1024], path[1200];
static const loader_mkdata_t DATA = {.seed = 5, .n_docs = 600, .vocab_size = 5000, .min_len = 0, .max_len = 120};

static loader_src_t *open_src(uint64_t val_docs) {
    char err[256] = "";
    loader_src_t *s = NULL;
    CHECK(loader_src_open(&s, path, NULL, val_docs, err, sizeof err) == 0, "%s", err);
    return s;
}

/* The documented rule, written out separately: the epoch's stream of the split. */
static uint32_t *stream_build(uint64_t first, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t *len_out) {
    uint32_t *perm = malloc(n * sizeof *perm);
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    rng_t r;
    rng_seed2(&r, seed, epoch);
    for (uint64_t i = n - 1; i >= 1; i--) {
        uint64_t j = rng_below(&r, i + 1);
        uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    uint32_t *st = malloc((n * (DATA.max_len + 1)) * sizeof *st);
    uint64_t L = 0;
    for (uint64_t i = 0; i < n; i++) {
        L += loader_mkdata_doc(&DATA, first + perm[i], st + L);
        st[L++] = 0; /* eot */
    }
    free(perm);
    *len_out = L;
    return st;
}

static loader_params_t params(uint32_t B, uint32_t T, int layout) {
    loader_params_t p = {.seed = 11, .epoch = 0, .step = 0, .rank = 0, .world = 1, .B = B, .T = T,
                         .layout = (uint8_t)layout, .split = WIRE_TRAIN};
    return p;
}

static void test_pack_matches_rule(void) {
    loader_src_t *s = open_src(0);
    if (!s) return;
    const uint32_t B = 3, T = 50;
    uint32_t *tok = malloc(B * (T + 1) * sizeof *tok);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        uint64_t L;
        uint32_t *st = stream_build(0, DATA.n_docs, 11, epoch, &L);
        uint64_t want_steps = L / (T + 1) / (B * 2), steps = 0;
        int diff = 0, straddle = 0;
        char err[256] = "";
        for (uint32_t rank = 0; rank < 2; rank++)
            for (uint64_t step = 0; step < want_steps; step++) {
                loader_params_t p = params(B, T, WIRE_PACK);
                p.epoch = epoch; p.step = step; p.rank = rank; p.world = 2;
                if (loader_batch_make(s, &p, tok, NULL, &steps, err, sizeof err)) { diff++; continue; }
                uint64_t row0 = (step * 2 + rank) * B;
                diff += memcmp(tok, st + row0 * (T + 1), B * (T + 1) * sizeof *tok) != 0;
                for (uint32_t i = 0; i < B * (T + 1); i++) straddle += tok[i] == 0;
            }
        CHECK(steps == want_steps, "steps_per_epoch %llu, rule gives %llu", (unsigned long long)steps,
              (unsigned long long)want_steps);
        CHECK(diff == 0, "%d batches differ from the rule (%s)", diff, err);
        CHECK(straddle > 100, "rows rarely straddle documents (%d eot): test too weak", straddle);
        free(st);
    }
    free(tok);
    loader_src_close(&s);
    CHECK(s == NULL, "close did not NULL the handle");
}

static void test_deterministic_and_ranks_disjoint(void) {
    loader_src_t *s = open_src(0), *s2 = open_src(0);
    if (!s || !s2) return;
    const uint32_t B = 4, T = 32;
    uint32_t a[4 * 33], b[4 * 33];
    char err[256];
    loader_params_t p = params(B, T, WIRE_PACK);
    p.step = 3;
    /* the same request from two handles, and again after other epochs evicted the cache */
    CHECK(loader_batch_make(s, &p, a, NULL, NULL, err, sizeof err) == 0, "%s", err);
    for (uint64_t e = 1; e <= LOADER_EPOCH_CACHE + 1; e++) {
        loader_params_t q = p;
        q.epoch = e;
        loader_batch_make(s, &q, b, NULL, NULL, err, sizeof err);
    }
    CHECK(loader_batch_make(s2, &p, b, NULL, NULL, err, sizeof err) == 0 && memcmp(a, b, sizeof a) == 0,
          "two handles disagree");
    CHECK(loader_batch_make(s, &p, b, NULL, NULL, err, sizeof err) == 0 && memcmp(a, b, sizeof a) == 0,
          "result changed after cache eviction");
    p.seed = 12;
    loader_batch_make(s, &p, b, NULL, NULL, err, sizeof err);
    CHECK(memcmp(a, b, sizeof a) != 0, "seed ignored");

    /* pad layout, world 3: across ranks and steps of an epoch each document appears at most
     * once, and exactly once among the n_docs - n_docs % (B*world) served */
    int *seen = calloc(DATA.n_docs, sizeof *seen);
    uint32_t *doc = malloc((DATA.max_len + 1) * sizeof *doc);
    uint8_t mask[4 * 32];
    uint64_t steps = 0;
    int mism = 0, maskbad = 0, empties = 0;
    p = params(B, T, WIRE_PAD);
    loader_steps_per_epoch(s, &p, &steps, err, sizeof err);
    p.world = 3;
    loader_steps_per_epoch(s, &p, &steps, err, sizeof err);
    CHECK(steps == DATA.n_docs / (B * 3), "pad steps %llu", (unsigned long long)steps);
    for (uint32_t rank = 0; rank < 3; rank++)
        for (uint64_t step = 0; step < steps; step++) {
            p.rank = rank; p.step = step;
            if (loader_batch_make(s, &p, a, mask, NULL, err, sizeof err)) { mism++; continue; }
            for (uint32_t r = 0; r < B; r++) {
                /* identify the document by content: it is one of ours, find which */
                const uint32_t *row = a + r * (T + 1);
                if (row[0] == 0) { /* an empty document: all eot, and no target counts */
                    empties++;
                    for (uint32_t t = 0; t < T; t++) maskbad += row[t + 1] != 0 || mask[r * T + t] != 0;
                    continue;
                }
                int found = -1;
                for (uint64_t d = 0; d < DATA.n_docs && found < 0; d++) {
                    uint32_t n = loader_mkdata_doc(&DATA, d, doc), k = n < T + 1 ? n : T + 1, ok = 1;
                    for (uint32_t t = 0; t < T + 1 && ok; t++) ok = row[t] == (t < k ? doc[t] : 0);
                    if (ok) {
                        found = (int)d;
                        for (uint32_t t = 0; t < T; t++) maskbad += mask[r * T + t] != (t + 1 <= n);
                    }
                }
                if (found < 0) mism++;
                else seen[found]++;
            }
        }
    int twice = 0, once = 0, n_empty = 0;
    for (uint64_t d = 0; d < DATA.n_docs; d++) {
        twice += seen[d] > 1;
        once += seen[d] == 1;
        n_empty += loader_mkdata_doc(&DATA, d, NULL) == 0;
    }
    CHECK(mism == 0, "%d rows match no document", mism);
    CHECK(twice == 0, "%d documents served twice in one epoch", twice);
    CHECK(once + empties == (int)(steps * B * 3), "%d distinct + %d empty rows served", once, empties);
    CHECK(empties <= n_empty, "%d empty rows, only %d empty documents", empties, n_empty);
    CHECK(maskbad == 0, "%d mask entries wrong", maskbad);
    free(seen);
    free(doc);
    loader_src_close(&s);
    loader_src_close(&s2);
}

static void test_val_split(void) {
    loader_src_t *s = open_src(100);
    if (!s) return;
    loader_split_info_t tr, va;
    loader_src_split_info(s, WIRE_TRAIN, &tr);
    loader_src_split_info(s, WIRE_VAL, &va);
    CHECK(tr.n_docs == DATA.n_docs - 100 && va.n_docs == 100, "split sizes %llu/%llu", (unsigned long long)tr.n_docs,
          (unsigned long long)va.n_docs);
    uint64_t vtok = 0;
    for (uint64_t d = DATA.n_docs - 100; d < DATA.n_docs; d++) vtok += loader_mkdata_doc(&DATA, d, NULL);
    CHECK(va.n_tokens == vtok, "val holds the wrong documents");
    const uint32_t B = 2, T = 40;
    uint32_t tok[2 * 41];
    uint64_t L, steps;
    uint32_t *st = stream_build(DATA.n_docs - 100, 100, 11, 4, &L);
    loader_params_t p = params(B, T, WIRE_PACK);
    p.split = WIRE_VAL; p.epoch = 4; p.step = 5;
    char err[256] = "";
    CHECK(loader_batch_make(s, &p, tok, NULL, &steps, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(tok, st + 5 * B * (T + 1), sizeof tok) == 0, "val batch differs from the rule");
    CHECK(steps == L / (T + 1) / B, "val steps");
    free(st);
    loader_src_close(&s);
    char err2[256] = "";
    CHECK(loader_src_open(&s, path, NULL, DATA.n_docs + 1, err2, sizeof err2) == LOADER_EPARAM && !s,
          "val-docs beyond n_docs accepted");
    CHECK(loader_src_open(&s, "/nonexistent/ds", NULL, 0, err2, sizeof err2) == LOADER_EIO && !s,
          "missing dataset accepted");
}

static void test_errors(void) {
    loader_src_t *s = open_src(0);
    if (!s) return;
    uint32_t tok[16];
    char err[256];
    uint64_t steps;
    loader_params_t p = params(0, 8, WIRE_PACK);
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EPARAM, "B=0");
    p = params(1, LOADER_MAX_T + 1, WIRE_PACK);
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EPARAM, "T too big");
    p = params(1, 1000000, WIRE_PACK); /* allowed T, but longer than the whole stream */
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EEMPTY, "no full row");
    p = params(1, 7, WIRE_PACK);
    p.rank = 2; p.world = 2;
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EPARAM, "rank >= world");
    p = params(1, 7, 5);
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EPARAM, "layout 5");
    p = params(1, 7, WIRE_PACK);
    p.split = 9;
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EPARAM, "split 9");
    p = params(1, 7, WIRE_PACK);
    CHECK(loader_steps_per_epoch(s, &p, &steps, err, sizeof err) == 0, "%s", err);
    p.step = steps;
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_ERANGE, "step == steps");
    CHECK(strstr(err, "out of range") != NULL, "%s", err);
    p.step = steps - 1;
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == 0, "last step: %s", err);
    p.epoch = LOADER_MAX_EPOCH;
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_ERANGE, "epoch too big");
    p = params(1, 7, WIRE_PAD);
    p.split = WIRE_VAL; /* val_docs 0: the split is empty */
    CHECK(loader_batch_make(s, &p, tok, NULL, NULL, err, sizeof err) == LOADER_EEMPTY, "empty val split");
    loader_src_close(&s);
}

int main(void) {
    const char *t = getenv("FT_TEST_TMP");
    snprintf(tmp, sizeof tmp, "%s/test_loader_batch.%d", t ? t : "/tmp", (int)getpid());
    mkdir(tmp, 0775);
    snprintf(path, sizeof path, "%s/ds", tmp);
    char err[256] = "";
    CHECK(loader_mkdata_write(&DATA, path, err, sizeof err) == 0, "%s", err);
    RUN(test_pack_matches_rule);
    RUN(test_deterministic_and_ranks_disjoint);
    RUN(test_val_split);
    RUN(test_errors);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_summary();
}
