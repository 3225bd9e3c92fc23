/* model/cpu_isa.h: which x86-64 instruction-set level the CPU kernels run at, chosen once.
 *
 * The hot loops of model/ops_*.c are compiled three times (ops_clones.h): for x86-64-v2 (the
 * build's baseline), x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512). The three builds round
 * differently in the last bits (FMA contraction, vector width of a sum), so which one runs is
 * part of what makes a result reproducible. The matrix products (oneDNN, gemm.h) are pinned
 * to the same level: oneDNN may dispatch up to SSE4.1 at v2, AVX2 at v3 (not AVX2-VNNI),
 * AVX-512 (avx512_core, no VNNI) at v4. Two levels add bf16 arithmetic on top of v4 (the
 * project's own loops run their v4 build at both):
 *   x86-64-v4-bf16  the AVX-512 VNNI and BF16 instructions (Cooper Lake, Sapphire Rapids, Zen 4
 *                   and later): oneDNN may go up to avx512_core_bf16, and bf16 products run on
 *                   bf16 dot-product instructions (below this level they are the fp32 product
 *                   of bf16-rounded operands: gemm.h, precision.h);
 *   x86-64-v4-amx   v4-bf16 plus the AMX tile unit with its bf16 dot products (AMX-TILE and
 *                   AMX-BF16: Sapphire Rapids and later Xeons): oneDNN may go up to
 *                   avx512_core_amx, so bf16 products run on the tiles. Usable only where the
 *                   CPU has it, the OS saves the tile state (XCR0 bits 17-18) and the kernel
 *                   grants this process the tile data (Linux 5.16+: arch_prctl
 *                   ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA, asked once at start, as oneDNN
 *                   itself would). Where any of the three is missing the level is not
 *                   supported: the default quietly runs x86-64-v4-bf16, and FT_CPU_ISA asking
 *                   for it is the error below, whose line says which one was missing.
 *                   NOT YET RUN ON AMX HARDWARE: built and tested where AMX is absent (refusal,
 *                   fallback); tests/run.sh runs every test at this level where it exists.
 * So a level names the same code on every CPU that supports it. It is chosen ONCE per process,
 * before main, and every kernel follows the same choice:
 *   FT_CPU_ISA unset or "native"   the highest level this CPU supports;
 *   FT_CPU_ISA=x86-64-v2|v3|v4|v4-bf16|v4-amx   that level (the "x86-64-" prefix may be left
 *                                  out); a level the CPU lacks, or an unknown value, is an error
 *                                  that cpu_isa_check() reports (the kernels then run at the
 *                                  highest supported level, never at an unsupported one).
 * Results are bit-identical between two processes with the same level, thread count and BLAS
 * blocking, whatever CPU they run on (oneDNN sizes its blocks from the ISA, the thread count
 * and the CPU's cache sizes, so two CPU models may block a product differently); tests/run.sh
 * runs the numeric tests at every level the CPU supports. Between levels only agreement to
 * rounding is promised: at v4-amx the bf16 products sum on the tiles in another order than
 * AVX512-BF16's dot products, so bf16 results differ from v4-bf16's in the last bits; fp32
 * products have no AMX form and run oneDNN's AVX-512 kernels at both (the same bits expected,
 * not yet verified). */
#ifndef MODEL_CPU_ISA_H
#define MODEL_CPU_ISA_H
#include <stddef.h>

/* Ordered: each level contains the ones below it. */
typedef enum {
    CPU_ISA_V2 = 2,
    CPU_ISA_V3 = 3,
    CPU_ISA_V4 = 4,
    CPU_ISA_V4_BF16 = 5,
    CPU_ISA_V4_AMX = 6,
    CPU_ISA_TOP = CPU_ISA_V4_AMX
} cpu_isa_t;

/* The level in force (a plain read of a value set before main). */
extern int cpu_isa_level_;
static inline cpu_isa_t cpu_isa(void) { return (cpu_isa_t)cpu_isa_level_; }

/* "x86-64-v3", "x86-64-v4-bf16" etc. */
const char *cpu_isa_name(cpu_isa_t isa);
/* The highest level this CPU (and its OS, for the AVX register state and the AMX tiles)
 * supports. */
cpu_isa_t cpu_isa_best(void);
/* Whether the AMX level is usable, from its three conditions: the CPU's AMX-TILE and AMX-BF16
 * flags (cpu), the OS's XCR0 tile bits (os), and the kernel's answer to the tile-data request
 * (perm_errno: 0 granted, else the errno). 1 when usable; else 0 and one line in why saying
 * which condition failed. Pure (tests feed it every case). */
int cpu_isa_amx_usable(int cpu, int os, int perm_errno, char *why, size_t whylen);
/* 0 when FT_CPU_ISA was unset or valid; otherwise writes one line naming the value and what
 * is wrong, and returns -1. Programs call it at start and exit 2 on failure. */
int cpu_isa_check(char *err, size_t errlen);
/* Parses a level name; -1 if unknown. */
int cpu_isa_parse(const char *s);
#endif
