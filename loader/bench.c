/* loader/bench.c: client-side throughput of loaders (loader/bench.h). */
#include "loader/bench.h"

#include <zmq.h>

#include "common/progress.h"
#include "loader/batch.h"

#define WARMUP 20 /* connects, the info exchange and the first epoch permutation */

int loader_bench_run(const char *const *endpoints, int n, const loader_client_cfg_t *cfg, uint64_t batches,
                     double *tok_s, char *err, size_t errlen) {
    void *zctx = zmq_ctx_new();
    loader_client_t *c = NULL;
    int rc = loader_client_open(&c, zctx, endpoints, n, cfg, err, errlen);
    double t0 = 0;
    for (uint64_t k = 0; !rc && k < batches + WARMUP; k++) {
        if (k == WARMUP) t0 = progress_now();
        msg_batch_t b;
        rc = loader_client_next(c, &b, err, errlen);
        if (!rc) loader_batch_release(&b);
    }
    if (!rc) *tok_s = (double)batches * cfg->B * cfg->T / (progress_now() - t0);
    loader_client_close(&c);
    zmq_ctx_term(zctx);
    return rc;
}
