/* loader/bench.h: client-side throughput of loaders (bench/bench_loader.sh). */
#ifndef LOADER_BENCH_H
#define LOADER_BENCH_H
#include <stddef.h>
#include <stdint.h>

#include "loader/client.h"

/* Fetches `batches` batches through loader_client (after a few warm-up ones) and gives the
 * rate in tokens/s counted as B*T per batch. */
int loader_bench_run(const char *const *endpoints, int n, const loader_client_cfg_t *cfg, uint64_t batches,
                     double *tok_s, char *err, size_t errlen);
#endif
