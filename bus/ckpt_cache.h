/* bus/ckpt_cache.h: the bus's memory of the latest checkpoint of every run.
 *
 * A subscriber that connects after a checkpoint was announced would never hear of it (ZeroMQ
 * keeps no history). The bus keeps, per run name, the ckpt event with the highest step (on a
 * tie, the later one), and publishes the whole table as its XPUB welcome message: one frame,
 * topic "ckpt/", body a ckpt_index whose items are ordered oldest update first. At most `cap`
 * runs are remembered; a new run beyond that evicts the run updated longest ago. */
#ifndef BUS_CKPT_CACHE_H
#define BUS_CKPT_CACHE_H
#include <stddef.h>
#include <stdint.h>

#include "bus/wire.h"

#define BUS_CKPT_RUNS 256 /* default cap */
#define BUS_WELCOME_TOPIC "ckpt/"

typedef struct bus_ckpt_cache bus_ckpt_cache_t;

/* NULL when out of memory or cap is 0 or above WIRE_MAX_ITEMS. */
bus_ckpt_cache_t *bus_ckpt_cache_new(uint32_t cap);
void bus_ckpt_cache_free(bus_ckpt_cache_t **c);
/* Stores a copy of ck: 1 when it became the run's latest, 0 when older than what is kept,
 * WIRE_ERR_MISTYPED when run, path or model is not UTF-8 (the welcome message is replayed to
 * every late subscriber: one such entry would break all of them), WIRE_ERR_NOMEM /
 * WIRE_ERR_ARG on failure. The cache is unchanged unless 1 is returned. */
int bus_ckpt_cache_update(bus_ckpt_cache_t *c, const msg_ckpt_t *ck);
uint32_t bus_ckpt_cache_count(const bus_ckpt_cache_t *c);
/* The welcome frame (wire_event_pack of the ckpt_index); *frame is malloc'ed. */
int bus_ckpt_cache_frame(const bus_ckpt_cache_t *c, void **frame, size_t *len);
#endif
