/* loader/batch.c: the batch function (loader/batch.h).
 *
 * Cost model: document lengths are read once at open; a (seed, epoch, split) permutation and
 * its prefix sums are built once (O(n_docs)) and kept in a small LRU cache, because a client's
 * window of requests can straddle an epoch boundary and several trainers may share a loader.
 * A batch then costs one binary search per row plus one LMDB lookup and copy per document
 * piece, with no per-token work beyond the decode and the vocabulary check. */
#include "common/errmsg.h"
#include "loader/batch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "bus/wire.h"

typedef struct {
    dataset_t *ds;       /* not owned when it aliases the train split's handle */
    uint64_t first, n;   /* documents [first, first+n) of ds */
    const uint32_t *len; /* len[i]: length of document first+i */
    uint64_t n_tokens, n_bytes;
} split_t;

typedef struct {
    int used;
    uint64_t seed, epoch, stamp;
    int split;
    uint32_t *perm;    /* split-local document indices in epoch order */
    uint64_t *prefix;  /* prefix[i] = sum over j<i of (len[perm[j]] + 1); n+1 entries */
} epoch_cache_t;

struct loader_src {
    dataset_t *ds[2];   /* [1] only with a separate val directory */
    uint32_t *lens[2];
    split_t split[2];   /* WIRE_TRAIN, WIRE_VAL */
    dataset_meta_t meta;
    epoch_cache_t cache[LOADER_EPOCH_CACHE];
    uint64_t clock;
};

const char *loader_strerror(int status) {
    switch (status) {
    case LOADER_OK: return "ok";
    case LOADER_EMALFORMED: return "malformed request";
    case LOADER_ETYPE: return "message type not served by a loader";
    case LOADER_EPARAM: return "invalid request parameters";
    case LOADER_ERANGE: return "epoch or step out of range";
    case LOADER_EEMPTY: return "split holds no full batch";
    case LOADER_EDATA: return "dataset damaged";
    case LOADER_ENOMEM: return "out of memory";
    case LOADER_EIO: return "i/o error";
    default: return "unknown loader status";
    }
}

static int lens_read(dataset_t *ds, const char *path, uint32_t **out, char *err, size_t errlen) {
    uint64_t n = dataset_meta(ds)->n_docs;
    uint32_t *len = malloc((n ? n : 1) * sizeof *len);
    if (!len) return LOADER_ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        int rc = dataset_doc_len(ds, i, &len[i]);
        if (rc) {
            err_fail(err, errlen, 0, "dataset %s: document %llu: %s", path, (unsigned long long)i, dataset_doc_error(ds, rc));
            free(len);
            return LOADER_EDATA;
        }
    }
    *out = len;
    return LOADER_OK;
}

static void split_set(split_t *sp, dataset_t *ds, const uint32_t *lens, uint64_t first, uint64_t n,
                      const dataset_meta_t *m) {
    sp->ds = ds;
    sp->first = first;
    sp->n = n;
    sp->len = lens + first;
    sp->n_tokens = 0;
    for (uint64_t i = 0; i < n; i++) sp->n_tokens += sp->len[i];
    sp->n_bytes = m->n_tokens ? (uint64_t)((double)m->n_bytes * sp->n_tokens / m->n_tokens + 0.5) : 0;
}

int loader_src_open(loader_src_t **out, const char *path, const char *val_path, uint64_t val_docs, char *err,
                    size_t errlen) {
    if (!out || !path) return LOADER_EPARAM;
    *out = NULL;
    loader_src_t *s = calloc(1, sizeof *s);
    if (!s) return LOADER_ENOMEM;
    int rc;
    if (dataset_open(&s->ds[0], path, err, errlen)) { rc = LOADER_EIO; goto fail; }
    s->meta = *dataset_meta(s->ds[0]);
    if (s->meta.n_docs >= UINT32_MAX) {
        err_fail(err, errlen, 0, "dataset %s: %llu documents, more than the loader indexes", path,
               (unsigned long long)s->meta.n_docs);
        rc = LOADER_EPARAM;
        goto fail;
    }
    if ((rc = lens_read(s->ds[0], path, &s->lens[0], err, errlen))) goto fail;
    if (val_path) {
        if (dataset_open(&s->ds[1], val_path, err, errlen)) { rc = LOADER_EIO; goto fail; }
        const dataset_meta_t *vm = dataset_meta(s->ds[1]);
        if (vm->vocab_size != s->meta.vocab_size || vm->eot_id != s->meta.eot_id ||
            strcmp(vm->tokenizer_hash, s->meta.tokenizer_hash) != 0 || vm->n_docs >= UINT32_MAX) {
            err_fail(err, errlen, 0, "dataset %s: vocabulary differs from %s (vocab_size/eot_id/tokenizer_hash)",
                   val_path, path);
            rc = LOADER_EPARAM;
            goto fail;
        }
        if ((rc = lens_read(s->ds[1], val_path, &s->lens[1], err, errlen))) goto fail;
        split_set(&s->split[WIRE_TRAIN], s->ds[0], s->lens[0], 0, s->meta.n_docs, &s->meta);
        split_set(&s->split[WIRE_VAL], s->ds[1], s->lens[1], 0, vm->n_docs, vm);
    } else {
        if (val_docs > s->meta.n_docs) {
            err_fail(err, errlen, 0, "dataset %s: --val-docs %llu exceeds its %llu documents", path,
                   (unsigned long long)val_docs, (unsigned long long)s->meta.n_docs);
            rc = LOADER_EPARAM;
            goto fail;
        }
        uint64_t n_train = s->meta.n_docs - val_docs;
        split_set(&s->split[WIRE_TRAIN], s->ds[0], s->lens[0], 0, n_train, &s->meta);
        split_set(&s->split[WIRE_VAL], s->ds[0], s->lens[0], n_train, val_docs, &s->meta);
    }
    *out = s;
    return LOADER_OK;
fail:
    loader_src_close(&s);
    return rc;
}

void loader_src_close(loader_src_t **ps) {
    if (!ps || !*ps) return;
    loader_src_t *s = *ps;
    for (int i = 0; i < LOADER_EPOCH_CACHE; i++) {
        free(s->cache[i].perm);
        free(s->cache[i].prefix);
    }
    for (int i = 0; i < 2; i++) {
        free(s->lens[i]);
        dataset_close(&s->ds[i]);
    }
    free(s);
    *ps = NULL;
}

int loader_src_shrunk(const loader_src_t *s) { return s && (dataset_shrunk(s->ds[0]) || dataset_shrunk(s->ds[1])); }

const dataset_meta_t *loader_src_meta(const loader_src_t *s) { return s ? &s->meta : NULL; }

int loader_src_split_info(const loader_src_t *s, int split, loader_split_info_t *out) {
    if (!s || !out || (split != WIRE_TRAIN && split != WIRE_VAL)) return LOADER_EPARAM;
    out->n_docs = s->split[split].n;
    out->n_tokens = s->split[split].n_tokens;
    out->n_bytes = s->split[split].n_bytes;
    return LOADER_OK;
}

int loader_steps_per_epoch(const loader_src_t *s, const loader_params_t *p, uint64_t *steps, char *err,
                           size_t errlen) {
    if (steps) *steps = 0;
    if (!s || !p) return LOADER_EPARAM;
    if (p->layout != WIRE_PACK && p->layout != WIRE_PAD) {
        err_fail(err, errlen, 0, "layout %u is neither pack (0) nor pad (1)", p->layout);
        return LOADER_EPARAM;
    }
    if (p->split != WIRE_TRAIN && p->split != WIRE_VAL) {
        err_fail(err, errlen, 0, "split %u is neither train (0) nor val (1)", p->split);
        return LOADER_EPARAM;
    }
    if (p->B == 0 || p->B > LOADER_MAX_B || p->T == 0 || p->T > LOADER_MAX_T ||
        (uint64_t)p->B * (p->T + 1) > LOADER_MAX_BATCH_TOKENS) {
        err_fail(err, errlen, 0, "B=%u T=%u: need 1 <= B <= %u, 1 <= T <= %u, B*(T+1) <= %u", p->B, p->T, LOADER_MAX_B,
               LOADER_MAX_T, LOADER_MAX_BATCH_TOKENS);
        return LOADER_EPARAM;
    }
    if (p->world == 0 || p->rank >= p->world) {
        err_fail(err, errlen, 0, "rank %u world %u: need rank < world", p->rank, p->world);
        return LOADER_EPARAM;
    }
    if (p->epoch >= LOADER_MAX_EPOCH) {
        err_fail(err, errlen, 0, "epoch %llu: epochs are below %llu", (unsigned long long)p->epoch,
               (unsigned long long)LOADER_MAX_EPOCH);
        return LOADER_ERANGE;
    }
    const split_t *sp = &s->split[p->split];
    uint64_t per_step = (uint64_t)p->B * p->world, n;
    if (p->layout == WIRE_PACK) {
        uint64_t rows = (sp->n_tokens + sp->n) / ((uint64_t)p->T + 1);
        n = rows / per_step;
    } else {
        n = sp->n / per_step;
    }
    if (steps) *steps = n;
    if (n == 0) {
        err_fail(err, errlen, 0, "split %s (%llu docs, %llu tokens) holds no full batch of B=%u T=%u world=%u",
               p->split == WIRE_VAL ? "val" : "train", (unsigned long long)sp->n,
               (unsigned long long)sp->n_tokens, p->B, p->T, p->world);
        return LOADER_EEMPTY;
    }
    return LOADER_OK;
}

/* The (seed, epoch, split) permutation and prefix sums, built on a cache miss. */
static epoch_cache_t *epoch_get(loader_src_t *s, uint64_t seed, uint64_t epoch, int split) {
    epoch_cache_t *victim = &s->cache[0];
    for (int i = 0; i < LOADER_EPOCH_CACHE; i++) {
        epoch_cache_t *c = &s->cache[i];
        if (c->used && c->seed == seed && c->epoch == epoch && c->split == split) {
            c->stamp = ++s->clock;
            return c;
        }
        if (!c->used || (victim->used && c->stamp < victim->stamp)) victim = c;
    }
    const split_t *sp = &s->split[split];
    uint64_t n = sp->n;
    victim->used = 0; /* until rebuilt: a failed realloc must not leave a half-valid entry */
    uint32_t *perm = realloc(victim->perm, (n ? n : 1) * sizeof *perm);
    if (!perm) return NULL;
    victim->perm = perm;
    uint64_t *prefix = realloc(victim->prefix, (n + 1) * sizeof *prefix);
    if (!prefix) return NULL;
    victim->prefix = prefix;
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    rng_t r;
    rng_seed2(&r, seed, epoch);
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = rng_below(&r, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    prefix[0] = 0;
    for (uint64_t i = 0; i < n; i++) prefix[i + 1] = prefix[i] + sp->len[perm[i]] + 1;
    victim->used = 1;
    victim->seed = seed;
    victim->epoch = epoch;
    victim->split = split;
    victim->stamp = ++s->clock;
    return victim;
}

/* Index i of the last prefix entry <= pos (prefix[0] = 0 <= pos < prefix[n]). */
static uint64_t prefix_find(const uint64_t *prefix, uint64_t n, uint64_t pos) {
    uint64_t lo = 0, hi = n; /* invariant: prefix[lo] <= pos < prefix[hi] */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (prefix[mid] <= pos) lo = mid;
        else hi = mid;
    }
    return lo;
}

static int piece_copy(const split_t *sp, uint64_t local, uint32_t from, uint32_t *out, uint32_t n,
                      uint32_t vocab, char *err, size_t errlen) {
    uint32_t got = 0;
    int rc = dataset_doc_read_range(sp->ds, sp->first + local, from, out, n, &got, NULL);
    if (rc || got != n) {
        err_fail(err, errlen, 0, "document %llu: %s", (unsigned long long)(sp->first + local),
               rc ? dataset_doc_error(sp->ds, rc) : "shorter than its recorded length");
        return LOADER_EDATA;
    }
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) bad |= out[i] >= vocab; /* branch-free: vectorises */
    if (bad) {
        err_fail(err, errlen, 0, "document %llu: token id >= vocab_size %u", (unsigned long long)(sp->first + local),
               vocab);
        return LOADER_EDATA;
    }
    return LOADER_OK;
}

static int rows_pack(loader_src_t *s, const split_t *sp, const epoch_cache_t *c, uint64_t row0,
                     const loader_params_t *p, uint32_t *tokens, char *err, size_t errlen) {
    const uint64_t W = (uint64_t)p->T + 1;
    for (uint32_t b = 0; b < p->B; b++) {
        uint32_t *out = tokens + (size_t)b * W;
        uint64_t pos = (row0 + b) * W, end = pos + W;
        uint64_t i = prefix_find(c->prefix, sp->n, pos);
        while (pos < end) {
            uint64_t doc = c->perm[i];
            uint64_t off = pos - c->prefix[i]; /* offset within "document + eot" */
            uint32_t len = sp->len[doc];
            if (off < len) {
                uint64_t take = len - off < end - pos ? len - off : end - pos;
                int rc = piece_copy(sp, doc, (uint32_t)off, out, (uint32_t)take, s->meta.vocab_size, err, errlen);
                if (rc) return rc;
                out += take;
                pos += take;
            }
            if (pos < end) { /* the eot after this document */
                *out++ = s->meta.eot_id;
                pos++;
                i++;
            }
        }
    }
    return LOADER_OK;
}

static int rows_pad(loader_src_t *s, const split_t *sp, const epoch_cache_t *c, uint64_t row0,
                    const loader_params_t *p, uint32_t *tokens, uint8_t *mask, char *err, size_t errlen) {
    const uint32_t W = p->T + 1;
    for (uint32_t b = 0; b < p->B; b++) {
        uint32_t *out = tokens + (size_t)b * W;
        uint64_t doc = c->perm[row0 + b];
        uint32_t len = sp->len[doc], take = len < W ? len : W;
        int rc = piece_copy(sp, doc, 0, out, take, s->meta.vocab_size, err, errlen);
        if (rc) return rc;
        for (uint32_t t = take; t < W; t++) out[t] = s->meta.eot_id;
        if (mask) {
            uint8_t *m = mask + (size_t)b * p->T;
            for (uint32_t t = 0; t < p->T; t++) m[t] = (uint64_t)t + 1 <= len;
        }
    }
    return LOADER_OK;
}

int loader_batch_make(loader_src_t *s, const loader_params_t *p, uint32_t *tokens, uint8_t *mask,
                      uint64_t *steps_per_epoch, char *err, size_t errlen) {
    uint64_t steps;
    int rc = loader_steps_per_epoch(s, p, &steps, err, errlen);
    if (steps_per_epoch) *steps_per_epoch = steps;
    if (rc) return rc;
    if (!tokens) return LOADER_EPARAM;
    if (p->step >= steps) {
        err_fail(err, errlen, 0, "step %llu out of range: the epoch has %llu steps", (unsigned long long)p->step,
               (unsigned long long)steps);
        return LOADER_ERANGE;
    }
    epoch_cache_t *c = epoch_get(s, p->seed, p->epoch, p->split);
    if (!c) {
        err_fail(err, errlen, 0, "out of memory building the epoch permutation");
        return LOADER_ENOMEM;
    }
    uint64_t row0 = (p->step * p->world + p->rank) * (uint64_t)p->B;
    const split_t *sp = &s->split[p->split];
    if (p->layout == WIRE_PACK) return rows_pack(s, sp, c, row0, p, tokens, err, errlen);
    return rows_pad(s, sp, c, row0, p, tokens, mask, err, errlen);
}
