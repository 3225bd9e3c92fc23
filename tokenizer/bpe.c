/* tokenizer/bpe.c: see bpe.h. */
#include "tokenizer/bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer/pretok.h"

size_t bpe_heap_threshold = 96;

enum {
    CACHE_SLOTS = 4096, /* power of two */
    CACHE_KEY_MAX = 32,
    CACHE_IDS_MAX = 8,
};

typedef struct {
    uint64_t hash;
    uint8_t len, n_ids; /* len 0: empty slot */
    uint8_t key[CACHE_KEY_MAX];
    uint32_t ids[CACHE_IDS_MAX];
} bpe_cache_entry_t;

typedef struct {
    uint32_t rank, start, end;
} heap_item_t;

struct bpe {
    const bpe_vocab_t *vocab;
    pretok_t *pretok;
    int identity;
    bpe_cache_entry_t *cache;
    /* scratch, grown as needed */
    uint32_t *start, *rank; /* quadratic path: part starts and pair ranks */
    uint32_t *nxt, *prv;    /* heap path: linked list of part starts */
    heap_item_t *heap;
    size_t scratch_cap, heap_cap;
};

int bpe_ids_push(bpe_ids_t *a, uint32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        uint32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return BPE_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return BPE_OK;
}

void bpe_ids_free(bpe_ids_t *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

int bpe_bytes_append(bpe_bytes_t *a, const void *p, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 256;
        while (cap < a->n + n) cap *= 2;
        uint8_t *v = realloc(a->v, cap);
        if (!v) return BPE_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    memcpy(a->v + a->n, p, n);
    a->n += n;
    return BPE_OK;
}

void bpe_bytes_free(bpe_bytes_t *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

int bpe_new(bpe_t **out, const bpe_vocab_t *v, char *err, size_t errlen) {
    *out = NULL;
    bpe_t *b = calloc(1, sizeof *b);
    if (!b) {
        if (err) snprintf(err, errlen, "out of memory");
        return BPE_ENOMEM;
    }
    b->vocab = v;
    b->identity = bpe_vocab_is_identity(v);
    int rc = pretok_new(&b->pretok, bpe_vocab_pattern(v), err, errlen);
    if (rc < 0) {
        free(b);
        return rc;
    }
    b->cache = calloc(CACHE_SLOTS, sizeof *b->cache);
    if (!b->cache) {
        bpe_free(&b);
        if (err) snprintf(err, errlen, "out of memory");
        return BPE_ENOMEM;
    }
    *out = b;
    return BPE_OK;
}

void bpe_free(bpe_t **pb) {
    if (!pb || !*pb) return;
    bpe_t *b = *pb;
    pretok_free(&b->pretok);
    free(b->cache);
    free(b->start);
    free(b->rank);
    free(b->nxt);
    free(b->prv);
    free(b->heap);
    free(b);
    *pb = NULL;
}

const bpe_vocab_t *bpe_vocab(const bpe_t *b) { return b->vocab; }

static int bpe_scratch(bpe_t *b, size_t n) {
    if (n + 2 <= b->scratch_cap) return BPE_OK;
    size_t cap = b->scratch_cap ? b->scratch_cap : 256;
    while (cap < n + 2) cap *= 2;
    uint32_t *p[4] = {b->start, b->rank, b->nxt, b->prv};
    for (int i = 0; i < 4; i++) {
        uint32_t *q = realloc(p[i], cap * sizeof *q);
        if (!q) return BPE_ENOMEM;
        p[i] = q;
        b->start = p[0], b->rank = p[1], b->nxt = p[2], b->prv = p[3];
    }
    b->scratch_cap = cap;
    return BPE_OK;
}

static inline uint32_t span_rank(const bpe_vocab_t *v, const uint8_t *piece, uint32_t a, uint32_t z) {
    return bpe_vocab_rank(v, piece + a, z - a);
}

/* tiktoken's loop: parts[i] = (start, rank of parts i..i+1 joined); m = number of entries,
 * the last one a sentinel at n. */
static int merge_quadratic(bpe_t *b, const uint8_t *piece, uint32_t n, bpe_ids_t *out) {
    const bpe_vocab_t *v = b->vocab;
    uint32_t *st = b->start, *rk = b->rank;
    uint32_t m = n + 1;
    for (uint32_t i = 0; i <= n; i++) {
        st[i] = i;
        rk[i] = i + 2 <= n ? span_rank(v, piece, i, i + 2) : BPE_NO_RANK;
    }
    for (;;) {
        uint32_t best = BPE_NO_RANK, bi = 0;
        for (uint32_t i = 0; i + 1 < m; i++)
            if (rk[i] < best) best = rk[i], bi = i;
        if (best == BPE_NO_RANK) break;
        /* ranks of the pairs that now include the joined part, computed before removal */
        rk[bi] = bi + 3 < m ? span_rank(v, piece, st[bi], st[bi + 3]) : BPE_NO_RANK;
        if (bi > 0) rk[bi - 1] = span_rank(v, piece, st[bi - 1], st[bi + 2]);
        memmove(st + bi + 1, st + bi + 2, (m - bi - 2) * sizeof *st);
        memmove(rk + bi + 1, rk + bi + 2, (m - bi - 2) * sizeof *rk);
        m--;
    }
    for (uint32_t i = 0; i + 1 < m; i++)
        if (bpe_ids_push(out, span_rank(v, piece, st[i], st[i + 1])) < 0) return BPE_ENOMEM;
    return BPE_OK;
}

static inline int heap_less(const heap_item_t *a, const heap_item_t *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->start < b->start);
}

static void heap_push(heap_item_t *h, size_t *n, heap_item_t x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static heap_item_t heap_pop(heap_item_t *h, size_t *n) {
    heap_item_t top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

/* Same choices as merge_quadratic: the lowest-ranked pair, leftmost on ties. nxt[s] is the
 * start of the part after the one starting at s (n at the end), dead[s] marks merged-away
 * starts; a heap entry is current iff its start is alive and the part after the next still
 * starts at its end (parts only grow, so the middle boundary is then the same one). */
static int merge_heap(bpe_t *b, const uint8_t *piece, uint32_t n, bpe_ids_t *out) {
    const bpe_vocab_t *v = b->vocab;
    uint32_t *nxt = b->nxt, *prv = b->prv, *dead = b->rank;
    /* n-1 initial entries, then each of the at most n-1 merges pops one and pushes two */
    if (b->heap_cap < 2 * (size_t)n) {
        heap_item_t *h = realloc(b->heap, 2 * (size_t)n * sizeof *h);
        if (!h) return BPE_ENOMEM;
        b->heap = h;
        b->heap_cap = 2 * (size_t)n;
    }
    heap_item_t *h = b->heap;
    size_t hn = 0;
    for (uint32_t i = 0; i < n; i++) {
        nxt[i] = i + 1;
        prv[i] = i ? i - 1 : BPE_NO_RANK;
        dead[i] = 0;
        if (i + 2 <= n) {
            uint32_t r = span_rank(v, piece, i, i + 2);
            if (r != BPE_NO_RANK) heap_push(h, &hn, (heap_item_t){r, i, i + 2});
        }
    }
    while (hn > 0) {
        heap_item_t it = heap_pop(h, &hn);
        uint32_t s = it.start;
        if (dead[s] || nxt[s] >= n || nxt[nxt[s]] != it.end) continue;
        uint32_t m = nxt[s];
        dead[m] = 1;
        nxt[s] = nxt[m];
        if (nxt[m] < n) prv[nxt[m]] = s;
        if (nxt[s] < n) {
            uint32_t e = nxt[nxt[s]], r = span_rank(v, piece, s, e);
            if (r != BPE_NO_RANK) heap_push(h, &hn, (heap_item_t){r, s, e});
        }
        if (prv[s] != BPE_NO_RANK) {
            uint32_t p = prv[s], r = span_rank(v, piece, p, nxt[s]);
            if (r != BPE_NO_RANK) heap_push(h, &hn, (heap_item_t){r, p, nxt[s]});
        }
    }
    for (uint32_t s = 0; s < n; s = nxt[s])
        if (bpe_ids_push(out, span_rank(v, piece, s, nxt[s])) < 0) return BPE_ENOMEM;
    return BPE_OK;
}

int bpe_encode_piece(bpe_t *b, const uint8_t *piece, size_t n, bpe_ids_t *out) {
    if (n == 0) return BPE_OK;
    if (b->identity) {
        for (size_t i = 0; i < n; i++)
            if (bpe_ids_push(out, piece[i]) < 0) return BPE_ENOMEM;
        return BPE_OK;
    }
    uint32_t r = bpe_vocab_rank(b->vocab, piece, n);
    if (r != BPE_NO_RANK) return bpe_ids_push(out, r);
    if (n > UINT32_MAX - 2) return BPE_EARG;
    bpe_cache_entry_t *ce = NULL;
    uint64_t h = 0;
    if (n <= CACHE_KEY_MAX) {
        h = XXH3_64bits(piece, n);
        ce = &b->cache[h & (CACHE_SLOTS - 1)];
        if (ce->len == n && ce->hash == h && memcmp(ce->key, piece, n) == 0) {
            for (int i = 0; i < ce->n_ids; i++)
                if (bpe_ids_push(out, ce->ids[i]) < 0) return BPE_ENOMEM;
            return BPE_OK;
        }
    }
    if (bpe_scratch(b, n) < 0) return BPE_ENOMEM;
    size_t n0 = out->n;
    int rc = n >= bpe_heap_threshold ? merge_heap(b, piece, (uint32_t)n, out)
                                     : merge_quadratic(b, piece, (uint32_t)n, out);
    if (rc == 0 && ce && out->n - n0 <= CACHE_IDS_MAX) {
        ce->hash = h;
        ce->len = (uint8_t)n;
        ce->n_ids = (uint8_t)(out->n - n0);
        memcpy(ce->key, piece, n);
        memcpy(ce->ids, out->v + n0, ce->n_ids * sizeof *ce->ids);
    }
    return rc;
}

static int encode_ordinary(bpe_t *b, const uint8_t *text, size_t len, bpe_ids_t *out) {
    if (b->identity) return bpe_encode_piece(b, text, len, out);
    pretok_iter_t it;
    pretok_iter_init(&it, text, len);
    size_t s, n;
    int rc;
    while ((rc = pretok_next(b->pretok, &it, &s, &n)) > 0)
        if ((rc = bpe_encode_piece(b, text + s, n, out)) < 0) return rc;
    return rc;
}

int bpe_encode(bpe_t *b, const uint8_t *text, size_t len, int flags, bpe_ids_t *out) {
    int ns = bpe_vocab_n_special(b->vocab);
    if (!(flags & BPE_ALLOW_SPECIAL) || ns == 0) return encode_ordinary(b, text, len, out);
    /* Split at the earliest special-token occurrence (the longest one on a tie). Each
     * special's next occurrence is remembered and searched again only once passed, so a text
     * full of specials stays linear. */
    enum { MAX_FAST = 16 };
    size_t next_fast[MAX_FAST], *next = ns <= MAX_FAST ? next_fast : malloc(ns * sizeof *next);
    if (!next) return BPE_ENOMEM;
    for (int i = 0; i < ns; i++) next[i] = 0;
    int rc = BPE_OK, first = 1;
    size_t pos = 0;
    while (pos < len) {
        size_t best = len, best_n = 0;
        uint32_t best_id = 0;
        for (int i = 0; i < ns; i++) {
            uint32_t id, sn;
            bpe_vocab_special(b->vocab, i, &id);
            const uint8_t *sp = bpe_vocab_token(b->vocab, id, &sn);
            if (first || (next[i] < pos && next[i] != len)) {
                const uint8_t *hit = memmem(text + pos, len - pos, sp, sn);
                next[i] = hit ? (size_t)(hit - text) : len;
            }
            if (next[i] < len && (next[i] < best || (next[i] == best && sn > best_n)))
                best = next[i], best_n = sn, best_id = id;
        }
        first = 0;
        if ((rc = encode_ordinary(b, text + pos, best - pos, out)) < 0) break;
        if (best_n == 0) break;
        if ((rc = bpe_ids_push(out, best_id)) < 0) break;
        pos = best + best_n;
    }
    if (next != next_fast) free(next);
    return rc;
}

int bpe_decode(const bpe_vocab_t *v, const uint32_t *ids, size_t n, bpe_bytes_t *out, size_t *bad_index) {
    for (size_t i = 0; i < n; i++) {
        uint32_t len;
        const uint8_t *t = bpe_vocab_token(v, ids[i], &len);
        if (!t) {
            if (bad_index) *bad_index = i;
            return BPE_EARG;
        }
        if (bpe_bytes_append(out, t, len) < 0) return BPE_ENOMEM;
    }
    return BPE_OK;
}
