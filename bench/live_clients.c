/* bench/live_clients.c: N page clients of bin/live's update stream at once, in one process
 * (epoll), for bench/bench_live.sh. Each opens GET /api/events?since=SINCE (HTTP/1.0, so the
 * stream is not chunked), reads every event and checks that the ids come one after another
 * from SINCE+1 with no gap: an update a client applied is never preceded by one it missed.
 * It stops when the file STOP exists and every client has reached the id written in it (or
 * 20 s after STOP appeared), then prints one JSON line:
 *   {"clients", "received": total, "min_last", "max_last", "gaps", "resets", "closed"}
 * where gaps counts ids that were not the next (never expected), resets the "reset" events
 * (a client that fell behind the ring: it would reload), closed the streams that ended early.
 *
 *   build/bench/live_clients PORT N SINCE STOPFILE */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd, open;
    unsigned long long next, last, received, gaps, resets;
    char buf[1 << 16];
    size_t have;
} client_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Consumes the whole lines in c->buf. */
static void parse(client_t *c) {
    size_t start = 0;
    for (size_t i = 0; i < c->have; i++) {
        if (c->buf[i] != '\n') continue;
        char *line = c->buf + start;
        size_t n = i - start;
        if (n > 4 && !memcmp(line, "id: ", 4)) {
            unsigned long long id = strtoull(line + 4, NULL, 10);
            if (id != c->next) c->gaps++;
            c->next = id + 1;
            c->last = id;
            c->received++;
        } else if (n >= 12 && !memcmp(line, "event: reset", 12)) {
            c->resets++;
        }
        start = i + 1;
    }
    memmove(c->buf, c->buf + start, c->have - start);
    c->have -= start;
    if (c->have == sizeof c->buf) c->have = 0; /* a line longer than the buffer: not an id line */
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT N SINCE STOPFILE\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    unsigned long long since = strtoull(argv[3], NULL, 10);
    const char *stop = argv[4];
    client_t *cl = calloc((size_t)n, sizeof *cl);
    int ep = epoll_create1(0);
    if (!cl || ep < 0) return 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    char req[256];
    int rl = snprintf(req, sizeof req, "GET /api/events?since=%llu HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n", since, port);
    for (int i = 0; i < n; i++) {
        client_t *c = &cl[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) || write(c->fd, req, (size_t)rl) != rl) {
            fprintf(stderr, "live_clients: client %d: %s\n", i, strerror(errno));
            return 1;
        }
        c->open = 1;
        c->next = since + 1;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    unsigned long long target = 0;
    double stop_seen = 0;
    for (;;) {
        struct epoll_event evs[64];
        int k = epoll_wait(ep, evs, 64, 200);
        for (int j = 0; j < k; j++) {
            client_t *c = &cl[evs[j].data.u32];
            ssize_t r = read(c->fd, c->buf + c->have, sizeof c->buf - c->have);
            if (r <= 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->open = 0;
                continue;
            }
            c->have += (size_t)r;
            parse(c);
        }
        if (!stop_seen) {
            FILE *f = fopen(stop, "r");
            if (f) {
                if (fscanf(f, "%llu", &target) == 1) stop_seen = now();
                fclose(f);
            }
        }
        if (stop_seen) {
            int done = 1;
            for (int i = 0; i < n; i++) done &= !cl[i].open || cl[i].last >= target;
            if (done || now() - stop_seen > 20) break;
        }
    }
    unsigned long long total = 0, gaps = 0, resets = 0, min_last = ~0ull, max_last = 0;
    int closed = 0;
    for (int i = 0; i < n; i++) {
        total += cl[i].received, gaps += cl[i].gaps, resets += cl[i].resets;
        if (cl[i].last < min_last) min_last = cl[i].last;
        if (cl[i].last > max_last) max_last = cl[i].last;
        closed += !cl[i].open;
        if (cl[i].open) close(cl[i].fd);
    }
    printf("{\"clients\":%d,\"received\":%llu,\"min_last\":%llu,\"max_last\":%llu,\"target\":%llu,\"gaps\":%llu,"
           "\"resets\":%llu,\"closed\":%d}\n", n, total, min_last, max_last, target, gaps, resets, closed);
    free(cl);
    return 0;
}
