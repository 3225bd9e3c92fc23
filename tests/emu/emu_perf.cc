/* tests/emu/emu_perf.cc: the performance counters of the execution-model emulator
 * (docs/DEVICES.md, "The performance model"; bench/gpu_model.sh). Linked into a program built
 * on the emulated CUDA device (build/emu/bench/train_step), it counts, per kernel:
 *
 *   launches, the threads that touched global memory, the floating-point operations executed
 *   on CUDA cores (tests/emu/flops_pass.cc; of them, those of the special-function units: sfu)
 *   and on tensor cores (mma.sync: emu_api.h's
 *   tensor_flops), the global-memory bytes requested (loads, stores, atomics: per
 *   lane, the access's size), the 32-byte sectors each warp-wide access touches (the distinct
 *   sectors of the lanes' byte ranges: what the memory system moves for it), the distinct
 *   sectors of each launch (its footprint, summed over launches; and footprint_rw, its distinct
 *   sectors read plus its distinct sectors written: a sector read and written back by the same
 *   launch -- an in-place update -- counts twice, the least a launch can move between DRAM and
 *   the chip), the bytes of shared and local memory accessed, and shared memory's 128-byte
 *   wavefronts (emu_banks.cc: per warp-wide access, the busiest bank's distinct words; beside
 *   them the wavefronts the same words would take without bank conflicts);
 *
 * per cuBLAS product kind (function, transposes, element sizes): calls, FLOPs (2 m n k per
 * product) and the operand bytes (A and B read once, C written, and read when beta != 0);
 * per memset and copy kind (cudaMemsetAsync, cudaMemcpyAsync DeviceToDevice, ...): calls and
 * bytes; and the host's waits for the device.
 *
 * $FT_EMU_PERF=FILE turns it on; counting runs between emu_perf_step(1) and emu_perf_step(0)
 * (bench/train_step.c calls them around its first timed step; the hooks are installed only
 * then, so the rest of the program runs at the emulator's usual speed); at exit the counts are
 * written to FILE as JSON ("stepped": 0 when no step was marked, and nothing counted). Without
 * the variable nothing is installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "emu_api.h"

namespace {
struct kcount {
    unsigned long long launches = 0, threads = 0, flops = 0, tensor_flops = 0, sfu = 0, bytes_ld = 0, bytes_st = 0, sectors = 0,
                       warp_accesses = 0, footprint_sectors = 0, footprint_rw_sectors = 0, shared_bytes = 0, local_bytes = 0,
                       shared_accesses = 0, shared_wavefronts = 0, shared_wavefronts_ideal = 0;
    unsigned long long max_block_threads = 0, sampled_launches = 0;
};
struct gcount {
    unsigned long long calls = 0, tensor = 0;
    double flops = 0, bytes = 0;
};

/* on the heap, never freed: the counts are written by an atexit handler, after static destructors */
std::map<std::string, kcount> &g_k = *new std::map<std::string, kcount>;
kcount g_cur; /* the running launch's */
std::map<std::string, gcount> &g_g = *new std::map<std::string, gcount>;
std::map<std::string, gcount> &g_c = *new std::map<std::string, gcount>; /* memsets and copies: calls, bytes */
const char *g_path;
int g_on;
unsigned long long g_waits0, g_waits;
int g_stepped;
/* the running launch */
/* its distinct sectors, each with 1 if loaded, 2 if stored (an atomic: both) */
std::unordered_map<unsigned long long, unsigned char> &g_sect = *new std::unordered_map<unsigned long long, unsigned char>;
/* (block, warp) -> lanes that touched global memory */
std::unordered_map<unsigned long long, unsigned> &g_lanes = *new std::unordered_map<unsigned long long, unsigned>;

void on_launch(const emu_launch_info_t *l, int end, void *) {
    if (!g_on) return;
    if (!end) {
        g_sect.clear();
        g_lanes.clear();
        g_cur = kcount();
        return;
    }
    /* the counts of a sampled launch (FT_EMU_SAMPLE_BLOCKS: every k-th block observed) are scaled
     * up to the grid */
    const double scale = l->blocks_run ? (double)l->blocks / l->blocks_run : 1.0;
    kcount &k = g_k[l->kernel];
    kcount &c = g_cur;
    k.launches++;
    unsigned long long threads = 0;
    for (auto &e : g_lanes) threads += (unsigned)__builtin_popcount(e.second);
    c.flops = l->flops, c.footprint_sectors = g_sect.size(), c.threads = threads;
    for (auto &e : g_sect) c.footprint_rw_sectors += (e.second & 1) + (e.second >> 1 & 1);
    k.flops += (unsigned long long)(c.flops * scale);
    k.tensor_flops += (unsigned long long)(l->tensor_flops * scale);
    k.sfu += (unsigned long long)(l->sfu * scale);
    k.footprint_sectors += (unsigned long long)(c.footprint_sectors * scale);
    k.footprint_rw_sectors += (unsigned long long)(c.footprint_rw_sectors * scale);
    k.threads += (unsigned long long)(c.threads * scale);
    k.bytes_ld += (unsigned long long)(c.bytes_ld * scale);
    k.bytes_st += (unsigned long long)(c.bytes_st * scale);
    k.sectors += (unsigned long long)(c.sectors * scale);
    k.warp_accesses += (unsigned long long)(c.warp_accesses * scale);
    k.shared_bytes += (unsigned long long)(c.shared_bytes * scale);
    k.local_bytes += (unsigned long long)(c.local_bytes * scale);
    k.shared_accesses += (unsigned long long)(c.shared_accesses * scale);
    k.shared_wavefronts += (unsigned long long)(c.shared_wavefronts * scale);
    k.shared_wavefronts_ideal += (unsigned long long)(c.shared_wavefronts_ideal * scale);
    k.sampled_launches += l->blocks_run < l->blocks;
    c = kcount();
    k.max_block_threads = std::max(k.max_block_threads, (unsigned long long)l->block[0] * l->block[1] * l->block[2]);
    g_sect.clear();
    g_lanes.clear();
}

void on_warp(const emu_warp_access_t *a, void *) {
    if (!g_on) return;
    kcount &k = g_cur;
    const unsigned lanes = (unsigned)__builtin_popcount(a->mask);
    if (a->space == EMU_SHARED) {
        k.shared_bytes += (unsigned long long)lanes * a->size;
        unsigned ideal = 0;
        k.shared_wavefronts += emu_shared_wavefronts(a, &ideal);
        k.shared_wavefronts_ideal += ideal;
        k.shared_accesses++;
        return;
    }
    if (a->space == EMU_LOCAL) {
        k.local_bytes += (unsigned long long)lanes * a->size;
        return;
    }
    if (a->space != EMU_GLOBAL) return;
    const unsigned long long bytes = (unsigned long long)lanes * a->size;
    if (a->flags & EMU_STORE) k.bytes_st += bytes;
    if (a->flags & (EMU_LOAD | EMU_ATOMIC) || !(a->flags & EMU_STORE)) k.bytes_ld += bytes;
    /* the distinct 32-byte sectors of the lanes' ranges (at most 32 x 2 for accesses of <= 16 bytes) */
    unsigned long long s[64];
    unsigned n = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (!(a->mask >> l & 1)) continue;
        const unsigned long long lo = (unsigned long long)(uintptr_t)a->addr[l] >> 5,
                                 hi = ((unsigned long long)(uintptr_t)a->addr[l] + a->size - 1) >> 5;
        for (unsigned long long x = lo; x <= hi && n < 64; x++) s[n++] = x;
    }
    std::sort(s, s + n);
    const unsigned d = (unsigned)(std::unique(s, s + n) - s);
    k.sectors += d;
    k.warp_accesses++;
    const unsigned char rw = (unsigned char)((a->flags & (EMU_LOAD | EMU_ATOMIC) || !(a->flags & EMU_STORE) ? 1 : 0) |
                                             (a->flags & (EMU_STORE | EMU_ATOMIC) ? 2 : 0));
    for (unsigned i = 0; i < d; i++) g_sect[s[i]] |= rw;
    g_lanes[(unsigned long long)a->block << 6 | a->warp] |= a->mask;
}

void on_gemm(const emu_gemm_info_t *g, void *) {
    if (!g_on) return;
    char key[160];
    snprintf(key, sizeof key, "%s %c%c %s", g->name, g->transa ? 'T' : 'N', g->transb ? 'T' : 'N',
             g->tensor ? (g->a_size == 2 ? "bf16" : "tf32/bf16-fast") : "fp32");
    gcount &c = g_g[key];
    const double m = g->m, n = g->n, k = g->k, b = g->batch;
    c.calls++;
    c.tensor += g->tensor != 0;
    c.flops += 2.0 * m * n * k * b;
    c.bytes += b * (m * k * g->a_size + k * n * g->b_size + m * n * g->c_size * (g->beta_nonzero ? 2 : 1));
}

void on_copy(const emu_copy_info_t *c, void *) {
    if (!g_on) return;
    static const char *kn[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"};
    std::string key = c->name;
    if (c->kind >= 0 && c->kind < 4) key += std::string(" ") + kn[c->kind];
    gcount &g = g_c[key];
    g.calls++;
    g.bytes += (double)c->bytes;
}

void write_out() {
    if (!g_path) return;
    if (g_on) g_waits = emu_host_waits() - g_waits0;
    FILE *f = fopen(g_path, "w");
    if (!f) {
        fprintf(stderr, "emu_perf: cannot write %s\n", g_path);
        return;
    }
    fprintf(f, "{\"host_waits\": %llu, \"stepped\": %d, \"kernels\": {", g_waits, g_stepped);
    int first = 1;
    for (auto &e : g_k) {
        const kcount &k = e.second;
        fprintf(f,
                "%s\n  \"%s\": {\"launches\": %llu, \"threads\": %llu, \"max_block_threads\": %llu, \"flops\": %llu, \"tensor_flops\": %llu, \"sfu\": %llu, "
                "\"bytes_ld\": %llu, \"bytes_st\": %llu, \"sectors\": %llu, \"warp_accesses\": %llu, "
                "\"footprint_sectors\": %llu, \"footprint_rw_sectors\": %llu, \"shared_bytes\": %llu, \"local_bytes\": %llu, "
                "\"shared_accesses\": %llu, \"shared_wavefronts\": %llu, \"shared_wavefronts_ideal\": %llu, "
                "\"sampled_launches\": %llu}",
                first ? "" : ",", e.first.c_str(), k.launches, k.threads, k.max_block_threads, k.flops, k.tensor_flops, k.sfu, k.bytes_ld,
                k.bytes_st, k.sectors, k.warp_accesses, k.footprint_sectors, k.footprint_rw_sectors, k.shared_bytes, k.local_bytes, k.shared_accesses,
                k.shared_wavefronts, k.shared_wavefronts_ideal, k.sampled_launches);
        first = 0;
    }
    fprintf(f, "\n}, \"gemms\": {");
    first = 1;
    for (auto &e : g_g)
        fprintf(f, "%s\n  \"%s\": {\"calls\": %llu, \"tensor\": %llu, \"flops\": %.0f, \"bytes\": %.0f}", first ? "" : ",",
                e.first.c_str(), e.second.calls, e.second.tensor, e.second.flops, e.second.bytes),
            first = 0;
    fprintf(f, "\n}, \"copies\": {");
    first = 1;
    for (auto &e : g_c)
        fprintf(f, "%s\n  \"%s\": {\"calls\": %llu, \"bytes\": %.0f}", first ? "" : ",", e.first.c_str(),
                e.second.calls, e.second.bytes),
            first = 0;
    fprintf(f, "\n}}\n");
    if (fclose(f)) fprintf(stderr, "emu_perf: cannot write %s\n", g_path);
}

__attribute__((constructor)) void perf_init() {
    g_path = getenv("FT_EMU_PERF");
    if (!g_path || !*g_path) {
        g_path = NULL;
        return;
    }
    atexit(write_out);
}
void hooks(int on) {
    emu_set_launch_hook(on ? on_launch : NULL, NULL);
    emu_set_warp_access_hook(on ? on_warp : NULL, NULL);
    emu_set_gemm_hook(on ? on_gemm : NULL, NULL);
    emu_set_copy_hook(on ? on_copy : NULL, NULL);
    g_on = on;
}
} // namespace

extern "C" void emu_perf_step(int begin) {
    if (!g_path) return;
    if (begin) {
        g_k.clear();
        g_g.clear();
        g_c.clear();
        g_waits0 = emu_host_waits();
        hooks(1);
        g_stepped = 1;
    } else if (g_on) {
        g_waits = emu_host_waits() - g_waits0;
        hooks(0);
    }
}
