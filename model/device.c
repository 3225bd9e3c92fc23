/* model/device.c: opening a device by name, and the buffer arena (device.h). */
#include "model/device.h"
#include "model/tensor.h"
#include "common/errmsg.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each device file provides its opener; a build without nvcc has the stub in device_cuda_none.c
 * (which says so). */
int device_cpu_open(device_t **d, precision_t precision, char *err, size_t errlen);
int device_cuda_open(device_t **d, int ordinal, precision_t precision, char *err, size_t errlen);
void device_cpu_close(device_t *d);
void device_cuda_close(device_t *d);

int device_open(device_t **d, const char *spec, precision_t precision, char *err, size_t errlen) {
    if (!d) return err_fail(err, errlen, -1, "device_open: NULL handle");
    *d = NULL;
    if (!spec || !strcmp(spec, "cpu")) return device_cpu_open(d, precision, err, errlen);
    if (!strncmp(spec, "cuda", 4)) {
        int ordinal = 0;
        if (spec[4] == ':') {
            char *end = NULL;
            long v = strtol(spec + 5, &end, 10);
            if (!spec[5] || *end || v < 0 || v > 1023)
                return err_fail(err, errlen, -1, "device '%s': expected cuda:N with N a GPU index", spec);
            ordinal = (int)v;
        } else if (spec[4]) {
            return err_fail(err, errlen, -1, "device '%s': expected cpu, cuda or cuda:N", spec);
        }
        return device_cuda_open(d, ordinal, precision, err, errlen);
    }
    return err_fail(err, errlen, -1, "device '%s': expected cpu, cuda or cuda:N", spec);
}

int device_set_precision(device_t *d, precision_t p, char *err, size_t errlen) {
    if (d->kind == DEVICE_CPU && precision_cpu_check(p, err, errlen)) return -1;
    d->precision = p;
    return 0;
}

const char *device_default_spec(void) {
    const char *e = getenv("FT_DEVICE");
    return e && *e ? e : "cpu";
}

void device_close(device_t **d) {
    if (!d || !*d) return;
    if (*d == device_cpu_default()) { *d = NULL; return; }
    if ((*d)->kind == DEVICE_CUDA) device_cuda_close(*d);
    else device_cpu_close(*d);
    *d = NULL;
}

void *dev_arena_take(dev_arena_t *a, size_t n, size_t esz) {
    const size_t align = 64, at = (a->used + align - 1) / align * align;
    a->used = at + n * esz;
    return a->base ? a->base + at : NULL;
}

const char *device_bytes_str(size_t bytes, char *buf, size_t cap) {
    const double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, cap, "%.1f MiB", b / (1024.0 * 1024));
    else snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    return buf;
}

void tensor_view_download(const tensor_view_t *t, float *dst) {
    const size_t bytes = sizeof(float) * (size_t)tensor_numel(t);
    if (t->dev) DEV(t->dev, download, dst, t->data, bytes);
    else if (dst != t->data) memcpy(dst, t->data, bytes);
}

void tensor_view_upload(const tensor_view_t *t, const float *src) {
    const size_t bytes = sizeof(float) * (size_t)tensor_numel(t);
    if (t->dev) DEV(t->dev, upload, t->data, src, bytes);
    else if (src != t->data) memcpy(t->data, src, bytes);
}
