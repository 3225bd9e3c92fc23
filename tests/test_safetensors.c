/* tests/test_safetensors.c: round trips, validation of hostile files, Python interop. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rng.h"
#include "model/safetensors.h"
#include "tests/check.h"

/* check.h passes "" as the format when CHECK has no message; gcc flags that under -Wall. */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

static char g_dir[512];

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static tensor_view_t view(const char *name, float *data, int ndim, int64_t d0, int64_t d1,
                          int64_t d2) {
    tensor_view_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.ndim = ndim;
    int64_t d[3] = {d0, d1, d2};
    for (int i = 0; i < ndim; i++) t.shape[i] = d[i];
    t.data = data;
    return t;
}

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *slurp(const char *p, long *n) {
    FILE *fp = fopen(p, "rb");
    if (!fp) return NULL;
    *n = file_size(p);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, fp) != (size_t)*n) { free(b); b = NULL; }
    fclose(fp);
    return b;
}

static void spit(const char *p, const void *b, long n) {
    FILE *fp = fopen(p, "wb");
    fwrite(b, 1, n, fp);
    fclose(fp);
}

/* Three tensors with awkward values (denormals, -0, NaN payload, inf) so "bit-exact" means it. */
static float g_a[6 * 5], g_b[7], g_c[1];
static tensor_view_t g_views[4];

static void make_fixture(const char *path) {
    rng_t r;
    rng_seed(&r, 1234);
    for (int i = 0; i < 30; i++) g_a[i] = rng_normal(&r);
    g_a[0] = -0.0f;
    g_a[1] = 1e-42f; /* denormal */
    uint32_t nan_bits = 0x7fc01234u;
    memcpy(&g_a[2], &nan_bits, 4);
    g_a[3] = 1.0f / 0.0f;
    for (int i = 0; i < 7; i++) g_b[i] = (float)i * 0.5f - 1.0f;
    g_c[0] = 3.25f;
    g_views[0] = view("model.layers.0.self_attn.q_proj.weight", g_a, 2, 6, 5, 0);
    g_views[1] = view("model.norm.weight", g_b, 1, 7, 0, 0);
    g_views[2] = view("scalar", g_c, 0, 0, 0, 0);
    g_views[3] = view("empty", NULL, 2, 0, 4, 0);
    const char *meta[] = {"format", "pt", "producer", "ft-test"};
    char err[256] = "";
    int rc = st_write(path, g_views, 4, meta, 2, err, sizeof err);
    CHECK(rc == 0, "%s", err);
}

static void test_round_trip(void) {
    char p[600], err[256] = "";
    path_in(p, sizeof p, "rt.safetensors");
    make_fixture(p);
    CHECK(file_size(p) > 8);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(access(tmp, F_OK) != 0, "temporary file left behind");
    st_file_t *f = NULL;
    int rc = st_open(&f, p, err, sizeof err);
    CHECK(rc == 0 && f, "%s", err);
    if (!f) return;
    CHECK(st_count(f) == 4);
    CHECK(st_has_checksum(f) == 1);
    CHECK(st_meta_get(f, "format") && strcmp(st_meta_get(f, "format"), "pt") == 0);
    CHECK(st_meta_get(f, "producer") && strcmp(st_meta_get(f, "producer"), "ft-test") == 0);
    CHECK(st_meta_get(f, "xxh3") && strlen(st_meta_get(f, "xxh3")) == 16);
    CHECK(st_meta_get(f, "nope") == NULL);
    CHECK(st_name(f, 4) == NULL && st_name(f, -1) == NULL);
    int seen = 0;
    for (int i = 0; i < st_count(f); i++)
        for (int j = 0; j < 4; j++) seen += strcmp(st_name(f, i), g_views[j].name) == 0;
    CHECK(seen == 4, "names listed: %d of 4", seen);
    for (int j = 0; j < 4; j++) {
        tensor_view_t v;
        rc = st_find(f, g_views[j].name, &v);
        CHECK(rc == 0, "find %s", g_views[j].name);
        if (rc) continue;
        CHECK(v.ndim == g_views[j].ndim);
        CHECK(memcmp(v.shape, g_views[j].shape, sizeof(int64_t) * v.ndim) == 0);
        int64_t n = tensor_numel(&v);
        CHECK(n == 0 || memcmp(v.data, g_views[j].data, n * 4) == 0, "data of %s differs", v.name);
        CHECK(n == 0 || ((uintptr_t)v.data & 3) == 0, "misaligned float*");
    }
    tensor_view_t v;
    CHECK(st_find(f, "missing", &v) == ST_ENOTFOUND);
    /* Views are copy-on-write: scribbling must not reach the file. */
    CHECK(st_find(f, "scalar", &v) == 0);
    v.data[0] = 99.0f;
    st_close(&f);
    CHECK(f == NULL);
    st_close(&f); /* idempotent on NULL */
    CHECK(st_open(&f, p, err, sizeof err) == 0, "%s", err);
    CHECK(f && st_find(f, "scalar", &v) == 0 && v.data[0] == 3.25f);
    st_close(&f);
}

static void test_read_into(void) {
    char p[600], err[256] = "";
    path_in(p, sizeof p, "rt.safetensors");
    st_file_t *f = NULL;
    CHECK(st_open(&f, p, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    float a[30], b[7];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    tensor_view_t dst[3] = {view("model.layers.0.self_attn.q_proj.weight", a, 2, 6, 5, 0),
                            view("model.norm.weight", b, 1, 7, 0, 0),
                            view("not.there", b, 1, 7, 0, 0)};
    int rc = st_read_into(f, dst, 2, 1, err, sizeof err);
    CHECK(rc == 2, "rc=%d %s", rc, err);
    CHECK(memcmp(a, g_a, sizeof a) == 0 && memcmp(b, g_b, sizeof b) == 0);
    rc = st_read_into(f, dst, 3, 1, err, sizeof err);
    CHECK(rc == ST_ENOTFOUND && strstr(err, "not.there") && strstr(err, p), "rc=%d %s", rc, err);
    rc = st_read_into(f, dst, 3, 0, err, sizeof err);
    CHECK(rc == 2, "non-strict skips missing: rc=%d", rc);
    tensor_view_t wrong = view("model.layers.0.self_attn.q_proj.weight", a, 2, 5, 6, 0);
    rc = st_read_into(f, &wrong, 1, 1, err, sizeof err);
    CHECK(rc == ST_ESHAPE && strstr(err, "[6,5]") && strstr(err, "[5,6]"), "rc=%d %s", rc, err);
    tensor_view_t flat = view("model.layers.0.self_attn.q_proj.weight", a, 1, 30, 0, 0);
    CHECK(st_read_into(f, &flat, 1, 1, err, sizeof err) == ST_ESHAPE, "same numel, other rank");
    st_close(&f);
}

static void test_write_errors(void) {
    char p[600], err[256] = "";
    path_in(p, sizeof p, "bad.safetensors");
    float x[2] = {1, 2};
    tensor_view_t dup[2] = {view("w", x, 1, 2, 0, 0), view("w", x, 1, 2, 0, 0)};
    CHECK(st_write(p, dup, 2, NULL, 0, err, sizeof err) == ST_EARG && strstr(err, "duplicate"), "%s", err);
    const char *meta[] = {"xxh3", "0"};
    CHECK(st_write(p, dup, 1, meta, 1, err, sizeof err) == ST_EARG && strstr(err, "reserved"), "%s", err);
    tensor_view_t noname = view("", x, 1, 2, 0, 0);
    CHECK(st_write(p, &noname, 1, NULL, 0, err, sizeof err) == ST_EARG);
    tensor_view_t nodata = view("w", NULL, 1, 2, 0, 0);
    CHECK(st_write(p, &nodata, 1, NULL, 0, err, sizeof err) == ST_EARG);
    CHECK(access(p, F_OK) != 0, "failed write left a file");
    CHECK(st_write("/nonexistent-dir/x.safetensors", dup, 1, NULL, 0, err, sizeof err) == ST_EIO &&
          strstr(err, "/nonexistent-dir/x.safetensors.tmp"), "%s", err);
    /* Prefixed groups: the optimizer's "exp_avg." names. */
    st_group_t g[2] = {{"exp_avg.", dup, 1}, {"exp_avg_sq.", dup, 1}};
    CHECK(st_write_groups(p, g, 2, NULL, 0, err, sizeof err) == 0, "%s", err);
    st_file_t *f = NULL;
    CHECK(st_open(&f, p, err, sizeof err) == 0, "%s", err);
    tensor_view_t v;
    CHECK(f && st_find(f, "exp_avg.w", &v) == 0 && st_find(f, "exp_avg_sq.w", &v) == 0);
    float y[2] = {0, 0};
    tensor_view_t dst = view("w", y, 1, 2, 0, 0);
    CHECK(f && st_read_into_prefixed(f, "exp_avg_sq.", &dst, 1, 1, err, sizeof err) == 1 && y[1] == 2.0f);
    st_close(&f);
}

/* Every 7th truncation point of a valid file must fail cleanly with the path in the message. */
static void test_truncation(void) {
    char p[600], q[600], err[512];
    path_in(p, sizeof p, "rt.safetensors");
    path_in(q, sizeof q, "trunc.safetensors");
    long n;
    unsigned char *b = slurp(p, &n);
    CHECK(b != NULL);
    if (!b) return;
    int failures = 0, tries = 0;
    for (long cut = 0; cut < n; cut += 7) {
        spit(q, b, cut);
        st_file_t *f = NULL;
        err[0] = 0;
        int rc = st_open(&f, q, err, sizeof err);
        tries++;
        if (rc < 0 && f == NULL && strstr(err, q) && !strchr(err, '\n')) failures++;
        else fprintf(stderr, "  cut at %ld: rc=%d err=%s\n", cut, rc, err);
        st_close(&f);
    }
    CHECK(failures == tries, "%d of %d truncations rejected", failures, tries);
    /* Extra bytes at the end are caught too (the tensors must tile the data section). */
    unsigned char *g = malloc(n + 3);
    memcpy(g, b, n);
    memset(g + n, 0, 3);
    spit(q, g, n + 3);
    st_file_t *f = NULL;
    CHECK(st_open(&f, q, err, sizeof err) == ST_EFORMAT, "%s", err);
    free(g);
    free(b);
}

/* A flipped byte in the data section is caught by the xxh3; one in the size prefix by the
 * size checks; one in the header JSON mostly by the parser (but a flip may leave valid JSON,
 * e.g. a space turned into a tab, or a changed letter in a name: those we only require not
 * to crash; the checkpoint MANIFEST hashes whole files and catches them). */
static void test_bit_flips(void) {
    char p[600], q[600], err[512];
    path_in(p, sizeof p, "rt.safetensors");
    path_in(q, sizeof q, "flip.safetensors");
    long n;
    unsigned char *b = slurp(p, &n);
    if (!b) { CHECK(0, "cannot read fixture"); return; }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)b[i] << (8 * i);
    long data0 = 8 + (long)hlen;
    rng_t r;
    rng_seed(&r, 99);
    int data_caught = 0, data_tries = 0, hdr_caught = 0, hdr_tries = 0, checksum_msgs = 0;
    for (int k = 0; k < 300; k++) {
        long at = (long)rng_below(&r, (uint64_t)n);
        unsigned char mask = (unsigned char)(1 + rng_below(&r, 255));
        b[at] ^= mask;
        spit(q, b, n);
        b[at] ^= mask;
        st_file_t *f = NULL;
        err[0] = 0;
        int rc = st_open(&f, q, err, sizeof err);
        if (at >= data0) {
            data_tries++;
            data_caught += rc < 0;
            checksum_msgs += rc == ST_ECHECKSUM && strstr(err, "checksum") != NULL;
        } else if (at < 8) {
            CHECK(rc < 0, "flip in the size prefix at %ld accepted", at);
        } else {
            hdr_tries++;
            hdr_caught += rc < 0;
        }
        CHECK((rc < 0) == (f == NULL));
        st_close(&f);
    }
    CHECK(data_tries > 0 && data_caught == data_tries, "%d/%d data flips caught", data_caught, data_tries);
    CHECK(checksum_msgs == data_tries, "checksum message on %d/%d", checksum_msgs, data_tries);
    fprintf(stderr, "  header flips rejected: %d of %d (rest left valid JSON)\n", hdr_caught, hdr_tries);
    CHECK(hdr_caught * 2 > hdr_tries, "most header flips must be caught: %d/%d", hdr_caught, hdr_tries);
    free(b);
}

static void test_garbage(void) {
    char q[600], err[512];
    path_in(q, sizeof q, "garbage.safetensors");
    rng_t r;
    rng_seed(&r, 7);
    unsigned char buf[4096];
    int rejected = 0;
    for (int k = 0; k < 200; k++) {
        int n = (int)rng_below(&r, sizeof buf);
        for (int i = 0; i < n; i++) buf[i] = (unsigned char)rng_u64(&r);
        /* Half the time give it a plausible header size so the JSON parser sees the junk. */
        if (k % 2 && n >= 8) {
            uint64_t h = (uint64_t)rng_below(&r, (uint64_t)(n - 8 + 1));
            for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(h >> (8 * i));
        }
        spit(q, buf, n);
        st_file_t *f = NULL;
        rejected += st_open(&f, q, err, sizeof err) < 0;
        st_close(&f);
    }
    CHECK(rejected == 200, "%d of 200 garbage files rejected", rejected);
    st_file_t *f = NULL;
    CHECK(st_open(&f, g_dir, err, sizeof err) == ST_EIO, "a directory: %s", err);
    path_in(q, sizeof q, "does-not-exist");
    CHECK(st_open(&f, q, err, sizeof err) == ST_EIO && strstr(err, "does-not-exist"), "%s", err);
}

/* Hand-made headers, each breaking one rule. */
static int open_header(const char *json, int data_bytes, char *err, size_t errlen) {
    char q[600];
    path_in(q, sizeof q, "crafted.safetensors");
    size_t hl = strlen(json);
    unsigned char *b = calloc(1, 8 + hl + data_bytes + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, json, hl);
    spit(q, b, 8 + hl + data_bytes);
    free(b);
    st_file_t *f = NULL;
    int rc = st_open(&f, q, err, errlen);
    st_close(&f);
    return rc;
}

static void test_crafted(void) {
    char err[512];
    struct { const char *json; int bytes; int want; const char *msg; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, NULL},
        {"{}", 0, 0, NULL},
        {"[1,2]", 0, ST_EFORMAT, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, ST_EFORMAT, "unsupported dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, ST_EFORMAT, "bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, ST_EFORMAT, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, ST_EFORMAT, "beyond"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, ST_EFORMAT, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, ST_EFORMAT, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, ST_EFORMAT, "JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, ST_EFORMAT, "dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}", 4, ST_EFORMAT, "overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, ST_EFORMAT, "begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.0,8]}}", 8, ST_EFORMAT, "data_offsets"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, ST_EFORMAT, "dtype"},
        {"{\"a\":[1]}", 0, ST_EFORMAT, "not an object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, ST_EFORMAT, "not a string"},
        {"{\"__metadata__\":{\"xxh3\":\"zz\"}}", 0, ST_EFORMAT, "hex"},
        {"{\"__metadata__\":{\"xxh3\":\"0000000000000000\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, ST_ECHECKSUM, "checksum"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} xx", 8, ST_EFORMAT, "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        int rc = open_header(cases[i].json, cases[i].bytes, err, sizeof err);
        CHECK(rc == cases[i].want, "case %zu: rc=%d want %d (%s)", i, rc, cases[i].want, err);
        if (cases[i].msg)
            CHECK(strstr(err, cases[i].msg) && strstr(err, "crafted.safetensors"),
                  "case %zu: message \"%s\" lacks \"%s\"", i, err, cases[i].msg);
    }
    /* Header size larger than the file, and absurdly large. */
    char q[600];
    path_in(q, sizeof q, "crafted.safetensors");
    unsigned char b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    spit(q, b, 10);
    st_file_t *f = NULL;
    CHECK(st_open(&f, q, err, sizeof err) == ST_EFORMAT && strstr(err, "header size"), "%s", err);
}

/* Mixed dtypes from a foreign writer: a U8 tensor first leaves the F32 one misaligned. */
static void test_foreign_dtypes(void) {
    char q[600], err[512];
    path_in(q, sizeof q, "mixed.safetensors");
    const char *js = "{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                     "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]},"
                     "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[11,19]}}";
    size_t hl = strlen(js);
    while ((8 + hl) % 8) hl++; /* keep the data section 8-aligned so only "f" is off */
    unsigned char *b = calloc(1, 8 + hl + 19);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memset(b + 8, ' ', hl);
    memcpy(b + 8, js, strlen(js));
    unsigned char *d = b + 8 + hl;
    d[0] = 1, d[1] = 2, d[2] = 3;
    float fv[2] = {1.5f, -2.5f};
    memcpy(d + 3, fv, 8);
    int64_t iv = -42;
    memcpy(d + 11, &iv, 8);
    spit(q, b, 8 + hl + 19);
    free(b);
    st_file_t *f = NULL;
    CHECK(st_open(&f, q, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    CHECK(st_has_checksum(f) == 0);
    tensor_view_t v;
    CHECK(st_find(f, "u", &v) == ST_EDTYPE);
    CHECK(st_find(f, "f", &v) == 0 && ((uintptr_t)v.data & 3) == 0 && v.data[0] == 1.5f && v.data[1] == -2.5f);
    st_tensor_t r;
    CHECK(st_find_raw(f, "i", &r) == 0 && strcmp(r.dtype, "I64") == 0 && r.nbytes == 8);
    int64_t got = 0;
    if (r.data) memcpy(&got, r.data, 8);
    CHECK(got == -42);
    CHECK(st_find_raw(f, "u", &r) == 0 && r.elem_size == 1 && ((const unsigned char *)r.data)[2] == 3);
    float two[2];
    tensor_view_t dst = view("u", two, 1, 3, 0, 0);
    CHECK(st_read_into(f, &dst, 1, 1, err, sizeof err) == ST_EDTYPE && strstr(err, "U8"), "%s", err);
    st_close(&f);
}

/* The real format, proven against an independent reader/writer: numpy + json in Python. */
static const char *PY =
    "import json, struct, sys, numpy as np\n"
    "def read(p):\n"
    "    b = open(p, 'rb').read()\n"
    "    n = struct.unpack('<Q', b[:8])[0]\n"
    "    assert n % 8 == 0, 'header not padded to 8'\n"
    "    h = json.loads(b[8:8+n])\n"
    "    data = b[8+n:]\n"
    "    out = {}\n"
    "    for k, v in h.items():\n"
    "        if k == '__metadata__': continue\n"
    "        s, e = v['data_offsets']\n"
    "        out[k] = np.frombuffer(data[s:e], dtype='<f4').reshape(v['shape'])\n"
    "    return h.get('__metadata__', {}), out\n"
    "meta, t = read(sys.argv[1])\n"
    "assert meta['producer'] == 'ft-test', meta\n"
    "a = t['model.layers.0.self_attn.q_proj.weight']\n"
    "assert a.shape == (6, 5) and t['empty'].shape == (0, 4) and t['scalar'].shape == ()\n"
    "assert np.array_equal(t['model.norm.weight'], np.arange(7, dtype=np.float32) * 0.5 - 1)\n"
    "assert float(t['scalar']) == 3.25 and np.isinf(a[0, 3]) and np.signbit(a[0, 0])\n"
    "assert a.view(np.uint32)[0, 2] == 0x7fc01234\n"
    "# write one back, in the shape and order the reference library would\n"
    "w = np.arange(12, dtype=np.float32).reshape(3, 4) / 8\n"
    "ids = np.array([5, -7], dtype=np.int64)\n"
    "h = {'__metadata__': {'format': 'np'},\n"
    "     'ids': {'dtype': 'I64', 'shape': [2], 'data_offsets': [0, 16]},\n"
    "     'w': {'dtype': 'F32', 'shape': [3, 4], 'data_offsets': [16, 64]}}\n"
    "hb = json.dumps(h, separators=(',', ':')).encode()\n"
    "hb += b' ' * (-len(hb) % 8)\n"
    "open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + ids.tobytes() + w.tobytes())\n"
    "print('python ok')\n";

static void test_python_interop(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "  /usr/bin/python3 missing: interop not tested\n");
        return;
    }
    char py[600], in[600], out[600], cmd[2200], err[512];
    path_in(py, sizeof py, "interop.py");
    path_in(in, sizeof in, "rt.safetensors");
    path_in(out, sizeof out, "from_python.safetensors");
    spit(py, PY, (long)strlen(PY));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %s 1>&2", py, in, out);
    int rc = system(cmd);
    CHECK(rc == 0, "python could not read our file or write its own (rc=%d)", rc);
    if (rc) return;
    st_file_t *f = NULL;
    CHECK(st_open(&f, out, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    CHECK(st_count(f) == 2 && st_meta_get(f, "format") && strcmp(st_meta_get(f, "format"), "np") == 0);
    float w[12];
    tensor_view_t dst = view("w", w, 2, 3, 4, 0);
    CHECK(st_read_into(f, &dst, 1, 1, err, sizeof err) == 1, "%s", err);
    int same = 1;
    for (int i = 0; i < 12; i++) same &= w[i] == (float)i / 8; /* exact: i/8 is a dyadic float */
    CHECK(same, "values written by numpy differ");
    st_tensor_t r;
    int64_t ids[2] = {0, 0};
    CHECK(st_find_raw(f, "ids", &r) == 0 && r.nbytes == 16);
    if (r.nbytes == 16) memcpy(ids, r.data, 16);
    CHECK(ids[0] == 5 && ids[1] == -7);
    st_close(&f);
}

int main(void) {
    const char *base = getenv("FT_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/st.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror(g_dir);
        return 1;
    }
    RUN(test_round_trip);
    RUN(test_read_into);
    RUN(test_write_errors);
    RUN(test_truncation);
    RUN(test_bit_flips);
    RUN(test_garbage);
    RUN(test_crafted);
    RUN(test_foreign_dtypes);
    RUN(test_python_interop);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (!getenv("FT_KEEP_TMP") && system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", g_dir);
    return check_summary();
}
