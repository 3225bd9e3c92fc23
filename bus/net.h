/* bus/net.h: every socket that talks to another process is made here, so one policy decides
 * who may talk to whom and how much one peer may send (docs/PROTOCOL.md §1.4).
 *
 * Size: each socket gets ZMQ_MAXMSGSIZE by the kind of peer it hears from; libzmq reads a
 * frame's declared size first and drops the connection of a peer that declares more, before
 * allocating anything, so memory per peer is bounded before decoding starts.
 *
 * Security (ZeroMQ CURVE: encryption and authentication, keys from `bin/bus keygen`):
 *   - a server (bus_net_bind) with a key pair serves CURVE only, to the client keys listed in
 *     its authorized file (a ZAP handler checks each handshake), or to any client holding a
 *     key pair when allow_any_client says so;
 *   - a client (bus_net_connect) uses CURVE towards every endpoint its trust file names a
 *     server key for, with its own key pair (a fresh one when it has none: then only an
 *     allow-any server takes it);
 *   - anything else travels in the clear, which is allowed only for loopback (127.0.0.0/8,
 *     ::1, localhost), ipc:// and inproc:// endpoints, unless `insecure` is set: otherwise
 *     bind and connect refuse with one line saying what to give.
 *
 * Heartbeats: every socket sends a ZMTP PING every BUS_HEARTBEAT_IVL_MS on each of its
 * connections (tcp and ipc) and drops a connection that has carried nothing for
 * BUS_HEARTBEAT_TIMEOUT_MS after a ping (ZMQ_HEARTBEAT_IVL, _TIMEOUT; _TTL the same time-out,
 * asked of the peer). So a half-open connection (the peer's machine cut off, or gone without a
 * FIN) is noticed within IVL + TIMEOUT, 5 s by default, and a connecting socket reconnects
 * (every 100 ms, libzmq's default) until the peer is back, each attempt given up after
 * BUS_CONNECT_TIMEOUT_MS. With heartbeats on, the same time-out is also the kernel's
 * (ZMQ_TCP_MAXRT: TCP_USER_TIMEOUT on Linux): a tcp connection whose sent bytes stay
 * unacknowledged that long is closed. libzmq (4.3) sends its PING only once its output buffer
 * is empty, so a publisher that filled its kernel send buffer after the cut never pings and the
 * heartbeat's time-out never starts; the kernel's does. FT_HEARTBEAT_IVL_MS (0: off) and
 * FT_HEARTBEAT_TIMEOUT_MS change them (docs/NETWORK.md).
 *
 * The configuration is process-wide: a program's main calls bus_net_setup once, before its
 * first socket, with its flags (bus_net_flags); unset values come from the environment
 * (FT_KEY, FT_TRUST, FT_AUTHORIZED, FT_ALLOW_ANY_CLIENT=1, FT_INSECURE=1,
 * FT_MAX_<KIND>_BYTES). A program that never calls it is configured from the environment at
 * its first socket. */
#ifndef BUS_NET_H
#define BUS_NET_H
#include <stddef.h>
#include <zmq.h>

#include "bus/bus.h"
#include "common/flags.h"

/* Whom a socket hears from, which sets its size limit. */
typedef enum {
    BUS_PEER_EVENTS,   /* bin/bus's XSUB and XPUB, a publisher's XPUB: events, subscriptions */
    BUS_PEER_SUB,      /* a subscriber: events and the bus's welcome index */
    BUS_PEER_REQUESTS, /* a service's ROUTER (loader, sampler): requests */
    BUS_PEER_REPLIES,  /* a client's DEALER or REQ: replies (batches are the big ones) */
    BUS_PEER_KINDS
} bus_peer_kind;

/* Default limits, in bytes of one message. Events are at most a few KiB (strings are capped
 * at 4 KiB); the welcome index of the most runs the bus keeps (4096 x ~8.4 KiB) fits 64 MiB;
 * a batch reply fits a whole frame. */
#define BUS_MAX_EVENTS_BYTES (64ll << 10)
#define BUS_MAX_SUB_BYTES (64ll << 20)
#define BUS_MAX_REQUESTS_BYTES (64ll << 10)
#define BUS_MAX_REPLIES_BYTES (256ll << 20)

/* Heartbeats of every socket, in ms (above). The time-out must outlast a loaded machine's
 * stalls and a slow link's round trip (a ping answered 200 ms each way): 4 s does both. */
#define BUS_HEARTBEAT_IVL_MS 1000
#define BUS_HEARTBEAT_TIMEOUT_MS 4000
/* A TCP connect that has not completed after this long is abandoned and tried again (every
 * 100 ms, libzmq's reconnect interval): a peer back from a partition is reached within about a
 * second instead of at the kernel's next SYN retry (1, 3, 7, 15 ... s after the first). */
#define BUS_CONNECT_TIMEOUT_MS 1000

typedef struct {
    const char *key;        /* own key pair file (PREFIX.key) */
    const char *trust;      /* trust file: the servers this program connects to */
    const char *authorized; /* authorized-clients file, for the sockets it serves */
    int allow_any_client;   /* serve any CURVE client, authorized file or not */
    int insecure;           /* allow non-loopback endpoints without CURVE */
    long long max_bytes[BUS_PEER_KINDS]; /* 0: $FT_MAX_<KIND>_BYTES or the default */
} bus_net_opts_t;

/* Appends the flags that fill o to f (room for BUS_NET_NFLAGS): --key, --trust, --insecure
 * for every program, and --authorized, --allow-any-client and --max-<kind>-bytes for a
 * program that serves peers of kind `serves` (-1: a program that only connects). Returns
 * how many were appended. */
#define BUS_NET_NFLAGS 6
int bus_net_flags(flag_t *f, bus_net_opts_t *o, int serves);
/* Loads the configuration (o may be NULL: environment only): reads and checks the key files.
 * 0, or BUS_ERR_REFUSED with one line in err. */
int bus_net_setup(const bus_net_opts_t *o, char *err, size_t errlen);
/* Forgets the configuration (tests). */
void bus_net_reset(void);

/* A socket of ZeroMQ type `type` for peers of `kind`: its size limit set, linger 0. */
void *bus_net_socket(void *zctx, int type, bus_peer_kind kind, char *err, size_t errlen);
/* Binds s as a server (CURVE when this program has a key pair); zctx is s's context, where
 * the handler that checks client keys runs. An ipc endpoint a live process is listening on is
 * refused (libzmq would take it over silently); a stale socket file is replaced. 0,
 * BUS_ERR_REFUSED or BUS_ERR_ZMQ, err set. */
int bus_net_bind(void *zctx, void *s, const char *endpoint, char *err, size_t errlen);
/* The endpoint others should connect to for a socket bound as bound_as: the address actually
 * bound (an interface name or a wildcard port resolved), with a wildcard address (a star,
 * 0.0.0.0, [::]) replaced by this host's name, which the others must resolve. For loaders'
 * announcements and rank 0's rendezvous. */
void bus_net_advertised(void *s, const char *bound_as, char *out, size_t cap);
/* Connects s as a client (CURVE when the trust file names endpoint's server). */
int bus_net_connect(void *s, const char *endpoint, char *err, size_t errlen);
/* The size limit for kind, as configured. */
long long bus_net_max_bytes(bus_peer_kind kind);
/* 1 for ipc://, inproc:// and tcp:// to 127.0.0.0/8, ::1 or localhost. */
int bus_net_endpoint_local(const char *endpoint);
/* Handshakes refused so far by this process's servers (clear text, a wrong server key, a key
 * not authorized); each is also logged, one line per reason and client then every 10 s. */
unsigned long long bus_net_refused(void);
/* A server bound with CURVE has its refusals watched through a socket monitor. libzmq gives a
 * socket one monitor: a program that monitors its server socket itself (the sampler service,
 * rank 0's rendezvous) replaces that one, so it adds BUS_NET_REFUSAL_EVENTS to its own events
 * and passes each event it reads to bus_net_refusal, which logs and counts the refusals and
 * returns 1 for them (0: an event for the caller). ep: the endpoint the socket is bound to. */
#define BUS_NET_REFUSAL_EVENTS (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
int bus_net_refusal(unsigned event, unsigned value, const char *ep);
#endif
