/* loader/mkdata.c: random datasets (loader/mkdata.h). */
#include "loader/mkdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "loader/batch.h"
#include "tokenizer/dataset.h"

uint32_t loader_mkdata_doc(const loader_mkdata_t *c, uint64_t i, uint32_t *out) {
    rng_t r;
    rng_seed2(&r, c->seed, i);
    uint32_t span = c->max_len >= c->min_len ? c->max_len - c->min_len + 1 : 1;
    uint32_t n = c->min_len + (uint32_t)rng_below(&r, span);
    if (out)
        for (uint32_t j = 0; j < n; j++) out[j] = 1 + (uint32_t)rng_below(&r, c->vocab_size - 1);
    return n;
}

int loader_mkdata_write(const loader_mkdata_t *c, const char *path, char *err, size_t errlen) {
    if (!c || !path || c->vocab_size < 2 || c->max_len < c->min_len) {
        snprintf(err, errlen, "mkdata: need vocab_size >= 2 and min_len <= max_len");
        return LOADER_EPARAM;
    }
    dataset_meta_t m;
    memset(&m, 0, sizeof m);
    m.vocab_size = c->vocab_size;
    m.eot_id = 0;
    snprintf(m.tokenizer, sizeof m.tokenizer, "random");
    snprintf(m.tokenizer_hash, sizeof m.tokenizer_hash, "random-%u", c->vocab_size);
    snprintf(m.source, sizeof m.source, "loader_mkdata seed=%llu docs=%llu len=%u..%u",
             (unsigned long long)c->seed, (unsigned long long)c->n_docs, c->min_len, c->max_len);
    dataset_writer_t *w = NULL;
    if (dataset_writer_open(&w, path, &m, 1, err, errlen)) return LOADER_EIO;
    uint32_t *buf = malloc(((size_t)c->max_len + 1) * sizeof *buf);
    if (!buf) { dataset_writer_abort(&w); return LOADER_ENOMEM; }
    for (uint64_t i = 0; i < c->n_docs; i++) {
        uint32_t n = loader_mkdata_doc(c, i, buf);
        /* n_bytes: pretend two bytes of text per token, so bits-per-byte code has a number */
        if (dataset_writer_add(w, buf, n, 2ull * n, err, errlen)) {
            free(buf);
            dataset_writer_abort(&w);
            return LOADER_EIO;
        }
    }
    free(buf);
    if (dataset_writer_close(&w, err, errlen)) { dataset_writer_abort(&w); return LOADER_EIO; }
    return LOADER_OK;
}
