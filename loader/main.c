/* loader/main.c: bin/loader, the batch server, and its shell client.
 *
 *   bin/loader --data DIR --bind EP [--val-docs N | --val-data DIR] [--name N] [--bus-pub EP] [--threads N]
 *   bin/loader get  --connect EP --epoch E --step S --B B --T T [--rank r --world w --seed s
 *                   --layout pack|pad --split train|val]      prints the batch as JSON
 *   bin/loader info --connect EP [--B --T --world --layout --split]  prints the info as JSON
 *   bin/loader mkdata --out DIR --docs N [--seed --vocab --min-len --max-len]  random dataset
 *   bin/loader bench --connect EP[,EP...] [--B --T --batches --window]  client-side tokens/s */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/beat.h"
#include "bus/net.h"
#include "bus/wire.h"
#include "common/flags.h"
#include "loader/bench.h"
#include "loader/mkdata.h"
#include "loader/server.h"

#define NF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

static void usage(const char *mode, flag_t *f, int n) {
    if (!strcmp(mode, "serve")) {
        printf("usage: bin/loader --data DIR --bind EP [flags]    serve batches (docs/PROTOCOL.md §1.3)\n"
               "       bin/loader get|info|mkdata|bench --help         the client and dataset subcommands\n\n");
    } else if (!strcmp(mode, "get")) {
        printf("usage: bin/loader get --connect EP --B B --T T [flags]    one batch as JSON\n\n");
    } else {
        printf("usage: bin/loader %s [flags]\n\n", mode);
    }
    flags_usage(stdout, f, n);
}

/* Parses, then loads the security configuration (net: the flags of bus_net_flags, or NULL
 * for a subcommand without sockets); returns -1 to continue, else the exit code. */
static int parse(const char *mode, int argc, char **argv, int first, flag_t *f, int n,
                 const bus_net_opts_t *net) {
    char err[512];
    int npos = 0;
    int rc = flags_parse(argc, argv, first, f, n, NULL, &npos, 0, err, sizeof err);
    if (rc == 1) { usage(mode, f, n); return 0; }
    if (rc < 0 || (net && bus_net_setup(net, err, sizeof err) != 0)) {
        fprintf(stderr, "loader: %s\n", err);
        return 2;
    }
    return -1;
}

static int parse_layout(const char *s, uint8_t *out) {
    if (!strcmp(s, "pack")) *out = WIRE_PACK;
    else if (!strcmp(s, "pad")) *out = WIRE_PAD;
    else return -1;
    return 0;
}

static int parse_split(const char *s, uint8_t *out) {
    if (!strcmp(s, "train")) *out = WIRE_TRAIN;
    else if (!strcmp(s, "val")) *out = WIRE_VAL;
    else return -1;
    return 0;
}

static int cmd_serve(int argc, char **argv) {
    const char *data = NULL, *val_data = NULL, *bind = NULL, *name = NULL, *bus_pub = NULL;
    long long val_docs = 0;
    int threads = 1, quiet = 0;
    bus_net_opts_t net = {0};
    flag_t f[8 + BUS_NET_NFLAGS] = {
        {"data", FLAG_STR, &data, "dataset directory (LMDB, docs/FORMATS.md §1)", 0, 0, 0},
        {"bind", FLAG_STR, &bind, "ROUTER endpoint to serve on (ipc://PATH, tcp://HOST:PORT)", 0, 0, 0},
        {"val-docs", FLAG_I64, &val_docs, "the last N documents form the \"val\" split", 0, 1e18, 0},
        {"val-data", FLAG_STR, &val_data, "a separate dataset directory for \"val\"", 0, 0, 0},
        {"name", FLAG_STR, &name, "instance name, 1..47 bytes of UTF-8: bus topic loader/NAME (default: l<pid>)", 0, 0, 0},
        {"bus-pub", FLAG_STR, &bus_pub, "bus endpoint for the announcements (default $FT_BUS_PUB or tcp://127.0.0.1:5710)", 0, 0, 0},
        {"threads", FLAG_INT, &threads, "worker threads", 1, 64, 0},
        {"quiet", FLAG_BOOL, &quiet, "no log lines on stderr (the bus still gets them: bus/log.h)", 0, 0, 0},
    };
    int nf = 8 + bus_net_flags(f + 8, &net, BUS_PEER_REQUESTS);
    int rc = parse("serve", argc, argv, 1, f, nf, &net);
    if (rc >= 0) return rc;
    if (!data || !bind) {
        fprintf(stderr, "loader: --data and --bind are required (see --help)\n");
        return 2;
    }
    if (val_data && val_docs) {
        fprintf(stderr, "loader: --val-docs and --val-data exclude each other\n");
        return 2;
    }
    char pidname[32], err[512] = "";
    if (!name) {
        snprintf(pidname, sizeof pidname, "l%d", (int)getpid());
        name = pidname;
    } else if (bus_name_check(name, "--name", 0, err, sizeof err)) {
        /* the announcement's name field carries 1..47 bytes of UTF-8: a longer name was cut
         * there (not in the topic), one not UTF-8 made every announcement unsendable */
        fprintf(stderr, "loader: %s\n", err);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    loader_server_cfg_t cfg = {.data = data, .val_data = val_data, .val_docs = (uint64_t)val_docs, .bind = bind,
                               .name = name, .bus_pub = bus_pub, .threads = threads, .quiet = quiet};
    rc = loader_server_run(&cfg, &g_stop, err, sizeof err);
    if (rc) {
        /* err names what failed: the dataset ("dataset PATH: ...", loader_src_open) or the
         * endpoint ("bind EP: ..."); the path again before it said it twice */
        if (err[0]) fprintf(stderr, "loader: %s\n", err);
        else fprintf(stderr, "loader: serve %s: %s\n", data, loader_strerror(rc));
        return 1;
    }
    return 0;
}

/* One request, one reply, on a REQ socket with a time-out. */
static int roundtrip(const char *ep, const wire_msg_t *req, wire_msg_t *rep, int timeout_ms) {
    void *buf = NULL;
    size_t len = 0;
    char err[256] = "";
    if (wire_encode(req, &buf, &len) != WIRE_OK) {
        fprintf(stderr, "loader: %s: could not encode the request\n", ep);
        return 1;
    }
    void *ctx = zmq_ctx_new(), *s = bus_net_socket(ctx, ZMQ_REQ, BUS_PEER_REPLIES, err, sizeof err);
    int rc = 1;
    if (!s || bus_net_connect(s, ep, err, sizeof err) != 0) {
        fprintf(stderr, "loader: %s\n", err);
        goto out;
    }
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    if (zmq_send(s, buf, len, 0) < 0) {
        fprintf(stderr, "loader: send to %s: %s\n", ep, zmq_strerror(zmq_errno()));
        goto out;
    }
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s, 0) < 0) {
        fprintf(stderr, "loader: %s: no reply within %d ms\n", ep, timeout_ms);
        zmq_msg_close(&m);
        goto out;
    }
    int drc = wire_decode(zmq_msg_data(&m), zmq_msg_size(&m), rep, err, sizeof err);
    zmq_msg_close(&m);
    if (drc != WIRE_OK) {
        fprintf(stderr, "loader: reply from %s: %s\n", ep, err);
        goto out;
    }
    if (rep->type == MSG_ERROR) {
        fprintf(stderr, "loader: %s: error %d: %s\n", ep, rep->u.error.code,
                rep->u.error.message ? rep->u.error.message : "");
        wire_msg_free(rep);
        goto out;
    }
    rc = 0;
out:
    free(buf);
    if (s) zmq_close(s);
    zmq_ctx_term(ctx);
    return rc;
}

static int cmd_get(int argc, char **argv, int info) {
    const char *ep = NULL, *layout_s = "pack", *split_s = "train";
    unsigned long long epoch = 0, step = 0, seed = 0;
    int B = info ? 1 : 0, T = info ? 1 : 0, rank = 0, world = 1, timeout_ms = 10000;
    bus_net_opts_t net = {0};
    flag_t f[11 + BUS_NET_NFLAGS] = {
        {"connect", FLAG_STR, &ep, "loader endpoint", 0, 0, 0},
        {"B", FLAG_INT, &B, info ? "rows" : "rows (needed)", 1, 1 << 30, 0},
        {"T", FLAG_INT, &T, info ? "tokens per row (a row carries T+1)" : "tokens per row (a row carries T+1; needed)", 1, 1 << 30, 0},
        {"world", FLAG_INT, &world, "data-parallel world size", 1, 1 << 30, 0},
        {"layout", FLAG_STR, &layout_s, "pack | pad", 0, 0, 0},
        {"split", FLAG_STR, &split_s, "train | val", 0, 0, 0},
        {"timeout-ms", FLAG_INT, &timeout_ms, "give up after this long", 1, 1e9, 0},
        {"epoch", FLAG_U64, &epoch, "epoch (any u64, as on the wire)", 0, 0, 0},
        {"step", FLAG_U64, &step, "step within the epoch (any u64)", 0, 0, 0},
        {"rank", FLAG_INT, &rank, "data-parallel rank", 0, 1 << 30, 0},
        {"seed", FLAG_U64, &seed, "shuffle seed (any u64)", 0, 0, 0},
    };
    /* info takes the first 7 flags (no epoch, step, rank, seed) */
    int n = info ? 7 : 11;
    n += bus_net_flags(f + n, &net, -1);
    int rc = parse(info ? "info" : "get", argc, argv, 2, f, n, &net);
    if (rc >= 0) return rc;
    wire_msg_t q, r;
    memset(&q, 0, sizeof q);
    memset(&r, 0, sizeof r);
    uint8_t layout, split;
    if (!ep) { fprintf(stderr, "loader: --connect is required\n"); return 2; }
    /* 0 is "not given" (the flags' range starts at 1): a request without them only comes back
     * as the server's parameter error */
    if (!B || !T) { fprintf(stderr, "loader: get: --B and --T are needed (rows and tokens per row, see --help)\n"); return 2; }
    if (rank >= world) {
        fprintf(stderr, "loader: get: --rank %d is not below --world %d\n", rank, world);
        return 2;
    }
    if (parse_layout(layout_s, &layout) || parse_split(split_s, &split)) {
        fprintf(stderr, "loader: --layout must be pack|pad and --split train|val\n");
        return 2;
    }
    if (info) {
        q.type = MSG_INFO_REQ;
        q.u.info_req = (msg_info_req_t){.req_id = 1, .world = world, .B = B, .T = T, .layout = layout, .split = split};
        if (roundtrip(ep, &q, &r, timeout_ms)) return 1;
        msg_info_t *i = &r.u.info;
        printf("{\"vocab_size\":%u,\"eot_id\":%u,\"n_docs\":%llu,\"n_tokens\":%llu,\"n_bytes\":%llu,"
               "\"steps_per_epoch\":%llu,\"tokenizer\":\"%s\",\"tokenizer_hash\":\"%s\",\"dataset\":\"%s\"}\n",
               i->vocab_size, i->eot_id, (unsigned long long)i->n_docs, (unsigned long long)i->n_tokens,
               (unsigned long long)i->n_bytes, (unsigned long long)i->steps_per_epoch, i->tokenizer,
               i->tokenizer_hash, i->dataset);
        wire_msg_free(&r);
        return 0;
    }
    q.type = MSG_BATCH_REQ;
    q.u.batch_req = (msg_batch_req_t){.req_id = 1, .seed = (uint64_t)seed, .epoch = (uint64_t)epoch,
                                      .step = (uint64_t)step, .rank = rank, .world = world, .B = B, .T = T,
                                      .layout = layout, .split = split};
    if (roundtrip(ep, &q, &r, timeout_ms)) return 1;
    msg_batch_t *b = &r.u.batch;
    printf("{\"epoch\":%llu,\"step\":%llu,\"steps_per_epoch\":%llu,\"B\":%u,\"T\":%u,\"tokens\":[",
           (unsigned long long)b->epoch, (unsigned long long)b->step, (unsigned long long)b->steps_per_epoch, b->B,
           b->T);
    for (uint32_t i = 0; i < b->B; i++) {
        printf(i ? ",[" : "[");
        for (uint32_t t = 0; t <= b->T; t++) printf(t ? ",%u" : "%u", b->tokens[(size_t)i * (b->T + 1) + t]);
        printf("]");
    }
    printf("],\"mask\":");
    if (!b->mask) printf("null");
    else {
        printf("[");
        for (uint32_t i = 0; i < b->B; i++) {
            printf(i ? ",[" : "[");
            for (uint32_t t = 0; t < b->T; t++) printf(t ? ",%u" : "%u", b->mask[(size_t)i * b->T + t]);
            printf("]");
        }
        printf("]");
    }
    printf("}\n");
    wire_msg_free(&r);
    return 0;
}

static int cmd_mkdata(int argc, char **argv) {
    const char *out = NULL;
    long long docs = 1000, seed = 1;
    int vocab = 50257, min_len = 16, max_len = 512;
    flag_t f[] = {
        {"out", FLAG_STR, &out, "dataset directory to write (replaced if present)", 0, 0, 0},
        {"docs", FLAG_I64, &docs, "documents", 0, 4e9, 0},
        {"seed", FLAG_I64, &seed, "seed: document i is a function of (seed, i)", 0, 9e18, 0},
        {"vocab", FLAG_INT, &vocab, "vocabulary size (eot is 0)", 2, 2147483647.0, 0},
        {"min-len", FLAG_INT, &min_len, "shortest document", 0, 1 << 30, 0},
        {"max-len", FLAG_INT, &max_len, "longest document", 0, 1 << 30, 0},
    };
    int rc = parse("mkdata", argc, argv, 2, f, NF(f), NULL);
    if (rc >= 0) return rc;
    if (!out) { fprintf(stderr, "loader: mkdata: --out is required\n"); return 2; }
    loader_mkdata_t c = {.seed = (uint64_t)seed, .n_docs = (uint64_t)docs, .vocab_size = (uint32_t)vocab,
                         .min_len = (uint32_t)min_len, .max_len = (uint32_t)max_len};
    char err[512] = "";
    if (loader_mkdata_write(&c, out, err, sizeof err)) {
        fprintf(stderr, "loader: mkdata %s: %s\n", out, err);
        return 1;
    }
    return 0;
}

static int cmd_bench(int argc, char **argv) {
    const char *eps_s = NULL;
    int B = 8, T = 256, window = 16;
    long long batches = 2000;
    bus_net_opts_t net = {0};
    flag_t f[5 + BUS_NET_NFLAGS] = {
        {"connect", FLAG_STR, &eps_s, "loader endpoints, comma-separated", 0, 0, 0},
        {"B", FLAG_INT, &B, "rows", 1, 65536, 0},
        {"T", FLAG_INT, &T, "tokens per row", 1, 1 << 20, 0},
        {"batches", FLAG_I64, &batches, "batches timed (after 20 warm-up ones)", 1, 1e12, 0},
        {"window", FLAG_INT, &window, "requests in flight", 1, 4096, 0},
    };
    int nf = 5 + bus_net_flags(f + 5, &net, -1);
    int rc = parse("bench", argc, argv, 2, f, nf, &net);
    if (rc >= 0) return rc;
    if (!eps_s) { fprintf(stderr, "loader: bench: --connect is required\n"); return 2; }
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", eps_s);
    const char *eps[16];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 16; t = strtok_r(NULL, ",", &save)) eps[n++] = t;
    loader_client_cfg_t cfg = {.seed = 1, .B = (uint32_t)B, .T = (uint32_t)T, .world = 1, .layout = WIRE_PACK,
                               .split = WIRE_TRAIN, .window = (uint32_t)window, .timeout_ms = 5000,
                               .give_up_ms = 30000};
    double tok_s = 0;
    char err[512] = "";
    if (loader_bench_run(eps, n, &cfg, (uint64_t)batches, &tok_s, err, sizeof err)) {
        fprintf(stderr, "loader: bench %s: %s\n", eps_s, err);
        return 1;
    }
    printf("%.0f\n", tok_s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "get")) return cmd_get(argc, argv, 0);
    if (argc >= 2 && !strcmp(argv[1], "info")) return cmd_get(argc, argv, 1);
    if (argc >= 2 && !strcmp(argv[1], "mkdata")) return cmd_mkdata(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "bench")) return cmd_bench(argc, argv);
    if (argc >= 2 && argv[1][0] != '-') {
        fprintf(stderr, "loader: unknown subcommand %s (serve by default; get, info, mkdata, bench)\n", argv[1]);
        return 2;
    }
    return cmd_serve(argc, argv);
}
