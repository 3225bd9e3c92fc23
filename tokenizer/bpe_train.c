/* tokenizer/bpe_train.c: see bpe_train.h. */
#include "tokenizer/bpe_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/progress.h"
#include "tokenizer/pretok.h"

struct bpe_trainer {
    pretok_t *pretok;
    char *pattern;
    bpe_vocab_t *pieces; /* distinct pieces; a piece's "id" is its word index */
    uint64_t *count;     /* by word index: occurrences */
    size_t n_words, cap;
};

typedef struct {
    uint64_t key;   /* left << 32 | right */
    int64_t count;  /* weighted occurrences */
    uint32_t *words, n_words, cap_words;
    uint64_t stamp; /* last step that touched it */
} pair_t;

typedef struct {
    pair_t *v;
    size_t n, cap;
    uint32_t *slots; /* index + 1 into v; 0 empty */
    size_t mask;
} pair_table_t;

typedef struct {
    int64_t count;
    uint32_t left, right;
} cand_t;

static int tr_fail(char *err, size_t errlen, int status, const char *msg) {
    if (err && errlen) snprintf(err, errlen, "%s", msg);
    return status;
}

int bpe_trainer_new(bpe_trainer_t **out, const char *pattern, char *err, size_t errlen) {
    *out = NULL;
    bpe_trainer_t *t = calloc(1, sizeof *t);
    if (!t) return tr_fail(err, errlen, BPE_ENOMEM, "out of memory");
    t->pattern = strdup(pretok_pattern_resolve(pattern));
    int rc = t->pattern ? pretok_new(&t->pretok, t->pattern, err, errlen)
                        : tr_fail(err, errlen, BPE_ENOMEM, "out of memory");
    if (rc == 0) rc = bpe_vocab_new(&t->pieces, err, errlen);
    if (rc < 0) {
        bpe_trainer_free(&t);
        return rc;
    }
    *out = t;
    return BPE_OK;
}

void bpe_trainer_free(bpe_trainer_t **pt) {
    if (!pt || !*pt) return;
    bpe_trainer_t *t = *pt;
    pretok_free(&t->pretok);
    bpe_vocab_free(&t->pieces);
    free(t->pattern);
    free(t->count);
    free(t);
    *pt = NULL;
}

uint64_t bpe_trainer_n_pieces(const bpe_trainer_t *t) { return t->n_words; }

static int train_count_piece(bpe_trainer_t *t, const uint8_t *piece, size_t n, char *err, size_t errlen);

int bpe_trainer_add(bpe_trainer_t *t, const uint8_t *text, size_t len, char *err, size_t errlen) {
    pretok_iter_t it;
    pretok_iter_init(&it, text, len);
    size_t s, n;
    int rc;
    while ((rc = pretok_next(t->pretok, &it, &s, &n)) > 0) {
        if (n > BPE_TRAIN_MAX_PIECE) { /* count it in chunks: see bpe_train.h */
            for (size_t k = 0; k < n; k += BPE_TRAIN_MAX_PIECE) {
                size_t m = n - k < BPE_TRAIN_MAX_PIECE ? n - k : BPE_TRAIN_MAX_PIECE;
                if ((rc = train_count_piece(t, text + s + k, m, err, errlen)) < 0) return rc;
            }
            continue;
        }
        if ((rc = train_count_piece(t, text + s, n, err, errlen)) < 0) return rc;
    }
    if (rc < 0) return tr_fail(err, errlen, rc, "regular-expression match failed");
    return BPE_OK;
}

/* Adds one occurrence of a piece to its count. */
static int train_count_piece(bpe_trainer_t *t, const uint8_t *piece, size_t n, char *err, size_t errlen) {
    uint32_t w = bpe_vocab_rank(t->pieces, piece, n);
    if (w == BPE_NO_RANK) {
        if (t->n_words == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 4096;
            uint64_t *c = realloc(t->count, cap * sizeof *c);
            if (!c) return tr_fail(err, errlen, BPE_ENOMEM, "out of memory");
            t->count = c;
            t->cap = cap;
        }
        w = (uint32_t)t->n_words;
        int rc = bpe_vocab_add(t->pieces, piece, (uint32_t)n, w, err, errlen);
        if (rc < 0) return rc;
        t->count[t->n_words++] = 0;
    }
    t->count[w]++;
    return BPE_OK;
}

/* --- pair table ----------------------------------------------------------------------- */

static inline uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static int pt_grow(pair_table_t *pt) {
    size_t mask = pt->mask ? pt->mask * 2 + 1 : 65535;
    uint32_t *slots = calloc(mask + 1, sizeof *slots);
    if (!slots) return BPE_ENOMEM;
    for (size_t i = 0; i < pt->n; i++) {
        size_t j = pair_hash(pt->v[i].key) & mask;
        while (slots[j]) j = (j + 1) & mask;
        slots[j] = (uint32_t)i + 1;
    }
    free(pt->slots);
    pt->slots = slots;
    pt->mask = mask;
    return BPE_OK;
}

/* The pair's index, adding it when create is set; -1 when absent (or out of memory). */
static long pt_find(pair_table_t *pt, uint32_t a, uint32_t b, int create) {
    uint64_t key = (uint64_t)a << 32 | b;
    if (!pt->slots && (!create || pt_grow(pt) < 0)) return -1;
    size_t j = pair_hash(key) & pt->mask;
    while (pt->slots[j]) {
        if (pt->v[pt->slots[j] - 1].key == key) return (long)pt->slots[j] - 1;
        j = (j + 1) & pt->mask;
    }
    if (!create) return -1;
    if ((pt->n + 1) * 2 > pt->mask + 1) {
        if (pt_grow(pt) < 0) return -1;
        return pt_find(pt, a, b, create);
    }
    if (pt->n == pt->cap) {
        size_t cap = pt->cap ? pt->cap * 2 : 65536;
        pair_t *v = realloc(pt->v, cap * sizeof *v);
        if (!v) return -1;
        pt->v = v;
        pt->cap = cap;
    }
    memset(&pt->v[pt->n], 0, sizeof pt->v[pt->n]);
    pt->v[pt->n].key = key;
    pt->slots[j] = (uint32_t)pt->n + 1;
    return (long)pt->n++;
}

static int pair_add_word(pair_t *p, uint32_t w) {
    if (p->n_words && p->words[p->n_words - 1] == w) return BPE_OK;
    if (p->n_words == p->cap_words) {
        uint32_t cap = p->cap_words ? p->cap_words * 2 : 4;
        uint32_t *v = realloc(p->words, cap * sizeof *v);
        if (!v) return BPE_ENOMEM;
        p->words = v;
        p->cap_words = cap;
    }
    p->words[p->n_words++] = w;
    return BPE_OK;
}

/* --- candidate heap: max count, then min (left, right) --------------------------------- */

static inline int cand_better(const cand_t *x, const cand_t *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->left != y->left) return x->left < y->left;
    return x->right < y->right;
}

typedef struct {
    cand_t *v;
    size_t n, cap;
} cand_heap_t;

static int heap_push(cand_heap_t *h, cand_t c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 65536;
        cand_t *v = realloc(h->v, cap * sizeof *v);
        if (!v) return BPE_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && cand_better(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return BPE_OK;
}

static cand_t heap_pop(cand_heap_t *h) {
    cand_t top = h->v[0], x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && cand_better(&h->v[c + 1], &h->v[c])) c++;
        if (!cand_better(&h->v[c], &x)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    h->v[i] = x;
    return top;
}

/* --- training ------------------------------------------------------------------------- */

typedef struct {
    uint32_t *syms;        /* all words' symbols, word w at syms + off[w] */
    uint64_t *off;
    uint32_t *len;         /* current length of word w (shrinks as merges apply) */
    pair_table_t pairs;
    cand_heap_t heap;
    uint32_t *touched;     /* pairs whose count changed in this step */
    size_t n_touched, cap_touched;
    uint64_t step;
} train_state_t;

static int touch(train_state_t *s, long pi) {
    pair_t *p = &s->pairs.v[pi];
    if (p->stamp == s->step) return BPE_OK;
    p->stamp = s->step;
    if (s->n_touched == s->cap_touched) {
        size_t cap = s->cap_touched ? s->cap_touched * 2 : 1024;
        uint32_t *v = realloc(s->touched, cap * sizeof *v);
        if (!v) return BPE_ENOMEM;
        s->touched = v;
        s->cap_touched = cap;
    }
    s->touched[s->n_touched++] = (uint32_t)pi;
    return BPE_OK;
}

/* Adds delta to every adjacent pair of word w; with index set, records w in the word lists
 * of pairs that contain symbol `fresh` (the only pairs a merge can create). */
static int word_pairs_add(train_state_t *s, uint32_t w, int64_t delta, int index, uint32_t fresh) {
    const uint32_t *x = s->syms + s->off[w];
    for (uint32_t i = 0; i + 1 < s->len[w]; i++) {
        long pi = pt_find(&s->pairs, x[i], x[i + 1], 1);
        if (pi < 0) return BPE_ENOMEM;
        s->pairs.v[pi].count += delta;
        if (s->step && touch(s, pi) < 0) return BPE_ENOMEM;
        if (index && (x[i] == fresh || x[i + 1] == fresh || !s->step) && pair_add_word(&s->pairs.v[pi], w) < 0)
            return BPE_ENOMEM;
    }
    return BPE_OK;
}

/* Replaces each non-overlapping (a, b), left to right, by c; returns whether any was found. */
static int word_merge(train_state_t *s, uint32_t w, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t *x = s->syms + s->off[w], n = s->len[w], o = 0;
    int found = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && x[i] == a && x[i + 1] == b) {
            x[o++] = c;
            i++;
            found = 1;
        } else {
            x[o++] = x[i];
        }
    }
    s->len[w] = o;
    return found;
}

static int word_has(const train_state_t *s, uint32_t w, uint32_t a, uint32_t b) {
    const uint32_t *x = s->syms + s->off[w];
    for (uint32_t i = 0; i + 1 < s->len[w]; i++)
        if (x[i] == a && x[i + 1] == b) return 1;
    return 0;
}

static void state_free(train_state_t *s) {
    for (size_t i = 0; i < s->pairs.n; i++) free(s->pairs.v[i].words);
    free(s->pairs.v);
    free(s->pairs.slots);
    free(s->heap.v);
    free(s->touched);
    free(s->syms);
    free(s->off);
    free(s->len);
}

int bpe_trainer_run(bpe_trainer_t *t, uint32_t vocab_size, int progress, bpe_vocab_t **out, char *err,
                    size_t errlen) {
    *out = NULL;
    if (vocab_size < 257) return tr_fail(err, errlen, BPE_EARG, "vocabulary size must be at least 257");
    train_state_t s = {0};
    bpe_vocab_t *v = NULL;
    uint8_t *merged = malloc(2 * BPE_TRAIN_MAX_PIECE);
    int rc = merged ? bpe_vocab_new(&v, err, errlen) : BPE_ENOMEM;
    for (uint32_t c = 0; rc == 0 && c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        rc = bpe_vocab_add(v, &byte, 1, c, err, errlen);
    }
    if (rc == 0 && (bpe_vocab_set_pattern(v, t->pattern) < 0 || bpe_vocab_set_name(v, "bpe") < 0)) rc = BPE_ENOMEM;
    uint64_t total = 0;
    for (size_t w = 0; w < t->n_words; w++) {
        uint32_t n;
        bpe_vocab_token(t->pieces, (uint32_t)w, &n);
        total += n;
    }
    s.syms = malloc((total + 1) * sizeof *s.syms);
    s.off = malloc((t->n_words + 1) * sizeof *s.off);
    s.len = malloc((t->n_words + 1) * sizeof *s.len);
    if (rc == 0 && (!s.syms || !s.off || !s.len)) rc = BPE_ENOMEM;
    if (rc < 0) goto done;
    total = 0;
    for (size_t w = 0; w < t->n_words; w++) {
        uint32_t n;
        const uint8_t *p = bpe_vocab_token(t->pieces, (uint32_t)w, &n);
        s.off[w] = total;
        s.len[w] = n;
        for (uint32_t i = 0; i < n; i++) s.syms[total++] = p[i];
        if ((rc = word_pairs_add(&s, (uint32_t)w, (int64_t)t->count[w], 1, 0)) < 0) goto done;
    }
    for (size_t i = 0; i < s.pairs.n; i++) {
        pair_t *p = &s.pairs.v[i];
        if (p->count >= 2 && (rc = heap_push(&s.heap, (cand_t){p->count, (uint32_t)(p->key >> 32), (uint32_t)p->key})) < 0)
            goto done;
    }
    progress_t pr;
    uint32_t target = vocab_size - 1; /* the last id is <|endoftext|> */
    progress_init(&pr, "train", "merges", target - 256);
    if (!progress) pr.enabled = 0;
    uint32_t next_id = 256;
    while (bpe_vocab_n_ordinary(v) < target && s.heap.n > 0) {
        cand_t best = heap_pop(&s.heap);
        long bi = pt_find(&s.pairs, best.left, best.right, 0);
        if (bi < 0 || s.pairs.v[bi].count != best.count) continue; /* stale entry */
        uint32_t la, lb;
        const uint8_t *ta = bpe_vocab_token(v, best.left, &la), *tb = bpe_vocab_token(v, best.right, &lb);
        memcpy(merged, ta, la);
        memcpy(merged + la, tb, lb);
        /* The same bytes can arise from different splits ("a"+"bc", "ab"+"c"): reuse the id. */
        uint32_t c = bpe_vocab_rank(v, merged, la + lb);
        if (c == BPE_NO_RANK) {
            c = next_id++;
            if ((rc = bpe_vocab_add(v, merged, la + lb, c, err, errlen)) < 0) goto done;
        }
        s.step++;
        s.n_touched = 0;
        /* The word list is stable while we walk it: new pairs all contain c, never (a, b). */
        for (uint32_t k = 0; k < s.pairs.v[bi].n_words; k++) {
            uint32_t w = s.pairs.v[bi].words[k];
            if (!word_has(&s, w, best.left, best.right)) continue;
            int64_t cnt = (int64_t)t->count[w];
            if ((rc = word_pairs_add(&s, w, -cnt, 0, c)) < 0) goto done;
            word_merge(&s, w, best.left, best.right, c);
            if ((rc = word_pairs_add(&s, w, cnt, 1, c)) < 0) goto done;
        }
        pair_t *bp = &s.pairs.v[bi];
        free(bp->words);
        bp->words = NULL;
        bp->n_words = bp->cap_words = 0;
        for (size_t i = 0; i < s.n_touched; i++) {
            pair_t *p = &s.pairs.v[s.touched[i]];
            if (p->count >= 2 &&
                (rc = heap_push(&s.heap, (cand_t){p->count, (uint32_t)(p->key >> 32), (uint32_t)p->key})) < 0)
                goto done;
        }
        progress_update(&pr, bpe_vocab_n_ordinary(v) - 256);
    }
    progress_finish(&pr, bpe_vocab_n_ordinary(v) - 256);
    rc = bpe_vocab_add_special(v, BPE_EOT_TEXT, next_id, err, errlen);
done:
    if (rc == BPE_ENOMEM) tr_fail(err, errlen, rc, "out of memory");
    state_free(&s);
    free(merged);
    if (rc < 0) bpe_vocab_free(&v);
    *out = v;
    return rc;
}
