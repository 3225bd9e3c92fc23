/* bus/ckpt_cache.c: latest checkpoint per run (see ckpt_cache.h). A linear scan over at most
 * a few hundred entries per ckpt event: checkpoints arrive minutes apart, a hash table would
 * buy nothing. */
#include "bus/ckpt_cache.h"

#include <stdlib.h>
#include <string.h>

#include "bus/utf8.h"

typedef struct {
    msg_ckpt_t ck; /* path and model owned */
    uint64_t seq;  /* update order, for eviction and for the index order */
    int used;
} entry_t;

struct bus_ckpt_cache {
    uint32_t cap, n;
    uint64_t seq;
    entry_t *e;
};

bus_ckpt_cache_t *bus_ckpt_cache_new(uint32_t cap) {
    if (cap == 0 || cap > WIRE_MAX_ITEMS) return NULL;
    bus_ckpt_cache_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->e = calloc(cap, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    c->cap = cap;
    return c;
}

static void entry_clear(entry_t *e) {
    free(e->ck.path);
    free(e->ck.model);
    memset(e, 0, sizeof *e);
}

void bus_ckpt_cache_free(bus_ckpt_cache_t **c) {
    if (!c || !*c) return;
    for (uint32_t i = 0; i < (*c)->cap; i++) entry_clear(&(*c)->e[i]);
    free((*c)->e);
    free(*c);
    *c = NULL;
}

static char *dup_or_null(const char *s, int *oom) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

/* A str the protocol's clients can decode (the cache replays it to every late subscriber). */
static int sendable(const char *s) { return !s || wire_utf8_valid(s, strlen(s)); }

int bus_ckpt_cache_update(bus_ckpt_cache_t *c, const msg_ckpt_t *ck) {
    if (!c || !ck || strnlen(ck->run, WIRE_NAME_LEN) == WIRE_NAME_LEN) return WIRE_ERR_ARG;
    if (!sendable(ck->run) || !sendable(ck->path) || !sendable(ck->model)) return WIRE_ERR_MISTYPED;
    entry_t *slot = NULL, *oldest = NULL, *empty = NULL;
    for (uint32_t i = 0; i < c->cap; i++) {
        entry_t *e = &c->e[i];
        if (!e->used) {
            if (!empty) empty = e;
            continue;
        }
        if (strncmp(e->ck.run, ck->run, WIRE_NAME_LEN) == 0) slot = e;
        if (!oldest || e->seq < oldest->seq) oldest = e;
    }
    if (slot && ck->step < slot->ck.step) return 0;
    int oom = 0;
    char *path = dup_or_null(ck->path, &oom), *model = dup_or_null(ck->model, &oom);
    if (oom) {
        free(path);
        free(model);
        return WIRE_ERR_NOMEM;
    }
    if (!slot) {
        slot = empty ? empty : oldest;
        if (slot == empty) c->n++;
    }
    entry_clear(slot);
    slot->ck = *ck;
    slot->ck.path = path;
    slot->ck.model = model;
    slot->used = 1;
    slot->seq = ++c->seq;
    return 1;
}

uint32_t bus_ckpt_cache_count(const bus_ckpt_cache_t *c) { return c ? c->n : 0; }

static int by_seq(const void *a, const void *b) {
    const entry_t *x = *(entry_t *const *)a, *y = *(entry_t *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int bus_ckpt_cache_frame(const bus_ckpt_cache_t *c, void **frame, size_t *len) {
    if (!c || !frame || !len) return WIRE_ERR_ARG;
    entry_t **order = calloc(c->n ? c->n : 1, sizeof *order);
    msg_ckpt_t *items = calloc(c->n ? c->n : 1, sizeof *items);
    if (!order || !items) {
        free(order);
        free(items);
        return WIRE_ERR_NOMEM;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->cap && k < c->n; i++)
        if (c->e[i].used) order[k++] = &c->e[i];
    qsort(order, k, sizeof *order, by_seq);
    for (uint32_t i = 0; i < k; i++) items[i] = order[i]->ck; /* shallow: encode only reads */
    wire_msg_t m = {.type = MSG_CKPT_INDEX};
    m.u.ckpt_index.n = k;
    m.u.ckpt_index.items = items;
    int rc = wire_event_pack(BUS_WELCOME_TOPIC, &m, frame, len);
    free(order);
    free(items);
    return rc;
}
