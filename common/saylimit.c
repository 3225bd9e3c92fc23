/* common/saylimit.c: see saylimit.h. */
#include "common/saylimit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

unsigned long long saylimit_unsaid(saylimit_t *s, double now) {
    if (!s->unsaid || now - s->at < 1.0) return 0;
    unsigned long long n = s->unsaid;
    s->unsaid = 0;
    s->at = now, s->in = 0;
    return n;
}

int saylimit_take(saylimit_t *s, double now, int per_s) {
    if (now - s->at >= 1.0 && !s->unsaid) s->at = now, s->in = 0; /* a pending count is taken first */
    if (s->in < per_s) {
        s->in++;
        return 1;
    }
    s->unsaid++;
    return 0;
}

int saylimit_peer_addr(int fd, char *out, size_t cap) {
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    char host[INET6_ADDRSTRLEN];
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&a, &al) != 0) return -1;
    if (a.ss_family == AF_INET && inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, sizeof host))
        snprintf(out, cap, "%s:%d", host, ntohs(((struct sockaddr_in *)&a)->sin_port));
    else if (a.ss_family == AF_INET6 && inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, sizeof host))
        snprintf(out, cap, "[%s]:%d", host, ntohs(((struct sockaddr_in6 *)&a)->sin6_port));
    else
        return -1;
    return 0;
}
