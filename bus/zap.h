/* bus/zap.h: the ZeroMQ authentication handler (ZAP, RFC 27) behind bus_net_bind (internal to
 * bus/). libzmq asks the handler bound at inproc://zeromq.zap.01 of a server socket's context
 * about each CURVE handshake; ours answers from a decision function, here "is this client
 * key authorized". One handler thread per context; it ends when the context terminates. */
#ifndef BUS_ZAP_H
#define BUS_ZAP_H
#include <stddef.h>
#include <stdint.h>

/* 1 to accept the client whose 32-byte CURVE public key is key. Called on the handler's
 * thread: it must only read data that no longer changes. */
typedef int (*bus_zap_allow_fn)(const uint8_t key[32]);

/* Starts the handler in zctx unless one is bound there already. 0, or BUS_ERR_ZMQ with err. */
int bus_zap_ensure(void *zctx, bus_zap_allow_fn allow, char *err, size_t errlen);
/* Logs the handshakes of server socket `server` (in zctx, whose handler bus_zap_ensure started)
 * that fail before the key check: a client in clear text, or one holding a wrong server key.
 * Every refusal, these and the key check's, is one line on stderr ("<program>: refused a
 * client on EP from ADDR: why"), at most one a second, and counted. 0, or -1 when the socket
 * cannot be watched (refusals then only go uncounted). */
int bus_zap_watch(void *zctx, void *server, const char *endpoint); /* call before zmq_bind */
/* bus_net_refusal (net.h): logs and counts a monitor event of a refused client. */
int bus_zap_refusal(unsigned event, unsigned value, const char *ep);
/* Handshakes refused so far, over every handler of the process. */
unsigned long long bus_zap_refused(void);
#endif
