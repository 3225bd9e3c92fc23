/* tests/test_sampler_serve.c: the generation service's request handler without sockets:
 * a good request gives the command line's sample, every bad one an error reply with its code. */
#include "sampler/serve.h"
#include "sampler/text.h"
#include "tokenizer/bpe_io.h"
#include "tests/check.h"
#include "tests/mp_frame.h"
#include "bus/utf8.h"
#include <stdlib.h>
#include <string.h>

static sampler_model_t *sm;
static bpe_vocab_t *voc;
static sampler_server_t *srv;

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
    r.max_new = 0; expect_error(&r, SERVE_EPARAM, "max_new");
    r = good(); r.max_new = 33; expect_error(&r, SERVE_ELIMIT, "limit of 32");
    r = good(); r.top_p = 0.0; expect_error(&r, SERVE_EPARAM, "top-p");
    r = good(); r.temperature = -1.0; expect_error(&r, SERVE_EPARAM, "temperature");
    r = good(); r.group = 0; expect_error(&r, SERVE_EPARAM, "group");
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

int main(void) {
    char err[256];
    model_config_t c = {.kind = MODEL_LLAMA, .vocab_size = 257, .d_model = 32, .n_layers = 2,
                        .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 48,
                        .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1, .eot_id = 256};
    if (sampler_model_create(&sm, NULL, &c, 3, err, sizeof err) || bpe_vocab_make_bytes(&voc, err, sizeof err)) {
        fprintf(stderr, "setup: %s\n", err);
        return 1;
    }
    sampler_serve_opts_t o = {.bind = "unused", .ckpt = "runs/x/ckpt-00000060", .step = 60,
                              .vocab = voc, .max_prompt = 32, .max_new = 32, .quiet = 1};
    if (sampler_server_new(&srv, sm, &o, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    RUN(test_good_request);
    RUN(test_bad_requests);
    RUN(test_bad_frames);
    RUN(test_error_text_utf8);
    sampler_server_free(&srv);
    CHECK(srv == NULL);
    sampler_model_free(&sm);
    bpe_vocab_free(&voc);
    return check_summary();
}
