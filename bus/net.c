/* bus/net.c: the process's socket policy (see net.h). */
#include "bus/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/keys.h"
#include "bus/zap.h"
#include "common/errmsg.h"

#define GUIDE "see README, \"Running across machines, securely\""

static const struct {
    const char *flag, *env;
    long long dflt;
} KINDS[BUS_PEER_KINDS] = {
    [BUS_PEER_EVENTS] = {"max-event-bytes", "FT_MAX_EVENT_BYTES", BUS_MAX_EVENTS_BYTES},
    [BUS_PEER_SUB] = {"max-sub-bytes", "FT_MAX_SUB_BYTES", BUS_MAX_SUB_BYTES},
    [BUS_PEER_REQUESTS] = {"max-request-bytes", "FT_MAX_REQUEST_BYTES", BUS_MAX_REQUESTS_BYTES},
    [BUS_PEER_REPLIES] = {"max-reply-bytes", "FT_MAX_REPLY_BYTES", BUS_MAX_REPLIES_BYTES},
};
#define MIN_MAX_BYTES 1024ll
#define MAX_MAX_BYTES (4ll << 30)

static struct {
    int ready;
    int has_key;
    bus_keypair_t kp;        /* own key pair (has_key) */
    bus_keypair_t ephemeral; /* made on first use by a client without a key pair */
    bus_trust_t *trust;
    int n_trust;
    char (*authorized)[BUS_KEY_Z85];
    int n_authorized, authorized_given;
    int allow_any, insecure;
    long long max_bytes[BUS_PEER_KINDS];
    int hb_ivl_ms, hb_timeout_ms; /* ZeroMQ heartbeats of every socket (net.h) */
} g;

int bus_net_flags(flag_t *f, bus_net_opts_t *o, int serves) {
    int n = 0;
    f[n++] = (flag_t){"key", FLAG_STR, &o->key, "own CURVE key pair file from bin/bus keygen ($FT_KEY)", 0, 0, 0};
    f[n++] = (flag_t){"trust", FLAG_STR, &o->trust,
                      "servers trusted: lines ENDPOINT-PATTERN SERVER-KEY; CURVE to those ($FT_TRUST)", 0, 0, 0};
    f[n++] = (flag_t){"insecure", FLAG_BOOL, &o->insecure,
                      "allow endpoints other than loopback and ipc without CURVE ($FT_INSECURE=1)", 0, 0, 0};
    if (serves < 0 || serves >= BUS_PEER_KINDS) return n;
    f[n++] = (flag_t){"authorized", FLAG_STR, &o->authorized,
                      "with --key: client public keys served, one a line ($FT_AUTHORIZED)", 0, 0, 0};
    f[n++] = (flag_t){"allow-any-client", FLAG_BOOL, &o->allow_any_client,
                      "with --key: serve any CURVE client ($FT_ALLOW_ANY_CLIENT=1)", 0, 0, 0};
    static char help[BUS_PEER_KINDS][96];
    snprintf(help[serves], sizeof help[serves], "largest message a peer may send (0: $%s or %lld)",
             KINDS[serves].env, KINDS[serves].dflt);
    f[n++] = (flag_t){KINDS[serves].flag, FLAG_I64, &o->max_bytes[serves], help[serves], 0,
                      (double)MAX_MAX_BYTES, 0};
    return n;
}

static const char *pick(const char *flag, const char *env) {
    if (flag && *flag) return flag;
    const char *e = getenv(env);
    return e && *e ? e : NULL;
}

static int env_on(const char *env) {
    const char *e = getenv(env);
    return e && *e && strcmp(e, "0") != 0;
}

void bus_net_reset(void) {
    bus_keys_trust_free(&g.trust, g.n_trust);
    free(g.authorized);
    memset(&g, 0, sizeof g);
}

int bus_net_setup(const bus_net_opts_t *o, char *err, size_t errlen) {
    static const bus_net_opts_t none;
    if (!o) o = &none;
    bus_net_reset();
    for (int k = 0; k < BUS_PEER_KINDS; k++) {
        long long v = o->max_bytes[k];
        const char *e = getenv(KINDS[k].env);
        if (!v && e && *e) {
            char *end;
            v = strtoll(e, &end, 10);
            if (*end || v <= 0)
                return err_fail(err, errlen, BUS_ERR_REFUSED, "$%s: '%s' is not a byte count", KINDS[k].env, e);
        }
        if (!v) v = KINDS[k].dflt;
        if (v < MIN_MAX_BYTES || v > MAX_MAX_BYTES)
            return err_fail(err, errlen, BUS_ERR_REFUSED, "--%s / $%s: %lld is outside [%lld, %lld]",
                            KINDS[k].flag, KINDS[k].env, v, MIN_MAX_BYTES, MAX_MAX_BYTES);
        g.max_bytes[k] = v;
    }
    const struct { const char *env; int dflt, *out; } hb[2] = {
        {"FT_HEARTBEAT_IVL_MS", BUS_HEARTBEAT_IVL_MS, &g.hb_ivl_ms},
        {"FT_HEARTBEAT_TIMEOUT_MS", BUS_HEARTBEAT_TIMEOUT_MS, &g.hb_timeout_ms},
    };
    for (int k = 0; k < 2; k++) {
        const char *e = getenv(hb[k].env);
        long v = hb[k].dflt;
        if (e && *e) {
            char *end;
            v = strtol(e, &end, 10);
            /* the time-out and the TTL travel in deciseconds, 16 bits: at most 6553.5 s */
            if (*end || v < 0 || v > 6553500 || (k == 1 && v < 100))
                return err_fail(err, errlen, BUS_ERR_REFUSED, "$%s: '%s' is not a number of milliseconds in [%d, 6553500]",
                                hb[k].env, e, k == 1 ? 100 : 0);
        }
        *hb[k].out = (int)v;
    }
    const char *key = pick(o->key, "FT_KEY"), *trust = pick(o->trust, "FT_TRUST");
    const char *auth = pick(o->authorized, "FT_AUTHORIZED");
    g.allow_any = o->allow_any_client || env_on("FT_ALLOW_ANY_CLIENT");
    g.insecure = o->insecure || env_on("FT_INSECURE");
    int rc = 0;
    if (key && (rc = bus_keys_read_pair(key, &g.kp, err, errlen))) goto fail;
    g.has_key = key != NULL;
    if (trust && (rc = bus_keys_read_trust(trust, &g.trust, &g.n_trust, err, errlen))) goto fail;
    if (auth && (rc = bus_keys_read_list(auth, &g.authorized, &g.n_authorized, err, errlen))) goto fail;
    g.authorized_given = auth != NULL;
    g.ready = 1;
    return 0;
fail:
    bus_net_reset();
    return rc;
}

static int ready(char *err, size_t errlen) { return g.ready ? 0 : bus_net_setup(NULL, err, errlen); }

long long bus_net_max_bytes(bus_peer_kind kind) {
    if (!g.ready && bus_net_setup(NULL, NULL, 0)) return KINDS[kind].dflt;
    return g.max_bytes[kind];
}

unsigned long long bus_net_refused(void) { return bus_zap_refused(); }
int bus_net_refusal(unsigned event, unsigned value, const char *ep) { return bus_zap_refusal(event, value, ep); }

void *bus_net_socket(void *zctx, int type, bus_peer_kind kind, char *err, size_t errlen) {
    if (!zctx || (int)kind < 0 || kind >= BUS_PEER_KINDS) {
        err_fail(err, errlen, BUS_ERR_ARG, "bus_net_socket: bad argument");
        return NULL;
    }
    if (ready(err, errlen)) return NULL;
    void *s = zmq_socket(zctx, type);
    if (!s) {
        err_fail(err, errlen, BUS_ERR_ZMQ, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int zero = 0;
    int64_t max = g.max_bytes[kind];
    /* heartbeats on every connection (tcp and ipc): a peer that vanished without a FIN (its
     * machine cut off or gone) is dropped after at most ivl + timeout instead of the kernel's
     * hours, and a connecting socket then reconnects by itself; the TTL asks the peer to do
     * the same when our pings stop, for peers that send none of their own. libzmq produces a
     * PING only when its output buffer is empty: a socket whose kernel send buffer filled
     * after the peer vanished (a publisher of metrics) never pings, so its time-out never
     * starts. The kernel's user time-out (ZMQ_TCP_MAXRT: TCP_USER_TIMEOUT on Linux) closes a
     * connection whose sent bytes stay unacknowledged that long: the same bound for that case */
    int ivl = g.hb_ivl_ms, hto = g.hb_timeout_ms, cto = BUS_CONNECT_TIMEOUT_MS;
    if (zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof max) ||
        zmq_setsockopt(s, ZMQ_CONNECT_TIMEOUT, &cto, sizeof cto) ||
        (ivl > 0 && (zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl) ||
                     zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &hto, sizeof hto) ||
                     zmq_setsockopt(s, ZMQ_HEARTBEAT_TTL, &hto, sizeof hto) ||
                     zmq_setsockopt(s, ZMQ_TCP_MAXRT, &hto, sizeof hto)))) {
        err_fail(err, errlen, BUS_ERR_ZMQ, "socket options: %s", zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The host of "tcp://[SOURCE;]HOST:PORT" (where the bytes go; brackets of an IPv6 address
 * removed) into host, and its ":PORT". NULL when ep is no such endpoint. */
static const char *tcp_host(const char *ep, char *host, size_t cap) {
    if (!has_prefix(ep, "tcp://")) return NULL;
    const char *addr = ep + 6, *semi = strrchr(addr, ';');
    if (semi) addr = semi + 1; /* "tcp://source;destination": where the bytes go */
    const char *colon = strrchr(addr, ':');
    if (!colon) return NULL;
    size_t n = (size_t)(colon - addr);
    if (n >= cap) return NULL;
    memcpy(host, addr, n);
    host[n] = 0;
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        memmove(host, host + 1, n - 2);
        host[n - 2] = 0;
    }
    return colon;
}

int bus_net_endpoint_local(const char *ep) {
    if (!ep) return 0;
    if (has_prefix(ep, "ipc://") || has_prefix(ep, "inproc://")) return 1;
    char host[256];
    if (!tcp_host(ep, host, sizeof host)) return 0;
    if (!strcmp(host, "localhost") || !strcmp(host, "::1")) return 1;
    struct in_addr a4;
    return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* Plain text is allowed towards ep? 0, or BUS_ERR_REFUSED with the line the user needs. */
static int clear_allowed(const char *ep, const char *what, char *err, size_t errlen) {
    if (g.insecure || bus_net_endpoint_local(ep)) return 0;
    return err_fail(err, errlen, BUS_ERR_REFUSED,
                    "%s %s: not a loopback or ipc endpoint, and no CURVE security for it (%s); "
                    "give %s, or --insecure to send in the clear (%s)",
                    what, ep, what[0] == 'b' ? "no --key" : "its server key is not in --trust",
                    what[0] == 'b' ? "--key with --authorized or --allow-any-client"
                                   : "--trust with a line for it",
                    GUIDE);
}

static int set(void *s, int opt, const void *v, size_t n, const char *ep, char *err, size_t errlen) {
    if (zmq_setsockopt(s, opt, v, n) == 0) return 0;
    return err_fail(err, errlen, BUS_ERR_ZMQ, "%s: CURVE options: %s (is libzmq built with libsodium?)", ep,
                    zmq_strerror(zmq_errno()));
}

static int authorized(const uint8_t key[32]) {
    if (g.allow_any) return 1;
    char z85[BUS_KEY_Z85];
    if (!zmq_z85_encode(z85, key, 32)) return 0;
    for (int i = 0; i < g.n_authorized; i++)
        if (!strcmp(g.authorized[i], z85)) return 1;
    return 0;
}

/* "tcp://NAME:PORT" with NAME a host name (not an address, not a wildcard): binds s to NAME's
 * addresses in getaddrinfo's order until one binds. A name may resolve to an address this socket
 * cannot bind first: Debian's /etc/hosts gives localhost ::1 as well as 127.0.0.1, getaddrinfo may
 * sort ::1 first, and the sockets are IPv4 only (ZMQ_IPV6 unset) or the kernel has no IPv6
 * (ENODEV) -- found binding tcp://localhost:* in a fresh Debian 12 chroot. 0 when one bound; else
 * -1, with tried the endpoints tried ("" when ep is none such or NAME does not resolve) and *e the
 * last one's error. */
static int tcp_bind_host(void *s, const char *ep, char *tried, size_t cap, int *e) {
    tried[0] = 0;
    char host[256];
    const char *port = strchr(ep, ';') ? NULL : tcp_host(ep, host, sizeof host);
    if (!port || !host[0] || !strcmp(host, "*")) return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
    int rc = -1;
    size_t used = 0;
    for (const struct addrinfo *r = res; r && rc; r = r->ai_next) {
        const int v6 = r->ai_family == AF_INET6;
        if (!v6 && r->ai_family != AF_INET) continue;
        const void *a = v6 ? (const void *)&((const struct sockaddr_in6 *)r->ai_addr)->sin6_addr
                           : (const void *)&((const struct sockaddr_in *)r->ai_addr)->sin_addr;
        char ip[INET6_ADDRSTRLEN], numeric[300];
        if (!inet_ntop(r->ai_family, a, ip, sizeof ip)) continue;
        snprintf(numeric, sizeof numeric, v6 ? "tcp://[%s]%s" : "tcp://%s%s", ip, port);
        if (zmq_bind(s, numeric) == 0) rc = 0;
        else {
            *e = zmq_errno();
            if (used < cap) used += (size_t)snprintf(tried + used, cap - used, "%s%s", used ? ", " : "", numeric);
        }
    }
    freeaddrinfo(res);
    return rc;
}

/* 1 when a process is listening on the ipc endpoint's socket file. libzmq's bind of ipc://PATH
 * removes whatever file is at PATH and binds anew, so a second bus or loader started on the
 * endpoint of a live one took its name silently and cut the first off for good (its clients
 * then reach the newcomer, the first serves nobody). A connect tells a live listener
 * (accepted) from a stale file (ECONNREFUSED) or none (ENOENT); only the first is refused.
 * Wildcards (ipc://*) and Linux's abstract names (ipc://@NAME) are left to libzmq. A live one
 * serving CURVE logs the probe as a client that broke off its handshake: true, and a sign that
 * something tried to take its endpoint. */
static int ipc_in_use(const char *ep) {
    const char *path = ep + strlen("ipc://");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!*path || *path == '*' || *path == '@' || strlen(path) >= sizeof a.sun_path) return 0;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int live = connect(fd, (const struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return live;
}

int bus_net_bind(void *zctx, void *s, const char *ep, char *err, size_t errlen) {
    if (!zctx || !s || !ep) return err_fail(err, errlen, BUS_ERR_ARG, "bus_net_bind: NULL argument");
    int rc = ready(err, errlen);
    if (rc) return rc;
    if (has_prefix(ep, "ipc://") && ipc_in_use(ep))
        return err_fail(err, errlen, BUS_ERR_ZMQ, "bind %s: another process is serving there (stop it first, or "
                        "choose another endpoint)", ep);
    if (!has_prefix(ep, "inproc://")) {
        if (!g.has_key) {
            if ((rc = clear_allowed(ep, "bind", err, errlen))) return rc;
        } else {
            if (!g.authorized_given && !g.allow_any)
                return err_fail(err, errlen, BUS_ERR_REFUSED,
                                "bind %s: --key needs --authorized FILE (the client keys served) or "
                                "--allow-any-client (%s)", ep, GUIDE);
            /* the handler first: a client that connects before it exists would get in */
            if ((rc = bus_zap_ensure(zctx, authorized, err, errlen))) return rc;
            int one = 1;
            if ((rc = set(s, ZMQ_ZAP_DOMAIN, "ft", 2, ep, err, errlen)) ||
                (rc = set(s, ZMQ_CURVE_SERVER, &one, sizeof one, ep, err, errlen)) ||
                (rc = set(s, ZMQ_CURVE_SECRETKEY, g.kp.sec, BUS_KEY_Z85 - 1, ep, err, errlen)))
                return rc;
        }
    }
    /* logs refused clients; watched before the bind, so that no client comes first */
    if (g.has_key && !has_prefix(ep, "inproc://")) bus_zap_watch(zctx, s, ep);
    if (zmq_bind(s, ep) == 0) return 0;
    int e = zmq_errno();
    /* libzmq binds an address or an interface name, not a host name: the command line every
     * rank of a run shares names rank 0 by its host name (tcp://hostA:5730) */
    if (e == ENODEV) {
        char tried[600];
        int e2 = e;
        if (tcp_bind_host(s, ep, tried, sizeof tried, &e2) == 0) return 0;
        if (tried[0]) return err_fail(err, errlen, BUS_ERR_ZMQ, "bind %s (%s): %s", ep, tried, zmq_strerror(e2));
    }
    return err_fail(err, errlen, BUS_ERR_ZMQ, "bind %s: %s", ep, zmq_strerror(e));
}

void bus_net_advertised(void *s, const char *bound_as, char *out, size_t cap) {
    char last[512] = "";
    size_t n = sizeof last;
    if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &n) != 0 || !last[0]) {
        snprintf(out, cap, "%s", bound_as ? bound_as : "");
        return;
    }
    const char *wild[] = {"tcp://0.0.0.0:", "tcp://[::]:", "tcp://*:"};
    for (int i = 0; i < 3; i++)
        if (has_prefix(last, wild[i])) {
            char host[256] = "localhost";
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = 0;
            snprintf(out, cap, "tcp://%s:%s", host, last + strlen(wild[i]));
            return;
        }
    snprintf(out, cap, "%s", last);
}

int bus_net_connect(void *s, const char *ep, char *err, size_t errlen) {
    if (!s || !ep) return err_fail(err, errlen, BUS_ERR_ARG, "bus_net_connect: NULL argument");
    int rc = ready(err, errlen);
    if (rc) return rc;
    const char *server = has_prefix(ep, "inproc://") ? NULL : bus_keys_trusted(g.trust, g.n_trust, ep);
    if (!server && !has_prefix(ep, "inproc://") && (rc = clear_allowed(ep, "connect", err, errlen)))
        return rc;
    if (server) {
        const bus_keypair_t *me = &g.kp;
        if (!g.has_key) { /* a throw-away identity: enough for an allow-any server */
            if (!g.ephemeral.pub[0] && (rc = bus_keys_generate(&g.ephemeral, err, errlen))) return rc;
            me = &g.ephemeral;
        }
        if ((rc = set(s, ZMQ_CURVE_SERVERKEY, server, BUS_KEY_Z85 - 1, ep, err, errlen)) ||
            (rc = set(s, ZMQ_CURVE_PUBLICKEY, me->pub, BUS_KEY_Z85 - 1, ep, err, errlen)) ||
            (rc = set(s, ZMQ_CURVE_SECRETKEY, me->sec, BUS_KEY_Z85 - 1, ep, err, errlen)))
            return rc;
    }
    if (zmq_connect(s, ep) != 0)
        return err_fail(err, errlen, BUS_ERR_ZMQ, "connect %s: %s", ep, zmq_strerror(zmq_errno()));
    return 0;
}
