/* tests/emu/emu_banks.cc: shared-memory bank conflicts of one warp-wide access, for the
 * performance model (emu_api.h's emu_shared_wavefronts; emu_perf.cc counts them per kernel).
 *
 * Shared memory is 32 banks of 4-byte words (sm_50 and later, H100 included); a bank serves one
 * word per clock, so an access takes as many wavefronts as the busiest bank has DISTINCT words
 * to deliver (lanes reading the same word share it: a broadcast). 8- and 16-byte accesses are
 * served in phases of 16 and 8 lanes (CUDA C Programming Guide, "Shared Memory" of compute
 * capability 5.x and later), each phase counted on its own. The bank of a word is its address /
 * 4 mod 32 taken from the host address: a shift of the whole shared window by a multiple of 4
 * only renames the banks, so the counts are those of the GPU's layout. */
#include <stdint.h>

#include "emu_api.h"

extern "C" unsigned emu_shared_wavefronts(const emu_warp_access_t *a, unsigned *ideal) {
    const unsigned phase = a->size >= 16 ? 8 : a->size >= 8 ? 16 : 32; /* lanes served together */
    unsigned total = 0, best = 0;
    for (unsigned p0 = 0; p0 < 32; p0 += phase) {
        uintptr_t words[32 * 4]; /* the phase's distinct words (<= 32 lanes x 4 words, or 8 x 16 / 4) */
        unsigned n = 0;
        for (unsigned l = p0; l < p0 + phase; l++) {
            if (!(a->mask >> l & 1)) continue;
            const uintptr_t lo = (uintptr_t)a->addr[l] >> 2, hi = ((uintptr_t)a->addr[l] + a->size - 1) >> 2;
            for (uintptr_t w = lo; w <= hi; w++) {
                unsigned j = 0;
                while (j < n && words[j] != w) j++;
                if (j == n && n < sizeof words / sizeof *words) words[n++] = w;
            }
        }
        if (!n) continue;
        unsigned per_bank[32] = {0}, worst = 0;
        for (unsigned i = 0; i < n; i++) {
            const unsigned c = ++per_bank[words[i] & 31];
            if (c > worst) worst = c;
        }
        total += worst;
        best += (n + 31) / 32; /* the same words spread over the 32 banks */
    }
    if (ideal) *ideal = best;
    return total;
}
