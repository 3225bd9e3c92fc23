/* live/live.h: bin/live, a live view of the runs in the browser, as one more process of the
 * pipeline (docs/live.md).
 *
 * It subscribes to the bus (metrics, ckpt and its welcome index, eval, loader, stage, log),
 * reads what is already on disk under its roots (live/disk.h), and serves a page and a JSON
 * API over HTTP (live/http.h) whose updates are pushed as Server-Sent Events. It writes
 * nothing anywhere, so it can be started, killed and restarted at any time: a new one learns
 * the checkpoints from the bus's welcome index and the history from the run directories. */
#ifndef LIVE_LIVE_H
#define LIVE_LIVE_H
#include <stddef.h>

#include "live/store.h"

typedef struct {
    const char *bus_sub;       /* NULL: $FT_BUS_SUB or the default */
    int no_bus;                /* disk only */
    const char *host;          /* address to bind (default 127.0.0.1) */
    int port;                  /* 0: any free port */
    const char *token;         /* NULL: none on loopback, a random one elsewhere */
    int max_streams;
    const char *const *roots;  /* run directories are looked for under these */
    int nroots;
    const char *const *results;/* evaluator results files anywhere */
    int nresults;
    const char *sampler;       /* sampler service endpoint (NULL: the one announced on the bus) */
    live_limits_t lim;
    int quiet;
} live_opts_t;

/* Serves until SIGINT/SIGTERM (0), or fails to start (negative, err set). Prints the page's
 * URL on stdout (one line "live: http://...") once it serves. */
int live_run(const live_opts_t *o, char *err, size_t errlen);
#endif
