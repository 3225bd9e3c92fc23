/* trainer/data.h: where the trainer's batches come from.
 *
 * Wraps the loader client (loader/client.h) with what the trainer adds: loader endpoints from
 * --loaders and/or from "loader/..." announcements on the bus (--discover, read between steps
 * and also while a batch is awaited), and a first info_req that tells the dataset (its
 * vocabulary, its identity) before the model is built. Once the run's dataset is known, only
 * loaders of that dataset are used; each other one is named once on stderr and the bus. */
#ifndef TRAINER_DATA_H
#define TRAINER_DATA_H
#include <stddef.h>
#include <stdint.h>

#include "bus/log.h"
#include "bus/wire.h"
#include "loader/client.h"
#include "trainer/opts.h"

typedef struct trainer_data trainer_data_t;

typedef struct {
    loader_identity_t id;      /* vocabulary and documents of the train split */
    uint64_t steps_per_epoch;
    char endpoint[256];        /* the loader that answered */
} trainer_data_info_t;

/* log: where its lines about loaders and the dataset go (bus/log.h); borrowed, must outlive d. */
int trainer_data_open(trainer_data_t **d, void *zctx, const trainer_opts_t *o, const bus_log_t *log, char *err,
                      size_t errlen);
/* Data parallelism: this rank asks for its own rows (loader/batch.h: rank, world); default 0 of 1. */
void trainer_data_set_rank(trainer_data_t *d, int rank, int world);
/* Asks a loader for the dataset's description (waits for a discovered loader if needed).
 * expect (NULL: any): the run's dataset, from its checkpoint; a --loaders endpoint serving
 * another is refused (-1, err names both), a discovered one is passed over with a line. */
int trainer_data_probe(trainer_data_t *d, const loader_identity_t *expect, trainer_data_info_t *info, char *err,
                       size_t errlen);
/* Starts delivering batches of dataset `id` (the probe's) in order from (epoch, step). */
int trainer_data_start(trainer_data_t *d, const loader_identity_t *id, uint64_t epoch, uint64_t step, char *err,
                       size_t errlen);
/* The next batch (release with loader_batch_release). Returns 0 or a LOADER_E* status. */
int trainer_data_next(trainer_data_t *d, msg_batch_t *b, char *err, size_t errlen);
/* The (epoch, step) of the batch the next call delivers. */
void trainer_data_cursor(const trainer_data_t *d, uint64_t *epoch, uint64_t *step);
/* The loader client's counters (loader_client_stats): batch requests sent, re-issued after a
 * time-out, replies dropped (late or duplicate). */
void trainer_data_stats(const trainer_data_t *d, uint64_t *sent, uint64_t *reissued, uint64_t *dropped);
/* Non-blocking: adds loaders announced on the bus since the last call. */
void trainer_data_poll(trainer_data_t *d);
void trainer_data_close(trainer_data_t **d);
#endif
