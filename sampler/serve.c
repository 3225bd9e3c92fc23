/* sampler/serve.c: the generation service without its sockets (see serve.h): requests,
 * the queue, the batch, deadlines, cancellation, streaming, and the reload under load. */
#include "sampler/serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bus/log.h"
#include "bus/utf8.h"
#include "sampler/engine.h"
#include "sampler/model_impl.h"
#include "sampler/text.h"

typedef struct req {
    struct req *next;      /* in the queue */
    void *env;             /* the envelope, echoed with every reply */
    size_t envlen;
    uint64_t conn;         /* the connection (0: unknown) */
    uint64_t req_id;
    int stream;
    double deadline;       /* ms on the caller's clock; 0: none */
    engine_req_t er;
    uint32_t *ids;         /* the prompt's ids (er.prompt) */
} req_t;

/* A model with its engine and the requests on its rows. */
typedef struct {
    sampler_model_t *sm;
    engine_t *eng;
    req_t **on_row;        /* (max_batch) */
    int rows;              /* rows in use */
    char ckpt[WIRE_MAX_STR + 1]; /* reported in every "gen" (UTF-8: a path may not be) */
    int64_t step;
} held_t;

typedef struct out {
    struct out *next;
    void *env, *body;
    size_t envlen, len;
} out_t;

struct sampler_server {
    sampler_serve_opts_t o;
    held_t held[2];        /* held[cur]: new requests run there; the other drains */
    int cur;
    sampler_model_t *waiting; /* a third checkpoint, loaded, installed once the older drains */
    char waiting_ckpt[WIRE_MAX_STR + 1];
    int64_t waiting_step;
    bus_log_t log, log_q;  /* its lines (bus/log.h); log_q's are those --quiet keeps off stderr */
    req_t *qhead, *qtail;  /* requests waiting for a row, oldest first */
    int queued;
    out_t *ohead, *otail;  /* replies waiting to be sent */
};

static void set_ckpt(char *dst, const char *path) {
    wire_utf8_clean(dst, WIRE_MAX_STR + 1, path, strlen(path));
}

/* ---- replies ----------------------------------------------------------------------------- */

static void push_out(sampler_server_t *s, const req_t *r, const void *env, size_t envlen, void *body,
                     size_t len) {
    out_t *o = body ? calloc(1, sizeof *o) : NULL;
    if (r) env = r->env, envlen = r->envlen;
    if (o && (o->env = malloc(envlen ? envlen : 1))) {
        memcpy(o->env, env, envlen);
        o->envlen = envlen;
        o->body = body;
        o->len = len;
        if (s->otail) s->otail->next = o; else s->ohead = o;
        s->otail = o;
        return;
    }
    free(o);
    free(body); /* out of memory: the reply is lost, as a full send queue would lose it */
}

static void reply_msg(sampler_server_t *s, const req_t *r, const void *env, size_t envlen,
                      const wire_msg_t *m) {
    void *body = NULL;
    size_t len = 0;
    if (wire_encode(m, &body, &len) != 0) body = NULL;
    push_out(s, r, env, envlen, body, len);
}

static void reply_error(sampler_server_t *s, const req_t *r, const void *env, size_t envlen,
                        uint64_t id, int code, const char *msg) {
    void *body = NULL;
    size_t len = 0;
    if (wire_error_encode(id, code, msg, &body, &len) != 0) body = NULL;
    push_out(s, r, env, envlen, body, len);
}

int sampler_server_reply(sampler_server_t *s, void **env, size_t *envlen, void **body, size_t *len) {
    out_t *o = s->ohead;
    if (!o) return 0;
    s->ohead = o->next;
    if (!s->ohead) s->otail = NULL;
    *env = o->env;
    *envlen = o->envlen;
    *body = o->body;
    *len = o->len;
    free(o);
    return 1;
}

/* Cuts a valid UTF-8 string to at most cap bytes without splitting a character. */
static size_t utf8_cut(const char *s, size_t len, size_t cap) {
    if (len <= cap) return len;
    size_t n = cap;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

/* Bytes of s (len) up to its last complete character: a streamed part leaves a character whose
 * tokens have not all come yet for a later part, instead of showing U+FFFD for it. */
static size_t whole_chars(const char *s, size_t len) {
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        const unsigned char c = (unsigned char)s[len - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

/* The text of ids as the wire carries it: UTF-8 (other bytes as U+FFFD), at most
 * WIRE_MAX_STR bytes; *cut set when it was longer. NULL when out of memory. */
static char *wire_text(const sampler_server_t *s, const uint32_t *ids, int n, int partial, int *cut) {
    size_t tlen;
    char *text = sampler_text_decode(s->o.vocab, ids, n, &tlen);
    if (!text) return NULL;
    if (partial) tlen = whole_chars(text, tlen);
    char *clean = sampler_text_utf8(text, tlen);
    free(text);
    if (!clean) return NULL;
    size_t clen = strlen(clean), keep = utf8_cut(clean, clen, WIRE_MAX_STR);
    clean[keep] = 0;
    *cut = keep < clen;
    return clean;
}

static void reply_part(sampler_server_t *s, const req_t *r, const engine_row_t *w) {
    int cut;
    char *text = wire_text(s, w->ids, w->len, 1, &cut);
    if (!text) return; /* a part may be skipped; the final reply carries everything */
    wire_msg_t m = {.type = MSG_GEN_PART};
    m.u.gen_part = (msg_gen_part_t){.req_id = r->req_id, .text = text, .n_tokens = (uint32_t)w->len};
    reply_msg(s, r, NULL, 0, &m);
    free(text);
}

static void reply_gen(sampler_server_t *s, const req_t *r, const engine_row_t *w, const held_t *h) {
    int cut;
    char *text = wire_text(s, w->ids, w->len, 0, &cut);
    if (!text) {
        reply_error(s, r, NULL, 0, r->req_id, SERVE_EMODEL, "out of memory");
        return;
    }
    wire_msg_t m = {.type = MSG_GEN};
    m.u.gen = (msg_gen_t){.req_id = r->req_id, .text = text, .n_tokens = (uint32_t)w->len,
                          .stop = cut ? "truncated" : w->stopped ? "eot" : "length",
                          .ckpt = (char *)h->ckpt, .step = h->step < 0 ? 0 : (uint64_t)h->step};
    reply_msg(s, r, NULL, 0, &m);
    free(text);
}

/* ---- requests ---------------------------------------------------------------------------- */

static void req_free(req_t *r) {
    if (!r) return;
    free(r->env);
    free(r->ids);
    free(r);
}

static int rows_in_use(const sampler_server_t *s) { return s->held[0].rows + s->held[1].rows; }

/* The positions of a row: a prompt and its output, within the model. */
static int row_positions(const sampler_server_t *s, const sampler_model_t *sm) {
    long p = (long)s->o.max_prompt + s->o.max_new;
    return p < sampler_model_config(sm)->max_seq ? (int)p : sampler_model_config(sm)->max_seq;
}

/* A checked gen_req as a queued request, or NULL after answering it with an error. */
static req_t *admit_check(sampler_server_t *s, const msg_gen_req_t *r, const void *env, size_t envlen,
                          uint64_t conn, double now) {
    char err[600], msg[700];
    const sampler_model_t *sm = s->held[s->cur].sm;
    const model_config_t *c = sampler_model_config(sm);
    req_t *q = calloc(1, sizeof *q);
#define FAIL(code, ...) do { snprintf(msg, sizeof msg, __VA_ARGS__); goto fail_##code; } while (0)
    int code = SERVE_EMODEL;
    if (!q || !(q->env = malloc(envlen ? envlen : 1))) { snprintf(msg, sizeof msg, "out of memory"); goto fail; }
    memcpy(q->env, env, envlen);
    q->envlen = envlen;
    q->conn = conn;
    q->req_id = r->req_id;
    q->stream = r->stream;
    q->deadline = r->deadline_ms ? now + r->deadline_ms : 0;
    q->er = (engine_req_t){.max_new = (int)r->max_new, .seed = r->seed, .index = r->index,
                           .group = (int)r->group, .stop_at_eot = (r->flags & 1) != 0,
                           .sample = {(float)r->temperature,
                                      (int)(r->top_k > (1u << 30) ? 1u << 30 : r->top_k), (float)r->top_p}};
    if (r->flags & ~3u) FAIL(PARAM, "flags %u: only bits 0 (stop at eot) and 1 (eot prefix) exist", r->flags);
    if (!r->latent || !strcmp(r->latent, "independent")) q->er.latent = SAMPLER_LATENT_INDEPENDENT;
    else if (!strcmp(r->latent, "shared")) q->er.latent = SAMPLER_LATENT_SHARED;
    else FAIL(PARAM, "latent '%.40s' is not independent or shared", r->latent);
    /* each field by name: one message for four causes left the client to guess which */
    if (r->max_new == 0) FAIL(PARAM, "max_new 0: at least 1 token");
    if (r->group == 0) FAIL(PARAM, "group 0: at least 1 sample");
    if (!isfinite(r->temperature)) FAIL(PARAM, "temperature %g is not a finite number", r->temperature);
    if (!isfinite(r->top_p)) FAIL(PARAM, "top_p %g is not a finite number", r->top_p);
    if (r->max_new > (uint32_t)s->o.max_new)
        FAIL(LIMIT, "max_new %u exceeds this server's limit of %d", r->max_new, s->o.max_new);
    if (sample_opts_check(&q->er.sample, err, sizeof err)) FAIL(PARAM, "%s", err);
    const char *prompt = r->prompt ? r->prompt : "";
    if (sampler_text_encode(s->o.vocab, prompt, strlen(prompt), (r->flags & 2) != 0, (uint32_t)c->eot_id,
                            &q->ids, &q->er.P, err, sizeof err))
        FAIL(MODEL, "%s", err);
    q->er.prompt = q->ids;
    if (q->er.P == 0) FAIL(PARAM, "empty prompt (set flags bit 1 to start from end-of-text)");
    if (q->er.P > s->o.max_prompt)
        FAIL(LIMIT, "prompt of %d tokens exceeds this server's limit of %d", q->er.P, s->o.max_prompt);
    if ((long)q->er.P + q->er.max_new > c->max_seq)
        FAIL(LIMIT, "prompt of %d tokens + max-new %d exceed the model's max_seq %d", q->er.P,
             q->er.max_new, c->max_seq);
    if (rows_in_use(s) + s->queued >= s->o.max_batch + s->o.max_queue) {
        code = SERVE_EBUSY;
        snprintf(msg, sizeof msg, "busy: %d rows decoding and %d requests waiting (--max-batch %d, "
                 "--max-queue %d); try again later", rows_in_use(s), s->queued, s->o.max_batch, s->o.max_queue);
        goto fail;
    }
    return q;
fail_PARAM: code = SERVE_EPARAM; goto fail;
fail_LIMIT: code = SERVE_ELIMIT; goto fail;
fail_MODEL: code = SERVE_EMODEL;
fail:
    reply_error(s, NULL, env, envlen, r->req_id, code, msg);
    req_free(q);
    return NULL;
#undef FAIL
}

/* Every request for which drop(q, ctx) holds leaves the queue and its row, answered with
 * code/msg (code 0: unanswered). */
static int drop_where(sampler_server_t *s, int (*drop)(const req_t *, const void *), const void *ctx,
                      int code, const char *msg) {
    int n = 0;
    for (req_t **pp = &s->qhead, *prev = NULL; *pp;) {
        req_t *q = *pp;
        if (!drop(q, ctx)) {
            prev = q;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        if (s->qtail == q) s->qtail = prev;
        s->queued--;
        if (code) reply_error(s, q, NULL, 0, q->req_id, code, msg);
        req_free(q);
        n++;
    }
    for (int h = 0; h < 2; h++) {
        held_t *hd = &s->held[h];
        for (int i = 0; hd->sm && i < engine_max_batch(hd->eng); i++) {
            req_t *q = hd->on_row[i];
            if (!q || !drop(q, ctx)) continue;
            if (code) reply_error(s, q, NULL, 0, q->req_id, code, msg);
            engine_release(hd->eng, i);
            hd->on_row[i] = NULL;
            hd->rows--;
            req_free(q);
            n++;
        }
    }
    return n;
}

static int of_conn(const req_t *q, const void *ctx) { return q->conn && q->conn == *(const uint64_t *)ctx; }
static int expired(const req_t *q, const void *ctx) { return q->deadline > 0 && *(const double *)ctx >= q->deadline; }
static int any(const req_t *q, const void *ctx) { (void)q; (void)ctx; return 1; }

typedef struct {
    const void *env;
    size_t envlen;
    uint64_t req_id;
} cancel_t;
static int cancelled(const req_t *q, const void *ctx) {
    const cancel_t *c = ctx;
    return q->req_id == c->req_id && q->envlen == c->envlen && !memcmp(q->env, c->env, c->envlen);
}

void sampler_server_request(sampler_server_t *s, const void *env, size_t envlen, uint64_t conn,
                            const void *body, size_t len, double now) {
    char err[600], msg[700];
    wire_msg_t m;
    wire_diag_t d;
    if (wire_decode_diag(body, len, &m, &d, err, sizeof err) != 0) {
        snprintf(msg, sizeof msg, "malformed request: %s", err);
        reply_error(s, NULL, env, envlen, d.has_req_id ? d.req_id : 0, SERVE_EMALFORMED, msg);
        return;
    }
    if (m.type == MSG_GEN_REQ) {
        req_t *q = admit_check(s, &m.u.gen_req, env, envlen, conn, now);
        if (q) {
            if (s->qtail) s->qtail->next = q; else s->qhead = q;
            s->qtail = q;
            s->queued++;
        }
    } else if (m.type == MSG_GEN_CANCEL) {
        /* the request of this connection with that req_id, waiting or running; none: nothing */
        const cancel_t c = {env, envlen, m.u.gen_cancel.req_id};
        drop_where(s, cancelled, &c, SERVE_ECANCELLED, "cancelled by gen_cancel");
    } else {
        snprintf(msg, sizeof msg, "a %s message is not served here (send gen_req or gen_cancel)",
                 wire_type_name(m.type));
        reply_error(s, NULL, env, envlen, d.has_req_id ? d.req_id : 0, SERVE_ETYPE, msg);
    }
    wire_msg_free(&m);
}

void sampler_server_disconnect(sampler_server_t *s, uint64_t conn) {
    int n = drop_where(s, of_conn, &conn, 0, NULL);
    if (n) bus_log(&s->log_q, "a client went away: dropped its %d request(s)", n);
}

void sampler_server_stop(sampler_server_t *s) {
    drop_where(s, any, NULL, SERVE_ESTOPPED, "the server stopped before the text was complete");
}

/* ---- models ------------------------------------------------------------------------------ */

static int hold(sampler_server_t *s, held_t *h, sampler_model_t *sm, const char *ckpt, int64_t step,
                char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    int rc = engine_create(&h->eng, sm, s->o.max_batch, row_positions(s, sm), err, errlen);
    if (!rc) engine_set_parallel_rows(h->eng, s->o.parallel_rows);
    if (!rc && !(h->on_row = calloc(s->o.max_batch, sizeof *h->on_row))) {
        engine_destroy(&h->eng);
        rc = SAMPLER_ENOMEM;
        snprintf(err, errlen, "out of memory");
    }
    if (rc) {
        sampler_model_free(&sm);
        return rc;
    }
    h->sm = sm;
    set_ckpt(h->ckpt, ckpt ? ckpt : "");
    h->step = step;
    return 0;
}

static void unhold(held_t *h) {
    engine_destroy(&h->eng);
    sampler_model_free(&h->sm);
    free(h->on_row);
    memset(h, 0, sizeof *h);
}

static size_t model_bytes(const sampler_model_t *sm) {
    model_memory_t mm = {0};
    if (sm->llama) llama_memory(sm->llama, &mm);
    else if (sm->free) free_memory(sm->free, &mm);
    else if (sm->ltm) ltm_memory(sm->ltm, &mm);
    else if (sm->mixer) mixers_memory(sm->mixer, &mm);
    return mm.params + mm.grads + mm.activations;
}

void sampler_server_memory(const sampler_server_t *s, size_t *total, size_t *cache) {
    *total = *cache = 0;
    for (int h = 0; h < 2; h++)
        if (s->held[h].sm) {
            /* the engine's encoder activations are counted in the model's */
            *total += model_bytes(s->held[h].sm) + engine_bytes(s->held[h].eng);
            *cache += engine_cache_bytes(s->held[h].eng);
        }
    if (s->waiting) *total += model_bytes(s->waiting);
}

static void log_memory(const sampler_server_t *s, const char *what) {
    size_t total, cache;
    char a[32], b[32];
    sampler_server_memory(s, &total, &cache);
    bus_log(&s->log_q, "%s: %s on the device, of which key/value caches %s", what,
            device_bytes_str(total, a, sizeof a), device_bytes_str(cache, b, sizeof b));
}

int sampler_server_new(sampler_server_t **ps, sampler_model_t *sm, const sampler_serve_opts_t *o,
                       char *err, size_t errlen) {
    *ps = NULL;
    if (!sm || !o || !o->vocab || o->max_batch < 1 || o->max_queue < 0 || o->max_prompt < 1 || o->max_new < 1) {
        snprintf(err, errlen, "server: missing model or vocabulary, or a limit below 1");
        sampler_model_free(&sm);
        return SAMPLER_EARG;
    }
    sampler_server_t *s = calloc(1, sizeof(*s));
    if (!s) { sampler_model_free(&sm); snprintf(err, errlen, "out of memory"); return SAMPLER_ENOMEM; }
    s->o = *o;
    s->log = (bus_log_t){"sampler", NULL, 0};
    s->log_q = (bus_log_t){"sampler", NULL, o->quiet};
    int rc = hold(s, &s->held[0], sm, o->ckpt, o->step, err, errlen);
    if (rc) { free(s); return rc; }
    *ps = s;
    return 0;
}

void sampler_server_free(sampler_server_t **ps) {
    if (!ps || !*ps) return;
    sampler_server_t *s = *ps;
    drop_where(s, any, NULL, 0, NULL);
    unhold(&s->held[0]);
    unhold(&s->held[1]);
    sampler_model_free(&s->waiting);
    void *e, *b;
    size_t el, bl;
    while (sampler_server_reply(s, &e, &el, &b, &bl)) free(e), free(b);
    free(s);
    *ps = NULL;
}

void sampler_server_set_bus(sampler_server_t *s, void *pub) {
    s->log.pub = s->log_q.pub = pub;
}

int64_t sampler_server_newest_step(const sampler_server_t *s) {
    return s->waiting ? s->waiting_step : s->held[s->cur].step;
}

int sampler_server_reload(sampler_server_t *s, sampler_model_t *nm, const char *ckpt, int64_t step,
                          char *err, size_t errlen) {
    held_t *other = &s->held[1 - s->cur];
    if (other->sm) {
        /* two held already: this one waits until the older has drained (the newest wins) */
        sampler_model_free(&s->waiting);
        s->waiting = nm;
        set_ckpt(s->waiting_ckpt, ckpt ? ckpt : "");
        s->waiting_step = step;
        bus_log(&s->log_q, "%s waits until the %d row(s) of %s finish", s->waiting_ckpt,
                    other->rows, other->ckpt);
        return 0;
    }
    int rc = hold(s, other, nm, ckpt, step, err, errlen);
    if (rc) return rc;
    const int old = s->cur;
    s->cur = 1 - s->cur;
    if (!s->o.quiet) {
        char what[WIRE_MAX_STR + 128];
        snprintf(what, sizeof what, "reloaded %s (step %lld); %d row(s) finish on %s", s->held[s->cur].ckpt,
                 (long long)step, s->held[old].rows, s->held[old].ckpt);
        log_memory(s, what);
    }
    if (!s->held[old].rows) unhold(&s->held[old]);
    return 0;
}

/* The older model, once its last row has left, is freed, and a waiting checkpoint takes the
 * place of the newest. */
static void retire_drained(sampler_server_t *s) {
    held_t *old = &s->held[1 - s->cur];
    if (!old->sm || old->rows) return;
    bus_log(&s->log_q, "the last row on %s finished; its model is freed", old->ckpt);
    unhold(old);
    if (s->waiting) {
        char err[1024];
        sampler_model_t *nm = s->waiting;
        s->waiting = NULL;
        if (sampler_server_reload(s, nm, s->waiting_ckpt, s->waiting_step, err, sizeof err))
            bus_log(&s->log, "not reloading %s: %s", s->waiting_ckpt, err);
    }
}

/* ---- the batch --------------------------------------------------------------------------- */

static void admit(sampler_server_t *s) {
    held_t *h = &s->held[s->cur];
    char err[600];
    while (s->qhead && !s->waiting && rows_in_use(s) < s->o.max_batch && engine_free_rows(h->eng) > 0) {
        req_t *q = s->qhead;
        s->qhead = q->next;
        if (!s->qhead) s->qtail = NULL;
        q->next = NULL;
        s->queued--;
        int row = engine_add(h->eng, &q->er, err, sizeof err);
        if (row < 0) {
            reply_error(s, q, NULL, 0, q->req_id, row == SAMPLER_EMISMATCH ? SERVE_ELIMIT : SERVE_EMODEL, err);
            req_free(q);
            continue;
        }
        h->on_row[row] = q;
        h->rows++;
    }
}

/* After a step of h: parts for streamed rows that grew, the final reply for finished ones. */
static void answer(sampler_server_t *s, held_t *h) {
    for (int i = 0; i < engine_max_batch(h->eng); i++) {
        req_t *q = h->on_row[i];
        const engine_row_t *w = engine_row(h->eng, i);
        if (!q) continue;
        if (w->state == ENGINE_DONE) {
            reply_gen(s, q, w, h);
            engine_release(h->eng, i);
            h->on_row[i] = NULL;
            h->rows--;
            req_free(q);
        } else if (q->stream && w->grew) {
            reply_part(s, q, w);
        }
    }
}

int sampler_server_step(sampler_server_t *s, double now) {
    drop_where(s, expired, &now, SERVE_EDEADLINE, "deadline_ms passed before the text was complete");
    retire_drained(s);
    admit(s);
    char err[1024], msg[1100];
    for (int k = 0; k < 2; k++) {
        held_t *h = &s->held[k];
        if (!h->sm || !engine_active(h->eng)) continue;
        if (engine_step(h->eng, err, sizeof err)) {
            snprintf(msg, sizeof msg, "generation failed: %s", err);
            for (int i = 0; i < engine_max_batch(h->eng); i++)
                if (h->on_row[i]) {
                    reply_error(s, h->on_row[i], NULL, 0, h->on_row[i]->req_id, SERVE_EMODEL, msg);
                    engine_release(h->eng, i);
                    req_free(h->on_row[i]);
                    h->on_row[i] = NULL;
                    h->rows--;
                }
            continue;
        }
        answer(s, h);
    }
    retire_drained(s);
    return rows_in_use(s) + s->queued;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void sampler_server_handle(sampler_server_t *s, const void *body, size_t len, void **reply, size_t *rlen) {
    static const char env[] = "\x01sampler_server_handle"; /* no ROUTER identity starts with 1 */
    *reply = NULL;
    *rlen = 0;
    sampler_server_request(s, env, sizeof env, 0, body, len, now_ms());
    for (int pending = 1;;) {
        /* our final reply, if it is out: parts of ours are dropped, others' replies kept */
        out_t *keep = NULL, *ktail = NULL, *o;
        while ((o = s->ohead)) {
            s->ohead = o->next;
            o->next = NULL;
            int ours = o->envlen == sizeof env && !memcmp(o->env, env, sizeof env), part = 0;
            wire_msg_t m;
            char err[64];
            if (ours && wire_decode(o->body, o->len, &m, err, sizeof err) == 0) {
                part = m.type == MSG_GEN_PART;
                wire_msg_free(&m);
            }
            if (ours && !part && !*reply) {
                *reply = o->body;
                *rlen = o->len;
                free(o->env);
                free(o);
            } else if (ours) {
                free(o->env);
                free(o->body);
                free(o);
            } else {
                if (ktail) ktail->next = o; else keep = o;
                ktail = o;
            }
        }
        s->ohead = keep;
        s->otail = ktail;
        if (*reply || !pending) return;
        pending = sampler_server_step(s, now_ms());
    }
}
