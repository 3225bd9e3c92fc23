/* bus/bus.h: the socket helpers every program uses to talk to the bus (docs/PROTOCOL.md).
 *
 * Topology: one bin/bus process binds an XSUB where publishers connect (BUS_DEFAULT_PUB) and
 * an XPUB where subscribers connect (BUS_DEFAULT_SUB) and forwards between them. An event is
 * one frame, "topic\0msgpack" (wire_event_pack). Publishing never blocks: with no bus, or a
 * slow one, events are dropped, because training must not stall on monitoring.
 *
 * Status codes: 0 ok, BUS_TIMEOUT (1) when a wait ran out, BUS_ERR_INTR when a signal
 * interrupted the wait (czmq style: told apart from a bad frame so a program can exit
 * cleanly), BUS_ERR_ZMQ / BUS_ERR_ARG / BUS_ERR_REFUSED, or a negative wire_status when a frame was malformed
 * (the event is consumed; the caller may carry on). */
#ifndef BUS_BUS_H
#define BUS_BUS_H
#include <signal.h>
#include <stddef.h>

#include "bus/wire.h"

#define BUS_DEFAULT_PUB "tcp://127.0.0.1:5710" /* bus XSUB binds, publishers connect */
#define BUS_DEFAULT_SUB "tcp://127.0.0.1:5711" /* bus XPUB binds, subscribers connect */
#define BUS_ENV_PUB "FT_BUS_PUB"
#define BUS_ENV_SUB "FT_BUS_SUB"

enum {
    BUS_OK = 0,
    BUS_TIMEOUT = 1,
    BUS_ERR_INTR = -20, /* SIGINT/SIGTERM (or EINTR) while waiting */
    BUS_ERR_ZMQ = -21,  /* a zmq call failed; err says which and why */
    BUS_ERR_ARG = -22,
    BUS_ERR_REFUSED = -23, /* the security policy refused an endpoint, or a key file is bad
                              (bus/net.h, bus/keys.h) */
};

/* Endpoint resolution: the flag when given, else $FT_BUS_PUB / $FT_BUS_SUB, else the
 * default. The result is the argument, getenv's string or a literal: never freed. */
const char *bus_endpoint_pub(const char *flag_or_null);
const char *bus_endpoint_sub(const char *flag_or_null);

/* A publisher socket connected to the bus's XSUB at endpoint. It is an XPUB, not a PUB, so
 * bus_pub_wait can tell when the bus's subscription has arrived (a PUB cannot, and drops
 * everything sent before that). Linger is 1 s: a short-lived publisher's last events get
 * out, and a missing bus cannot hold up exit for long. Close with bus_close. */
void *bus_pub_open(void *zctx, const char *endpoint, char *err, size_t errlen);
/* Waits until the bus has subscribed to this publisher: 0, BUS_TIMEOUT, or BUS_ERR_INTR.
 * Optional: a long-running program just publishes, losing at most its first events. */
int bus_pub_wait(void *pub_sock, int timeout_ms);
/* Publishes m under topic as one frame, ZMQ_DONTWAIT. Returns 0, 1 when the event was
 * dropped (send queue full), or a negative wire_status / BUS_ERR_ZMQ. Works on a PUB too. */
int bus_publish(void *pub_sock, const char *topic, const wire_msg_t *m);

/* A SUB socket connected to the bus's XPUB at endpoint, subscribed to the n topic prefixes
 * (everything when n == 0). Subscriptions are set before connecting, so the bus's welcome
 * message (the latest ckpt of every run, topic "ckpt/") reaches a "ckpt" subscriber. */
void *bus_sub_open(void *zctx, const char *endpoint, const char **prefixes, int n, char *err,
                   size_t errlen);
/* Receives one event: 0 with topic (NUL-terminated, truncated to cap) and m filled (free
 * with wire_msg_free); BUS_TIMEOUT after timeout_ms (-1: wait forever); BUS_ERR_INTR when a
 * signal arrived (also when bus_signal_received() was already set on entry); a negative
 * wire_status when the event was malformed (topic is still filled when it could be read). */
int bus_recv(void *sub_sock, int timeout_ms, char *topic, size_t cap, wire_msg_t *m, char *err,
             size_t errlen);

/* One request/reply over a DEALER socket, framed like REQ: sends [empty][body] and waits for
 * [empty][body]. Replies whose req_id differs from req's (answers to an earlier request that
 * timed out) are discarded. Returns 0 with rep filled, BUS_TIMEOUT, BUS_ERR_INTR, or a
 * negative status with err set. The caller decides what to do with a MSG_ERROR reply. */
int bus_request(void *sock, const wire_msg_t *req, wire_msg_t *rep, int timeout_ms, char *err,
                size_t errlen);

/* Closes a socket with linger already set and NULLs the pointer. */
void bus_close(void **sock);

/* SIGINT/SIGTERM set a flag, without SA_RESTART so a blocked zmq_poll returns EINTR, and write
 * a byte to a pipe whose read end (bus_signal_fd, -1 before install or when pipe2 failed) a
 * long wait polls beside its sockets: a signal that arrives while zmq_poll is busy outside
 * poll(2) still ends the wait. The byte is never read: once a signal came, every wait that
 * polls the fd returns at once, which is what a program that is stopping wants; bus_recv and
 * bus_request poll it, and return BUS_ERR_INTR. */
void bus_signals_install(void);
int bus_signal_received(void);
int bus_signal_fd(void);
/* The flag itself, for libraries that take a stop flag (loader_client_cfg_t.stop). */
volatile sig_atomic_t *bus_signal_flag(void);

/* One JSON line {"topic":...,"error":...} for an event that did not decode (bin/bus tap). */
int bus_error_json(const char *topic, const char *error, char *out, size_t cap);
#endif
