/* tests/test_sampler_serve.c: the generation service's request handler without sockets:
 * a good request gives the command line's sample, every bad one an error reply with its code;
 * requests decoded together (arriving mid-batch, waiting for a row) get byte for byte the text
 * each gets alone, for both families; cancellation, deadlines, a full queue, streaming, a
 * client that goes away, a stop, and a checkpoint reload during a batch (running requests
 * finish on their model, new ones run on the new one, the old model is freed under a steady
 * stream of requests). */
#include "sampler/serve.h"
#include "sampler/text.h"
#include "tokenizer/bpe_io.h"
#include "tests/check.h"
#include "tests/mp_frame.h"
#include "bus/utf8.h"
#include <stdlib.h>
#include <string.h>

static sampler_model_t *sm;   /* the reference for sampler_generate (the command line) */
static bpe_vocab_t *voc;
static sampler_server_t *srv;

static model_config_t config(int kind) {
    return (model_config_t){.kind = kind, .vocab_size = 257, .d_model = 32, .n_layers = kind == MODEL_FREE ? 4 : 2,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 48,
                            .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1, .eot_id = 256,
                            .latent_bits = 4, .kappa_nats = 0.1f};
}

/* A server over a fresh model of `kind` with weights from seed (it owns the model). */
static sampler_server_t *server(int kind, uint64_t seed, int max_batch, int max_queue, const char *ckpt,
                                int64_t step) {
    char err[256];
    model_config_t c = config(kind);
    sampler_model_t *m = NULL;
    sampler_server_t *s = NULL;
    sampler_serve_opts_t o = {.bind = "unused", .ckpt = ckpt, .step = step, .vocab = voc, .max_prompt = 32,
                              .max_new = 32, .max_batch = max_batch, .max_queue = max_queue, .quiet = 1};
    CHECK(sampler_model_create(&m, NULL, &c, seed, err, sizeof err) == 0, "%s", err);
    CHECK(m && sampler_server_new(&s, m, &o, err, sizeof err) == 0, "%s", err);
    return s;
}

static msg_gen_req_t good(void) {
    return (msg_gen_req_t){.req_id = 42, .prompt = "K>", .max_new = 12, .temperature = 1.0,
                           .top_k = 0, .top_p = 1.0, .seed = 5, .latent = "independent",
                           .index = 0, .group = 1, .flags = 0};
}

/* Sends r through the handler; the decoded reply goes to *rep (caller frees). */
static void ask_raw(const void *body, size_t len, wire_msg_t *rep) {
    void *out = NULL;
    size_t olen = 0;
    sampler_server_handle(srv, body, len, &out, &olen);
    CHECK(out != NULL, "every request gets a reply");
    char err[256];
    memset(rep, 0, sizeof *rep);
    if (out) CHECK(wire_decode(out, olen, rep, err, sizeof err) == 0, "%s", err);
    free(out);
}
static void ask(const msg_gen_req_t *r, wire_msg_t *rep) {
    wire_msg_t m = {.type = MSG_GEN_REQ};
    m.u.gen_req = *r;
    void *buf;
    size_t len;
    CHECK(wire_encode(&m, &buf, &len) == 0);
    ask_raw(buf, len, rep);
    free(buf);
}
static void expect_error(const msg_gen_req_t *r, int code, const char *word) {
    wire_msg_t rep;
    ask(r, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == code, "want error %d (%s), got %s %d", code,
          word, wire_type_name(rep.type), rep.type == MSG_ERROR ? rep.u.error.code : 0);
    if (rep.type == MSG_ERROR) {
        CHECK(rep.u.error.req_id == r->req_id);
        CHECK(rep.u.error.message && strstr(rep.u.error.message, word), "'%s' lacks '%s'",
              rep.u.error.message ? rep.u.error.message : "", word);
    }
    wire_msg_free(&rep);
}

static void test_good_request(void) {
    msg_gen_req_t r = good();
    wire_msg_t a, b;
    ask(&r, &a);
    ask(&r, &b);
    CHECK(a.type == MSG_GEN && a.u.gen.req_id == 42, "got %s", wire_type_name(a.type));
    CHECK(a.u.gen.n_tokens == 12 && a.u.gen.step == 60 && !strcmp(a.u.gen.stop, "length"));
    CHECK(wire_msg_equal(&a, &b), "same request, same reply");
    /* sample `index` of the service is sample `index` of sampler_generate with the same flags */
    for (uint32_t idx = 0; idx < 3; idx++) {
        r.index = idx;
        wire_msg_t c;
        ask(&r, &c);
        sampler_opts_t o = {.n = 3, .max_new = 12, .sample = {1.0f, 0, 1.0f}, .seed = 5, .group = 1};
        uint32_t prompt[2] = {'K', '>'};
        sampler_result_t res;
        char err[256];
        CHECK(sampler_generate(sm, prompt, 2, &o, &res, err, sizeof err) == 0, "%s", err);
        size_t tl;
        char *t = sampler_text_decode(voc, res.ids + idx * 12, res.len[idx], &tl);
        char *u = sampler_text_utf8(t, tl);
        CHECK(c.type == MSG_GEN && !strcmp(c.u.gen.text, u), "index %u differs", idx);
        free(t);
        free(u);
        sampler_result_free(&res);
        wire_msg_free(&c);
    }
    /* another seed, another text (12 tokens over 257 ids: equal by chance ~never) */
    r = good();
    r.seed = 6;
    wire_msg_t d;
    ask(&r, &d);
    CHECK(d.type == MSG_GEN && strcmp(d.u.gen.text, a.u.gen.text) != 0);
    wire_msg_free(&a);
    wire_msg_free(&b);
    wire_msg_free(&d);
}

static void test_bad_requests(void) {
    msg_gen_req_t r = good();
    /* each bad field named (one message for four causes before) */
    r.max_new = 0; expect_error(&r, SERVE_EPARAM, "max_new 0");
    r = good(); r.temperature = NAN; expect_error(&r, SERVE_EPARAM, "temperature nan is not a finite number");
    r = good(); r.temperature = INFINITY; expect_error(&r, SERVE_EPARAM, "temperature inf");
    r = good(); r.top_p = NAN; expect_error(&r, SERVE_EPARAM, "top_p nan is not a finite number");
    r = good(); r.max_new = 33; expect_error(&r, SERVE_ELIMIT, "limit of 32");
    r = good(); r.top_p = 0.0; expect_error(&r, SERVE_EPARAM, "top-p");
    r = good(); r.temperature = -1.0; expect_error(&r, SERVE_EPARAM, "temperature");
    r = good(); r.group = 0; expect_error(&r, SERVE_EPARAM, "group 0");
    r = good(); r.latent = "both"; expect_error(&r, SERVE_EPARAM, "latent");
    r = good(); r.flags = 4; expect_error(&r, SERVE_EPARAM, "flags");
    r = good(); r.prompt = ""; expect_error(&r, SERVE_EPARAM, "empty prompt");
    char longp[40];
    memset(longp, '_', 39);
    longp[39] = 0;
    r = good(); r.prompt = longp; expect_error(&r, SERVE_ELIMIT, "prompt of 39 tokens");
    /* within the server's limits but beyond the model's 48 positions */
    r = good(); r.prompt = longp + 8; r.max_new = 30; expect_error(&r, SERVE_ELIMIT, "max_seq");
    /* an empty prompt with the end-of-text prefix is fine */
    r = good(); r.prompt = ""; r.flags = 3;
    wire_msg_t ok;
    ask(&r, &ok);
    CHECK(ok.type == MSG_GEN, "eot-prefixed empty prompt: %s", wire_type_name(ok.type));
    wire_msg_free(&ok);
}

static void test_bad_frames(void) {
    wire_msg_t rep;
    ask_raw("\xc1garbage", 8, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == SERVE_EMALFORMED && rep.u.error.req_id == 0);
    wire_msg_free(&rep);
    ask_raw("", 0, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == SERVE_EMALFORMED);
    wire_msg_free(&rep);
    wire_msg_t info = {.type = MSG_INFO_REQ};
    info.u.info_req.world = 1;
    void *buf;
    size_t len;
    wire_encode(&info, &buf, &len);
    ask_raw(buf, len, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == SERVE_ETYPE);
    wire_msg_free(&rep);
    /* every truncation of a good request is refused, never crashes */
    msg_gen_req_t r = good();
    wire_msg_t m = {.type = MSG_GEN_REQ};
    m.u.gen_req = r;
    free(buf);
    wire_encode(&m, &buf, &len);
    int bad = 0;
    for (size_t k = 0; k < len; k++) {
        void *cut = malloc(k ? k : 1);
        memcpy(cut, buf, k);
        ask_raw(cut, k, &rep);
        bad += !(rep.type == MSG_ERROR && rep.u.error.code == SERVE_EMALFORMED);
        wire_msg_free(&rep);
        free(cut);
    }
    CHECK(bad == 0, "%d truncations not refused as malformed", bad);
    free(buf);
}

/* An error reply is a msgpack str whatever the request held: the latent name is quoted cut
 * at 40 bytes (here inside a 2-byte character), the unknown type as sent (bytes that are not
 * UTF-8); and a request that does not decode still gets its req_id back when it was read. */
static void test_error_text_utf8(void) {
    char latent[80] = "a";
    for (int i = 0; i < 30; i++) strcat(latent, "\xc3\xa9"); /* e acute: byte 40 splits one */
    size_t len;
    void *f = mp_frame(&len, "usususduduuuu", "v", 1ull, "type", "gen_req", "req_id", 42ull,
                       "prompt", "K>", "max_new", 4ull, "latent", latent, "temperature", 1.0,
                       "top_k", 0ull, "top_p", 1.0, "seed", 1ull, "index", 0ull, "group", 1ull,
                       "flags", 0ull);
    wire_msg_t rep;
    ask_raw(f, len, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == SERVE_EPARAM && rep.u.error.req_id == 42);
    CHECK(rep.u.error.message && wire_utf8_valid(rep.u.error.message, strlen(rep.u.error.message)),
          "message not UTF-8");
    wire_msg_free(&rep);
    free(f);
    f = mp_frame(&len, "usu", "v", 1ull, "type", "gen\xff\xfe_req", "req_id", 43ull);
    ask_raw(f, len, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == SERVE_EMALFORMED);
    CHECK(rep.u.error.message && wire_utf8_valid(rep.u.error.message, strlen(rep.u.error.message)));
    wire_msg_free(&rep);
    free(f);
    f = mp_frame(&len, "usus", "v", 1ull, "type", "gen_req", "req_id", 44ull, "prompt", "x");
    ask_raw(f, len, &rep);
    CHECK(rep.type == MSG_ERROR && rep.u.error.code == SERVE_EMALFORMED && rep.u.error.req_id == 44,
          "a field missing after req_id: req_id %llu", (unsigned long long)rep.u.error.req_id);
    wire_msg_free(&rep);
    free(f);
}

/* ---- the batch ----------------------------------------------------------------------------- */

typedef struct {
    char env[16];      /* whose reply */
    wire_msg_t m;
} got_t;

/* Every reply waiting in s, decoded, appended to g (n so far); returns the new count. */
static int drain(sampler_server_t *s, got_t *g, int n, int cap) {
    void *env, *body;
    size_t el, bl;
    while (sampler_server_reply(s, &env, &el, &body, &bl)) {
        char err[256];
        if (n < cap) {
            memset(&g[n], 0, sizeof g[n]);
            memcpy(g[n].env, env, el < 15 ? el : 15);
            CHECK(wire_decode(body, bl, &g[n].m, err, sizeof err) == 0, "%s", err);
            n++;
        }
        free(env);
        free(body);
    }
    return n;
}
static void drop_all(got_t *g, int n) {
    for (int i = 0; i < n; i++) wire_msg_free(&g[i].m);
}

static void send_msg(sampler_server_t *s, const char *env, uint64_t conn, const wire_msg_t *m, double now) {
    void *buf;
    size_t len;
    CHECK(wire_encode(m, &buf, &len) == 0);
    sampler_server_request(s, env, strlen(env), conn, buf, len, now);
    free(buf);
}
static void send_req(sampler_server_t *s, const char *env, uint64_t conn, const msg_gen_req_t *r, double now) {
    wire_msg_t m = {.type = MSG_GEN_REQ};
    m.u.gen_req = *r;
    send_msg(s, env, conn, &m, now);
}
static void send_cancel(sampler_server_t *s, const char *env, uint64_t id, double now) {
    wire_msg_t m = {.type = MSG_GEN_CANCEL};
    m.u.gen_cancel.req_id = id;
    send_msg(s, env, 0, &m, now);
}

/* The reply of g whose env is env and type is not gen_part, or NULL. */
static const wire_msg_t *final_of(const got_t *g, int n, const char *env) {
    for (int i = 0; i < n; i++)
        if (!strcmp(g[i].env, env) && g[i].m.type != MSG_GEN_PART) return &g[i].m;
    return NULL;
}

#define NB 14
static const char *PROMPTS[NB] = {"K>", "a", "The quick brown fox", "K>", "K>", "K>", "xy",
                                  "0123456789abcdefghijklmnopqrstu", "K>", "zz", "K>", "q", "K>", "hello"};

/* Request k of the batch tests: prompts of 1 to 31 bytes, 1 to 30 new tokens, greedy and
 * sampled, some stopping at end-of-text, four of one shared-latent group (index 0..3). */
static msg_gen_req_t batch_req(int k) {
    msg_gen_req_t r = good();
    r.req_id = 1000 + k;
    r.prompt = (char *)PROMPTS[k];
    r.max_new = 1 + (k * 11) % 30;
    if (r.max_new + strlen(PROMPTS[k]) > 48) r.max_new = 48 - strlen(PROMPTS[k]);
    r.seed = 10 + k;
    r.index = k % 3;
    if (k % 4 == 1) r.temperature = 0.0;
    if (k % 5 == 2) r.top_k = 30, r.top_p = 0.8;
    if (k % 3 == 0) r.flags = 1;
    if (k == 3 || k == 4 || k == 5 || k == 10) r.latent = "shared", r.group = 4, r.seed = 9, r.index = k == 10 ? 3 : k - 3;
    return r;
}

/* The text of a gen reply, or "" */
static const char *text_of(const wire_msg_t *m) { return m && m->type == MSG_GEN ? m->u.gen.text : ""; }

/* Every request of the batch alone (one at a time through handle) on a server of its own. */
static void solo_texts(int kind, uint64_t seed, char out[NB][256]) {
    sampler_server_t *solo = server(kind, seed, 1, 0, "solo", 1);
    for (int k = 0; k < NB && solo; k++) {
        msg_gen_req_t r = batch_req(k);
        wire_msg_t m = {.type = MSG_GEN_REQ}, rep;
        m.u.gen_req = r;
        void *buf, *out_b;
        size_t len, ol;
        wire_encode(&m, &buf, &len);
        sampler_server_handle(solo, buf, len, &out_b, &ol);
        char err[256];
        CHECK(out_b && wire_decode(out_b, ol, &rep, err, sizeof err) == 0 && rep.type == MSG_GEN, "solo %d", k);
        snprintf(out[k], 256, "%s", text_of(&rep));
        wire_msg_free(&rep);
        free(buf);
        free(out_b);
    }
    sampler_server_free(&solo);
}

/* The batch: 14 requests from 14 connections arriving at steps 0..12 on a server of 5 rows
 * (later ones wait in the queue for a row); each reply equals the request's text alone, and
 * alone equals the command line's (sampler_generate with the same flags, sample `index`). */
static void batched_equals_solo(int kind) {
    char solo[NB][256];
    solo_texts(kind, 5, solo);
    sampler_server_t *s = server(kind, 5, 5, 20, "ckpt", 7);
    if (!s) return;
    got_t g[4 * NB];
    int n = 0, sent = 0, max_busy = 0;
    for (int step = 0, busy = 1; step < 200 && (sent < NB || busy > 0); step++) {
        for (; sent < NB && sent <= step; sent++) { /* one or two a step */
            char env[8];
            snprintf(env, sizeof env, "c%d", sent);
            msg_gen_req_t r = batch_req(sent);
            send_req(s, env, 1 + sent, &r, step);
            if (sent % 3 == 0 && sent + 1 < NB) {
                sent++;
                snprintf(env, sizeof env, "c%d", sent);
                r = batch_req(sent);
                send_req(s, env, 1 + sent, &r, step);
            }
        }
        busy = sampler_server_step(s, step);
        if (busy > max_busy) max_busy = busy;
        n = drain(s, g, n, 4 * NB);
    }
    CHECK(max_busy > 5, "requests waited in the queue (at most %d in the server)", max_busy);
    int same = 0;
    for (int k = 0; k < NB; k++) {
        char env[8];
        snprintf(env, sizeof env, "c%d", k);
        const wire_msg_t *m = final_of(g, n, env);
        CHECK(m && m->type == MSG_GEN && m->u.gen.req_id == 1000u + k, "request %d answered", k);
        same += m && !strcmp(text_of(m), solo[k]);
        CHECK(m && !strcmp(text_of(m), solo[k]), "%s request %d: '%s' in the batch, '%s' alone",
              kind == MODEL_FREE ? "free" : "llama", k, text_of(m), solo[k]);
    }
    CHECK(same == NB);
    /* alone is the command line: a model of the same seed, sampler_generate */
    char err[256];
    model_config_t c = config(kind);
    sampler_model_t *ref = NULL;
    CHECK(sampler_model_create(&ref, NULL, &c, 5, err, sizeof err) == 0);
    for (int k = 0; ref && k < NB; k += 3) {
        msg_gen_req_t r = batch_req(k);
        uint32_t *ids;
        int P;
        sampler_text_encode(voc, r.prompt, strlen(r.prompt), 0, 256, &ids, &P, err, sizeof err);
        sampler_opts_t o = {.n = 1, .max_new = (int)r.max_new, .sample = {(float)r.temperature, (int)r.top_k, (float)r.top_p},
                            .seed = r.seed, .latent = !strcmp(r.latent, "shared"), .group = (int)r.group,
                            .stop_at_eot = r.flags & 1, .first = r.index};
        sampler_result_t res;
        CHECK(sampler_generate(ref, ids, P, &o, &res, err, sizeof err) == 0, "%s", err);
        size_t tl;
        char *t = sampler_text_decode(voc, res.ids, res.len[0], &tl), *u = sampler_text_utf8(t, tl);
        CHECK(!strcmp(u, solo[k]), "request %d: the command line gives '%s', the service '%s'", k, u, solo[k]);
        free(t);
        free(u);
        free(ids);
        sampler_result_free(&res);
    }
    sampler_model_free(&ref);
    drop_all(g, n);
    sampler_server_free(&s);
}
static void test_batched_equals_solo_llama(void) { batched_equals_solo(MODEL_LLAMA); }
static void test_batched_equals_solo_free(void) { batched_equals_solo(MODEL_FREE); }

/* 2 rows + 1 waiting: the fourth request is answered "busy" at once, before any step. */
static void test_full_queue(void) {
    sampler_server_t *s = server(MODEL_LLAMA, 3, 2, 1, "q", 1);
    if (!s) return;
    got_t g[16];
    msg_gen_req_t r = good();
    for (int i = 0; i < 4; i++) {
        char env[8];
        snprintf(env, sizeof env, "q%d", i);
        r.req_id = 50 + i;
        send_req(s, env, 0, &r, 0);
    }
    int n = drain(s, g, 0, 16);
    CHECK(n == 1 && !strcmp(g[0].env, "q3") && g[0].m.type == MSG_ERROR && g[0].m.u.error.code == SERVE_EBUSY &&
          g[0].m.u.error.req_id == 53 && strstr(g[0].m.u.error.message, "busy"), "one busy reply, at once");
    while (sampler_server_step(s, 1) > 0) {}
    n = drain(s, g, n, 16);
    CHECK(n == 4 && final_of(g, n, "q0")->type == MSG_GEN && final_of(g, n, "q2")->type == MSG_GEN,
          "the three others are served (%d replies)", n);
    /* room again */
    r.req_id = 60;
    send_req(s, "q4", 0, &r, 2);
    while (sampler_server_step(s, 2) > 0) {}
    n = drain(s, g, n, 16);
    CHECK(n == 5 && final_of(g, n, "q4")->type == MSG_GEN);
    drop_all(g, n);
    sampler_server_free(&s);
}

/* gen_cancel: a running and a waiting request of one connection are dropped and answered
 * "cancelled"; the same req_id from another connection is untouched; an unknown one is
 * ignored. */
static void test_cancel(void) {
    sampler_server_t *s = server(MODEL_LLAMA, 3, 1, 4, "c", 1);
    if (!s) return;
    got_t g[16];
    msg_gen_req_t r = good();
    r.max_new = 30;
    r.req_id = 7;
    send_req(s, "A", 0, &r, 0);
    send_req(s, "B", 0, &r, 0);
    r.req_id = 8;
    send_req(s, "A", 0, &r, 0);
    for (int i = 0; i < 3; i++) sampler_server_step(s, 0);   /* A/7 runs, B/7 and A/8 wait */
    send_cancel(s, "A", 7, 0);
    send_cancel(s, "A", 8, 0);
    send_cancel(s, "A", 99, 0);
    int n = drain(s, g, 0, 16);
    CHECK(n == 2, "%d replies to the cancellations", n);
    for (int i = 0; i < n; i++)
        CHECK(!strcmp(g[i].env, "A") && g[i].m.type == MSG_ERROR && g[i].m.u.error.code == SERVE_ECANCELLED,
              "reply %d: %s", i, wire_type_name(g[i].m.type));
    int steps = 0;
    while (sampler_server_step(s, 0) > 0) steps++;
    n = drain(s, g, n, 16);
    const wire_msg_t *b = final_of(g, n, "B");
    CHECK(n == 3 && b && b->type == MSG_GEN && b->u.gen.n_tokens == 30, "B's request ran in full");
    CHECK(steps >= 29 && steps <= 31, "B took the freed row at once (%d steps)", steps);
    drop_all(g, n);
    sampler_server_free(&s);
}

/* deadline_ms counts from arrival on the caller's clock: a request whose deadline passes while
 * it runs, and one while it waits, are dropped and answered "deadline"; one with time enough,
 * and one without a deadline, are served. */
static void test_deadline(void) {
    sampler_server_t *s = server(MODEL_LLAMA, 3, 2, 4, "d", 1);
    if (!s) return;
    got_t g[16];
    msg_gen_req_t r = good();
    r.max_new = 30;
    r.deadline_ms = 10;
    send_req(s, "late", 0, &r, 1000.0);      /* runs, expires at 1010 */
    r.deadline_ms = 0;
    send_req(s, "none", 0, &r, 1000.0);      /* takes the other row */
    r.deadline_ms = 5;
    send_req(s, "waits", 0, &r, 1000.0);     /* waits for a row, expires at 1005 */
    r.deadline_ms = 100000;
    r.max_new = 3;
    send_req(s, "ok", 0, &r, 1000.0);
    double t = 1000.0;
    for (int i = 0; i < 4; i++) sampler_server_step(s, t += 1); /* 1004: nothing expired yet */
    int n = drain(s, g, 0, 16);
    CHECK(n == 0, "%d replies before any deadline", n);
    sampler_server_step(s, 1006.0);
    n = drain(s, g, n, 16);
    CHECK(n == 1 && !strcmp(g[0].env, "waits") && g[0].m.u.error.code == SERVE_EDEADLINE, "the waiting one expired");
    sampler_server_step(s, 1010.0);
    n = drain(s, g, n, 16);
    const wire_msg_t *late = final_of(g, n, "late");
    CHECK(late && late->type == MSG_ERROR && late->u.error.code == SERVE_EDEADLINE &&
          strstr(late->u.error.message, "deadline"), "the running one expired");
    while (sampler_server_step(s, 1011.0) > 0) {}
    n = drain(s, g, n, 16);
    CHECK(final_of(g, n, "none") && final_of(g, n, "none")->type == MSG_GEN);
    CHECK(final_of(g, n, "ok") && final_of(g, n, "ok")->type == MSG_GEN && n == 4);
    drop_all(g, n);
    sampler_server_free(&s);
}

/* stream: one gen_part per new token, each text a prefix of the next and of the final text,
 * which equals the unstreamed request's; a request without stream gets no part. */
static void test_stream(void) {
    sampler_server_t *s = server(MODEL_LLAMA, 3, 4, 4, "s", 1);
    if (!s) return;
    got_t g[64];
    msg_gen_req_t r = good();
    r.max_new = 20;
    r.stream = 1;
    send_req(s, "S", 0, &r, 0);
    r.stream = 0;
    send_req(s, "N", 0, &r, 0);
    int n = 0;
    while (sampler_server_step(s, 0) > 0) n = drain(s, g, n, 64);
    n = drain(s, g, n, 64);
    int parts = 0, prefix = 1, mono = 1;
    uint32_t last = 0;
    const wire_msg_t *fs = final_of(g, n, "S"), *fn = final_of(g, n, "N");
    CHECK(fs && fn && fs->type == MSG_GEN && !strcmp(fs->u.gen.text, fn->u.gen.text), "streamed text = plain text");
    for (int i = 0; fs && i < n; i++) {
        if (g[i].m.type != MSG_GEN_PART) continue;
        CHECK(!strcmp(g[i].env, "S"), "a part for the request that did not ask");
        parts++;
        prefix &= !strncmp(fs->u.gen.text, g[i].m.u.gen_part.text, strlen(g[i].m.u.gen_part.text));
        mono &= g[i].m.u.gen_part.n_tokens == last + 1;
        last = g[i].m.u.gen_part.n_tokens;
    }
    CHECK(parts == 19 && prefix && mono, "%d parts (want 19: the 20th token is in the final gen), prefixes %d, counts %d",
          parts, prefix, mono);
    drop_all(g, n);
    sampler_server_free(&s);
}

/* A connection that went away has its work dropped without a reply; a stop answers the rest
 * "stopped". */
static void test_disconnect_and_stop(void) {
    sampler_server_t *s = server(MODEL_LLAMA, 3, 2, 4, "x", 1);
    if (!s) return;
    got_t g[16];
    msg_gen_req_t r = good();
    r.max_new = 30;
    send_req(s, "gone", 77, &r, 0);
    send_req(s, "gone2", 77, &r, 0);
    send_req(s, "gone3", 77, &r, 0); /* waiting */
    send_req(s, "here", 78, &r, 0);
    sampler_server_step(s, 0);
    sampler_server_disconnect(s, 77);
    sampler_server_disconnect(s, 0); /* unknown connections match nothing */
    CHECK(sampler_server_step(s, 0) == 1, "one request left");
    int n = drain(s, g, 0, 16);
    CHECK(n == 0, "no reply to a gone client");
    sampler_server_stop(s);
    CHECK(sampler_server_step(s, 0) == 0);
    n = drain(s, g, n, 16);
    CHECK(n == 1 && !strcmp(g[0].env, "here") && g[0].m.u.error.code == SERVE_ESTOPPED);
    drop_all(g, n);
    sampler_server_free(&s);
}

/* Model A serves; B is announced while A's rows run: they finish on A with A's text and name;
 * every request sent after the announcement runs on B with B's text, under a steady stream of
 * one new request a step; A is freed once its rows are done. C, announced while A still drains,
 * waits; requests sent after it run on C. */
static void test_reload_during_batch(void) {
    char soloA[NB][256], soloB[NB][256], soloC[NB][256], err[256];
    solo_texts(MODEL_LLAMA, 21, soloA);
    solo_texts(MODEL_LLAMA, 22, soloB);
    solo_texts(MODEL_LLAMA, 23, soloC);
    sampler_server_t *s = server(MODEL_LLAMA, 21, 6, 40, "A", 10);
    if (!s) return;
    model_config_t c = config(MODEL_LLAMA);
    got_t g[256];
    int n = 0, k = 0;
    char env[16];
    size_t mem1, mem2, cache;
    sampler_server_memory(s, &mem1, &cache);
    msg_gen_req_t r;
#define SEND(tag) do { r = batch_req(k % NB); snprintf(env, sizeof env, tag "%d", k % NB); send_req(s, env, 0, &r, 0); k++; } while (0)
    for (int i = 0; i < 4; i++) SEND("A");
    sampler_server_step(s, 0);
    sampler_server_step(s, 0);
    sampler_model_t *mb = NULL, *mc = NULL;
    CHECK(sampler_model_create(&mb, NULL, &c, 22, err, sizeof err) == 0);
    CHECK(sampler_server_reload(s, mb, "B", 20, err, sizeof err) == 0, "%s", err);
    CHECK(sampler_server_newest_step(s) == 20);
    sampler_server_memory(s, &mem2, &cache);
    CHECK(mem2 > mem1 * 19 / 10, "two models held while A drains: %zu then %zu bytes", mem1, mem2);
    int freed_at = -1;
    for (int step = 0; step < 40; step++) { /* a steady stream: one request a step */
        SEND("B");
        sampler_server_step(s, 0);
        sampler_server_memory(s, &mem2, &cache);
        if (freed_at < 0 && mem2 < mem1 * 11 / 10) freed_at = step;
    }
    CHECK(freed_at >= 0 && freed_at <= 31, "A freed after its rows finished, despite the stream (step %d)", freed_at);
    n = drain(s, g, n, 256);
    for (int i = 0; i < n; i++) {
        const wire_msg_t *m = &g[i].m;
        if (m->type != MSG_GEN) continue;
        const int kk = atoi(g[i].env + 1);
        const int onA = g[i].env[0] == 'A';
        CHECK(!strcmp(m->u.gen.ckpt, onA ? "A" : "B") && m->u.gen.step == (onA ? 10u : 20u), "%s answered by %s",
              g[i].env, m->u.gen.ckpt);
        CHECK(!strcmp(onA ? soloA[kk] : soloB[kk], m->u.gen.text), "%s: '%s' is not its model's text alone",
              g[i].env, m->u.gen.text);
    }
    /* a third checkpoint while two are held */
    CHECK(sampler_model_create(&mb, NULL, &c, 21, err, sizeof err) == 0);
    CHECK(sampler_server_reload(s, mb, "A2", 30, err, sizeof err) == 0, "%s", err); /* B drains now */
    CHECK(sampler_model_create(&mc, NULL, &c, 23, err, sizeof err) == 0);
    CHECK(sampler_server_reload(s, mc, "C", 40, err, sizeof err) == 0, "%s", err); /* waits for B */
    CHECK(sampler_server_newest_step(s) == 40);
    for (int i = 0; i < 3; i++) SEND("C");
    while (sampler_server_step(s, 0) > 0) {}
    int before = n;
    n = drain(s, g, n, 256);
    int onC = 0;
    for (int i = before; i < n; i++)
        if (g[i].env[0] == 'C') {
            onC++;
            CHECK(g[i].m.type == MSG_GEN && !strcmp(g[i].m.u.gen.ckpt, "C"), "%s answered by %s", g[i].env,
                  g[i].m.type == MSG_GEN ? g[i].m.u.gen.ckpt : "an error");
            CHECK(!strcmp(soloC[atoi(g[i].env + 1)], text_of(&g[i].m)), "%s: not C's text alone", g[i].env);
        }
    CHECK(onC == 3);
    sampler_server_memory(s, &mem2, &cache);
    CHECK(mem2 < mem1 * 11 / 10, "one model held at the end");
#undef SEND
    drop_all(g, n);
    sampler_server_free(&s);
}

int main(void) {
    char err[256];
    model_config_t c = config(MODEL_LLAMA);
    if (sampler_model_create(&sm, NULL, &c, 3, err, sizeof err) || bpe_vocab_make_bytes(&voc, err, sizeof err)) {
        fprintf(stderr, "setup: %s\n", err);
        return 1;
    }
    srv = server(MODEL_LLAMA, 3, 4, 8, "runs/x/ckpt-00000060", 60);
    if (!srv) return check_summary();
    RUN(test_good_request);
    RUN(test_bad_requests);
    RUN(test_bad_frames);
    RUN(test_error_text_utf8);
    sampler_server_free(&srv);
    CHECK(srv == NULL);
    sampler_model_free(&sm);
    RUN(test_batched_equals_solo_llama);
    RUN(test_batched_equals_solo_free);
    RUN(test_full_queue);
    RUN(test_cancel);
    RUN(test_deadline);
    RUN(test_stream);
    RUN(test_disconnect_and_stop);
    RUN(test_reload_during_batch);
    bpe_vocab_free(&voc);
    return check_summary();
}
