/* live/main.c: bin/live, the runs watched live in a browser (docs/live.md).
 *
 *   bin/live [--runs DIR[,DIR...]] [--results FILE[,...]] [--host ADDR] [--port N] [--token T]
 *            [--sampler EP] [--bus-sub EP | --no-bus] [limits] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "bus/net.h"
#include "common/flags.h"
#include "live/live.h"

#define MAX_LIST 64

/* "a,b,c" into at most MAX_LIST pieces (the string is cut in place). */
static int split(char *s, const char **out) {
    int n = 0;
    for (char *sv = NULL, *t = strtok_r(s, ",", &sv); t && n < MAX_LIST; t = strtok_r(NULL, ",", &sv)) out[n++] = t;
    return n;
}

static int token_ok(const char *t) {
    size_t n = strlen(t);
    return n >= 16 && n <= 64 && strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == n;
}

int main(int argc, char **argv) {
    live_opts_t o = {.host = "127.0.0.1", .port = 8710, .max_streams = 256, .lim = live_limits_default()};
    const char *runs = NULL, *results = NULL;
    double ring_mb = (double)o.lim.ring_bytes / (1 << 20);
    bus_net_opts_t net = {0};
    flag_t fl[24 + BUS_NET_NFLAGS] = {
        {"runs", FLAG_STR, &runs, "directories under which run directories are read (comma-separated; default: .)", 0, 0, 0},
        {"results", FLAG_STR, &results, "evaluator results files outside the run directories (comma-separated)", 0, 0, 0},
        {"host", FLAG_STR, &o.host, "address to serve on; off loopback a token is required", 0, 0, 0},
        {"port", FLAG_INT, &o.port, "port (0: any free one; the URL is printed)", 0, 65535, 0},
        {"token", FLAG_STR, &o.token, "require this token (16-64 of [A-Za-z0-9_-]; default off loopback: a random one)", 0, 0, 0},
        {"sampler", FLAG_STR, &o.sampler, "a bin/sampler --serve endpoint for the samples box (default: one announced on the bus)", 0, 0, 0},
        {"bus-sub", FLAG_STR, &o.bus_sub, "bus subscriber endpoint (default $FT_BUS_SUB or " BUS_DEFAULT_SUB ")", 0, 0, 0},
        {"no-bus", FLAG_BOOL, &o.no_bus, "only what is on disk", 0, 0, 0},
        {"max-streams", FLAG_INT, &o.max_streams, "pages (event streams) served at once", 1, 4096, 0},
        {"points", FLAG_INT, &o.lim.series_cap, "points kept per series before old ones are thinned (docs/live.md)", 16, 1 << 20, 0},
        {"max-runs", FLAG_INT, &o.lim.max_runs, "runs kept (the one updated longest ago goes)", 1, 4096, 0},
        {"max-series", FLAG_INT, &o.lim.max_series, "series kept per run", 1, 4096, 0},
        {"ring", FLAG_INT, &o.lim.ring_entries, "updates kept for pages that fall behind", 16, 1 << 22, 0},
        {"ring-mb", FLAG_DOUBLE, &ring_mb, "bytes of updates kept, MiB", 0.0625, 4096, 0},
        {"gone-after", FLAG_DOUBLE, &o.lim.gone_after, "seconds without a beat before a stage is shown gone", 0.5, 3600, 0},
        {"quiet", FLAG_BOOL, &o.quiet, "no lines on stderr but errors", 0, 0, 0},
    };
    int nf = flags_count(fl, 24);
    nf += bus_net_flags(fl + nf, &net, -1);
    char err[1024];
    int rc = flags_parse(argc, argv, 1, fl, nf, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) {
        printf("usage: bin/live [flags]\n\n"
               "Serves a page where the runs are watched live (curves, pipeline health, samples), fed from\n"
               "the bus and from the run directories on disk. Prints its URL. docs/live.md.\n\n");
        flags_usage(stdout, fl, nf);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "live: %s\n", err);
        return 2;
    }
    if (o.token && !token_ok(o.token)) {
        fprintf(stderr, "live: --token: 16 to 64 characters of A-Z a-z 0-9 - _ are required\n");
        return 2;
    }
    o.lim.ring_bytes = (size_t)(ring_mb * (1 << 20));
    char *rs = runs ? strdup(runs) : NULL, *fs = results ? strdup(results) : NULL;
    const char *roots[MAX_LIST], *files[MAX_LIST];
    o.nroots = rs ? split(rs, roots) : 0;
    o.nresults = fs ? split(fs, files) : 0;
    o.roots = roots, o.results = files;
    if (bus_net_setup(&net, err, sizeof err)) {
        fprintf(stderr, "live: %s\n", err);
        free(rs), free(fs);
        return 2;
    }
    rc = live_run(&o, err, sizeof err);
    free(rs), free(fs);
    if (rc) {
        fprintf(stderr, "live: %s\n", err);
        return 1;
    }
    return 0;
}
