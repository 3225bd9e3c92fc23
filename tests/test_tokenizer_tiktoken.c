/* tests/test_tokenizer_tiktoken.c: our BPE against the ids the npm tiktoken package gave for
 * the same texts (tests/fixtures/tiktoken_*.json, made by `make tokenizer-fixtures`), for
 * every encoding bin/tokenizer claims: exact equality, for plain encoding and with special
 * tokens allowed, and decode back to the text. The cases include characters Unicode added in
 * 15 and 16 and U+180E, which split differently under older Unicode tables (issue 10); the
 * full comparison against tiktoken itself is tests/it_tokenizer_tiktoken.sh.
 * The encodings themselves come from `make data` (data/tiktoken/encoders) or
 * $FT_TIKTOKEN_DIR; without them this test fails (make test runs make data first). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "tests/check.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_io.h"

static int first_mismatch(const bpe_ids_t *got, json_t *want) {
    size_t n = json_array_size(want);
    for (size_t i = 0; i < n || i < got->n; i++) {
        if (i >= n || i >= got->n) return (int)i;
        if ((json_int_t)got->v[i] != json_integer_value(json_array_get(want, i))) return (int)i;
    }
    return -1;
}

static void check_encoding(const char *name) {
    char path[256], err[512];
    snprintf(path, sizeof path, "tests/fixtures/tiktoken_%s.json", name);
    json_error_t je;
    json_t *fx = json_load_file(path, 0, &je);
    CHECK(fx != NULL, "%s: %s", path, je.text);
    if (!fx) return;
    bpe_vocab_t *v = NULL;
    int rc = bpe_vocab_open(&v, name, err, sizeof err);
    /* `make test` fetches the encodings first (make data), so a missing one is a failure,
     * not a skip: a check that silently does nothing must not pass. */
    CHECK(rc == 0, "%s (run make data)", err);
    bpe_t *b = NULL;
    CHECK(rc == 0 && bpe_new(&b, v, err, sizeof err) == 0, "%s", err);
    if (!b) {
        bpe_vocab_free(&v);
        json_decref(fx);
        return;
    }
    json_t *cases = json_object_get(fx, "cases");
    CHECK(json_array_size(cases) >= 20, "%s: too few cases", path);
    size_t i;
    json_t *c;
    bpe_ids_t ids = {0};
    bpe_bytes_t back = {0};
    json_array_foreach(cases, i, c) {
        const char *cname = json_string_value(json_object_get(c, "name"));
        json_t *t = json_object_get(c, "text");
        const uint8_t *text = (const uint8_t *)json_string_value(t);
        size_t len = json_string_length(t);
        const char *keys[2] = {"ids", "ids_special"};
        for (int k = 0; k < 2; k++) {
            ids.n = 0;
            CHECK(bpe_encode(b, text, len, k ? BPE_ALLOW_SPECIAL : 0, &ids) == 0, "%s/%s", name, cname);
            json_t *want = json_object_get(c, keys[k]);
            int at = first_mismatch(&ids, want);
            CHECK(at < 0, "%s/%s %s: first difference at token %d (got %zu tokens, want %zu)", name, cname,
                  keys[k], at, ids.n, json_array_size(want));
            back.n = 0;
            CHECK(bpe_decode(v, ids.v, ids.n, &back, NULL) == 0 && back.n == len && memcmp(back.v, text, len) == 0,
                  "%s/%s %s: decode does not give the text back", name, cname, keys[k]);
        }
    }
    bpe_ids_free(&ids);
    bpe_bytes_free(&back);
    bpe_free(&b);
    bpe_vocab_free(&v);
    json_decref(fx);
}

static void test_gpt2(void) { check_encoding("gpt2"); }
static void test_r50k_base(void) { check_encoding("r50k_base"); }
static void test_p50k_base(void) { check_encoding("p50k_base"); }
static void test_p50k_edit(void) { check_encoding("p50k_edit"); }
static void test_cl100k_base(void) { check_encoding("cl100k_base"); }
static void test_o200k_base(void) { check_encoding("o200k_base"); }

int main(void) {
    RUN(test_gpt2);
    RUN(test_r50k_base);
    RUN(test_p50k_base);
    RUN(test_p50k_edit);
    RUN(test_cl100k_base);
    RUN(test_o200k_base);
    return check_summary();
}
