/* live/http.c: routes, checks and event streams (live/http.h; docs/live.md). */
#include "live/http.h"

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "bus/utf8.h"
#include "common/progress.h"
#include "live/assets.h"

#define MAX_PARAMS 16
#define PARAM_MAX 1024      /* bytes of one parameter value */
#define MAX_RUNS_PARAM 32   /* names in runs= */
#define MAX_EXACT 9007199254740992.0 /* 2^53: steps and seeds travel as JSON numbers */

typedef struct sse sse_t;
struct sse {
    live_http_t *h;
    struct MHD_Connection *c;
    uint64_t next;      /* the seq to send next */
    int suspended, ended;
    double last_write;
    char *pend;         /* an update larger than MHD's buffer, being sent */
    size_t pend_len, pend_off;
    sse_t *prev, *nx;
};

enum { REQ_NEW, REQ_BODY, REQ_WAIT };

typedef struct {
    int phase;
    char *body;
    size_t len;
    int too_big;
    live_job_t *job;
    int suspended;
    struct MHD_Connection *c;
    live_http_t *h;
} req_t;

struct live_http {
    struct MHD_Daemon *d;
    live_store_t *s;
    live_sampler_t *sp;
    char token[128];
    int port, loopback, max_streams;
    sse_t *streams;     /* under the store's lock */
    int nstreams;
    double last_log;
};

/* ---- small helpers ------------------------------------------------------------------------- */

int live_http_is_loopback(const char *host) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *type, const void *data,
                                 size_t len, const char *cookie) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
    if (cookie) MHD_add_response_header(r, "Set-Cookie", cookie);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(o);
    if (!s) return send_text(c, 500, "application/json", "{\"error\":\"out of memory\"}\n", 26, NULL);
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (t) t[n] = '\n', t[n + 1] = 0, s = t, n++;
    enum MHD_Result rc = send_text(c, status, "application/json", s, n, NULL);
    free(s);
    return rc;
}

/* A refusal: status and one line {"error": "..."}. */
static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, const char *fmt, ...) {
    char raw[768], clean[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    for (char *p = raw; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' '; /* one line, whatever the request quoted */
    wire_utf8_clean(clean, sizeof clean, raw, strlen(raw));
    return send_json(c, status, json_pack("{s:s}", "error", clean));
}

/* Constant-time comparison of the token. */
static int same_token(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = na != nb;
    for (size_t i = 0; i < na; i++) diff |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return diff == 0;
}

/* ---- query parameters ----------------------------------------------------------------------- */

typedef struct {
    const char *key[MAX_PARAMS], *val[MAX_PARAMS];
    int n, too_many;
} params_t;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    params_t *p = cls;
    if (p->n == MAX_PARAMS) {
        p->too_many = 1;
        return MHD_NO;
    }
    p->key[p->n] = key;
    p->val[p->n++] = value ? value : "";
    return MHD_YES;
}

static const char *param(const params_t *p, const char *key) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->key[i], key)) return p->val[i];
    return NULL;
}

/* Every parameter is one of `allowed` (NULL-terminated; "token" always is), given once, with a
 * value of at most PARAM_MAX bytes of UTF-8. 0, or an error line in why. */
static int params_check(const params_t *p, const char *const *allowed, char *why, size_t cap) {
    if (p->too_many) return snprintf(why, cap, "more than %d query parameters", MAX_PARAMS), -1;
    for (int i = 0; i < p->n; i++) {
        int ok = !strcmp(p->key[i], "token");
        for (int k = 0; allowed[k]; k++) ok |= !strcmp(p->key[i], allowed[k]);
        if (!ok) return snprintf(why, cap, "unknown parameter \"%.60s\"", p->key[i]), -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(p->key[i], p->key[j])) return snprintf(why, cap, "parameter \"%.60s\" given twice", p->key[i]), -1;
        size_t n = strlen(p->val[i]);
        if (n > PARAM_MAX) return snprintf(why, cap, "parameter \"%.60s\" longer than %d bytes", p->key[i], PARAM_MAX), -1;
        if (!wire_utf8_valid(p->val[i], n)) return snprintf(why, cap, "parameter \"%.60s\" is not UTF-8", p->key[i]), -1;
    }
    return 0;
}

/* A whole decimal integer in [lo, hi]. */
static int parse_int(const char *s, double lo, double hi, double *out) {
    if (!s || !*s || strlen(s) > 20 || strspn(s, "0123456789") != strlen(s)) return -1;
    double v = strtod(s, NULL);
    if (!(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* A run name as the wire has them: 1..47 bytes, UTF-8, no control characters. */
static int valid_run(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= WIRE_NAME_LEN || !wire_utf8_valid(s, n)) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
    return 1;
}

/* ---- event streams ---------------------------------------------------------------------------- */

static double mono_now(void) { return progress_now(); }

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sse_t *e = cls;
    live_http_t *h = e->h;
    if (e->pend) { /* the rest of an update larger than one buffer */
        size_t n = e->pend_len - e->pend_off < max ? e->pend_len - e->pend_off : max;
        memcpy(buf, e->pend + e->pend_off, n);
        e->pend_off += n;
        if (e->pend_off == e->pend_len) free(e->pend), e->pend = NULL;
        return (ssize_t)n;
    }
    if (e->ended) return MHD_CONTENT_READER_END_OF_STREAM;
    if (pos == 0) /* first, who is speaking: a page that reconnected to another bin/live reloads */
        return snprintf(buf, max, "event: hello\ndata: {\"t\":\"hello\",\"boot\":\"%s\",\"next\":%llu}\n\n",
                        live_store_boot(h->s), (unsigned long long)e->next);
    double now = mono_now();
    live_store_lock(h->s);
    uint64_t next;
    size_t need;
    long n = live_store_sse_locked(h->s, e->next, buf, max, &next, &need);
    if (n < 0) { /* further behind than the ring: the page reloads and comes back */
        n = snprintf(buf, max, "event: reset\ndata: {\"t\":\"reset\",\"from\":%llu}\n\n", (unsigned long long)e->next);
        e->ended = 1;
    } else if (n == 0 && need) { /* one update larger than MHD's buffer: sent from a copy */
        char *big = malloc(need);
        long m = big ? live_store_sse_locked(h->s, e->next, big, need, &next, &need) : -1;
        if (m > 0) {
            e->pend = big, e->pend_len = (size_t)m, e->next = next;
            n = (long)((size_t)m < max ? (size_t)m : max);
            memcpy(buf, big, (size_t)n);
            e->pend_off = (size_t)n;
            if (e->pend_off == e->pend_len) free(e->pend), e->pend = NULL;
        } else {
            free(big);
            e->ended = 1;
            n = snprintf(buf, max, "event: reset\ndata: {\"t\":\"reset\",\"from\":%llu}\n\n", (unsigned long long)e->next);
        }
    } else if (n > 0) {
        e->next = next;
    } else if (now - e->last_write >= LIVE_PING_S) {
        n = snprintf(buf, max, ": ping\n\n");
    } else {
        e->suspended = 1; /* live_http_kick resumes it */
        MHD_suspend_connection(e->c);
    }
    if (n > 0) e->last_write = now;
    live_store_unlock(h->s);
    return n;
}

static void sse_free(void *cls) {
    sse_t *e = cls;
    live_http_t *h = e->h;
    live_store_lock(h->s);
    if (e->prev) e->prev->nx = e->nx;
    else if (h->streams == e) h->streams = e->nx;
    if (e->nx) e->nx->prev = e->prev;
    h->nstreams--;
    live_store_unlock(h->s);
    free(e->pend);
    free(e);
}

void live_http_kick(live_http_t *h, double mono) {
    if (!h) return;
    live_store_lock(h->s);
    uint64_t seq = live_store_seq_locked(h->s);
    for (sse_t *e = h->streams; e; e = e->nx)
        if (e->suspended && (e->next <= seq || mono - e->last_write >= LIVE_PING_S)) {
            e->suspended = 0;
            MHD_resume_connection(e->c);
        }
    live_store_unlock(h->s);
}

int live_http_streams(live_http_t *h) {
    live_store_lock(h->s);
    int n = h->nstreams;
    live_store_unlock(h->s);
    return n;
}

static enum MHD_Result events(live_http_t *h, struct MHD_Connection *c, const params_t *p) {
    double since = 0;
    const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
    const char *s = last ? last : param(p, "since");
    uint64_t seq = live_store_seq(h->s);
    if (s && parse_int(s, 0, MAX_EXACT, &since))
        return fail(c, 400, "%s: \"%.40s\" is not an integer in [0, 2^53]", last ? "Last-Event-ID" : "since", s);
    if (!s) since = (double)seq; /* from now on */
    if (since > (double)seq)
        return fail(c, 400, "since %.0f is ahead of this server's newest update %llu (it restarted: reload the state)",
                    since, (unsigned long long)seq);
    sse_t *e = calloc(1, sizeof *e);
    if (!e) return fail(c, 503, "out of memory");
    e->h = h, e->c = c, e->next = (uint64_t)since + 1, e->last_write = mono_now();
    live_store_lock(h->s);
    if (h->nstreams >= h->max_streams) {
        live_store_unlock(h->s);
        free(e);
        return fail(c, 503, "%d event streams are open already (--max-streams)", h->max_streams);
    }
    e->nx = h->streams;
    if (h->streams) h->streams->prev = e;
    h->streams = e;
    h->nstreams++;
    live_store_unlock(h->s);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, sse_read, e, sse_free);
    if (!r) {
        sse_free(e);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- the other routes -------------------------------------------------------------------------- */

static enum MHD_Result asset(live_http_t *h, struct MHD_Connection *c, const char *url, const params_t *p) {
    const live_asset_t *a = NULL;
    for (int i = 0; i < live_n_assets; i++)
        if (!strcmp(live_assets[i].path, url)) a = &live_assets[i];
    if (!a) return fail(c, 404, "no such page: %.200s", url);
    char cookie[256], *ck = NULL;
    const char *t = param(p, "token");
    if (!strcmp(url, "/") && h->token[0] && t) { /* the page's own requests carry the cookie from now on */
        snprintf(cookie, sizeof cookie, "ft_live_token=%s; Path=/; HttpOnly; SameSite=Strict", h->token);
        ck = cookie;
    }
    return send_text(c, 200, a->type, a->data, a->len, ck);
}

static enum MHD_Result state(live_http_t *h, struct MHD_Connection *c, const params_t *p) {
    double points = live_store_limits(h->s)->series_cap;
    const char *ps = param(p, "points"), *rs = param(p, "runs");
    if (ps && parse_int(ps, 1, points, &points))
        return fail(c, 400, "points: \"%.40s\" is not an integer in [1, %d]", ps, live_store_limits(h->s)->series_cap);
    char buf[PARAM_MAX + 1], *names[MAX_RUNS_PARAM];
    int n = 0;
    if (rs) {
        snprintf(buf, sizeof buf, "%s", rs);
        for (char *sv = NULL, *tk = strtok_r(buf, ",", &sv); tk; tk = strtok_r(NULL, ",", &sv)) {
            if (n == MAX_RUNS_PARAM) return fail(c, 400, "runs: more than %d names", MAX_RUNS_PARAM);
            if (!valid_run(tk)) return fail(c, 400, "runs: \"%.60s\" is not a run name (1-47 bytes of UTF-8)", tk);
            names[n++] = tk;
        }
        if (n == 0) return fail(c, 400, "runs: no run name");
    }
    return send_json(c, 200, live_store_state(h->s, rs ? (const char *const *)names : NULL, n, (int)points, mono_now()));
}

static enum MHD_Result series(live_http_t *h, struct MHD_Connection *c, const params_t *p) {
    const char *run = param(p, "run"), *name = param(p, "name"), *kind = param(p, "kind");
    const char *fs = param(p, "from"), *ts = param(p, "to"), *ps = param(p, "points");
    int cap = live_store_limits(h->s)->series_cap;
    double lo = 0, hi = MAX_EXACT, points = cap;
    if (!run || !valid_run(run)) return fail(c, 400, "run: missing, or not a run name (1-47 bytes of UTF-8)");
    if (!name || !*name || strlen(name) >= LIVE_NAME_MAX) return fail(c, 400, "name: missing or longer than %d bytes", LIVE_NAME_MAX - 1);
    if (kind && strcmp(kind, "metrics") && strcmp(kind, "eval")) return fail(c, 400, "kind: \"%.40s\" is not metrics or eval", kind);
    if (fs && parse_int(fs, 0, MAX_EXACT, &lo)) return fail(c, 400, "from: \"%.40s\" is not an integer in [0, 2^53]", fs);
    if (ts && parse_int(ts, 0, MAX_EXACT, &hi)) return fail(c, 400, "to: \"%.40s\" is not an integer in [0, 2^53]", ts);
    if (lo > hi) return fail(c, 400, "from %.0f is after to %.0f", lo, hi);
    if (ps && parse_int(ps, 1, cap, &points)) return fail(c, 400, "points: \"%.40s\" is not an integer in [1, %d]", ps, cap);
    if (!live_store_has_run(h->s, run)) return fail(c, 404, "no run named \"%s\"", run);
    json_t *o = live_store_series(h->s, run, kind ? kind : "metrics", name, lo, hi, (int)points);
    if (!o) return fail(c, 404, "run \"%s\" has no %s series \"%.100s\"", run, kind ? kind : "metrics", name);
    return send_json(c, 200, o);
}

/* ---- POST /api/sample ---------------------------------------------------------------------------- */

static void job_done(live_job_t *job) { /* the bus thread, sampler lock held */
    req_t *q = job->ctx;
    if (q->suspended) {
        q->suspended = 0;
        MHD_resume_connection(q->c);
    }
}

/* The body's fields into a job; 0, or an error line. */
static int parse_sample(const char *body, size_t len, live_job_t *job, char *why, size_t cap) {
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return snprintf(why, cap, "the body is not a JSON object: %s", o ? "another JSON value" : je.text), -1;
    }
    static const char *known[] = {"prompt", "max_new", "temperature", "top_k", "top_p", "seed", "n", "run", NULL};
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(o, k, v) {
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(k, known[i]);
        if (!ok) {
            rc = (snprintf(why, cap, "unknown field \"%.60s\"", k), -1);
            goto out;
        }
    }
    const char *prompt = json_string_value(json_object_get(o, "prompt"));
    size_t pl = prompt ? json_string_length(json_object_get(o, "prompt")) : 0;
    if (!prompt || pl == 0 || pl > WIRE_MAX_STR || strlen(prompt) != pl) {
        rc = (snprintf(why, cap, "prompt: a string of 1 to %d bytes without NUL is required", WIRE_MAX_STR), -1);
        goto out;
    }
    memcpy(job->prompt, prompt, pl + 1);
    struct {
        const char *name;
        double lo, hi, def;
        int integer;
        double *dst;
    } nums[6];
    double max_new, temp, top_k, top_p, seed, n;
    nums[0] = (typeof(nums[0])){"max_new", 1, 1024, 64, 1, &max_new};
    nums[1] = (typeof(nums[0])){"temperature", 0, 10, 1, 0, &temp};
    nums[2] = (typeof(nums[0])){"top_k", 0, 1 << 20, 0, 1, &top_k};
    nums[3] = (typeof(nums[0])){"top_p", 0, 1, 1, 0, &top_p};
    nums[4] = (typeof(nums[0])){"seed", 0, MAX_EXACT, 1, 1, &seed};
    nums[5] = (typeof(nums[0])){"n", 1, LIVE_SAMPLE_MAX_N, 1, 1, &n};
    for (int i = 0; i < 6; i++) {
        json_t *x = json_object_get(o, nums[i].name);
        double val = nums[i].def;
        if (x) {
            val = json_number_value(x);
            if (!json_is_number(x) || !isfinite(val) || val < nums[i].lo || val > nums[i].hi ||
                (nums[i].integer && val != floor(val)) || (!strcmp(nums[i].name, "top_p") && val == 0)) {
                rc = (snprintf(why, cap, "%s: a %s in %s%g, %g] is required", nums[i].name,
                              nums[i].integer ? "whole number" : "number", !strcmp(nums[i].name, "top_p") ? "(" : "[",
                              nums[i].lo, nums[i].hi), -1);
                goto out;
            }
        }
        *nums[i].dst = val;
    }
    job->max_new = (uint32_t)max_new, job->temperature = temp, job->top_k = (uint32_t)top_k;
    job->top_p = top_p, job->seed = (uint64_t)seed, job->n = (int)n;
    json_t *run = json_object_get(o, "run");
    if (run && !json_is_null(run)) {
        const char *r = json_string_value(run);
        if (!r || (r[0] && !valid_run(r))) {
            rc = (snprintf(why, cap, "run: not a run name (1-47 bytes of UTF-8)"), -1);
            goto out;
        }
        snprintf(job->run, sizeof job->run, "%s", r);
    }
out:
    json_decref(o);
    return rc;
}

static enum MHD_Result sample_answer(struct MHD_Connection *c, live_job_t *job) {
    if (job->status != 200) return fail(c, (unsigned)job->status, "%s", job->error);
    json_t *texts = json_array();
    for (int i = 0; i < job->n; i++) json_array_append_new(texts, json_string(job->texts[i] ? job->texts[i] : ""));
    return send_json(c, 200, json_pack("{s:o,s:s,s:s,s:I,s:s,s:s}", "texts", texts, "ckpt", job->ckpt, "model",
                                       job->model, "step", (json_int_t)job->step, "endpoint", job->endpoint, "latent",
                                       "independent"));
}

static enum MHD_Result sample(live_http_t *h, struct MHD_Connection *c, req_t *q, const char *upload, size_t *upload_size) {
    if (q->phase == REQ_NEW) { /* headers only: check them before taking a body */
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        if (!ct || strncasecmp(ct, "application/json", 16)) return fail(c, 415, "Content-Type must be application/json");
        q->phase = REQ_BODY;
        return MHD_YES;
    }
    if (q->phase == REQ_BODY && *upload_size) {
        if (q->len + *upload_size > LIVE_HTTP_BODY_MAX) q->too_big = 1;
        else {
            char *b = realloc(q->body, q->len + *upload_size + 1);
            if (!b) q->too_big = 1;
            else {
                memcpy(b + q->len, upload, *upload_size);
                q->body = b;
                q->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->phase == REQ_BODY) { /* the whole body is here */
        if (q->too_big) return fail(c, 413, "the body is larger than %d bytes", LIVE_HTTP_BODY_MAX);
        live_job_t *job = calloc(1, sizeof *job);
        if (!job) return fail(c, 503, "out of memory");
        char why[512];
        if (parse_sample(q->body ? q->body : "", q->len, job, why, sizeof why)) {
            live_job_free(job);
            return fail(c, 400, "%s", why);
        }
        job->done = job_done;
        job->ctx = q;
        live_sampler_lock(h->sp);
        if (live_sampler_submit_locked(h->sp, job)) {
            live_sampler_unlock(h->sp);
            live_job_free(job);
            return fail(c, 503, "%d sample requests are in flight already; try again", LIVE_SAMPLE_JOBS);
        }
        q->job = job;
        q->phase = REQ_WAIT;
        q->suspended = 1;
        MHD_suspend_connection(c); /* job_done resumes it */
        live_sampler_unlock(h->sp);
        return MHD_YES;
    }
    /* REQ_WAIT, resumed: the job finished */
    return sample_answer(c, q->job);
}

/* ---- the handler --------------------------------------------------------------------------------- */

static int host_ok(const live_http_t *h, const char *host) {
    if (!host) return 0;
    char want[64];
    static const char *names[] = {"127.0.0.1", "localhost", "[::1]"};
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "%s:%d", names[i], h->port);
        if (!strcasecmp(host, want)) return 1;
    }
    return 0;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    live_http_t *h = cls;
    req_t *q = *con_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        q->c = c, q->h = h;
        *con_cls = q;
    }
    if (q->phase != REQ_NEW) return sample(h, c, q, upload, upload_size);
    int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int is_sample = !strcmp(url, "/api/sample");
    if (is_sample ? !post : !get)
        return fail(c, 405, "%.16s is not allowed on %.200s (%s)", method, url, is_sample ? "POST" : "GET or HEAD");
    params_t p = {0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect, &p);
    if (h->token[0]) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        const char *ck = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "ft_live_token");
        const char *t = param(&p, "token");
        int ok = (t && same_token(t, h->token)) || (ck && same_token(ck, h->token)) ||
                 (auth && !strncmp(auth, "Bearer ", 7) && same_token(auth + 7, h->token));
        if (!ok) return fail(c, 401, "a token is required: open the URL bin/live printed at start (it ends in ?token=...)");
    } else if (!host_ok(h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"))) {
        /* another name for this address, e.g. a page of another site rebinding its DNS */
        return fail(c, 403, "Host \"%.100s\" is not this server's: open http://127.0.0.1:%d/",
                    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host") ?: "", h->port);
    }
    char why[256];
    static const char *none[] = {NULL}, *state_p[] = {"runs", "points", NULL},
                      *series_p[] = {"run", "kind", "name", "from", "to", "points", NULL}, *events_p[] = {"since", NULL};
    const char *const *allowed = !strcmp(url, "/api/state") ? state_p : !strcmp(url, "/api/series") ? series_p
                                 : !strcmp(url, "/api/events") ? events_p : none;
    if (params_check(&p, allowed, why, sizeof why)) return fail(c, 400, "%s", why);
    if (is_sample) return sample(h, c, q, upload, upload_size);
    if (!strcmp(url, "/api/state")) return state(h, c, &p);
    if (!strcmp(url, "/api/series")) return series(h, c, &p);
    if (!strcmp(url, "/api/health")) {
        json_t *o = live_store_health(h->s, mono_now());
        json_object_set_new(o, "streams", json_integer(live_http_streams(h)));
        json_object_set_new(o, "store_bytes", json_integer((json_int_t)live_store_bytes(h->s)));
        return send_json(c, 200, o);
    }
    if (!strcmp(url, "/api/events")) return events(h, c, &p);
    return asset(h, c, url, &p);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    live_http_t *h = cls;
    req_t *q = *con_cls;
    if (!q) return;
    if (q->job) live_sampler_abandon(h->sp, q->job);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

/* libmicrohttpd's own complaints (a client that misbehaves), at most one line a second. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    live_http_t *h = cls;
    double now = mono_now();
    if (now - h->last_log < 1) return;
    h->last_log = now;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    fprintf(stderr, "live: http: %s\n", line);
}

int live_http_start(live_http_t **out, live_store_t *s, live_sampler_t *sp, const live_http_opts_t *o, char *err,
                    size_t errlen) {
    *out = NULL;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gr = getaddrinfo(o->host, port, &hints, &ai);
    if (gr) return snprintf(err, errlen, "--host %s: not a numeric address (%s)", o->host, gai_strerror(gr)), -1;
    live_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    h->s = s, h->sp = sp, h->max_streams = o->max_streams > 0 ? o->max_streams : 256;
    h->loopback = live_http_is_loopback(o->host);
    snprintf(h->token, sizeof h->token, "%s", o->token ? o->token : "");
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, handler, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)LIVE_HTTP_CONN_MEMORY, MHD_OPTION_CONNECTION_LIMIT, (unsigned)LIVE_HTTP_MAX_CONNS,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)LIVE_HTTP_TIMEOUT_S, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        snprintf(err, errlen, "cannot serve on %s port %d (in use, or not an address of this machine)", o->host, o->port);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : o->port;
    *out = h;
    return 0;
}

int live_http_port(const live_http_t *h) { return h->port; }

void live_http_stop(live_http_t **hp) {
    if (!hp || !*hp) return;
    live_http_t *h = *hp;
    live_store_lock(h->s);
    for (sse_t *e = h->streams; e; e = e->nx) {
        e->ended = 1;
        if (e->suspended) {
            e->suspended = 0;
            MHD_resume_connection(e->c);
        }
    }
    live_store_unlock(h->s);
    MHD_stop_daemon(h->d);
    free(h);
    *hp = NULL;
}
