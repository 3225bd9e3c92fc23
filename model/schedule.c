/* model/schedule.c: see schedule.h. */
#include "model/schedule.h"
#include <math.h>
#include <stdio.h>

int schedule_check(const schedule_t *s, char *err, unsigned long errlen) {
    if (!(s->lr_max >= 0.0f) || !(s->lr_min >= 0.0f) || s->lr_min > s->lr_max) {
        snprintf(err, errlen, "learning rates must satisfy 0 <= lr_min <= lr_max (got %g, %g)",
                 s->lr_min, s->lr_max);
        return -1;
    }
    if (s->warmup_steps < 0 || s->total_steps < 0 || s->warmup_steps > s->total_steps) {
        snprintf(err, errlen, "need 0 <= warmup_steps <= total_steps (got %d, %d)",
                 s->warmup_steps, s->total_steps);
        return -1;
    }
    return 0;
}

float schedule_lr(const schedule_t *s, long step) {
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return (float)((double)s->lr_max * (double)(step + 1) / s->warmup_steps);
    if (step >= s->total_steps) return s->lr_min;
    double p = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    return (float)(s->lr_min + (s->lr_max - (double)s->lr_min) * 0.5 * (1.0 + cos(M_PI * p)));
}
