/* model/device_cuda_none.c: the CUDA device's entry points in a build without nvcc (the
 * Makefile compiles the .cu files only where nvcc exists): asking for the GPU says so. */
#include "model/device.h"
#include "common/errmsg.h"

#ifndef FT_HAVE_CUDA
int device_cuda_open(device_t **d, int ordinal, precision_t precision, char *err, size_t errlen) {
    (void)d;
    (void)precision;
    return err_fail(err, errlen, -1,
                    "device cuda:%d: this build has no CUDA device (nvcc was not found when it "
                    "was built; install the CUDA toolkit and run make again)", ordinal);
}
void device_cuda_close(device_t *d) { (void)d; }
#endif
