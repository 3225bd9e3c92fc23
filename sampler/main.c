/* bin/sampler: generates text from a checkpoint (baseline, Free Transformer or LTM).
 * Parses flags, opens the vocabulary and the checkpoint, calls sampler_generate (sampler.h),
 * prints one sample per line (or JSON lines). Every failure is one line "sampler: ..." on
 * stderr: exit 2 for usage errors, 1 for everything else. */
#include <jansson.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu_isa.h"
#include "bus/bus.h"
#include "bus/net.h"
#include "bus/utf8.h"
#include "common/errmsg.h"
#include "common/flags.h"
#include "model/checkpoint.h"
#include "model/family.h"
#include "sampler/sampler.h"
#include "sampler/serve.h"
#include "sampler/text.h"
#include "tokenizer/bpe_io.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define PROMPT_MAX_BYTES (1u << 20)

typedef struct {
    const char *ckpt, *run_dir, *prompt, *vocab, *latent, *serve, *connect, *follow, *bus_sub, *bus_pub, *name;
    const char *device, *precision, *model, *z_from;
    int n, max_new, top_k, group, stop_at_eot, json, eot_prefix, threads, quiet, inner_steps;
    float fast_lr;
    int max_prompt, max_new_limit, timeout_ms, max_batch, max_queue, deadline_ms, stream;
    int parallel_rows;
    float temperature, top_p;
    long long seed;
} opts_t;

static void usage(FILE *f, const flag_t *fl, int n) {
    fprintf(f,
            "usage: sampler (--ckpt DIR | --run-dir DIR) [--prompt TEXT] [options]\n"
            "Generates --n continuations of the prompt (--prompt, else all of stdin) with the\n"
            "model of a checkpoint and prints one per line: the generated text only, with '\\n',\n"
            "'\\r' and '\\' escaped; --json prints {\"i\",\"ids\",\"text\",\"stop\"[,\"z\"]} lines\n"
            "(z: the latent index of each position that predicted a generated token).\n"
            "The same seed gives the same samples. The vocabulary must be the one the model was\n"
            "trained with: its size must equal the checkpoint's vocab_size.\n"
            "Free Transformer checkpoints: the prompt's latents come from the encoder, every new\n"
            "position's from the prior (uniform over 2^H); --latent shared gives each group of\n"
            "--group samples one draw of those (the paper's Figure 4).\n"
            "Latent-thought LM checkpoints (seed 003): each sample's latent thought vectors z are\n"
            "inferred from the prompt by --inner-steps fast steps (--z-from prompt), or drawn from\n"
            "the prior N(0, I) (--z-from prior: unconditional); the tokens then decode with the KV\n"
            "cache and the model's sliding window.\n"
            "Masked mixer checkpoints (--model mixer) generate through a cache of their mixing\n"
            "sums; autoencoders and memory models (they predict the chunk they encoded) are refused.\n"
            "Service: --serve ENDPOINT answers gen_req messages (docs/PROTOCOL.md) with the\n"
            "checkpoint, decoding up to --max-batch requests together (a request joins the batch\n"
            "at the next step, a finished one leaves at once; --max-queue more wait, beyond that\n"
            "the answer is error -6 busy), reloading when the bus announces a newer one of\n"
            "--follow RUN (running requests finish on the model they started with).\n"
            "--connect ENDPOINT asks such a server for --n samples instead of loading a model\n"
            "(--deadline-ms, --stream; Ctrl-C cancels the requests on the server).\n"
            "\noptions:\n");
    flags_usage(f, fl, n);
}

static int fail(int code, const char *what, const char *why) {
    fprintf(stderr, "sampler: %s%s%s\n", what, why ? ": " : "", why ? why : "");
    return code;
}

/* The model of --ckpt, or of the newest usable checkpoint of --run-dir (its path into dir). */
static int load_model(const opts_t *o, device_t *dev, sampler_model_t **sm, char *dir, size_t cap, char *err,
                      size_t errlen) {
    if (o->ckpt) {
        snprintf(dir, cap, "%s", o->ckpt);
        return sampler_model_load(sm, dev, dir, err, errlen);
    }
    char warn[4096] = "";
    int rc = sampler_model_load_newest(sm, dev, o->run_dir, dir, cap, warn, sizeof warn, err, errlen);
    err_print_lines(stderr, "sampler: ", warn);
    return rc;
}

static void print_json(int i, const uint32_t *ids, int n, const char *text, size_t tlen, int stopped,
                       const uint32_t *z, int nz) {
    json_t *j = json_object(), *a = json_array();
    for (int k = 0; k < n; k++) json_array_append_new(a, json_integer(ids[k]));
    char *u = sampler_text_utf8(text, tlen);
    json_object_set_new(j, "i", json_integer(i));
    json_object_set_new(j, "ids", a);
    json_object_set_new(j, "text", json_string(u ? u : ""));
    json_object_set_new(j, "stop", json_string(stopped ? "eot" : "length"));
    if (z) {
        json_t *za = json_array();
        for (int k = 0; k < nz; k++) json_array_append_new(za, json_integer(z[k]));
        json_object_set_new(j, "z", za);
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) puts(s);
    free(s);
    free(u);
    json_decref(j);
}

/* --stream: what a part adds to the text printed so far. */
typedef struct {
    size_t shown;
} stream_t;
static void print_part(void *ctx, const msg_gen_part_t *p) {
    stream_t *st = ctx;
    size_t n = p->text ? strlen(p->text) : 0;
    if (n > st->shown) {
        fwrite(p->text + st->shown, 1, n - st->shown, stdout);
        fflush(stdout);
        st->shown = n;
    }
}

/* --connect: one gen_req per sample (index i), sent together so the server batches them,
 * printed like local samples. */
static int run_client(const opts_t *o) {
    char err[1024];
    size_t plen = 0;
    char *ptext = NULL;
    if (!o->prompt && !(ptext = sampler_text_read_all(stdin, WIRE_MAX_STR, &plen, err, sizeof err)))
        return fail(1, err, NULL);
    const char *prompt = o->prompt ? o->prompt : ptext;
    if (!wire_utf8_valid(prompt, strlen(prompt))) {
        free(ptext);
        return fail(1, "--connect: the prompt is not valid UTF-8 (gen_req carries text)", NULL);
    }
    wire_msg_t *req = calloc(o->n, sizeof *req), *rep = calloc(o->n, sizeof *rep);
    if (!req || !rep) {
        free(req);
        free(rep);
        free(ptext);
        return fail(1, "out of memory", NULL);
    }
    for (int i = 0; i < o->n; i++) {
        req[i].type = MSG_GEN_REQ;
        msg_gen_req_t *r = &req[i].u.gen_req;
        r->req_id = (uint64_t)i + 1;
        r->prompt = (char *)prompt;
        r->max_new = (uint32_t)o->max_new;
        r->temperature = o->temperature;
        r->top_k = (uint32_t)o->top_k;
        r->top_p = o->top_p;
        r->seed = (uint64_t)o->seed;
        r->latent = (char *)o->latent;
        r->index = (uint32_t)i;
        r->group = (uint32_t)o->group;
        r->flags = (o->stop_at_eot ? 1u : 0u) | (o->eot_prefix ? 2u : 0u);
        r->deadline_ms = (uint32_t)o->deadline_ms;
        r->stream = (uint8_t)o->stream;
    }
    stream_t st = {0};
    int status = 0;
    if (sampler_client_request(o->connect, req, o->n, rep, o->timeout_ms, o->stream ? print_part : NULL,
                               &st, err, sizeof err))
        status = fail(bus_signal_received() ? 130 : 1, err, NULL);
    for (int i = 0; i < o->n && !status; i++) {
        const msg_gen_req_t *r = &req[i].u.gen_req;
        if (rep[i].type == MSG_ERROR) {
            snprintf(err, sizeof err, "%s answered error %d: %s", o->connect, rep[i].u.error.code,
                     rep[i].u.error.message ? rep[i].u.error.message : "");
            status = fail(1, err, NULL);
        } else if (rep[i].type != MSG_GEN || rep[i].u.gen.req_id != r->req_id) {
            snprintf(err, sizeof err, "%s answered a %s message (want gen %llu)", o->connect,
                     wire_type_name(rep[i].type), (unsigned long long)r->req_id);
            status = fail(1, err, NULL);
        } else if (o->json) {
            json_t *j = json_pack("{s:i,s:s?,s:i,s:s?,s:s?,s:I}", "i", i, "text", rep[i].u.gen.text,
                                  "n_tokens", (int)rep[i].u.gen.n_tokens, "stop", rep[i].u.gen.stop,
                                  "ckpt", rep[i].u.gen.ckpt, "step", (json_int_t)rep[i].u.gen.step);
            char *js = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
            if (js) puts(js);
            free(js);
            json_decref(j);
        } else if (o->stream) {
            /* the parts showed the text; the rest of it, then the end of the line */
            const char *t = rep[i].u.gen.text ? rep[i].u.gen.text : "";
            if (strlen(t) > st.shown) fputs(t + st.shown, stdout);
            putchar('\n');
        } else {
            const char *t = rep[i].u.gen.text ? rep[i].u.gen.text : "";
            sampler_text_print_line(stdout, t, strlen(t));
        }
    }
    for (int i = 0; i < o->n; i++) wire_msg_free(&rep[i]);
    free(req);
    free(rep);
    free(ptext);
    if (!status && (fflush(stdout) != 0 || ferror(stdout))) status = fail(1, "writing to stdout failed", NULL);
    return status;
}

int main(int argc, char **argv) {
    opts_t o = {.vocab = "bytes", .device = device_default_spec(), .precision = "fp32", .latent = "independent",
                .z_from = "prompt", .n = 1, .max_new = 64, .group = 1,
                .temperature = 1.0f, .top_p = 1.0f, .seed = 1, .max_prompt = 1024,
                .max_new_limit = 1024, .timeout_ms = 60000, .max_batch = 32, .max_queue = 256,
                .parallel_rows = 8};
    bus_net_opts_t net = {0};
    flag_t fl[40 + BUS_NET_NFLAGS] = {
        {"ckpt", FLAG_STR, &o.ckpt, "checkpoint directory", 0, 0, 0},
        {"run-dir", FLAG_STR, &o.run_dir, "run directory: use its newest complete checkpoint", 0, 0, 0},
        {"prompt", FLAG_STR, &o.prompt, "prompt text (default: all of stdin)", 0, 0, 0},
        {"vocab", FLAG_STR, &o.vocab, "bytes, gpt2, cl100k_base or a vocabulary file", 0, 0, 0},
        {"n", FLAG_INT, &o.n, "number of samples", 1, 1 << 20, 0},
        {"max-new", FLAG_INT, &o.max_new, "tokens generated per sample", 1, 1 << 24, 0},
        {"temperature", FLAG_FLOAT, &o.temperature, "softmax temperature; 0 is greedy", 0, 1e6, 0},
        {"top-k", FLAG_INT, &o.top_k, "keep the k most probable tokens (0: all)", 0, 1 << 30, 0},
        {"top-p", FLAG_FLOAT, &o.top_p, "nucleus: smallest set reaching this mass (1: all)", 0, 1, 0},
        {"seed", FLAG_I64, &o.seed, "random seed (tokens and latents)", 0, 0, 0},
        {"latent", FLAG_STR, &o.latent, "Free Transformer: independent or shared latents", 0, 0, 0},
        {"group", FLAG_INT, &o.group, "samples per shared-latent group", 1, 1 << 20, 0},
        {"model", FLAG_STR, &o.model, "the family the checkpoint must hold: llama, free or ltm (default: whatever it holds)", 0, 0, 0},
        {"z-from", FLAG_STR, &o.z_from, "LTM: prompt (z inferred from it) or prior (unconditional)", 0, 0, 0},
        {"inner-steps", FLAG_INT, &o.inner_steps, "LTM: fast steps inferring z from the prompt (0: the checkpoint's)", 0, 100000, 0},
        {"fast-lr", FLAG_FLOAT, &o.fast_lr, "LTM: their peak rate (0: the checkpoint's final one)", 0, 100, 0},
        {"stop-at-eot", FLAG_BOOL, &o.stop_at_eot, "end a sample at the end-of-text token", 0, 0, 0},
        {"eot-prefix", FLAG_BOOL, &o.eot_prefix, "put the end-of-text token before the prompt", 0, 0, 0},
        {"json", FLAG_BOOL, &o.json, "JSON lines with ids, text, stop reason (and latents)", 0, 0, 0},
        {"threads", FLAG_INT, &o.threads, "OpenMP threads (0: the default)", 0, 1024, 0},
        {"device", FLAG_STR, &o.device, "where the model runs: cpu, cuda or cuda:N (default $FT_DEVICE or cpu)", 0, 0, 0},
        {"precision", FLAG_STR, &o.precision, "products in fp32, bf16 or tf32 (the GPU's) (default fp32)", 0, 0, 0},
        {"quiet", FLAG_BOOL, &o.quiet, "no timing line on stderr (--serve: no log lines there; the bus still gets them as log/sampler)", 0, 0, 0},
        {"serve", FLAG_STR, &o.serve, "serve generation requests on this ZeroMQ endpoint (ROUTER)", 0, 0, 0},
        {"follow", FLAG_STR, &o.follow, "with --serve: reload on the bus's ckpt events of this run", 0, 0, 0},
        {"bus-sub", FLAG_STR, &o.bus_sub, "bus subscriber endpoint (default $FT_BUS_SUB or " BUS_DEFAULT_SUB ")", 0, 0, 0},
        {"bus-pub", FLAG_STR, &o.bus_pub, "with --serve: bus publisher endpoint for its stage/sampler/<name> beats and log/sampler lines (default $FT_BUS_PUB or " BUS_DEFAULT_PUB ")", 0, 0, 0},
        {"name", FLAG_STR, &o.name, "with --serve: instance name in its beats (default sampler-<pid>)", 0, 0, 0},
        {"max-prompt", FLAG_INT, &o.max_prompt, "with --serve: prompt tokens accepted per request", 1, 1 << 24, 0},
        {"max-new-limit", FLAG_INT, &o.max_new_limit, "with --serve: largest max_new accepted", 1, 1 << 24, 0},
        {"max-batch", FLAG_INT, &o.max_batch, "with --serve: requests decoded together (rows of the batch)", 1, 4096, 0},
        {"parallel-rows", FLAG_INT, &o.parallel_rows, "with --serve: decode steps of at least this many rows use every thread (0: only very large steps)", 0, 4096, 0},
        {"max-queue", FLAG_INT, &o.max_queue, "with --serve: requests waiting for a row; beyond: error 'busy'", 0, 1 << 20, 0},
        {"connect", FLAG_STR, &o.connect, "ask a --serve sampler at this endpoint instead of loading a model", 0, 0, 0},
        {"timeout-ms", FLAG_INT, &o.timeout_ms, "with --connect: give up after this long without a reply", 1, 1 << 30, 0},
        {"deadline-ms", FLAG_INT, &o.deadline_ms, "with --connect: the server drops a request not done this long after it arrived (0: none)", 0, 1 << 30, 0},
        {"stream", FLAG_BOOL, &o.stream, "with --connect: print the text as it is generated (one sample)", 0, 0, 0},
    };
    const int nbase = flags_count(fl, 40);
    const int nfl = nbase + bus_net_flags(fl + nbase, &net, BUS_PEER_REQUESTS);
    char err[1024];
    int rc = flags_parse(argc, argv, 1, fl, nfl, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) { usage(stdout, fl, nfl); return 0; }
    if (rc || bus_net_setup(&net, err, sizeof err)) return fail(2, err, NULL);
    if (o.connect && (o.ckpt || o.run_dir || o.serve))
        return fail(2, "--connect asks a server: it takes no --ckpt, --run-dir or --serve", NULL);
    if (!o.connect && !o.ckpt == !o.run_dir)
        return fail(2, "give exactly one of --ckpt DIR and --run-dir DIR", NULL);
    if (o.follow && !o.serve) return fail(2, "--follow goes with --serve", NULL);
    if (o.stream && (!o.connect || o.n != 1 || o.json))
        return fail(2, "--stream goes with --connect, one sample (--n 1) and no --json", NULL);
    sampler_opts_t so = {.n = o.n, .max_new = o.max_new, .seed = (uint64_t)o.seed, .group = o.group,
                         .stop_at_eot = o.stop_at_eot,
                         .sample = {o.temperature, o.top_k, o.top_p},
                         .ltm_prior = !strcmp(o.z_from, "prior"), .inner_steps = o.inner_steps,
                         .fast_lr = o.fast_lr};
    if (strcmp(o.z_from, "prompt") && strcmp(o.z_from, "prior")) {
        snprintf(err, sizeof err, "--z-from: '%s' is not prompt or prior", o.z_from);
        return fail(2, err, NULL);
    }
    if (o.model && !family_find(o.model)) {
        snprintf(err, sizeof err, "--model '%s' is not a model family (%s)", o.model, family_names());
        return fail(2, err, NULL);
    }
    if (!strcmp(o.latent, "independent")) so.latent = SAMPLER_LATENT_INDEPENDENT;
    else if (!strcmp(o.latent, "shared")) so.latent = SAMPLER_LATENT_SHARED;
    else {
        snprintf(err, sizeof err, "--latent: '%s' is not independent or shared", o.latent);
        return fail(2, err, NULL);
    }
    if (sampler_opts_check(&so, err, sizeof err)) return fail(2, err, NULL);
    if (cpu_isa_check(err, sizeof err)) return fail(2, err, NULL);
    if (o.threads > 0) omp_set_num_threads(o.threads);
    if (o.connect) return run_client(&o);

    int status = 1;
    device_t *dev = NULL;
    precision_t prec;
    if (precision_parse(o.precision, &prec, err, sizeof err) || device_open(&dev, o.device, prec, err, sizeof err))
        return fail(2, err, NULL);
    char dir[4096];
    bpe_vocab_t *v = NULL;
    sampler_model_t *sm = NULL;
    char *ptext = NULL, *text = NULL;
    uint32_t *prompt = NULL;
    sampler_result_t res = {0};
    if (load_model(&o, dev, &sm, dir, sizeof dir, err, sizeof err)) { fail(1, err, NULL); goto out; }
    const model_config_t *c = sampler_model_config(sm);
    const char *family = family_for_kind(c->kind) ? family_for_kind(c->kind)->name : "?";
    if (o.model && strcmp(o.model, family)) {
        snprintf(err, sizeof err, "--model %s but the checkpoint %.900s holds a %s model", o.model, dir, family);
        fail(2, err, NULL);
        status = 2;
        goto out;
    }
    if (c->kind != MODEL_FREE && flags_find(fl, nfl, "latent")->seen) {
        snprintf(err, sizeof err, "--latent applies to Free Transformer checkpoints; this one is a %s model", family);
        fail(2, err, NULL);
        status = 2;
        goto out;
    }
    static const char *ltm_only[] = {"z-from", "inner-steps", "fast-lr"};
    for (int i = 0; i < 3; i++)
        if (c->kind != MODEL_LTM && flags_find(fl, nfl, ltm_only[i])->seen) {
            snprintf(err, sizeof err, "--%s applies to LTM checkpoints; this one is a %s model", ltm_only[i], family);
            fail(2, err, NULL);
            status = 2;
            goto out;
        }
    if (bpe_vocab_open(&v, o.vocab, err, sizeof err) < 0) { fail(1, "--vocab", err); goto out; }
    if (bpe_vocab_size(v) != (uint32_t)c->vocab_size) {
        snprintf(err, sizeof err, "vocabulary '%.200s' has %u tokens but the model of %.600s has vocab_size %d",
                 o.vocab, bpe_vocab_size(v), dir, c->vocab_size);
        fail(1, err, NULL);
        goto out;
    }
    if (o.serve) {
        int64_t step = -1;
        const char *base = strrchr(dir, '/');
        if (base && !strncmp(base + 1, "ckpt-", 5)) step = strtoll(base + 6, NULL, 10);
        /* the followed run's directory: --run-dir, else the one holding --ckpt */
        char run_dir[4096], tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", dir);
        snprintf(run_dir, sizeof run_dir, "%s", o.run_dir ? o.run_dir : dirname(tmp));
        sampler_serve_opts_t sv = {.bind = o.serve, .ckpt = dir, .step = step, .follow = o.follow,
                                   .run_dir = run_dir,
                                   .bus_sub = bus_endpoint_sub(o.bus_sub), .bus_pub = bus_endpoint_pub(o.bus_pub),
                                   .name = o.name, .vocab = v,
                                   .max_prompt = o.max_prompt, .max_new = o.max_new_limit,
                                   .max_batch = o.max_batch, .max_queue = o.max_queue, .parallel_rows = o.parallel_rows,
                                   .quiet = o.quiet};
        sampler_model_t *served = sm;
        sm = NULL; /* the service owns it (and the models it reloads) */
        if (sampler_serve(served, &sv, err, sizeof err)) { fail(1, err, NULL); goto out; }
        status = 0;
        goto out;
    }
    size_t plen;
    if (o.prompt) {
        plen = strlen(o.prompt);
    } else {
        if (!(ptext = sampler_text_read_all(stdin, PROMPT_MAX_BYTES, &plen, err, sizeof err))) {
            fail(1, err, NULL);
            goto out;
        }
    }
    int P;
    if (sampler_text_encode(v, o.prompt ? o.prompt : ptext, plen, o.eot_prefix, (uint32_t)c->eot_id,
                            &prompt, &P, err, sizeof err)) {
        fail(1, err, NULL);
        goto out;
    }
    if (P == 0) { fail(2, "the prompt is empty (give text, or --eot-prefix to start from end-of-text)", NULL); status = 2; goto out; }
    if (sampler_generate(sm, prompt, P, &so, &res, err, sizeof err)) { fail(1, err, NULL); goto out; }
    for (int i = 0; i < res.n; i++) {
        const uint32_t *ids = res.ids + (size_t)i * res.max_new;
        size_t tlen;
        free(text);
        if (!(text = sampler_text_decode(v, ids, res.len[i], &tlen))) { fail(1, "out of memory", NULL); goto out; }
        if (o.json)
            print_json(i, ids, res.len[i], text, tlen, res.stopped[i],
                       res.z ? res.z + (size_t)i * res.z_stride : NULL, P + res.len[i] - 1);
        else
            sampler_text_print_line(stdout, text, tlen);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) { fail(1, "writing the samples to stdout failed", NULL); goto out; }
    if (!o.quiet)
        fprintf(stderr, "sampler: %s: %d samples, prompt %d tokens, %lld new tokens in %.3f s (%.0f tok/s)\n",
                dir, res.n, P, res.new_tokens, res.seconds,
                res.seconds > 0 ? res.new_tokens / res.seconds : 0.0);
    status = 0;
out:
    sampler_result_free(&res);
    free(text);
    free(prompt);
    free(ptext);
    bpe_vocab_free(&v);
    sampler_model_free(&sm);
    device_close(&dev);
    return status;
}
