/* sampler/serve.h: bin/sampler as a service (--serve) and its client (--connect).
 *
 * The server binds a ROUTER (docs/PROTOCOL.md 2.4; the envelope rules are the loader's: the
 * last frame is the body, the frames before it are echoed in front of every reply). Each
 * "gen_req" is one sample, a row of the engine (sampler/engine.h): requests that arrive while
 * others decode join the batch at the next step, a finished one is answered and leaves at
 * once. At most max_batch rows decode together and max_queue requests wait for a row; one
 * more is answered "busy" (SERVE_EBUSY) at once. A request may carry deadline_ms (past it the
 * work is dropped and the answer is SERVE_EDEADLINE) and stream (gen_part messages with the
 * text so far before the final gen); "gen_cancel" {req_id} from the same connection drops a
 * request (answered SERVE_ECANCELLED); a connection that goes away has its work dropped.
 *
 * Reload under load: a newer checkpoint of the followed run gets an engine of its own at once
 * and every request admitted from then on runs on it; rows running on the old model finish
 * there (no new row joins it) and the old model and its cache are freed when the last one
 * leaves. So no reply mixes two checkpoints, new requests do not wait for the old ones, and
 * the reload cannot be starved (the old model takes no new work). The price is memory: while
 * the old rows drain, two models and two caches are held. A third checkpoint announced while
 * two are held waits (loaded) until the older one has drained, and requests arriving
 * meanwhile wait in the queue for it. */
#ifndef SAMPLER_SERVE_H
#define SAMPLER_SERVE_H
#include <stddef.h>
#include <stdint.h>

#include "bus/wire.h"
#include "sampler/sampler.h"
#include "tokenizer/bpe_vocab.h"

/* Error codes in "error" replies. */
enum {
    SERVE_EMALFORMED = -1, /* the body is not a valid wire message */
    SERVE_ETYPE = -2,      /* a valid message that is neither gen_req nor gen_cancel */
    SERVE_EPARAM = -3,     /* a field out of range (temperature, top_p, group, latent, max_new 0) */
    SERVE_ELIMIT = -4,     /* prompt or output beyond the server's limits or the model's max_seq */
    SERVE_EMODEL = -5,     /* generation failed (out of memory, ...) */
    SERVE_EBUSY = -6,      /* max_batch rows decoding and max_queue requests waiting */
    SERVE_EDEADLINE = -7,  /* deadline_ms passed before the text was complete */
    SERVE_ECANCELLED = -8, /* a gen_cancel from the same connection */
    SERVE_ESTOPPED = -9,   /* the server stopped (SIGINT/SIGTERM) before the text was complete */
};

typedef struct {
    const char *bind;          /* ROUTER endpoint */
    const char *ckpt;          /* the checkpoint loaded at start (its path is reported) */
    int64_t step;              /* its step (-1: unknown) */
    const char *follow;        /* run name whose ckpt events trigger reloads (NULL: none) */
    const char *run_dir;       /* the followed run's directory: a ckpt event's path is loaded
                                  only when it is an entry of it (common/path_inside.h) */
    const char *bus_sub;       /* bus subscriber endpoint (bus_endpoint_sub) */
    const char *bus_pub;       /* bus publisher endpoint for the stage beats and the log/sampler
                                  lines (NULL: neither) */
    const char *name;          /* instance name in the beats (NULL: sampler-<pid>) */
    const bpe_vocab_t *vocab;
    int max_prompt;            /* prompt tokens accepted */
    int max_new;               /* tokens generated per request at most */
    int max_batch;             /* rows decoded together (>= 1) */
    int max_queue;             /* requests waiting for a row (>= 0) */
    int parallel_rows;         /* steps of at least this many rows use every thread (0: the
                                  generator's work threshold alone; engine_set_parallel_rows) */
    int quiet;
} sampler_serve_opts_t;

typedef struct sampler_server sampler_server_t;

/* The service without sockets (tests; sampler_serve runs it behind a ROUTER). Takes ownership
 * of sm (every model it is given is freed by the server). Allocates the engine: max_batch rows
 * of min(max_seq, max_prompt + max_new) positions. */
int sampler_server_new(sampler_server_t **s, sampler_model_t *sm, const sampler_serve_opts_t *o,
                       char *err, size_t errlen);
void sampler_server_free(sampler_server_t **s);
/* One message from a peer. env (envlen bytes, opaque) goes back with every reply to it, and
 * identifies the connection for gen_cancel (equal bytes, same connection); conn (0: unknown)
 * names it for sampler_server_disconnect. now_ms: the caller's monotonic clock, in ms. Bad
 * requests and a full queue are answered at once; a good request waits for a step. */
void sampler_server_request(sampler_server_t *s, const void *env, size_t envlen, uint64_t conn,
                            const void *body, size_t len, double now_ms);
/* Drops every request of connection conn, unanswered (the peer is gone). */
void sampler_server_disconnect(sampler_server_t *s, uint64_t conn);
/* One step of the batch: expired requests answered, waiting ones admitted while rows are
 * free, one engine step per held model, finished requests answered (streamed ones get a
 * gen_part for each new token). Returns the requests still queued or running. */
int sampler_server_step(sampler_server_t *s, double now_ms);
/* A newer checkpoint (ownership of nm passes to the server): requests admitted from now on run
 * on it (see the top of this file). 0, or a negative code with err set when no engine could
 * be made for it (nm is freed, the current model stays). */
int sampler_server_reload(sampler_server_t *s, sampler_model_t *nm, const char *ckpt, int64_t step,
                          char *err, size_t errlen);
/* The step of the newest model held or waiting (-1 unknown). */
/* Where the server's lines go besides stderr: log/sampler events on pub (bus/log.h; the
 * caller's publisher socket, borrowed; NULL: stderr only, as before the call). */
void sampler_server_set_bus(sampler_server_t *s, void *pub);
int64_t sampler_server_newest_step(const sampler_server_t *s);
/* Answers every queued and running request with SERVE_ESTOPPED. */
void sampler_server_stop(sampler_server_t *s);
/* Takes the oldest reply waiting to be sent: 1 with *env and *body malloc'd (caller frees both),
 * 0 when there is none. */
int sampler_server_reply(sampler_server_t *s, void **env, size_t *envlen, void **body, size_t *len);
/* Bytes on the device: the models' weights and every engine's buffers, and the caches. */
void sampler_server_memory(const sampler_server_t *s, size_t *total, size_t *cache);

/* One request answered synchronously (tests): sends body with an envelope of its own, steps
 * until its final reply, returns that (*reply malloc'd). Other requests in flight move on too;
 * their replies stay for sampler_server_reply. */
void sampler_server_handle(sampler_server_t *s, const void *body, size_t len, void **reply,
                           size_t *rlen);

/* Runs the service until SIGINT/SIGTERM, then answers what is left with SERVE_ESTOPPED. Takes
 * ownership of sm. Returns 0 after a signal, negative on a setup failure. */
int sampler_serve(sampler_model_t *sm, const sampler_serve_opts_t *o, char *err, size_t errlen);

/* Client: sends the n requests reqs (type MSG_GEN_REQ, distinct req_ids) to endpoint over one
 * DEALER, up to 32 at a time so the server batches them, and waits up to timeout_ms (from the last reply
 * or part) for their answers: reps[i] is reqs[i]'s "gen" or "error" (caller frees each with
 * wire_msg_free). on_part, when not NULL, receives each gen_part of a streamed request. A
 * SIGINT/SIGTERM while waiting sends gen_cancel for every request not yet answered and returns
 * BUS_ERR_INTR. */
typedef void (*sampler_part_fn)(void *ctx, const msg_gen_part_t *part);
int sampler_client_request(const char *endpoint, const wire_msg_t *reqs, int n, wire_msg_t *reps,
                           int timeout_ms, sampler_part_fn on_part, void *ctx, char *err,
                           size_t errlen);
#endif
