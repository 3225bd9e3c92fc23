/* tests/emu/emu_nccl.cc: the NCCL subset of nccl.h between emulated devices, for the
 * execution-model emulator (docs/DEVICES.md).
 *
 * Ranks meet in shared memory named by the unique id (/dev/shm/ftemu-nccl-<pid>-<random>, made
 * by the process that called ncclGetUniqueId, and removed by the last rank out; a control block
 * with one slot per rank, and one growable data file per rank), so they may be threads of one
 * process or processes on one machine (started by hand or by mpirun). Every operation (a
 * collective, or a group of sends and receives) gets the next sequence number k of its
 * communicator; NCCL requires every rank to issue them in the same order, and the emulator
 * checks that the k-th operations match (kind, sizes, root, the peers of sends and receives).
 *
 *   post (at the call, or at ncclGroupEnd): wait until every peer has finished reading this
 *     rank's operation k-1; write the operation's header and the bytes it sends into this
 *     rank's data file; publish posted = k. Its reads of device memory are checked against the
 *     stream order then (emu_runtime.cc) -- where it reads its send buffers.
 *   complete (pending on the stream; cudaStreamQuery and the communicator's async-error poll
 *     try it, cudaStreamSynchronize and any later operation of the stream wait for it): once
 *     every peer it needs has posted k, copy what it receives into device memory (checked as
 *     the operation's writes) and publish done = k.
 * Reductions (ncclAllReduce, ncclReduceScatter) add the ranks' contributions in rank order. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "emu_internal.h"
#include "nccl.h"

namespace emu {

static const uint32_t NCCL_MAGIC = 0x4e43434cu; /* "NCCL" */

struct slot_t {
    uint64_t pid;        /* the process of the rank that joined, 0 before */
    uint64_t posted;     /* its last posted operation */
    uint64_t done;       /* its last completed operation (it has read every peer's part) */
    uint64_t data_size;  /* bytes of its data file */
    uint32_t aborted, destroyed;
    uint32_t pad[2];
};
struct ctl_t {
    uint32_t magic, nranks;
    uint32_t destroyed;
    uint32_t pad;
    slot_t slot[];
};

enum op_kind { K_ALLGATHER = 1, K_BROADCAST, K_ALLREDUCE, K_REDUCESCATTER, K_P2P };
struct part_t {
    int32_t peer;        /* P2P: the receiver; else -1 */
    uint32_t pad;
    uint64_t off, bytes; /* within the payload */
};
struct hdr_t {
    uint64_t seq;
    uint32_t kind, nparts;
    uint64_t count;      /* elements (collectives), for the match check */
    int32_t root, dtype, redop, pad;
};

} // namespace emu

struct ncclComm {
    int nranks, rank, device;
    bool blocking, ready, broken;
    std::string name;       /* /dev/shm name stem */
    emu::ctl_t *ctl;
    size_t ctl_bytes;
    int my_fd;
    char *my_data;
    size_t my_size;
    std::vector<char *> peer_data;
    std::vector<size_t> peer_size;
    uint64_t seq;           /* operations issued */
    std::string last_error;
    std::set<emu::pending_t *> live; /* its operations still pending on some stream */
};

namespace emu {

static std::set<ncclComm *> g_comms;
static double g_wait_limit = -1;

static double wait_limit() {
    if (g_wait_limit < 0) {
        const char *e = getenv("FT_EMU_WAIT_S");
        g_wait_limit = e && *e ? atof(e) : 600;
    }
    return g_wait_limit;
}

static uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static ncclResult_t comm_error(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ncclResult_t comm_error(ncclComm *c, ncclResult_t r, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c) {
        c->last_error = buf;
        c->broken = true;
    }
    return r;
}

static std::string data_name(const ncclComm *c, int r) { return c->name + "-r" + std::to_string(r); }

/* Maps rank r's data file at least `need` bytes long (its own: grows it). */
static int map_data(ncclComm *c, int r, size_t need) {
    if (r == c->rank) {
        if (need <= c->my_size) return 0;
        size_t sz = need < 2 * c->my_size ? 2 * c->my_size : need;
        sz = (sz + 4095) & ~(size_t)4095;
        if (ftruncate(c->my_fd, (off_t)sz)) return -1;
        if (c->my_data) munmap(c->my_data, c->my_size);
        c->my_data = (char *)mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, c->my_fd, 0);
        if (c->my_data == MAP_FAILED) { c->my_data = NULL; c->my_size = 0; return -1; }
        c->my_size = sz;
        st(&c->ctl->slot[r].data_size, sz);
        return 0;
    }
    size_t sz = ld(&c->ctl->slot[r].data_size);
    if (sz < need) return -1;
    if (c->peer_size[r] >= need) return 0;
    int fd = shm_open(data_name(c, r).c_str(), O_RDONLY, 0);
    if (fd < 0) return -1;
    if (c->peer_data[r]) munmap(c->peer_data[r], c->peer_size[r]);
    c->peer_data[r] = (char *)mmap(NULL, sz, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (c->peer_data[r] == MAP_FAILED) { c->peer_data[r] = NULL; c->peer_size[r] = 0; return -1; }
    c->peer_size[r] = sz;
    return 0;
}

static bool all_joined(ncclComm *c) {
    for (int r = 0; r < c->nranks; r++)
        if (!ld(&c->ctl->slot[r].pid)) return false;
    return true;
}
static int peer_aborted(ncclComm *c) {
    for (int r = 0; r < c->nranks; r++)
        if (__atomic_load_n(&c->ctl->slot[r].aborted, __ATOMIC_ACQUIRE)) return r;
    return -1;
}

static size_t dtype_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}
static const char *kind_name(uint32_t k) {
    switch (k) {
    case K_ALLGATHER: return "ncclAllGather";
    case K_BROADCAST: return "ncclBroadcast";
    case K_ALLREDUCE: return "ncclAllReduce";
    case K_REDUCESCATTER: return "ncclReduceScatter";
    case K_P2P: return "a group of ncclSend/ncclRecv";
    }
    return "?";
}

/* One send or receive of a group, or the pieces of a collective. */
struct p2p_t {
    bool send;
    int peer;
    const void *sbuf;
    void *rbuf;
    size_t bytes;
    ncclComm *comm;
    cudaStream_t stream;
};
static thread_local int t_group_depth;
static thread_local std::vector<p2p_t> t_group;

/* An operation waiting for its peers. */
struct nccl_op : pending_t {
    ncclComm *c;
    uint64_t k;
    hdr_t h;
    std::vector<p2p_t> recvs;      /* P2P */
    void *rbuf;                     /* collectives: where the result goes */
    const void *sbuf;
    int poll() override;
    ~nccl_op() override {
        if (c) c->live.erase(this);
    }
};

/* Waits (the big lock released) until every peer has finished reading operation k-1 of this
 * rank, so its data file may be written again. */
static ncclResult_t wait_peers_done(ncclComm *c, uint64_t k) {
    double waited = 0;
    unsigned us = 20;
    for (;;) {
        bool ok = true;
        for (int r = 0; r < c->nranks && ok; r++)
            if (r != c->rank && ld(&c->ctl->slot[r].done) + 1 < k) ok = false;
        if (ok) return ncclSuccess;
        int a = peer_aborted(c);
        if (a >= 0) return comm_error(c, ncclRemoteError, "rank %d aborted its communicator", a);
        if (waited > wait_limit())
            return comm_error(c, ncclSystemError, "waited %.0f s for the peers to finish operation %llu (FT_EMU_WAIT_S)",
                              waited, (unsigned long long)(k - 1));
        pause_unlocked(us);
        waited += us * 1e-6;
        us = us < 2000 ? us * 2 : us;
    }
}

/* Posts operation k: header, parts (each from a device buffer, read as op's access). */
static ncclResult_t post(ncclComm *c, const op_t *op, const hdr_t &h0, const std::vector<p2p_t> &sends,
                         const void *sbuf, size_t sbytes) {
    ncclResult_t r = wait_peers_done(c, h0.seq);
    if (r != ncclSuccess) return r;
    const size_t np = sbuf ? 1 : sends.size();
    size_t total = sizeof(hdr_t) + np * sizeof(part_t), pay = 0;
    if (sbuf) pay = sbytes;
    else
        for (auto &s : sends) pay += s.bytes;
    if (map_data(c, c->rank, total + pay)) return comm_error(c, ncclSystemError, "cannot grow the shared data file: %s", strerror(errno));
    hdr_t h = h0;
    h.nparts = (uint32_t)np;
    part_t *parts = (part_t *)(c->my_data + sizeof(hdr_t));
    char *payload = c->my_data + sizeof(hdr_t) + np * sizeof(part_t);
    size_t off = 0;
    for (size_t i = 0; i < np; i++) {
        const void *src = sbuf ? sbuf : sends[i].sbuf;
        const size_t n = sbuf ? sbytes : sends[i].bytes;
        char what[96];
        snprintf(what, sizeof what, "%s: the send buffer", op->what.c_str());
        if (n && check_device_range(op, c->device, src, n, 0, what))
            return comm_error(c, ncclInvalidArgument, "%s is not device memory", what);
        parts[i].peer = sbuf ? -1 : sends[i].peer;
        parts[i].off = off;
        parts[i].bytes = n;
        if (n) memcpy(payload + off, src, n);
        off += n;
    }
    memcpy(c->my_data, &h, sizeof h);
    st(&c->ctl->slot[c->rank].posted, h.seq);
    return ncclSuccess;
}

/* The payload of rank r's operation k (NULL when not posted yet), its header checked. */
static const char *peer_op(ncclComm *c, int r, uint64_t k, hdr_t *h, const part_t **parts, int *bad) {
    *bad = 0;
    if (ld(&c->ctl->slot[r].posted) < k) return NULL;
    const char *base;
    if (r == c->rank) base = c->my_data;
    else {
        if (map_data(c, r, sizeof(hdr_t))) { *bad = 1; return NULL; }
        base = c->peer_data[r];
    }
    memcpy(h, base, sizeof *h);
    if (h->seq != k) { *bad = 2; return NULL; }
    size_t need = sizeof(hdr_t) + h->nparts * sizeof(part_t);
    if (r != c->rank && map_data(c, r, need)) { *bad = 1; return NULL; }
    base = r == c->rank ? c->my_data : c->peer_data[r];
    *parts = (const part_t *)(base + sizeof(hdr_t));
    size_t pay = 0;
    for (uint32_t i = 0; i < h->nparts; i++) pay = std::max(pay, (size_t)((*parts)[i].off + (*parts)[i].bytes));
    if (r != c->rank && map_data(c, r, need + pay)) { *bad = 1; return NULL; }
    base = r == c->rank ? c->my_data : c->peer_data[r];
    *parts = (const part_t *)(base + sizeof(hdr_t));
    return base + need;
}

template <class T> static void reduce_into(T *acc, const T *x, size_t n, int op) {
    for (size_t i = 0; i < n; i++) {
        switch (op) {
        case ncclSum: case ncclAvg: acc[i] += x[i]; break;
        case ncclProd: acc[i] *= x[i]; break;
        case ncclMax: acc[i] = x[i] > acc[i] ? x[i] : acc[i]; break;
        case ncclMin: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
        }
    }
}

int nccl_op::poll() {
    if (!c || c->broken) return -1; /* cancelled: its communicator was destroyed or aborted */
    const int n = c->nranks;
    std::vector<const char *> pay(n, NULL);
    std::vector<const part_t *> parts(n, NULL);
    std::vector<hdr_t> hs(n);
    for (int r = 0; r < n; r++) {
        int bad = 0;
        pay[r] = peer_op(c, r, k, &hs[r], &parts[r], &bad);
        if (bad) {
            comm_error(c, ncclSystemError, "rank %d's data for operation %llu is unreadable", r, (unsigned long long)k);
            fail("NCCL (emulated): %s", c->last_error.c_str());
            return -1;
        }
        if (!pay[r]) {
            int a = peer_aborted(c);
            if (a >= 0) {
                comm_error(c, ncclRemoteError, "rank %d aborted its communicator", a);
                return -1;
            }
            return 0; /* not everyone has posted yet */
        }
    }
    /* every rank's k-th operation must be this one */
    for (int r = 0; r < n; r++) {
        const hdr_t &o = hs[r];
        if (o.kind != h.kind || (h.kind != K_P2P && (o.count != h.count || o.root != h.root || o.dtype != h.dtype || o.redop != h.redop))) {
            comm_error(c, ncclInvalidUsage, "operation %llu: rank %d called %s (count %llu, root %d) where rank %d called %s (count %llu, root %d)",
                       (unsigned long long)k, c->rank, kind_name(h.kind), (unsigned long long)h.count, h.root, r,
                       kind_name(o.kind), (unsigned long long)o.count, o.root);
            fail("NCCL (emulated): %s (the ranks must issue the same collectives in the same order)", c->last_error.c_str());
            return -1;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s: the receive buffer", op.what.c_str());
    const size_t es = dtype_size((ncclDataType_t)h.dtype);
    switch (h.kind) {
    case K_ALLGATHER: {
        const size_t each = h.count * es;
        if (check_device_range(&op, c->device, rbuf, each * n, 1, what)) return -1;
        for (int r = 0; r < n; r++)
            if (each) memmove((char *)rbuf + r * each, pay[r] + parts[r][0].off, each);
        break;
    }
    case K_BROADCAST: {
        const size_t bytes = h.count * es;
        if (bytes && check_device_range(&op, c->device, rbuf, bytes, 1, what)) return -1;
        if (bytes) memmove(rbuf, pay[h.root] + parts[h.root][0].off, bytes);
        break;
    }
    case K_ALLREDUCE:
    case K_REDUCESCATTER: {
        const size_t total = h.kind == K_ALLREDUCE ? h.count : h.count * n;
        const size_t lo = h.kind == K_ALLREDUCE ? 0 : h.count * c->rank, cnt = h.count;
        std::vector<char> acc(cnt * es);
        memcpy(acc.data(), pay[0] + parts[0][0].off + lo * es, cnt * es);
        for (int r = 1; r < n; r++) {
            const char *x = pay[r] + parts[r][0].off + lo * es;
            if (h.dtype == ncclFloat32) reduce_into((float *)acc.data(), (const float *)x, cnt, h.redop);
            else if (h.dtype == ncclFloat64) reduce_into((double *)acc.data(), (const double *)x, cnt, h.redop);
            else if (h.dtype == ncclInt32) reduce_into((int32_t *)acc.data(), (const int32_t *)x, cnt, h.redop);
            else if (h.dtype == ncclInt64) reduce_into((int64_t *)acc.data(), (const int64_t *)x, cnt, h.redop);
        }
        if (h.redop == ncclAvg) {
            if (h.dtype == ncclFloat32) for (size_t i = 0; i < cnt; i++) ((float *)acc.data())[i] /= (float)n;
            if (h.dtype == ncclFloat64) for (size_t i = 0; i < cnt; i++) ((double *)acc.data())[i] /= n;
        }
        (void)total;
        if (cnt && check_device_range(&op, c->device, rbuf, cnt * es, 1, what)) return -1;
        if (cnt) memcpy(rbuf, acc.data(), cnt * es);
        break;
    }
    case K_P2P:
        for (const p2p_t &rv : recvs) {
            /* the peer's part addressed to this rank: the i-th such part for the i-th receive */
            const int p = rv.peer;
            const part_t *found = NULL;
            for (uint32_t i = 0; i < hs[p].nparts; i++)
                if (parts[p][i].peer == c->rank) { found = &parts[p][i]; break; }
            if (!found || found->bytes != rv.bytes) {
                comm_error(c, ncclInvalidUsage, "operation %llu: rank %d receives %zu bytes from rank %d, which sends it %s",
                           (unsigned long long)k, c->rank, rv.bytes, p, found ? "another size" : "nothing");
                fail("NCCL (emulated): %s", c->last_error.c_str());
                return -1;
            }
            if (rv.bytes && check_device_range(&op, c->device, rv.rbuf, rv.bytes, 1, what)) return -1;
            if (rv.bytes) memmove(rv.rbuf, pay[p] + found->off, rv.bytes);
        }
        break;
    }
    st(&c->ctl->slot[c->rank].done, k);
    return 1;
}

static ncclResult_t enqueue(ncclComm *c, cudaStream_t s, hdr_t h, const std::vector<p2p_t> &sends,
                            const std::vector<p2p_t> &recvs, const void *sbuf, size_t sbytes, void *rbuf, const char *name) {
    if (!g_comms.count(c)) return ncclInvalidArgument;
    if (c->broken) return ncclInvalidUsage;
    if (!c->ready) return comm_error(c, ncclInvalidUsage, "%s on a communicator whose initialisation is not complete", name);
    if (injected(name)) return comm_error(c, ncclUnhandledCudaError, "%s failed (fault injection)", name);
    if (current_device() != c->device) {
        fail("%s on the communicator of device %d while device %d is current", name, c->device, current_device());
        return ncclInvalidUsage;
    }
    cudaError_t e = cudaSuccess;
    stream_t *sp = resolve_stream(s, &e);
    if (!sp) return comm_error(c, ncclInvalidArgument, "%s: not a stream of device %d", name, c->device);
    nccl_op *p = new nccl_op();
    op_begin(&p->op, sp, name);
    h.seq = ++c->seq;
    p->c = c;
    p->k = h.seq;
    p->h = h;
    p->recvs = recvs;
    p->rbuf = rbuf;
    p->sbuf = sbuf;
    ncclResult_t r = post(c, &p->op, h, sends, sbuf, sbytes);
    if (r != ncclSuccess) {
        delete p;
        return r;
    }
    sp->pending.push_back(p);
    c->live.insert(p);
    stream_progress(sp);
    return ncclSuccess;
}

static ncclResult_t collective(const void *sbuf, void *rbuf, size_t count, ncclDataType_t t, int root, int redop,
                               ncclComm_t c, cudaStream_t s, uint32_t kind, const char *name) {
    guard g;
    if (!g_comms.count(c)) return ncclInvalidArgument;
    const size_t es = dtype_size(t);
    if (!es) return comm_error(c, ncclInvalidArgument, "%s: unknown data type %d", name, (int)t);
    if ((kind == K_ALLREDUCE || kind == K_REDUCESCATTER) && t != ncclFloat32 && t != ncclFloat64 && t != ncclInt32 && t != ncclInt64)
        return comm_error(c, ncclInvalidArgument, "%s: the emulator reduces float, double, int32 and int64 only", name);
    if ((kind == K_BROADCAST) && (root < 0 || root >= c->nranks)) return comm_error(c, ncclInvalidArgument, "%s: root %d", name, root);
    hdr_t h;
    memset(&h, 0, sizeof h);
    h.kind = kind, h.count = count, h.root = kind == K_BROADCAST ? root : 0, h.dtype = t, h.redop = redop;
    size_t sbytes = count * es;
    if (kind == K_ALLREDUCE) sbytes = count * es;
    if (kind == K_REDUCESCATTER) sbytes = count * es * c->nranks;
    const void *post_buf = sbuf;
    if (kind == K_BROADCAST && c->rank != root) sbytes = 0, post_buf = NULL;
    std::vector<p2p_t> none;
    /* a rank that sends nothing still posts (its header): post() takes sbuf NULL as no parts */
    if (!post_buf) {
        static const char zero = 0;
        post_buf = &zero;
        sbytes = 0;
    }
    return enqueue(c, s, h, none, none, post_buf, sbytes, rbuf, name);
}

} // namespace emu

using namespace emu;

extern "C" {
ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    guard g;
    if (!id) return ncclInvalidArgument;
    if (injected("ncclGetUniqueId")) return ncclSystemError;
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t x = mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
        memcpy(rnd, &x, 8);
        x = mix64(x);
        memcpy(rnd + 8, &x, 4);
    }
    memset(id->internal, 0, sizeof id->internal);
    char *p = id->internal;
    /* the creating process in the name: a test can remove what a crashed run left */
    p += snprintf(p, 32, "ftemu-nccl-%d-", (int)getpid());
    for (size_t i = 0; i < sizeof rnd; i++) p += snprintf(p, 3, "%02x", rnd[i]);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *pc, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    guard g;
    if (!pc || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    *pc = NULL;
    if (injected("ncclCommInitRankConfig")) return ncclSystemError;
    char stem[64];
    memcpy(stem, id.internal, sizeof stem);
    stem[sizeof stem - 1] = 0;
    if (strncmp(stem, "ftemu-nccl-", 11)) return ncclInvalidArgument;
    int dev = current_device(), ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || dev >= ndev) return ncclUnhandledCudaError;
    ncclComm *c = new ncclComm();
    c->nranks = nranks, c->rank = rank, c->device = dev;
    c->blocking = !cfg || cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0;
    c->name = std::string("/") + stem;
    c->ctl_bytes = sizeof(ctl_t) + nranks * sizeof(slot_t);
    int fd = shm_open(c->name.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->ctl_bytes)) {
        if (fd >= 0) close(fd);
        delete c;
        return ncclSystemError;
    }
    c->ctl = (ctl_t *)mmap(NULL, c->ctl_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->ctl == MAP_FAILED) {
        delete c;
        return ncclSystemError;
    }
    uint32_t want = 0;
    __atomic_compare_exchange_n(&c->ctl->nranks, &want, (uint32_t)nranks, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&c->ctl->nranks, __ATOMIC_ACQUIRE) != (uint32_t)nranks) {
        fail("ncclCommInitRank: rank %d says %d ranks, an earlier rank said %u", rank, nranks, c->ctl->nranks);
        munmap(c->ctl, c->ctl_bytes);
        delete c;
        return ncclInvalidArgument;
    }
    c->ctl->magic = NCCL_MAGIC;
    c->my_fd = shm_open(data_name(c, rank).c_str(), O_RDWR | O_CREAT, 0600);
    c->peer_data.assign(nranks, NULL);
    c->peer_size.assign(nranks, 0);
    if (c->my_fd < 0 || map_data(c, rank, 1 << 16)) {
        munmap(c->ctl, c->ctl_bytes);
        delete c;
        return ncclSystemError;
    }
    uint64_t none = 0;
    if (!__atomic_compare_exchange_n(&c->ctl->slot[rank].pid, &none, (uint64_t)getpid() << 8 | 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        fail("ncclCommInitRank: rank %d joined twice", rank);
        delete c;
        return ncclInvalidUsage;
    }
    g_comms.insert(c);
    *pc = c;
    if (c->blocking) {
        double waited = 0;
        while (!all_joined(c)) {
            if (waited > wait_limit()) return comm_error(c, ncclSystemError, "the other ranks did not join in %.0f s", waited);
            pause_unlocked(1000);
            waited += 1e-3;
        }
        c->ready = true;
        return ncclSuccess;
    }
    c->ready = all_joined(c);
    return c->ready ? ncclSuccess : ncclInProgress;
}
ncclResult_t ncclCommInitRank(ncclComm_t *pc, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(pc, nranks, id, rank, NULL);
}
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    (void)comms, (void)ndev, (void)devlist;
    return ncclInvalidUsage; /* needs one thread per rank here: not emulated */
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    guard g;
    if (!g_comms.count(c) || !r) return ncclInvalidArgument;
    if (c->broken) {
        *r = c->last_error.find("aborted") != std::string::npos ? ncclRemoteError : ncclSystemError;
        return ncclSuccess;
    }
    if (!c->ready) c->ready = all_joined(c);
    *r = c->ready ? ncclSuccess : ncclInProgress;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
    guard g;
    if (!g_comms.count(c) || !n) return ncclInvalidArgument;
    *n = c->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d) {
    guard g;
    if (!g_comms.count(c) || !d) return ncclInvalidArgument;
    *d = c->device;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
    guard g;
    if (!g_comms.count(c) || !r) return ncclInvalidArgument;
    *r = c->rank;
    return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}
const char *ncclGetLastError(ncclComm_t c) {
    guard g;
    return g_comms.count(c) ? c->last_error.c_str() : "";
}

static void release(ncclComm *c, bool orderly) {
    /* what is still pending is cancelled: it will never write its receive buffers */
    for (pending_t *p : c->live) static_cast<nccl_op *>(p)->c = NULL;
    c->live.clear();
    if (!orderly) __atomic_store_n(&c->ctl->slot[c->rank].aborted, 1u, __ATOMIC_RELEASE);
    /* the last rank out removes the files */
    const uint32_t gone = __atomic_add_fetch(&c->ctl->destroyed, 1u, __ATOMIC_ACQ_REL);
    if (gone == (uint32_t)c->nranks) {
        for (int r = 0; r < c->nranks; r++) shm_unlink(data_name(c, r).c_str());
        shm_unlink(c->name.c_str());
    }
    for (int r = 0; r < c->nranks; r++)
        if (c->peer_data[r]) munmap(c->peer_data[r], c->peer_size[r]);
    if (c->my_data) munmap(c->my_data, c->my_size);
    if (c->my_fd >= 0) close(c->my_fd);
    munmap(c->ctl, c->ctl_bytes);
    g_comms.erase(c);
    delete c;
}
ncclResult_t ncclCommFinalize(ncclComm_t c) {
    guard g;
    if (!g_comms.count(c)) return ncclInvalidArgument;
    return ncclSuccess; /* every operation completes with its stream */
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    guard g;
    if (!g_comms.count(c)) return ncclInvalidArgument;
    release(c, true);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
    guard g;
    if (!g_comms.count(c)) return ncclInvalidArgument;
    c->broken = true;
    release(c, false);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    return collective(s, r, count, t, 0, 0, c, st, K_ALLGATHER, "ncclAllGather");
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
    return collective(s, r, count, t, root, 0, c, st, K_BROADCAST, "ncclBroadcast");
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
    return collective(s, r, count, t, 0, op, c, st, K_ALLREDUCE, "ncclAllReduce");
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
    return collective(s, r, count, t, 0, op, c, st, K_REDUCESCATTER, "ncclReduceScatter");
}

static ncclResult_t p2p(bool send, const void *sbuf, void *rbuf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                        cudaStream_t s) {
    guard g;
    if (!g_comms.count(c)) return ncclInvalidArgument;
    const size_t es = dtype_size(t);
    if (!es || peer < 0 || peer >= c->nranks || peer == c->rank)
        return comm_error(c, ncclInvalidArgument, "%s: peer %d of %d ranks", send ? "ncclSend" : "ncclRecv", peer, c->nranks);
    p2p_t p = {send, peer, sbuf, rbuf, count * es, c, s};
    if (t_group_depth > 0) {
        t_group.push_back(p);
        return ncclSuccess;
    }
    /* outside a group: an operation of its own */
    std::vector<p2p_t> one(1, p), none;
    hdr_t h;
    memset(&h, 0, sizeof h);
    h.kind = K_P2P;
    return send ? enqueue(c, s, h, one, none, NULL, 0, NULL, "ncclSend") : enqueue(c, s, h, none, one, NULL, 0, NULL, "ncclRecv");
}
ncclResult_t ncclSend(const void *s, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
    return p2p(true, s, NULL, count, t, peer, c, st);
}
ncclResult_t ncclRecv(void *r, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
    return p2p(false, NULL, r, count, t, peer, c, st);
}
ncclResult_t ncclGroupStart(void) {
    t_group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (t_group_depth <= 0) return ncclInvalidUsage;
    if (--t_group_depth > 0) return ncclSuccess;
    guard g;
    std::vector<p2p_t> calls;
    calls.swap(t_group);
    /* one operation per communicator, its sends and receives together */
    ncclResult_t result = ncclSuccess;
    std::vector<ncclComm *> seen;
    for (const p2p_t &p : calls) {
        if (std::find(seen.begin(), seen.end(), p.comm) != seen.end()) continue;
        seen.push_back(p.comm);
        std::vector<p2p_t> sends, recvs;
        for (const p2p_t &q : calls)
            if (q.comm == p.comm) (q.send ? sends : recvs).push_back(q);
        hdr_t h;
        memset(&h, 0, sizeof h);
        h.kind = K_P2P;
        ncclResult_t r = enqueue(p.comm, p.stream, h, sends, recvs, NULL, 0, NULL, "ncclGroupEnd (ncclSend/ncclRecv)");
        if (r != ncclSuccess && result == ncclSuccess) result = r;
    }
    return result;
}
}
