/* loader/server.h: the loader service (docs/PROTOCOL.md §1.3).
 *
 * A ROUTER socket answers batch_req and info_req. The reply goes back on the envelope the
 * request came with: every frame but the last is echoed, the last is replaced by the reply
 * body, so REQ peers ([id][empty][body]) and DEALER peers sending [empty][body] both work.
 * Anything that is not a valid request gets an "error" reply (code = a LOADER_E* status,
 * message = one line); nothing a peer sends can stop the service. */
#ifndef LOADER_SERVER_H
#define LOADER_SERVER_H
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "loader/batch.h"

typedef struct {
    const char *data;      /* dataset directory */
    const char *val_data;  /* separate val dataset, or NULL */
    uint64_t val_docs;     /* with val_data NULL: the last val_docs documents are "val" */
    const char *bind;      /* ROUTER endpoint, e.g. ipc:///tmp/l0 or tcp://127.0.0.1:5555 */
    const char *name;      /* instance name, for the bus topic "loader/<name>": 1..47 bytes of UTF-8 */
    const char *bus_pub;   /* the bus's XSUB endpoint to connect a PUB to, or NULL */
    int threads;           /* worker threads (each with its own dataset handle) */
    int quiet;             /* no log lines on stderr (they still go to the bus, log/loader) */
} loader_server_cfg_t;

/* Per-thread request handler: a dataset handle and reusable batch buffers. */
typedef struct loader_handler loader_handler_t;

int loader_handler_open(loader_handler_t **h, const loader_server_cfg_t *cfg, char *err, size_t errlen);
void loader_handler_close(loader_handler_t **h);
/* Answers one request body. *reply is malloc'ed (caller frees). Returns the reply's status:
 * 0 for a batch or info reply, a LOADER_E* code for an error reply; a negative value below
 * LOADER_EIO only if even an error reply could not be encoded (then *reply is NULL). */
int loader_handler_reply(loader_handler_t *h, const void *req, size_t len, void **reply, size_t *rlen);

/* Serves until *stop becomes non-zero (set it from a signal handler). Returns 0, or a
 * LOADER_E* status with err set when the sockets could not be set up (LOADER_EPARAM, before
 * anything is opened, for a name that bus/beat.h's bus_name_check refuses). */
int loader_server_run(const loader_server_cfg_t *cfg, volatile sig_atomic_t *stop, char *err, size_t errlen);
#endif
