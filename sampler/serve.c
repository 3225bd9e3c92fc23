/* sampler/serve.c: the generation service and its client (see serve.h). */
#include "sampler/serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/net.h"
#include "bus/utf8.h"
#include "common/path_inside.h"
#include "sampler/text.h"

#define SERVE_MAX_FRAMES 16  /* envelope frames echoed; a request with more is dropped */

struct sampler_server {
    sampler_model_t *sm;
    sampler_serve_opts_t o;
    char ckpt[WIRE_MAX_STR + 1]; /* reported in every "gen": kept as UTF-8 (a path may not be) */
    int64_t step;
    char refused[WIRE_MAX_STR + 1]; /* the last announced path outside the run directory */
};

static void set_ckpt(sampler_server_t *s, const char *path) {
    wire_utf8_clean(s->ckpt, sizeof s->ckpt, path, strlen(path));
}

int sampler_server_new(sampler_server_t **ps, sampler_model_t *sm, const sampler_serve_opts_t *o,
                       char *err, size_t errlen) {
    *ps = NULL;
    if (!sm || !o || !o->vocab) { snprintf(err, errlen, "server: missing model or vocabulary"); return SAMPLER_EARG; }
    sampler_server_t *s = calloc(1, sizeof(*s));
    if (!s) { snprintf(err, errlen, "out of memory"); return SAMPLER_ENOMEM; }
    s->sm = sm;
    s->o = *o;
    set_ckpt(s, o->ckpt ? o->ckpt : "");
    s->step = o->step;
    *ps = s;
    return 0;
}

void sampler_server_free(sampler_server_t **ps) {
    if (!ps || !*ps) return;
    free(*ps);
    *ps = NULL;
}

static void encode_reply(const wire_msg_t *m, void **reply, size_t *rlen) {
    *reply = NULL;
    *rlen = 0;
    if (wire_encode(m, reply, rlen) != 0) { *reply = NULL; *rlen = 0; }
}

static void reply_error(uint64_t id, int code, const char *msg, void **reply, size_t *rlen) {
    if (wire_error_encode(id, code, msg, reply, rlen) != 0) { *reply = NULL; *rlen = 0; }
}

/* Cuts a valid UTF-8 string to at most cap bytes without splitting a character. */
static size_t utf8_cut(const char *s, size_t len, size_t cap) {
    if (len <= cap) return len;
    size_t n = cap;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

void sampler_server_handle(sampler_server_t *s, const void *body, size_t len, void **reply,
                           size_t *rlen) {
    char err[600], msg[700];
    wire_msg_t m;
    wire_diag_t d;
    if (wire_decode_diag(body, len, &m, &d, err, sizeof err) != 0) {
        snprintf(msg, sizeof msg, "malformed request: %s", err);
        reply_error(d.has_req_id ? d.req_id : 0, SERVE_EMALFORMED, msg, reply, rlen);
        return;
    }
    uint32_t *ids = NULL;
    char *text = NULL, *clean = NULL;
    sampler_result_t res = {0};
    if (m.type != MSG_GEN_REQ) {
        snprintf(msg, sizeof msg, "a %s message is not served here (send gen_req)", wire_type_name(m.type));
        reply_error(d.has_req_id ? d.req_id : 0, SERVE_ETYPE, msg, reply, rlen);
        goto out;
    }
    const msg_gen_req_t *r = &m.u.gen_req;
    const model_config_t *c = sampler_model_config(s->sm);
    sampler_opts_t so = {.n = 1, .max_new = (int)r->max_new, .seed = r->seed, .group = (int)r->group,
                         .stop_at_eot = (r->flags & 1) != 0, .first = r->index,
                         .sample = {(float)r->temperature, (int)(r->top_k > (1u << 30) ? 1u << 30 : r->top_k),
                                    (float)r->top_p}};
#define FAIL(code, ...) do { snprintf(msg, sizeof msg, __VA_ARGS__); reply_error(r->req_id, code, msg, reply, rlen); goto out; } while (0)
    if (r->flags & ~3u) FAIL(SERVE_EPARAM, "flags %u: only bits 0 (stop at eot) and 1 (eot prefix) exist", r->flags);
    if (!r->latent || !strcmp(r->latent, "independent")) so.latent = SAMPLER_LATENT_INDEPENDENT;
    else if (!strcmp(r->latent, "shared")) so.latent = SAMPLER_LATENT_SHARED;
    else FAIL(SERVE_EPARAM, "latent '%.40s' is not independent or shared", r->latent);
    if (r->max_new == 0 || r->group == 0 || !isfinite(r->temperature) || !isfinite(r->top_p))
        FAIL(SERVE_EPARAM, "max_new and group must be >= 1, temperature and top_p finite");
    if (r->max_new > (uint32_t)s->o.max_new)
        FAIL(SERVE_ELIMIT, "max_new %u exceeds this server's limit of %d", r->max_new, s->o.max_new);
    if (sampler_opts_check(&so, err, sizeof err)) FAIL(SERVE_EPARAM, "%s", err);
    int P;
    const char *prompt = r->prompt ? r->prompt : "";
    if (sampler_text_encode(s->o.vocab, prompt, strlen(prompt), (r->flags & 2) != 0, (uint32_t)c->eot_id,
                            &ids, &P, err, sizeof err))
        FAIL(SERVE_EMODEL, "%s", err);
    if (P == 0) FAIL(SERVE_EPARAM, "empty prompt (set flags bit 1 to start from end-of-text)");
    if (P > s->o.max_prompt)
        FAIL(SERVE_ELIMIT, "prompt of %d tokens exceeds this server's limit of %d", P, s->o.max_prompt);
    int rc = sampler_generate(s->sm, ids, P, &so, &res, err, sizeof err);
    if (rc == SAMPLER_EMISMATCH) FAIL(SERVE_ELIMIT, "%s", err);
    if (rc) FAIL(SERVE_EMODEL, "%s", err);
    size_t tlen;
    if (!(text = sampler_text_decode(s->o.vocab, res.ids, res.len[0], &tlen)) ||
        !(clean = sampler_text_utf8(text, tlen)))
        FAIL(SERVE_EMODEL, "out of memory");
    size_t clen = strlen(clean), cut = utf8_cut(clean, clen, WIRE_MAX_STR);
    clean[cut] = 0;
    wire_msg_t g = {.type = MSG_GEN};
    g.u.gen.req_id = r->req_id;
    g.u.gen.text = clean;
    g.u.gen.n_tokens = (uint32_t)res.len[0];
    g.u.gen.stop = cut < clen ? "truncated" : res.stopped[0] ? "eot" : "length";
    g.u.gen.ckpt = s->ckpt;
    g.u.gen.step = s->step < 0 ? 0 : (uint64_t)s->step;
    encode_reply(&g, reply, rlen);
#undef FAIL
out:
    sampler_result_free(&res);
    free(ids);
    free(text);
    free(clean);
    wire_msg_free(&m);
}

/* ---- the socket loop ------------------------------------------------------------------- */

/* Reads one multipart request off the ROUTER and answers it. */
static void serve_one(sampler_server_t *s, void *router) {
    zmq_msg_t f[SERVE_MAX_FRAMES], tmp;
    int n = 0, more = 1, over = 0;
    while (more) {
        zmq_msg_t *cur = n < SERVE_MAX_FRAMES ? &f[n] : &tmp;
        zmq_msg_init(cur);
        if (zmq_msg_recv(cur, router, n == 0 && !over ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(cur);
            break;
        }
        more = zmq_msg_more(cur);
        if (cur == &tmp) { zmq_msg_close(cur); over = 1; } else n++;
    }
    if (n >= 2 && !over) {
        void *reply = NULL;
        size_t rlen = 0;
        zmq_msg_t *body = &f[n - 1];
        sampler_server_handle(s, zmq_msg_data(body), zmq_msg_size(body), &reply, &rlen);
        if (reply) {
            /* the envelope goes back as it came; a sent frame belongs to zmq, so close() on
             * it below is a no-op (zmq_msg_send leaves it empty) */
            for (int i = 0; i < n - 1; i++) zmq_msg_send(&f[i], router, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(router, reply, rlen, ZMQ_DONTWAIT); /* ROUTER drops unroutable replies */
        }
        free(reply);
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

/* A ckpt event (or the bus's welcome index) for the followed run: load it if newer. */
static void maybe_reload(sampler_server_t *s, sampler_model_t **sm, const wire_msg_t *m) {
    const msg_ckpt_t *ck = NULL;
    if (m->type == MSG_CKPT && !strcmp(m->u.ckpt.run, s->o.follow)) ck = &m->u.ckpt;
    if (m->type == MSG_CKPT_INDEX)
        for (uint32_t i = 0; i < m->u.ckpt_index.n; i++)
            if (!strcmp(m->u.ckpt_index.items[i].run, s->o.follow)) ck = &m->u.ckpt_index.items[i];
    if (!ck || !ck->path || (int64_t)ck->step <= s->step) return;
    if (!path_inside(s->o.run_dir, ck->path)) {
        /* the bus says which checkpoint, never where: only the run directory is opened */
        if (strcmp(s->refused, ck->path)) /* once, not on every repeat of the welcome index */
            fprintf(stderr, "sampler: not reloading %s: not a checkpoint inside the run directory %s\n",
                    ck->path, s->o.run_dir ? s->o.run_dir : "(none)");
        snprintf(s->refused, sizeof s->refused, "%s", ck->path);
        return;
    }
    char err[1024];
    sampler_model_t *nm = NULL;
    if (sampler_model_load(&nm, sampler_model_device(s->sm), ck->path, err, sizeof err)) {
        fprintf(stderr, "sampler: not reloading: %s\n", err);
        return;
    }
    if (sampler_model_config(nm)->vocab_size != sampler_model_config(*sm)->vocab_size) {
        fprintf(stderr, "sampler: not reloading %s: vocab_size %d, serving %d\n", ck->path,
                sampler_model_config(nm)->vocab_size, sampler_model_config(*sm)->vocab_size);
        sampler_model_free(&nm);
        return;
    }
    sampler_model_free(sm);
    *sm = nm;
    s->sm = nm;
    set_ckpt(s, ck->path);
    s->step = (int64_t)ck->step;
    if (!s->o.quiet) fprintf(stderr, "sampler: reloaded %s (step %lld)\n", s->ckpt, (long long)s->step);
}

int sampler_serve(sampler_model_t **sm, const sampler_serve_opts_t *o, char *err, size_t errlen) {
    sampler_server_t *s = NULL;
    int rc = sampler_server_new(&s, *sm, o, err, errlen);
    if (rc) return rc;
    bus_signals_install();
    void *ctx = zmq_ctx_new(), *router = NULL, *sub = NULL;
    if (!ctx) { snprintf(err, errlen, "zmq_ctx_new failed"); rc = SAMPLER_EARG; goto out; }
    char why[512];
    if (!(router = bus_net_socket(ctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, why, sizeof why)) ||
        bus_net_bind(ctx, router, o->bind, why, sizeof why) != 0) {
        snprintf(err, errlen, "--serve %s: %s", o->bind, why);
        rc = SAMPLER_EARG;
        goto out;
    }
    if (o->follow) {
        /* "ckpt/" and not "ckpt/<run>": the bus's welcome index comes under "ckpt/" */
        const char *prefix = "ckpt/";
        if (!(sub = bus_sub_open(ctx, o->bus_sub, &prefix, 1, why, sizeof why))) {
            snprintf(err, errlen, "bus %s: %s", o->bus_sub, why);
            rc = SAMPLER_EARG;
            goto out;
        }
    }
    if (!o->quiet)
        fprintf(stderr, "sampler: serving %s on %s%s%s\n", s->ckpt, o->bind,
                o->follow ? ", following run " : "", o->follow ? o->follow : "");
    while (!bus_signal_received()) {
        zmq_pollitem_t it[2] = {{router, 0, ZMQ_POLLIN, 0}, {sub, 0, ZMQ_POLLIN, 0}};
        int np = zmq_poll(it, sub ? 2 : 1, 500);
        if (np < 0) {
            if (zmq_errno() == EINTR) continue;
            snprintf(err, errlen, "poll: %s", zmq_strerror(zmq_errno()));
            rc = SAMPLER_EARG;
            goto out;
        }
        if (it[0].revents & ZMQ_POLLIN) serve_one(s, router);
        if (sub && (it[1].revents & ZMQ_POLLIN)) {
            char topic[WIRE_MAX_TOPIC + 1], why[256];
            wire_msg_t m;
            if (bus_recv(sub, 0, topic, sizeof topic, &m, why, sizeof why) == 0) {
                maybe_reload(s, sm, &m);
                wire_msg_free(&m);
            }
        }
    }
    if (!o->quiet) fprintf(stderr, "sampler: stopped by signal\n");
    rc = 0;
out:
    bus_close(&sub);
    if (router) zmq_close(router);
    if (ctx) zmq_ctx_term(ctx);
    sampler_server_free(&s);
    return rc;
}

int sampler_client_request(const char *endpoint, const wire_msg_t *req, wire_msg_t *rep,
                           int timeout_ms, char *err, size_t errlen) {
    char why[512] = "zmq_ctx_new failed";
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? bus_net_socket(ctx, ZMQ_DEALER, BUS_PEER_REPLIES, why, sizeof why) : NULL;
    int rc;
    if (!sock || bus_net_connect(sock, endpoint, why, sizeof why) != 0) {
        snprintf(err, errlen, "--connect %s: %s", endpoint, why);
        rc = SAMPLER_EARG;
    } else {
        /* a DEALER has no pipe until the connection is up: give it a moment before sending */
        rc = BUS_TIMEOUT;
        for (int waited = 0; rc == BUS_TIMEOUT && waited <= timeout_ms; waited += 50) {
            rc = bus_request(sock, req, rep, timeout_ms, err, errlen);
            if (rc == BUS_TIMEOUT && strstr(err, "no peer")) zmq_poll(NULL, 0, 50);
            else break;
        }
        if (rc == BUS_TIMEOUT) snprintf(err, errlen, "%s: no reply within %d ms", endpoint, timeout_ms);
    }
    if (sock) zmq_close(sock);
    if (ctx) zmq_ctx_term(ctx);
    return rc;
}
