/* common/saylimit.h: one line per bad thing a peer sends, but no flood of them.
 *
 * A program that drops or refuses what a peer sent says so in one line each (what was wrong,
 * from where). A peer can send thousands a second, so at most per_s lines are said in a
 * second; the others are counted and said as one line ("N more ...") once their second is
 * over. One owner at a time (or the caller's lock); times are progress_now()'s seconds. */
#ifndef COMMON_SAYLIMIT_H
#define COMMON_SAYLIMIT_H
#include <stddef.h>

typedef struct {
    double at;                /* when the current second began */
    int in;                   /* lines said in it */
    unsigned long long unsaid;/* lines not said since the last count was taken */
} saylimit_t;

/* Takes the count of lines not said, once their second is over (0 otherwise, or when none):
 * call it first, and say "N more ..." when it is not 0. */
unsigned long long saylimit_unsaid(saylimit_t *s, double now);
/* 1: say this line (it is counted in the second); 0: it is counted as unsaid instead. */
int saylimit_take(saylimit_t *s, double now, int per_s);

/* "ADDR:PORT" ("[ADDR]:PORT" for IPv6) of the peer of a connected TCP socket fd: 0, or -1
 * (another kind of socket, or no peer) with out untouched. */
int saylimit_peer_addr(int fd, char *out, size_t cap);
#endif
