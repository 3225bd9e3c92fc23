/* live/http.h: bin/live's HTTP side, on libmicrohttpd (docs/live.md lists every endpoint).
 *
 * One internal thread of libmicrohttpd serves every connection (epoll). A page's update stream
 * (GET /api/events, Server-Sent Events) holds no queue of its own: it is a cursor into the
 * store's ring of updates (live/store.h). When it has caught up, its connection is suspended;
 * the bus thread calls live_http_kick after new updates, which resumes the streams that are
 * behind (and every LIVE_PING_S, so a stream that is idle gets a comment line and a closed
 * page is noticed). A stream further behind than the ring gets "reset" and ends: the page
 * reloads the state and reconnects from there; no update is skipped without it knowing.
 *
 * Safety: requests are checked before anything is done for them: the method; the Host header
 * (DNS rebinding) while no token is required; the token (header `Authorization: Bearer T`,
 * parameter `token=T`, or the cookie that GET /?token=T sets) when one is; every query
 * parameter (known names only, values of bounded size and range); request headers are bounded
 * by the connection's memory (LIVE_HTTP_CONN_MEMORY: larger ones get 431), bodies by
 * LIVE_HTTP_BODY_MAX (413), idle connections time out (LIVE_HTTP_TIMEOUT_S), and connections
 * (LIVE_HTTP_MAX_CONNS) and event streams (max_streams) are limited. Every refusal is a 4xx
 * (or 503) with one JSON line {"error": "..."}. */
#ifndef LIVE_HTTP_H
#define LIVE_HTTP_H
#include <stddef.h>

#include "live/sample.h"
#include "live/store.h"

#define LIVE_HTTP_CONN_MEMORY (32 << 10)
#define LIVE_HTTP_BODY_MAX (16 << 10)
#define LIVE_HTTP_TIMEOUT_S 30
#define LIVE_HTTP_MAX_CONNS 512
#define LIVE_PING_S 15

typedef struct {
    const char *host;        /* numeric address to bind: 127.0.0.1 (default), ::1, 0.0.0.0, :: ... */
    int port;                /* 0: any free port */
    const char *token;       /* required token; NULL or "": none */
    int max_streams;         /* event streams at once */
} live_http_opts_t;

typedef struct live_http live_http_t;

int live_http_start(live_http_t **h, live_store_t *s, live_sampler_t *sp, const live_http_opts_t *o, char *err,
                    size_t errlen);
/* The port bound (the one chosen when o->port was 0). */
int live_http_port(const live_http_t *h);
/* 1 when the address bound is a loopback one. */
int live_http_is_loopback(const char *host);
/* Resumes the event streams that have updates to send or a ping due (the bus thread). */
void live_http_kick(live_http_t *h, double mono);
/* Event streams open. */
int live_http_streams(live_http_t *h);
/* Stops serving: event streams end, waiting sample requests get 503 (call after the bus thread
 * stopped, with live_sampler_fail_all). */
void live_http_stop(live_http_t **h);
#endif
