/* tests/emu/emu_internal.h: what the emulator's parts share (emu_sched.cc runs kernels,
 * emu_runtime.cc is the runtime API and the memory/stream bookkeeping, emu_cublas.cc and
 * emu_nccl.cc the libraries). Not for code outside tests/emu. */
#ifndef EMU_INTERNAL_H
#define EMU_INTERNAL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime_api.h"
#include "emu_api.h"

/* The per-access paths: not checked by AddressSanitizer themselves (they only touch the
 * emulator's own tables), which halves their cost. */
#define EMU_HOT __attribute__((no_sanitize("address")))

namespace emu {

/* ---- reporting ---- */
/* A broken contract or a detected bug: one paragraph on stderr naming what and where, the host
 * stack (the kernel's source line when raised inside a kernel), the seed; then abort() unless
 * FT_EMU_ON_ERROR=count (then it returns and the caller carries on as best it can). */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vfail(const char *fmt, va_list ap);
uint64_t seed();
uint64_t mix64(uint64_t x);
/* 1 when this call of name is one emu_fail_call / $FT_EMU_FAIL asked to fail (and counts it). */
int injected(const char *name);
/* The process-wide lock: every API call, every kernel (one block of one kernel runs at a time
 * in the process, so the .emu_shared section is the running block's). Released while an NCCL
 * operation waits for its peers. */
std::recursive_mutex &big_lock();
extern thread_local int lock_depth;
struct guard {
    guard() {
        big_lock().lock();
        lock_depth++;
    }
    ~guard() {
        lock_depth--;
        big_lock().unlock();
    }
};
/* Releases every level of the big lock this thread holds, sleeps, takes them again. */
void pause_unlocked(unsigned usec);

/* ---- vector clocks: the happens-before order of stream operations ---- */
struct vclock {
    std::vector<uint32_t> c;
    uint32_t get(unsigned i) const { return i < c.size() ? c[i] : 0; }
    void set(unsigned i, uint32_t v) {
        if (i >= c.size()) c.resize(i + 1, 0);
        c[i] = v;
    }
    void join(const vclock &o) {
        if (o.c.size() > c.size()) c.resize(o.c.size(), 0);
        for (size_t i = 0; i < o.c.size(); i++)
            if (o.c[i] > c[i]) c[i] = o.c[i];
    }
};

struct pending_t;
struct stream_t {
    unsigned id;               /* index into the vector clocks */
    int device;
    unsigned flags;            /* cudaStreamNonBlocking */
    bool legacy, alive;
    uint32_t seq;              /* operations enqueued so far */
    vclock vc;                 /* what is known complete before its next operation */
    std::vector<std::pair<uint32_t, std::string>> recent; /* the last operations, for messages */
    std::vector<pending_t *> pending; /* operations not complete yet (NCCL waiting for peers) */
};

/* An operation of a stream while it executes (or, for NCCL, until it completes). */
struct op_t {
    stream_t *s;
    uint32_t seq;
    vclock vc;                 /* the stream's clock when it was enqueued */
    std::string what;
};
/* Enqueues an operation on s (the host's order, the legacy stream's implicit synchronisation),
 * after completing what s still has pending. s may be 0 / cudaStreamLegacy (the current
 * device's legacy stream) or cudaStreamPerThread. NULL and a cudaErrorInvalidResourceHandle in
 * *e when the handle is not a live stream of the current device. */
stream_t *resolve_stream(cudaStream_t s, cudaError_t *e);
void op_begin(op_t *op, stream_t *s, const std::string &what);
/* The host has seen s complete up to now (a sync, a successful query). */
void host_joins(stream_t *s);
/* Completes s's pending operations, waiting for peers if need be (drops the big lock while it
 * waits); 0, or -1 when one failed (its error is then the communicator's). */
int drain(stream_t *s);
const char *op_name(unsigned stream, uint32_t seq, char *buf, size_t cap);

/* An operation that completes later (an NCCL collective waiting for its peers): poll() returns 1
 * once it has completed (and done its writes), 0 while it waits, -1 when it failed. */
struct pending_t {
    op_t op;
    virtual ~pending_t() {}
    virtual int poll() = 0;
};
/* Polls s's pending operations once (the big lock held); 1 when none is left. */
int stream_progress(stream_t *s);

/* ---- device memory ---- */
struct gword;
struct alloc_t {
    char *base;
    size_t size;
    int device;
    uint64_t serial;
    gword *shadow;             /* one per 4 bytes: last write, last read (emu_runtime.cc) */
};
/* The allocation holding [p, p + n), or NULL; with the big lock held. */
alloc_t *find_alloc(const void *p, size_t n);
/* Stream-order and race checks of an operation's access to [p, p + n) of allocation a; thread
 * is the kernel thread (global linear id in the launch) or NO_THREAD, epoch its block's barrier
 * count; acquired: the thread has done an atomic and then a __threadfence in its block (the
 * last-block pattern: every block writes, fences and takes a ticket; the block that draws the
 * last one fences and reads the others' writes), so its reads of other blocks' writes in this
 * launch are not reported (the writers' own fences are not checked). Reports through fail(). */
enum { NO_THREAD = 0xffffffffu };
void check_access(const op_t *op, alloc_t *a, const void *p, size_t n, int write, int atomic,
                  uint32_t thread, uint32_t block_threads, uint32_t epoch, int acquired = 0);
/* The same for a host-visible range that must be device memory of device dev: 0, or -1 (and
 * the report) when it is not inside one allocation. */
int check_device_range(const op_t *op, int dev, const void *p, size_t n, int write, const char *what);
int current_device();
void set_last_error(cudaError_t e);

/* ---- kernels (emu_sched.cc) ---- */
/* The running launch, for the access checks: NULL outside kernels. */
struct launch_state;
extern thread_local launch_state *cur_launch;
} // namespace emu
#endif
