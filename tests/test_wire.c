/* tests/test_wire.c: the wire codec (bus/wire.h): round trips of every message type at
 * typical, empty and maximal sizes, and the strict decoder's answer to every kind of bad
 * frame (truncation at each byte, version, type, missing/mistyped/duplicate fields,
 * trailing bytes, size limits, token-length mismatch). Bad frames are made by re-packing a
 * valid encoding with one key dropped, replaced or repeated, so each case differs from a
 * good frame in exactly one way. */
#include <jansson.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "bus/utf8.h"
#include "bus/wire.h"
#include "bus/wire_schema.h"
#include "tests/check.h"

/* check.h's CHECK(cond) with no message expands to fprintf(stderr, ""), which -Wall flags */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

/* ---- sample messages ------------------------------------------------------------------ */

enum { V_TYPICAL, V_EMPTY, V_MAX, V_COUNT };

static char *str_of(int variant, const char *typical) {
    if (variant == V_EMPTY) return strdup("");
    if (variant == V_MAX) {
        char *s = malloc(WIRE_MAX_STR + 1);
        memset(s, 'x', WIRE_MAX_STR);
        s[WIRE_MAX_STR] = 0;
        return s;
    }
    return strdup(typical);
}

static void name_of(int variant, char *out, const char *typical) {
    memset(out, 0, WIRE_NAME_LEN);
    if (variant == V_MAX) memset(out, 'n', WIRE_NAME_LEN - 1);
    else if (variant == V_TYPICAL) strcpy(out, typical);
}

static void fill_values(int variant, wire_kv_t *kv, uint32_t *n) {
    *n = 0;
    if (variant == V_EMPTY) return;
    int count = variant == V_MAX ? WIRE_MAX_KV : 3;
    for (int i = 0; i < count; i++) {
        char nm[WIRE_NAME_LEN];
        snprintf(nm, sizeof nm, variant == V_MAX ? "value_%040d" : "v%d", i);
        CHECK(wire_kv_add(kv, n, nm, i * 0.25 - 1.0 / 3.0) == 0);
    }
    if (variant == V_MAX) CHECK(wire_kv_add(kv, n, "one_more", 1) == WIRE_ERR_OVERSIZE);
}

static uint64_t u64_of(int variant, uint64_t typical) {
    return variant == V_EMPTY ? 0 : variant == V_MAX ? UINT64_MAX : typical;
}
static uint32_t u32_of(int variant, uint32_t typical) {
    return variant == V_EMPTY ? 0 : variant == V_MAX ? UINT32_MAX : typical;
}

static void ckpt_fill(msg_ckpt_t *c, int variant, int i) {
    char run[16];
    snprintf(run, sizeof run, "run%d", i);
    name_of(variant, c->run, run);
    c->step = u64_of(variant, 1000 + i);
    c->time = 1.7e9 + i;
    c->path = str_of(variant, "/ckpt/run/step1000");
    c->model = variant == V_EMPTY ? NULL : str_of(variant, "free"); /* NULL travels as nil */
}

/* A message of type t with every field set; variants cover empty and maximal sizes. */
static void sample(msg_type t, int variant, wire_msg_t *m) {
    memset(m, 0, sizeof *m);
    m->type = t;
    switch (t) {
    case MSG_BATCH_REQ: {
        msg_batch_req_t *r = &m->u.batch_req;
        r->req_id = u64_of(variant, 7), r->seed = u64_of(variant, 1234);
        r->epoch = u64_of(variant, 2), r->step = u64_of(variant, 99);
        r->rank = u32_of(variant, 1), r->world = u32_of(variant, 4);
        r->B = u32_of(variant, 8), r->T = u32_of(variant, 128);
        r->layout = variant == V_MAX ? WIRE_PAD : WIRE_PACK;
        r->split = variant == V_MAX ? WIRE_VAL : WIRE_TRAIN;
        break;
    }
    case MSG_BATCH: {
        msg_batch_t *b = &m->u.batch;
        b->req_id = u64_of(variant, 7), b->seed = 5, b->epoch = 1, b->step = u64_of(variant, 3);
        b->rank = 0, b->world = 1, b->layout = WIRE_PAD, b->split = WIRE_VAL;
        b->steps_per_epoch = u64_of(variant, 1000);
        /* max: a 4 MiB token array, large enough to exercise bin32 */
        b->B = variant == V_EMPTY ? 0 : variant == V_MAX ? 64 : 3;
        b->T = variant == V_EMPTY ? 0 : variant == V_MAX ? 16383 : 5;
        size_t n = (size_t)b->B * (b->T + 1);
        b->tokens = malloc(n * 4 + 4);
        for (size_t i = 0; i < n; i++) b->tokens[i] = (uint32_t)(i * 2654435761u);
        if (variant != V_EMPTY) {
            b->mask = malloc((size_t)b->B * b->T);
            for (size_t i = 0; i < (size_t)b->B * b->T; i++) b->mask[i] = (uint8_t)(i % 3 != 0);
        }
        break;
    }
    case MSG_INFO_REQ:
        m->u.info_req.req_id = u64_of(variant, 3), m->u.info_req.world = u32_of(variant, 2);
        m->u.info_req.B = u32_of(variant, 4), m->u.info_req.T = u32_of(variant, 64);
        m->u.info_req.layout = WIRE_PAD, m->u.info_req.split = WIRE_VAL;
        break;
    case MSG_INFO: {
        msg_info_t *f = &m->u.info;
        f->req_id = u64_of(variant, 3), f->vocab_size = u32_of(variant, 50257);
        f->eot_id = u32_of(variant, 50256), f->n_docs = u64_of(variant, 1000);
        f->n_tokens = u64_of(variant, 123456), f->n_bytes = u64_of(variant, 654321);
        f->steps_per_epoch = u64_of(variant, 42);
        f->tokenizer = str_of(variant, "gpt2");
        f->tokenizer_hash = str_of(variant, "ab12cd34");
        f->dataset = str_of(variant, "/data/brown.lmdb");
        break;
    }
    case MSG_ERROR:
        m->u.error.req_id = u64_of(variant, 9);
        m->u.error.code = variant == V_MAX ? INT32_MIN : variant == V_EMPTY ? 0 : -3;
        m->u.error.message = str_of(variant, "B too large");
        break;
    case MSG_METRICS:
        name_of(variant, m->u.metrics.run, "brown1");
        m->u.metrics.step = u64_of(variant, 100), m->u.metrics.time = 1.7e9 + 0.5;
        fill_values(variant, m->u.metrics.values, &m->u.metrics.n);
        break;
    case MSG_CKPT:
        ckpt_fill(&m->u.ckpt, variant, 0);
        break;
    case MSG_CKPT_INDEX: {
        uint32_t n = variant == V_EMPTY ? 0 : variant == V_MAX ? 300 : 2;
        m->u.ckpt_index.n = n;
        m->u.ckpt_index.items = n ? calloc(n, sizeof(msg_ckpt_t)) : NULL;
        for (uint32_t i = 0; i < n; i++)
            ckpt_fill(&m->u.ckpt_index.items[i], variant == V_MAX ? V_TYPICAL : variant, (int)i);
        break;
    }
    case MSG_EVAL:
        name_of(variant, m->u.eval.run, "brown1");
        name_of(variant, m->u.eval.task, "val_loss");
        m->u.eval.step = u64_of(variant, 200), m->u.eval.time = -0.0;
        m->u.eval.ckpt = str_of(variant, "/ckpt/x");
        fill_values(variant, m->u.eval.values, &m->u.eval.n);
        break;
    case MSG_LOADER:
        name_of(variant, m->u.loader.name, "l0");
        m->u.loader.endpoint = str_of(variant, "tcp://127.0.0.1:5700");
        m->u.loader.dataset = str_of(variant, "/data/x.lmdb");
        m->u.loader.pid = u64_of(variant, 4242), m->u.loader.served = u64_of(variant, 17);
        break;
    case MSG_GEN_REQ: {
        msg_gen_req_t *g = &m->u.gen_req;
        g->req_id = u64_of(variant, 11), g->prompt = str_of(variant, "K>");
        g->max_new = u32_of(variant, 64), g->temperature = 0.8, g->top_k = u32_of(variant, 40);
        g->top_p = 0.9, g->seed = u64_of(variant, 7), g->latent = str_of(variant, "shared");
        g->index = u32_of(variant, 3), g->group = u32_of(variant, 5), g->flags = u32_of(variant, 1);
        g->deadline_ms = u32_of(variant, 250), g->stream = variant != V_EMPTY;
        break;
    }
    case MSG_GEN_PART:
        m->u.gen_part.req_id = u64_of(variant, 11), m->u.gen_part.text = str_of(variant, "so far");
        m->u.gen_part.n_tokens = u32_of(variant, 6);
        break;
    case MSG_GEN_CANCEL:
        m->u.gen_cancel.req_id = u64_of(variant, 11);
        break;
    case MSG_LOG:
        name_of(variant, m->u.log.program, "trainer");
        m->u.log.line = str_of(variant, "step 10 loss 3.2 \"quoted\" \\ and \t tab");
        break;
    case MSG_STAGE:
        name_of(variant, m->u.stage.program, "evaluator");
        name_of(variant, m->u.stage.name, "val-4242");
        name_of(variant, m->u.stage.run, "brown1");
        m->u.stage.pid = u64_of(variant, 4242), m->u.stage.done = u64_of(variant, 3);
        m->u.stage.endpoint = str_of(variant, "ipc:///tmp/s0");
        m->u.stage.state = str_of(variant, "evaluating ckpt-00000400");
        m->u.stage.bye = variant == V_MAX;
        break;
    default: break;
    }
}

/* ---- frame surgery -------------------------------------------------------------------- */

typedef enum { OP_DROP, OP_REPLACE, OP_DUP } op_t;

/* Re-packs the valid frame buf with key `key` dropped, its value replaced by the msgpack
 * bytes `val` (OP_REPLACE), or repeated (OP_DUP). Returns a malloc'ed frame. */
static void *surgery(const void *buf, size_t len, const char *key, op_t op, const void *val,
                     size_t vlen, size_t *out_len) {
    msgpack_unpacked u, uv;
    msgpack_unpacked_init(&u);
    msgpack_unpacked_init(&uv);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS);
    if (op == OP_REPLACE) {
        off = 0;
        CHECK(msgpack_unpack_next(&uv, val, vlen, &off) == MSGPACK_UNPACK_SUCCESS);
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_object_map *mp = &u.data.via.map;
    uint32_t n = mp->size;
    int found = 0;
    for (uint32_t i = 0; i < mp->size; i++) {
        const msgpack_object *k = &mp->ptr[i].key;
        if (k->via.str.size == strlen(key) && !memcmp(k->via.str.ptr, key, strlen(key))) found = 1;
    }
    CHECK(found, "key %s not in frame", key);
    msgpack_pack_map(&pk, n + (op == OP_DUP) - (op == OP_DROP));
    for (uint32_t i = 0; i < mp->size; i++) {
        const msgpack_object *k = &mp->ptr[i].key;
        int hit = k->via.str.size == strlen(key) && !memcmp(k->via.str.ptr, key, strlen(key));
        if (hit && op == OP_DROP) continue;
        msgpack_pack_object(&pk, *k);
        msgpack_pack_object(&pk, hit && op == OP_REPLACE ? uv.data : mp->ptr[i].val);
        if (hit && op == OP_DUP) {
            msgpack_pack_object(&pk, *k);
            msgpack_pack_object(&pk, mp->ptr[i].val);
        }
    }
    msgpack_unpacked_destroy(&u);
    msgpack_unpacked_destroy(&uv);
    *out_len = sb.size;
    return msgpack_sbuffer_release(&sb);
}

/* The msgpack bytes of one small value, for OP_REPLACE. */
typedef struct {
    char b[64];
    size_t n;
} mp_val_t;

static int mp_val_write(void *data, const char *buf, size_t len) {
    mp_val_t *v = data;
    if (v->n + len > sizeof v->b) return -1;
    memcpy(v->b + v->n, buf, len);
    v->n += len;
    return 0;
}

static mp_val_t mp_str(const char *s) {
    mp_val_t v = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &v, mp_val_write);
    msgpack_pack_str(&pk, strlen(s));
    msgpack_pack_str_body(&pk, s, strlen(s));
    return v;
}
static mp_val_t mp_int(int64_t x) {
    mp_val_t v = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &v, mp_val_write);
    msgpack_pack_int64(&pk, x);
    return v;
}
static mp_val_t mp_uint(uint64_t x) {
    mp_val_t v = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &v, mp_val_write);
    msgpack_pack_uint64(&pk, x);
    return v;
}
static mp_val_t mp_float(float x) {
    mp_val_t v = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &v, mp_val_write);
    msgpack_pack_float(&pk, x);
    return v;
}
static mp_val_t mp_bin(size_t n) {
    mp_val_t v = {.n = 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &v, mp_val_write);
    msgpack_pack_bin(&pk, n);
    char zeros[48] = {0};
    msgpack_pack_bin_body(&pk, zeros, n);
    return v;
}

/* Decode of the valid frame with key's value replaced by v; returns the status. */
static int decode_replaced(const void *buf, size_t len, const char *key, mp_val_t v,
                           char *err, size_t errlen) {
    size_t n;
    void *f = surgery(buf, len, key, OP_REPLACE, v.b, v.n, &n);
    wire_msg_t m;
    int rc = wire_decode(f, n, &m, err, errlen);
    wire_msg_free(&m);
    free(f);
    return rc;
}

/* ---- cases ---------------------------------------------------------------------------- */

static void test_round_trip_all_types(void) {
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++) {
        for (int variant = 0; variant < V_COUNT; variant++) {
            wire_msg_t m, d;
            sample((msg_type)t, variant, &m);
            void *buf = NULL;
            size_t len = 0;
            int rc = wire_encode(&m, &buf, &len);
            CHECK(rc == 0, "%s/%d encode: %s", wire_type_name(t), variant, wire_strerror(rc));
            char err[256];
            rc = wire_decode(buf, len, &d, err, sizeof err);
            CHECK(rc == 0, "%s/%d decode: %s", wire_type_name(t), variant, err);
            CHECK(d.type == (msg_type)t);
            CHECK(wire_msg_equal(&m, &d), "%s/%d differs after the round trip",
                  wire_type_name(t), variant);
            /* and as a bus event */
            void *fr = NULL;
            size_t fl = 0;
            char topic[64];
            wire_msg_t e;
            CHECK(wire_event_pack("metrics/brown1", &m, &fr, &fl) == 0);
            CHECK(wire_event_unpack(fr, fl, topic, sizeof topic, &e, err, sizeof err) == 0, "%s",
                  err);
            CHECK(strcmp(topic, "metrics/brown1") == 0);
            CHECK(wire_msg_equal(&m, &e));
            free(fr);
            wire_msg_free(&e);
            free(buf);
            wire_msg_free(&d);
            CHECK(d.type == MSG_NONE); /* wire_msg_free zeroes */
            wire_msg_free(&m);
        }
    }
}

static void test_equal_detects_differences(void) {
    /* guards the round-trip test: equality must not be trivially true */
    wire_msg_t a, b;
    sample(MSG_BATCH, V_TYPICAL, &a);
    sample(MSG_BATCH, V_TYPICAL, &b);
    CHECK(wire_msg_equal(&a, &b));
    b.u.batch.tokens[5] ^= 1;
    CHECK(!wire_msg_equal(&a, &b));
    b.u.batch.tokens[5] ^= 1;
    b.u.batch.mask[2] ^= 1;
    CHECK(!wire_msg_equal(&a, &b));
    wire_msg_free(&a);
    wire_msg_free(&b);
    sample(MSG_METRICS, V_TYPICAL, &a);
    sample(MSG_METRICS, V_TYPICAL, &b);
    b.u.metrics.values[1].value += 1e-12;
    CHECK(!wire_msg_equal(&a, &b));
    sample(MSG_CKPT, V_TYPICAL, &a);
    sample(MSG_CKPT, V_TYPICAL, &b);
    b.u.ckpt.path[0] = 'X';
    CHECK(!wire_msg_equal(&a, &b));
    wire_msg_free(&a);
    wire_msg_free(&b);
}

static void test_tokens_little_endian(void) {
    wire_msg_t m;
    sample(MSG_BATCH, V_TYPICAL, &m);
    m.u.batch.tokens[0] = 0x01020304u;
    void *buf;
    size_t len;
    CHECK(wire_encode(&m, &buf, &len) == 0);
    const uint8_t pat[4] = {0x04, 0x03, 0x02, 0x01};
    CHECK(memmem(buf, len, pat, 4) != NULL, "token bytes not little-endian on the wire");
    free(buf);
    wire_msg_free(&m);
}

static void test_truncated_every_offset(void) {
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++) {
        wire_msg_t m;
        sample((msg_type)t, V_TYPICAL, &m);
        void *buf;
        size_t len;
        CHECK(wire_encode(&m, &buf, &len) == 0);
        int bad = 0;
        for (size_t k = 0; k < len; k++) {
            /* a private copy of exactly k bytes, so ASan sees any read past the end */
            void *cut = malloc(k ? k : 1);
            memcpy(cut, buf, k);
            wire_msg_t d;
            char err[128];
            int rc = wire_decode(cut, k, &d, err, sizeof err);
            if (rc != WIRE_ERR_MALFORMED) bad++;
            CHECK(d.type == MSG_NONE);
            free(cut);
        }
        CHECK(bad == 0, "%s: %d truncations not reported as malformed", wire_type_name(t), bad);
        free(buf);
        wire_msg_free(&m);
    }
}

static void test_version_and_type(void) {
    wire_msg_t m, d;
    sample(MSG_LOG, V_TYPICAL, &m);
    void *buf;
    size_t len;
    char err[128];
    CHECK(wire_encode(&m, &buf, &len) == 0);
    CHECK(decode_replaced(buf, len, "v", mp_uint(2), err, sizeof err) == WIRE_ERR_VERSION);
    CHECK(decode_replaced(buf, len, "v", mp_str("1"), err, sizeof err) == WIRE_ERR_VERSION);
    CHECK(decode_replaced(buf, len, "type", mp_str("logg"), err, sizeof err) == WIRE_ERR_TYPE);
    CHECK(strstr(err, "logg") != NULL, "err names the type: %s", err);
    CHECK(decode_replaced(buf, len, "type", mp_int(6), err, sizeof err) == WIRE_ERR_TYPE);
    size_t n;
    void *f = surgery(buf, len, "v", OP_DROP, NULL, 0, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == WIRE_ERR_VERSION);
    free(f);
    f = surgery(buf, len, "type", OP_DROP, NULL, 0, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == WIRE_ERR_TYPE);
    free(f);
    f = surgery(buf, len, "type", OP_DUP, NULL, 0, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == WIRE_ERR_MALFORMED);
    free(f);
    free(buf);
    wire_msg_free(&m);
}

/* The wire names of a type's fields, read back from a valid encoding. */
static int frame_keys(const void *buf, size_t len, char keys[][32], int cap) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_next(&u, buf, len, &off);
    int n = 0;
    for (uint32_t i = 0; i < u.data.via.map.size && n < cap; i++) {
        msgpack_object_str s = u.data.via.map.ptr[i].key.via.str;
        if (s.size >= 32) continue;
        memcpy(keys[n], s.ptr, s.size);
        keys[n][s.size] = 0;
        if (strcmp(keys[n], "v") && strcmp(keys[n], "type")) n++;
    }
    msgpack_unpacked_destroy(&u);
    return n;
}

static void test_missing_mistyped_duplicate_each_field(void) {
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++) {
        wire_msg_t m, d;
        sample((msg_type)t, V_TYPICAL, &m);
        void *buf;
        size_t len;
        CHECK(wire_encode(&m, &buf, &len) == 0);
        char keys[20][32];
        int nk = frame_keys(buf, len, keys, 20);
        CHECK(nk > 0);
        for (int i = 0; i < nk; i++) {
            const char *k = keys[i];
            char err[160], want[64];
            size_t n;
            /* optional as the schema says (the sample sets every optional field too) */
            int optional = 0;
            const wire_schema_t *sc = wire_schema_get((msg_type)t);
            for (int fi = 0; sc && fi < sc->n_fields; fi++)
                if (!strcmp(sc->fields[fi].name, k)) optional = !sc->fields[fi].required;
            void *f = surgery(buf, len, k, OP_DROP, NULL, 0, &n);
            int rc = wire_decode(f, n, &d, err, sizeof err);
            if (optional) {
                CHECK(rc == 0, "%s: dropping optional %s: %s", wire_type_name(t), k, err);
            } else {
                CHECK(rc == WIRE_ERR_MISSING, "%s: drop %s gave %d", wire_type_name(t), k, rc);
                snprintf(want, sizeof want, "field \"%.31s\" missing", k);
                CHECK(strstr(err, want) && strstr(err, wire_type_name(t)), "err: %s", err);
            }
            wire_msg_free(&d);
            free(f);
            f = surgery(buf, len, k, OP_DUP, NULL, 0, &n);
            CHECK(wire_decode(f, n, &d, err, sizeof err) == WIRE_ERR_MALFORMED,
                  "%s: duplicate %s accepted", wire_type_name(t), k);
            free(f);
            /* a value no field accepts: an array (fixarray of one nil) */
            mp_val_t arr = {.b = {(char)0x91, (char)0xc0}, .n = 2};
            rc = decode_replaced(buf, len, k, arr, err, sizeof err);
            CHECK(rc == WIRE_ERR_MISTYPED, "%s: %s as array gave %d", wire_type_name(t), k, rc);
            CHECK(strstr(err, k) != NULL, "err names the field: %s", err);
        }
        /* an unknown key is ignored */
        size_t n;
        void *f = surgery(buf, len, keys[0], OP_DUP, NULL, 0, &n);
        free(f);
        free(buf);
        wire_msg_free(&m);
    }
}

static void test_integer_ranges(void) {
    wire_msg_t m;
    sample(MSG_BATCH_REQ, V_TYPICAL, &m);
    void *buf;
    size_t len;
    char err[128];
    CHECK(wire_encode(&m, &buf, &len) == 0);
    CHECK(decode_replaced(buf, len, "seed", mp_int(-1), err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "B", mp_uint(1ull << 32), err, sizeof err) ==
          WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "B", mp_uint(UINT32_MAX), err, sizeof err) == 0);
    CHECK(decode_replaced(buf, len, "seed", mp_uint(UINT64_MAX), err, sizeof err) == 0);
    CHECK(decode_replaced(buf, len, "B", mp_float(3.0f), err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "layout", mp_str("packed"), err, sizeof err) ==
          WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "split", mp_str("val"), err, sizeof err) == 0);
    free(buf);
    wire_msg_free(&m);
    /* a bool is true or false: neither 1 nor "true" */
    sample(MSG_GEN_REQ, V_TYPICAL, &m);
    CHECK(wire_encode(&m, &buf, &len) == 0);
    mp_val_t f = {.b = {(char)0xc2}, .n = 1};
    CHECK(decode_replaced(buf, len, "stream", f, err, sizeof err) == 0);
    CHECK(decode_replaced(buf, len, "stream", mp_uint(1), err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(strstr(err, "true or false") != NULL, "%s", err);
    CHECK(decode_replaced(buf, len, "stream", mp_str("true"), err, sizeof err) == WIRE_ERR_MISTYPED);
    free(buf);
    wire_msg_free(&m);
    sample(MSG_ERROR, V_TYPICAL, &m);
    CHECK(wire_encode(&m, &buf, &len) == 0);
    CHECK(decode_replaced(buf, len, "code", mp_int(INT32_MIN), err, sizeof err) == 0);
    CHECK(decode_replaced(buf, len, "code", mp_int((int64_t)INT32_MIN - 1), err, sizeof err) ==
          WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "code", mp_uint((uint64_t)INT32_MAX + 1), err, sizeof err) ==
          WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "message", mp_int(3), err, sizeof err) == WIRE_ERR_MISTYPED);
    mp_val_t nil = {.b = {(char)0xc0}, .n = 1};
    CHECK(decode_replaced(buf, len, "message", nil, err, sizeof err) == 0); /* nil = NULL */
    free(buf);
    wire_msg_free(&m);
}

static void test_floats_accept_float32_and_ints(void) {
    wire_msg_t m, d;
    sample(MSG_METRICS, V_TYPICAL, &m);
    void *buf;
    size_t len;
    char err[128];
    CHECK(wire_encode(&m, &buf, &len) == 0);
    size_t n;
    mp_val_t v = mp_float(2.5f);
    void *f = surgery(buf, len, "time", OP_REPLACE, v.b, v.n, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == 0, "%s", err);
    CHECK(d.u.metrics.time == 2.5); /* 2.5 is exact in float32 */
    wire_msg_free(&d);
    free(f);
    v = mp_int(-7);
    f = surgery(buf, len, "time", OP_REPLACE, v.b, v.n, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == 0, "%s", err);
    CHECK(d.u.metrics.time == -7.0);
    wire_msg_free(&d);
    free(f);
    CHECK(decode_replaced(buf, len, "time", mp_str("1.0"), err, sizeof err) == WIRE_ERR_MISTYPED);
    /* values: a non-number value, and a non-string key */
    mp_val_t bad = {.b = {(char)0x81, (char)0xa1, 'x', (char)0xa1, 'y'}, .n = 5};
    CHECK(decode_replaced(buf, len, "values", bad, err, sizeof err) == WIRE_ERR_MISTYPED);
    mp_val_t badk = {.b = {(char)0x81, 0x01, 0x02}, .n = 3};
    CHECK(decode_replaced(buf, len, "values", badk, err, sizeof err) == WIRE_ERR_MISTYPED);
    free(buf);
    wire_msg_free(&m);
}

static void test_trailing_and_not_a_map(void) {
    wire_msg_t m, d;
    sample(MSG_CKPT, V_TYPICAL, &m);
    void *buf;
    size_t len;
    char err[128];
    CHECK(wire_encode(&m, &buf, &len) == 0);
    char *two = malloc(2 * len);
    memcpy(two, buf, len);
    memcpy(two + len, buf, len);
    CHECK(wire_decode(two, len + 1, &d, err, sizeof err) == WIRE_ERR_TRAILING);
    CHECK(wire_decode(two, 2 * len, &d, err, sizeof err) == WIRE_ERR_TRAILING);
    free(two);
    const uint8_t arr[] = {0x92, 0x01, 0x02};
    CHECK(wire_decode(arr, sizeof arr, &d, err, sizeof err) == WIRE_ERR_MALFORMED);
    const uint8_t intkey[] = {0x81, 0x01, 0x01};
    CHECK(wire_decode(intkey, sizeof intkey, &d, err, sizeof err) == WIRE_ERR_MALFORMED);
    const uint8_t never[] = {0xc1};
    CHECK(wire_decode(never, 1, &d, err, sizeof err) == WIRE_ERR_MALFORMED);
    /* a map32 header claiming 2^32-1 entries in a 5-byte frame: rejected before any
     * allocation sized by the claim */
    const uint8_t huge[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    CHECK(wire_decode(huge, sizeof huge, &d, err, sizeof err) == WIRE_ERR_MALFORMED);
    /* nesting deeper than anything we send */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof deep);
    deep[63] = 0xc0;
    CHECK(wire_decode(deep, sizeof deep, &d, err, sizeof err) == WIRE_ERR_MALFORMED);
    free(buf);
    wire_msg_free(&m);
}

static void test_oversize(void) {
    wire_msg_t m, d;
    char err[128];
    uint8_t small[8] = {0x80};
    /* the size check comes before any read, so a short buffer with a big len is safe */
    CHECK(wire_decode(small, (size_t)WIRE_MAX_FRAME + 1, &d, err, sizeof err) ==
          WIRE_ERR_OVERSIZE);
    sample(MSG_LOG, V_TYPICAL, &m);
    void *buf;
    size_t len;
    CHECK(wire_encode(&m, &buf, &len) == 0);
    /* strings: WIRE_MAX_STR bytes pass (the V_MAX round trip), one more does not */
    char *big = malloc(WIRE_MAX_STR + 2);
    memset(big, 'y', WIRE_MAX_STR + 1);
    big[WIRE_MAX_STR + 1] = 0;
    free(m.u.log.line);
    m.u.log.line = big;
    void *b2;
    size_t l2;
    CHECK(wire_encode(&m, &b2, &l2) == WIRE_ERR_OVERSIZE);
    /* and a peer that sends one anyway */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_str(&pk, WIRE_MAX_STR + 1);
    msgpack_pack_str_body(&pk, big, WIRE_MAX_STR + 1);
    size_t n;
    void *f = surgery(buf, len, "line", OP_REPLACE, sb.data, sb.size, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == WIRE_ERR_OVERSIZE);
    CHECK(strstr(err, "line") != NULL, "%s", err);
    free(f);
    msgpack_sbuffer_destroy(&sb);
    /* names: WIRE_NAME_LEN-1 bytes pass, WIRE_NAME_LEN do not */
    char nm[WIRE_NAME_LEN + 1];
    memset(nm, 'p', WIRE_NAME_LEN);
    nm[WIRE_NAME_LEN] = 0;
    CHECK(decode_replaced(buf, len, "program", mp_str(nm), err, sizeof err) == WIRE_ERR_OVERSIZE);
    nm[WIRE_NAME_LEN - 1] = 0;
    CHECK(decode_replaced(buf, len, "program", mp_str(nm), err, sizeof err) == 0);
    free(buf);
    wire_msg_free(&m);
    /* values: WIRE_MAX_KV+1 entries */
    sample(MSG_METRICS, V_TYPICAL, &m);
    CHECK(wire_encode(&m, &buf, &len) == 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, WIRE_MAX_KV + 1);
    for (int i = 0; i <= WIRE_MAX_KV; i++) {
        char k[16];
        int kl = snprintf(k, sizeof k, "k%d", i);
        msgpack_pack_str(&pk, kl);
        msgpack_pack_str_body(&pk, k, kl);
        msgpack_pack_double(&pk, i);
    }
    f = surgery(buf, len, "values", OP_REPLACE, sb.data, sb.size, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == WIRE_ERR_OVERSIZE);
    free(f);
    msgpack_sbuffer_destroy(&sb);
    free(buf);
    wire_msg_free(&m);
}

static void test_tokens_length_mismatch(void) {
    wire_msg_t m, d;
    sample(MSG_BATCH, V_TYPICAL, &m); /* B=3, T=5: 72 token bytes, 15 mask bytes */
    void *buf;
    size_t len;
    char err[160];
    CHECK(wire_encode(&m, &buf, &len) == 0);
    CHECK(decode_replaced(buf, len, "tokens", mp_bin(47), err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(strstr(err, "tokens") != NULL, "%s", err);
    CHECK(decode_replaced(buf, len, "mask", mp_bin(14), err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(decode_replaced(buf, len, "tokens", mp_str("abcd"), err, sizeof err) ==
          WIRE_ERR_MISTYPED);
    /* B and T changed under the same tokens: mismatch too */
    CHECK(decode_replaced(buf, len, "T", mp_uint(4), err, sizeof err) == WIRE_ERR_MISTYPED);
    /* B*(T+1)*4 overflowing 64 bits must not wrap into a small "expected" size */
    size_t n;
    mp_val_t v = mp_uint(UINT32_MAX);
    void *f = surgery(buf, len, "B", OP_REPLACE, v.b, v.n, &n);
    void *g;
    size_t gn;
    g = surgery(f, n, "T", OP_REPLACE, v.b, v.n, &gn);
    CHECK(wire_decode(g, gn, &d, err, sizeof err) == WIRE_ERR_MISTYPED);
    free(f);
    free(g);
    /* an absent mask is fine (NULL), a nil one too */
    mp_val_t nil = {.b = {(char)0xc0}, .n = 1};
    f = surgery(buf, len, "mask", OP_REPLACE, nil.b, nil.n, &n);
    CHECK(wire_decode(f, n, &d, err, sizeof err) == 0, "%s", err);
    CHECK(d.u.batch.mask == NULL);
    wire_msg_free(&d);
    free(f);
    free(buf);
    /* encoder: tokens NULL with B*(T+1) > 0 is a caller bug */
    free(m.u.batch.tokens);
    m.u.batch.tokens = NULL;
    CHECK(wire_encode(&m, &buf, &len) == WIRE_ERR_ARG);
    wire_msg_free(&m);
}

static void test_encode_bad_args(void) {
    wire_msg_t m = {0};
    void *buf = NULL;
    size_t len = 0;
    CHECK(wire_encode(&m, &buf, &len) == WIRE_ERR_ARG); /* MSG_NONE */
    m.type = MSG_TYPE_COUNT;
    CHECK(wire_encode(&m, &buf, &len) == WIRE_ERR_ARG);
    sample(MSG_BATCH_REQ, V_TYPICAL, &m);
    m.u.batch_req.layout = 7;
    CHECK(wire_encode(&m, &buf, &len) == WIRE_ERR_ARG);
    sample(MSG_LOG, V_TYPICAL, &m);
    memset(m.u.log.program, 'z', WIRE_NAME_LEN); /* not NUL-terminated */
    CHECK(wire_encode(&m, &buf, &len) == WIRE_ERR_ARG);
    wire_msg_free(&m);
    char topic[WIRE_MAX_TOPIC + 2];
    memset(topic, 't', sizeof topic - 1);
    topic[sizeof topic - 1] = 0;
    sample(MSG_LOG, V_TYPICAL, &m);
    CHECK(wire_event_pack(topic, &m, &buf, &len) == WIRE_ERR_OVERSIZE);
    wire_msg_free(&m);
    CHECK(buf == NULL);
}

static void test_event_unpack(void) {
    wire_msg_t m, d;
    char topic[8], err[128];
    sample(MSG_LOG, V_TYPICAL, &m);
    void *fr;
    size_t fl;
    CHECK(wire_event_pack("log/a-long-topic", &m, &fr, &fl) == 0);
    CHECK(wire_event_unpack(fr, fl, topic, sizeof topic, &d, err, sizeof err) == 0);
    CHECK(strcmp(topic, "log/a-l") == 0, "truncated to cap: %s", topic);
    wire_msg_free(&d);
    /* no separator */
    CHECK(wire_event_unpack("abc", 3, topic, sizeof topic, &d, err, sizeof err) ==
          WIRE_ERR_MALFORMED);
    CHECK(wire_event_unpack("", 0, topic, sizeof topic, &d, err, sizeof err) ==
          WIRE_ERR_MALFORMED);
    /* good topic, bad body: the topic still comes back for the error line */
    char bad[] = "metrics/x\0\xc1";
    CHECK(wire_event_unpack(bad, sizeof bad - 1, topic, sizeof topic, &d, err, sizeof err) ==
          WIRE_ERR_MALFORMED);
    CHECK(strcmp(topic, "metrics") == 0);
    /* every truncation of an event */
    int wrong = 0;
    for (size_t k = 0; k < fl; k++) {
        void *cut = malloc(k ? k : 1);
        memcpy(cut, fr, k);
        if (wire_event_unpack(cut, k, topic, sizeof topic, &d, err, sizeof err) !=
            WIRE_ERR_MALFORMED)
            wrong++;
        free(cut);
    }
    CHECK(wrong == 0);
    free(fr);
    wire_msg_free(&m);
}

static void test_json(void) {
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++) {
        for (int variant = 0; variant < V_COUNT; variant++) {
            wire_msg_t m;
            sample((msg_type)t, variant, &m);
            static char out[2 << 20];
            int n = wire_to_json("topic/\"x\"", &m, out, sizeof out);
            CHECK(n > 0 && (size_t)n == strlen(out));
            json_error_t je;
            /* u64 fields go up to 2^64-1, past jansson's int64: read numbers as doubles */
            json_t *j = json_loads(out, JSON_DECODE_INT_AS_REAL, &je);
            CHECK(j != NULL, "%s/%d: invalid JSON (%s): %.200s", wire_type_name(t), variant,
                  je.text, out);
            if (j) {
                CHECK(strcmp(json_string_value(json_object_get(j, "type")), wire_type_name(t)) ==
                      0);
                CHECK(strcmp(json_string_value(json_object_get(j, "topic")), "topic/\"x\"") == 0);
                if (t == MSG_METRICS && variant == V_TYPICAL) {
                    json_t *v = json_object_get(json_object_get(j, "values"), "v1");
                    CHECK(v && json_real_value(v) == m.u.metrics.values[1].value,
                          "doubles print exactly");
                    CHECK(json_number_value(json_object_get(j, "step")) == 100);
                }
                if (t == MSG_BATCH && variant == V_TYPICAL)
                    CHECK(json_number_value(json_object_get(json_object_get(j, "tokens"),
                                                            "count")) == 18);
                if (t == MSG_LOG && variant == V_TYPICAL)
                    CHECK(strcmp(json_string_value(json_object_get(j, "line")), m.u.log.line) == 0);
                json_decref(j);
            }
            CHECK(wire_to_json(NULL, &m, out, 10) == WIRE_ERR_OVERSIZE);
            wire_msg_free(&m);
        }
    }
    /* invalid UTF-8 and NaN still give valid JSON */
    wire_msg_t m;
    sample(MSG_METRICS, V_TYPICAL, &m);
    strcpy(m.u.metrics.run, "r\xff\xc3(");
    m.u.metrics.values[0].value = NAN;
    char out[4096];
    CHECK(wire_to_json(NULL, &m, out, sizeof out) > 0);
    json_t *j = json_loads(out, 0, NULL);
    CHECK(j != NULL, "%s", out);
    json_decref(j);
}

static void test_field_set(void) {
    wire_msg_t m = {.type = MSG_METRICS};
    char err[128];
    CHECK(wire_field_set(&m, "run", "brown1", err, sizeof err) == 0);
    CHECK(wire_field_set(&m, "step", "12", err, sizeof err) == 0);
    CHECK(wire_field_set(&m, "loss", "2.5", err, sizeof err) == 0);
    CHECK(wire_field_set(&m, "step", "-1", err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(wire_field_set(&m, "lr", "abc", err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(strcmp(m.u.metrics.run, "brown1") == 0 && m.u.metrics.step == 12);
    CHECK(m.u.metrics.n == 1 && m.u.metrics.values[0].value == 2.5);
    wire_msg_t c = {.type = MSG_CKPT};
    CHECK(wire_field_set(&c, "path", "/a", err, sizeof err) == 0);
    CHECK(wire_field_set(&c, "path", "/b", err, sizeof err) == 0); /* replaces, no leak */
    CHECK(wire_field_set(&c, "nope", "1", err, sizeof err) == WIRE_ERR_ARG);
    CHECK(strcmp(c.u.ckpt.path, "/b") == 0);
    wire_msg_free(&c);
}


/* 1 when the encoded map buf has a key named key. */
static int frame_has_key(const void *buf, size_t len, const char *key) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int found = 0;
    if (msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object *k = &u.data.via.map.ptr[i].key;
            found |= k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
                     !memcmp(k->via.str.ptr, key, strlen(key));
        }
    msgpack_unpacked_destroy(&u);
    return found;
}

/* An optional name left empty is not sent: `bin/bus send metrics ...` without precision= sent
 * precision '', which is none of the values PROTOCOL.md §2.3 allows; given, it is sent. */
static void test_optional_name_absent(void) {
    wire_msg_t m = {.type = MSG_METRICS}, d;
    char err[128];
    CHECK(wire_field_set(&m, "run", "r1", err, sizeof err) == 0 && wire_field_set(&m, "loss", "1", err, sizeof err) == 0);
    void *buf;
    size_t len;
    CHECK(wire_encode(&m, &buf, &len) == 0);
    CHECK(!frame_has_key(buf, len, "precision"), "an empty precision was sent");
    CHECK(frame_has_key(buf, len, "run") && frame_has_key(buf, len, "values"));
    CHECK(wire_decode(buf, len, &d, err, sizeof err) == 0 && wire_msg_equal(&m, &d), "%s", err);
    wire_msg_free(&d);
    free(buf);
    CHECK(wire_field_set(&m, "precision", "bf16", err, sizeof err) == 0);
    CHECK(wire_encode(&m, &buf, &len) == 0);
    CHECK(frame_has_key(buf, len, "precision"));
    CHECK(wire_decode(buf, len, &d, err, sizeof err) == 0 && !strcmp(d.u.metrics.precision, "bf16"), "%s", err);
    wire_msg_free(&d);
    free(buf);
    wire_msg_free(&m);
}

/* Every str and name is UTF-8 (PROTOCOL.md §2.1): the decoder refuses other bytes in each
 * kind of string field, the encoder refuses to write them, and wire_utf8_clean makes any
 * bytes sendable. */
static void test_utf8_strings(void) {
    static const char *bad[] = {
        "\xff", "a\xc3", "\xc0\xaf" /* overlong '/' */, "\xed\xa0\x80" /* surrogate */,
        "\xf4\x90\x80\x80" /* > U+10FFFF */, "\x80", "ok\xe2\x82",
    };
    static const char *good[] = {"", "plain", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                 "\xf4\x8f\xbf\xbf" /* U+10FFFF */};
    wire_msg_t m;
    sample(MSG_CKPT, V_TYPICAL, &m);
    void *buf;
    size_t len;
    CHECK(wire_encode(&m, &buf, &len) == 0);
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!wire_utf8_valid(bad[i], strlen(bad[i])), "case %zu", i);
        /* a str field, a name field, in a ckpt event */
        CHECK(decode_replaced(buf, len, "path", mp_str(bad[i]), err, sizeof err) ==
                  WIRE_ERR_MISTYPED && strstr(err, "UTF-8"), "path case %zu: %s", i, err);
        CHECK(decode_replaced(buf, len, "run", mp_str(bad[i]), err, sizeof err) ==
                  WIRE_ERR_MISTYPED && strstr(err, "UTF-8"), "run case %zu: %s", i, err);
        /* and the encoder will not write it */
        wire_msg_t e;
        sample(MSG_CKPT, V_TYPICAL, &e);
        free(e.u.ckpt.model);
        e.u.ckpt.model = strdup(bad[i]);
        void *b2 = NULL;
        size_t l2;
        CHECK(wire_encode(&e, &b2, &l2) == WIRE_ERR_ARG, "case %zu", i);
        free(b2);
        strcpy(e.u.ckpt.run, bad[i]);
        free(e.u.ckpt.model);
        e.u.ckpt.model = NULL;
        CHECK(wire_encode(&e, &b2, &l2) == WIRE_ERR_ARG, "case %zu", i);
        free(b2);
        wire_msg_free(&e);
        /* cleaned, it is sendable, and stays as long as it can */
        char clean[64];
        size_t k = wire_utf8_clean(clean, sizeof clean, bad[i], strlen(bad[i]));
        CHECK(k == strlen(clean) && wire_utf8_valid(clean, k) && strstr(clean, "\xef\xbf\xbd"));
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK(wire_utf8_valid(good[i], strlen(good[i])));
        CHECK(decode_replaced(buf, len, "path", mp_str(good[i]), err, sizeof err) == 0, "%s", err);
        char clean[64];
        CHECK(wire_utf8_clean(clean, sizeof clean, good[i], strlen(good[i])) == strlen(good[i]) &&
              strcmp(clean, good[i]) == 0, "valid text passes unchanged");
    }
    /* a metrics value name is a name too */
    wire_msg_t mt;
    sample(MSG_METRICS, V_TYPICAL, &mt);
    strcpy(mt.u.metrics.values[0].name, "lo\xffss");
    void *b3 = NULL;
    size_t l3;
    CHECK(wire_encode(&mt, &b3, &l3) == WIRE_ERR_ARG);
    free(b3);
    /* cutting: never inside a character, NUL becomes U+FFFD */
    char small[5];
    CHECK(wire_utf8_clean(small, sizeof small, "ab\xe2\x82\xac", 5) == 2 && !strcmp(small, "ab"));
    CHECK(wire_utf8_clean(small, sizeof small, "a\0b", 3) == 4 && !memcmp(small, "a\xef\xbf\xbd", 5));
    wire_msg_free(&mt);
    free(buf);
    wire_msg_free(&m);
}

/* PROTOCOL.md §3: containers nest at most 16 deep, the root map being level 1, whether the
 * innermost one is empty or not. */
static void test_nesting_depth(void) {
    for (int empty = 0; empty < 2; empty++) {
        for (int levels = 15; levels <= 18; levels++) {
            /* {v:1, type:"log", program:"p", line:"l", x:[[...]]}: levels-1 arrays under x */
            unsigned char f[128];
            size_t n = 0;
            static const unsigned char head[] = {0x85, 0xa1, 'v', 1, 0xa4, 't', 'y', 'p', 'e',
                                                 0xa3, 'l', 'o', 'g', 0xa7, 'p', 'r', 'o', 'g',
                                                 'r', 'a', 'm', 0xa1, 'p', 0xa4, 'l', 'i', 'n',
                                                 'e', 0xa1, 'l', 0xa1, 'x'};
            memcpy(f, head, sizeof head);
            n = sizeof head;
            for (int i = 0; i < levels - 1; i++) f[n++] = (empty && i == levels - 2) ? 0x90 : 0x91;
            if (!empty) f[n++] = 0x01;
            wire_msg_t m;
            char err[128];
            int rc = wire_decode(f, n, &m, err, sizeof err);
            CHECK(levels <= 16 ? rc == 0 : rc == WIRE_ERR_MALFORMED, "levels %d empty %d: rc %d %s",
                  levels, empty, rc, err);
            wire_msg_free(&m);
        }
    }
}

/* wire_decode_diag: what a service needs to answer a request that failed to decode. */
static void test_decode_diag(void) {
    wire_msg_t m;
    sample(MSG_BATCH_REQ, V_TYPICAL, &m);
    void *buf;
    size_t len, n;
    CHECK(wire_encode(&m, &buf, &len) == 0);
    wire_diag_t d;
    wire_msg_t out;
    char err[256];
    mp_val_t v = mp_str("spiral");
    void *f = surgery(buf, len, "layout", OP_REPLACE, v.b, v.n, &n);
    CHECK(wire_decode_diag(f, n, &out, &d, err, sizeof err) == WIRE_ERR_MISTYPED);
    CHECK(d.type == MSG_BATCH_REQ && d.field && !strcmp(d.field, "layout"));
    CHECK(d.has_req_id && d.req_id == 7);
    free(f);
    f = surgery(buf, len, "req_id", OP_DROP, NULL, 0, &n);
    CHECK(wire_decode_diag(f, n, &out, &d, err, sizeof err) == WIRE_ERR_MISSING);
    CHECK(!d.has_req_id && !strcmp(d.field, "req_id"));
    free(f);
    CHECK(wire_decode_diag(buf, len, &out, &d, err, sizeof err) == 0);
    CHECK(d.type == MSG_BATCH_REQ && d.has_req_id && d.req_id == 7 && d.field == NULL);
    wire_msg_free(&out);
    /* an unknown type made of bytes that are not UTF-8: the reason quotes it as UTF-8 */
    v = mp_str("\xff\xfe" "batch");
    f = surgery(buf, len, "type", OP_REPLACE, v.b, v.n, &n);
    CHECK(wire_decode_diag(f, n, &out, &d, err, sizeof err) == WIRE_ERR_TYPE);
    CHECK(d.type == MSG_NONE && wire_utf8_valid(err, strlen(err)) && strstr(err, "batch"), "%s", err);
    free(f);
    free(buf);
    wire_msg_free(&m);
}

int main(void) {
    RUN(test_round_trip_all_types);
    RUN(test_equal_detects_differences);
    RUN(test_tokens_little_endian);
    RUN(test_truncated_every_offset);
    RUN(test_version_and_type);
    RUN(test_missing_mistyped_duplicate_each_field);
    RUN(test_integer_ranges);
    RUN(test_floats_accept_float32_and_ints);
    RUN(test_trailing_and_not_a_map);
    RUN(test_oversize);
    RUN(test_tokens_length_mismatch);
    RUN(test_encode_bad_args);
    RUN(test_event_unpack);
    RUN(test_json);
    RUN(test_field_set);
    RUN(test_optional_name_absent);
    RUN(test_utf8_strings);
    RUN(test_nesting_depth);
    RUN(test_decode_diag);
    return check_summary();
}
