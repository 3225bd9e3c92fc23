/* bus/forwarder.h: the body of bin/bus, an XSUB/XPUB forwarder that remembers checkpoints.
 *
 * Publishers connect to pub_ep (our XSUB binds there), subscribers to sub_ep (our XPUB).
 * Events flow down, subscriptions flow up, in one zmq_poll loop that also ends on
 * SIGINT/SIGTERM (install bus_signals_install first). The XSUB subscribes to everything
 * itself, so the bus sees every event even with no subscriber; each ckpt event updates the
 * ckpt cache and the XPUB welcome message (see ckpt_cache.h). An event that does not decode
 * (wire_event_unpack: a string that is not UTF-8 included) or is not one frame is dropped,
 * counted and logged: subscribers written from docs/PROTOCOL.md decode everything they get,
 * and one bad publisher must not break them. */
#ifndef BUS_FORWARDER_H
#define BUS_FORWARDER_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *pub_ep, *sub_ep;
    uint32_t max_runs; /* runs remembered for the welcome message; 0: BUS_CKPT_RUNS */
    int quiet;         /* no log lines on stderr */
} bus_forwarder_cfg_t;

typedef struct {
    uint64_t events, malformed, subscriptions, ckpts;
} bus_forwarder_stats_t;

/* Runs until a signal arrives: 0 then (stats filled when non-NULL), or a negative BUS_ERR_*
 * with the reason in err: BUS_ERR_ARG, before anything is bound, when pub_ep and sub_ep are
 * one endpoint (the same string, or ipc paths naming one file); BUS_ERR_ZMQ when a bind
 * fails (e.g. the endpoint is in use). */
int bus_forwarder_run(const bus_forwarder_cfg_t *cfg, bus_forwarder_stats_t *stats, char *err,
                      size_t errlen);
#endif
