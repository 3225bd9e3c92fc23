/* live/sample.h: a page's prompt, sent to a running `bin/sampler --serve` (docs/PROTOCOL.md
 * §2.4) by bin/live itself: the browser never talks ZeroMQ.
 *
 * An HTTP thread submits a job; the bus thread (live/live.c) owns the sockets, sends the job's
 * requests (one gen_req per latent: index 0..n-1 of one series, so with a Free Transformer each
 * sample draws its own latent, and at temperature 0 the latent is all that differs between
 * them), collects the replies and calls the job's done callback. Jobs in flight are bounded
 * (LIVE_SAMPLE_JOBS); each has a deadline. */
#ifndef LIVE_SAMPLE_H
#define LIVE_SAMPLE_H
#include <stddef.h>
#include <stdint.h>

#include "bus/wire.h"
#include "live/store.h"

#define LIVE_SAMPLE_MAX_N 8      /* latents (samples) per job */
#define LIVE_SAMPLE_JOBS 4       /* jobs in flight at once */
#define LIVE_SAMPLE_TIMEOUT_S 60 /* a job not answered by then fails (504) */

typedef struct live_job live_job_t;
typedef void (*live_job_done_fn)(live_job_t *job);

struct live_job {
    /* the request (filled by the submitter) */
    char run[WIRE_NAME_LEN];     /* "" : any sampler */
    char prompt[WIRE_MAX_STR + 1];
    uint32_t max_new, top_k;
    double temperature, top_p;
    uint64_t seed;
    int n;                       /* 1..LIVE_SAMPLE_MAX_N */
    live_job_done_fn done;       /* called by the bus thread, sampler lock held */
    void *ctx;                   /* the submitter's */
    /* the answer (filled by the bus thread) */
    int finished;
    int status;                  /* HTTP status: 200, or 502/503/504 */
    char error[512];
    char *texts[LIVE_SAMPLE_MAX_N];
    char endpoint[1024], model[WIRE_NAME_LEN], ckpt[WIRE_MAX_STR + 1];
    uint64_t step;
    /* bookkeeping */
    uint64_t id;
    int got, sock;
    double deadline;
    int abandoned;               /* the submitter went away: the bus thread frees it */
    live_job_t *next;
};

typedef struct live_sampler live_sampler_t;

/* explicit: the --sampler endpoint (NULL: the one a sampler announces on the bus). wake_fd: an
 * eventfd the bus thread polls. */
int live_sampler_new(live_sampler_t **sp, void *zctx, live_store_t *store, const char *explicit_ep, char *err,
                     size_t errlen);
void live_sampler_free(live_sampler_t **sp);
int live_sampler_wake_fd(const live_sampler_t *sp);
void live_sampler_lock(live_sampler_t *sp);
void live_sampler_unlock(live_sampler_t *sp);
/* Queues job (ownership passes until it finished or was abandoned). 0, or -1 when
 * LIVE_SAMPLE_JOBS are already in flight. Lock held. */
int live_sampler_submit_locked(live_sampler_t *sp, live_job_t *job);
/* The submitter no longer waits: a finished job is freed here, another when it finishes. */
void live_sampler_abandon(live_sampler_t *sp, live_job_t *job);
void live_job_free(live_job_t *job);

/* Finishes every job still queued or in flight with 503 (bin/live stopping). */
void live_sampler_fail_all(live_sampler_t *sp);

/* ---- the bus thread ---- */
/* zmq_pollitem_t entries for the sockets with requests in flight; returns how many (<= cap). */
int live_sampler_pollitems(live_sampler_t *sp, void *items, int cap);
/* Sends queued jobs, reads replies, fails jobs past their deadline. */
void live_sampler_work(live_sampler_t *sp, double mono);
#endif
