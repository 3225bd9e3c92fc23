/* bus/beat.h: a stage announcing itself on the bus (docs/PROTOCOL.md §2.3, "stage").
 *
 * A thread of its own publishes the stage's "stage" event on topic stage/<program>/<name> at
 * start and then every BUS_BEAT_MS, whatever the stage's own loop is doing (an evaluation
 * that takes minutes must not look like a dead evaluator), and a last one with bye = true when
 * the stage stops in order. A watcher (bin/live) counts a stage gone when its beats stop. The
 * thread has its own publisher socket in the caller's ZeroMQ context; publishing never blocks
 * (bus/bus.h), so a missing bus costs the stage nothing. */
#ifndef BUS_BEAT_H
#define BUS_BEAT_H
#include <stddef.h>
#include <stdint.h>

#define BUS_BEAT_MS 1000

typedef struct bus_beat bus_beat_t;

/* Starts the beat: program and name (at most 47 bytes each), run ("" or NULL: none), served
 * (where it serves requests; "" or NULL: nowhere). bus_pub is the bus's publisher endpoint
 * (bus_endpoint_pub). 0, or BUS_ERR_ARG / BUS_ERR_ZMQ / BUS_ERR_REFUSED with err set. */
int bus_beat_start(bus_beat_t **b, void *zctx, const char *bus_pub, const char *program, const char *name,
                   const char *run, const char *served, char *err, size_t errlen);
/* What the stage is doing now (one line, cut at 4096 bytes; bytes that are not UTF-8 become
 * U+FFFD) and its count of work done. Any thread; takes effect at the next beat. */
void bus_beat_set(bus_beat_t *b, const char *state, uint64_t done);
/* Sends the last beat (bye = true), stops the thread, closes its socket; *b becomes NULL.
 * Safe on NULL. */
void bus_beat_stop(bus_beat_t **b);
#endif
