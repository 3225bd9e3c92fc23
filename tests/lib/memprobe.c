/* tests/lib/memprobe.c: does a jointly trained memory model (mixer-mem) use its stored
 * embedding, and does the embedding stay different across chunks? Trains a small model
 * in-process (one thread is enough: d 64, 2 decoder + 1 encoder mixer blocks, T 64, B 8, 16
 * stored floats at unit RMS clamped to 4 sd with 8-bit noise, AdamW lr 3e-3 after 30 warm-up
 * steps, weight decay 0.1) and every 50 steps prints, on 4 fixed validation batches (32
 * chunks): the train loss of the last 50 steps; the val CE with each chunk's own embedding
 * (32-bit floats); the CE with the next chunk's embedding and with zeros minus the own
 * (mean and standard error over the 32 chunks: > 0 when the decoder reads the chunk's own
 * information, resp. anything at all, from it); the embedding's spread, the variance
 * across chunks over the mean square (1: as varied as noise, 0: one vector for every chunk);
 * and at the same steps the gradient norms that reach the encoder, memory.proj (and
 * memory.start) and the rest. trainer/examples/memprobe.sh builds it and runs README's
 * variants. Usage: memprobe DATA STEPS [mem | mem-start | ae] [SEED (of the weights; 1)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/wire.h"
#include "loader/batch.h"
#include "model/adamw.h"
#include "model/device.h"
#include "model/mixers.h"

enum { B = 8, T = 64, NV = 4, DE = 16 };
static uint32_t vt[NV][B * T], vs[NV][B * T];
static double ce_row[3][NV * B];   /* own, next chunk's, zeros */
static mixers_t *m;
static char err[512];

static void die(const char *what) {
    fprintf(stderr, "memprobe: %s: %s\n", what, err);
    exit(1);
}

/* CE per chunk of the last forward (row t predicts token t of the chunk). */
static void row_ce(const uint32_t *tok, int V, double *out) {
    const float *lg = mixers_logits(m);
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int t = 0; t < T; t++) {
            const float *l = lg + ((size_t)b * T + t) * V;
            float mx = l[0];
            for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            double z = 0;
            for (int v = 0; v < V; v++) z += exp((double)l[v] - mx);
            s += mx + log(z) - l[tok[b * T + t]];
        }
        out[b] = s / T;
    }
}

/* The three evaluations; the spread of the own embeddings. */
static double evaluate(int V) {
    double acc[DE] = {0}, acc2[DE] = {0};
    for (int k = 0; k < 3; k++) {
        if (mixers_set_embed_eval(m, 32, k == 2, err, sizeof err)) die("eval");
        for (int i = 0; i < NV; i++) {
            if (mixers_forward_enc(m, vt[i], k == 1 ? vs[i] : NULL, NULL, NULL, NULL, err, sizeof err)) die("forward");
            row_ce(vt[i], V, ce_row[k] + i * B);
            if (k) continue;
            const float *e = mixers_embedding(m);
            for (int b = 0; b < B; b++)
                for (int j = 0; j < DE; j++) acc[j] += e[b * DE + j], acc2[j] += e[b * DE + j] * e[b * DE + j];
        }
    }
    if (mixers_set_embed_eval(m, 0, 0, err, sizeof err)) die("eval");
    double var = 0, ms = 0;
    for (int j = 0; j < DE; j++) {
        const double mu = acc[j] / (NV * B);
        var += acc2[j] / (NV * B) - mu * mu;
        ms += acc2[j] / (NV * B);
    }
    return var / ms;
}

static void gain(int k, double *mean, double *se) {
    double s = 0, s2 = 0;
    const int n = NV * B;
    for (int i = 0; i < n; i++) {
        const double d = ce_row[k][i] - ce_row[0][i];
        s += d, s2 += d * d;
    }
    *mean = s / n;
    *se = sqrt((s2 / n - *mean * *mean) / (n - 1));
}

int main(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: memprobe DATA STEPS [mem | mem-start | ae] [SEED]\n"
                        "  trains a small memory model (or autoencoder) on the dataset DATA (bin/tokenizer encode's\n"
                        "  output, 25 documents held out) and prints every 50 steps whether it uses its embedding\n"
                        "  (tests/lib/memprobe.c says what each column is)\n");
        return argc < 3 ? 2 : 0;
    }
    const int steps = atoi(argv[2]);
    const char *variant = argc > 3 ? argv[3] : "mem";
    const long seed = argc > 4 ? atol(argv[4]) : 1;
    if (steps < 0 || (strcmp(variant, "mem") && strcmp(variant, "mem-start") && strcmp(variant, "ae"))) {
        fprintf(stderr, "memprobe: STEPS must be >= 0 and the variant mem, mem-start or ae\n");
        return 2;
    }
    loader_src_t *src;
    if (loader_src_open(&src, argv[1], NULL, 25, err, sizeof err)) die(argv[1]);
    const int V = (int)loader_src_meta(src)->vocab_size;
    model_config_t c = {.kind = strcmp(variant, "ae") ? MODEL_MIXER_MEM : MODEL_MIXER_AE, .vocab_size = V,
                        .d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .d_ff = 192, .max_seq = T,
                        .rope_theta = 1e4f, .norm_eps = 1e-5f, .tied = 1, .mixer_heads = 1, .mixer_kernel = 1,
                        .encoder_layers = 1, .embed_dim = DE, .embed_range = 4, .embed_noise_bits = 8,
                        .memory_start = !strcmp(variant, "mem-start")};
    if (mixers_create_on(&m, device_cpu_default(), &c, B, T, (uint64_t)seed, err, sizeof err)) die("model");
    static uint32_t rows[B * (T + 1)], tok[B * T];
    loader_params_t p = {.seed = 0, .world = 1, .B = B, .T = T, .layout = WIRE_PACK, .split = WIRE_VAL};
    for (int i = 0; i < NV; i++) {
        p.step = i;
        if (loader_batch_make(src, &p, rows, NULL, NULL, err, sizeof err)) die("val batch");
        for (int b = 0; b < B; b++) memcpy(vt[i] + b * T, rows + b * (T + 1), sizeof(uint32_t) * T);
        for (int b = 0; b < B; b++) memcpy(vs[i] + b * T, vt[i] + ((b + 1) % B) * T, sizeof(uint32_t) * T);
    }
    tensor_view_t pv[128], gv[128];
    const int n = mixers_params(m, pv, 128);
    mixers_grads(m, gv, 128);
    adamw_config_t oc = adamw_config_default();
    adamw_t *o;
    if (adamw_create(&o, pv, n, &oc, err, sizeof err)) die("optimizer");
    printf("# memprobe %s %s %d seed %ld: d 64, 2+1 mixer blocks, T %d, B %d, %d floats, range 4, 8-bit noise\n", argv[1], variant,
           steps, seed, T, B, DE);
    p.split = WIRE_TRAIN;
    double tl = 0, ge = 0, gm = 0, gr = 0;
    int tn = 0;
    uint64_t spe = 0;   /* steps per epoch: the next epoch's order after it */
    if (loader_batch_make(src, &p, rows, NULL, &spe, err, sizeof err) || !spe) die("batch");
    for (int s = 0;; s++) {
        if (s % 50 == 0) {
            double spread = evaluate(V), g1, e1, g2, e2;
            gain(1, &g1, &e1);
            gain(2, &g2, &e2);
            double own = 0;
            for (int i = 0; i < NV * B; i++) own += ce_row[0][i] / (NV * B);
            printf("step %5d train %.4f val %.4f next-chunk's %+.4f +- %.4f zeros %+.4f +- %.4f spread %.4f"
                   " grad enc %.3g mem %.3g rest %.3g\n",
                   s, tn ? tl / tn : NAN, own, g1, e1, g2, e2, spread, ge, gm, gr);
            fflush(stdout);
            tl = 0, tn = 0;
        }
        if (s == steps) break;
        p.epoch = (uint64_t)s / spe, p.step = (uint64_t)s % spe;
        if (loader_batch_make(src, &p, rows, NULL, NULL, err, sizeof err)) die("batch");
        for (int b = 0; b < B; b++) memcpy(tok + b * T, rows + b * (T + 1), sizeof(uint32_t) * T);
        mixers_zero_grad(m);
        mixers_set_step(m, s);
        mixers_set_row(m, 0);
        float l;
        if (mixers_forward(m, tok, tok, NULL, &l, err, sizeof err) || mixers_backward(m, err, sizeof err)) die("step");
        tl += l, tn++;
        ge = gm = gr = 0;
        for (int i = 0; i < n; i++) {
            double q = 0;
            for (int64_t j = 0; j < tensor_numel(&gv[i]); j++) q += (double)gv[i].data[j] * gv[i].data[j];
            *(!strncmp(pv[i].name, "encoder.", 8) ? &ge : !strncmp(pv[i].name, "memory.", 7) ? &gm : &gr) += q;
        }
        ge = sqrt(ge), gm = sqrt(gm), gr = sqrt(gr);
        const float lr = s < 30 ? 3e-3f * (s + 1) / 30 : 3e-3f;
        if (adamw_step(o, gv, n, lr, 1, 1.0f, NULL, err, sizeof err)) die("update");
    }
    adamw_destroy(&o);
    mixers_destroy(&m);
    loader_src_close(&src);
    return 0;
}
