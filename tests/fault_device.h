/* tests/fault_device.h: the CPU device with a sync that reports the fault a test sets, so a test
 * sees where a device fault travels: fault_rc DEVICE_ENOMEM (a lack of memory, as a GPU reports
 * a work buffer an op could not get), DEVICE_EFAULT (another fault), 0 (the CPU's own sync). */
#ifndef TESTS_FAULT_DEVICE_H
#define TESTS_FAULT_DEVICE_H
#include <stdio.h>

#include "model/device.h"

static int fault_rc;

static int fault_sync(device_t *d, char *err, size_t errlen) {
    if (fault_rc) return snprintf(err, errlen, "test device: %s", fault_rc == DEVICE_ENOMEM ? "out of memory" : "a fault"), fault_rc;
    return device_cpu_default()->ops->sync(d, err, errlen);
}

/* The process's CPU device (its buffers, its ops) behind fault_sync. */
static device_t *fault_device(void) {
    static device_t dev;
    static device_ops_t ops;
    dev = *device_cpu_default();
    ops = *dev.ops;
    ops.sync = fault_sync;
    dev.ops = &ops;
    return &dev;
}
#endif
