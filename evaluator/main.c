/* bin/evaluator: evaluates each checkpoint of a run once, live or after the fact
 * (docs/evaluator.md). */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "model/cpu_isa.h"
#include "bus/bus.h"
#include "bus/net.h"
#include "common/flags.h"
#include "evaluator/task.h"
#include "evaluator/watch.h"

static void usage(FILE *f, const flag_t *flags, int n) {
    fprintf(f,
            "usage: evaluator --run NAME --run-dir DIR --task val|mc|em [task options] [options]\n"
            "Follows a training run: evaluates its newest checkpoint, then every new one once (the\n"
            "bus's ckpt/<run> announcements say when to look; the directory is the source of truth).\n"
            "Results: one JSON line per checkpoint on stdout and appended to --out, and an event\n"
            "eval/<run> on the bus. Start, kill or replace it at any time: the trainer never notices.\n"
            "\ntasks:\n"
            "  val  cross-entropy, perplexity, bits per byte on --data DIR (--val-docs N: its last N\n"
            "       documents), --batches batches of --batch x --seq-len tokens in a fixed order;\n"
            "       autoencoders and memory models: the decoder's bits per byte plus the stored\n"
            "       embedding's at --bits-per-param bits per float, and their total\n"
            "  mc   multiple choice from --file JSONL {\"context\",\"choices\",\"label\"} with --vocab V:\n"
            "       acc_completion, acc_char (seed 000 Appendix B)\n"
            "  em   exact match of the greedy (or --temperature) continuation, --file JSONL\n"
            "       {\"prompt\",\"answer\"[,\"stop\",\"max_tokens\"]} with --vocab V\n"
            "  synth  seed 000 Figure 4 measures on the synthetic sequences: valid fraction and target\n"
            "       position spread with independent / shared Z, over --limit groups (default 10)\n"
            "Latent-thought LM checkpoints: val infers each row's posterior by K fast steps for each\n"
            "K of --inner-steps-list and reports the NELBO bound on the NLL, perplexity and bits per\n"
            "byte for each; mc and em infer it from the context (the question, the prompt) only.\n"
            "\noptions:\n");
    flags_usage(f, flags, n);
}

int main(int argc, char **argv) {
    const char *run = NULL, *run_dir = NULL, *bus_sub = NULL, *bus_pub = NULL, *out = NULL, *tag = NULL, *name = NULL;
    const char *device = device_default_spec(), *precision = "fp32";
    int once = 0, all = 0, no_bus = 0, quiet = 0, poll_ms = 2000, threads = 0;
    eval_task_cfg_t tc = {.task = NULL, .batches = 16, .batch = 8, .seq_len = 0, .seed = 0,
                         .iw_samples = 4, .draws = 4, .bits_per_param = 8};
    bus_net_opts_t net = {0};
    flag_t fl[40 + BUS_NET_NFLAGS] = {
        {"run", FLAG_STR, &run, "run name (topics ckpt/<run>, eval/<run>)", 0, 0, 0},
        {"run-dir", FLAG_STR, &run_dir, "the run's checkpoint directory (default: learnt from the bus)", 0, 0, 0},
        {"task", FLAG_STR, &tc.task, "val, mc, em or synth", 0, 0, 0},
        {"tag", FLAG_STR, &tag, "task name in results and events (default: the task)", 0, 0, 0},
        {"name", FLAG_STR, &name, "instance name in its stage/evaluator/<name> beats on the bus (default: <tag>-<pid>)", 0, 0, 0},
        {"out", FLAG_STR, &out, "results file: one JSON line appended (fsynced) per evaluation", 0, 0, 0},
        {"once", FLAG_BOOL, &once, "evaluate the newest checkpoint (with --all: every one on disk) and exit", 0, 0, 0},
        {"all", FLAG_BOOL, &all, "also evaluate the checkpoints older than the newest", 0, 0, 0},
        {"bus-sub", FLAG_STR, &bus_sub, "bus XPUB endpoint (default: $FT_BUS_SUB or " BUS_DEFAULT_SUB ")", 0, 0, 0},
        {"bus-pub", FLAG_STR, &bus_pub, "bus XSUB endpoint (default: $FT_BUS_PUB or " BUS_DEFAULT_PUB ")", 0, 0, 0},
        {"no-bus", FLAG_BOOL, &no_bus, "neither subscribe nor publish (poll the directory)", 0, 0, 0},
        {"poll-ms", FLAG_INT, &poll_ms, "directory rescan period when the bus is quiet", 50, 600000, 0},
        {"data", FLAG_STR, &tc.data, "val: dataset directory", 0, 0, 0},
        {"val-docs", FLAG_I64, &tc.val_docs, "val: evaluate the last N documents of --data (0: all of it)", 0, 1e15, 0},
        {"batches", FLAG_INT, &tc.batches, "val: batches evaluated (0: the whole split)", 0, 1e9, 0},
        {"batch", FLAG_INT, &tc.batch, "rows per forward", 1, 65536, 0},
        {"seq-len", FLAG_INT, &tc.seq_len, "val: tokens per row (0: the model's max_position_embeddings)", 0, 1 << 20, 0},
        {"seed", FLAG_I64, &tc.seed, "val: document order; em: sampling", 0, 0, 0},
        {"file", FLAG_STR, &tc.file, "mc, em: the JSONL task file", 0, 0, 0},
        {"vocab", FLAG_STR, &tc.vocab, "mc, em: the run's tokenizer (bytes, gpt2, cl100k_base, a file)", 0, 0, 0},
        {"limit", FLAG_INT, &tc.limit, "mc, em: first N items only (0: all); synth: groups of 5 (0: 10)", 0, 1e9, 0},
        {"temperature", FLAG_FLOAT, &tc.temperature, "em: 0 = greedy, else sampled with --seed; synth: sampling temperature (0: 1)", 0, 100, 0},
        {"eot-prefix", FLAG_BOOL, &tc.eot_prefix, "synth: put end-of-text before each prompt (models trained on rows that start with it)", 0, 0, 0},
        {"iw-samples", FLAG_INT, &tc.iw_samples, "Free Transformer val: posterior samples K per row (ELBO, importance-weighted bound)", 1, 4096, 0},
        {"draws", FLAG_INT, &tc.draws, "Free Transformer val/mc: prior draws N (ce_prior; mc choice averaging); LTM mc: posterior samples per question", 1, 4096, 0},
        {"inner-steps-list", FLAG_STR, &tc.inner_steps_list, "LTM val: the NELBO bound after each of these inference steps, e.g. 0,4,16,64 (default: 0 and the checkpoint's K)", 0, 0, 0},
        {"inner-steps", FLAG_INT, &tc.inner_steps, "LTM: fast steps inferring the posterior (mc, em: from the context; 0: the checkpoint's)", 0, 100000, 0},
        {"fast-lr", FLAG_FLOAT, &tc.fast_lr, "LTM: the inference's peak rate (0: the checkpoint's final fast rate)", 0, 100, 0},
        {"bits-per-param", FLAG_INT, &tc.bits_per_param, "autoencoders, memory models, val: bits b_p each float of the stored embedding takes (4, 8, 16 or 32)", 0, 64, 0},
        {"threads", FLAG_INT, &threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", 0, 4096, 0},
        {"device", FLAG_STR, &device, "where the models run: cpu, cuda or cuda:N (default $FT_DEVICE or cpu)", 0, 0, 0},
        {"precision", FLAG_STR, &precision, "products in fp32, bf16 or tf32 (the GPU's) (default fp32)", 0, 0, 0},
        {"quiet", FLAG_BOOL, &quiet, "no per-evaluation lines on stderr", 0, 0, 0},
    };
    const int nbase = flags_count(fl, 40);
    const int nf = nbase + bus_net_flags(fl + nbase, &net, -1);
    char err[2048];
    int rc = flags_parse(argc, argv, 1, fl, nf, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) {
        usage(stdout, fl, nf);
        return 0;
    }
    if (rc || bus_net_setup(&net, err, sizeof err)) {
        fprintf(stderr, "evaluator: %s\n", err);
        return 2;
    }
    if (!run || !tc.task) {
        fprintf(stderr, "evaluator: needs --run and --task (see --help)\n");
        return 2;
    }
    if (strlen(run) >= WIRE_NAME_LEN - 1 || (tag && strlen(tag) >= WIRE_NAME_LEN - 1)) {
        fprintf(stderr, "evaluator: --run and --tag must be shorter than %d bytes\n", WIRE_NAME_LEN - 1);
        return 2;
    }
    if (cpu_isa_check(err, sizeof err)) {
        fprintf(stderr, "evaluator: %s\n", err);
        return 2;
    }
    if (threads > 0) omp_set_num_threads(threads);
    device_t *dev = NULL;
    precision_t prec;
    if (precision_parse(precision, &prec, err, sizeof err) || device_open(&dev, device, prec, err, sizeof err)) {
        fprintf(stderr, "evaluator: %s\n", err);
        return 2;
    }
    eval_task_t *task = NULL;
    if (eval_task_open(&task, &tc, err, sizeof err)) {
        fprintf(stderr, "evaluator: task %s: %s\n", tc.task, err);
        device_close(&dev);
        return 2;
    }
    bus_signals_install();
    eval_watch_cfg_t wc = {
        .run = run, .run_dir = run_dir, .bus_sub = bus_sub, .bus_pub = bus_pub, .no_bus = no_bus,
        .out = out, .tag = tag ? tag : tc.task, .name = name, .once = once, .all = all, .poll_ms = poll_ms,
        .quiet = quiet, .task = task, .dev = dev, .stop = bus_signal_flag(),
    };
    err[0] = 0;
    rc = eval_watch_run(&wc, err, sizeof err);
    eval_task_close(&task);
    device_close(&dev);
    if (rc) {
        fprintf(stderr, "evaluator: run %s: %s\n", run, err);
        return rc == EVAL_EARG ? 2 : 1;
    }
    return 0;
}
