/* model/precision.c: precision names (precision.h). */
#include "model/precision.h"
#include "common/errmsg.h"
#include <string.h>

static const char *const precision_names[] = {"fp32", "bf16", "tf32"};
#define PRECISION_COUNT (int)(sizeof precision_names / sizeof precision_names[0])

const char *precision_name(precision_t p) {
    return (int)p >= 0 && (int)p < PRECISION_COUNT ? precision_names[p] : "?";
}

int precision_parse(const char *s, precision_t *out, char *err, size_t errlen) {
    for (int i = 0; s && i < PRECISION_COUNT; i++)
        if (!strcmp(s, precision_names[i])) {
            *out = (precision_t)i;
            return 0;
        }
    return err_fail(err, errlen, -1, "precision '%s': unknown (fp32, bf16 or tf32)", s ? s : "");
}

int precision_cpu_check(precision_t p, char *err, size_t errlen) {
    if (p == PRECISION_FP32 || p == PRECISION_BF16) return 0;
    return err_fail(err, errlen, -1,
                    "precision %s: not available on the CPU (a GPU precision; the CPU runs fp32 or bf16)",
                    precision_name(p));
}
