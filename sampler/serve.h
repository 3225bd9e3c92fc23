/* sampler/serve.h: bin/sampler as a service (--serve) and its client (--connect).
 *
 * The server binds a ROUTER and answers each "gen_req" with one "gen" (one sample) or an
 * "error" {req_id, code, message}; the envelope rules are the loader's (docs/PROTOCOL.md 1.3:
 * the last frame is the body, the frames before it are echoed). Requests are served one at a
 * time. Between requests it watches the bus for "ckpt/<run>" of the run it follows and loads
 * a newer checkpoint when one is announced (a checkpoint that fails to load, whose vocabulary
 * size differs, or that is not inside run_dir, is skipped with a line on stderr and the old
 * model stays). */
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
    SERVE_ETYPE = -2,      /* a valid message that is not gen_req */
    SERVE_EPARAM = -3,     /* a field out of range (temperature, top_p, group, latent, max_new 0) */
    SERVE_ELIMIT = -4,     /* prompt or output beyond the server's limits or the model's max_seq */
    SERVE_EMODEL = -5,     /* generation failed (out of memory, ...) */
};

typedef struct {
    const char *bind;          /* ROUTER endpoint */
    const char *ckpt;          /* the checkpoint loaded at start (its path is reported) */
    int64_t step;              /* its step (-1: unknown) */
    const char *follow;        /* run name whose ckpt events trigger reloads (NULL: none) */
    const char *run_dir;       /* the followed run's directory: a ckpt event's path is loaded
                                  only when it is an entry of it (common/path_inside.h) */
    const char *bus_sub;       /* bus subscriber endpoint (bus_endpoint_sub) */
    const bpe_vocab_t *vocab;
    int max_prompt;            /* prompt tokens accepted */
    int max_new;               /* tokens generated per request at most */
    int quiet;
} sampler_serve_opts_t;

typedef struct sampler_server sampler_server_t;

/* The request handler without sockets (tests): takes ownership of nothing; *reply is a
 * malloc'd wire message (caller frees). The model may be replaced between calls. */
int sampler_server_new(sampler_server_t **s, sampler_model_t *sm, const sampler_serve_opts_t *o,
                       char *err, size_t errlen);
void sampler_server_free(sampler_server_t **s);
void sampler_server_handle(sampler_server_t *s, const void *body, size_t len, void **reply,
                           size_t *rlen);

/* Runs the service until SIGINT/SIGTERM. *sm is the model (replaced on reloads; the caller
 * frees whatever it holds afterwards). Returns 0 after a signal, negative on a setup failure. */
int sampler_serve(sampler_model_t **sm, const sampler_serve_opts_t *o, char *err, size_t errlen);

/* Client: sends req (type MSG_GEN_REQ) to endpoint over a DEALER and waits up to timeout_ms
 * for the reply (a "gen" or an "error"; caller frees it with wire_msg_free). */
int sampler_client_request(const char *endpoint, const wire_msg_t *req, wire_msg_t *rep,
                           int timeout_ms, char *err, size_t errlen);
#endif
