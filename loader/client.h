/* loader/client.h: the trainer's side of the loader protocol (docs/PROTOCOL.md §1.3).
 *
 * Delivers batches strictly in order (epoch, step) from a cursor, keeping up to `window`
 * requests in flight over every known loader (one DEALER socket per endpoint, so the client
 * knows who holds what). A request whose reply has not come within timeout_ms is sent again to
 * another live loader; a request no loader could take (none connected yet, all down) is tried
 * again on the next pass (every 50 ms) rather than after a time-out, so nothing depends on how
 * fast a connection comes up. Replies that match no waiting request (duplicates, late answers
 * to a re-issued request, another configuration) are dropped. Batches are a pure function of
 * the request and the dataset, so any loader of the same dataset gives the answer: nothing is
 * lost, duplicated or reordered, and a restarted trainer that opens at its saved cursor gets
 * exactly the batches it had not trained on.
 *
 * Every loader is asked info_req first and used only when its answer shows the same dataset
 * (loader_identity_t) as cfg.expect, or, without one, as the first loader that answered; a
 * loader serving other data is reported once through cfg.notice and never sent a batch
 * request. The epoch advances when step reaches steps_per_epoch (from that info reply). */
#ifndef LOADER_CLIENT_H
#define LOADER_CLIENT_H
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "bus/wire.h"

/* The facts of a loader's info reply that make two loaders interchangeable: the same
 * vocabulary and the same documents in the split served (counted in documents, tokens and
 * bytes). The path is not part of it: one dataset opened under two paths is the same data. */
typedef struct {
    uint32_t vocab_size, eot_id;
    uint64_t n_docs, n_tokens, n_bytes;
    char tokenizer[64], tokenizer_hash[72];
    char dataset[256];           /* the path the loader gave, for messages only */
} loader_identity_t;

void loader_identity_from_info(loader_identity_t *id, const msg_info_t *in);
/* 1 when a and b name the same data (every field but the path equal). */
int loader_identity_same(const loader_identity_t *a, const loader_identity_t *b);
/* "PATH (tokenizer NAME HASH, N docs, M tokens, K bytes)", for one-line messages. */
void loader_identity_describe(const loader_identity_t *id, char *buf, size_t cap);

typedef struct {
    uint64_t seed;
    uint32_t B, T, rank, world;
    uint8_t layout, split;       /* WIRE_PACK/WIRE_PAD, WIRE_TRAIN/WIRE_VAL */
    uint32_t window;             /* requests in flight (default 8 when 0) */
    int timeout_ms;              /* re-issue a request after this long (default 2000 when 0) */
    int give_up_ms;              /* fail when no loader answered for this long while next()
                                    waited (default 60000; time between calls does not count) */
    uint64_t start_epoch, start_step; /* the first batch delivered */
    volatile sig_atomic_t *stop; /* optional: next() returns LOADER_EIO soon after *stop != 0 */
    const loader_identity_t *expect; /* optional: the only dataset accepted (copied at open) */
    /* Optional: called on every pass of next()'s wait (at least every 100 ms) with hook_arg, so
     * the caller can add loaders (loader_client_add_endpoint) while a batch is awaited. */
    void (*on_wait)(void *hook_arg);
    /* Optional: one line about a loader that is not used (another dataset), that stopped
     * answering (a request timed out) or that answers again after that. */
    void (*notice)(void *hook_arg, const char *line);
    void *hook_arg;
} loader_client_cfg_t;

typedef struct loader_client loader_client_t;

/* zctx: the caller's ZeroMQ context (the client creates its sockets in it). Endpoints may be
 * empty (n = 0) when they will come from the bus with loader_client_add_endpoint. */
int loader_client_open(loader_client_t **c, void *zctx, const char *const *endpoints, int n,
                       const loader_client_cfg_t *cfg, char *err, size_t errlen);
/* Adds a loader (no-op when the endpoint is known already). It is asked info_req and used once
 * its dataset is seen to match. */
int loader_client_add_endpoint(loader_client_t *c, const char *endpoint);
/* The next batch in order; out is filled with allocated tokens/mask (release with
 * loader_batch_release). Returns 0, or a LOADER_E* status with err set: an error reply from a
 * loader (wrong configuration for its dataset), or no answer for give_up_ms. */
int loader_client_next(loader_client_t *c, msg_batch_t *out, char *err, size_t errlen);
/* The (epoch, step) the next call to loader_client_next will deliver: save it in a checkpoint. */
void loader_client_cursor(const loader_client_t *c, uint64_t *epoch, uint64_t *step);
uint64_t loader_client_steps_per_epoch(const loader_client_t *c);
/* Counters, for logs and tests: requests sent, re-issued after a time-out, replies dropped. */
void loader_client_stats(const loader_client_t *c, uint64_t *sent, uint64_t *reissued, uint64_t *dropped);
void loader_client_close(loader_client_t **c);
void loader_batch_release(msg_batch_t *b);
#endif
