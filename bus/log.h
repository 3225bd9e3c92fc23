/* bus/log.h: a program's human-readable lines, on stderr and as "log" events on the bus
 * (docs/PROTOCOL.md §2.3, "log").
 *
 * The lines that tell someone watching a run what happens (a stage starts and with what, a
 * checkpoint is written, a loader is passed over, a warning, the error that ends a program, the
 * stop) go to stderr as "<program>: <line>", as they always did, and to the bus on topic
 * log/<program>, where bin/live's Log box shows them (docs/live.md). Per-step numbers and
 * progress bars are not for this: metrics have their own event.
 *
 * The bus copy is best effort, like every event: publishing never blocks (ZMQ_DONTWAIT), and
 * with no bus, no subscriber or a full send queue the event is dropped; the stderr line is
 * written whatever happens to it. */
#ifndef BUS_LOG_H
#define BUS_LOG_H
#include <stddef.h>

#include "bus/wire.h"

/* Bytes of a line on the bus: the protocol's limit for a str (a longer line is cut, with "…"
 * at its end, on a character boundary). stderr gets the whole line. */
#define BUS_LOG_MAX WIRE_MAX_STR

typedef struct {
    const char *program; /* the stderr prefix and the topic log/<program>: a name (at most 47
                            bytes of UTF-8, e.g. "trainer") */
    void *pub;           /* the program's publisher socket (bus_pub_open), borrowed, not closed
                            here; NULL: stderr only */
    int quiet;           /* 1: the bus only (a program's --quiet keeps its terminal quiet; the
                            dashboard still hears it) */
} bus_log_t;

/* Formats the text (printf), writes each of its '\n'-separated lines (empty ones skipped) to
 * stderr as "<program>: <line>\n" unless quiet, and publishes each as a "log" event when pub
 * is set. Call it from the thread that publishes on pub (a ZeroMQ socket is one thread's at a
 * time); the programs' main threads do. Returns 0 (stderr written, events sent or no pub), 1
 * when an event was dropped, BUS_ERR_ARG for a NULL lg, program or fmt, or the negative status of a
 * publish that failed (a program name that is not a name); the caller may always carry on. */
int bus_log(const bus_log_t *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The bus copy of one line: src[0..n) as UTF-8 (bytes that are not, and NULs, become U+FFFD,
 * as wire_utf8_clean does), cut on a character boundary so that it fits cap - 1 bytes, with
 * "…" (U+2026) as its last character when something was cut. cap >= 4. Returns the bytes
 * written, the terminating NUL not counted. bus_log uses cap = BUS_LOG_MAX + 1. */
size_t bus_log_fit(char *out, size_t cap, const char *src, size_t n);
#endif
