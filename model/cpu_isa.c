/* model/cpu_isa.c: the one choice of instruction-set level (cpu_isa.h). */
#include "model/cpu_isa.h"
#include "common/errmsg.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

int cpu_isa_level_ = CPU_ISA_V2;
static char isa_error[240];
static char amx_why[160];   /* why the AMX level is not usable here (cpu_isa_best) */

const char *cpu_isa_name(cpu_isa_t isa) {
    switch (isa) {
    case CPU_ISA_V4_AMX: return "x86-64-v4-amx";
    case CPU_ISA_V4_BF16: return "x86-64-v4-bf16";
    case CPU_ISA_V4: return "x86-64-v4";
    case CPU_ISA_V3: return "x86-64-v3";
    default: return "x86-64-v2";
    }
}

int cpu_isa_amx_usable(int cpu, int os, int perm_errno, char *why, size_t whylen) {
    if (!cpu) return err_fail(why, whylen, 0, "the CPU has no AMX-TILE/AMX-BF16");
    if (!os) return err_fail(why, whylen, 0, "the OS does not save the AMX tile state (XCR0 bits 17-18)");
    if (perm_errno)
        return err_fail(why, whylen, 0,
                        "the kernel refused the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s; Linux 5.16+ grants it)",
                        strerror(perm_errno));
    return 1;
}

#if defined(__GNUC__) && defined(__x86_64__)
/* AMX's three conditions (cpu_isa.h), the kernel asked for the tile data when the first two
 * hold (the request is per process and idempotent; oneDNN makes the same one). */
static int amx_usable(void) {
    unsigned a, b, c, d;
    int cpu = 0, os = 0, perm = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) cpu = (d >> 22 & 1) && (d >> 24 & 1);   /* AMX-BF16, AMX-TILE */
    if (cpu && __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1)) {                      /* OSXSAVE */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        os = (lo >> 17 & 3) == 3;                                                          /* XTILECFG, XTILEDATA */
    }
    if (cpu && os) {
        enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };
        perm = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) ? errno : 0;
    }
    return cpu_isa_amx_usable(cpu, os, perm, amx_why, sizeof amx_why);
}
#endif

cpu_isa_t cpu_isa_best(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init(); /* needed when called from a constructor */
    /* libgcc's checks include the OS's XSAVE state for AVX and AVX-512 registers */
    int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("movbe");
    int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
    /* what oneDNN calls avx512_core_bf16: AVX-512 VNNI and BF16 on top of v4 */
    int v4bf16 = v4 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16");
    if (!v4bf16) snprintf(amx_why, sizeof amx_why, "it needs x86-64-v4-bf16 first");
    int v4amx = v4bf16 && amx_usable();
    return v4amx ? CPU_ISA_V4_AMX : v4bf16 ? CPU_ISA_V4_BF16 : v4 ? CPU_ISA_V4 : v3 ? CPU_ISA_V3 : CPU_ISA_V2;
#else
    snprintf(amx_why, sizeof amx_why, "not an x86-64 build");
    return CPU_ISA_V2;
#endif
}

int cpu_isa_parse(const char *s) {
    if (!s) return -1;
    if (!strncmp(s, "x86-64-", 7)) s += 7;
    if (!strcmp(s, "v2")) return CPU_ISA_V2;
    if (!strcmp(s, "v3")) return CPU_ISA_V3;
    if (!strcmp(s, "v4")) return CPU_ISA_V4;
    if (!strcmp(s, "v4-bf16")) return CPU_ISA_V4_BF16;
    if (!strcmp(s, "v4-amx")) return CPU_ISA_V4_AMX;
    return -1;
}

/* Before main, so that no kernel can run at one level and a later one at another. */
__attribute__((constructor)) static void cpu_isa_choose(void) {
    cpu_isa_t best = cpu_isa_best();
    cpu_isa_level_ = best;
    const char *env = getenv("FT_CPU_ISA");
    if (!env || !*env || !strcmp(env, "native")) return;
    int want = cpu_isa_parse(env);
    if (want < 0)
        err_fail(isa_error, sizeof isa_error, -1,
                 "FT_CPU_ISA=%s: unknown level (x86-64-v2, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-v4-amx or native)", env);
    else if (want == CPU_ISA_V4_AMX && best == CPU_ISA_V4_BF16)
        err_fail(isa_error, sizeof isa_error, -1,
                 "FT_CPU_ISA=%s: no AMX here (%s); this CPU supports at most %s", env, amx_why,
                 cpu_isa_name(best));
    else if (want > (int)best)
        err_fail(isa_error, sizeof isa_error, -1,
                 "FT_CPU_ISA=%s: this CPU supports at most %s", env, cpu_isa_name(best));
    else
        cpu_isa_level_ = want;
}

int cpu_isa_check(char *err, size_t errlen) {
    if (!isa_error[0]) return 0;
    return err_fail(err, errlen, -1, "%s", isa_error);
}
