/* tests/test_dataset.c: the LMDB dataset (tokenizer/dataset.c): round trips, growth of the
 * map, u16/u32 values, refusal of incomplete/damaged/foreign datasets. */
#include <lmdb.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/rng.h"
#include "tests/check.h"
#include "tokenizer/dataset.h"

static char tmp[1024];

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmp, name); }

static void meta_init(dataset_meta_t *m, uint32_t vocab) {
    memset(m, 0, sizeof *m);
    m->vocab_size = vocab;
    m->eot_id = vocab - 1;
    snprintf(m->tokenizer, sizeof m->tokenizer, "test");
    snprintf(m->tokenizer_hash, sizeof m->tokenizer_hash, "abc123");
    snprintf(m->source, sizeof m->source, "test_dataset");
}

/* Document i: length and tokens from rng_seed2(seed, i), so the reader can check every one. */
static uint32_t doc_gen(uint64_t seed, uint64_t i, uint32_t vocab, uint32_t maxlen, uint32_t *out) {
    rng_t r;
    rng_seed2(&r, seed, i);
    uint32_t n = (uint32_t)rng_below(&r, maxlen + 1); /* includes empty documents */
    for (uint32_t j = 0; j < n; j++) out[j] = (uint32_t)rng_below(&r, vocab);
    return n;
}

static void roundtrip(const char *name, uint32_t vocab, uint64_t ndocs, uint32_t maxlen, uint32_t want_tb) {
    char p[1200], err[256] = "";
    path_of(p, sizeof p, name);
    dataset_meta_t m;
    meta_init(&m, vocab);
    dataset_writer_t *w = NULL;
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == 0, "%s", err);
    if (!w) return;
    uint32_t *buf = malloc((maxlen + 1) * sizeof *buf), *got = malloc((maxlen + 1) * sizeof *got);
    uint64_t ntok = 0;
    int fails = 0;
    for (uint64_t i = 0; i < ndocs; i++) {
        uint32_t n = doc_gen(7, i, vocab, maxlen, buf);
        ntok += n;
        fails += dataset_writer_add(w, buf, n, n + 1, err, sizeof err) != 0;
    }
    CHECK(fails == 0, "%s", err);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    CHECK(w == NULL, "in %s", __func__);
    dataset_t *ds = NULL;
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0, "%s", err);
    if (ds) {
        const dataset_meta_t *r = dataset_meta(ds);
        CHECK(r->n_docs == ndocs, "in %s", __func__);
        CHECK(r->n_tokens == ntok, "in %s", __func__);
        CHECK(r->n_bytes == ntok + ndocs, "in %s", __func__);
        CHECK(r->token_bytes == want_tb, "token_bytes %u", r->token_bytes);
        CHECK(r->vocab_size == vocab && r->eot_id == vocab - 1, "in %s", __func__);
        CHECK(strcmp(r->tokenizer, "test") == 0 && strcmp(r->tokenizer_hash, "abc123") == 0, "in %s", __func__);
        CHECK(r->version == DATASET_FORMAT_VERSION, "in %s", __func__);
        int bad = 0;
        for (uint64_t i = 0; i < ndocs; i++) {
            uint32_t n = doc_gen(7, i, vocab, maxlen, buf), len = 0, len2 = 0;
            if (dataset_doc_len(ds, i, &len2) || len2 != n) bad++;
            if (dataset_doc_read(ds, i, got, maxlen + 1, &len) || len != n || memcmp(got, buf, n * 4)) bad++;
        }
        CHECK(bad == 0, "%d documents differ", bad);
        uint32_t len;
        CHECK(dataset_doc_read(ds, ndocs, got, 1, &len) == DATASET_ERANGE, "in %s", __func__);
        dataset_close(&ds);
        CHECK(ds == NULL, "in %s", __func__);
    }
    free(buf);
    free(got);
}

static void test_roundtrip_u16(void) { roundtrip("u16", 1000, 3000, 200, 2); }
static void test_roundtrip_u32(void) { roundtrip("u32", 100000, 500, 300, 4); }
/* ~12 MB of values: several 8 MB commits and many doublings of the 1 MiB initial map. */
static void test_roundtrip_grows(void) { roundtrip("big", 50000, 1500, 8000, 2); }

static void test_truncated_and_range_reads(void) {
    char p[1200], err[256] = "";
    path_of(p, sizeof p, "range");
    dataset_meta_t m;
    meta_init(&m, 70000); /* u32 values */
    dataset_writer_t *w = NULL;
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == 0, "%s", err);
    uint32_t doc[10] = {5, 6, 7, 8, 9, 69999, 0, 1, 2, 3};
    CHECK(dataset_writer_add(w, doc, 10, 10, err, sizeof err) == 0, "in %s", __func__);
    uint32_t badtok = 70000;
    CHECK(dataset_writer_add(w, &badtok, 1, 1, err, sizeof err) == DATASET_ERANGE, "id >= vocab accepted");
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    dataset_t *ds = NULL;
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0, "%s", err);
    if (!ds) return;
    CHECK(dataset_meta(ds)->n_docs == 1, "the refused document was counted");
    uint32_t out[10] = {0}, len = 0, got = 0;
    CHECK(dataset_doc_read(ds, 0, out, 3, &len) == 0 && len == 10, "in %s", __func__);
    CHECK(out[0] == 5 && out[2] == 7 && out[3] == 0, "cap not honoured");
    CHECK(dataset_doc_read_range(ds, 0, 4, out, 100, &got, &len) == 0 && got == 6 && out[1] == 69999, "in %s", __func__);
    CHECK(dataset_doc_read_range(ds, 0, 10, out, 5, &got, NULL) == 0 && got == 0, "in %s", __func__);
    CHECK(dataset_doc_read_range(ds, 0, 99, out, 5, &got, NULL) == 0 && got == 0, "in %s", __func__);
    dataset_close(&ds);
}

static void test_refusals(void) {
    char p[1200], err[256] = "";
    dataset_t *ds = NULL;
    path_of(p, sizeof p, "nope");
    CHECK(dataset_open(&ds, p, err, sizeof err) == DATASET_ENOENT && ds == NULL, "in %s", __func__);
    CHECK(strstr(err, "nope") != NULL, "error does not name the path: %s", err);

    /* incomplete: aborted before "info" */
    path_of(p, sizeof p, "aborted");
    dataset_meta_t m;
    meta_init(&m, 100);
    dataset_writer_t *w = NULL;
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == 0, "%s", err);
    uint32_t d[3] = {1, 2, 3};
    dataset_writer_add(w, d, 3, 3, err, sizeof err);
    dataset_writer_abort(&w);
    CHECK(w == NULL, "in %s", __func__);
    CHECK(dataset_open(&ds, p, err, sizeof err) == DATASET_EFORMAT, "incomplete dataset opened");

    /* no overwrite unless asked */
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == DATASET_EARG && w == NULL, "in %s", __func__);
    CHECK(dataset_writer_open(&w, p, &m, 1, err, sizeof err) == 0, "%s", err);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0, "%s", err);
    if (ds) CHECK(dataset_meta(ds)->n_docs == 0, "in %s", __func__);
    dataset_close(&ds);

    /* bad meta */
    meta_init(&m, 100);
    m.eot_id = 100;
    path_of(p, sizeof p, "badeot");
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == DATASET_EARG && w == NULL, "in %s", __func__);
}

/* Damage a dataset behind the library's back with raw LMDB and check the reader notices. */
static void raw_put(const char *path, const char *db, const void *k, size_t kn, const void *v, size_t vn) {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    mdb_env_create(&env);
    mdb_env_set_maxdbs(env, 2);
    mdb_env_set_mapsize(env, 64 << 20);
    int rc = mdb_env_open(env, path, 0, 0664);
    if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc) {
        rc = mdb_dbi_open(txn, db, MDB_CREATE, &dbi);
        MDB_val key = {kn, (void *)k}, val = {vn, (void *)v};
        if (!rc) rc = mdb_put(txn, dbi, &key, &val, 0);
        if (!rc) rc = mdb_txn_commit(txn);
        else mdb_txn_abort(txn);
    }
    CHECK(rc == 0, "raw put: %s", mdb_strerror(rc));
    mdb_env_close(env);
}

static void make_small(const char *p) {
    char err[256];
    dataset_meta_t m;
    meta_init(&m, 100);
    dataset_writer_t *w = NULL;
    dataset_writer_open(&w, p, &m, 1, err, sizeof err);
    uint32_t d[4] = {1, 2, 3, 4};
    dataset_writer_add(w, d, 4, 4, err, sizeof err);
    dataset_writer_add(w, d, 2, 2, err, sizeof err);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
}

static void test_damage(void) {
    char p[1200], err[256] = "";
    dataset_t *ds = NULL;
    path_of(p, sizeof p, "damaged");
    make_small(p);
    uint8_t key1[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    raw_put(p, "docs", key1, 8, "\x01\x00\x02", 3); /* odd byte count for u16 values */
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0, "%s", err);
    uint32_t out[8], len;
    if (ds) {
        int rc = dataset_doc_read(ds, 1, out, 8, &len);
        CHECK(rc == DATASET_EFORMAT, "odd-length value accepted");
        /* the line says what is wrong, not "not a dataset of ours (format, version or meta)" */
        CHECK(strstr(dataset_doc_error(ds, rc), "3 bytes, not a whole number of 2-byte tokens"), "%s", dataset_doc_error(ds, rc));
        CHECK(strcmp(dataset_doc_error(ds, DATASET_ERANGE), dataset_strerror(DATASET_ERANGE)) == 0, "in %s", __func__);
        CHECK(dataset_doc_read(ds, 0, out, 8, &len) == 0 && len == 4, "in %s", __func__);
    }
    dataset_close(&ds);

    uint8_t key9[8] = {0, 0, 0, 0, 0, 0, 0, 9};
    raw_put(p, "docs", key9, 8, "\x01\x00", 2); /* a third entry: count no longer matches meta */
    CHECK(dataset_open(&ds, p, err, sizeof err) == DATASET_EFORMAT && ds == NULL, "count mismatch accepted");

    path_of(p, sizeof p, "badmeta");
    make_small(p);
    raw_put(p, "meta", "info", 4, "\x81\xa6""format\xa3""xyz", 12); /* {"format":"xyz"} */
    CHECK(dataset_open(&ds, p, err, sizeof err) == DATASET_EFORMAT && ds == NULL, "foreign format accepted");
    CHECK(strstr(err, "format") != NULL, "%s", err);
    raw_put(p, "meta", "info", 4, "\xc1garbage", 8);
    CHECK(dataset_open(&ds, p, err, sizeof err) == DATASET_EFORMAT && ds == NULL, "garbage meta accepted");
}

/* Writes dataset `name` of 400 documents from doc_gen(seed, ...), vocabulary 1000; its path in
 * p, its data.mdb in file. 0, or -1 (with a failed check). */
static int write_400(const char *name, uint64_t seed, char *p, size_t pcap, char *file, size_t fcap) {
    char err[256] = "";
    path_of(p, pcap, name);
    snprintf(file, fcap, "%s/data.mdb", p);
    dataset_meta_t m;
    meta_init(&m, 1000);
    dataset_writer_t *w = NULL;
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == 0, "%s", err);
    if (!w) return -1;
    uint32_t buf[201];
    for (uint64_t i = 0; i < 400; i++) dataset_writer_add(w, buf, doc_gen(seed, i, 1000, 200, buf), 0, err, sizeof err);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    return 0;
}

/* Runs fn(arg, msg, cap) in a child, so that a SIGBUS there is one failed check, not a dead
 * test: fn fills msg (one line) and returns 0 when all went as it should. The line in got; the
 * child's wait status returned. */
static int in_child(int (*fn)(const char *arg, char *msg, size_t cap), const char *arg, char *got, size_t cap) {
    int fd[2];
    CHECK(pipe(fd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        char msg[600] = "";
        int rc = fn(arg, msg, sizeof msg);
        if (write(fd[1], msg, strlen(msg)) < 0) _exit(3);
        _exit(rc ? 1 : 0);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], got, cap - 1);
    got[n > 0 ? n : 0] = 0;
    close(fd[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    return ws;
}

/* The dataset at p opens, or is refused with DATASET_EFORMAT; opened, every document is read
 * (where the SIGBUS used to be). 0 when it was refused. */
static int open_cut(const char *p, char *msg, size_t cap) {
    dataset_t *ds = NULL;
    int rc = dataset_open(&ds, p, msg, cap);
    if (ds) {
        uint32_t out[201], len;
        for (uint64_t i = 0; i < 400; i++) dataset_doc_read(ds, i, out, 201, &len);
    }
    return rc == DATASET_EFORMAT && !ds ? 0 : 1;
}

/* A data.mdb cut short (a full disk, a partial copy) used to kill the reader with SIGBUS on
 * the first page past the end of the map; dataset_open must refuse it with a line instead.
 * Each cut runs in a child so that a regression is one failed check, not a dead test. */
static void test_truncated_file(void) {
    char p[1200], file[1300], err[256] = "";
    if (write_400("cut", 3, p, sizeof p, file, sizeof file)) return;
    struct stat st;
    CHECK(stat(file, &st) == 0 && st.st_size > 16 * 4096, "dataset too small to cut: %lld", (long long)st.st_size);
    off_t full = st.st_size;
    char *orig = malloc(full);
    FILE *f = fopen(file, "rb");
    CHECK(f && fread(orig, 1, full, f) == (size_t)full, "read %s", file);
    if (f) fclose(f);
    struct { off_t size; const char *want; } cuts[] = {
        {full / 2, "data.mdb is truncated ("}, {full - 8192, "data.mdb is truncated ("},
        {full - 1, "data.mdb is truncated ("}, {8192, "data.mdb is truncated (8192 bytes; its pages need"},
        {4096, "less than LMDB's two meta pages"}, {100, "less than LMDB's two meta pages"},
        {0, "data.mdb is empty (0 bytes)"},
    };
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        f = fopen(file, "wb");
        CHECK(f && fwrite(orig, 1, cuts[c].size, f) == (size_t)cuts[c].size, "write %s", file);
        if (f) fclose(f);
        char got[600] = "";
        int ws = in_child(open_cut, p, got, sizeof got);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "cut to %lld of %lld bytes: %s%s", (long long)cuts[c].size,
              (long long)full, WIFSIGNALED(ws) ? "killed by signal " : "not refused: ",
              WIFSIGNALED(ws) ? strsignal(WTERMSIG(ws)) : got);
        CHECK(strstr(got, cuts[c].want) && strstr(got, "rebuild it") && !strchr(got, '\n'), "cut to %lld: \"%s\"",
              (long long)cuts[c].size, got);
    }
    /* and the whole file opens again: the check does not refuse a good dataset */
    f = fopen(file, "wb");
    CHECK(f && fwrite(orig, 1, full, f) == (size_t)full, "write %s", file);
    if (f) fclose(f);
    dataset_t *ds = NULL;
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0, "restored: %s", err);
    dataset_close(&ds);
    free(orig);
}

/* The file cut AFTER dataset_open (another process truncates data.mdb under a running
 * loader): the open-time size check cannot see it, and a read of a mapped page past the new
 * end used to be a SIGBUS. Now every read fails with one line and the handle says it is
 * shrunk. In a child, so that a regression is one failed check, not a dead test. */
static int read_past_cut(const char *p, char *msg, size_t cap) {
    char file[1300];
    snprintf(file, sizeof file, "%s/data.mdb", p);
    dataset_t *ds = NULL;
    if (dataset_open(&ds, p, msg, cap)) return 2;
    uint32_t out[201], len, want[201];
    int bad = 0, first = -1, rc = 0;
    for (uint64_t i = 0; i < 400 && !bad; i++) /* every document reads before the cut */
        bad = dataset_doc_read(ds, i, out, 201, &len) || len != doc_gen(5, i, 1000, 200, want) ||
              memcmp(out, want, sizeof(uint32_t) * len);
    if (bad || truncate(file, 8192) != 0) return snprintf(msg, cap, "reads before the cut, or the cut, failed"), 3;
    for (uint64_t i = 0; i < 400; i++) { /* past the cut: an error, not a SIGBUS */
        rc = dataset_doc_read(ds, i, out, 201, &len);
        if (rc && first < 0) first = (int)i;
    }
    int rc_len = dataset_doc_len(ds, 0, &len); /* a shrunk handle refuses every read */
    snprintf(msg, cap, "%s", dataset_doc_error(ds, rc));
    dataset_close(&ds);
    return first >= 0 && rc == DATASET_EFORMAT && rc_len == DATASET_EFORMAT ? 0 : 1;
}

static void test_shrunk_after_open(void) {
    char p[1200], file[1300], got[600] = "";
    if (write_400("shrink", 5, p, sizeof p, file, sizeof file)) return;
    int ws = in_child(read_past_cut, p, got, sizeof got);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "reads after the cut: %s%d (%s)",
          WIFSIGNALED(ws) ? "killed by signal " : "exit ", WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws), got);
    CHECK(strstr(got, "/shrink/data.mdb shrank under the reader (now 8192 bytes; its pages need ") &&
          strstr(got, "rebuild it") && !strchr(got, '\n'), "\"%s\"", got);
}

/* An info map like the writer's, with the string fields given as raw bytes (len, ptr). */
static void put_info_strs(const char *p, const char *tok, size_t tn, const char *hash, size_t hn, const char *src, size_t sn) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 11);
    const char *keys[] = {"version", "vocab_size", "eot_id", "token_bytes", "n_docs", "n_tokens", "n_bytes"};
    uint64_t vals[] = {1, 100, 99, 2, 2, 6, 6};
    msgpack_pack_str(&pk, 6), msgpack_pack_str_body(&pk, "format", 6);
    msgpack_pack_str(&pk, 10), msgpack_pack_str_body(&pk, "ft-dataset", 10);
    for (int i = 0; i < 7; i++) {
        msgpack_pack_str(&pk, strlen(keys[i])), msgpack_pack_str_body(&pk, keys[i], strlen(keys[i]));
        msgpack_pack_uint64(&pk, vals[i]);
    }
    const char *sk[] = {"tokenizer", "tokenizer_hash", "source"}, *sv[] = {tok, hash, src};
    size_t sl[] = {tn, hn, sn};
    for (int i = 0; i < 3; i++) {
        msgpack_pack_str(&pk, strlen(sk[i])), msgpack_pack_str_body(&pk, sk[i], strlen(sk[i]));
        msgpack_pack_str(&pk, sl[i]), msgpack_pack_str_body(&pk, sv[i], sl[i]);
    }
    raw_put(p, "meta", "info", 4, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* The info strings travel in the loader's info reply (a MessagePack str) and in JSON: one that
 * is not UTF-8 used to pass open and fail far away (tokenizer info exited 1 with no word, the
 * loader answered every info_req with "could not encode the info"). */
static void test_info_utf8(void) {
    char p[1200], err[256] = "";
    dataset_t *ds = NULL;
    path_of(p, sizeof p, "utf8");
    make_small(p);
    put_info_strs(p, "test", 4, "abc123", 6, "caf\xc3\xa9 \xe2\x84\x96", 9); /* good UTF-8 still opens */
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0 && strcmp(dataset_meta(ds)->source, "caf\xc3\xa9 \xe2\x84\x96") == 0, "%s", err);
    dataset_close(&ds);
    struct { const char *field, *tok, *hash, *src; size_t tn, hn, sn; } bad[] = {
        {"tokenizer", "by\xfftes", "abc123", "x", 6, 6, 1},
        {"tokenizer_hash", "test", "ab\xc3", "x", 4, 3, 1},          /* cut inside a character */
        {"source", "test", "abc123", "a\xed\xa0\x80" "b", 4, 6, 5},      /* a surrogate */
        {"source", "test", "abc123", "a\0b", 4, 6, 3},                /* a NUL would cut it in C */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put_info_strs(p, bad[i].tok, bad[i].tn, bad[i].hash, bad[i].hn, bad[i].src, bad[i].sn);
        char want[100];
        snprintf(want, sizeof want, "field \"%s\" is not UTF-8 text", bad[i].field);
        CHECK(dataset_open(&ds, p, err, sizeof err) == DATASET_EFORMAT && ds == NULL && strstr(err, want), "%s: %s",
              bad[i].field, err);
        dataset_close(&ds);
    }
    /* the writer never writes one: source (file names: any bytes) is cleaned, a bad tokenizer
     * name refused */
    dataset_meta_t m;
    meta_init(&m, 100);
    snprintf(m.source, sizeof m.source, "in\xff.txt");
    dataset_writer_t *w = NULL;
    path_of(p, sizeof p, "utf8w");
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == 0, "%s", err);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0 && strcmp(dataset_meta(ds)->source, "in\xef\xbf\xbd.txt") == 0,
          "%s", ds ? dataset_meta(ds)->source : err);
    dataset_close(&ds);
    memset(m.source, 'a', sizeof m.source - 3); /* 253 'a', then a 3-byte character cut at 255 */
    memcpy(m.source + 253, "\xe2\x84\x96", 3);
    path_of(p, sizeof p, "utf8w2");
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == 0, "%s", err);
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    CHECK(dataset_open(&ds, p, err, sizeof err) == 0, "a source cut inside a character: %s", err);
    dataset_close(&ds);
    snprintf(m.tokenizer, sizeof m.tokenizer, "b\xffpe");
    path_of(p, sizeof p, "utf8w3");
    CHECK(dataset_writer_open(&w, p, &m, 0, err, sizeof err) == DATASET_EARG && w == NULL && strstr(err, "not UTF-8"), "%s", err);
}

int main(void) {
    const char *t = getenv("FT_TEST_TMP");
    snprintf(tmp, sizeof tmp, "%s/test_dataset.%d", t ? t : "/tmp", (int)getpid());
    mkdir(tmp, 0775);
    RUN(test_roundtrip_u16);
    RUN(test_roundtrip_u32);
    RUN(test_roundtrip_grows);
    RUN(test_truncated_and_range_reads);
    RUN(test_refusals);
    RUN(test_damage);
    RUN(test_truncated_file);
    RUN(test_shrunk_after_open);
    RUN(test_info_utf8);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_summary();
}
