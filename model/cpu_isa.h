/* model/cpu_isa.h: which x86-64 instruction-set level the CPU kernels run at, chosen once.
 *
 * The hot loops of model/ops_*.c are compiled three times (ops_clones.h): for x86-64-v2 (the
 * build's baseline), x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512). The three builds round
 * differently in the last bits (FMA contraction, vector width of a sum), so which one runs is
 * part of what makes a result reproducible. It is chosen ONCE per process, before main, and
 * every kernel follows the same choice:
 *   FT_CPU_ISA unset or "native"   the highest level this CPU supports;
 *   FT_CPU_ISA=x86-64-v2|v3|v4     that level (also accepted: v2, v3, v4); a level the CPU
 *                                  lacks, or an unknown value, is an error that
 *                                  cpu_isa_check() reports (the kernels then run at the
 *                                  highest supported level, never at an unsupported one).
 * Results are bit-identical between two processes with the same level, thread count and BLAS
 * kernel, whatever CPU they run on; tests/run.sh runs the numeric tests at every level the
 * CPU supports. */
#ifndef MODEL_CPU_ISA_H
#define MODEL_CPU_ISA_H
#include <stddef.h>

typedef enum { CPU_ISA_V2 = 2, CPU_ISA_V3 = 3, CPU_ISA_V4 = 4 } cpu_isa_t;

/* The level in force (a plain read of a value set before main). */
extern int cpu_isa_level_;
static inline cpu_isa_t cpu_isa(void) { return (cpu_isa_t)cpu_isa_level_; }

/* "x86-64-v3" etc. */
const char *cpu_isa_name(cpu_isa_t isa);
/* The highest level this CPU (and its OS, for the AVX register state) supports. */
cpu_isa_t cpu_isa_best(void);
/* 0 when FT_CPU_ISA was unset or valid; otherwise writes one line naming the value and what
 * is wrong, and returns -1. Programs call it at start and exit 2 on failure. */
int cpu_isa_check(char *err, size_t errlen);
/* Parses a level name; -1 if unknown. */
int cpu_isa_parse(const char *s);
#endif
