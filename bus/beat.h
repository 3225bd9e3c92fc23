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

/* 0 when name is one the wire carries in a name field (docs/PROTOCOL.md §2.1): at most 47 bytes
 * (WIRE_NAME_LEN - 1) of UTF-8, and not empty unless may_be_empty (NULL counts as ""). Else
 * BUS_ERR_ARG with err = `<what> "<name>" is not a name of 1..47 bytes of UTF-8`. Programs
 * check their --name/--run flags with it before they bind or announce anything, so a name is
 * never cut or dropped on the way to the bus. */
int bus_name_check(const char *name, const char *what, int may_be_empty, char *err, size_t errlen);
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
