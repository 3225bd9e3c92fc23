/* tests/emu/emu_runtime.cc: the CUDA runtime API of the emulator (cuda_runtime_api.h) and its
 * bookkeeping of device memory and stream order (docs/DEVICES.md, "The emulator").
 *
 * Devices: $FT_EMU_DEVICES of them (default 2), each with $FT_EMU_MEM bytes (default 80 GiB, an
 * H100's; cudaMalloc beyond it fails as on a full GPU). Device memory is posix_memalign'ed host
 * memory (256-byte aligned, as cudaMalloc's), so AddressSanitizer sees every byte past an
 * allocation.
 *
 * Streams execute each operation at once, on the calling thread, but the order CUDA promises is
 * kept as vector clocks: each operation carries what was known complete when it was enqueued
 * (its stream's earlier work, what the host had synchronised with, events waited on, and the
 * legacy default stream's implicit synchronisation with blocking streams). Every byte of device
 * memory remembers the operation (and, inside a kernel, the thread) that last wrote it and last
 * read it, and an access is checked against them:
 *   - another stream's write or read that is not ordered before this access: a stream race (on
 *     a GPU the two may overlap in time);
 *   - inside one kernel, two threads touching the same bytes, one writing, with no barrier of
 *     one block between and not both atomic: a race whose outcome depends on the order of
 *     blocks or warps;
 *   - a read of bytes nothing has written since cudaMalloc (undefined on a GPU).
 * Synchronous calls synchronise as CUDA documents ("API synchronization behavior"): cudaMemcpy
 * from pageable host memory to the device returns before the copy reaches the device (the host
 * has not seen it complete), device-to-host copies return after it, cudaMemset is asynchronous,
 * cudaFree synchronises the device. Events: waiting for or synchronising with an event that was
 * never recorded is reported (CUDA returns at once: it waits for nothing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <map>
#include <set>

#include "emu_internal.h"

namespace emu {

struct gword {
    uint32_t wq, rq;        /* sequence number of the last writing / reading operation (0: none) */
    uint32_t wt, rt;        /* kernel thread (global linear id), or NO_THREAD */
    uint32_t wep, rep;      /* its block's barrier epoch */
    uint32_t rblk;          /* the readers' block, or NO_THREAD when several */
    uint16_t ws, rs;        /* stream ids */
    uint8_t wmask, rmask, watom, rmany;
};

static int g_ndev = -1;
static size_t g_mem_budget;
static int g_checks = 1, g_uninit = 1;
static std::vector<size_t> g_used, g_limits; /* per device: bytes held, the limit when set */
static std::vector<alloc_t *> g_allocs;   /* sorted by base */
static thread_local alloc_t *t_last;
static uint64_t g_alloc_serial, g_alloc_gen;
static thread_local uint64_t t_last_gen;
static std::map<char *, size_t> g_pinned;
static std::vector<stream_t *> g_streams;  /* by id */
static std::set<stream_t *> g_live_streams;
static std::vector<stream_t *> g_legacy;   /* per device */
static thread_local int t_device;
static thread_local cudaError_t t_last_error;
static thread_local vclock *t_host_vc;

struct CUevent_stub {};
} // namespace emu

struct CUevent_st {
    bool alive, recorded;
    unsigned flags;
    emu::vclock vc;
    emu::stream_t *s;
    int device;
    double ms;
};

namespace emu {
static std::set<CUevent_st *> g_live_events;

static size_t parse_bytes(const char *s, size_t dflt) {
    if (!s || !*s) return dflt;
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    }
    return (size_t)v;
}

static void init() {
    if (g_ndev >= 0) return;
    const char *e = getenv("FT_EMU_DEVICES");
    g_ndev = e && *e ? atoi(e) : 2;
    if (g_ndev < 0) g_ndev = 0;
    g_mem_budget = parse_bytes(getenv("FT_EMU_MEM"), (size_t)80 << 30);
    const char *c = getenv("FT_EMU_CHECKS");
    if (c && !strcmp(c, "0")) g_checks = 0;
    const char *u = getenv("FT_EMU_UNINIT");
    if (u && !strcmp(u, "0")) g_uninit = 0;
    g_used.assign(g_ndev, 0);
    g_legacy.assign(g_ndev, NULL);
    seed();
}

static vclock &host_vc() {
    if (!t_host_vc) t_host_vc = new vclock();
    return *t_host_vc;
}

int current_device() { return t_device; }
void set_last_error(cudaError_t e) {
    if (e != cudaSuccess) t_last_error = e;
}
static cudaError_t ret(cudaError_t e) {
    set_last_error(e);
    return e;
}

/* ---- allocations ---- */
EMU_HOT alloc_t *find_alloc(const void *p, size_t n) {
    const char *c = (const char *)p;
    alloc_t *a = t_last;
    if (a && t_last_gen == g_alloc_gen && c >= a->base && c + n <= a->base + a->size) return a;
    auto it = std::upper_bound(g_allocs.begin(), g_allocs.end(), c, [](const char *x, const alloc_t *y) { return x < y->base; });
    if (it == g_allocs.begin()) return NULL;
    a = *(it - 1);
    if (c < a->base || c + n > a->base + a->size || (n == 0 && c >= a->base + a->size)) return NULL;
    t_last = a;
    t_last_gen = g_alloc_gen;
    return a;
}

const char *op_name(unsigned stream, uint32_t seq, char *buf, size_t cap) {
    if (stream < g_streams.size())
        for (auto &r : g_streams[stream]->recent)
            if (r.first == seq) {
                snprintf(buf, cap, "%s (operation %u of stream %u)", r.second.c_str(), seq, stream);
                return buf;
            }
    snprintf(buf, cap, "operation %u of stream %u", seq, stream);
    return buf;
}

static const char *who(const op_t *op, uint32_t thread, uint32_t bt, char *buf, size_t cap) {
    if (thread == NO_THREAD) snprintf(buf, cap, "%s", op->what.c_str());
    else snprintf(buf, cap, "%s (block %u, thread %u)", op->what.c_str(), thread / bt, thread % bt);
    return buf;
}

EMU_HOT void check_access(const op_t *op, alloc_t *a, const void *p, size_t n, int write, int atomic, uint32_t thread,
                  uint32_t bt, uint32_t epoch, int acquired) {
    if (!g_checks || !n) return;
    const size_t off = (const char *)p - a->base;
    const size_t w0 = off / 4, w1 = (off + n - 1) / 4;
    const unsigned sid = op->s->id;
    const uint32_t seq = op->seq;
    const int kernel = thread != NO_THREAD;
    const int reads = !write || atomic, writes = write;
    char b1[256], b2[200];
    for (size_t i = w0; i <= w1; i++) {
        gword &w = a->shadow[i];
        const size_t lo = i * 4 < off ? off : i * 4, hi = (i + 1) * 4 < off + n ? (i + 1) * 4 : off + n;
        uint8_t mask = 0;
        for (size_t b = lo; b < hi; b++) mask |= (uint8_t)(1u << (b - i * 4));
        const int same_w = w.wq && w.ws == sid && w.wq == seq;
        auto block_ordered = [&](uint32_t t, uint32_t ep) {
            return kernel && t != NO_THREAD && t / bt == thread / bt && ep < epoch;
        };
        if (reads) {
            if (!w.wq) {
                if (g_uninit) {
                    fail("%s reads %zu byte(s) at %p (offset %zu of a %zu-byte allocation) that nothing has "
                         "written since cudaMalloc", who(op, thread, bt, b1, sizeof b1), n, p, off, a->size);
                    return;
                }
            } else if (same_w) {
                /* a plain read of what an atomic wrote is the CAS loop's first guess (the CUDA
                 * guide's own pattern): not reported */
                if (kernel && w.wt != thread && w.wt != NO_THREAD && (w.wmask & mask) && !w.watom &&
                    !block_ordered(w.wt, w.wep) && !(acquired && w.wt / bt != thread / bt)) {
                    fail("%s reads %p, which thread %u of block %u wrote in the same launch with no barrier "
                         "between (a race: the result depends on the order of blocks or warps)",
                         who(op, thread, bt, b1, sizeof b1), p, w.wt % bt, w.wt / bt);
                    return;
                }
            } else if (op->vc.get(w.ws) < w.wq) {
                fail("stream race: %s reads %p, which %s wrote with nothing ordering the two (no stream or "
                     "event synchronisation between)", who(op, thread, bt, b1, sizeof b1), p,
                     op_name(w.ws, w.wq, b2, sizeof b2));
                return;
            }
            if (w.rq && w.rs == sid && w.rq == seq) {
                if (w.rt != thread) w.rmany = 1;
                if (kernel && w.rblk != thread / bt) w.rblk = NO_THREAD;
                w.rep = epoch > w.rep ? epoch : w.rep;
                w.rmask |= mask;
            } else {
                w.rs = (uint16_t)sid, w.rq = seq, w.rt = thread, w.rep = epoch, w.rmany = 0, w.rmask = mask;
                w.rblk = kernel ? thread / bt : NO_THREAD;
            }
        }
        if (writes) {
            if (w.wq && !same_w && op->vc.get(w.ws) < w.wq) {
                fail("stream race: %s writes %p, which %s also wrote with nothing ordering the two",
                     who(op, thread, bt, b1, sizeof b1), p, op_name(w.ws, w.wq, b2, sizeof b2));
                return;
            }
            if (same_w && kernel && w.wt != thread && w.wt != NO_THREAD && (w.wmask & mask) &&
                !(atomic && w.watom) && !block_ordered(w.wt, w.wep)) {
                fail("%s writes %p, which thread %u of block %u also wrote in the same launch with no barrier "
                     "between (a race: the last writer depends on the order of blocks or warps)",
                     who(op, thread, bt, b1, sizeof b1), p, w.wt % bt, w.wt / bt);
                return;
            }
            if (w.rq) {
                if (w.rs == sid && w.rq == seq) {
                    const int other = w.rmany || w.rt != thread;
                    const int ordered = kernel && w.rblk == thread / bt && w.rep < epoch;
                    if (kernel && other && (w.rmask & mask) && !atomic && !ordered) {
                        fail("%s writes %p, which thread %u of block %u read in the same launch with no barrier "
                             "between (a race: that read may see the old or the new value)",
                             who(op, thread, bt, b1, sizeof b1), p, w.rt % bt, w.rt / bt);
                        return;
                    }
                } else if (op->vc.get(w.rs) < w.rq) {
                    fail("stream race: %s writes %p while %s may still read it (nothing orders the two)",
                         who(op, thread, bt, b1, sizeof b1), p, op_name(w.rs, w.rq, b2, sizeof b2));
                    return;
                }
            }
            w.wmask = (same_w && w.wt == thread) ? (uint8_t)(w.wmask | mask) : mask;
            w.ws = (uint16_t)sid, w.wq = seq, w.wt = thread, w.wep = epoch, w.watom = (uint8_t)atomic;
            w.rq = 0;
        }
    }
}

int check_device_range(const op_t *op, int dev, const void *p, size_t n, int write, const char *what) {
    (void)dev;
    if (!n) return 0;
    alloc_t *a = find_alloc(p, n);
    if (!a) {
        fail("%s: [%p, +%zu bytes) is not inside one device allocation", what, p, n);
        return -1;
    }
    check_access(op, a, p, n, write, 0, NO_THREAD, 1, 0);
    return 0;
}

/* ---- streams ---- */
static stream_t *new_stream(int dev, unsigned flags, bool legacy) {
    stream_t *s = new stream_t();
    s->id = (unsigned)g_streams.size();
    if (s->id > 65535) {
        fail("more than 65535 streams created in one process");
        abort();
    }
    s->device = dev;
    s->flags = flags;
    s->legacy = legacy;
    s->alive = true;
    s->seq = 0;
    g_streams.push_back(s);
    g_live_streams.insert(s);
    return s;
}

static stream_t *legacy_of(int dev) {
    if (!g_legacy[dev]) g_legacy[dev] = new_stream(dev, 0, true);
    return g_legacy[dev];
}

stream_t *resolve_stream(cudaStream_t h, cudaError_t *e) {
    init();
    if (!g_ndev) {
        *e = cudaErrorNoDevice;
        return NULL;
    }
    if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) return legacy_of(t_device);
    stream_t *s = (stream_t *)h;
    if (!g_live_streams.count(s)) {
        *e = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    if (s->device != t_device) {
        *e = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    return s;
}

void op_begin(op_t *op, stream_t *s, const std::string &what) {
    drain(s);
    s->vc.join(host_vc());
    if (s->legacy) {
        for (stream_t *b : g_streams)
            if (b->alive && !b->legacy && b->device == s->device && !(b->flags & cudaStreamNonBlocking)) {
                drain(b);
                s->vc.join(b->vc);
            }
    } else if (!(s->flags & cudaStreamNonBlocking)) {
        stream_t *l = legacy_of(s->device);
        drain(l);
        s->vc.join(l->vc);
    }
    s->seq++;
    s->vc.set(s->id, s->seq);
    op->s = s;
    op->seq = s->seq;
    op->vc = s->vc;
    op->what = what;
    s->recent.emplace_back(s->seq, what);
    if (s->recent.size() > 64) s->recent.erase(s->recent.begin());
}

static unsigned long long g_host_waits; /* emu_host_waits() */
void host_joins(stream_t *s) {
    drain(s);
    host_vc().join(s->vc);
}

static void host_joins_device(int dev) {
    for (stream_t *s : g_streams)
        if (s->device == dev) host_joins(s);
}

/* ---- operations that complete later ---- */
int stream_progress(stream_t *s) {
    while (!s->pending.empty()) {
        pending_t *p = s->pending.front();
        if (p->poll() == 0) return 0;
        s->pending.erase(s->pending.begin());
        delete p;
    }
    return 1;
}
int drain(stream_t *s) {
    static double limit = -1;
    if (limit < 0) {
        const char *e = getenv("FT_EMU_WAIT_S");
        limit = e && *e ? atof(e) : 600;
    }
    int rc = 0;
    double waited = 0;
    unsigned us = 20;
    while (!s->pending.empty()) {
        pending_t *p = s->pending.front();
        int r = p->poll();
        if (r == 0) {
            if (waited > limit) {
                fail("%s on stream %u has waited %.0f s for its peers (FT_EMU_WAIT_S)", p->op.what.c_str(), s->id, waited);
                return -1;
            }
            pause_unlocked(us);
            waited += us * 1e-6;
            us = us < 2000 ? us * 2 : us;
            continue;
        }
        if (r < 0) rc = -1;
        s->pending.erase(s->pending.begin());
        delete p;
    }
    return rc;
}

/* ---- events ---- */
static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static CUevent_st *live_event(cudaEvent_t e) { return g_live_events.count(e) ? e : NULL; }
static int is_pinned(const void *p, size_t n) {
    auto it = g_pinned.upper_bound((char *)p);
    if (it == g_pinned.begin()) return 0;
    --it;
    return (const char *)p >= it->first && (const char *)p + n <= it->first + it->second;
}
} // namespace emu

using namespace emu;
#define LOCK guard lock_; init()
#define INJECT(name) if (injected(name)) return ret(cudaErrorUnknown)

extern "C" {

unsigned long long emu_host_waits(void) { return emu::g_host_waits; }
cudaError_t cudaGetDeviceCount(int *count) {
    LOCK;
    if (!count) return ret(cudaErrorInvalidValue);
    *count = g_ndev;
    return g_ndev ? cudaSuccess : ret(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int d) {
    LOCK;
    INJECT("cudaSetDevice");
    if (d < 0 || d >= g_ndev) return ret(cudaErrorInvalidDevice);
    t_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    LOCK;
    if (!d) return ret(cudaErrorInvalidValue);
    *d = t_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    LOCK;
    INJECT("cudaGetDeviceProperties");
    if (!p) return ret(cudaErrorInvalidValue);
    if (d < 0 || d >= g_ndev) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "freetf emulator %d (H100-like limits)", d);
    p->totalGlobalMem = g_mem_budget;
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 227 << 10;
    p->sharedMemPerMultiprocessor = 228 << 10;
    p->regsPerBlock = p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->memPitch = (size_t)1 << 31;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->clockRate = 1755000;
    p->totalConstMem = 65536;
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 132;
    p->memoryClockRate = 2619000;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e) return e;
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    default: return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    LOCK;
    if (!g_ndev) return ret(cudaErrorNoDevice);
    g_host_waits++;
    host_joins_device(t_device);
    return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) { return cudaDeviceSynchronize(); }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x) case x: return #x;
    N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
    N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidSymbol) N(cudaErrorInvalidDevicePointer)
    N(cudaErrorInvalidMemcpyDirection) N(cudaErrorInvalidDeviceFunction) N(cudaErrorNoDevice)
    N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady)
    N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchFailure)
    N(cudaErrorNotSupported) N(cudaErrorUnknown)
#undef N
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}

/* ---- memory ---- */
cudaError_t cudaMalloc(void **p, size_t size) {
    LOCK;
    INJECT("cudaMalloc");
    if (!p) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    *p = NULL;
    if (!size) return cudaSuccess;
    const size_t limit = g_limits.empty() ? g_mem_budget : g_limits[t_device];
    if (g_used[t_device] > limit || size > limit - g_used[t_device]) return ret(cudaErrorMemoryAllocation);
    void *m = NULL;
    if (posix_memalign(&m, 256, size)) return ret(cudaErrorMemoryAllocation);
    gword *sh = g_checks ? (gword *)calloc((size + 3) / 4, sizeof(gword)) : NULL;
    if (g_checks && !sh) {
        free(m);
        return ret(cudaErrorMemoryAllocation);
    }
    alloc_t *a = new alloc_t{(char *)m, size, t_device, ++g_alloc_serial, sh};
    g_allocs.insert(std::upper_bound(g_allocs.begin(), g_allocs.end(), a, [](const alloc_t *x, const alloc_t *y) { return x->base < y->base; }), a);
    g_alloc_gen++;
    g_used[t_device] += size;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    LOCK;
    INJECT("cudaFree");
    if (!p) return cudaSuccess;
    auto it = std::find_if(g_allocs.begin(), g_allocs.end(), [&](const alloc_t *a) { return a->base == (char *)p; });
    if (it == g_allocs.end()) {
        fail("cudaFree(%p): not the start of a device allocation (freed twice, or a host pointer)", p);
        return ret(cudaErrorInvalidValue);
    }
    alloc_t *a = *it;
    /* cudaFree synchronises the device: nothing queued may still use the memory */
    g_host_waits++;
    host_joins_device(a->device);
    g_used[a->device] -= a->size;
    g_allocs.erase(it);
    g_alloc_gen++;
    free(a->base);
    free(a->shadow);
    delete a;
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) {
    LOCK;
    cudaError_t e = cudaSuccess;
    if (!resolve_stream(s, &e)) return ret(e);
    return cudaMalloc(p, size);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    LOCK;
    cudaError_t e = cudaSuccess;
    if (!resolve_stream(s, &e)) return ret(e);
    return cudaFree(p);
}
cudaError_t cudaMallocHost(void **p, size_t size) {
    LOCK;
    if (!p) return ret(cudaErrorInvalidValue);
    *p = malloc(size ? size : 1);
    if (!*p) return ret(cudaErrorMemoryAllocation);
    g_pinned[(char *)*p] = size;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int) { return cudaMallocHost(p, size); }
cudaError_t cudaFreeHost(void *p) {
    LOCK;
    if (!p) return cudaSuccess;
    if (!g_pinned.erase((char *)p)) {
        fail("cudaFreeHost(%p): not memory from cudaMallocHost", p);
        return ret(cudaErrorInvalidValue);
    }
    cudaDeviceSynchronize();
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *fr, size_t *total) {
    LOCK;
    if (!g_ndev) return ret(cudaErrorNoDevice);
    if (total) *total = g_mem_budget;
    if (fr) *fr = g_mem_budget - g_used[t_device];
    return cudaSuccess;
}

/* the performance counters' view of memsets and copies (emu_api.h) */
static emu_copy_hook_fn g_copy_hook;
static void *g_copy_user;
void emu_set_copy_hook(emu_copy_hook_fn fn, void *user) { g_copy_hook = fn, g_copy_user = user; }
static void copy_seen(const char *name, int kind, size_t n) {
    if (!g_copy_hook) return;
    emu_copy_info_t c = {name, kind, n};
    g_copy_hook(&c, g_copy_user);
}

/* One copy as an operation of stream s; sync: cudaMemcpy's rules, else cudaMemcpyAsync's. */
static cudaError_t memcpy_op(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t sh, int sync) {
    if (!n) return cudaSuccess;
    if (!dst || !src) return ret(cudaErrorInvalidValue);
    cudaError_t e = cudaSuccess;
    stream_t *s = resolve_stream(sh, &e);
    if (!s) return ret(e);
    alloc_t *da = find_alloc(dst, n), *sa = find_alloc(src, n);
    const int ddev = da != NULL || find_alloc(dst, 1) != NULL, sdev = sa != NULL || find_alloc(src, 1) != NULL;
    if (kind == cudaMemcpyDefault)
        kind = ddev ? (sdev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                    : (sdev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice) return ret(cudaErrorInvalidMemcpyDirection);
    const int want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const int want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    static const char *kn[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"};
    char what[128];
    snprintf(what, sizeof what, "%s %s%s", sync ? "cudaMemcpy" : "cudaMemcpyAsync", kn[kind],
             kind == cudaMemcpyHostToDevice && !is_pinned(src, n) ? " (pageable)" : "");
    if (want_d != ddev || want_s != sdev || (want_d && !da) || (want_s && !sa)) {
        fail("%s of %zu bytes from %p to %p: %s", what, n, src, dst,
             want_d && !ddev ? "the destination is not device memory"
             : want_s && !sdev ? "the source is not device memory"
             : !want_d && ddev ? "the destination is device memory"
             : !want_s && sdev ? "the source is device memory"
                               : "the range runs past the end of its allocation");
        return ret(cudaErrorInvalidValue);
    }
    const int pageable_src = kind == cudaMemcpyHostToDevice && !is_pinned(src, n);
    if (sync && pageable_src) g_host_waits++, host_joins(s); /* "a stream sync is performed before the copy" */
    op_t op;
    op_begin(&op, s, what);
    if (sa) check_access(&op, sa, src, n, 0, 0, NO_THREAD, 1, 0);
    if (da) check_access(&op, da, dst, n, 1, 0, NO_THREAD, 1, 0);
    memmove(dst, src, n);
    copy_seen(sync ? "cudaMemcpy" : "cudaMemcpyAsync", (int)kind, n);
    /* when the host may go on: pageable H2D once staged (not when the device has it), D2H when
     * complete (also from cudaMemcpyAsync into pageable memory), pinned sync copies when done */
    if (kind == cudaMemcpyDeviceToHost && (sync || !is_pinned(dst, n))) g_host_waits++, host_joins(s);
    else if (sync && kind == cudaMemcpyHostToDevice && !pageable_src) host_joins(s);
    else if (kind == cudaMemcpyHostToHost) host_joins(s);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    LOCK;
    INJECT("cudaMemcpy");
    return memcpy_op(dst, src, n, kind, NULL, 1);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    LOCK;
    INJECT("cudaMemcpyAsync");
    return memcpy_op(dst, src, n, kind, s, 0);
}
static cudaError_t memset_op(void *p, int v, size_t n, cudaStream_t sh, const char *what) {
    if (!n) return cudaSuccess;
    cudaError_t e = cudaSuccess;
    stream_t *s = resolve_stream(sh, &e);
    if (!s) return ret(e);
    alloc_t *a = find_alloc(p, n);
    if (!a) {
        fail("%s(%p, %d, %zu): not inside one device allocation", what, p, v, n);
        return ret(cudaErrorInvalidValue);
    }
    op_t op;
    op_begin(&op, s, what);
    check_access(&op, a, p, n, 1, 0, NO_THREAD, 1, 0);
    memset(p, v, n);
    copy_seen(what, -1, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    LOCK;
    return memset_op(p, v, n, NULL, "cudaMemset");
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    LOCK;
    INJECT("cudaMemsetAsync");
    return memset_op(p, v, n, s, "cudaMemsetAsync");
}

/* ---- streams and events ---- */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *p, unsigned flags) {
    LOCK;
    INJECT("cudaStreamCreate");
    if (!p || (flags & ~1u)) return ret(cudaErrorInvalidValue);
    if (!g_ndev) return ret(cudaErrorNoDevice);
    *p = (cudaStream_t)new_stream(t_device, flags, false);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *p) { return cudaStreamCreateWithFlags(p, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t h) {
    LOCK;
    stream_t *s = (stream_t *)h;
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread || !g_live_streams.count(s))
        return ret(cudaErrorInvalidResourceHandle);
    drain(s); /* its queued work still completes */
    s->alive = false;
    g_live_streams.erase(s);
    return cudaSuccess;
}
static stream_t *any_stream(cudaStream_t h, cudaError_t *e) {
    /* synchronising with a stream of another device is allowed */
    if (h && h != cudaStreamLegacy && h != cudaStreamPerThread && g_live_streams.count((stream_t *)h)) return (stream_t *)h;
    return resolve_stream(h, e);
}
cudaError_t cudaStreamSynchronize(cudaStream_t h) {
    LOCK;
    INJECT("cudaStreamSynchronize");
    cudaError_t e = cudaSuccess;
    stream_t *s = any_stream(h, &e);
    if (!s) return ret(e);
    g_host_waits++;
    if (drain(s)) return ret(cudaErrorLaunchFailure);
    host_joins(s);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t h) {
    LOCK;
    INJECT("cudaStreamQuery");
    cudaError_t e = cudaSuccess;
    stream_t *s = any_stream(h, &e);
    if (!s) return ret(e);
    if (!stream_progress(s)) return cudaErrorNotReady;
    host_joins(s);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int) {
    LOCK;
    cudaError_t e = cudaSuccess;
    stream_t *s = resolve_stream(h, &e);
    if (!s) return ret(e);
    CUevent_st *E = live_event(ev);
    if (!E) return ret(cudaErrorInvalidResourceHandle);
    if (!E->recorded) {
        fail("cudaStreamWaitEvent: the event was never recorded, so the stream waits for nothing");
        return cudaSuccess;
    }
    if (E->s) drain(E->s);
    s->vc.join(E->vc);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *p, unsigned flags) {
    LOCK;
    INJECT("cudaEventCreate");
    if (!p) return ret(cudaErrorInvalidValue);
    CUevent_st *E = new CUevent_st();
    E->alive = true;
    E->flags = flags;
    E->device = t_device;
    g_live_events.insert(E);
    *p = E;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *p) { return cudaEventCreateWithFlags(p, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    LOCK;
    CUevent_st *E = live_event(ev);
    if (!E) return ret(cudaErrorInvalidResourceHandle);
    E->alive = false;
    g_live_events.erase(E); /* kept allocated: a later use of the handle is then recognised */
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t h) {
    LOCK;
    INJECT("cudaEventRecord");
    CUevent_st *E = live_event(ev);
    if (!E) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t e = cudaSuccess;
    stream_t *s = resolve_stream(h, &e);
    if (!s) return ret(e);
    s->vc.join(host_vc());
    E->vc = s->vc;
    E->s = s;
    E->recorded = true;
    E->ms = now_ms();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    LOCK;
    INJECT("cudaEventSynchronize");
    CUevent_st *E = live_event(ev);
    if (!E) return ret(cudaErrorInvalidResourceHandle);
    if (!E->recorded) {
        fail("cudaEventSynchronize: the event was never recorded, so nothing is waited for");
        return cudaSuccess;
    }
    g_host_waits++;
    if (E->s) drain(E->s);
    host_vc().join(E->vc);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t ev) {
    LOCK;
    CUevent_st *E = live_event(ev);
    if (!E) return ret(cudaErrorInvalidResourceHandle);
    if (E->recorded && E->s && !stream_progress(E->s)) return cudaErrorNotReady;
    host_vc().join(E->vc);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    LOCK;
    INJECT("cudaEventElapsedTime");
    CUevent_st *A = live_event(a), *B = live_event(b);
    if (!ms || !A || !B) return ret(cudaErrorInvalidValue);
    if (!A->recorded || !B->recorded || (A->flags & cudaEventDisableTiming) || (B->flags & cudaEventDisableTiming))
        return ret(cudaErrorInvalidResourceHandle);
    /* wall time of the emulation: says nothing about a GPU's */
    *ms = (float)(B->ms - A->ms);
    return cudaSuccess;
}

/* ---- symbols and function attributes ---- */
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && (value < 0 || value > 227 * 1024))
        return ret(cudaErrorInvalidValue);
    return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbol(const void *sym, const void *src, size_t n, size_t off, cudaMemcpyKind) {
    LOCK;
    memcpy((char *)sym + off, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void *dst, const void *sym, size_t n, size_t off, cudaMemcpyKind) {
    LOCK;
    cudaDeviceSynchronize();
    memcpy(dst, (const char *)sym + off, n);
    return cudaSuccess;
}
void emu_set_memory_limit(int dev, size_t bytes) {
    LOCK;
    if (dev < 0 || dev >= g_ndev) return;
    /* one budget for every device: the limit is given per device, the others keep theirs */
    if (g_limits.empty()) g_limits.assign(g_ndev, g_mem_budget);
    g_limits[dev] = bytes;
}
} /* extern "C" */
