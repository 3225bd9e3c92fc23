/* evaluator/probe.h: a linear probe, multinomial logistic regression, for measuring how much
 * of a label a representation carries (task latent: the target's position from the Free
 * Transformer's Z).
 *
 * p(y | x) = softmax(W^T (x - mean) + b) over C classes, x of F features. Fitted by full-batch
 * Adam (lr 0.05, 200 steps, from zero) on the mean cross-entropy plus l2 |W|^2 / 2; l2 chosen
 * from 1e-4, 1e-3, 1e-2, 1e-1 by the cross-entropy on the last fifth of the training rows
 * (fitted on the rest), then refitted on all of them. What it reads is scored on rows it never
 * saw: the information a linear read-out recovers, log2 C - CE (bits, CE in bits) when the
 * labels are uniform over C classes: an estimate from below of what the features carry about
 * the label (a better read-out could find more), which over-fitting pushes down, not up. */
#ifndef EVALUATOR_PROBE_H
#define EVALUATOR_PROBE_H

typedef struct {
    double ce_bits;   /* mean -log2 p(label) on the test rows */
    double acc;       /* fraction of test rows whose most probable class is the label */
    double acc2;      /* ... within 2 of the label (ordered classes: positions) */
    double mae;       /* mean |argmax - label| */
    double l2;        /* the l2 chosen */
} eval_probe_t;

/* Fits on rows [0, n_train) of X (n, F), labels y in [0, C), and scores rows [n_train, n).
 * 0, or EVAL_ENOMEM / EVAL_EARG with one line in err. */
int eval_probe_run(const float *X, const int *y, int n, int n_train, int F, int C, eval_probe_t *out,
                   char *err, int errlen);
#endif
