/* trainer/opts.c: defaults, the flag table and the checks that run before any work. */
#include "trainer/opts.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/family.h"
#include "model/ltm.h"
#include "model/mixer_config.h"
#include "model/precision.h"
#include "trainer/dp.h"

int trainer_opts_init(trainer_opts_t *o, flag_t *f) {
    memset(o, 0, sizeof *o);
    o->run = "run";
    o->model = "llama";
    o->device = device_default_spec();
    o->steps = 1000;
    o->ckpt_every = 200;
    o->keep = 3;
    o->log_every = 10;
    o->layout = "pack";
    o->B = 8, o->T = 256, o->accum = 1;
    o->data_seed = 1;
    o->window = 4, o->timeout_ms = 5000;
    o->d_model = 256, o->n_layers = 4, o->n_heads = 4, o->n_kv_heads = 2, o->d_ff = 768;
    o->rope_theta = 10000.f, o->norm_eps = 1e-5f;
    o->seed = 1;
    o->latent_bits = 16, o->kappa = 0.5f, o->kappa_unit = "bits";
    o->latent_vectors = 8, o->inner_steps = 16, o->fast_lr = 0.3f, o->fast_lr_end = 0.34f;
    o->mixer_heads = 1, o->mixer_kernel = 1;
    o->lr = 3e-3f, o->min_lr = 3e-4f, o->wd = 0.1f, o->beta1 = 0.9f, o->beta2 = 0.95f, o->eps = 1e-8f;
    o->clip = 1.0f, o->warmup = 100;
    o->dp = "none", o->rank = -1, o->world = 0;
    o->dp_check_every = 100, o->dp_timeout = 300, o->dp_lost_after = 10;
    int n = 0;
#define F(name, kind, dst, help, lo, hi) f[n++] = (flag_t){name, kind, dst, help, lo, hi, 0}
    F("run", FLAG_STR, &o->run, "run name (bus topics metrics/<run>, ckpt/<run>)", 0, 0);
    F("run-dir", FLAG_STR, &o->run_dir, "checkpoint directory (default runs/<run>)", 0, 0);
    F("model", FLAG_STR, &o->model, "model family: llama, free (the Free Transformer), ltm (the Latent-Thought LM), or the masked mixers' mixer, mixer-ae, llama-ae, mixer-mem, llama-mem", 0, 0);
    F("resume", FLAG_BOOL, &o->resume, "continue from the newest usable checkpoint in --run-dir (each damaged newer one is named)", 0, 0);
    F("allow-restart", FLAG_BOOL, &o->allow_restart, "with --resume: start from scratch when every checkpoint is damaged (else refused)", 0, 0);
    F("steps", FLAG_I64, &o->steps, "optimizer steps in total", 1, 1e12);
    F("ckpt-every", FLAG_INT, &o->ckpt_every, "write a checkpoint every N steps (0: only at the end)", 0, 1e9);
    F("keep", FLAG_INT, &o->keep, "complete checkpoints kept (0: all)", 0, 1e6);
    F("log-every", FLAG_INT, &o->log_every, "log line every N steps when stderr is not a terminal", 0, 1e9);
    F("threads", FLAG_INT, &o->threads, "OpenMP/BLAS threads (0: as set by the environment)", 0, 1024);
    F("device", FLAG_STR, &o->device, "where the model trains: cpu, cuda or cuda:N (default $FT_DEVICE or cpu)", 0, 0);
    F("precision", FLAG_STR, &o->precision, "products in fp32, bf16 or tf32 (the GPU's; docs/DEVICES.md); default fp32, or the checkpoint's with --resume", 0, 0);
    F("loaders", FLAG_STR, &o->loaders, "comma-separated loader endpoints, none empty (e.g. ipc:///tmp/l0,ipc:///tmp/l1)", 0, 0);
    F("discover", FLAG_BOOL, &o->discover, "also use loaders that announce themselves on the bus", 0, 0);
    F("layout", FLAG_STR, &o->layout, "batch layout: pack (documents joined by eot) or pad (one per row)", 0, 0);
    F("batch", FLAG_INT, &o->B, "rows per micro-batch (B)", 1, 65536);
    F("seq-len", FLAG_INT, &o->T, "tokens per row (T)", 1, 1 << 20);
    F("accum", FLAG_INT, &o->accum, "micro-batches accumulated per optimizer step", 1, 65536);
    F("data-seed", FLAG_I64, &o->data_seed, "seed of the loaders' per-epoch shuffle", 0, 0);
    F("in-flight", FLAG_INT, &o->window, "batch requests kept in flight", 1, 1024);
    F("timeout-ms", FLAG_INT, &o->timeout_ms, "re-issue a batch request after this long", 10, 3.6e6);
    F("bus-pub", FLAG_STR, &o->bus_pub, "bus endpoint to publish on (default $FT_BUS_PUB or tcp://127.0.0.1:5710)", 0, 0);
    F("bus-sub", FLAG_STR, &o->bus_sub, "bus endpoint to subscribe to, for --discover", 0, 0);
    F("vocab-size", FLAG_INT, &o->vocab_size, "model vocabulary (0: the dataset's; must match it)", 0, 1 << 24);
    F("d-model", FLAG_INT, &o->d_model, "hidden size", 1, 1 << 16);
    F("layers", FLAG_INT, &o->n_layers, "decoder blocks", 1, 1024);
    F("heads", FLAG_INT, &o->n_heads, "query heads", 1, 1024);
    F("kv-heads", FLAG_INT, &o->n_kv_heads, "key/value heads (grouped-query attention)", 1, 1024);
    F("d-ff", FLAG_INT, &o->d_ff, "SwiGLU hidden size", 1, 1 << 20);
    F("max-seq", FLAG_INT, &o->max_seq, "RoPE table length (0: --seq-len)", 0, 1 << 20);
    F("untied", FLAG_BOOL, &o->untied, "separate lm_head instead of the tied embedding", 0, 0);
    F("rope-theta", FLAG_FLOAT, &o->rope_theta, "RoPE base", 1, 1e9);
    F("norm-eps", FLAG_FLOAT, &o->norm_eps, "RMSNorm epsilon", 1e-12, 1);
    F("seed", FLAG_I64, &o->seed, "weight initialisation seed", 0, 0);
    F("latent-bits", FLAG_INT, &o->latent_bits, "free: H, bits of the latent per token (Z is one-hot over 2^H)", 1, 20);
    F("kappa", FLAG_FLOAT, &o->kappa, "free: free-bits threshold per token, in --kappa-unit (paper: 0.5 bit)", 0, 1e6);
    F("kappa-unit", FLAG_STR, &o->kappa_unit, "free: unit of --kappa: bits or nats", 0, 0);
    F("window", FLAG_INT, &o->attn_window, "ltm: sliding attention window W, at most --seq-len (0: unlimited; paper: 256 of 1024)", 0, 1 << 20);
    F("latent-vectors", FLAG_INT, &o->latent_vectors, "ltm: m, latent thought vectors per layer", 1, 1 << 16);
    F("inner-steps", FLAG_INT, &o->inner_steps, "ltm: K, fast AdamW steps on the posterior per batch", 0, 100000);
    F("fast-lr", FLAG_FLOAT, &o->fast_lr, "ltm: the fast learning rate at step 0 (paper: 0.3)", 0, 100);
    F("fast-lr-end", FLAG_FLOAT, &o->fast_lr_end, "ltm: ... rising linearly to this at the last step (paper: 0.34)", 0, 100);
    F("mixer-heads", FLAG_INT, &o->mixer_heads, "mixers: heads of the token mixing (1: flat; h > 1: in/out projections, h heads of d/h)", 1, 4096);
    F("mixer-kernel", FLAG_INT, &o->mixer_kernel, "mixers: k, neighbouring embedding elements each output mixes (1: none)", 1, 4096);
    F("no-mask", FLAG_BOOL, &o->no_mask, "autoencoders: unmasked (non-causal) token mixing in encoder and decoder", 0, 0);
    F("no-mask-encoder", FLAG_BOOL, &o->no_mask_encoder, "autoencoders, memory models: unmasked token mixing in the encoder only", 0, 0);
    F("encoder-layers", FLAG_INT, &o->encoder_layers, "autoencoders, memory models: encoder blocks (0: --layers)", 0, 1024);
    F("embed-dim", FLAG_INT, &o->embed_dim, "autoencoders, memory models: d_e of the stored embedding, d -> d_e -> d (0: --d-model)", 0, 1 << 16);
    F("unroll", FLAG_BOOL, &o->unroll, "autoencoders: unroll the embedding by sliding windows instead of repeating it", 0, 0);
    F("encoder", FLAG_STR, &o->encoder, "memory models: take the encoder from this autoencoder checkpoint (or its run directory's newest)", 0, 0);
    F("freeze-encoder", FLAG_BOOL, &o->freeze_encoder, "memory models: the encoder's weights get no updates", 0, 0);
    F("memory-start", FLAG_BOOL, &o->memory_start, "memory models: add a learned start vector to the decoder's position 0 (without it the decoder reads the memory there as a constant: README)", 0, 0);
    F("embed-range", FLAG_FLOAT, &o->embed_range, "autoencoders, memory models: bring the stored embedding to unit RMS and clamp it to [-R, R], so a b-bit code of it exists (0: unbounded, charged 32 bits)", 0, 1e6);
    F("embed-noise-bits", FLAG_INT, &o->embed_noise_bits, "autoencoders, memory models: train with the noise of rounding the embedding to b bits (seed 004's quantization-aware training; needs --embed-range)", 0, 24);
    F("lr", FLAG_FLOAT, &o->lr, "peak learning rate", 0, 10);
    F("min-lr", FLAG_FLOAT, &o->min_lr, "learning rate at the end of the cosine decay", 0, 10);
    F("warmup", FLAG_INT, &o->warmup, "linear warm-up steps", 0, 1e9);
    F("wd", FLAG_FLOAT, &o->wd, "AdamW decoupled weight decay (matrices only)", 0, 10);
    F("decay-embeddings", FLAG_BOOL, &o->decay_embeddings, "apply weight decay to the embedding too", 0, 0);
    F("beta1", FLAG_FLOAT, &o->beta1, "AdamW beta1", 0, 0.999999);
    F("beta2", FLAG_FLOAT, &o->beta2, "AdamW beta2", 0, 0.999999);
    F("eps", FLAG_FLOAT, &o->eps, "AdamW epsilon", 1e-12, 1);
    F("clip", FLAG_FLOAT, &o->clip, "global gradient-norm clip (0: off)", 0, 1e6);
    F("dp", FLAG_STR, &o->dp, "data parallelism: none, mpi (CPU ranks under mpirun) or nccl (GPU ranks)", 0, 0);
    F("rank", FLAG_INT, &o->rank, "this process's rank without mpirun (--dp nccl; -1: mpirun's)", -1, 65535);
    F("world", FLAG_INT, &o->world, "ranks in the run without mpirun (--dp nccl; 0: mpirun's)", 0, 65536);
    F("rendezvous", FLAG_STR, &o->rendezvous, "tcp://HOST:PORT where rank 0 meets the others (--dp nccl without mpirun)", 0, 0);
    F("zero", FLAG_INT, &o->zero, "1: ZeRO-1, AdamW's moments sharded over the ranks (0: every rank holds them)", 0, 1);
    F("dp-check-every", FLAG_INT, &o->dp_check_every, "compare a checksum of the weights across ranks every N steps (0: never)", 0, 1e9);
    F("dp-timeout", FLAG_DOUBLE, &o->dp_timeout, "seconds a collective may take before the run stops", 0.1, 1e7);
    F("dp-lost-after", FLAG_DOUBLE, &o->dp_lost_after, "seconds of heartbeat silence after which a rank counts as lost", 0.1, 1e6);
#undef F
    return n;
}

/* The masked mixers' flags: shapes first, then combinations that have no meaning. */
static int mixer_opts_check(const trainer_opts_t *o, char *err, size_t errlen) {
    const model_kind k = family_find(o->model)->kind;
    const int mixer = mixer_kind_uses_mixer(k), enc = mixer_kind_has_encoder(k), mem = mixer_kind_is_memory(k);
#define REFUSE(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)
    if (!mixer_kind_is(k)) return 0;
    if (mixer && o->d_model % o->mixer_heads)
        REFUSE("--mixer-heads %d does not divide --d-model %d", o->mixer_heads, o->d_model);
    if (mixer && o->mixer_kernel > o->d_model / o->mixer_heads)
        REFUSE("--mixer-kernel %d is wider than a head (--d-model / --mixer-heads = %d)", o->mixer_kernel, o->d_model / o->mixer_heads);
    if (k == MODEL_MIXER && o->no_mask)
        REFUSE("--no-mask: a causal mixer language model with an unmasked mixing sees the tokens it predicts (it is for the autoencoders)");
    if (mem && o->no_mask)
        REFUSE("--no-mask: a memory model's decoder is causal (--no-mask-encoder unmasks its encoder)");
    if (!enc && (o->no_mask_encoder || o->encoder_layers || o->embed_dim))
        REFUSE("--model %s has no encoder (--no-mask-encoder, --encoder-layers and --embed-dim are for the autoencoders and memory models)", o->model);
    if (o->embed_dim > o->d_model)
        REFUSE("--embed-dim %d is larger than --d-model %d (it compresses d -> d_e -> d)", o->embed_dim, o->d_model);
    if (o->unroll && !mixer_kind_is_autoencoder(k)) REFUSE("--unroll is for the autoencoders (mixer-ae, llama-ae)");
    if (!enc && (o->embed_range > 0 || o->embed_noise_bits))
        REFUSE("--model %s has no stored embedding (--embed-range and --embed-noise-bits are for the autoencoders and memory models)", o->model);
    if (o->embed_noise_bits && !(o->embed_range > 0))
        REFUSE("--embed-noise-bits %d needs --embed-range: the noise of rounding to %d bits is half the spacing of 2^%d levels over [-R, R]",
               o->embed_noise_bits, o->embed_noise_bits, o->embed_noise_bits);
    if ((o->encoder || o->freeze_encoder || o->memory_start) && !mem)
        REFUSE("--encoder, --freeze-encoder and --memory-start are for the memory models (mixer-mem, llama-mem)");
#undef REFUSE
    return 0;
}

int trainer_opts_check(const trainer_opts_t *o, char *err, size_t errlen) {
    int max_seq = o->max_seq ? o->max_seq : o->T;
    if (o->allow_restart && !o->resume) {
        snprintf(err, errlen, "--allow-restart goes with --resume");
        return -1;
    }
    precision_t p;
    if (o->precision && precision_parse(o->precision, &p, err, errlen)) return -1;
    if (!o->loaders && !o->discover) {
        snprintf(err, errlen, "no data: give --loaders EP[,EP...] and/or --discover");
        return -1;
    }
    /* every element an endpoint: trainer_data_open's strtok skips empty ones, so ',' named no
     * loader and the trainer waited 6 x --timeout-ms before saying so, and 'a,,b' hid a typo */
    for (const char *p = o->loaders; p; p = p[strcspn(p, ",")] ? p + strcspn(p, ",") + 1 : NULL) {
        if (strspn(p, " \t") >= strcspn(p, ",")) {
            snprintf(err, errlen, "--loaders '%s': an empty endpoint in the list (give EP[,EP...])", o->loaders);
            return -1;
        }
    }
    if (!family_find(o->model)) {
        snprintf(err, errlen, "--model '%s' is not a model family (%s)", o->model, family_names());
        return -1;
    }
    if (strcmp(o->kappa_unit, "bits") && strcmp(o->kappa_unit, "nats")) {
        snprintf(err, errlen, "--kappa-unit must be bits or nats, not '%s'", o->kappa_unit);
        return -1;
    }
    if (strcmp(o->layout, "pack") && strcmp(o->layout, "pad")) {
        snprintf(err, errlen, "--layout must be pack or pad, not '%s'", o->layout);
        return -1;
    }
    if (o->T > max_seq) {
        snprintf(err, errlen, "--seq-len %d is longer than the RoPE table (--max-seq %d)", o->T, max_seq);
        return -1;
    }
    if (o->attn_window && strcmp(o->model, "ltm")) {
        snprintf(err, errlen, "--window %d: the attention window is the LTM's (--model ltm); the loaders' "
                 "request window is --in-flight", o->attn_window);
        return -1;
    }
    if (o->attn_window > o->T) {
        snprintf(err, errlen, "--window %d is longer than --seq-len %d", o->attn_window, o->T);
        return -1;
    }
    if (!strcmp(o->model, "ltm") && o->latent_vectors > max_seq) {
        snprintf(err, errlen, "--latent-vectors %d exceeds the RoPE table (--max-seq %d), which places them",
                 o->latent_vectors, max_seq);
        return -1;
    }
    if (o->d_model % o->n_heads) {
        snprintf(err, errlen, "--heads %d does not divide --d-model %d", o->n_heads, o->d_model);
        return -1;
    }
    if (o->n_heads % o->n_kv_heads) {
        snprintf(err, errlen, "--kv-heads %d does not divide --heads %d", o->n_kv_heads, o->n_heads);
        return -1;
    }
    if ((o->d_model / o->n_heads) % 2) {
        snprintf(err, errlen, "head size %d (--d-model / --heads) must be even for RoPE", o->d_model / o->n_heads);
        return -1;
    }
    if (o->min_lr > o->lr) {
        snprintf(err, errlen, "--min-lr %g is above --lr %g", o->min_lr, o->lr);
        return -1;
    }
    if (o->warmup > o->steps) {
        snprintf(err, errlen, "--warmup %d is longer than --steps %lld", o->warmup, o->steps);
        return -1;
    }
    dp_kind dp;
    if (dp_kind_parse(o->dp, &dp)) {
        snprintf(err, errlen, "--dp must be none, mpi or nccl, not '%s'", o->dp);
        return -1;
    }
    int launched = dp_launcher_world();
    if (dp == DP_NONE && (o->zero || o->rank >= 0 || o->world > 0 || o->rendezvous)) {
        snprintf(err, errlen, "--zero, --rank, --world and --rendezvous go with --dp mpi or --dp nccl");
        return -1;
    }
    if (dp == DP_NONE && launched > 1) {
        snprintf(err, errlen, "started by mpirun as one of %d processes without --dp: each would train alone on the same "
                 "run; add --dp mpi (or --dp nccl)", launched);
        return -1;
    }
    int gpu = !strncmp(o->device, "cuda", 4);
    if ((dp == DP_MPI && gpu) || (dp == DP_NCCL && !gpu)) {
        snprintf(err, errlen, dp == DP_MPI ? "--dp mpi sums CPU buffers; --device %s trains on a GPU: use --dp nccl"
                                           : "--dp nccl sums GPU buffers; --device %s trains on the CPU: use --dp mpi",
                 o->device);
        return -1;
    }
    if (o->world > 0 && o->rank >= o->world) {
        snprintf(err, errlen, "--rank %d is not below --world %d", o->rank, o->world);
        return -1;
    }
    if (mixer_opts_check(o, err, errlen)) return -1;
    if (o->run[0] == 0 || strlen(o->run) >= 48 || strpbrk(o->run, "/ \t\n")) {
        snprintf(err, errlen, "--run '%s' must be 1..47 characters without '/' or spaces", o->run);
        return -1;
    }
    return 0;
}

void trainer_opts_config(const trainer_opts_t *o, int vocab_size, int eot_id, model_config_t *c) {
    memset(c, 0, sizeof *c);
    const model_family_t *f = family_find(o->model);
    c->kind = f ? f->kind : MODEL_LLAMA;
    c->vocab_size = vocab_size;
    c->d_model = o->d_model;
    c->n_layers = o->n_layers;
    c->n_heads = o->n_heads;
    c->n_kv_heads = o->n_kv_heads;
    c->d_ff = o->d_ff;
    c->max_seq = o->max_seq ? o->max_seq : o->T;
    c->rope_theta = o->rope_theta;
    c->norm_eps = o->norm_eps;
    c->tied = !o->untied;
    c->eot_id = eot_id;
    if (c->kind == MODEL_FREE) {
        c->latent_bits = o->latent_bits;
        c->kappa_nats = trainer_opts_kappa_nats(o);
    }
    if (mixer_kind_uses_mixer(c->kind)) c->mixer_heads = o->mixer_heads, c->mixer_kernel = o->mixer_kernel;
    if (mixer_kind_is(c->kind)) c->no_mask_decoder = o->no_mask;
    if (mixer_kind_has_encoder(c->kind)) {
        c->no_mask_encoder = o->no_mask || o->no_mask_encoder;
        c->encoder_layers = o->encoder_layers ? o->encoder_layers : o->n_layers;
        c->embed_dim = o->embed_dim ? o->embed_dim : o->d_model;
        c->embed_range = o->embed_range;
        c->embed_noise_bits = o->embed_noise_bits;
    }
    if (mixer_kind_is_autoencoder(c->kind)) c->unroll = o->unroll;
    if (mixer_kind_is_memory(c->kind)) c->freeze_encoder = o->freeze_encoder, c->memory_start = o->memory_start;
    if (c->kind == MODEL_LTM) {
        c->sliding_window = o->attn_window;
        c->latent_vectors = o->latent_vectors;
        c->inner_steps = o->inner_steps;
        c->fast_lr = o->fast_lr;
        c->fast_lr_end = o->fast_lr_end;
        c->fast_lr_steps = o->steps > (1 << 30) ? 1 << 30 : (int)o->steps;
    }
}

void trainer_opts_flops_line(const model_config_t *c, int T, char *buf, size_t cap) {
    buf[0] = 0;
    if (c->kind == MODEL_LLAMA)
        snprintf(buf, cap, "trFLOPs/token %.9g (seed 003 §2.4: 3 x the forward's %.9g)", ltm_train_flops(c, T),
                 ltm_forward_flops(c, T));
    else if (c->kind == MODEL_LTM)
        snprintf(buf, cap, "trFLOPs/token %.9g (seed 003 §2.4: 3 (K + 1) = %d x the forward's %.9g)",
                 ltm_train_flops(c, T), 3 * (c->inner_steps + 1), ltm_forward_flops(c, T));
}

float trainer_opts_kappa_nats(const trainer_opts_t *o) {
    return strcmp(o->kappa_unit, "nats") == 0 ? o->kappa : (float)(o->kappa * M_LN2);
}
