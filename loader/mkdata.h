/* loader/mkdata.h: random datasets for tests, benchmarks and demos.
 *
 * Document i of a seed is a pure function of (seed, i): its length is uniform in
 * [min_len, max_len] and its tokens uniform in [1, vocab_size) (eot_id is 0, so an eot inside
 * a batch always marks a document boundary). A test regenerates any document with
 * loader_mkdata_doc and compares it with what the loader served. */
#ifndef LOADER_MKDATA_H
#define LOADER_MKDATA_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t seed, n_docs;
    uint32_t vocab_size; /* >= 2 */
    uint32_t min_len, max_len;
} loader_mkdata_t;

/* Length of document i, and its tokens when out != NULL (room for max_len). */
uint32_t loader_mkdata_doc(const loader_mkdata_t *c, uint64_t i, uint32_t *out);
/* Writes the dataset at path (overwriting one that is there). */
int loader_mkdata_write(const loader_mkdata_t *c, const char *path, char *err, size_t errlen);
#endif
