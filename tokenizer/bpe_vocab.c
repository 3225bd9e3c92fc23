/* tokenizer/bpe_vocab.c: see bpe_vocab.h.
 *
 * Tokens live in one byte arena indexed by id; an open-addressing hash table (linear probing,
 * power-of-two size, load <= 1/2) maps bytes -> id. Each slot holds the token's length and
 * its first 8 bytes, so a lookup of a token of <= 8 bytes (most English pieces) is decided
 * inside the slot without touching the arena: rank lookups are the encoder's hot path. */
#include "common/errmsg.h"
#include "tokenizer/bpe_vocab.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { KIND_NONE = 0, KIND_ORDINARY = 1, KIND_SPECIAL = 2 };

typedef struct {
    uint64_t prefix; /* first min(len, 8) bytes, zero-padded */
    uint32_t len;
    uint32_t id1;    /* id + 1; 0 marks an empty slot */
} vocab_slot_t;

struct bpe_vocab {
    uint8_t *arena;
    size_t arena_len, arena_cap;
    uint64_t *off;  /* by id: offset of the token's bytes in arena */
    uint32_t *len;  /* by id */
    uint8_t *kind;  /* by id: KIND_* */
    uint32_t ids_cap, size; /* size: largest id + 1 */
    uint32_t n_ordinary;
    int n_special;
    uint32_t *special_ids; /* n_special ids, ascending */
    vocab_slot_t *slots;
    uint32_t slot_mask; /* slots has slot_mask + 1 entries */
    int slot_shift;     /* 64 - log2(slot_mask + 1): index = hash >> slot_shift */
    char *pattern, *name;
};

const char *bpe_strerror(int status) {
    switch (status) {
    case BPE_OK: return "ok";
    case BPE_ENOENT: return "not found";
    case BPE_EFORMAT: return "malformed vocabulary";
    case BPE_ENOMEM: return "out of memory";
    case BPE_EARG: return "bad argument";
    case BPE_EIO: return "i/o error";
    case BPE_EREGEX: return "regular expression error";
    default: return "unknown error";
    }
}

int bpe_vocab_new(bpe_vocab_t **out, char *err, size_t errlen) {
    bpe_vocab_t *v = calloc(1, sizeof *v);
    if (!v) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    v->slot_mask = 1023;
    v->slot_shift = 64 - 10;
    v->slots = calloc(v->slot_mask + 1, sizeof *v->slots);
    v->pattern = strdup("");
    v->name = strdup("bpe");
    if (!v->slots || !v->pattern || !v->name) {
        bpe_vocab_free(&v);
        return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    }
    *out = v;
    return BPE_OK;
}

void bpe_vocab_free(bpe_vocab_t **pv) {
    if (!pv || !*pv) return;
    bpe_vocab_t *v = *pv;
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->kind);
    free(v->slots);
    free(v->special_ids);
    free(v->pattern);
    free(v->name);
    free(v);
    *pv = NULL;
}

static inline uint64_t vocab_prefix(const uint8_t *b, size_t n) {
    if (n >= 8) {
        uint64_t x;
        memcpy(&x, b, 8);
        return x;
    }
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) x |= (uint64_t)b[i] << (8 * i);
    return x;
}

/* Multiplicative hashing of the prefix (Fibonacci constant); the index takes the high bits,
 * the well-mixed ones. Longer tokens fold in XXH3 of their tail. */
static inline uint64_t vocab_hash(uint64_t prefix, const uint8_t *b, size_t n) {
    uint64_t h = (prefix ^ ((uint64_t)n << 59)) * 0x9e3779b97f4a7c15ULL;
    if (n > 8) h ^= XXH3_64bits(b + 8, n - 8) * 0xc2b2ae3d27d4eb4fULL;
    return h ^ (h >> 29);
}

uint32_t bpe_vocab_rank(const bpe_vocab_t *v, const uint8_t *bytes, size_t n) {
    uint64_t prefix = vocab_prefix(bytes, n);
    uint64_t h = vocab_hash(prefix, bytes, n);
    for (uint32_t i = (uint32_t)(h >> v->slot_shift);; i = (i + 1) & v->slot_mask) {
        const vocab_slot_t *s = &v->slots[i];
        if (!s->id1) return BPE_NO_RANK;
        if (s->len == n && s->prefix == prefix) {
            uint32_t id = s->id1 - 1;
            if (n <= 8 || memcmp(v->arena + v->off[id] + 8, bytes + 8, n - 8) == 0) return id;
        }
    }
}

static void vocab_slot_insert(vocab_slot_t *slots, uint32_t mask, int shift, const uint8_t *b, size_t n,
                              uint32_t id) {
    uint64_t prefix = vocab_prefix(b, n);
    uint32_t i = (uint32_t)(vocab_hash(prefix, b, n) >> shift);
    while (slots[i].id1) i = (i + 1) & mask;
    slots[i].prefix = prefix;
    slots[i].len = (uint32_t)n;
    slots[i].id1 = id + 1;
}

static int vocab_grow_table(bpe_vocab_t *v) {
    uint32_t mask = v->slot_mask * 2 + 1;
    int shift = v->slot_shift - 1;
    vocab_slot_t *slots = calloc((size_t)mask + 1, sizeof *slots);
    if (!slots) return BPE_ENOMEM;
    for (uint32_t id = 0; id < v->size; id++)
        if (v->kind[id] == KIND_ORDINARY) vocab_slot_insert(slots, mask, shift, v->arena + v->off[id], v->len[id], id);
    free(v->slots);
    v->slots = slots;
    v->slot_mask = mask;
    v->slot_shift = shift;
    return BPE_OK;
}

/* Makes room for id and for n more arena bytes. */
static int vocab_reserve(bpe_vocab_t *v, uint32_t id, size_t n) {
    if (id >= v->ids_cap) {
        uint32_t cap = v->ids_cap ? v->ids_cap : 512;
        while (cap <= id) cap *= 2;
        uint64_t *off = realloc(v->off, cap * sizeof *off);
        if (!off) return BPE_ENOMEM;
        v->off = off;
        uint32_t *len = realloc(v->len, cap * sizeof *len);
        if (!len) return BPE_ENOMEM;
        v->len = len;
        uint8_t *kind = realloc(v->kind, cap);
        if (!kind) return BPE_ENOMEM;
        v->kind = kind;
        memset(v->kind + v->ids_cap, 0, cap - v->ids_cap);
        v->ids_cap = cap;
    }
    if (v->arena_len + n > v->arena_cap) {
        size_t cap = v->arena_cap ? v->arena_cap : 4096;
        while (cap < v->arena_len + n) cap *= 2;
        uint8_t *a = realloc(v->arena, cap);
        if (!a) return BPE_ENOMEM;
        v->arena = a;
        v->arena_cap = cap;
    }
    return BPE_OK;
}

static void vocab_store(bpe_vocab_t *v, const uint8_t *bytes, uint32_t n, uint32_t id, int kind) {
    memcpy(v->arena + v->arena_len, bytes, n);
    v->off[id] = v->arena_len;
    v->len[id] = n;
    v->kind[id] = (uint8_t)kind;
    v->arena_len += n;
    if (id + 1 > v->size) v->size = id + 1;
}

int bpe_vocab_add(bpe_vocab_t *v, const uint8_t *bytes, uint32_t n, uint32_t id, char *err,
                  size_t errlen) {
    if (!v || !bytes || n == 0 || id == BPE_NO_RANK)
        return err_fail(err, errlen, BPE_EARG, "empty token or bad id %u", id);
    if (id < v->size && v->kind[id] != KIND_NONE)
        return err_fail(err, errlen, BPE_EFORMAT, "duplicate id %u", id);
    if (bpe_vocab_rank(v, bytes, n) != BPE_NO_RANK)
        return err_fail(err, errlen, BPE_EFORMAT, "duplicate token for id %u", id);
    if (vocab_reserve(v, id, n) < 0) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    if ((uint64_t)(v->n_ordinary + 1) * 2 > v->slot_mask + 1 && vocab_grow_table(v) < 0)
        return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    vocab_store(v, bytes, n, id, KIND_ORDINARY);
    vocab_slot_insert(v->slots, v->slot_mask, v->slot_shift, bytes, n, id);
    v->n_ordinary++;
    return BPE_OK;
}

int bpe_vocab_add_special(bpe_vocab_t *v, const char *text, uint32_t id, char *err, size_t errlen) {
    size_t n = text ? strlen(text) : 0;
    if (!v || n == 0 || n > UINT32_MAX || id == BPE_NO_RANK)
        return err_fail(err, errlen, BPE_EARG, "empty special token or bad id");
    if (id < v->size && v->kind[id] != KIND_NONE)
        return err_fail(err, errlen, BPE_EFORMAT, "duplicate id %u (special %s)", id, text);
    if (bpe_vocab_special_id(v, text) != BPE_NO_RANK)
        return err_fail(err, errlen, BPE_EFORMAT, "duplicate special token %s", text);
    /* stored with its NUL so bpe_vocab_special can hand out a C string */
    if (vocab_reserve(v, id, n + 1) < 0) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    uint32_t *ids = realloc(v->special_ids, (v->n_special + 1) * sizeof *ids);
    if (!ids) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    v->special_ids = ids;
    vocab_store(v, (const uint8_t *)text, (uint32_t)n + 1, id, KIND_SPECIAL);
    v->len[id] = (uint32_t)n;
    int k = v->n_special++;
    while (k > 0 && ids[k - 1] > id) ids[k] = ids[k - 1], k--;
    ids[k] = id;
    return BPE_OK;
}

static int vocab_set_str(char **dst, const char *s) {
    char *c = strdup(s ? s : "");
    if (!c) return BPE_ENOMEM;
    free(*dst);
    *dst = c;
    return BPE_OK;
}
int bpe_vocab_set_pattern(bpe_vocab_t *v, const char *p) { return vocab_set_str(&v->pattern, p); }
int bpe_vocab_set_name(bpe_vocab_t *v, const char *n) { return vocab_set_str(&v->name, n); }
const char *bpe_vocab_pattern(const bpe_vocab_t *v) { return v->pattern; }
const char *bpe_vocab_name(const bpe_vocab_t *v) { return v->name; }

const uint8_t *bpe_vocab_token(const bpe_vocab_t *v, uint32_t id, uint32_t *len) {
    if (id >= v->size || v->kind[id] == KIND_NONE) return NULL;
    if (len) *len = v->len[id];
    return v->arena + v->off[id];
}

int bpe_vocab_is_special(const bpe_vocab_t *v, uint32_t id) {
    return id < v->size && v->kind[id] == KIND_SPECIAL;
}
uint32_t bpe_vocab_size(const bpe_vocab_t *v) { return v->size; }
uint32_t bpe_vocab_n_ordinary(const bpe_vocab_t *v) { return v->n_ordinary; }
int bpe_vocab_n_special(const bpe_vocab_t *v) { return v->n_special; }

const char *bpe_vocab_special(const bpe_vocab_t *v, int i, uint32_t *id) {
    if (i < 0 || i >= v->n_special) return NULL;
    uint32_t k = v->special_ids[i];
    if (id) *id = k;
    return (const char *)(v->arena + v->off[k]);
}

uint32_t bpe_vocab_special_id(const bpe_vocab_t *v, const char *text) {
    size_t n = strlen(text);
    for (int i = 0; i < v->n_special; i++) {
        uint32_t id = 0;
        bpe_vocab_special(v, i, &id);
        if (v->len[id] == n && memcmp(v->arena + v->off[id], text, n) == 0) return id;
    }
    return BPE_NO_RANK;
}

int bpe_vocab_is_identity(const bpe_vocab_t *v) {
    if (v->n_ordinary != 256) return 0;
    for (uint32_t b = 0; b < 256; b++)
        if (v->kind[b] != KIND_ORDINARY || v->len[b] != 1 || v->arena[v->off[b]] != b) return 0;
    return 1;
}

int bpe_vocab_check(const bpe_vocab_t *v, char *err, size_t errlen) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (bpe_vocab_rank(v, &c, 1) == BPE_NO_RANK)
            return err_fail(err, errlen, BPE_EFORMAT, "byte 0x%02x has no token", b);
    }
    return BPE_OK;
}

static void hash_u32(XXH3_state_t *st, uint32_t x) {
    uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    XXH3_128bits_update(st, b, 4);
}

void bpe_vocab_hash(const bpe_vocab_t *v, char out[33]) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) { /* cannot happen short of OOM; an obviously-invalid digest beats a crash */
        snprintf(out, 33, "%032d", 0);
        return;
    }
    XXH3_128bits_reset(st);
    static const char magic[] = "ftbpe-canonical-1";
    XXH3_128bits_update(st, magic, sizeof magic); /* includes the NUL */
    hash_u32(st, (uint32_t)strlen(v->pattern));
    XXH3_128bits_update(st, v->pattern, strlen(v->pattern));
    for (int kind = KIND_ORDINARY; kind <= KIND_SPECIAL; kind++) {
        hash_u32(st, kind == KIND_ORDINARY ? v->n_ordinary : (uint32_t)v->n_special);
        for (uint32_t id = 0; id < v->size; id++) {
            if (v->kind[id] != kind) continue;
            hash_u32(st, id);
            hash_u32(st, v->len[id]);
            XXH3_128bits_update(st, v->arena + v->off[id], v->len[id]);
        }
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}
