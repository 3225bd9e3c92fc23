/* bin/evaluator: evaluates each checkpoint of a run once, live or after the fact
 * (docs/evaluator.md). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/cpu_isa.h"
#include "bus/bus.h"
#include "bus/net.h"
#include "common/flags.h"
#include "common/progress.h"
#include "evaluator/results.h"
#include "evaluator/task.h"
#include "evaluator/watch.h"

static void usage(FILE *f, const flag_t *flags, int n) {
    fprintf(f,
            "usage: evaluator --run NAME --run-dir DIR --task val|mc|em|synth|latent|code [task options] [options]\n"
            "       evaluator --task code --file PROBLEMS.jsonl --completions SAMPLES.jsonl|--canonical [options]\n"
            "Follows a training run: evaluates its newest checkpoint, then every new one once (the\n"
            "bus's ckpt/<run> announcements say when to look; the directory is the source of truth).\n"
            "Results: one JSON line per checkpoint on stdout and appended to --out, and an event\n"
            "eval/<run> on the bus. Start, kill or replace it at any time: the trainer never notices.\n"
            "\ntasks:\n"
            "  val  cross-entropy, perplexity, bits per byte on --data DIR (--val-docs N: its last N\n"
            "       documents), --batches batches of --batch x --seq-len tokens in a fixed order;\n"
            "       autoencoders and memory models: the decoder's bits per byte plus the stored\n"
            "       embedding's at --bits-per-param bits per float (the code the decoder reads),\n"
            "       their total, and controls: the embedding zeroed, another row's, a unigram\n"
            "  mc   multiple choice from --file JSONL {\"context\",\"choices\",\"label\"} with --vocab V:\n"
            "       acc_completion, acc_char (seed 000 Appendix B)\n"
            "  em   exact match of the greedy (or --temperature) continuation, --file JSONL\n"
            "       {\"prompt\",\"answer\"[,\"stop\",\"max_tokens\"]} with --vocab V\n"
            "  synth  seed 000 Figure 4 measures on the synthetic sequences: valid fraction and target\n"
            "       position spread with independent / shared Z, over --limit groups (default 10)\n"
            "  latent  what a Free Transformer's Z carries on --limit held-out synthetic sequences\n"
            "       (default 4000, --seed): KL per sequence against kappa x T, and the bits of the\n"
            "       target's position a linear probe reads from Z\n"
            "  code pass@k of generated code: --file in HumanEval(+) or MBPP format, --samples n\n"
            "       completions per problem (the sampler's path, stop sequences of the format), each\n"
            "       program run in the sandbox (--interpreter, limits, --jobs); pass@k for k <= n and\n"
            "       how many samples ended by which limit. --completions F.jsonl ({task_id, completion})\n"
            "       or --canonical scores given code instead, without --run or a checkpoint\n"
            "mc reports macro_avg/acc_char and macro_avg/acc_completion over the lines' \"subject\"\n"
            "(or \"category\") beside the micro averages; em scores GSM8K lines ({question, answer\n"
            "ending in #### N}) by the final number.\n"
            "Latent-thought LM checkpoints: val infers each row's posterior by K fast steps for each\n"
            "K of --inner-steps-list and reports the NELBO bound on the NLL, perplexity and bits per\n"
            "byte for each; mc and em infer it from the context (the question, the prompt) only.\n"
            "\noptions:\n");
    flags_usage(f, flags, n);
}

/* --task code with --completions or --canonical: no checkpoint, one result, exit. */
static int score_given(const eval_task_cfg_t *tc, const char *run, const char *tag, const char *out, int quiet) {
    char err[2048];
    eval_task_t *task = NULL;
    if (eval_task_open(&task, tc, err, sizeof err)) {
        fprintf(stderr, "evaluator: task %s: %s\n", tc->task, err);
        return 2;
    }
    bus_signals_install();
    eval_values_t vals;
    double t0 = progress_now();
    int rc = eval_task_run(task, NULL, &vals, (volatile int *)bus_signal_flag(), err, sizeof err);
    eval_task_close(&task);
    if (rc) {
        fprintf(stderr, "evaluator: task %s on %s: %s\n", tc->task, tc->completions ? tc->completions : "canonical solutions", err);
        return rc == EVAL_EINTR ? 0 : 1;
    }
    eval_values_add(&vals, "eval_s", progress_now() - t0);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    eval_record_t r = {run ? run : "given", tag ? tag : tc->task, tc->completions ? tc->completions : "canonical", 0,
                       now.tv_sec + now.tv_nsec * 1e-9, &vals};
    if (out && eval_results_append(out, &r, err, sizeof err)) {
        fprintf(stderr, "evaluator: %s\n", err);
        return 1;
    }
    char *line = eval_record_json(&r);
    if (line) printf("%s\n", line);
    free(line);
    if (!quiet) {
        fprintf(stderr, "evaluator: %s:", tc->file);
        for (uint32_t i = 0; i < vals.n; i++) fprintf(stderr, " %s %.6g", vals.kv[i].name, vals.kv[i].value);
        fputc('\n', stderr);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *run = NULL, *run_dir = NULL, *bus_sub = NULL, *bus_pub = NULL, *out = NULL, *tag = NULL, *name = NULL;
    const char *device = device_default_spec(), *precision = "fp32";
    int once = 0, all = 0, no_bus = 0, quiet = 0, poll_ms = 2000, threads = 0, oom_tries = 5;
    eval_task_cfg_t tc = {.task = NULL, .batches = 16, .batch = 8, .seq_len = 0, .seed = 0,
                         .bits_per_param = 0, .samples = 1, .max_new = 256,
                         .top_p = 1, .sandbox = {.wall_s = 10, .cpu_s = 5}};
    double mem_mb = 1024, disk_mb = 16, out_kb = 64;
    const char *isolation = "ns";
    bus_net_opts_t net = {0};
    flag_t fl[64 + BUS_NET_NFLAGS] = {
        {"run", FLAG_STR, &run, "run name (topics ckpt/<run>, eval/<run>)", 0, 0, 0},
        {"run-dir", FLAG_STR, &run_dir, "the run's checkpoint directory (default: learnt from the bus)", 0, 0, 0},
        {"task", FLAG_STR, &tc.task, "val, mc, em, synth, latent or code", 0, 0, 0},
        {"tag", FLAG_STR, &tag, "task name in results and events (default: the task)", 0, 0, 0},
        {"name", FLAG_STR, &name, "instance name in its stage/evaluator/<name> beats on the bus (default: <tag>-<pid>)", 0, 0, 0},
        {"out", FLAG_STR, &out, "results file: one JSON line appended (fsynced) per evaluation", 0, 0, 0},
        {"once", FLAG_BOOL, &once, "evaluate the newest checkpoint (with --all: every one on disk) and exit", 0, 0, 0},
        {"all", FLAG_BOOL, &all, "also evaluate the checkpoints older than the newest", 0, 0, 0},
        {"bus-sub", FLAG_STR, &bus_sub, "bus XPUB endpoint (default: $FT_BUS_SUB or " BUS_DEFAULT_SUB ")", 0, 0, 0},
        {"bus-pub", FLAG_STR, &bus_pub, "bus XSUB endpoint (default: $FT_BUS_PUB or " BUS_DEFAULT_PUB ")", 0, 0, 0},
        {"no-bus", FLAG_BOOL, &no_bus, "neither subscribe nor publish (poll the directory)", 0, 0, 0},
        {"poll-ms", FLAG_INT, &poll_ms, "directory rescan period when the bus is quiet", 50, 600000, 0},
        {"oom-tries", FLAG_INT, &oom_tries, "watching: tries of a checkpoint that runs out of memory (waits doubling from --poll-ms to 60 s) before it is given up, unscored (0: never)", 0, 1000000, 0},
        {"data", FLAG_STR, &tc.data, "val: dataset directory", 0, 0, 0},
        {"val-docs", FLAG_I64, &tc.val_docs, "val: evaluate the last N documents of --data (0: all of it)", 0, 1e15, 0},
        {"batches", FLAG_INT, &tc.batches, "val: batches evaluated (0: the whole split)", 0, 1e9, 0},
        {"batch", FLAG_INT, &tc.batch, "rows per forward", 1, 65536, 0},
        {"seq-len", FLAG_INT, &tc.seq_len, "val: tokens per row (0: the model's max_position_embeddings)", 0, 1 << 20, 0},
        {"seed", FLAG_I64, &tc.seed, "val: document order; em, code: sampling; synth: prompts and sampling; latent: which synthetic sequences", 0, 0, 0},
        {"file", FLAG_STR, &tc.file, "mc, em, code: the JSONL task file (code: HumanEval or MBPP problems)", 0, 0, 0},
        {"vocab", FLAG_STR, &tc.vocab, "mc, em, code: the run's tokenizer (bytes, gpt2, cl100k_base, a file)", 0, 0, 0},
        {"limit", FLAG_INT, &tc.limit, "mc, em, code: first N items only (0: all); synth: groups of 5 (0: 10); latent: sequences (0: 4000)", 0, 1e9, 0},
        {"temperature", FLAG_FLOAT, &tc.temperature, "em, code: 0 = greedy, else sampled with --seed; synth: sampling temperature (0: 1)", 0, 100, 0},
        {"eot-prefix", FLAG_BOOL, &tc.eot_prefix, "synth: put end-of-text before each prompt (models trained on rows that start with it)", 0, 0, 0},
        {"iw-samples", FLAG_INT, &tc.iw_samples, "val: Free Transformer: posterior samples K per row (ELBO, importance-weighted bound; 0: 4); LTM: samples K' of each importance-weighted bound (0: 8)", 0, 4096, 0},
        {"draws", FLAG_INT, &tc.draws, "Free Transformer val/mc: prior draws N (ce_prior; mc choice averaging; 0: 4); LTM val: fresh noise draws S scoring each posterior (0: 16; at least 2 K'); LTM mc: posterior samples per question (0: 4)", 0, 4096, 0},
        {"inner-steps-list", FLAG_STR, &tc.inner_steps_list, "LTM val: the bounds after each of these inference steps, e.g. 0,4,16,64 (default: 0; the reported K, --inner-steps or the checkpoint's, is always added)", 0, 0, 0},
        {"inner-steps", FLAG_INT, &tc.inner_steps, "LTM: fast steps inferring the posterior (val: the K of nll_bound; mc, em: from the context; 0: the checkpoint's)", 0, 100000, 0},
        {"fast-lr", FLAG_FLOAT, &tc.fast_lr, "LTM: the inference's peak rate (0: the checkpoint's final fast rate)", 0, 100, 0},
        {"bits-per-param", FLAG_INT, &tc.bits_per_param, "autoencoders, memory models, val: bits b_p each float of the stored embedding takes, the code the decoder reads (4, 8, 16 or 32; 0: 8, or 32 for an unbounded embedding)", 0, 64, 0},
        {"bits-list", FLAG_STR, &tc.bits_list, "autoencoders, memory models, val: also the CE and bits per byte with the embedding at each of these bits (default 4,8,16,32)", 0, 0, 0},
        {"threads", FLAG_INT, &threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", 0, 4096, 0},
        {"device", FLAG_STR, &device, "where the models run: cpu, cuda or cuda:N (default $FT_DEVICE or cpu)", 0, 0, 0},
        {"precision", FLAG_STR, &precision, "products in fp32, bf16 or tf32 (the GPU's) (default fp32)", 0, 0, 0},
        {"quiet", FLAG_BOOL, &quiet, "no per-evaluation lines on stderr (the bus still gets them as log/evaluator)", 0, 0, 0},
        {"samples", FLAG_INT, &tc.samples, "code: completions n per problem (pass@k for every k <= n)", 1, 100000, 0},
        {"max-new", FLAG_INT, &tc.max_new, "code, em on GSM8K: tokens generated per completion at most", 1, 1 << 20, 0},
        {"top-p", FLAG_FLOAT, &tc.top_p, "code: nucleus sampling (1: off)", 0, 1, 0},
        {"stop-words", FLAG_STR, &tc.stop_words, "code: JSON array replacing the format's stop sequences, e.g. '[\"\\ndef\"]'", 0, 0, 0},
        {"completions", FLAG_STR, &tc.completions, "code: score these completions (JSONL {task_id, completion|solution}) instead of generating", 0, 0, 0},
        {"canonical", FLAG_BOOL, &tc.canonical, "code: score each problem's canonical solution (checks a problem file)", 0, 0, 0},
        {"samples-out", FLAG_STR, &tc.samples_out, "code: every sample's completion and end, one JSON line each (rewritten per evaluation)", 0, 0, 0},
        {"interpreter", FLAG_STR, &tc.sandbox.interpreter, "code: the command that runs a program (its file name appended) (default " SANDBOX_DEFAULT_INTERPRETER ")", 0, 0, 0},
        {"jobs", FLAG_INT, &tc.sandbox.jobs, "code: programs run at once (0: the online CPUs)", 0, 256, 0},
        {"timeout", FLAG_DOUBLE, &tc.sandbox.wall_s, "code: wall-clock seconds per program", 0.01, 86400, 0},
        {"cpu-limit", FLAG_DOUBLE, &tc.sandbox.cpu_s, "code: CPU seconds per process (RLIMIT_CPU)", 0.01, 86400, 0},
        {"mem-mb", FLAG_DOUBLE, &mem_mb, "code: address space per process, MiB (RLIMIT_AS)", 16, 1 << 20, 0},
        {"disk-mb", FLAG_DOUBLE, &disk_mb, "code: largest file and working directory, MiB", 0.01, 1 << 20, 0},
        {"max-procs", FLAG_INT, &tc.sandbox.nproc, "code: processes and threads per program (RLIMIT_NPROC; 16 when not given)", 1, 100000, 0},
        {"max-files", FLAG_INT, &tc.sandbox.nofile, "code: open files per process (RLIMIT_NOFILE; 64 when not given)", 8, 1 << 20, 0},
        {"output-kb", FLAG_DOUBLE, &out_kb, "code: stdout and stderr kept per program, KiB; more: killed", 0.0625, 1 << 20, 0},
        {"fewshot", FLAG_STR, &tc.fewshot, "em: GSM8K lines put before every question as worked examples", 0, 0, 0},
        {"shots", FLAG_INT, &tc.shots, "em: the first N lines of --fewshot (0: all)", 0, 1000, 0},
        {"sandbox", FLAG_STR, &isolation, "code: ns (namespaces: no network, read-only files; root or a user namespace) or none (rlimits only: trusted code)", 0, 0, 0},
    };
    const int nbase = flags_count(fl, 64);
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
    tc.sandbox.mem_bytes = (size_t)(mem_mb * 1048576.0);
    tc.sandbox.disk_bytes = (size_t)(disk_mb * 1048576.0);
    tc.sandbox.out_bytes = (size_t)(out_kb * 1024.0);
    if (!strcmp(isolation, "ns")) tc.sandbox.isolation = SANDBOX_ISOLATE_NS;
    else if (!strcmp(isolation, "none")) tc.sandbox.isolation = SANDBOX_ISOLATE_NONE;
    else {
        fprintf(stderr, "evaluator: --sandbox '%s': ns or none\n", isolation);
        return 2;
    }
    if (tc.task && !eval_task_needs_model(&tc)) return score_given(&tc, run, tag, out, quiet);
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
        .oom_tries = oom_tries,
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
