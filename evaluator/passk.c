/* evaluator/passk.c: pass@k (see passk.h). */
#include "evaluator/passk.h"

#include <math.h>

double eval_pass_at_k(int n, int c, int k) {
    if (n < 1 || k < 1 || k > n || c < 0 || c > n) return NAN;
    if (n - c < k) return 1.0; /* every k-subset holds a passing sample */
    double q = 1.0;
    for (int i = n - c + 1; i <= n; i++) q *= 1.0 - (double)k / i;
    return 1.0 - q;
}

int eval_pass_at_k_moments(int n, int k, double p, double *mean, double *var) {
    if (n < 1 || k < 1 || k > n || !(p >= 0 && p <= 1)) return -1;
    /* sum over c of Binomial(c; n, p) est(c) and est(c)^2; the binomial weights from lgamma
     * (exact to rounding for the n of a benchmark), 0^0 = 1 at the ends */
    double m1 = 0, m2 = 0;
    for (int c = 0; c <= n; c++) {
        double w;
        if (p == 0) w = c == 0;
        else if (p == 1) w = c == n;
        else w = exp(lgamma(n + 1.0) - lgamma(c + 1.0) - lgamma(n - c + 1.0) + c * log(p) + (n - c) * log1p(-p));
        double e = eval_pass_at_k(n, c, k);
        m1 += w * e;
        m2 += w * e * e;
    }
    if (mean) *mean = m1;
    if (var) *var = m2 - m1 * m1 > 0 ? m2 - m1 * m1 : 0;
    return 0;
}
