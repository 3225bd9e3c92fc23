/* model/schedule.h: learning-rate schedule, linear warm-up then cosine decay to a floor.
 *
 *   step < warmup:           lr = lr_max * (step + 1) / warmup
 *   warmup <= step < total:  lr = lr_min + (lr_max - lr_min) * (1 + cos(pi * p)) / 2,
 *                            p = (step - warmup) / (total - warmup)
 *   step >= total:           lr = lr_min
 * step counts optimizer steps from 0 (the first update uses step 0). The formula is written in
 * double and rounded once, so the PyTorch reference (tests/ref/llama_ref.py) gets the same. */
#ifndef MODEL_SCHEDULE_H
#define MODEL_SCHEDULE_H

typedef struct {
    float lr_max, lr_min;
    int warmup_steps, total_steps;
} schedule_t;

/* 0 ok, or -1 with a reason in err (negative rates, floor above peak, warm-up > total). */
int schedule_check(const schedule_t *s, char *err, unsigned long errlen);
float schedule_lr(const schedule_t *s, long step);
#endif
