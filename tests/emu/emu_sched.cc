/* tests/emu/emu_sched.cc: how the emulator runs a kernel (docs/DEVICES.md, "The emulator").
 *
 * A launch runs its blocks one at a time, in a seeded random order. A block's threads are
 * fibers (a hand-written context switch: a few loads and stores, no system call), run in a
 * seeded random order, each until it waits: at __syncthreads, at a warp-synchronous call
 * (shuffle, vote, __syncwarp), or at its end. When every thread of the block waits, the warp
 * calls whose every lane has arrived complete (32 lanes in lockstep: each gets its result);
 * a warp call that cannot complete -- a lane of its mask exited, waits at __syncthreads or at
 * another call, or does not exist -- is a divergent warp call and an error. With no warp call
 * left, a barrier that every live thread reached opens; one that some threads reached after
 * others exited is an error too (undefined on a GPU).
 *
 * Every load and store of the emulated .cu file calls in here (AddressSanitizer's callbacks,
 * renamed: see the end of this file), which classifies the address: the running
 * block's shared memory (the .emu_shared section for __shared__ variables, the launch's buffer
 * for extern __shared__), the thread's own stack (local memory), the launch's parameters,
 * static data (__device__/__constant__ variables), or a device allocation. Shared memory is
 * checked byte by byte for reads of bytes this block never wrote and for races: two threads
 * touching a byte, one of them writing, with no __syncthreads between (nor, inside a warp, a
 * warp-synchronous call both took part in), atomics against atomics excepted. Device memory is
 * checked by emu_runtime.cc (stream order, races within a launch, reads of never-written
 * memory); anything else is a host pointer handed to a kernel, an error. Then the hooks of
 * emu_api.h see the access. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_map>

#include "emu_device.h"
#include "emu_internal.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {

enum { T_RUN, T_BAR, T_WARP, T_DONE };
static const size_t STACK = 128 << 10; /* per fiber; a guard page below each */
static const unsigned MAX_THREADS = 1024;

struct logent {
    const void *pc, *addr;
    unsigned size, flags, space;
};
struct thread_t {
    void *sp;
    char *stack_lo;
    uint3 tid;
    unsigned linear, warp, lane;
    int state;
    int acquire;                 /* 1: a __threadfence after an atomic of its block (check_access's acquired) */
    int bar_op, bar_pred, bar_res;
    int wk, warg, wwidth;
    unsigned wmask;
    uint64_t wval, wres;
    void *fake;
    std::vector<logent> log; /* accesses since the warp last waited (warp hook only) */
};
struct warp_t {
    uint32_t full_gen;           /* the last warp call with every lane of the warp */
    uint32_t with[32][32];       /* [a][b]: the last warp call a and b both took part in */
};
/* One byte of shared memory as the race check sees it. */
struct sbyte {
    uint32_t wblk, wep, wgen;    /* the block (serial), barrier epoch and warp-call count of the last write */
    uint32_t rblk, rep, rgen;    /* ... of the reads since */
    uint16_t wt, rt, rwarp;      /* writer, reader (the first), the readers' warp (0xffff: several) */
    uint8_t watom, rmany;
};

struct launch_state {
    const char *name;
    dim3 grid, block;
    size_t smem;
    unsigned nthreads, nwarps;
    body_fn body;
    void *args;
    size_t args_size;
    uint3 bid;
    unsigned block_linear;
    uint32_t block_serial, epoch;
    int block_atomic;            /* a thread of the running block has done an atomic */
    thread_t *threads;
    char *dyn;
    sbyte *dyn_shadow;
    op_t op;
    int device;
    int fast; /* the running block is not observed (FT_EMU_SAMPLE_BLOCKS) */
    emu_launch_info_t info;
};

thread_local launch_state *cur_launch;
static thread_local unsigned long long t_flops; /* __emu_flops of this host thread's kernel threads */
static thread_local unsigned long long t_tensor_flops; /* mma_m16n8k16_bf16's, the same way */
static thread_local unsigned long long t_sfu; /* __emu_sfu: special-function unit operations, the same way */
static thread_local thread_t *cur_thread;

/* ---- process-wide settings ---- */
static uint64_t g_seed;
static int g_seed_set;
static int g_count_errors;
static unsigned long long g_errors;
static char *g_sh_lo;          /* the .emu_shared section */
static size_t g_sh_len;
static sbyte *g_sh_shadow;
static uintptr_t g_static_lo, g_static_hi;
static uint32_t g_block_serial, g_gen;
static int g_stats;
static unsigned long long g_launches, g_blocks, g_threads, g_accesses;
static emu_launch_hook_fn g_launch_hook;
static emu_access_hook_fn g_access_hook;
static emu_warp_access_hook_fn g_warp_hook;
static void *g_launch_user, *g_access_user, *g_warp_user;

std::recursive_mutex &big_lock() {
    static std::recursive_mutex m;
    return m;
}
thread_local int lock_depth;
void pause_unlocked(unsigned usec) {
    const int d = lock_depth;
    for (int i = 0; i < d; i++) big_lock().unlock();
    usleep(usec);
    for (int i = 0; i < d; i++) big_lock().lock();
}

uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

struct kstat {
    unsigned long long launches, threads, accesses;
};
static std::map<std::string, kstat> g_kstats;
static void print_stats() {
    fprintf(stderr, "emu: %llu launches, %llu blocks, %llu threads, %llu observed accesses\n", g_launches, g_blocks,
            g_threads, g_accesses);
    std::vector<std::pair<unsigned long long, std::string>> v;
    for (auto &k : g_kstats) v.push_back({k.second.accesses, k.first});
    std::sort(v.rbegin(), v.rend());
    for (size_t i = 0; i < v.size() && i < 20; i++) {
        const kstat &k = g_kstats[v[i].second];
        fprintf(stderr, "emu:   %-28s %9llu launches %12llu threads %13llu accesses\n", v[i].second.c_str(), k.launches,
                k.threads, k.accesses);
    }
}

uint64_t seed() {
    guard g;
    if (!g_seed_set) {
        const char *e = getenv("FT_EMU_SEED");
        if (e && *e) {
            g_seed = strtoull(e, NULL, 0);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            g_seed = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid()) % 1000000007ull;
        }
        g_seed_set = 1;
        if (getenv("FT_EMU_STATS")) g_stats = 1, atexit(print_stats);
        const char *m = getenv("FT_EMU_ON_ERROR");
        g_count_errors = m && !strcmp(m, "count");
        fprintf(stderr, "emu: block and thread order seed %llu (FT_EMU_SEED=%llu repeats this run's order)\n",
                (unsigned long long)g_seed, (unsigned long long)g_seed);
    }
    return g_seed;
}

void vfail(const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    g_errors++;
    fprintf(stderr, "emu: ERROR: %s\nemu: seed %llu (FT_EMU_SEED=%llu reproduces the order)\n", msg,
            (unsigned long long)g_seed, (unsigned long long)g_seed);
    if (g_count_errors) return;
#ifdef EMU_ASAN
    __sanitizer_print_stack_trace();
#endif
    fflush(stderr);
    abort();
}
void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(fmt, ap);
    va_end(ap);
}

/* ---- fault injection ---- */
static std::map<std::string, int> g_inject; /* name -> calls to go before the failing one */
static void inject_env() {
    static int done;
    if (done) return;
    done = 1;
    const char *e = getenv("FT_EMU_FAIL");
    if (!e) return;
    std::string all(e);
    size_t at = 0;
    while (at < all.size()) {
        size_t comma = all.find(',', at);
        std::string item = all.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        size_t colon = item.find(':');
        int nth = colon == std::string::npos ? 1 : atoi(item.c_str() + colon + 1);
        g_inject[item.substr(0, colon)] = nth > 0 ? nth : 1;
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
}
int injected(const char *name) {
    guard g;
    inject_env();
    auto it = g_inject.find(name);
    if (it == g_inject.end()) return 0;
    if (--it->second > 0) return 0;
    g_inject.erase(it);
    fprintf(stderr, "emu: %s fails as asked (fault injection)\n", name);
    return 1;
}

/* ---- where __shared__ variables and static data are ---- */
static int phdr_cb(struct dl_phdr_info *info, size_t, void *data) {
    /* the first object is the executable */
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + p->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + p->p_memsz > hi ? a + p->p_memsz : hi;
    }
    g_static_lo = lo, g_static_hi = hi;
    *(uintptr_t *)data = info->dlpi_addr;
    return 1;
}

static void find_shared_section() {
    uintptr_t bias = 0;
    dl_iterate_phdr(phdr_cb, &bias);
    int fd = open("/proc/self/exe", O_RDONLY);
    if (fd < 0) return;
    ElfW(Ehdr) eh;
    if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && eh.e_shentsize == sizeof(ElfW(Shdr))) {
        std::vector<ElfW(Shdr)> sh(eh.e_shnum);
        if (pread(fd, sh.data(), sizeof(ElfW(Shdr)) * eh.e_shnum, eh.e_shoff) == (ssize_t)(sizeof(ElfW(Shdr)) * eh.e_shnum) &&
            eh.e_shstrndx < eh.e_shnum) {
            std::vector<char> names(sh[eh.e_shstrndx].sh_size + 1, 0);
            if (pread(fd, names.data(), sh[eh.e_shstrndx].sh_size, sh[eh.e_shstrndx].sh_offset) > 0)
                for (auto &s : sh)
                    if (s.sh_name < names.size() && !strcmp(&names[s.sh_name], ".emu_shared")) {
                        g_sh_lo = (char *)(bias + s.sh_addr);
                        g_sh_len = s.sh_size;
                    }
        }
    }
    close(fd);
    if (g_sh_len) g_sh_shadow = (sbyte *)calloc(g_sh_len, sizeof(sbyte));
}

/* ---- fibers ---- */
#ifndef __x86_64__
#error "the emulator's fibers switch with x86-64 code (emu_switch below): add a switch for this architecture (ucontext would do, slower)"
#endif
extern "C" void emu_switch(void **save_sp, void *to_sp);
extern "C" void emu_fiber_entry();
/* Saves the callee-saved registers, MXCSR and the x87 control word on the current stack,
 * stores the stack pointer in *save_sp, loads to_sp and restores the same from there. A new
 * fiber's stack holds such a frame whose return address is emu_fiber_entry, which calls
 * r13(r12). */
__asm__(R"(
    .text
    .globl emu_switch
    .type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
    .globl emu_fiber_entry
    .type emu_fiber_entry,@function
emu_fiber_entry:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size emu_fiber_entry, .-emu_fiber_entry
    .section .note.GNU-stack,"",@progbits
    .text
)");

struct host_ctx {
    void *sp;
    void *fake;
    const void *bottom;
    size_t size;
    char *stacks;            /* MAX_THREADS fiber stacks, each above a guard page */
    std::vector<thread_t> threads;
    std::vector<warp_t> warps;
    std::vector<unsigned> order;
};
static thread_local host_ctx *H;

static host_ctx *host() {
    if (H) return H;
    H = new host_ctx();
    const size_t each = STACK + 4096;
    H->stacks = (char *)mmap(NULL, each * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (H->stacks == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map the fiber stacks\n");
        abort();
    }
    for (unsigned i = 0; i < MAX_THREADS; i++) mprotect(H->stacks + i * each, 4096, PROT_NONE);
    H->threads.resize(MAX_THREADS);
    for (unsigned i = 0; i < MAX_THREADS; i++) H->threads[i].stack_lo = H->stacks + i * each + 4096;
    H->warps.resize(MAX_THREADS / 32);
    return H;
}

static void fiber_main(thread_t *t);

static void fiber_init(thread_t *t) {
    uint64_t *sp = (uint64_t *)(t->stack_lo + STACK - 128);
    sp[0] = 0x1f80ull | (0x037full << 32); /* MXCSR (all masked, round to nearest), x87 control */
    sp[1] = 0;                             /* r15 */
    sp[2] = 0;                             /* r14 */
    sp[3] = (uint64_t)(uintptr_t)&fiber_main; /* r13 */
    sp[4] = (uint64_t)(uintptr_t)t;        /* r12 */
    sp[5] = 0;                             /* rbx */
    sp[6] = 0;                             /* rbp */
    sp[7] = (uint64_t)(uintptr_t)&emu_fiber_entry;
    t->sp = sp;
}

/* host -> fiber t, back when t waits or ends */
static void resume(thread_t *t) {
    host_ctx *h = H;
    cur_thread = t;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&h->fake, t->stack_lo, STACK);
#endif
    emu_switch(&h->sp, t->sp);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(h->fake, NULL, NULL);
#endif
    cur_thread = NULL;
}

/* fiber -> host */
static void yield() {
    thread_t *t = cur_thread;
    host_ctx *h = H;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&t->fake, h->bottom, h->size);
#endif
    emu_switch(&t->sp, h->sp);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(t->fake, &h->bottom, &h->size);
#endif
}

static void fiber_main(thread_t *t) {
    host_ctx *h = H;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &h->bottom, &h->size);
#endif
    launch_state *L = cur_launch;
    L->body(L->args);
    t->state = T_DONE;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, h->bottom, h->size);
#endif
    emu_switch(&t->sp, h->sp);
    __builtin_unreachable();
}

/* ---- builtins ---- */
static thread_t *need_thread(const char *what) {
    thread_t *t = cur_thread;
    if (!t) {
        fail("%s used outside a kernel", what);
        abort();
    }
    return t;
}
uint3 thread_idx() { return need_thread("threadIdx")->tid; }
uint3 block_idx() {
    need_thread("blockIdx");
    return cur_launch->bid;
}
dim3 block_dim() {
    need_thread("blockDim");
    return cur_launch->block;
}
dim3 grid_dim() {
    need_thread("gridDim");
    return cur_launch->grid;
}
void *dyn_shared() {
    need_thread("extern __shared__");
    return cur_launch->dyn;
}
void threadfence() {
    thread_t *t = need_thread("__threadfence");
    if (cur_launch->block_atomic) t->acquire = 1;
}
long long clock64() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
void nanosleep(unsigned) {}
void trap(const char *what) {
    thread_t *t = need_thread(what);
    launch_state *L = cur_launch;
    fail("kernel %s block (%u,%u,%u) thread (%u,%u,%u) executed %s", L->name, L->bid.x, L->bid.y, L->bid.z,
         t->tid.x, t->tid.y, t->tid.z, what);
    abort();
}

static const char *where(char *buf, size_t cap) {
    thread_t *t = cur_thread;
    launch_state *L = cur_launch;
    snprintf(buf, cap, "kernel %s block (%u,%u,%u) thread (%u,%u,%u)", L->name, L->bid.x, L->bid.y, L->bid.z,
             t->tid.x, t->tid.y, t->tid.z);
    return buf;
}

void syncthreads() {
    thread_t *t = need_thread("__syncthreads");
    t->state = T_BAR;
    t->bar_op = -1;
    yield();
}
int syncthreads_reduce(int op, int pred) {
    thread_t *t = need_thread("__syncthreads_count/and/or");
    t->state = T_BAR;
    t->bar_op = op;
    t->bar_pred = pred != 0;
    yield();
    return t->bar_res;
}

uint64_t warp_op(int kind, unsigned mask, uint64_t value, int arg, int width) {
    thread_t *t = need_thread("a warp-synchronous intrinsic");
    t->state = T_WARP;
    t->wk = kind;
    t->wmask = mask;
    t->wval = value;
    t->warg = arg;
    t->wwidth = width;
    yield();
    return t->wres;
}

unsigned active_mask() {
    thread_t *t = need_thread("__activemask");
    launch_state *L = cur_launch;
    unsigned m = 0, base = t->warp * 32;
    for (unsigned l = 0; l < 32 && base + l < L->nthreads; l++)
        if (H->threads[base + l].state != T_DONE) m |= 1u << l;
    return m;
}

/* ---- the access checks ---- */
static const char *kind_name(int k) {
    static const char *n[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                              "__match_any_sync", "__match_all_sync", "__reduce_add_sync",
                              "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync",
                              "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync",
                              "__reduce_xor_sync"};
    return k >= 0 && k < W_KINDS ? n[k] : "?";
}

EMU_HOT static int warp_ordered(unsigned a, unsigned b, uint32_t gen) {
    /* a's access (at warp-call count gen) happened before b's through a warp call both made */
    if (a / 32 != b / 32) return 0;
    const warp_t &w = H->warps[a / 32];
    return w.full_gen > gen || w.with[b % 32][a % 32] > gen;
}

EMU_HOT static void shared_access(thread_t *t, sbyte *sh, size_t off, unsigned size, unsigned flags, const void *addr) {
    launch_state *L = cur_launch;
    const uint32_t bs = L->block_serial, E = L->epoch, me = t->linear, gen = g_gen;
    const int atomic = (flags & EMU_ATOMIC) != 0;
    char wb[160];
    for (unsigned i = 0; i < size; i++) {
        sbyte &b = sh[off + i];
        if (flags & EMU_LOAD) {
            if (b.wblk != bs) {
                fail("%s reads %u byte(s) of shared memory at %p that no thread of this block has written "
                     "(yet: is a __syncthreads() missing between the write and this read?)", where(wb, sizeof wb), size, addr);
                return;
            }
            if (b.wt != me && b.wep == E && !b.watom && !warp_ordered(b.wt, me, b.wgen)) {
                fail("%s reads shared memory at %p that thread %u wrote with no barrier between (a race: "
                     "__syncthreads() missing?)", where(wb, sizeof wb), addr, (unsigned)b.wt);
                return;
            }
            if (b.rblk == bs && b.rep == E) {
                if (b.rt != me) b.rmany = 1;
                if (b.rwarp != t->warp) b.rwarp = 0xffff;
                b.rgen = gen;
            } else {
                b.rblk = bs, b.rep = E, b.rt = (uint16_t)me, b.rmany = 0, b.rwarp = (uint16_t)t->warp, b.rgen = gen;
            }
        }
        if (flags & EMU_STORE) {
            if (b.wblk == bs && b.wep == E && b.wt != me && !(atomic && b.watom) && !warp_ordered(b.wt, me, b.wgen)) {
                fail("%s writes shared memory at %p that thread %u also wrote, with no barrier between (a race: "
                     "__syncthreads() missing?)",
                     where(wb, sizeof wb), addr, (unsigned)b.wt);
                return;
            }
            if (b.rblk == bs && b.rep == E && !atomic) {
                int other = b.rmany || b.rt != me;
                int ordered = b.rmany ? (b.rwarp == t->warp && H->warps[t->warp].full_gen > b.rgen)
                                      : warp_ordered(b.rt, me, b.rgen);
                if (other && !ordered) {
                    fail("%s writes shared memory at %p that thread %u read, with no barrier between (a race: "
                         "__syncthreads() missing?)",
                         where(wb, sizeof wb), addr, (unsigned)b.rt);
                    return;
                }
            }
            b.wblk = bs, b.wep = E, b.wgen = gen, b.wt = (uint16_t)me, b.watom = (uint8_t)atomic;
            b.rblk = 0;
        }
    }
}

EMU_HOT static void on_access(const void *addr, unsigned size, unsigned flags, const void *pc) {
    thread_t *t = cur_thread;
    g_accesses++;
    launch_state *L = cur_launch;
    if (L->fast) return;
    const uintptr_t a = (uintptr_t)addr;
    unsigned space;
    if (a - (uintptr_t)g_sh_lo < g_sh_len) {
#ifdef EMU_ASAN
        if (__asan_region_is_poisoned((void *)addr, size)) {
            char wb[160];
            fail("%s %s %u byte(s) at %p: out of bounds of a __shared__ array", where(wb, sizeof wb),
                 flags & EMU_STORE ? "writes" : "reads", size, addr);
            return;
        }
#endif
        if (a + size > (uintptr_t)g_sh_lo + g_sh_len) size = (unsigned)((uintptr_t)g_sh_lo + g_sh_len - a);
        shared_access(t, g_sh_shadow, a - (uintptr_t)g_sh_lo, size, flags, addr);
        space = EMU_SHARED;
    } else if (L->dyn && a - (uintptr_t)L->dyn < L->smem + 256) {
        if (a + size > (uintptr_t)L->dyn + L->smem) {
            char wb[160];
            fail("%s %s %u byte(s) at %p: past the end of the launch's %zu bytes of dynamic shared memory",
                 where(wb, sizeof wb), flags & EMU_STORE ? "writes" : "reads", size, addr, L->smem);
            return;
        }
        unsigned n = size;
        shared_access(t, L->dyn_shadow, a - (uintptr_t)L->dyn, n, flags, addr);
        space = EMU_SHARED;
    } else if (a - (uintptr_t)t->stack_lo < STACK) {
        space = EMU_LOCAL;
    } else if (a - (uintptr_t)L->args < L->args_size) {
        space = EMU_PARAM;
    } else {
        alloc_t *al = find_alloc(addr, size);
        if (al) {
            char wb[160];
            if (al->device != L->device)
                fail("%s on device %d accesses memory of device %d at %p (no peer access in this program)",
                     where(wb, sizeof wb), L->device, al->device, addr);
            check_access(&L->op, al, addr, size, (flags & EMU_STORE) != 0, (flags & EMU_ATOMIC) != 0,
                         L->block_linear * L->nthreads + t->linear, L->nthreads, L->epoch, t->acquire);
            space = EMU_GLOBAL;
        } else if (a >= g_static_lo && a < g_static_hi) {
            space = EMU_STATIC;
        } else {
            char wb[160];
            fail("%s %s %u byte(s) at %p, which is no device allocation (a host pointer, freed memory, or "
                 "past the end of an allocation)", where(wb, sizeof wb), flags & EMU_STORE ? "writes" : "reads", size, addr);
            return;
        }
    }
    if (g_access_hook) {
        emu_access_t e = {&L->info, L->block_linear, t->linear, t->warp, t->lane, pc, addr, size, flags, space};
        g_access_hook(&e, g_access_user);
    }
    if (g_warp_hook) t->log.push_back(logent{pc, addr, size, flags, space});
}

uint64_t atomic(void *p, int op, int type, uint64_t v, uint64_t cmp) {
    need_thread("an atomic");
    static const unsigned sizes[] = {4, 4, 8, 8, 4, 8, 2, 2, 4};
    const unsigned size = sizes[type];
    on_access(p, size, EMU_LOAD | EMU_STORE | EMU_ATOMIC, __builtin_return_address(0));
    cur_launch->block_atomic = 1;
    uint64_t old = 0;
    memcpy(&old, p, size);
    uint64_t nv = old;
    auto as_f = [](uint64_t u) { float f; uint32_t w = (uint32_t)u; memcpy(&f, &w, 4); return f; };
    auto of_f = [](float f) { uint32_t w; memcpy(&w, &f, 4); return (uint64_t)w; };
    auto bf = [](uint16_t b) { uint32_t w = (uint32_t)b << 16; float f; memcpy(&f, &w, 4); return f; };
    auto rn = [](float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x00400000u) >> 16);
        return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    };
    switch (type) {
    case T_F32: {
        float a = as_f(old), b = as_f(v);
        if (op == A_ADD) nv = of_f(a + b);
        else if (op == A_EXCH) nv = v;
        else fail("atomic operation %d on float is not one CUDA has", op);
        break;
    }
    case T_F64: {
        double a, b;
        memcpy(&a, &old, 8);
        memcpy(&b, &v, 8);
        if (op == A_ADD) a += b;
        else fail("atomic operation %d on double is not one CUDA has", op);
        memcpy(&nv, &a, 8);
        break;
    }
    case T_BF16:
        nv = rn(bf((uint16_t)old) + bf((uint16_t)v));
        break;
    case T_BF162:
        nv = (uint64_t)rn(bf((uint16_t)old) + bf((uint16_t)v)) |
             ((uint64_t)rn(bf((uint16_t)(old >> 16)) + bf((uint16_t)(v >> 16))) << 16);
        break;
    default: {
        const int sgn = type == T_I32 || type == T_I64;
        const unsigned bits = size * 8;
        const uint64_t m = bits == 64 ? ~0ull : ((1ull << bits) - 1);
        auto sx = [&](uint64_t u) { return bits == 64 ? (int64_t)u : (int64_t)(int32_t)(uint32_t)u; };
        switch (op) {
        case A_ADD: nv = old + v; break;
        case A_SUB: nv = old - v; break;
        case A_EXCH: nv = v; break;
        case A_MIN: nv = sgn ? (sx(v) < sx(old) ? v : old) : ((v & m) < (old & m) ? v : old); break;
        case A_MAX: nv = sgn ? (sx(v) > sx(old) ? v : old) : ((v & m) > (old & m) ? v : old); break;
        case A_INC: nv = (old & m) >= (v & m) ? 0 : old + 1; break;
        case A_DEC: nv = ((old & m) == 0 || (old & m) > (v & m)) ? v : old - 1; break;
        case A_CAS: nv = (old & m) == (cmp & m) ? v : old; break;
        case A_AND: nv = old & v; break;
        case A_OR: nv = old | v; break;
        case A_XOR: nv = old ^ v; break;
        }
        nv &= m;
    }
    }
    memcpy(p, &nv, size);
    return old;
}

/* ---- warp calls ---- */
static void finish_warp_op(launch_state *L, unsigned w, unsigned mask) {
    warp_t &wp = H->warps[w];
    const uint32_t gen = ++g_gen;
    if (mask == 0xffffffffu) {
        wp.full_gen = gen;
    } else {
        for (unsigned a = 0; a < 32; a++)
            if (mask >> a & 1)
                for (unsigned b = 0; b < 32; b++)
                    if (mask >> b & 1) wp.with[a][b] = gen;
    }
    (void)L;
}

static const char *state_name(const thread_t &t, char *buf, size_t cap) {
    switch (t.state) {
    case T_DONE: return "has exited";
    case T_BAR: return "waits at __syncthreads()";
    case T_WARP: snprintf(buf, cap, "waits at %s with mask 0x%08x", kind_name(t.wk), t.wmask); return buf;
    default: return "runs";
    }
}

/* Completes every warp call whose lanes have all arrived; 1 when any did. With none
 * completable although some wait: the divergence is reported. */
static int resolve_warps(launch_state *L) {
    thread_t *T = H->threads.data();
    int any = 0, waiting = 0;
    for (unsigned w = 0; w < L->nwarps; w++) {
        const unsigned base = w * 32, nl = std::min(32u, L->nthreads - base);
        for (unsigned l = 0; l < nl; l++) {
            thread_t &t = T[base + l];
            if (t.state != T_WARP) continue;
            waiting++;
            const unsigned M = t.wmask;
            char wb[160], sb[96];
            const char *bad = NULL;
            unsigned badl = 0;
            if (!(M >> l & 1)) bad = "is not in its own mask", badl = l;
            for (unsigned j = 0; j < 32 && !bad; j++) {
                if (!(M >> j & 1)) continue;
                if (j >= nl) { bad = "does not exist (the block's last warp is partial)", badl = j; break; }
                const thread_t &u = T[base + j];
                if (u.state != T_WARP || u.wk != t.wk || u.wmask != M) { bad = state_name(u, sb, sizeof sb); badl = j; }
            }
            if (bad) {
                const char *verb = (M >> l & 1) ? "lane" : "the calling lane";
                thread_t *save = cur_thread;
                cur_thread = &t;
                fail("divergent %s in %s: mask 0x%08x, but %s %u %s", kind_name(t.wk), where(wb, sizeof wb), M,
                     verb, badl, bad);
                cur_thread = save;
                /* counting errors: let the lanes that did arrive go on with their own values */
                for (unsigned j = 0; j < nl; j++)
                    if (T[base + j].state == T_WARP && T[base + j].wmask == M) {
                        T[base + j].wres = T[base + j].wval;
                        T[base + j].state = T_RUN;
                    }
                any = 1;
                continue;
            }
            /* every lane of M is here: exchange */
            const int k = t.wk, wd = t.wwidth;
            if (k <= W_SHFL_XOR && (wd < 1 || wd > 32 || (wd & (wd - 1)))) {
                fail("%s in kernel %s: width %d is not a power of 2 up to 32", kind_name(k), L->name, wd);
            }
            uint64_t agg = 0;
            if (k == W_BALLOT || k == W_ANY || k == W_ALL) {
                unsigned b = 0;
                for (unsigned j = 0; j < 32; j++)
                    if (M >> j & 1 && T[base + j].wval) b |= 1u << j;
                agg = k == W_BALLOT ? b : k == W_ANY ? (b != 0) : (b == M);
            } else if (k >= W_RED_ADD && k <= W_RED_XOR) {
                uint32_t r = k == W_RED_AND ? 0xffffffffu : (k == W_RED_MIN ? 0xffffffffu : 0);
                int32_t rs = k == W_RED_MINS ? INT32_MAX : INT32_MIN;
                for (unsigned j = 0; j < 32; j++) {
                    if (!(M >> j & 1)) continue;
                    uint32_t v = (uint32_t)T[base + j].wval;
                    switch (k) {
                    case W_RED_ADD: r += v; break;
                    case W_RED_MIN: r = std::min(r, v); break;
                    case W_RED_MAX: r = std::max(r, v); break;
                    case W_RED_MINS: rs = std::min(rs, (int32_t)v); break;
                    case W_RED_MAXS: rs = std::max(rs, (int32_t)v); break;
                    case W_RED_AND: r &= v; break;
                    case W_RED_OR: r |= v; break;
                    case W_RED_XOR: r ^= v; break;
                    }
                }
                agg = (k == W_RED_MINS || k == W_RED_MAXS) ? (uint32_t)rs : r;
            } else if (k == W_MATCH_ALL) {
                agg = M;
                for (unsigned j = 0; j < 32; j++)
                    if (M >> j & 1 && T[base + j].wval != t.wval) agg = 0;
            }
            for (unsigned j = 0; j < 32; j++) {
                if (!(M >> j & 1)) continue;
                thread_t &u = T[base + j];
                uint64_t res = agg;
                if (k <= W_SHFL_XOR) {
                    const unsigned seg = j & ~(unsigned)(wd - 1), d = (unsigned)u.warg;
                    unsigned src = j;
                    if (k == W_SHFL_IDX) src = seg + (d & (unsigned)(wd - 1));
                    else if (k == W_SHFL_UP) src = (j - seg) >= d ? j - d : j;
                    else if (k == W_SHFL_DOWN) src = (j - seg) + d < (unsigned)wd ? j + d : j;
                    else { src = j ^ d; if (src > (seg | (unsigned)(wd - 1)) || src > 31) src = j; }
                    if (!(M >> src & 1)) {
                        thread_t *save = cur_thread;
                        cur_thread = &u;
                        fail("%s in %s reads lane %u, which is not in the mask 0x%08x", kind_name(k),
                             where(wb, sizeof wb), src, M);
                        cur_thread = save;
                        src = j;
                    }
                    res = T[base + src].wval;
                } else if (k == W_MATCH_ANY) {
                    unsigned m = 0;
                    for (unsigned i = 0; i < 32; i++)
                        if (M >> i & 1 && T[base + i].wval == u.wval) m |= 1u << i;
                    res = m;
                }
                u.wres = res;
            }
            for (unsigned j = 0; j < 32; j++)
                if (M >> j & 1) T[base + j].state = T_RUN;
            finish_warp_op(L, w, M);
            any = 1;
        }
    }
    (void)waiting;
    return any;
}

/* ---- warp grouping of the accesses (emu_set_warp_access_hook) ---- */
static void flush_warp_logs(launch_state *L) {
    thread_t *T = H->threads.data();
    for (unsigned w = 0; w < L->nwarps; w++) {
        const unsigned base = w * 32, nl = std::min(32u, L->nthreads - base);
        struct key_hash {
            size_t operator()(const std::pair<const void *, unsigned> &k) const { return std::hash<const void *>()(k.first) ^ (k.second * 0x9e3779b9u); }
        };
        std::unordered_map<std::pair<const void *, unsigned>, size_t, key_hash> at;
        std::vector<emu_warp_access_t> groups;
        for (unsigned l = 0; l < nl; l++) {
            std::unordered_map<const void *, unsigned> count;
            for (const logent &e : T[base + l].log) {
                unsigned k = count[e.pc]++;
                auto it = at.find({e.pc, k});
                size_t g;
                if (it == at.end()) {
                    g = groups.size();
                    at[{e.pc, k}] = g;
                    emu_warp_access_t wa;
                    memset(&wa, 0, sizeof wa);
                    wa.launch = &L->info, wa.block = L->block_linear, wa.warp = w, wa.pc = e.pc;
                    wa.size = e.size, wa.flags = e.flags, wa.space = e.space;
                    groups.push_back(wa);
                } else {
                    g = it->second;
                }
                groups[g].mask |= 1u << l;
                groups[g].addr[l] = e.addr;
            }
            T[base + l].log.clear();
        }
        for (const emu_warp_access_t &g : groups) g_warp_hook(&g, g_warp_user);
    }
}

/* ---- a block ---- */
static void run_block(launch_state *L, uint64_t rng) {
    host_ctx *h = H;
    thread_t *T = h->threads.data();
    const unsigned n = L->nthreads;
    L->block_atomic = 0;
    for (unsigned i = 0; i < n; i++) {
        thread_t &t = T[i];
        t.linear = i;
        t.tid = uint3{i % L->block.x, (i / L->block.x) % L->block.y, i / (L->block.x * L->block.y)};
        t.warp = i / 32, t.lane = i % 32;
        t.state = T_RUN;
        t.acquire = 0;
        t.log.clear();
        fiber_init(&t);
    }
    /* the order threads run in, between two waits (a seeded shuffle) */
    std::vector<unsigned> &ord = h->order;
    ord.resize(n);
    for (unsigned i = 0; i < n; i++) ord[i] = i;
    for (unsigned i = n; i > 1; i--) {
        rng = mix64(rng);
        std::swap(ord[i - 1], ord[rng % i]);
    }
    L->block_serial = ++g_block_serial;
    g_blocks++;
    g_threads += n;
    L->epoch = 1;
    for (;;) {
        for (unsigned i = 0; i < n; i++)
            if (T[ord[i]].state == T_RUN) resume(&T[ord[i]]);
        if (g_warp_hook) flush_warp_logs(L);
        unsigned done = 0, bar = 0, warp = 0;
        for (unsigned i = 0; i < n; i++) {
            done += T[i].state == T_DONE;
            bar += T[i].state == T_BAR;
            warp += T[i].state == T_WARP;
        }
        if (done == n) break;
        if (warp && resolve_warps(L)) continue;
        /* no warp call left: a barrier every live thread waits at opens */
        char wb[160];
        if (done) {
            unsigned first = 0;
            while (T[first].state != T_BAR) first++;
            thread_t *save = cur_thread;
            cur_thread = &T[first];
            fail("__syncthreads() in %s: reached by %u thread(s) of %u while %u have exited (undefined on a GPU; "
                 "keep every thread alive to the barrier)", where(wb, sizeof wb), bar, n, done);
            cur_thread = save;
        }
        int count = 0, all = 1, anyp = 0;
        for (unsigned i = 0; i < n; i++)
            if (T[i].state == T_BAR && T[i].bar_op >= 0) count += T[i].bar_pred, all &= T[i].bar_pred, anyp |= T[i].bar_pred;
        for (unsigned i = 0; i < n; i++)
            if (T[i].state == T_BAR) {
                T[i].bar_res = T[i].bar_op == 0 ? count : T[i].bar_op == 1 ? all : anyp;
                T[i].state = T_RUN;
            }
        L->epoch++;
    }
}

static int dim_ok(dim3 d) { return d.x >= 1 && d.y >= 1 && d.z >= 1; }

void launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            body_fn body, void *args, size_t args_size) {
    (void)kernel;
    seed();
    guard g;
    static int init;
    if (!init) {
        find_shared_section();
        init = 1;
    }
    if (cur_thread) {
        fail("kernel %s launched from inside a kernel (dynamic parallelism is not emulated)", name);
        return;
    }
    cudaError_t e = cudaSuccess;
    stream_t *st = resolve_stream(s, &e);
    if (st && injected(name)) {
        set_last_error(cudaErrorLaunchFailure);
        return;
    }
    const unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
    if (!st) {
        set_last_error(e);
        return;
    }
    if (!dim_ok(grid) || !dim_ok(block) || nthreads > MAX_THREADS || block.x > 1024 || block.y > 1024 ||
        block.z > 64 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        set_last_error(cudaErrorInvalidConfiguration);
        return;
    }
    if (smem > 48 * 1024) {
        /* above 48 KiB a kernel must opt in (cudaFuncSetAttribute); the emulator takes an H100's
         * limit, 227 KiB, as what an opt-in allows */
        if (smem > 227 * 1024) {
            set_last_error(cudaErrorInvalidValue);
            return;
        }
    }
    host_ctx *h = host();
    launch_state L;
    memset((void *)&L.info, 0, sizeof L.info);
    L.name = name, L.grid = grid, L.block = block, L.smem = smem;
    L.nthreads = (unsigned)nthreads;
    L.nwarps = (L.nthreads + 31) / 32;
    L.body = body, L.args = args, L.args_size = args_size;
    L.threads = h->threads.data();
    L.device = st->device;
    L.dyn = smem ? (char *)malloc(smem) : NULL;
    L.dyn_shadow = smem ? (sbyte *)calloc(smem, sizeof(sbyte)) : NULL;
    op_begin(&L.op, st, std::string("kernel ") + name);
    L.info.kernel = name;
    L.info.serial = ++g_launches;
    L.info.grid[0] = grid.x, L.info.grid[1] = grid.y, L.info.grid[2] = grid.z;
    L.info.block[0] = block.x, L.info.block[1] = block.y, L.info.block[2] = block.z;
    L.info.dyn_smem = smem;
    L.info.device = st->device;
    if (g_launch_hook) g_launch_hook(&L.info, 0, g_launch_user);
    launch_state *save = cur_launch;
    cur_launch = &L;
    /* the blocks in a seeded random order: a shuffle up to 2^20 blocks, beyond that a stride
     * coprime with the count from a random start */
    const uint64_t nb = (uint64_t)grid.x * grid.y * grid.z;
    uint64_t rng = mix64(g_seed ^ mix64(L.info.serial));
    std::vector<uint32_t> perm;
    uint64_t start = 0, stride = 1;
    if (nb <= (1u << 20)) {
        perm.resize(nb);
        for (uint64_t i = 0; i < nb; i++) perm[i] = (uint32_t)i;
        for (uint64_t i = nb; i > 1; i--) {
            rng = mix64(rng);
            std::swap(perm[i - 1], perm[rng % i]);
        }
    } else {
        rng = mix64(rng);
        start = rng % nb;
        stride = (mix64(rng) % nb) | 1;
        while (std::gcd(stride, nb) != 1) stride += 2;
    }
    const unsigned long long acc0 = g_accesses, flops0 = t_flops, tensor0 = t_tensor_flops, sfu0 = t_sfu;
    /* FT_EMU_SAMPLE_BLOCKS=N: of a launch of more than N blocks, every k-th block (k = ceil(nb / N),
     * raised to the next k that shares no factor with gridDim.x) is observed; the others run
     * unobserved (no checks, no hooks, no FLOP count). Coprime to gridDim.x, the sample takes every
     * blockIdx.x equally often: attention's work grows with its tile index x, and k = 2 over a grid
     * of x = 0..1 had observed only x = 0 (the T = 128 runs of bench/gpu_model.sh: the dQ pass's
     * least and dK/dV's most work, both scaled to the whole grid) */
    static const unsigned sample = emu_env_unsigned("FT_EMU_SAMPLE_BLOCKS", 0);
    /* FT_EMU_SAMPLE_EXCEPT=name,name: kernels observed whole, never sampled (blocks whose work is
     * data-dependent, e.g. k_emb_accumulate's: a few blocks walk every chain, the rest return) */
    static const char *except = getenv("FT_EMU_SAMPLE_EXCEPT");
    bool whole = false;
    if (except && L.name)
        for (const char *p = except; *p;) {
            const char *e = strchr(p, ',');
            const size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len == strlen(L.name) && !strncmp(p, L.name, len)) whole = true;
            p += len + (e ? 1 : 0);
        }
    uint64_t every = sample && nb > sample && !whole ? (nb + sample - 1) / sample : 1;
    while (every > 1 && std::gcd(every, (uint64_t)grid.x) != 1) every++;
    L.info.blocks = nb, L.info.blocks_run = (nb + every - 1) / every;
    for (uint64_t i = 0; i < nb; i++) {
        const uint64_t b = perm.empty() ? (start + i * stride) % nb : perm[i];
        L.fast = b % every != 0;
        L.block_linear = (unsigned)b;
        L.bid = uint3{(unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y), (unsigned)(b / ((uint64_t)grid.x * grid.y))};
        run_block(&L, mix64(rng ^ b));
    }
    cur_launch = save;
    L.info.flops = t_flops - flops0;
    L.info.tensor_flops = t_tensor_flops - tensor0;
    L.info.sfu = t_sfu - sfu0;
    if (g_stats) {
        kstat &k = g_kstats[name];
        k.launches++;
        k.threads += nb * L.nthreads;
        k.accesses += g_accesses - acc0;
    }
    if (g_launch_hook) g_launch_hook(&L.info, 1, g_launch_user);
    free(L.dyn);
    free(L.dyn_shadow);
}

} // namespace emu

/* ---- the access callbacks of the emulated .cu files ----
 * They are compiled with AddressSanitizer in callback mode under the prefix __emu_ (module.mk:
 * -asan-instrumentation-with-call-threshold=0 -asan-memory-access-callback-prefix=__emu_
 * -asan-opt=0): every load, store and memory intrinsic calls here; the emulator looks at it
 * (inside a kernel), then AddressSanitizer's own check runs as it would have inline. */
extern "C" {
void __asan_load1(uintptr_t), __asan_load2(uintptr_t), __asan_load4(uintptr_t), __asan_load8(uintptr_t), __asan_load16(uintptr_t);
void __asan_store1(uintptr_t), __asan_store2(uintptr_t), __asan_store4(uintptr_t), __asan_store8(uintptr_t), __asan_store16(uintptr_t);
void __asan_loadN(uintptr_t, size_t), __asan_storeN(uintptr_t, size_t);
void *__asan_memcpy(void *, const void *, size_t), *__asan_memmove(void *, const void *, size_t), *__asan_memset(void *, int, size_t);
}
#define EMU_CB(n)                                                                                  \
    extern "C" EMU_HOT void __emu_load##n(uintptr_t p) {                                            \
        if (__builtin_expect(emu::cur_thread != NULL, 0)) emu::on_access((const void *)p, n, EMU_LOAD, __builtin_return_address(0)); \
        __asan_load##n(p);                                                                          \
    }                                                                                               \
    extern "C" EMU_HOT void __emu_store##n(uintptr_t p) {                                           \
        if (__builtin_expect(emu::cur_thread != NULL, 0)) emu::on_access((const void *)p, n, EMU_STORE, __builtin_return_address(0)); \
        __asan_store##n(p);                                                                         \
    }
EMU_CB(1)
EMU_CB(2)
EMU_CB(4)
EMU_CB(8)
EMU_CB(16)
#undef EMU_CB
/* tests/emu/flops_pass.cc's count of a basic block: a kernel thread's operations go to its launch */
extern "C" EMU_HOT void __emu_flops(unsigned long long n) {
    if (emu::cur_thread && !emu::cur_launch->fast) emu::t_flops += n;
}
/* ... and of those, the special-function unit's (exp2, sqrt, a division's reciprocal, ...) */
extern "C" EMU_HOT void __emu_sfu(unsigned long long n) {
    if (emu::cur_thread && !emu::cur_launch->fast) emu::t_sfu += n;
}
/* the tensor-core product of one lane (emu_device.h): compiled here, outside the FLOP-counting
 * pass, so its multiply-adds are not counted as CUDA-core FLOPs; the warp's are counted once as
 * tensor FLOPs. Not observed either (no_sanitize): the fragments' exchange is the hardware's
 * register file, the accesses a performance model sees are the fragments' own loads. */
namespace emu {
static inline float bf16_bits(uint32_t r, unsigned hi) {
    const uint32_t u = hi ? (r & 0xffff0000u) : (r << 16);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
__attribute__((no_sanitize("address"))) void mma_m16n8k16_bf16(float c[4], const uint32_t (*a)[4],
                                                               const uint32_t (*b)[2], unsigned lane) {
    const unsigned g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; e++) {
        const unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        float sum = c[e];
        for (unsigned k = 0; k < 16; k++) {
            const uint32_t ra = a[4 * (row % 8) + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
            const uint32_t rb = b[4 * col + (k % 8) / 2][k >= 8 ? 1 : 0];
            sum += bf16_bits(ra, k & 1) * bf16_bits(rb, k & 1);
        }
        c[e] = sum;
    }
    if (lane == 0 && cur_thread && !cur_launch->fast) t_tensor_flops += 2 * 16 * 8 * 16;
}
__attribute__((no_sanitize("address"))) void ldmatrix_b16(uint32_t r[4], const uint32_t (*rows)[4], unsigned lane,
                                                          int trans) {
    const unsigned g = lane / 4, t = lane % 4;
    for (unsigned i = 0; i < 4; i++) {
        const uint32_t(*m)[4] = rows + 8 * i; /* matrix i's rows */
        if (!trans) {
            r[i] = m[g][t];
            continue;
        }
        const uint32_t lo = m[2 * t][g / 2] >> (16 * (g & 1)) & 0xffffu, hi = m[2 * t + 1][g / 2] >> (16 * (g & 1)) & 0xffffu;
        r[i] = lo | hi << 16;
    }
}
} // namespace emu
extern "C" EMU_HOT void __emu_loadN(uintptr_t p, size_t n) {
    if (emu::cur_thread && n) emu::on_access((const void *)p, (unsigned)n, EMU_LOAD, __builtin_return_address(0));
    __asan_loadN(p, n);
}
extern "C" EMU_HOT void __emu_storeN(uintptr_t p, size_t n) {
    if (emu::cur_thread && n) emu::on_access((const void *)p, (unsigned)n, EMU_STORE, __builtin_return_address(0));
    __asan_storeN(p, n);
}
/* a struct copy (a float4 assigned, a parameter block) is a memcpy: a load and a store */
extern "C" EMU_HOT void *__emu_memcpy(void *d, const void *s, size_t n) {
    if (emu::cur_thread && n) {
        emu::on_access(s, (unsigned)n, EMU_LOAD, __builtin_return_address(0));
        emu::on_access(d, (unsigned)n, EMU_STORE, __builtin_return_address(0));
    }
    return __asan_memcpy(d, s, n);
}
extern "C" EMU_HOT void *__emu_memmove(void *d, const void *s, size_t n) {
    if (emu::cur_thread && n) {
        emu::on_access(s, (unsigned)n, EMU_LOAD, __builtin_return_address(0));
        emu::on_access(d, (unsigned)n, EMU_STORE, __builtin_return_address(0));
    }
    return __asan_memmove(d, s, n);
}
extern "C" EMU_HOT void *__emu_memset(void *d, int c, size_t n) {
    if (emu::cur_thread && n) emu::on_access(d, (unsigned)n, EMU_STORE, __builtin_return_address(0));
    return __asan_memset(d, c, n);
}

extern "C" {
unsigned long long emu_seed(void) { return emu::seed(); }
void emu_set_launch_hook(emu_launch_hook_fn fn, void *user) { emu::g_launch_hook = fn, emu::g_launch_user = user; }
void emu_set_access_hook(emu_access_hook_fn fn, void *user) { emu::g_access_hook = fn, emu::g_access_user = user; }
void emu_set_warp_access_hook(emu_warp_access_hook_fn fn, void *user) { emu::g_warp_hook = fn, emu::g_warp_user = user; }
unsigned long long emu_error_count(void) { return emu::g_errors; }
void emu_fail_call(const char *name, int nth) {
    emu::guard g;
    emu::inject_env();
    emu::g_inject[name] = nth > 0 ? nth : 1;
}
unsigned emu_env_unsigned(const char *name, unsigned dflt) {
    const char *e = getenv(name);
    char *end;
    unsigned long v = e && *e ? strtoul(e, &end, 0) : 0;
    return e && *e && !*end && v > 0 ? (unsigned)v : dflt;
}
}

/* Host-memory leak reports at exit are not the emulator's business (its own tables live to the
 * end of the process); AddressSanitizer's other checks stay on. */
extern "C" const char *__asan_default_options(void) { return "detect_leaks=0"; }
