/* tests/test_cpu_isa.c: the one choice of instruction-set level (model/cpu_isa.h).
 *
 * - names parse both ways; the level in force is one the CPU supports;
 * - FT_CPU_ISA is obeyed, and an unknown or unsupported value is reported by cpu_isa_check
 *   with one line naming it (checked in child processes, since the choice is made before
 *   main);
 * - the AMX level: its three conditions (CPU flags, OS tile state, the kernel's grant) each
 *   refuse it with their own reason; asked for where it is absent, one line says why and the
 *   best other level runs; unset, the best level runs without a word (here: whatever the CPU
 *   has; where AMX exists the environment test above runs it and obeys it);
 * - the ops follow the level in force: the same input through each supported level gives
 *   results that agree to float tolerance, and repeated calls at one level agree bit for bit;
 *   the gradient norm's sum of squares agrees bit for bit across levels.
 * `test_cpu_isa --levels` prints the supported level names, one per line, for tests/run.sh. */
#include "model/cpu_isa.h"
#include "model/ops.h"
#include "common/rng.h"
#include "tests/check.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *self;

static void test_names(void) {
    for (int l = CPU_ISA_V2; l <= CPU_ISA_TOP; l++) {
        CHECK(cpu_isa_parse(cpu_isa_name((cpu_isa_t)l)) == l, "level %d round trip", l);
        CHECK(cpu_isa_parse(cpu_isa_name((cpu_isa_t)l) + 7) == l, "%s without the prefix",
              cpu_isa_name((cpu_isa_t)l));
    }
    CHECK(!strcmp(cpu_isa_name(CPU_ISA_V4_BF16), "x86-64-v4-bf16"), "the bf16 level's name");
    CHECK(!strcmp(cpu_isa_name(CPU_ISA_V4_AMX), "x86-64-v4-amx"), "the AMX level's name");
    CHECK(cpu_isa_parse("x86-64-v5") == -1 && cpu_isa_parse("") == -1 && cpu_isa_parse(NULL) == -1,
          "unknown names are refused");
    CHECK(cpu_isa() >= CPU_ISA_V2 && cpu_isa() <= cpu_isa_best(), "level in force %d, best %d",
          cpu_isa(), cpu_isa_best());
}

/* Runs this binary with FT_CPU_ISA=value in --report mode; returns its output line. */
static int child_report(const char *value, char *out, size_t cap) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        if (value) setenv("FT_CPU_ISA", value, 1);
        else unsetenv("FT_CPU_ISA");
        execl(self, self, "--report", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], out, cap - 1);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    out[n > 0 ? n : 0] = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_environment(void) {
    char out[256], want[64];
    CHECK(child_report(NULL, out, sizeof out) == 0, "unset: %s", out);
    snprintf(want, sizeof want, "ok %s", cpu_isa_name(cpu_isa_best()));
    CHECK(!strncmp(out, want, strlen(want)), "unset runs the best level: '%s'", out);
    for (int l = CPU_ISA_V2; l <= cpu_isa_best(); l++) {
        CHECK(child_report(cpu_isa_name((cpu_isa_t)l), out, sizeof out) == 0, "%s", out);
        snprintf(want, sizeof want, "ok %s", cpu_isa_name((cpu_isa_t)l));
        CHECK(!strncmp(out, want, strlen(want)), "FT_CPU_ISA=%s obeyed: '%s'", cpu_isa_name((cpu_isa_t)l), out);
    }
    CHECK(child_report("x86-64-v9", out, sizeof out) == 1 && strstr(out, "FT_CPU_ISA=x86-64-v9") &&
              strstr(out, "unknown"), "unknown value reported: '%s'", out);
    for (int l = cpu_isa_best() + 1; l <= CPU_ISA_TOP; l++) {
        CHECK(child_report(cpu_isa_name((cpu_isa_t)l), out, sizeof out) == 1 &&
                  strstr(out, "supports at most"),
              "unsupported level %s reported: '%s'", cpu_isa_name((cpu_isa_t)l), out);
        snprintf(want, sizeof want, "(running %s)", cpu_isa_name(cpu_isa_best()));
        CHECK(strstr(out, want) != NULL, "and the kernels run the best level instead: '%s'", out);
    }
}

/* The AMX level's three conditions, each refused with its own reason. */
static void test_amx_conditions(void) {
    char why[200];
    CHECK(cpu_isa_amx_usable(1, 1, 0, why, sizeof why) == 1, "all three: usable");
    CHECK(cpu_isa_amx_usable(0, 1, 0, why, sizeof why) == 0 && strstr(why, "no AMX-TILE"), "no CPU flags: '%s'", why);
    CHECK(cpu_isa_amx_usable(1, 0, 0, why, sizeof why) == 0 && strstr(why, "XCR0"), "no OS tile state: '%s'", why);
    CHECK(cpu_isa_amx_usable(1, 1, EINVAL, why, sizeof why) == 0 && strstr(why, "refused") &&
              strstr(why, "ARCH_REQ_XCOMP_PERM") && strstr(why, strerror(EINVAL)),
          "the kernel's refusal, with its errno: '%s'", why);
}

/* Where AMX is absent (this is the case the project's machines test): FT_CPU_ISA=x86-64-v4-amx
 * is one line saying why, the kernels run the best level instead; unset, the best level runs
 * without an error. Where AMX is present: the level is obeyed like any other. */
static void test_amx_fallback(void) {
    char out[320], want[64];
    const int rc = child_report("x86-64-v4-amx", out, sizeof out);
    if (cpu_isa_best() == CPU_ISA_V4_AMX) {
        CHECK(rc == 0 && !strncmp(out, "ok x86-64-v4-amx", 16), "AMX present: obeyed: '%s'", out);
        return;
    }
    CHECK(rc == 1 && strstr(out, "FT_CPU_ISA=x86-64-v4-amx"), "asked for, refused: '%s'", out);
    CHECK(strchr(out, '\n') == out + strlen(out) - 1, "in one line: '%s'", out);
    if (cpu_isa_best() == CPU_ISA_V4_BF16)
        CHECK(strstr(out, "no AMX here (") && strstr(out, "at most x86-64-v4-bf16"), "says why: '%s'", out);
    snprintf(want, sizeof want, "(running %s)", cpu_isa_name(cpu_isa_best()));
    CHECK(strstr(out, want) != NULL, "and runs the best level: '%s'", out);
    CHECK(child_report(NULL, out, sizeof out) == 0, "unset: no error: '%s'", out);
    CHECK(cpu_isa_best() < CPU_ISA_V4_AMX, "the default falls back below AMX (best %s)", cpu_isa_name(cpu_isa_best()));
}

/* An op with long reductions and exp: cross-entropy over a wide vocabulary. */
static void ce_at(int level, float *lse, float *dlogits, const float *logits, const uint32_t *tgt,
                  int N, int V) {
    int saved = cpu_isa_level_;
    cpu_isa_level_ = level;
    int count = 0;
    crossentropy_forward(dlogits, lse, &count, logits, tgt, NULL, N, V, 1.0f);
    cpu_isa_level_ = saved;
}

static void test_ops_follow_level(void) {
    enum { N = 16, V = 1000 };
    float *z = malloc(sizeof(float) * N * V), *d0 = malloc(sizeof(float) * N * V),
          *d1 = malloc(sizeof(float) * N * V), l0[N], l1[N];
    uint32_t tgt[N];
    rng_t r;
    rng_seed(&r, 5);
    for (int i = 0; i < N * V; i++) z[i] = (float)(rng_f32(&r) * 8 - 4);
    for (int i = 0; i < N; i++) tgt[i] = (uint32_t)rng_below(&r, V);
    ce_at(CPU_ISA_V2, l0, d0, z, tgt, N, V);
    for (int l = CPU_ISA_V2; l <= cpu_isa_best(); l++) {
        ce_at(l, l1, d1, z, tgt, N, V);
        /* float sums of 1000 terms in another order or with FMA: a few ulps of the lse */
        for (int i = 0; i < N; i++) CHECK_CLOSE(l1[i], l0[i], 0, 1e-6);
        float again[N];
        ce_at(l, again, d1, z, tgt, N, V);
        CHECK(!memcmp(again, l1, sizeof again), "level %d repeats bit for bit", l);
    }
    free(z); free(d0); free(d1);
}

/* The gradient norm's sum of squares (ops_math.h ops_sumsq_chunk: 16 lanes in double, a
 * fixed fold) gives the same bits at every level, whole chunks and a ragged tail alike. */
static void test_sumsq_levels(void) {
    const size_t n = 3 * 4096 + 16 * 7 + 5;
    float *x = malloc(sizeof(float) * n);
    rng_t r;
    rng_seed(&r, 9);
    for (size_t i = 0; i < n; i++) x[i] = (float)((rng_f32(&r) - 0.5) * 3.0);
    const int saved = cpu_isa_level_;
    cpu_isa_level_ = CPU_ISA_V2;
    const double s0 = sumsq(x, n);
    double serial = 0.0;   /* (the value: a plain double sum, to rounding) */
    for (size_t i = 0; i < n; i++) serial += (double)x[i] * x[i];
    CHECK_CLOSE(s0, serial, 0, 1e-13);
    for (int l = CPU_ISA_V2; l <= cpu_isa_best(); l++) {
        cpu_isa_level_ = l;
        const double s = sumsq(x, n);
        CHECK(s == s0, "sumsq at level %d: %.17g, at v2 %.17g", l, s, s0);
    }
    cpu_isa_level_ = saved;
    free(x);
}

int main(int argc, char **argv) {
    self = "/proc/self/exe";
    if (argc > 1 && !strcmp(argv[1], "--levels")) {
        for (int l = CPU_ISA_V2; l <= cpu_isa_best(); l++) printf("%s\n", cpu_isa_name((cpu_isa_t)l));
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--report")) {
        char err[256];
        if (cpu_isa_check(err, sizeof err)) {
            printf("%s (running %s)\n", err, cpu_isa_name(cpu_isa()));
            return 1;
        }
        printf("ok %s\n", cpu_isa_name(cpu_isa()));
        return 0;
    }
    RUN(test_names);
    RUN(test_environment);
    RUN(test_amx_conditions);
    RUN(test_amx_fallback);
    RUN(test_ops_follow_level);
    RUN(test_sumsq_levels);
    return check_summary();
}
