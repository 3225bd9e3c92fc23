/* model/cpu_isa.h: which x86-64 instruction-set level the CPU kernels run at, chosen once.
 *
 * The hot loops of model/ops_*.c are compiled three times (ops_clones.h): for x86-64-v2 (the
 * build's baseline), x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512). The three builds round
 * differently in the last bits (FMA contraction, vector width of a sum), so which one runs is
 * part of what makes a result reproducible. The matrix products (oneDNN, gemm.h) are pinned
 * to the same level: oneDNN may dispatch up to SSE4.1 at v2, AVX2 at v3 (not AVX2-VNNI),
 * AVX-512 (avx512_core, no VNNI) at v4. A fourth level, x86-64-v4-bf16, is v4 plus the AVX-512
 * VNNI and BF16 instructions (Cooper Lake, Sapphire Rapids, Zen 4 and later): the project's
 * own loops run their v4 build there, oneDNN may go up to avx512_core_bf16 (never AMX), and
 * only at this level do bf16 products run on bf16 dot-product instructions; below it they
 * are the fp32 product of bf16-rounded operands (gemm.h, precision.h). So a level names the
 * same code on every CPU that supports it. It is chosen ONCE per process, before main, and
 * every kernel follows the same choice:
 *   FT_CPU_ISA unset or "native"   the highest level this CPU supports;
 *   FT_CPU_ISA=x86-64-v2|v3|v4|v4-bf16   that level (the "x86-64-" prefix may be left out); a
 *                                  level the CPU lacks, or an unknown value, is an error that
 *                                  cpu_isa_check() reports (the kernels then run at the
 *                                  highest supported level, never at an unsupported one).
 * Results are bit-identical between two processes with the same level, thread count and BLAS
 * blocking, whatever CPU they run on (oneDNN sizes its blocks from the ISA, the thread count
 * and the CPU's cache sizes, so two CPU models may block a product differently); tests/run.sh
 * runs the numeric tests at every level the CPU supports. */
#ifndef MODEL_CPU_ISA_H
#define MODEL_CPU_ISA_H
#include <stddef.h>

/* Ordered: each level contains the ones below it. */
typedef enum { CPU_ISA_V2 = 2, CPU_ISA_V3 = 3, CPU_ISA_V4 = 4, CPU_ISA_V4_BF16 = 5 } cpu_isa_t;

/* The level in force (a plain read of a value set before main). */
extern int cpu_isa_level_;
static inline cpu_isa_t cpu_isa(void) { return (cpu_isa_t)cpu_isa_level_; }

/* "x86-64-v3", "x86-64-v4-bf16" etc. */
const char *cpu_isa_name(cpu_isa_t isa);
/* The highest level this CPU (and its OS, for the AVX register state) supports. */
cpu_isa_t cpu_isa_best(void);
/* 0 when FT_CPU_ISA was unset or valid; otherwise writes one line naming the value and what
 * is wrong, and returns -1. Programs call it at start and exit 2 on failure. */
int cpu_isa_check(char *err, size_t errlen);
/* Parses a level name; -1 if unknown. */
int cpu_isa_parse(const char *s);
#endif
