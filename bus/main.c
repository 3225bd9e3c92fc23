/* bin/bus: the event bus (forwarder), and tools for scripts and people:
 *   bin/bus [--pub EP] [--sub EP]                 run the forwarder
 *   bin/bus tap [--sub EP] [TOPIC...]             print events as JSON lines
 *   bin/bus send [--pub EP] TOPIC TYPE k=v...     publish one event
 *   bin/bus keygen --out PREFIX                   write a CURVE key pair
 * See docs/PROTOCOL.md (security: §1.4, key files: docs/FORMATS.md). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "bus/bus.h"
#include "common/flags.h"
#include "bus/forwarder.h"
#include "bus/keys.h"
#include "bus/net.h"
#include "bus/wire.h"

#define NF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_POS 256

/* Parses flags; returns -1 to go on, else the exit code (0 after --help, 2 on a bad flag). */
static int parse(const char *usage, int argc, char **argv, int first, flag_t *f, int n,
                 const char **pos, int *npos) {
    char err[256];
    int rc = flags_parse(argc, argv, first, f, n, pos, npos, pos ? MAX_POS : 0, err, sizeof err);
    if (rc == 1) {
        fputs(usage, stdout);
        flags_usage(stdout, f, n);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "bus: %s\n", err);
        return 2;
    }
    return -1;
}

/* The security and size configuration from the flags and the environment; 0, or an exit
 * code after one line on stderr. */
static int net_setup(const bus_net_opts_t *net) {
    char err[512];
    if (bus_net_setup(net, err, sizeof err) == 0) return 0;
    fprintf(stderr, "bus: %s\n", err);
    return 2;
}

static const char *USAGE_FWD =
    "usage: bin/bus [--pub EP] [--sub EP] [--max-runs N] [--quiet]\n"
    "       bin/bus tap --help | bin/bus send --help | bin/bus keygen --help\n\n"
    "Runs the event bus: publishers connect to --pub (an XSUB binds there), subscribers to\n"
    "--sub (an XPUB binds there; not the --pub endpoint). New \"ckpt\" subscribers first receive the latest checkpoint\n"
    "of every run (topic \"ckpt/\", a ckpt_index). Stops on SIGINT/SIGTERM.\n"
    "Defaults: $FT_BUS_PUB or " BUS_DEFAULT_PUB ", $FT_BUS_SUB or " BUS_DEFAULT_SUB ".\n"
    "An endpoint that is not loopback or ipc needs --key with --authorized (or\n"
    "--allow-any-client), or --insecure (docs/PROTOCOL.md 1.4).\n\n";

static int cmd_forward(int argc, char **argv) {
    const char *pub = NULL, *sub = NULL;
    int max_runs = 256, quiet = 0;
    bus_net_opts_t net = {0};
    flag_t f[4 + BUS_NET_NFLAGS] = {
        {"pub", FLAG_STR, &pub, "endpoint publishers connect to (XSUB binds)", 0, 0, 0},
        {"sub", FLAG_STR, &sub, "endpoint subscribers connect to (XPUB binds)", 0, 0, 0},
        {"max-runs", FLAG_INT, &max_runs, "runs whose latest ckpt is remembered", 1, WIRE_MAX_ITEMS, 0},
        {"quiet", FLAG_BOOL, &quiet, "no log lines", 0, 0, 0},
    };
    int nf = 4 + bus_net_flags(f + 4, &net, BUS_PEER_EVENTS);
    int rc = parse(USAGE_FWD, argc, argv, 1, f, nf, NULL, NULL);
    if (rc >= 0) return rc;
    if ((rc = net_setup(&net))) return rc;
    bus_signals_install();
    bus_forwarder_cfg_t cfg = {.pub_ep = bus_endpoint_pub(pub), .sub_ep = bus_endpoint_sub(sub),
                               .max_runs = (uint32_t)max_runs, .quiet = quiet};
    char err[512] = "";
    rc = bus_forwarder_run(&cfg, NULL, err, sizeof err);
    if (rc == BUS_ERR_ARG) { /* the endpoints as given cannot make a bus: a usage error */
        fprintf(stderr, "bus: %s\n", err);
        return 2;
    }
    if (rc) {
        fprintf(stderr, "bus: forwarder %s -> %s: %s\n", cfg.pub_ep, cfg.sub_ep, err);
        return 1;
    }
    return 0;
}

static const char *USAGE_TAP =
    "usage: bin/bus tap [--sub EP] [--count N] [--timeout S] [TOPIC...]\n\n"
    "Prints every event whose topic starts with one of the TOPIC prefixes (all when none) as\n"
    "one JSON line on stdout, e.g. bin/bus tap metrics | jq .values.loss\n"
    "A malformed event prints {\"topic\":...,\"error\":...}. Token arrays print as {\"count\":N}.\n"
    "Exit status: 0; 1 when --count was given and fewer events came before --timeout.\n\n";

/* Writes one line; returns -1 when stdout is gone (EPIPE: the reader quit). */
static int put_line(const char *s, int n) {
    if (fwrite(s, 1, (size_t)n, stdout) != (size_t)n || fputc('\n', stdout) == EOF ||
        fflush(stdout) != 0)
        return -1;
    return 0;
}

static int cmd_tap(int argc, char **argv) {
    const char *sub = NULL;
    long long count = 0;
    double timeout = 0;
    bus_net_opts_t net = {0};
    flag_t f[3 + BUS_NET_NFLAGS] = {
        {"sub", FLAG_STR, &sub, "the bus's subscriber endpoint", 0, 0, 0},
        {"count", FLAG_I64, &count, "exit after N events (0: never)", 0, 1e18, 0},
        {"timeout", FLAG_DOUBLE, &timeout, "exit after S seconds without an event (0: never)", 0, 1e9, 0},
    };
    int nf = 3 + bus_net_flags(f + 3, &net, -1);
    const char *pos[MAX_POS];
    int npos = 0;
    int rc = parse(USAGE_TAP, argc, argv, 2, f, nf, pos, &npos);
    if (rc >= 0) return rc;
    if ((rc = net_setup(&net))) return rc;
    bus_signals_install();
    signal(SIGPIPE, SIG_IGN); /* a closed pipe shows up as a write error: exit quietly */
    const char *ep = bus_endpoint_sub(sub);
    char err[512] = "";
    void *ctx = zmq_ctx_new();
    void *s = bus_sub_open(ctx, ep, pos, npos, err, sizeof err);
    if (!s) {
        fprintf(stderr, "bus: tap %s: %s\n", ep, err);
        zmq_ctx_term(ctx);
        return 1;
    }
    size_t cap = 1 << 16;
    char *line = malloc(cap);
    long long got = 0;
    double idle_ms = 0;
    int status = 0;
    while (line && (count == 0 || got < count)) {
        char topic[WIRE_MAX_TOPIC + 1];
        wire_msg_t m;
        /* short polls so --timeout is honoured without a timer; signals cut them anyway */
        rc = bus_recv(s, 200, topic, sizeof topic, &m, err, sizeof err);
        if (rc == BUS_ERR_INTR) break;
        if (rc == BUS_TIMEOUT) {
            idle_ms += 200;
            if (timeout > 0 && idle_ms >= timeout * 1e3) {
                if (count) status = 1;
                break;
            }
            continue;
        }
        if (rc == BUS_ERR_ZMQ || rc == BUS_ERR_ARG) {
            fprintf(stderr, "bus: tap %s: %s\n", ep, err);
            status = 1;
            break;
        }
        idle_ms = 0;
        got++;
        int n;
        if (rc == 0) {
            while ((n = wire_to_json(topic, &m, line, cap)) == WIRE_ERR_OVERSIZE &&
                   cap < (64u << 20)) {
                char *bigger = realloc(line, cap * 2);
                if (!bigger) break;
                line = bigger, cap *= 2;
            }
            wire_msg_free(&m);
        } else {
            n = bus_error_json(topic, err, line, cap);
        }
        if (n < 0) n = bus_error_json(topic, "event too large to print", line, cap);
        if (n >= 0 && put_line(line, n) != 0) break;
    }
    free(line);
    bus_close(&s);
    zmq_ctx_term(ctx);
    return status;
}

static const char *USAGE_SEND =
    "usage: bin/bus send [--pub EP] [--wait-ms MS] TOPIC TYPE [KEY=VALUE...]\n\n"
    "Publishes one event, e.g.\n"
    "  bin/bus send log/demo log program=demo line=hello\n"
    "  bin/bus send metrics/r1 metrics run=r1 step=10 loss=3.2 lr=0.001\n"
    "  bin/bus send ckpt/r1 ckpt run=r1 step=100 path=/ckpt/r1/100 model=free\n"
    "KEY is a field of TYPE (docs/PROTOCOL.md); for metrics and eval any other KEY is a value.\n"
    "Fields not given are 0 or empty; \"time\" defaults to now. Waits up to --wait-ms for the\n"
    "bus to accept the connection, and fails when it does not.\n\n";

static int cmd_send(int argc, char **argv) {
    const char *pub = NULL;
    int wait_ms = 5000;
    bus_net_opts_t net = {0};
    flag_t f[2 + BUS_NET_NFLAGS] = {
        {"pub", FLAG_STR, &pub, "the bus's publisher endpoint", 0, 0, 0},
        {"wait-ms", FLAG_INT, &wait_ms, "how long to wait for the bus", 0, 3600000, 0},
    };
    int nf = 2 + bus_net_flags(f + 2, &net, -1);
    const char *pos[MAX_POS];
    int npos = 0;
    int rc = parse(USAGE_SEND, argc, argv, 2, f, nf, pos, &npos);
    if (rc >= 0) return rc;
    if ((rc = net_setup(&net))) return rc;
    if (npos < 2) {
        fprintf(stderr, "bus: send: TOPIC and TYPE are required (see --help)\n");
        return 2;
    }
    wire_msg_t m = {.type = wire_type_from_name(pos[1])};
    if (m.type == MSG_NONE) {
        fprintf(stderr, "bus: send: unknown message type \"%s\"\n", pos[1]);
        return 2;
    }
    char err[512] = "";
    int time_given = 0;
    for (int i = 2; i < npos; i++) {
        char key[64];
        const char *eq = strchr(pos[i], '=');
        if (!eq || eq == pos[i] || (size_t)(eq - pos[i]) >= sizeof key) {
            fprintf(stderr, "bus: send: argument \"%s\" is not KEY=VALUE\n", pos[i]);
            wire_msg_free(&m);
            return 2;
        }
        memcpy(key, pos[i], (size_t)(eq - pos[i]));
        key[eq - pos[i]] = 0;
        if (!strcmp(key, "time")) time_given = 1;
        if (wire_field_set(&m, key, eq + 1, err, sizeof err) != 0) {
            fprintf(stderr, "bus: send %s: %s\n", pos[1], err);
            wire_msg_free(&m);
            return 2;
        }
    }
    if (!time_given) { /* a no-op for types without a time field */
        char now[32];
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(now, sizeof now, "%.6f", ts.tv_sec + ts.tv_nsec * 1e-9);
        if (m.type == MSG_METRICS || m.type == MSG_CKPT || m.type == MSG_EVAL)
            wire_field_set(&m, "time", now, err, sizeof err);
    }
    const char *ep = bus_endpoint_pub(pub);
    bus_signals_install();
    void *ctx = zmq_ctx_new();
    void *s = bus_pub_open(ctx, ep, err, sizeof err);
    int status = 0;
    if (!s) {
        fprintf(stderr, "bus: send %s: %s\n", ep, err);
        status = 1;
    } else if ((rc = bus_pub_wait(s, wait_ms)) != 0) {
        fprintf(stderr, "bus: send %s: %s\n", ep,
                rc == BUS_TIMEOUT ? "no bus answered (is bin/bus running there?)" : "interrupted");
        status = 1;
    } else if ((rc = bus_publish(s, pos[0], &m)) != 0) {
        fprintf(stderr, "bus: send %s: %s\n", pos[0],
                rc < 0 && rc >= WIRE_ERR_ARG ? wire_strerror(rc) : "could not send");
        status = 1;
    }
    bus_close(&s);
    zmq_ctx_term(ctx); /* waits up to the 1 s linger for the event to leave */
    wire_msg_free(&m);
    return status;
}

static const char *USAGE_KEYGEN =
    "usage: bin/bus keygen --out PREFIX [--name NAME] [--force]\n\n"
    "Writes a new CURVE key pair: PREFIX.key (public and secret key, mode 0600: give it to\n"
    "the program with --key or $FT_KEY) and PREFIX.pub (the public key and NAME: copy it into\n"
    "the --trust file of clients, if this is a server, or the --authorized file of servers,\n"
    "if a client). Prints the public key. Existing files are kept unless --force.\n"
    "Formats: docs/FORMATS.md 5.\n\n";

static int cmd_keygen(int argc, char **argv) {
    const char *out = NULL, *name = NULL;
    int force = 0;
    flag_t f[] = {
        {"out", FLAG_STR, &out, "write PREFIX.key and PREFIX.pub", 0, 0, 0},
        {"name", FLAG_STR, &name, "a name kept with the public key (default: PREFIX's file name)", 0, 0, 0},
        {"force", FLAG_BOOL, &force, "replace existing key files", 0, 0, 0},
    };
    int rc = parse(USAGE_KEYGEN, argc, argv, 2, f, NF(f), NULL, NULL);
    if (rc >= 0) return rc;
    if (!out || !*out) {
        fprintf(stderr, "bus: keygen: --out PREFIX is required (see --help)\n");
        return 2;
    }
    if (!name) name = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
    char err[512];
    bus_keypair_t kp;
    if (bus_keys_generate(&kp, err, sizeof err) || bus_keys_write(out, &kp, name, force, err, sizeof err)) {
        fprintf(stderr, "bus: keygen: %s\n", err);
        return 1;
    }
    printf("%s\n", kp.pub);
    memset(kp.sec, 0, sizeof kp.sec);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "keygen")) return cmd_keygen(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "tap")) return cmd_tap(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "send")) return cmd_send(argc, argv);
    if (argc > 1 && strncmp(argv[1], "--", 2) != 0 && strcmp(argv[1], "-h") != 0) {
        fprintf(stderr, "bus: unknown mode \"%s\" (tap, send, keygen, or flags; see --help)\n", argv[1]);
        return 2;
    }
    return cmd_forward(argc, argv);
}
