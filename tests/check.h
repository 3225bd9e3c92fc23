/* tests/check.h: the tiny test harness every unit test uses.
 *
 * One function per case; CHECK records a failure with file:line and carries on, so one run
 * reports every broken case. main() ends with `return check_summary();`, which prints the
 * closing line "N passed, M failed" that tests/run.sh adds up, and returns non-zero on any
 * failure: a test binary that cannot fail is worse than none. */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H
#include <math.h>
#include <stdio.h>

static int check_passed_, check_failed_;

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (cond) {                                                              \
            check_passed_++;                                                     \
        } else {                                                                 \
            check_failed_++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, " " __VA_ARGS__);                                     \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

/* |a-b| <= atol + rtol*|b|, the numpy.allclose rule; callers say why they chose atol/rtol. */
#define CHECK_CLOSE(a, b, atol, rtol)                                            \
    do {                                                                         \
        double a_ = (a), b_ = (b);                                               \
        CHECK(fabs(a_ - b_) <= (atol) + (rtol)*fabs(b_), "%s=%.9g %s=%.9g",      \
              #a, a_, #b, b_);                                                   \
    } while (0)

#define RUN(fn)                                                                  \
    do {                                                                         \
        int f0_ = check_failed_;                                                 \
        fn();                                                                    \
        fprintf(stderr, "%s %s\n", check_failed_ == f0_ ? "ok  " : "FAIL", #fn); \
    } while (0)

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}
#endif
