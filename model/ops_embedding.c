/* model/ops_embedding.c: token embedding lookup and its scatter-add backward. */
#include "model/ops.h"
#include <stddef.h>
#include <string.h>

void embedding_forward(float *out, const uint32_t *tokens, const float *table, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * D);
}

/* Two rows with the same token add into the same table row, so rows are not split across
 * threads; columns are: each thread owns a slice of D and walks the rows in order, which keeps
 * the summation order fixed whatever the thread count. */
void embedding_backward(float *dtable, const float *dout, const uint32_t *tokens, int N, int D) {
    const int CH = 64;
    int nch = (D + CH - 1) / CH;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nch; c++) {
        int lo = c * CH, hi = lo + CH < D ? lo + CH : D;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)tokens[n] * D;
            const float *src = dout + (size_t)n * D;
            for (int i = lo; i < hi; i++) dst[i] += src[i];
        }
    }
}
