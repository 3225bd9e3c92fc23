/* model/precision.c: names of the precisions (precision.h). */
#include "model/precision.h"
#include <string.h>

const char *precision_name(precision_t p) {
    switch (p) {
    case PRECISION_BF16: return "bf16";
    case PRECISION_TF32: return "tf32";
    default: return "fp32";
    }
}

int precision_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "fp32")) return PRECISION_FP32;
    if (!strcmp(s, "bf16")) return PRECISION_BF16;
    if (!strcmp(s, "tf32")) return PRECISION_TF32;
    return -1;
}
