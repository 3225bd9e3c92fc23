/* tests/test_tokenizer.c: the BPE engine without external data: base64, the vocabulary
 * table, both merge paths agreeing, training on toy corpora with known merges, lossless
 * round trips (random bytes, invalid UTF-8 included), vocabulary files (good, truncated,
 * garbled), tiktoken's JSON layout, document reading errors, and encoding into a dataset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rng.h"
#include "tests/check.h"
#include "tokenizer/b64.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_io.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/dataset.h"
#include "tokenizer/docread.h"
#include "tokenizer/encode_files.h"
#include "tokenizer/pretok.h"
#include "tokenizer/ucd.h"

/* CHECK(cond) with no message is fine here */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

static char g_tmp[900];

/* A path under this run's temporary directory; valid for the next 15 calls. */
static const char *tmp_path(const char *name) {
    static char buf[16][1024];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
    return buf[k];
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Trains on text (documents separated by '\n') and returns the vocabulary. */
static bpe_vocab_t *train_text(const char *text, const char *pattern, uint32_t vocab_size) {
    char err[256];
    bpe_trainer_t *t = NULL;
    bpe_vocab_t *v = NULL;
    if (bpe_trainer_new(&t, pattern, err, sizeof err) < 0) return NULL;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        bpe_trainer_add(t, (const uint8_t *)p, n, err, sizeof err);
        p += n + (e != NULL);
    }
    if (bpe_trainer_run(t, vocab_size, 0, &v, err, sizeof err) < 0) fprintf(stderr, "train: %s\n", err);
    bpe_trainer_free(&t);
    return v;
}

static int token_is(const bpe_vocab_t *v, uint32_t id, const char *s) {
    uint32_t n;
    const uint8_t *t = bpe_vocab_token(v, id, &n);
    return t && n == strlen(s) && memcmp(t, s, n) == 0;
}

static void test_b64(void) {
    rng_t r;
    rng_seed(&r, 1);
    for (int len = 0; len < 40; len++) {
        uint8_t src[64], back[64];
        char enc[128];
        for (int i = 0; i < len; i++) src[i] = (uint8_t)rng_u64(&r);
        size_t n = b64_encode(src, len, enc);
        CHECK(n == 4 * (size_t)((len + 2) / 3));
        CHECK(b64_decode(enc, n, back) == len && memcmp(src, back, len) == 0, "len %d", len);
    }
    uint8_t out[8];
    CHECK(b64_decode("IQ==", 4, out) == 1 && out[0] == '!');
    CHECK(b64_decode("I*==", 4, out) < 0);
    CHECK(b64_decode("A", 1, out) < 0);
}

static void test_vocab_table(void) {
    bpe_vocab_t *v = NULL;
    char err[256];
    CHECK(bpe_vocab_new(&v, err, sizeof err) == 0);
    /* enough tokens to force several table growths */
    char tok[16];
    for (uint32_t i = 0; i < 5000; i++) {
        int n = snprintf(tok, sizeof tok, "t%u", i);
        CHECK(bpe_vocab_add(v, (const uint8_t *)tok, n, i * 2, err, sizeof err) == 0, "%s", err);
    }
    int ok = 1;
    for (uint32_t i = 0; i < 5000; i++) {
        int n = snprintf(tok, sizeof tok, "t%u", i);
        ok &= bpe_vocab_rank(v, (const uint8_t *)tok, n) == i * 2;
    }
    CHECK(ok, "every token found at its rank");
    CHECK(bpe_vocab_rank(v, (const uint8_t *)"t5000", 5) == BPE_NO_RANK);
    CHECK(bpe_vocab_token(v, 1, NULL) == NULL, "gaps have no token");
    CHECK(bpe_vocab_size(v) == 9999);
    CHECK(bpe_vocab_add(v, (const uint8_t *)"t7", 2, 123457, err, sizeof err) == BPE_EFORMAT, "duplicate bytes");
    CHECK(bpe_vocab_add(v, (const uint8_t *)"new", 3, 14, err, sizeof err) == BPE_EFORMAT, "duplicate id");
    CHECK(bpe_vocab_add_special(v, "<|x|>", 10001, err, sizeof err) == 0);
    CHECK(bpe_vocab_add_special(v, "<|x|>", 10003, err, sizeof err) == BPE_EFORMAT);
    CHECK(bpe_vocab_special_id(v, "<|x|>") == 10001);
    CHECK(bpe_vocab_check(v, err, sizeof err) == BPE_EFORMAT, "single bytes are missing");
    char h1[33], h2[33];
    bpe_vocab_hash(v, h1);
    CHECK(strlen(h1) == 32);
    bpe_vocab_add(v, (const uint8_t *)"extra", 5, 20001, err, sizeof err);
    bpe_vocab_hash(v, h2);
    CHECK(strcmp(h1, h2) != 0, "hash sees a new token");
    bpe_vocab_free(&v);
    CHECK(v == NULL);
}

/* Wikipedia's example: "aaabdaaabac" -> aa, then ab (tie with (aa,a) broken by smaller left
 * id: 'a' < 256), then aa+ab; then no pair occurs twice. */
static void test_train_known_merges(void) {
    bpe_vocab_t *v = train_text("aaabdaaabac", "", 1000);
    CHECK(v != NULL);
    if (!v) return;
    CHECK(bpe_vocab_n_ordinary(v) == 259, "got %u", bpe_vocab_n_ordinary(v));
    CHECK(token_is(v, 256, "aa"));
    CHECK(token_is(v, 257, "ab"));
    CHECK(token_is(v, 258, "aaab"));
    CHECK(bpe_vocab_special_id(v, BPE_EOT_TEXT) == 259);
    bpe_vocab_free(&v);
    /* the size cap: 258 tokens = 256 bytes + 1 merge + <|endoftext|> */
    v = train_text("aaabdaaabac", "", 258);
    CHECK(v && bpe_vocab_n_ordinary(v) == 257 && token_is(v, 256, "aa"));
    CHECK(v && bpe_vocab_special_id(v, BPE_EOT_TEXT) == 257 && bpe_vocab_size(v) == 258);
    bpe_vocab_free(&v);
    /* a piece longer than BPE_TRAIN_MAX_PIECE is counted in chunks, not dropped */
    char longdoc[3 * BPE_TRAIN_MAX_PIECE + 1];
    for (int i = 0; i < 3 * BPE_TRAIN_MAX_PIECE; i++) longdoc[i] = "xy"[i % 2];
    longdoc[3 * BPE_TRAIN_MAX_PIECE] = 0;
    v = train_text(longdoc, "", 300);
    CHECK(v && token_is(v, 256, "xy"), "long piece still trains");
    bpe_vocab_free(&v);
}

/* Merges stay inside pieces: with the gpt2 pattern a space starts a piece, so "b " is never
 * a token, while " ab" is. Counts weight repeated pieces. */
static void test_train_pieces(void) {
    bpe_vocab_t *v = train_text("ab ab ab\nab ab", "gpt2", 300);
    CHECK(v != NULL);
    if (!v) return;
    CHECK(token_is(v, 256, "ab"), "most frequent pair first");
    CHECK(token_is(v, 257, " a") || token_is(v, 257, " ab"));
    int crosses = 0;
    for (uint32_t id = 256; id < bpe_vocab_size(v); id++) {
        uint32_t n;
        const uint8_t *t = bpe_vocab_token(v, id, &n);
        if (t && !bpe_vocab_is_special(v, id) && n >= 2 && memmem(t, n, "b ", 2)) crosses = 1;
    }
    CHECK(!crosses, "no token spans a piece boundary");
    /* determinism: training twice gives the same vocabulary */
    bpe_vocab_t *w = train_text("ab ab ab\nab ab", "gpt2", 300);
    char h1[33], h2[33];
    bpe_vocab_hash(v, h1);
    bpe_vocab_hash(w, h2);
    CHECK(strcmp(h1, h2) == 0);
    bpe_vocab_free(&w);
    bpe_vocab_free(&v);
}

static const char *CORPUS =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!\n"
    "It's 2024 and they've said: \"numbers like 1234567 and 3.14 matter\".\n"
    "  Whitespace   runs\tand\ttabs\n\nUnicode: café, naïve, 中文, emoji 😀😀😀.\n"
    "the the the then there these those other another brother mother\n";

static void test_merge_paths_agree(void) {
    bpe_vocab_t *v = train_text(CORPUS, "", 400); /* no pattern: long pieces */
    bpe_t *b = NULL;
    char err[256];
    CHECK(v && bpe_new(&b, v, err, sizeof err) == 0, "%s", err);
    if (!b) { bpe_vocab_free(&v); return; }
    rng_t r;
    rng_seed(&r, 7);
    size_t saved = bpe_heap_threshold;
    int same = 1;
    bpe_ids_t a = {0}, h = {0};
    for (int iter = 0; iter < 300; iter++) {
        /* substrings of the corpus and random mixtures of its characters */
        uint8_t buf[200];
        size_t n = 1 + rng_below(&r, sizeof buf);
        size_t clen = strlen(CORPUS);
        if (iter % 2) {
            size_t s = rng_below(&r, clen - n);
            memcpy(buf, CORPUS + s, n);
        } else {
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)CORPUS[rng_below(&r, clen)];
        }
        a.n = h.n = 0;
        bpe_heap_threshold = (size_t)-1;
        bpe_free(&b); /* fresh encoder: no cached pieces from the other path */
        bpe_new(&b, v, err, sizeof err);
        bpe_encode_piece(b, buf, n, &a);
        bpe_heap_threshold = 2;
        bpe_free(&b);
        bpe_new(&b, v, err, sizeof err);
        bpe_encode_piece(b, buf, n, &h);
        same &= a.n == h.n && memcmp(a.v, h.v, a.n * sizeof *a.v) == 0;
    }
    bpe_heap_threshold = saved;
    CHECK(same, "quadratic and heap merges give the same ids");
    bpe_ids_free(&a);
    bpe_ids_free(&h);
    bpe_free(&b);
    bpe_vocab_free(&v);
}

static void check_roundtrip(bpe_t *b, const uint8_t *text, size_t n, const char *what) {
    bpe_ids_t ids = {0};
    bpe_bytes_t back = {0};
    CHECK(bpe_encode(b, text, n, 0, &ids) == 0, "%s", what);
    CHECK(bpe_decode(bpe_vocab(b), ids.v, ids.n, &back, NULL) == 0);
    CHECK(back.n == n && memcmp(back.v, text, n) == 0, "%s: round trip", what);
    bpe_ids_free(&ids);
    bpe_bytes_free(&back);
}

static void test_roundtrip(void) {
    char err[256];
    const char *pats[4] = {"gpt2", "cl100k", "o200k", ""};
    rng_t r;
    rng_seed(&r, 3);
    uint8_t *buf = malloc(1 << 20);
    for (int p = 0; p < 4; p++) {
        bpe_vocab_t *v = train_text(CORPUS, pats[p], 350);
        bpe_t *b = NULL;
        CHECK(v && bpe_new(&b, v, err, sizeof err) == 0, "%s", err);
        if (!b) { bpe_vocab_free(&v); continue; }
        check_roundtrip(b, (const uint8_t *)CORPUS, strlen(CORPUS), "corpus");
        for (int iter = 0; iter < 50; iter++) { /* random bytes: mostly invalid UTF-8 */
            size_t n = rng_below(&r, 3000);
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rng_u64(&r);
            check_roundtrip(b, buf, n, "random bytes");
        }
        /* truncated multi-byte sequences, lone continuation bytes, overlong forms, NULs */
        const char odd[] = "ok \xe4\xb8 half \x80\x80 lone \xc0\xaf overlong \xed\xa0\x80 surrogate \0 nul \xf4\x90\x80\x80";
        check_roundtrip(b, (const uint8_t *)odd, sizeof odd - 1, "invalid utf-8");
        /* a long piece (a megabyte of spaces is one \s+ match) takes the heap path */
        memset(buf, ' ', 1 << 20);
        buf[(1 << 20) - 1] = 'x';
        check_roundtrip(b, buf, 1 << 20, "1 MiB of spaces");
        bpe_free(&b);
        bpe_vocab_free(&v);
    }
    free(buf);
}

static void test_bytes_vocab(void) {
    bpe_vocab_t *v = NULL;
    bpe_t *b = NULL;
    char err[256];
    CHECK(bpe_vocab_open(&v, "bytes", err, sizeof err) == 0 && bpe_new(&b, v, err, sizeof err) == 0);
    if (!b) { bpe_vocab_free(&v); return; }
    CHECK(bpe_vocab_size(v) == 257 && bpe_vocab_special_id(v, BPE_EOT_TEXT) == 256);
    const uint8_t text[] = "A\xff<|endoftext|>";
    bpe_ids_t ids = {0};
    CHECK(bpe_encode(b, text, sizeof text - 1, 0, &ids) == 0 && ids.n == sizeof text - 1);
    CHECK(ids.n > 2 && ids.v[0] == 'A' && ids.v[1] == 0xff);
    ids.n = 0;
    CHECK(bpe_encode(b, text, sizeof text - 1, BPE_ALLOW_SPECIAL, &ids) == 0 && ids.n == 3 && ids.v[2] == 256);
    bpe_ids_free(&ids);
    bpe_free(&b);
    bpe_vocab_free(&v);
}

static void test_vocab_file(void) {
    char err[512];
    bpe_vocab_t *v = train_text(CORPUS, "gpt2", 320), *w = NULL;
    const char *path = tmp_path("toy.ftbpe");
    CHECK(v && bpe_vocab_save_file(v, path, err, sizeof err) == 0, "%s", err);
    CHECK(bpe_vocab_load_file(&w, path, err, sizeof err) == 0, "%s", err);
    if (v && w) {
        char h1[33], h2[33];
        bpe_vocab_hash(v, h1);
        bpe_vocab_hash(w, h2);
        CHECK(strcmp(h1, h2) == 0, "save/load keeps the vocabulary");
        CHECK(strcmp(bpe_vocab_pattern(w), PRETOK_GPT2) == 0);
    }
    bpe_vocab_free(&w);
    /* truncated: drop the last 40 bytes (a partial line, then missing lines) */
    FILE *f = fopen(path, "rb");
    char *all = malloc(1 << 20);
    size_t n = f ? fread(all, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    const char *bad = tmp_path("bad.ftbpe");
    f = fopen(bad, "wb");
    fwrite(all, 1, n > 40 ? n - 40 : 0, f);
    fclose(f);
    CHECK(bpe_vocab_load_file(&w, bad, err, sizeof err) == BPE_EFORMAT && w == NULL);
    CHECK(strstr(err, "truncated") != NULL, "err: %s", err);
    /* whole lines missing */
    char *cut = all + n - 1;
    for (int k = 0; k < 3; k++) do cut--; while (*cut != '\n');
    f = fopen(bad, "wb");
    fwrite(all, 1, cut - all + 1, f);
    fclose(f);
    CHECK(bpe_vocab_load_file(&w, bad, err, sizeof err) == BPE_EFORMAT && strstr(err, "truncated"), "err: %s", err);
    free(all);
    write_file(bad, "ftbpe 1 {\"name\":\"x\",\"pattern\":\"\",\"n_tokens\":1}\n!!!! 0\n");
    CHECK(bpe_vocab_load_file(&w, bad, err, sizeof err) == BPE_EFORMAT && strstr(err, ":2:"), "err: %s", err);
    write_file(bad, "hello world\n");
    CHECK(bpe_vocab_open(&w, bad, err, sizeof err) == BPE_EFORMAT, "err: %s", err);
    write_file(bad, "ftbpe 9 {}\n");
    CHECK(bpe_vocab_load_file(&w, bad, err, sizeof err) == BPE_EFORMAT && strstr(err, "version"), "err: %s", err);
    CHECK(bpe_vocab_open(&w, tmp_path("missing.ftbpe"), err, sizeof err) == BPE_ENOENT);
    CHECK(bpe_vocab_open(&w, "no_such_encoding_name", err, sizeof err) == BPE_ENOENT && strstr(err, "make data"));
    bpe_vocab_free(&v);
}

/* tiktoken's JSON layout, on a made-up encoding with gpt2's pattern (pat_str, JSON-escaped):
 * bytes at ranks 0..255 on the first line, then a second line starting at rank 300 (a gap, as
 * p50k_base has). The same file with a pattern that is not implemented loads (decoding needs
 * no pattern) but cannot encode. */
static void write_toy_json(const char *path, const char *pattern) {
    char *js = malloc(1 << 16), b64[8];
    size_t o = (size_t)sprintf(js, "{\"pat_str\": \"");
    for (const char *c = pattern; *c; c++) {
        if (*c == '\\' || *c == '"') js[o++] = '\\';
        js[o++] = *c;
    }
    o += (size_t)sprintf(js + o, "\", \"special_tokens\": {\"<|endoftext|>\": 302}, \"bpe_ranks\": \"! 0");
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        b64_encode(&byte, 1, b64);
        o += (size_t)sprintf(js + o, " %s", b64);
    }
    b64_encode((const uint8_t *)"ab", 2, b64);
    o += (size_t)sprintf(js + o, "\\n! 300 %s", b64);
    b64_encode((const uint8_t *)"abab", 4, b64);
    sprintf(js + o, " %s\"}", b64);
    write_file(path, js);
    free(js);
}

static void test_tiktoken_json_layout(void) {
    const char *path = tmp_path("toy.json");
    write_toy_json(path, PRETOK_GPT2);
    bpe_vocab_t *v = NULL;
    char err[512];
    CHECK(bpe_vocab_open(&v, path, err, sizeof err) == 0, "%s", err);
    if (!v) return;
    CHECK(strcmp(bpe_vocab_name(v), "toy") == 0 && strcmp(bpe_vocab_pattern(v), PRETOK_GPT2) == 0);
    CHECK(bpe_vocab_rank(v, (const uint8_t *)"ab", 2) == 300 && bpe_vocab_rank(v, (const uint8_t *)"abab", 4) == 301);
    CHECK(bpe_vocab_size(v) == 303 && bpe_vocab_token(v, 299, NULL) == NULL);
    bpe_t *b = NULL;
    bpe_ids_t ids = {0};
    CHECK(bpe_new(&b, v, err, sizeof err) == 0);
    CHECK(b && bpe_encode(b, (const uint8_t *)"ababa ab", 8, 0, &ids) == 0);
    CHECK(ids.n == 4 && ids.v[0] == 301 && ids.v[1] == 'a' && ids.v[2] == ' ' && ids.v[3] == 300);
    bpe_ids_free(&ids);
    bpe_free(&b);
    bpe_vocab_free(&v);
    write_toy_json(path, "\\s+|\\S+");
    CHECK(bpe_vocab_open(&v, path, err, sizeof err) == 0, "%s", err);
    CHECK(v && bpe_new(&b, v, err, sizeof err) == BPE_EREGEX && b == NULL && strstr(err, "not implemented"), "err: %s", err);
    bpe_vocab_free(&v);
    write_file(path, "{\"pat_str\": \"x\", \"bpe_ranks\": \"! 0 IQ== I@==\"}");
    CHECK(bpe_vocab_open(&v, path, err, sizeof err) == BPE_EFORMAT && strstr(err, "base64"), "err: %s", err);
    write_file(path, "{\"pat_str\": \"x\", \"bpe_ranks\": \"! 0 IQ==\"}");
    CHECK(bpe_vocab_open(&v, path, err, sizeof err) == BPE_EFORMAT && strstr(err, "no token"), "err: %s", err);
    write_file(path, "{\"pat_str\": \"x\", ");
    CHECK(bpe_vocab_open(&v, path, err, sizeof err) == BPE_EFORMAT);
}

/* Only tiktoken's patterns are implemented: any other pattern is refused with one line, by
 * the pre-tokenizer, the trainer and the encoder of a vocabulary that names it. */
static void test_unknown_pattern(void) {
    pretok_t *p = NULL;
    char err[256];
    CHECK(pretok_new(&p, "(unclosed", err, sizeof err) == BPE_EREGEX && p == NULL);
    CHECK(strstr(err, "not implemented") != NULL, "err: %s", err);
    CHECK(pretok_new(&p, "[a-z]+", err, sizeof err) == BPE_EREGEX && p == NULL);
    bpe_trainer_t *t = NULL;
    CHECK(bpe_trainer_new(&t, "\\w+", err, sizeof err) == BPE_EREGEX && t == NULL, "err: %s", err);
    CHECK(strcmp(pretok_pattern_resolve("o200k_base"), PRETOK_O200K) == 0);
    CHECK(strcmp(pretok_pattern_resolve("none"), "") == 0 && pretok_pattern_known(""));
    CHECK(pretok_pattern_known(PRETOK_CL100K) && !pretok_pattern_known("\\S+"));
    /* no pattern: the whole text is one piece */
    CHECK(pretok_new(&p, "", err, sizeof err) == 0);
    pretok_iter_t it;
    const char *text = "ab 12\n cd!";
    pretok_iter_init(&it, (const uint8_t *)text, strlen(text));
    size_t s, n;
    CHECK(p && pretok_next(p, &it, &s, &n) == 1 && s == 0 && n == strlen(text));
    CHECK(p && pretok_next(p, &it, &s, &n) == 0);
    pretok_free(&p);
}

/* The generated Unicode tables: the version tiktoken's regex carries, the classes that issue
 * 10 found wrong under PCRE2's Unicode 14 tables, and the ASCII copy agreeing with the rest. */
static void test_ucd_tables(void) {
    CHECK(strcmp(ucd_version, "16.0.0") == 0, "version %s", ucd_version);
    CHECK(ucd_class(0x180E) == 0, "U+180E MONGOLIAN VOWEL SEPARATOR is Cf, not White_Space");
    CHECK(ucd_class(0x0085) == UCD_WS && ucd_class(0x3000) == UCD_WS && ucd_class(0x200B) == 0);
    CHECK(ucd_class(0x1C89) == UCD_LU, "U+1C89 CYRILLIC CAPITAL LETTER TJE (Unicode 16)");
    CHECK(ucd_class(0x105C0) == UCD_LO && ucd_class(0x10EC2) == UCD_LO, "Todhri, Arabic letters (Unicode 16)");
    CHECK(ucd_class(0x10D40) == UCD_N, "U+10D40 GARAY DIGIT ZERO (Unicode 16)");
    CHECK(ucd_class(0x0301) == UCD_M && ucd_class(0x01C5) == UCD_LT && ucd_class(0x02B0) == UCD_LM);
    CHECK(ucd_class(0x10FFFF) == 0 && ucd_class(0x110000) == 0 && ucd_class(0xE000) == 0);
    int same = 1;
    for (uint32_t b = 0; b < 128; b++) same &= ucd_ascii[b] == ucd_class(b);
    CHECK(same, "ucd_ascii agrees with the blocks");
    CHECK(ucd_fold_ascii('S') == 's' && ucd_fold_ascii(0x017F) == 's' && ucd_fold_ascii(0x212A) == 'k');
    CHECK(ucd_fold_ascii('1') == 0 && ucd_fold_ascii('@') == 0 && ucd_fold_ascii(0x00DF) == 0);
}

/* Pieces of text under pattern, joined with '|'. */
static void split(const char *pattern, const char *text, size_t len, char *out, size_t cap) {
    pretok_t *p = NULL;
    char err[256];
    out[0] = 0;
    if (pretok_new(&p, pretok_pattern_resolve(pattern), err, sizeof err) < 0) return;
    pretok_iter_t it;
    pretok_iter_init(&it, (const uint8_t *)text, len);
    size_t s, n, o = 0;
    while (pretok_next(p, &it, &s, &n) > 0 && o + n + 2 < cap) {
        if (o) out[o++] = '|';
        memcpy(out + o, text + s, n);
        o += n;
    }
    out[o] = 0;
    pretok_free(&p);
}

/* Splits worked out by hand from the regex semantics (the tiktoken comparison,
 * tests/it_tokenizer_tiktoken.sh, checks them at scale): the backtracking cases of each
 * pattern, and invalid UTF-8, which tiktoken never sees: an invalid byte ends a match and is
 * seen as the end of the text by a lookahead; each run of invalid bytes is one piece. */
static void test_pretok_splits(void) {
    static const struct { const char *pattern, *text, *want; } cases[] = {
        {"gpt2", "Hello  world", "Hello| | world"},
        {"gpt2", "a   ", "a|   "},
        {"gpt2", "it's 'Sam'll", "it|'s| '|Sam|'ll"},
        {"gpt2", "x \xe3\x80\x80y", "x| |\xe3\x80\x80|y"}, /* only " " is gpt2's optional prefix */
        {"cl100k", "x \xe3\x80\x80y", "x| |\xe3\x80\x80y"}, /* any [^\r\n\p{L}\p{N}] is cl100k's */
        {"cl100k", "IT'S 1234567", "IT|'S| |123|456|7"},
        {"cl100k", "a \n\n  b", "a| \n\n| | b"},
        {"cl100k", "x!!\n\ny", "x|!!\n\n|y"},
        {"cl100k", "'\xc5\xbf it'\xc5\xbfx", "'\xc5\xbf| it|'\xc5\xbf|x"},
        {"o200k", "HelloWorld ABCdef", "Hello|World| ABCdef"},
        {"o200k", "DON'T x's", "DON'T| x's"},
        {"o200k", "a/b/\n/c", "a|/b|/\n/|c"},
        {"gpt2", "a  \xff\xfe b\xe4\xb8", "a|  |\xff\xfe| b|\xe4\xb8"},
        {"cl100k", "ab\xed\xa0\x80" "cd", "ab|\xed\xa0\x80|cd"},
    };
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split(cases[i].pattern, cases[i].text, strlen(cases[i].text), got, sizeof got);
        CHECK(strcmp(got, cases[i].want) == 0, "%s: \"%s\" -> \"%s\", want \"%s\"", cases[i].pattern, cases[i].text,
              got, cases[i].want);
    }
}

static void test_docread_errors(void) {
    const char *path = tmp_path("docs.jsonl");
    write_file(path, "{\"text\": \"one\"}\n\n{\"txt\": \"two\"}\n");
    docread_t *r = NULL;
    char err[512];
    const char *text;
    size_t len;
    CHECK(docread_open(&r, path, DOCREAD_JSONL, err, sizeof err) == 0);
    CHECK(r && docread_next(r, &text, &len, err, sizeof err) == 1 && len == 3 && !memcmp(text, "one", 3));
    CHECK(r && docread_next(r, &text, &len, err, sizeof err) == BPE_EFORMAT);
    CHECK(strstr(err, "docs.jsonl:3: no \"text\" string field") != NULL, "err: %s", err);
    docread_close(&r);
    write_file(path, "{\"text\": \"one\"\n");
    CHECK(docread_open(&r, path, DOCREAD_JSONL, err, sizeof err) == 0);
    CHECK(r && docread_next(r, &text, &len, err, sizeof err) == BPE_EFORMAT && strstr(err, ":1: bad JSON"), "err: %s", err);
    docread_close(&r);
    CHECK(docread_open(&r, tmp_path("nope.txt"), DOCREAD_TEXT, err, sizeof err) == BPE_ENOENT && r == NULL);
}

static void test_encode_dataset(void) {
    char in[1024], out[1024];
    snprintf(in, sizeof in, "%s", tmp_path("docs.txt"));
    snprintf(out, sizeof out, "%s", tmp_path("ds_bytes"));
    write_file(in, "hello\n\nworld!\r\n\xff\xfe\n");
    const char *const inputs[1] = {in};
    encode_files_opts_t o = {"bytes", DOCREAD_TEXT, 1, 0, 1, 0};
    encode_files_stats_t st;
    char err[512];
    CHECK(encode_files(out, inputs, 1, &o, &st, err, sizeof err) == 0, "%s", err);
    CHECK(st.n_docs == 3 && st.n_bytes == 5 + 6 + 2 && st.n_tokens == st.n_bytes + 3);
    dataset_t *ds = NULL;
    CHECK(dataset_open(&ds, out, err, sizeof err) == 0, "%s", err);
    if (ds) {
        const dataset_meta_t *m = dataset_meta(ds);
        CHECK(m->vocab_size == 257 && m->eot_id == 256 && m->n_docs == 3 && !strcmp(m->tokenizer, "bytes"));
        CHECK(strlen(m->tokenizer_hash) == 32);
        uint32_t ids[16], len = 0;
        CHECK(dataset_doc_read(ds, 1, ids, 16, &len) == 0 && len == 7);
        CHECK(ids[0] == 'w' && ids[5] == '!' && ids[6] == 256, "the \\r is not part of the document");
        CHECK(dataset_doc_read(ds, 2, ids, 16, &len) == 0 && len == 3 && ids[0] == 0xff && ids[1] == 0xfe);
        dataset_close(&ds);
    }
    /* a missing input fails before any dataset is created */
    const char *const bad[2] = {in, tmp_path("missing.txt")};
    CHECK(encode_files(tmp_path("ds_missing"), bad, 2, &o, &st, err, sizeof err) == BPE_ENOENT);
    CHECK(access(tmp_path("ds_missing"), F_OK) != 0, "no dataset left behind");
    /* a bad JSONL line leaves an incomplete dataset that dataset_open refuses */
    write_file(in, "{\"text\": \"a\"}\n[1, 2]\n");
    o.format = DOCREAD_JSONL;
    CHECK(encode_files(tmp_path("ds_bad"), inputs, 1, &o, &st, err, sizeof err) == BPE_EFORMAT);
    CHECK(strstr(err, "docs.txt:2: no \"text\" string field") != NULL, "err: %s", err);
    CHECK(dataset_open(&ds, tmp_path("ds_bad"), err, sizeof err) < 0);
}

int main(void) {
    const char *t = getenv("FT_TEST_TMP");
    snprintf(g_tmp, sizeof g_tmp, "%.800s", t && *t ? t : "/tmp");
    char sub[880];
    snprintf(sub, sizeof sub, "%.820s/test_tokenizer.%d", g_tmp, (int)getpid());
    mkdir(sub, 0755);
    snprintf(g_tmp, sizeof g_tmp, "%s", sub);
    RUN(test_b64);
    RUN(test_vocab_table);
    RUN(test_train_known_merges);
    RUN(test_train_pieces);
    RUN(test_merge_paths_agree);
    RUN(test_roundtrip);
    RUN(test_bytes_vocab);
    RUN(test_vocab_file);
    RUN(test_tiktoken_json_layout);
    RUN(test_unknown_pattern);
    RUN(test_ucd_tables);
    RUN(test_pretok_splits);
    RUN(test_docread_errors);
    RUN(test_encode_dataset);
    return check_summary();
}
