/* trainer/train.h: one training run, from flags to the last checkpoint.
 *
 * The loop: fetch micro-batches in order from the loaders (loader/client.h), forward and
 * backward through the model family, clip and step AdamW, publish metrics on the bus, write
 * checkpoints atomically and announce them. Resuming restores weights, AdamW moments, the step
 * and the data cursor, so a resumed run continues bit for bit (on CPU, same thread count).
 * With --dp the run spans ranks (trainer/dp.h, trainer/dp_train.h): each trains on its own
 * rows, the gradients are summed over the ranks, rank 0 writes the checkpoints. */
#ifndef TRAINER_TRAIN_H
#define TRAINER_TRAIN_H
#include <stddef.h>

#include "trainer/opts.h"

enum {
    TRAIN_OK = 0,
    TRAIN_ESETUP = -1,   /* bad configuration, dataset/model mismatch, no loader: nothing trained */
    TRAIN_EDATA = -2,    /* the loaders failed mid-run */
    TRAIN_ENAN = -3,     /* loss or gradient norm not finite: stopped, last good checkpoint kept */
    TRAIN_ECKPT = -4,    /* a checkpoint could not be written or read */
    TRAIN_EMODEL = -5,
    TRAIN_EDP = -6,      /* data parallelism: a rank lost, a collective timed out or failed, the
                            ranks' weights differ; no checkpoint is written after it */
};

/* Runs training. Returns TRAIN_OK when --steps were reached or when SIGINT/SIGTERM asked to
 * stop (then a checkpoint of the last finished step is written first); err holds one line on
 * failure (under data parallelism starting "rank R: "). *hard_exit is set to 1 when MPI could
 * not be finalized (a lost rank, a rank that stopped alone): the program must end with
 * _exit (trainer/dp.h). */
int trainer_run(const trainer_opts_t *o, int *hard_exit, char *err, size_t errlen);
#endif
