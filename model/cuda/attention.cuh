/* model/cuda/attention.cuh: attention on the CUDA device, tiled in shared memory
 * (FlashAttention-style): q (B,Tq,H,hd), k/v (B,Tk,Hkv,hd), out (B,Tq,H,hd), lse (B,H,Tq),
 * grouped-query (head h reads key/value head h / (H/Hkv)), causal with Tq <= Tk (queries are
 * the last Tq positions), sliding windows (ops_math.h ops_att_range: the keys a row sees).
 *
 * Forward (k_att_fwd): a block takes 64 query rows of one (b, h), 16 per warp (or per pair
 * of warps: split tiles, below; bf16 at hd 32 and 64: 128 rows, 32 per warp, each key tile split
 * between 3 warps per 32 rows -- ATT_FWD_WIDE); key
 * tiles of BK rows are staged in shared memory; S = Q K^T lands in each warp's registers in
 * the mma layout (mma.cuh), the online softmax (ops_online_softmax's rescaling: running max
 * m, sum l, the accumulator scaled by exp(m_old - m_new)) runs on those registers, and
 * O += P V follows from the same registers. Only the row's log-sum-exp is kept. At bf16 the
 * output's bf16 shadow (device_cuda.cu) is stored beside it, for the output projection.
 *
 * Backward, atomic-free, in two passes so that every gradient row has one writer: D = rowsum
 * (dO o O) (k_att_rowdot, which also stores dO's bf16 shadow, read by the passes after it); dK,
 * dV (k_att_bwd_dkdv): a block owns 64 key rows of (b, kh) (or ATT_DKDV_KB = 128 in bf16 at hd 64) and
 * walks every query head of the group and every query tile that sees those keys, in order,
 * recomputing P = exp(S - lse) and dS = P (dP - D) scale, accumulating dV += P^T dO and
 * dK += dS^T Q in registers; dQ (k_att_bwd_dq): a block owns 64 query rows of (b, h) and
 * walks the key tiles, dQ += dS K. Or, where the device gives a buffer for it (ATT_DQ_FROM_DS:
 * bf16, hd 64, causal with Tq = Tk; att_ds_tiles), dK/dV stores the dS it multiplied (bf16, the
 * lower triangle's 64 x 64 tiles only) and the dQ pass is k_att_bwd_dq_ds: dQ += dS K over the
 * key tiles in order, from that dS and K alone -- one product instead of three and no
 * exponentials, for dS's bytes written once and read once. Results are added (+=) to dq, dk, dv
 * once, at the end: the same bits on every run. Or (att_join_t) stored into the fused q|k|v rows'
 * gradient, dq and dk rotated back on the way: no zeroing before and no join pass after.
 *
 * Split tiles (bf16, hd 32 and 64; ATT_FWD_SPLIT, ATT_DKDV_SPLIT, ATT_DQ_SPLIT, 2 by default):
 * the three kernels' blocks have 8 warps, two per 16 rows, each taking half of every streamed
 * tile (the forward's and dQ's keys, dK/dV's queries) with its own accumulators; at the end the
 * second share hands its sums (the forward: its softmax state m, l, o, merged by rescaling) to
 * the first through shared memory, which adds them and stores the rows -- in that fixed order,
 * so the bits are the same on every run. The same products and exponentials as 4 warps a block;
 * twice the warps in flight (2 blocks of 8 a SM at <= 128 registers where 3 blocks of 4 took
 * 168: the backward was latency-bound on an H100).
 *
 * Two product engines fill the same register layout: in precision bf16 the tensor cores
 * (mma.sync m16n8k16: Q, K, V, dO, P and dS rounded to bf16 at the product's input, fp32
 * accumulation -- precision.h's bf16, as the CPU device's attention products), in fp32 and
 * tf32 the CUDA cores (fp32 FMAs over the shared-memory tiles; P and dS pass through a
 * per-warp shared buffer since a lane holds only a quarter of a row). The softmax, masking and
 * accumulation code is shared.
 *
 * The bf16 engine is written for the shared-memory pipe (tests/emu counts its bank conflicts):
 * every tile is row-major bf16 (rows of HD + 8), written with one 16-byte store per 8 elements
 * from registers that 16-byte global loads filled; every fragment is read with ldmatrix
 * (mma.cuh: one 128-byte wavefront per 8x8 matrix), and the products whose B operand runs down a
 * tile's columns (P V, dS K, P^T dO, dS^T Q) take it with ldmatrix.trans instead of a transposed
 * copy (whose staging put all of a warp's stores in two banks) or two 16-bit loads per register
 * (twice the wavefronts). The streamed
 * tiles are double-buffered: the next tile's global loads are issued before the current tile's
 * products and stored after them, one barrier per tile. The block's own rows (the forward's
 * and dQ's queries, dK/dV's keys) pass through shared memory once, into A fragments held in
 * registers for the whole walk. Head dimensions up to ATT_MAX_HD are padded to 16, 32, 64 or
 * 128 (zeros in shared memory); larger ones use kernels.h's per-row bodies.
 *
 * Exponentials (att_exp): the fp32 engine's are ops_math.h's ops_expf, the CPU reference's (its
 * results still differ from the CPU's in the last bits: sums in another order); the bf16
 * engine's are 2^(x log2 e), a GPU's special-function unit (ex2.approx) in place of
 * ops_expf's ~20 CUDA-core operations per element (what FlashAttention does; the results move
 * by a few ulps of the exponential, far inside bf16's tolerances against the CPU device).
 *
 * The decode step's attention (attention_rows: one query row per (row, head) over a cache
 * range) is k_att_rows: one warp per row and head, key tiles of 32 staged by the warp, lane j
 * scoring key j, the warp's online softmax, and P V with the lanes over the head dimension.
 * A row's result depends on its own inputs only (not on the rows beside it). */
#ifndef MODEL_CUDA_ATTENTION_CUH
#define MODEL_CUDA_ATTENTION_CUH
#include "model/cuda/mma.cuh"
#include "model/ops_math.h"

#define ATT_THREADS 128 /* 4 warps, 16 rows each */
/* Blocks per SM the backward kernels are compiled for at head dimensions up to 64
 * (__launch_bounds__' second argument caps their registers at 64K / (128 x this)); at 1 they took
 * 247 (dQ) and 254 (dK/dV) registers, 2 blocks a SM (ncu on an H100: 12% occupancy, no eligible
 * warp on 62-66% of cycles). Measured on an H100 at config G bf16, two rounds: dQ at 3 (168
 * registers, 192 bytes spilled) 33.8 ms a step against 34.2; dK/dV at 3 too (950 bytes
 * spilled) 34.2-34.4, no gain. Since then both passes take their tiles in parts (below), which
 * frees the registers of the parts not live: nvcc 13, sm_90, -Xptxas -v: dQ at 3 blocks 168
 * registers and no spill (2 parts), dK/dV at 3 blocks 168 registers and 178 bytes spilled
 * (4 parts; 630 with 2), so dK/dV is compiled for 3 blocks a SM as well -- NOT yet timed on a GPU
 * (the measured build: -DATT_DKDV_MIN_BLOCKS=1 -DATT_DKDV_PARTS=1 -DATT_DQ_PARTS=1). Larger head
 * dimensions keep 1 (their accumulators need the registers). Build knobs (-D) for measuring. */
#ifndef ATT_DQ_MIN_BLOCKS
#define ATT_DQ_MIN_BLOCKS 3
#endif
/* The forward at hd 64 likewise. With ldmatrix (the B fragments of two column tiles loaded at
 * once) nvcc 13 gave it 185 registers unbounded (2 blocks a SM; 165 before, 3 blocks); bounded
 * to 3 blocks it takes 168 with 28 bytes spilled, 12 with ex2 below (bench/NOTES.md, i-att3; NOT
 * timed on a GPU: -DATT_FWD_MIN_BLOCKS=1 builds the unbounded one, 204 registers). With both,
 * dQ went from no spill to 12 bytes and dK/dV from 178 to 302 bytes, at 168 registers each
 * (-DATT_DKDV_MIN_BLOCKS=2: 248 registers, no spill, 2 blocks a SM). */
#ifndef ATT_FWD_MIN_BLOCKS
#define ATT_FWD_MIN_BLOCKS 3
#endif
/* The bf16 forward at head dimensions 32 and 64 splits each key tile between ATT_FWD_SPLIT warps
 * per 16 queries (blocks of 128 ATT_FWD_SPLIT threads; warp w: queries 16 (w % 4) .., keys
 * 64 / ATT_FWD_SPLIT (w / 4) .. of each tile), each with its own online softmax (max m, sum l,
 * accumulator o); at the end share 0's warps merge the others' in share order (m the larger,
 * each side scaled by exp(m_side - m): fixed, the same bits on every run). As the backward's
 * split: twice the warps a SM keeps in flight for the same work, compiled for
 * ATT_FWD_SPLIT_MIN_BLOCKS blocks a SM (2: 16 warps, at most 128 registers). 1: no split. */
#ifndef ATT_FWD_SPLIT
#define ATT_FWD_SPLIT 2
#endif
#ifndef ATT_FWD_SPLIT_MIN_BLOCKS
#define ATT_FWD_SPLIT_MIN_BLOCKS 2
#endif
/* The bf16 forward at head dimensions 32 and 64 in wide blocks (ATT_FWD_WIDE, 1 by default): 128
 * queries a block, 32 a warp -- each K and V fragment a warp loads from shared memory serves two
 * 16-row tensor-core tiles, half the fragment loads a query needs -- and the keys split between
 * 3 warps per 32 rows (12 warps, 384 threads, 1 block a SM, at most 168 registers), each with its
 * own online softmax, merged at the end in share order as ATT_FWD_SPLIT's. Key tiles of 48 keys
 * at hd 64, 96 at hd 32 (one 16-byte chunk of K and one of V a thread), in 16-key chunks, chunk j
 * to share j % 3; the tiles stop at the block's last key (the rows past it neither loaded nor,
 * beyond their 16-row chunk, stored: a block moves the K and V rows its queries see, no more). A
 * warp skips a chunk that none of its rows sees (the causal diagonal, a window's edge); a warp
 * with no row (the last block's) skips everything. 128-query blocks read the K and V rows half as
 * often as 64-query ones; the threads a launch stay as many (768 blocks of 384 at config G where
 * 1536 of 256 ran). The next tile's loads follow the chunks' products (ATT_FWD_WIDE_EARLY=1: before
 * them, their 8 registers live across them). 0: the 64-query blocks (ATT_FWD_SPLIT,
 * ATT_FWD_SPLIT_MIN_BLOCKS). */
#ifndef ATT_FWD_WIDE
#define ATT_FWD_WIDE 1
#endif
#ifndef ATT_FWD_WIDE_EARLY
#define ATT_FWD_WIDE_EARLY 0
#endif
#ifndef ATT_DKDV_MIN_BLOCKS
#define ATT_DKDV_MIN_BLOCKS 3
#endif
/* The bf16 dK/dV pass takes each query tile in ATT_DKDV_PARTS parts (of QT / parts queries):
 * S^T, dP^T and dS^T of a part are live at a time, not of the whole tile. The products run in
 * the same order (dV += P^T dO and dK += dS^T Q over the queries, 16 at a time, in order): the
 * same bits. 1: the whole tile at once (the kernel before). */
#ifndef ATT_DKDV_PARTS
#define ATT_DKDV_PARTS 4
#endif
/* The bf16 dK/dV pass at head dimensions 32 and 64 splits each query tile between ATT_DKDV_SPLIT
 * warps per 16 keys (blocks of 128 ATT_DKDV_SPLIT threads; warp w takes keys 16 (w % 4) .. + 15
 * and the parts w / 4 of ATT_DKDV_PARTS / ATT_DKDV_SPLIT), each summing its share of the
 * queries; at the end the shares' sums meet in shared memory, added in share order (fixed:
 * the same bits on every run). Twice the threads for the same work: the warps a SM can keep in
 * flight to hide the latency of each other's products and loads (the backward was latency-bound
 * on an H100: no eligible warp on 62-66% of cycles at 8-12 warps a SM), with a thread's share of
 * a tile's staging halved (its registers: 8 a tile in place of 16). Compiled for
 * ATT_DKDV_SPLIT_MIN_BLOCKS blocks a SM (2: 16 warps, at most 128 registers). 1: no split. */
#ifndef ATT_DKDV_SPLIT
#define ATT_DKDV_SPLIT 2
#endif
#ifndef ATT_DKDV_SPLIT_MIN_BLOCKS
#define ATT_DKDV_SPLIT_MIN_BLOCKS 2
#endif
/* The bf16 dK/dV pass at head dimension 64 takes ATT_DKDV_KB keys a block (64 or 128): at 128 a
 * block of 16 warps (512 threads, compiled for 1 a SM: the same 128 registers a thread; nvcc 13,
 * sm_90: 172/388 bytes spilled where 64 spills 288/432) stages each query tile of Q and dO once for
 * 128 keys, half the tile loads of 64 (the dK/dV pass re-reads them per key block); a warp whose 16
 * keys no query of a tile sees (the causal diagonal's upper half) skips that tile's products. The
 * emulator's counts at T >= 128 are lower at 128 than at 64 (requested sectors -7% at T 128, -12% at
 * T 256; wavefronts -2% and -3%; the same FLOPs), but the performance model's fit takes T = 64 runs,
 * where a block of 128 keys holds 64 past the end whose staging and exchange are counted: fitted to
 * config G it predicts 1.77 ms against 64's 1.62 (bench/NOTES.md 2026-11-27, i-dsq). So 64 by default;
 * 128 is for timing on a GPU. NOT timed on a GPU. */
#ifndef ATT_DKDV_KB
#define ATT_DKDV_KB 64
#endif
/* The same for the bf16 dQ pass: each key tile in ATT_DQ_PARTS parts (S, dP and dS of BK / parts
 * keys live at a time; dQ += dS K over the keys, 16 at a time, in order: the same bits) */
#ifndef ATT_DQ_PARTS
#define ATT_DQ_PARTS 2
#endif
/* The bf16 dQ pass at head dimensions 32 and 64 likewise splits each key tile between
 * ATT_DQ_SPLIT warps per 16 queries (warp w: queries 16 (w % 4) .., parts w / 4 of
 * ATT_DQ_PARTS / ATT_DQ_SPLIT), the shares' sums added at the end in share order; compiled for
 * ATT_DQ_SPLIT_MIN_BLOCKS blocks a SM. 1: no split. */
#ifndef ATT_DQ_SPLIT
#define ATT_DQ_SPLIT 2
#endif
#ifndef ATT_DQ_SPLIT_MIN_BLOCKS
#define ATT_DQ_SPLIT_MIN_BLOCKS 2
#endif
/* dQ from the dS that the dK/dV pass computed (ATT_DQ_FROM_DS, 1 by default): where
 * attention_ds_bytes is not 0 (bf16, hd 33..64, causal with Tq = Tk and no window that cuts) and the
 * device gives it a buffer of that size, k_att_bwd_dkdv stores dS (bf16: the rounding its own
 * dK += dS^T Q uses) for every (query tile, key tile) pair of the causal lower triangle and
 * k_att_bwd_dq_ds forms dQ = dS K from it -- one product where k_att_bwd_dq recomputes S, dP and
 * dS (three products and the exponentials) from Q, dO, K and V. ATT_DQ_DS_BQ query rows a block
 * (64 or 128: the key tiles are read once per block), two warps per 16 of them (each taking half of
 * every key tile's 16-key blocks), compiled for ATT_DQ_DS_MIN_BLOCKS blocks a SM. 0: k_att_bwd_dq
 * always (the device's $FT_CUDA_ATT_DQ_DS=0 does the same at run time). */
#ifndef ATT_DQ_FROM_DS
#define ATT_DQ_FROM_DS 1
#endif
#ifndef ATT_DQ_DS_BQ
#define ATT_DQ_DS_BQ 128
#endif
#ifndef ATT_DQ_DS_MIN_BLOCKS
#define ATT_DQ_DS_MIN_BLOCKS 2
#endif
/* whether k_att_bwd_dq_ds loads a tile's dS a tile ahead (as its K tile), 8 registers live across
 * the products: nvcc 13, sm_90, at 2 blocks a SM (64 registers) 44 bytes spilled, none at the
 * tile (-DATT_DQ_DS_AHEAD=0); unbounded (-DATT_DQ_DS_MIN_BLOCKS=1) 126 registers, no spill.
 * NOT timed on a GPU. */
#ifndef ATT_DQ_DS_AHEAD
#define ATT_DQ_DS_AHEAD 1
#endif
#define ATT_MAX_HD 128

/* tile shapes of the forward and the dQ pass (per block: BQ queries; key tiles of BK) */
template <int HD, bool BF> struct att_cfg {
    static constexpr int BQ = 64;
    static constexpr int BK = (BF || HD <= 64) ? 64 : 32;
    static constexpr int NT = BK / 8;  /* 8-key column tiles of S */
    static constexpr int KS = HD / 16; /* 16-wide steps over the head dimension */
    static constexpr int DT = HD / 8;  /* 8-wide column tiles of O */
    /* row stride of row-major tiles: bf16 rows padded by 8 (a 16-byte multiple, and the
     * fragment loads of 8 rows x 4 lanes fall into 32 distinct banks); fp32 rows by 1 */
    static constexpr int LD = BF ? HD + 8 : HD + 1;
};
/* the forward's blocks: BQ queries, RW a warp, key tiles of BK split between SPLIT warps per RW
 * rows (W, ATT_FWD_WIDE: 16-key chunks in turn); NTH threads, compiled for MINB blocks a SM */
template <int HD, bool BF, bool W = BF && HD >= 32 && HD <= 64 && ATT_FWD_WIDE> struct att_fwd_cfg {
    static constexpr bool WIDE = W;
    static constexpr int SPLIT = WIDE ? 3 : (BF && HD >= 32 && HD <= 64) ? ATT_FWD_SPLIT : 1;
    static constexpr int RW = WIDE ? 32 : 16;
    static constexpr int BQ = WIDE ? 128 : att_cfg<HD, BF>::BQ;
    static constexpr int NTH = WIDE ? BQ / RW * SPLIT * WARP : ATT_THREADS * SPLIT;
    static constexpr int BK = WIDE ? NTH * 8 / HD : att_cfg<HD, BF>::BK;
    static constexpr int MINB = WIDE ? 1 : SPLIT > 1 ? ATT_FWD_SPLIT_MIN_BLOCKS : HD <= 64 ? ATT_FWD_MIN_BLOCKS : 1;
    static_assert(WIDE ? BK % (16 * SPLIT) == 0 : BK / 8 % (2 * SPLIT) == 0, "whole chunks, column tiles in pairs");
};
/* the dQ pass's split (att_cfg's tiles; SPLIT warps per 16 queries, NTH threads, MINB blocks a SM) */
template <int HD, bool BF> struct att_dq_cfg {
    static constexpr int SPLIT = (BF && HD >= 32 && HD <= 64) ? ATT_DQ_SPLIT : 1;
    static constexpr int NTH = ATT_THREADS * SPLIT;
    static constexpr int MINB = SPLIT > 1 ? ATT_DQ_SPLIT_MIN_BLOCKS : HD <= 64 ? ATT_DQ_MIN_BLOCKS : 1;
    static_assert(ATT_DQ_PARTS % SPLIT == 0, "whole parts per warp");
};
/* the dK/dV pass: KB keys per block (NW warps of 16), query tiles of QT, split between SPLIT warps
 * per 16 keys (NTH threads a block, compiled for MINB blocks a SM) */
template <int HD, bool BF> struct att_bwd_cfg {
    static constexpr int KB = (BF && HD == 64) ? ATT_DKDV_KB : 64, NW = KB / 16;
    static constexpr int QT = (BF || HD <= 64) ? 64 : 32;
    static constexpr int NTQ = QT / 8;
    static constexpr int KS = HD / 16;
    static constexpr int DT = HD / 8;
    static constexpr int LD = BF ? HD + 8 : HD + 1;
    static constexpr int SPLIT = (BF && HD >= 32 && HD <= 64) ? ATT_DKDV_SPLIT : 1;
    static constexpr int NTH = NW * WARP * SPLIT;
    static constexpr int MINB = KB > 64 ? 1 : SPLIT > 1 ? ATT_DKDV_SPLIT_MIN_BLOCKS : HD <= 64 ? ATT_DKDV_MIN_BLOCKS : 1;
    static_assert(ATT_DKDV_PARTS % SPLIT == 0, "whole parts per warp");
    static_assert(KB == 64 || (KB == 128 && QT == 64), "keys a block: 64, or 128 staged over both query buffers");
};

/* dS as the dK/dV pass stores it for the dQ pass (ATT_DQ_FROM_DS; causal, Tq = Tk = T): per
 * (b, h) the lower-triangular 64 x 64 tiles (query tile qi, key tile kj <= qi) only, tile
 * qi (qi + 1) / 2 + kj; a tile is 16 blocks of 16 queries x 16 keys, block 4 qq + kq (queries
 * 16 qq .., keys 16 kq ..; a dQ warp's 4 blocks together) of 512 bytes: lane l's 16 bytes at 16 l,
 * the A fragment of dS^T (keys x queries) that dK/dV's warp of keys 16 kq .. multiplies into
 * dK += dS^T Q -- dS^T[key g][queries 2t, 2t+1], [g + 8][2t ..], [g][2t + 8 ..], [g + 8][2t + 8 ..]
 * (mma.cuh's A layout) --: one 16-byte store per lane there, 512 contiguous bytes a warp, and one
 * 16-byte load per lane in the dQ pass. Rows and keys past T hold zeros (dS is 0 where not
 * visible). */
__host__ __device__ static inline size_t att_ds_tiles(int T) {
    const size_t nt = ((size_t)T + 63) / 64;
    return nt * (nt + 1) / 2;
}
/* the block blk (0..15) of tile (qi, kj) of (b, h), in 512-byte blocks from the buffer's start */
__host__ __device__ static inline size_t att_ds_block(int b, int h, int H, int T, int qi, int kj, int blk) {
    return (((size_t)b * H + h) * att_ds_tiles(T) + (size_t)qi * (qi + 1) / 2 + kj) * 16 + blk;
}

/* The bf16 copies of the inputs (device_cuda.cu's shadows: q, k, v and dout rounded once, the
 * values att_ld16's rounding gives) for the bf16 kernels, or NULL each: a tile is then loaded from
 * 2-byte elements instead of rounding 4-byte ones (half the global-memory bytes of the tiles the
 * kernels stream). vec16: hd % 8 == 0 and every copy 16-byte aligned (rows of 8 bf16 moves). */
typedef struct {
    const __nv_bfloat16 *q, *k, *v, *dout;
} att_bf16_t;
__host__ __device__ static inline bool att16_vec(const att_bf16_t &c, int hd) {
    return hd % 8 == 0 && (!c.q || aligned16(c.q)) && (!c.k || aligned16(c.k)) && (!c.v || aligned16(c.v)) &&
           (!c.dout || aligned16(c.dout));
}
/* p + off, or NULL when p is */
__host__ __device__ static inline const __nv_bfloat16 *att16_at(const __nv_bfloat16 *p, size_t off) {
    return p ? p + off : (const __nv_bfloat16 *)NULL;
}

/* ---- fp32 tiles: rows r < R of a head view (row r at src + r * stride floats) into a row-major
 * shared tile (ld), zero for r >= valid and for columns >= hd ---- */
template <int HD>
__device__ static inline void att_stage(float *tile, int ld, const float *src, size_t stride, int R, int valid, int hd,
                                        bool vec) {
    if (vec) { /* hd % 4 == 0, 16-byte aligned rows: one float4 per thread and step */
        for (int e = threadIdx.x; e < R * (HD / 4); e += blockDim.x) {
            const int r = e / (HD / 4), c = (e % (HD / 4)) * 4;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < valid && c < hd) x = ld4(src + (size_t)r * stride + c);
            tile[r * ld + c] = x.x, tile[r * ld + c + 1] = x.y, tile[r * ld + c + 2] = x.z, tile[r * ld + c + 3] = x.w;
        }
        return;
    }
    for (int e = threadIdx.x; e < R * HD; e += blockDim.x) {
        const int r = e / HD, c = e % HD;
        tile[r * ld + c] = (r < valid && c < hd) ? src[(size_t)r * stride + c] : 0.0f;
    }
}

/* ---- bf16 tiles, staged through registers ----
 * A tile of R head rows, row-major in shared memory with rows of LD = HD + 8 bf16 (16-byte
 * rows; 16-byte stores and the fragment loads below fall into distinct banks). Chunk e of the
 * tile is row e / (HD / 8), columns 8 (e % (HD / 8)) .. + 7; thread x moves chunks x + 128 u,
 * u < N. att_ld16 loads a thread's chunks into registers (from the bf16 copy with 16-byte
 * loads when there is one, else rounding the fp32 rows to nearest even; zero past the valid
 * rows and hd), att_st16 stores them with one 16-byte store each: a kernel issues the next
 * tile's loads before it multiplies the current one, so their latency overlaps the products. */
/* whether the next tile's loads are issued before the current tile's products (their registers
 * live across them): up to hd 64; at 128 the accumulators alone take 128 registers a thread and
 * the early loads made nvcc spill (dK/dV: 1.8 KB a thread), so they follow the products there */
#define ATT_EARLY(HD) ((HD) <= 64)
/* The backward passes' choice, split (ATT_DKDV_SPLIT, ATT_DQ_SPLIT) or not: split, the loads
 * follow the products -- 16 warps a SM cover their latency, and early their registers made
 * nvcc 13 spill more at the 128 a thread 2 blocks of 256 leave (sm_90, hd 64: dK/dV 712 bytes of
 * spill stores early, 296 late; dQ 120 and 12). The split forward keeps them early (126
 * registers, no spill). Build knobs (-D) for measuring. */
#ifndef ATT_DKDV_EARLY
#define ATT_DKDV_EARLY(HD, SPLIT) (ATT_EARLY(HD) && (SPLIT) == 1)
#endif
#ifndef ATT_DQ_EARLY
#define ATT_DQ_EARLY(HD, SPLIT) (ATT_EARLY(HD) && (SPLIT) == 1)
#endif
#ifndef ATT_FWD_EARLY
#define ATT_FWD_EARLY(HD, SPLIT) ATT_EARLY(HD)
#endif
/* (NTH: the block's threads: ATT_THREADS, or 128 x the split kernels' ATT_*_SPLIT) */
template <int R, int HD, int NTH = ATT_THREADS> struct att_regs {
    static constexpr int C = R * (HD / 8);        /* the tile's chunks */
    static constexpr int N = (C + NTH - 1) / NTH; /* a thread's, the last of them absent for some */
    /* chunk u of this thread is in the tile (always, when the chunks divide between the threads) */
    __device__ static bool has(int u) { return C % NTH == 0 || (int)threadIdx.x + NTH * u < C; }
    uint4 x[N];
};
/* chunk (row r, columns c .. c + 7) of a head view as 8 bf16 (ONLY16: from the bf16 copy, which
 * the caller has, 16-byte aligned: no rounding path and its registers) */
template <bool ONLY16 = false>
__device__ static inline uint4 att_chunk16(const float *src, const __nv_bfloat16 *src16, size_t stride, int r, int c,
                                           int valid, int hd, bool vec, bool vec16) {
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (r < valid && c < hd) {
        if (ONLY16 || (src16 && vec16)) x = ld16b(src16 + (size_t)r * stride + c);
        else if constexpr (!ONLY16) {
            float f[8];
            if (!src16 && vec) { /* hd % 4 == 0: a second float4 when it is inside the row */
                const float4 a = ld4(src + (size_t)r * stride + c);
                const float4 b = c + 4 < hd ? ld4(src + (size_t)r * stride + c + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
                f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
            } else
                #pragma unroll
                for (int j = 0; j < 8; j++)
                    f[j] = c + j >= hd ? 0.0f : src16 ? bf16_to_f(src16[(size_t)r * stride + c + j])
                                                      : src[(size_t)r * stride + c + j];
            x = make_uint4(pack_bf16(f[0], f[1]), pack_bf16(f[2], f[3]), pack_bf16(f[4], f[5]), pack_bf16(f[6], f[7]));
        }
    }
    return x;
}
template <bool ONLY16 = false, int R, int HD, int NTH>
__device__ static inline void att_ld16(att_regs<R, HD, NTH> &g, const float *src, const __nv_bfloat16 *src16,
                                       size_t stride, int valid, int hd, bool vec, bool vec16) {
    #pragma unroll
    for (int u = 0; u < g.N; u++) {
        const int e = threadIdx.x + NTH * u, r = e / (HD / 8), c = (e % (HD / 8)) * 8;
        if (g.has(u)) g.x[u] = att_chunk16<ONLY16>(src, src16, stride, r, c, valid, hd, vec, vec16);
    }
}
/* rows r < R straight into a row-major tile (rows of HD + 8), a chunk at a time: a block's own
 * rows, staged once (zero from valid on; ONLY16 as att_chunk16) */
template <int HD, int NTH, bool ONLY16 = false>
__device__ static inline void att_stage16(__nv_bfloat16 *tile, const float *src, const __nv_bfloat16 *src16,
                                          size_t stride, int R, int valid, int hd, bool vec, bool vec16) {
    for (int e = threadIdx.x; e < R * (HD / 8); e += NTH) {
        const int r = e / (HD / 8), c = (e % (HD / 8)) * 8;
        st16b(tile + r * (HD + 8) + c, att_chunk16<ONLY16>(src, src16, stride, r, c, valid, hd, vec, vec16));
    }
}
/* (CUT: rows r < rows only) */
template <bool CUT = false, int R, int HD, int NTH>
__device__ static inline void att_st16(__nv_bfloat16 *tile, const att_regs<R, HD, NTH> &g, int rows = R) {
    #pragma unroll
    for (int u = 0; u < g.N; u++) {
        const int e = threadIdx.x + NTH * u, r = e / (HD / 8), c = (e % (HD / 8)) * 8;
        if (g.has(u) && (!CUT || r < rows)) st16b(tile + r * (HD + 8) + c, g.x[u]);
    }
}

/* ---- the two product engines over a warp's 16 rows ----
 * acc[j][*] (+)= rows (r = 16 w + g, r + 8) of A times rows (8 j + 2 t, 8 j + 2 t + 1) of B,
 * dotted over HD: S-like products (A, B row-major tiles, ld). */
template <int HD, int NT>
__device__ static inline void att_dots_f32(float acc[NT][4], const float *A, const float *B, int ld, int g, int t) {
    const float *a0 = A + g * ld, *a1 = A + (g + 8) * ld;
    for (int d = 0; d < HD; d++) {
        const float x0 = a0[d], x1 = a1[d];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float y0 = B[(8 * j + 2 * t) * ld + d], y1 = B[(8 * j + 2 * t + 1) * ld + d];
            acc[j][0] += x0 * y0;
            acc[j][1] += x0 * y1;
            acc[j][2] += x1 * y0;
            acc[j][3] += x1 * y1;
        }
    }
}
/* A fragments of a warp's 16 rows (row-major bf16 tile, ld) for every 16-wide step of HD: one
 * ldmatrix each (mma.cuh; matrices rows 0-7 and 8-15 of columns 16 kk .. + 7, then of + 8 .. + 15:
 * lane l points at row l % 16, column 16 kk + 8 (l / 16)) */
template <int KS>
__device__ static inline void att_frags(uint32_t fa[KS][4], const __nv_bfloat16 *A, int ld, int g, int t) {
    const int lane = 4 * g + t;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) ldsm_x4(fa[kk], A + (lane & 15) * ld + 16 * kk + 8 * (lane >> 4));
}
/* acc[j] += A (fragments) times rows 8 j .. 8 j + 7 of the row-major tile B, over HD. The B
 * fragments of two column tiles j, j + 1 and one 16-wide step kk are one ldmatrix (mma.cuh):
 * matrices (j, kk's low 8 columns), (j, high 8), (j + 1, low), (j + 1, high); lane l points at
 * row 8 (j + l / 16) + l % 8, column 16 kk + 8 (l / 8 % 2). Per accumulator the products run
 * over kk in order, as before. */
/* (R row tiles of 16, acc[r] from fa[r]: each B fragment loaded serves the R tiles' products, in
 * the order of one tile's for each accumulator) */
template <int R, int KS, int NT>
__device__ static inline void att_dots_bfr(float (*acc)[NT][4], const uint32_t (*fa)[KS][4], const __nv_bfloat16 *B,
                                           int ld, int g, int t) {
    static_assert(NT % 2 == 0, "column tiles in pairs");
    const int lane = 4 * g + t;
    const __nv_bfloat16 *p = B + (8 * (lane >> 4) + (lane & 7)) * ld + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int j = 0; j < NT; j += 2)
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t b[4];
            ldsm_x4(b, p + 8 * j * ld + 16 * kk);
#pragma unroll
            for (int r = 0; r < R; r++) {
                mma_bf16(acc[r][j], fa[r][kk], b[0], b[1]);
                mma_bf16(acc[r][j + 1], fa[r][kk], b[2], b[3]);
            }
        }
}
template <int KS, int NT>
__device__ static inline void att_dots_bf(float acc[NT][4], const uint32_t fa[KS][4], const __nv_bfloat16 *B, int ld,
                                          int g, int t) {
    att_dots_bfr<1, KS, NT>((float (*)[NT][4])acc, (const uint32_t (*)[KS][4])fa, B, ld, g, t);
}
/* out[jd] += P (the warp's 16 rows x 16*KP columns, registers in the C layout of NT = 2 KP
 * column tiles) times B (rows 16 kk .. of the row-major bf16 tile B[k][n], ld). A B fragment
 * register holds B[2t][n] and B[2t+1][n], two rows apart: ldmatrix.trans (mma.cuh) gives them
 * from the row-major tile, the fragments of two column tiles jd, jd + 1 at once -- matrices
 * (rows 16 kk .. + 7, columns 8 jd ..), (rows + 8, 8 jd), (rows 16 kk, 8 (jd + 1)), (+ 8,
 * 8 (jd + 1)); lane l points at row 16 kk + 8 (l / 8 % 2) + l % 8, column 8 (jd + l / 16). Rows
 * of LD = HD + 8 bf16 put a matrix's 8 rows in distinct banks: one wavefront per matrix, half
 * the wavefronts of the two 16-bit loads per register the tile took before (and no transposed
 * copy of the tile). Per output tile the products run over kk in order, as before. */
/* (R row tiles: out[r] += P[r] B, each B fragment loaded serving the R tiles) */
template <int R, int NT, int DT>
__device__ static inline void att_pv_rmr(float (*out)[DT][4], const float (*P)[NT][4], const __nv_bfloat16 *B, int ld,
                                         int g, int t) {
    static_assert(DT % 2 == 0, "column tiles in pairs");
    const int lane = 4 * g + t;
    const __nv_bfloat16 *p = B + (8 * ((lane >> 3) & 1) + (lane & 7)) * ld + 8 * (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t a[R][4];
#pragma unroll
        for (int r = 0; r < R; r++)
            a[r][0] = pack_bf16(P[r][2 * kk][0], P[r][2 * kk][1]), a[r][1] = pack_bf16(P[r][2 * kk][2], P[r][2 * kk][3]),
            a[r][2] = pack_bf16(P[r][2 * kk + 1][0], P[r][2 * kk + 1][1]),
            a[r][3] = pack_bf16(P[r][2 * kk + 1][2], P[r][2 * kk + 1][3]);
#pragma unroll
        for (int jd = 0; jd < DT; jd += 2) {
            uint32_t b[4];
            ldsm_x4_t(b, p + 16 * kk * ld + 8 * jd);
#pragma unroll
            for (int r = 0; r < R; r++) {
                mma_bf16(out[r][jd], a[r], b[0], b[1]);
                mma_bf16(out[r][jd + 1], a[r], b[2], b[3]);
            }
        }
    }
}
template <int NT, int DT>
__device__ static inline void att_pv_rm(float out[DT][4], const float P[NT][4], const __nv_bfloat16 *B, int ld, int g,
                                        int t) {
    att_pv_rmr<1, NT, DT>((float (*)[DT][4])out, (const float (*)[NT][4])P, B, ld, g, t);
}
/* P's registers (the warp's 16 rows x 16 KP columns, C layout of 2 KP column tiles) packed to bf16
 * as A fragments, one per 16 columns: the rounding every product from P's registers uses */
template <int KP>
__device__ static inline void att_pack_a(uint32_t a[KP][4], const float P[2 * KP][4]) {
#pragma unroll
    for (int kk = 0; kk < KP; kk++) {
        a[kk][0] = pack_bf16(P[2 * kk][0], P[2 * kk][1]), a[kk][1] = pack_bf16(P[2 * kk][2], P[2 * kk][3]);
        a[kk][2] = pack_bf16(P[2 * kk + 1][0], P[2 * kk + 1][1]), a[kk][3] = pack_bf16(P[2 * kk + 1][2], P[2 * kk + 1][3]);
    }
}
/* out[jd] += A (KP fragments already packed, att_pack_a's or loaded: the warp's 16 rows x 16 KP
 * columns) times B, as att_pv_rm (B's fragments by ldmatrix.trans from the row-major tile; per
 * output tile the products run over kk in order) */
template <int KP, int DT>
__device__ static inline void att_pv_rm_a(float out[DT][4], const uint32_t a[KP][4], const __nv_bfloat16 *B, int ld,
                                          int g, int t) {
    static_assert(DT % 2 == 0, "column tiles in pairs");
    const int lane = 4 * g + t;
    const __nv_bfloat16 *p = B + (8 * ((lane >> 3) & 1) + (lane & 7)) * ld + 8 * (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < KP; kk++)
#pragma unroll
        for (int jd = 0; jd < DT; jd += 2) {
            uint32_t b[4];
            ldsm_x4_t(b, p + 16 * kk * ld + 8 * jd);
            mma_bf16(out[jd], a[kk], b[0], b[1]);
            mma_bf16(out[jd + 1], a[kk], b[2], b[3]);
        }
}
/* The fp32 engine's P V: P goes through the warp's buffer pw (16 rows of nk + 1 floats),
 * then out[jd] += sum over k of P[row][k] B[k][8 jd + 2 t + e] (B row-major fp32, ld) */
template <int NT, int DT>
__device__ static inline void att_pv_f32(float out[DT][4], const float P[NT][4], float *pw, const float *B, int ld,
                                         int g, int t) {
    const int lp = NT * 8 + 1;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        pw[g * lp + 8 * j + 2 * t] = P[j][0];
        pw[g * lp + 8 * j + 2 * t + 1] = P[j][1];
        pw[(g + 8) * lp + 8 * j + 2 * t] = P[j][2];
        pw[(g + 8) * lp + 8 * j + 2 * t + 1] = P[j][3];
    }
    __syncwarp();
    for (int k = 0; k < NT * 8; k++) {
        const float p0 = pw[g * lp + k], p1 = pw[(g + 8) * lp + k];
#pragma unroll
        for (int jd = 0; jd < DT; jd++) {
            const float v0 = B[k * ld + 8 * jd + 2 * t], v1 = B[k * ld + 8 * jd + 2 * t + 1];
            out[jd][0] += p0 * v0;
            out[jd][1] += p0 * v1;
            out[jd][2] += p1 * v0;
            out[jd][3] += p1 * v1;
        }
    }
    __syncwarp();
}

/* the softmax's exponential (see the top): the bf16 engine's 2^(x log2 e) -- on a GPU PTX's
 * ex2.approx.ftz.f32, one special-function instruction (exp2f's guard of the subnormal range
 * took registers: nvcc spilled more in both backward passes), under the emulator the host's
 * exp2f (results below 2^-126 are not flushed to 0 there: negligible beside the row's largest
 * term, 1) --,
 * the fp32 engine's ops_expf */
template <bool BF> __device__ static inline float att_exp(float x) {
    if constexpr (BF) {
#if CUDA_EMU
        return exp2f(x * 1.44269504088896341f);
#else
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.44269504088896341f));
        return y;
#endif
    } else
        return ops_expf(x);
}
/* the keys a query row sees ([lo, hi)); nothing for rows past Tq */
__device__ static inline void att_rows_range(int i, int Tq, int Tk, int causal, int window, int *lo, int *hi) {
    if (i >= Tq) {
        *lo = *hi = 0;
        return;
    }
    ops_att_range(i, Tq, Tk, causal, window, lo, hi);
}

/* ---- forward ---- */
/* One key tile's online softmax on a warp's registers: s (its 16 rows x NT 8-key column tiles
 * of Q K^T from key k0) scaled, masked to each row's [lo, hi) and turned into P; the rows'
 * running max m and sum l updated and o rescaled (a row's 4 lanes share m) */
template <int NT, int DT, bool BF>
__device__ static inline void att_softmax_tile(float s[NT][4], float o[DT][4], float m[2], float l[2], const int lo[2],
                                               const int hi[2], int k0, float scale, int t) {
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float mx = -INFINITY;
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = k0 + 8 * j + 2 * t + e;
                float x = s[j][2 * rr + e] * scale;
                if (key < lo[rr] || key >= hi[rr]) x = -INFINITY;
                s[j][2 * rr + e] = x;
                mx = fmaxf(mx, x);
            }
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
        const float mn = fmaxf(m[rr], mx);
        if (mn == -INFINITY) { /* nothing visible yet in this row */
            #pragma unroll
            for (int j = 0; j < NT; j++) s[j][2 * rr] = s[j][2 * rr + 1] = 0.0f;
            continue;
        }
        if (mn != m[rr]) {
            const float f = m[rr] == -INFINITY ? 0.0f : att_exp<BF>(m[rr] - mn);
            l[rr] *= f;
            #pragma unroll
            for (int jd = 0; jd < DT; jd++) o[jd][2 * rr] *= f, o[jd][2 * rr + 1] *= f;
            m[rr] = mn;
        }
        #pragma unroll
        for (int j = 0; j < NT; j++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const float p = att_exp<BF>(s[j][2 * rr + e] - mn);
                s[j][2 * rr + e] = p;
                l[rr] += p;
            }
    }
}
/* A warp's row (of the C layout: lane t holds columns 8 jd + 2 t, + 1 of each group jd, in r) as
 * bf16 into row16, hd % 4 == 0 and row16 8-byte aligned: lanes t and t ^ 1 swap halves so that
 * each stores 4 bf16 (8 bytes) and a row's 4 lanes fill the 32-byte sector of two column groups,
 * not half of each (every lane calls this, for the shuffle; ok: the row exists) */
template <int DT>
__device__ static inline void att_row16(__nv_bfloat16 *row16, const float r[DT][2], int hd, int t, bool ok) {
    static_assert(DT % 2 == 0, "column groups in pairs");
    #pragma unroll
    for (int jd = 0; jd < DT; jd += 2) {
        const uint32_t a = pack_bf16(r[jd][0], r[jd][1]), b = pack_bf16(r[jd + 1][0], r[jd + 1][1]);
        const uint32_t got = __shfl_xor_sync(FULL_MASK, (t & 1) ? a : b, 1);
        if (!ok) continue;
        if (t & 1) { /* group jd + 1's columns 2 (t - 1) .. + 3 */
            if (8 * (jd + 1) + 2 * (t - 1) < hd) *(uint2 *)(row16 + 8 * (jd + 1) + 2 * (t - 1)) = make_uint2(got, b);
        } else if (8 * jd + 2 * t < hd) /* group jd's columns 2 t .. + 3 */
            *(uint2 *)(row16 + 8 * jd + 2 * t) = make_uint2(a, got);
    }
}
/* out = O / l, lse = m + log l for the warp's rows i0w + g, + 8 (a row that saw no key: out 0,
 * lse +inf); out16 (or NULL): out's bf16 shadow (device_cuda.cu), the rounding of the values
 * stored in out, written beside them (8-byte stores by att_row16 when hd % 4 == 0 and out16 is
 * 8-byte aligned, else one bf16 at a time) */
template <int DT>
__device__ static inline void att_fwd_out(float *out, __nv_bfloat16 *out16, float *lse, const float o[DT][4],
                                          const float m[2], const float l[2], int b, int h, int i0w, int Tq, int H,
                                          int hd, int g, int t) {
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float lt = l[rr] + __shfl_xor_sync(FULL_MASK, l[rr], 1);
        lt += __shfl_xor_sync(FULL_MASK, lt, 2);
        const int i = i0w + g + 8 * rr;
        const bool ok = i < Tq;
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        const size_t ro = ((size_t)b * Tq + i) * H * hd + (size_t)h * hd;
        float y[DT][2];
        #pragma unroll
        for (int jd = 0; jd < DT; jd++) y[jd][0] = o[jd][2 * rr] * inv, y[jd][1] = o[jd][2 * rr + 1] * inv;
        if (out16 && hd % 4 == 0 && ((uintptr_t)out16 & 7u) == 0) att_row16<DT>(out16 + ro, y, hd, t, ok);
        if (!ok) continue;
        float *orow = out + ro;
        #pragma unroll
        for (int jd = 0; jd < DT; jd++) {
            const int c = 8 * jd + 2 * t;
            if (hd % 2 == 0 && aligned16(out)) {
                if (c < hd) st2(orow + c, make_float2(y[jd][0], y[jd][1]));
            } else {
                if (c < hd) orow[c] = y[jd][0];
                if (c + 1 < hd) orow[c + 1] = y[jd][1];
            }
            if (out16 && !(hd % 4 == 0 && ((uintptr_t)out16 & 7u) == 0)) {
                if (c < hd) out16[ro + c] = to_bf16(y[jd][0]);
                if (c + 1 < hd) out16[ro + c + 1] = to_bf16(y[jd][1]);
            }
        }
        if (t == 0) lse[((size_t)b * H + h) * Tq + i] = lt > 0.0f ? m[rr] + logf(lt) : INFINITY;
    }
}
/* The key and value tiles a block of queries i0 .. i0 + nq - 1 walks in the bf16 forward and dQ
 * passes (tile n: keys klo + BK n ..; k, v and their copies k16, v16 at the block's (b, kh)),
 * double-buffered in shared memory (sk(n), sv(n)) through a thread's registers (ONLY16: from k16,
 * v16 alone, which the caller has, 16-byte aligned; BK: att_cfg's, or the wide forward's; CUT:
 * loaded to the block's last key, stored to its 16-row chunk) */
template <int HD, int NTH = ATT_THREADS, bool ONLY16 = false, int BK = att_cfg<HD, true>::BK, bool CUT = false>
struct att_kv_pipe {
    typedef att_cfg<HD, true> C;
    __nv_bfloat16 *s0; /* buffer n & 1: its key tile at sk(n), its value tile at sv(n) */
    att_regs<BK, HD, NTH> rk, rv;
    const float *k, *v;
    const __nv_bfloat16 *k16, *v16;
    size_t ks;
    int klo, tiles, Tk, hd, kend; /* kend: the keys' end the loads stop at (Tk, or CUT: the block's last key + 1) */
    bool vec, vec16;
    /* smem: 4 tiles of BK rows of LD */
    __device__ att_kv_pipe(unsigned char *smem, const float *k_, const float *v_, const __nv_bfloat16 *k16_,
                           const __nv_bfloat16 *v16_, size_t ks_, int i0, int nq, int Tq, int Tk_, int hd_, int causal,
                           int window, bool vec_, bool vec16_)
        : k(k_), v(v_), k16(k16_), v16(v16_), ks(ks_), Tk(Tk_), hd(hd_), vec(vec_), vec16(vec16_) {
        s0 = (__nv_bfloat16 *)smem;
        int khi, unused;
        ops_att_range(i0, Tq, Tk, causal, window, &klo, &unused);
        ops_att_range(i0 + nq - 1, Tq, Tk, causal, window, &unused, &khi);
        tiles = khi > klo ? (khi - klo + BK - 1) / BK : 0;
        kend = CUT ? khi : Tk;
    }
    /* (computed, not an array of pointers: a dynamically indexed array would live in local memory) */
    __device__ __nv_bfloat16 *sk(int n) const { return s0 + (n & 1) * 2 * BK * C::LD; }
    __device__ __nv_bfloat16 *sv(int n) const { return sk(n) + BK * C::LD; }
    /* the block's own rows (nq of q and, when given, of dout, row stride qs) into sk(1), sv(1),
     * then (after a barrier) into the A fragments fa, fb of rows 16 w .. + 15 */
    __device__ void own_rows(uint32_t fa[C::KS][4], uint32_t fb[C::KS][4], const float *q, const __nv_bfloat16 *q16,
                             const float *d, const __nv_bfloat16 *d16, size_t qs, int nq, int w, int g, int t) {
        att_ld16(rk, q, q16, qs, nq, hd, vec, vec16);
        att_st16(sk(1), rk);
        if (d) {
            att_ld16(rv, d, d16, qs, nq, hd, vec, vec16);
            att_st16(sv(1), rv);
        }
        __syncthreads();
        att_frags<C::KS>(fa, sk(1) + 16 * w * C::LD, C::LD, g, t);
        if (d) att_frags<C::KS>(fb, sv(1) + 16 * w * C::LD, C::LD, g, t);
    }
    __device__ void load(int n) {
        const int k0 = klo + BK * n, nk = min(BK, kend - k0);
        const size_t ko = (size_t)k0 * ks;
        att_ld16<ONLY16>(rk, k + ko, att16_at(k16, ko), ks, nk, hd, vec, vec16);
        att_ld16<ONLY16>(rv, v + ko, att16_at(v16, ko), ks, nk, hd, vec, vec16);
    }
    /* (CUT: the rows to the 16-row chunk that holds the last key loaded; zeros past that key) */
    __device__ void store(int n) {
        const int rows = CUT ? min(BK, (kend - klo - BK * n + 15) / 16 * 16) : BK;
        att_st16<CUT>(sk(n), rk, rows);
        att_st16<CUT>(sv(n), rv, rows);
    }
    /* the first tile in place (after own_rows: its fragments are read before this barrier) */
    __device__ void start() {
        if (tiles) {
            load(0);
            store(0);
        }
        __syncthreads();
    }
};
template <int HD, bool BF, bool W> static inline size_t att_fwd_smem() {
    typedef att_cfg<HD, BF> C;
    typedef att_fwd_cfg<HD, BF, W> S;
    if (BF) { /* att_fwd_bf, att_fwd_wide: K and V tiles, twice (the queries staged before them, in
               * place); the shares' states after them: a float4 per lane, 16-row tile and DT + 1 */
        const size_t tiles = sizeof(__nv_bfloat16) * 4 * (size_t)S::BK * C::LD;
        const size_t rows = sizeof(__nv_bfloat16) * (size_t)S::BQ * C::LD;
        const size_t red = S::SPLIT > 1 ? sizeof(float4) * (S::BQ / 16) * WARP * (C::DT + 1) : 0;
        return tiles > rows ? (tiles > red ? tiles : red) : (rows > red ? rows : red);
    }
    return sizeof(float) * ((size_t)C::BQ * C::LD + 2 * (size_t)C::BK * C::LD + 4 * 16 * (C::BK + 1));
}
/* The split forward's shares meet (ATT_FWD_SPLIT): share sh = 1, 2, ... hands its state (o, and
 * m, l of the lane's two rows) to share 0's warp of the same rows through shared memory (red,
 * idle by then: a lane's float4s o's DT tiles, then (m, l), at (wk (DT + 1) + u) 32 + lane),
 * which merges it: m' = max(m, m_sh), o' = o exp(m - m') + o_sh exp(m_sh - m'), the same for l
 * (a side that saw no key yet, m = -inf, counts 0). In share order: fixed. act: the warps' rows
 * exist (the same for every share of them; a row group with none skips the exchange). */
template <int DT, int SPLIT>
__device__ static inline void att_fwd_merge(float4 *red, float o[DT][4], float m[2], float l[2], int wk, int wq,
                                            int lane, bool act = true) {
    constexpr int NU = DT + 1;
    #pragma unroll 1
    for (int sh = 1; sh < SPLIT; sh++) {
        if (act && wq == sh) {
            #pragma unroll
            for (int jd = 0; jd < DT; jd++) red[(wk * NU + jd) * WARP + lane] = make_float4(o[jd][0], o[jd][1], o[jd][2], o[jd][3]);
            red[(wk * NU + DT) * WARP + lane] = make_float4(m[0], m[1], l[0], l[1]);
        }
        __syncthreads();
        if (act && wq == 0) {
            const float4 ml = red[(wk * NU + DT) * WARP + lane];
            const float m1[2] = {ml.x, ml.y}, l1[2] = {ml.z, ml.w};
            float f0[2], f1[2];
            #pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                const float mn = fmaxf(m[rr], m1[rr]);
                f0[rr] = m[rr] == -INFINITY ? 0.0f : att_exp<true>(m[rr] - mn);
                f1[rr] = m1[rr] == -INFINITY ? 0.0f : att_exp<true>(m1[rr] - mn);
                m[rr] = mn;
                l[rr] = l[rr] * f0[rr] + l1[rr] * f1[rr];
            }
            #pragma unroll
            for (int jd = 0; jd < DT; jd++) {
                const float4 x = red[(wk * NU + jd) * WARP + lane];
                o[jd][0] = o[jd][0] * f0[0] + x.x * f1[0];
                o[jd][1] = o[jd][1] * f0[0] + x.y * f1[0];
                o[jd][2] = o[jd][2] * f0[1] + x.z * f1[1];
                o[jd][3] = o[jd][3] * f0[1] + x.w * f1[1];
            }
        }
        __syncthreads();
    }
}
/* The bf16 engine's forward: the block's 64 query rows become each warp's A fragments once;
 * the key and value tiles are double-buffered as in att_dkdv_bf (the next tile's loads in
 * flight during the products, one barrier per tile), P V from the row-major value tile. */
template <int HD>
__device__ static inline void att_fwd_bf(float *out, __nv_bfloat16 *out16, float *lse, const float *q, const float *k,
                                         const float *v, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window,
                                         float scale, const att_bf16_t &c16) {
    typedef att_cfg<HD, true> C;
    typedef att_fwd_cfg<HD, true, false> S;
    /* W4 warps per share; a share's NS column tiles of 8 keys, KSH keys, of each key tile */
    constexpr int W4 = ATT_THREADS / WARP, NS = C::NT / S::SPLIT, KSH = 8 * NS;
    static_assert(C::BQ == C::BK, "the query tile is staged in a key tile's buffer");
    DYN_SHARED(unsigned char, smem);
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
    /* warp w: queries 16 wk .., keys KSH wq .. of each tile */
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int wk = S::SPLIT > 1 ? w % W4 : w, wq = S::SPLIT > 1 ? w / W4 : 0; /* (unsplit: w, 0) */
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const int nq = min(C::BQ, Tq - i0);
    const size_t qo = ((size_t)b * Tq + i0) * qs + (size_t)h * hd, kvb = (size_t)b * Tk * ks + (size_t)kh * hd;
    att_kv_pipe<HD, S::NTH> kv(smem, k + kvb, v + kvb, att16_at(c16.k, kvb), att16_at(c16.v, kvb), ks, i0, nq, Tq,
                               Tk, hd, causal, window, hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v),
                               att16_vec(c16, hd));
    int lo[2], hi[2];
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) att_rows_range(i0 + 16 * wk + g + 8 * rr, Tq, Tk, causal, window, &lo[rr], &hi[rr]);
    uint32_t qa[C::KS][4];
    kv.own_rows(qa, qa, q + qo, att16_at(c16.q, qo), NULL, NULL, qs, nq, wk, g, t);
    kv.start();
    float o[C::DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++) o[jd][0] = o[jd][1] = o[jd][2] = o[jd][3] = 0.0f;
    const int c0 = KSH * wq; /* the share's first key of a tile */
    for (int n = 0; n < kv.tiles; n++) {
        if (ATT_FWD_EARLY(HD, S::SPLIT) && n + 1 < kv.tiles) kv.load(n + 1);
        float s[NS][4];
        #pragma unroll
        for (int j = 0; j < NS; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        att_dots_bf<C::KS, NS>(s, qa, kv.sk(n) + c0 * C::LD, C::LD, g, t);
        att_softmax_tile<NS, C::DT, true>(s, o, m, l, lo, hi, kv.klo + C::BK * n + c0, scale, t);
        att_pv_rm<NS, C::DT>(o, s, kv.sv(n) + c0 * C::LD, C::LD, g, t);
        if (n + 1 < kv.tiles) {
            if (!ATT_FWD_EARLY(HD, S::SPLIT)) kv.load(n + 1);
            kv.store(n + 1);
        }
        __syncthreads();
    }
    if constexpr (S::SPLIT > 1) { /* the shares' states into share 0's warps, which store the rows */
        att_fwd_merge<C::DT, S::SPLIT>((float4 *)smem, o, m, l, wk, wq, lane);
        if (wq) return;
    }
    att_fwd_out<C::DT>(out, out16, lse, o, m, l, b, h, i0 + 16 * wk, Tq, H, hd, g, t);
}
/* The wide forward (ATT_FWD_WIDE; taken where q, k and v have 16-byte aligned bf16 shadows, as they
 * have at bf16 with memory to spare -- else att_fwd_bf; their rounding paths took registers that
 * made nvcc spill): warp w takes queries 32 wr .. + 31 (wr = w % 4) as two 16-row
 * tiles and the chunks c = NC n + j (keys 16 j .. + 15 of tile n) with c % 3 = wq (wq = w / 4); the
 * block's queries pass through shared memory once (as many rows as its warps hold), into the two
 * tiles' A fragments. A chunk that none of the warp's rows sees ([wlo, whi): the keys of its first
 * row's range to its last's) is skipped: warp-uniform, and it would have added nothing (every key
 * masked). */
template <int HD>
__device__ static inline void att_fwd_wide(float *out, __nv_bfloat16 *out16, float *lse, const float *q, const float *k,
                                           const float *v, int Tq, int Tk, int H, int Hkv, int hd, int causal,
                                           int window, float scale, const att_bf16_t &c16) {
    typedef att_cfg<HD, true> C;
    typedef att_fwd_cfg<HD, true, true> S;
    constexpr int RG = S::BQ / S::RW, KC = 16, NC = S::BK / KC; /* row groups; chunks of KC keys, NC a tile */
    DYN_SHARED(unsigned char, smem);
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * S::BQ, kh = h / (H / Hkv);
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int wr = w % RG, wq = w / RG, r0 = i0 + S::RW * wr; /* the warp's first row */
    const bool act = r0 < Tq;
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const int nq = min(S::BQ, Tq - i0);
    const size_t qo = ((size_t)b * Tq + i0) * qs + (size_t)h * hd, kvb = (size_t)b * Tk * ks + (size_t)kh * hd;
    const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v), vec16 = att16_vec(c16, hd);
    att_kv_pipe<HD, S::NTH, true, S::BK, true> kv(smem, k + kvb, v + kvb, att16_at(c16.k, kvb), att16_at(c16.v, kvb), ks, i0, nq, Tq,
                                     Tk, hd, causal, window, vec, vec16);
    /* the queries of the warps with rows into the two tiles' fragments; the barrier after: tile 0
     * lands where they were */
    __nv_bfloat16 *sq = (__nv_bfloat16 *)smem;
    att_stage16<HD, S::NTH, true>(sq, q + qo, att16_at(c16.q, qo), qs, (nq + S::RW - 1) / S::RW * S::RW, nq, hd, vec, vec16);
    __syncthreads();
    uint32_t qa[2][C::KS][4] = {};
    if (act)
        #pragma unroll
        for (int u = 0; u < 2; u++) att_frags<C::KS>(qa[u], sq + (S::RW * wr + 16 * u) * C::LD, C::LD, g, t);
    __syncthreads();
    kv.start();
    int wlo = 0, whi = 0, unused;
    if (act) {
        ops_att_range(r0, Tq, Tk, causal, window, &wlo, &unused);
        ops_att_range(min(r0 + S::RW, Tq) - 1, Tq, Tk, causal, window, &unused, &whi);
    }
    float o[2][C::DT][4] = {}, m[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, l[2][2] = {};
    for (int n = 0; n < kv.tiles; n++) {
        if (ATT_FWD_WIDE_EARLY && n + 1 < kv.tiles) kv.load(n + 1);
        #pragma unroll
        for (int j = 0; j < NC; j++) {
            const int kb = kv.klo + S::BK * n + KC * j; /* the chunk's first key */
            if ((NC * n + j) % S::SPLIT != wq || kb >= whi || kb + KC <= wlo) continue;
            float sc[2][KC / 8][4] = {};
            att_dots_bfr<2, C::KS, KC / 8>(sc, qa, kv.sk(n) + KC * j * C::LD, C::LD, g, t);
            int lo[2][2], hi[2][2]; /* the rows' key ranges (recomputed here: fewer registers across the walk) */
            #pragma unroll
            for (int u = 0; u < 2; u++)
                #pragma unroll
                for (int rr = 0; rr < 2; rr++)
                    att_rows_range(r0 + 16 * u + g + 8 * rr, Tq, Tk, causal, window, &lo[u][rr], &hi[u][rr]);
            #pragma unroll
            for (int u = 0; u < 2; u++) att_softmax_tile<KC / 8, C::DT, true>(sc[u], o[u], m[u], l[u], lo[u], hi[u], kb, scale, t);
            att_pv_rmr<2, KC / 8, C::DT>(o, sc, kv.sv(n) + KC * j * C::LD, C::LD, g, t);
        }
        if (n + 1 < kv.tiles) {
            if (!ATT_FWD_WIDE_EARLY) kv.load(n + 1);
            kv.store(n + 1);
        }
        __syncthreads();
    }
    /* the shares' states into share 0's warps (16-row tile 2 wr + u), which store the rows */
    #pragma unroll
    for (int u = 0; u < 2; u++) att_fwd_merge<C::DT, S::SPLIT>((float4 *)smem, o[u], m[u], l[u], 2 * wr + u, wq, lane, act);
    if (wq || !act) return;
    #pragma unroll
    for (int u = 0; u < 2; u++) att_fwd_out<C::DT>(out, out16, lse, o[u], m[u], l[u], b, h, r0 + 16 * u, Tq, H, hd, g, t);
}
template <int HD, bool BF, bool W>
__global__ void __launch_bounds__(att_fwd_cfg<HD, BF, W>::NTH, att_fwd_cfg<HD, BF, W>::MINB)
k_att_fwd(float *out, __nv_bfloat16 *out16, float *lse, const float *q, const float *k, const float *v, int Tq, int Tk,
          int H, int Hkv, int hd, int causal, int window, float scale, att_bf16_t c16) {
    if constexpr (BF) {
        if constexpr (W)
            att_fwd_wide<HD>(out, out16, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window, scale, c16);
        else
            att_fwd_bf<HD>(out, out16, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window, scale, c16);
        return;
    } else { /* the fp32 engine: Q, K and V tiles row-major in shared memory, single-buffered */
        typedef att_cfg<HD, false> C;
        DYN_SHARED(float, sQ);
        float *sK = sQ + C::BQ * C::LD, *sV = sK + C::BK * C::LD, *sP = sV + C::BK * C::LD;
        const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
        const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
        const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
        const float *kb = k + (size_t)b * Tk * ks + (size_t)kh * hd, *vb = v + (size_t)b * Tk * ks + (size_t)kh * hd;
        const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
        const int nq = min(C::BQ, Tq - i0);
        att_stage<HD>(sQ, C::LD, q + ((size_t)b * Tq + i0) * qs + (size_t)h * hd, qs, C::BQ, nq, hd, vec);
        int lo[2], hi[2], klo, khi, unused;
        #pragma unroll
        for (int rr = 0; rr < 2; rr++) att_rows_range(i0 + 16 * w + g + 8 * rr, Tq, Tk, causal, window, &lo[rr], &hi[rr]);
        ops_att_range(i0, Tq, Tk, causal, window, &klo, &unused);
        ops_att_range(i0 + nq - 1, Tq, Tk, causal, window, &unused, &khi);
        float o[C::DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int jd = 0; jd < C::DT; jd++) o[jd][0] = o[jd][1] = o[jd][2] = o[jd][3] = 0.0f;
        for (int k0 = klo; k0 < khi; k0 += C::BK) {
            const int nk = min(C::BK, Tk - k0);
            __syncthreads(); /* the previous tile's readers are done */
            const size_t ko = (size_t)k0 * ks;
            att_stage<HD>(sK, C::LD, kb + ko, ks, C::BK, nk, hd, vec);
            att_stage<HD>(sV, C::LD, vb + ko, ks, C::BK, nk, hd, vec);
            __syncthreads();
            float s[C::NT][4];
            #pragma unroll
            for (int j = 0; j < C::NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
            att_dots_f32<HD, C::NT>(s, sQ + 16 * w * C::LD, sK, C::LD, g, t);
            att_softmax_tile<C::NT, C::DT, false>(s, o, m, l, lo, hi, k0, scale, t);
            att_pv_f32<C::NT, C::DT>(o, s, sP + w * 16 * (C::BK + 1), sV, C::LD, g, t);
        }
        att_fwd_out<C::DT>(out, NULL, lse, o, m, l, b, h, i0 + 16 * w, Tq, H, hd, g, t);
    }
}

/* ---- backward: D = rowsum(dO o O), one warp per (b, i, h); dout16 (or NULL): dout's bf16 shadow
 * (device_cuda.cu), written in the same pass from the values read. A block's ATT_ROWDOT_WARPS
 * warps take consecutive queries i of one (b, h), so that their D values, consecutive in Drow,
 * leave together (one 32-byte sector for 8, where a warp storing its own 4 bytes touched a sector
 * each: 4% of the pass's sectors); each warp still reads its own rows of dout and out whole. ---- */
#define ATT_ROWDOT_WARPS 8
__global__ void k_att_rowdot(float *Drow, __nv_bfloat16 *dout16, const float *dout, const float *out, int Tq, int H,
                             int hd) {
    __shared__ float dsum[ATT_ROWDOT_WARPS];
    const int groups = (Tq + ATT_ROWDOT_WARPS - 1) / ATT_ROWDOT_WARPS, w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const size_t bh = blockIdx.x / groups, b = bh / H, h = bh % H; /* Drow's row bh = b H + h */
    const int i0 = (int)(blockIdx.x % groups) * ATT_ROWDOT_WARPS, i = i0 + w;
    if (i < Tq) {
        const size_t it = (b * Tq + i) * H + h; /* dout's and out's row (b, i, h) */
        const float *a = dout + it * hd, *o = out + it * hd;
        __nv_bfloat16 *a16 = dout16 ? dout16 + it * hd : NULL;
        float s = 0.0f;
        for (int d = lane; d < hd; d += WARP) {
            const float x = a[d];
            s += x * o[d];
            if (a16) a16[d] = to_bf16(x);
        }
        s = warp_sum(s);
        if (lane == 0) dsum[w] = s;
    }
    __syncthreads();
    if ((int)threadIdx.x < ATT_ROWDOT_WARPS && i0 + (int)threadIdx.x < Tq)
        Drow[bh * Tq + i0 + threadIdx.x] = dsum[threadIdx.x];
}

/* row[c] += a0, row[c + 1] += a1 for the columns below hd: one 8-byte access when v2 (a
 * warp's 4 lanes of a row then cover one 32-byte sector: the gradients' read-modify-write was 2
 * scalar accesses of half a sector's use) */
__host__ __device__ static inline bool att_pairs(const float *p, int hd) { return hd % 2 == 0 && ((uintptr_t)p & 7u) == 0; }
__device__ static inline void att_add2(float *row, int c, int hd, float a0, float a1, bool v2) {
    if (c >= hd) return;
    if (v2) {
        float2 x = ld2(row + c);
        x.x += a0, x.y += a1;
        st2(row + c, x);
        return;
    }
    row[c] += a0;
    if (c + 1 < hd) row[c + 1] += a1;
}
/* The backward written into the fused q|k|v rows' gradient (device.h attention_backward_qkv):
 * when out is set, dq, dk and dv are not touched; row n = b T + i (Tq = Tk = T) of out (ld
 * floats) gets dq's head h at h hd, dk's head kh at Dq + kh hd, both rotated back at position
 * pos0 + i (ops_qkv_join_row's arithmetic), and dv's at Dq + Dkv + kh hd, STORED (not added:
 * every row of the grid is written, zeros where no query saw a key), with out16, out's bf16
 * shadow, beside them -- or, only16 (out marked products-only and a shadow taken: the qkv
 * projection's backward products its only readers), the shadow alone. Taken only when hd == HD (a column's rotation partner, hd / 2 further,
 * is then in the same lane's registers: tile jd + DT / 2) and out, out16 are 8- and 4-byte
 * aligned with an even ld (attention_join_ok). */
typedef struct {
    float *out;
    __nv_bfloat16 *out16;
    const float *cs, *sn; /* (positions, hd / 2) */
    size_t ld;
    int Dq, Dkv, pos0;
    int only16; /* 1: out16 alone (dqkv marked products-only, device.h): the fp32 stores skipped */
} att_join_t;
/* where a join row's fp32 values go (NULL: the shadow alone) */
__device__ static inline float *att_join_out(const att_join_t &jo, size_t o) { return jo.only16 ? NULL : jo.out + o; }
/* A warp's row rr (of the C layout: rows g, g + 8) of acc stored into row (NULL: not) and row16, rotated
 * back by cs, sn when cs is given; ok: the row exists (every lane of the warp calls this, for
 * the shuffle). A lane holds 2 columns of each 8 (a row's 4 lanes: 32 bytes of fp32, one
 * sector); for the shadow, lanes t and t ^ 1 swap halves so that each stores 4 bf16 (8 bytes)
 * and a row's 4 lanes fill the 32-byte sector of two column groups, not half of each. */
template <int DT>
__device__ static inline void att_join_row(float *row, __nv_bfloat16 *row16, const float acc[DT][4], int rr,
                                           const float *cs, const float *sn, int t, bool ok) {
    static_assert(DT % 2 == 0, "column groups in pairs");
    float r[DT][2];
    if (cs) {
        #pragma unroll
        for (int jd = 0; jd < DT / 2; jd++) {
            const int c = 8 * jd + 2 * t;
            const float2 cc = ok ? ld2(cs + c) : make_float2(0.f, 0.f), sv = ok ? ld2(sn + c) : make_float2(0.f, 0.f);
            const float c2[2] = {cc.x, cc.y}, s2[2] = {-sv.x, -sv.y};
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const float a = acc[jd][2 * rr + e], b = acc[jd + DT / 2][2 * rr + e];
                r[jd][e] = a * c2[e] - b * s2[e];
                r[jd + DT / 2][e] = b * c2[e] + a * s2[e];
            }
        }
    } else {
        #pragma unroll
        for (int jd = 0; jd < DT; jd++) r[jd][0] = acc[jd][2 * rr], r[jd][1] = acc[jd][2 * rr + 1];
    }
    if (ok && row)
        #pragma unroll
        for (int jd = 0; jd < DT; jd++) st2(row + 8 * jd + 2 * t, make_float2(r[jd][0], r[jd][1]));
    if (row16) att_row16<DT>(row16, r, 8 * DT, t, ok);
}
/* the host's check for the fused store (hd == the kernels' padded HD, aligned rows and tables) */
static inline bool attention_join_ok(const att_join_t &jo, int hd) {
    return jo.out && (jo.out16 || !jo.only16) && (hd == 16 || hd == 32 || hd == 64 || hd == 128) && ((uintptr_t)jo.out & 7u) == 0 &&
           ((uintptr_t)jo.out16 & 7u) == 0 && ((uintptr_t)jo.cs & 7u) == 0 && ((uintptr_t)jo.sn & 7u) == 0 &&
           jo.ld % 4 == 0;
}

/* The split passes' shares (dK/dV's of the queries, dQ's of the keys: ATT_DKDV_SPLIT,
 * ATT_DQ_SPLIT) meet at the end: share sh = 1, 2, ... hands its sums a (and b when TWO) to share
 * 0's warp of the same rows through shared memory (red, idle by then: ATT_THREADS lanes x
 * (TWO + 1) DT float4s), which adds them in share order -- fixed, the same bits on every run.
 * A lane's float4 u (a's tiles, then b's) of warp wk is at (wk NU + u) 32 + lane: a warp's
 * stores and loads are 512 contiguous bytes each, no bank conflict. */
template <int DT, int SPLIT, bool TWO>
__device__ static inline void att_shares_sum(float4 *red, float a[DT][4], float b[DT][4], int wk, int wq, int lane) {
    constexpr int NU = (TWO ? 2 : 1) * DT;
    #pragma unroll 1
    for (int sh = 1; sh < SPLIT; sh++) {
        if (wq == sh)
            #pragma unroll
            for (int jd = 0; jd < DT; jd++) {
                red[(wk * NU + jd) * WARP + lane] = make_float4(a[jd][0], a[jd][1], a[jd][2], a[jd][3]);
                if (TWO) red[(wk * NU + DT + jd) * WARP + lane] = make_float4(b[jd][0], b[jd][1], b[jd][2], b[jd][3]);
            }
        __syncthreads();
        if (wq == 0)
            #pragma unroll
            for (int jd = 0; jd < DT; jd++) {
                const float4 x = red[(wk * NU + jd) * WARP + lane];
                a[jd][0] += x.x, a[jd][1] += x.y, a[jd][2] += x.z, a[jd][3] += x.w;
                if (TWO) {
                    const float4 y = red[(wk * NU + DT + jd) * WARP + lane];
                    b[jd][0] += y.x, b[jd][1] += y.y, b[jd][2] += y.z, b[jd][3] += y.w;
                }
            }
        __syncthreads();
    }
}

/* ---- backward, dK and dV: a block owns 64 (or ATT_DKDV_KB) keys of (b, kh) ---- */
template <int HD, bool BF> static inline size_t att_dkdv_smem() {
    typedef att_bwd_cfg<HD, BF> C;
    if (BF) { /* att_dkdv_bf: Q and dO tiles, lse and D rows, twice; the shares' sums after them */
        const size_t tiles = 2 * (sizeof(__nv_bfloat16) * 2 * (size_t)C::QT * C::LD + sizeof(float) * 2 * C::QT);
        const size_t red = C::SPLIT > 1 ? sizeof(float) * C::NW * WARP * 2 * C::DT * 4 : 0;
        return tiles > red ? tiles : red;
    }
    return sizeof(float) * (2 * (size_t)C::KB * C::LD + 2 * (size_t)C::QT * C::LD + 4 * 16 * (C::QT + 1) + 2 * C::QT);
}
/* dk, dv += a warp's sums for keys key0 and key0 + 8 (rows of ks floats from base; the block is
 * their only writer) */
template <int DT>
__device__ static inline void att_dkdv_out(float *dk, float *dv, const float dka[DT][4], const float dva[DT][4],
                                           int key0, int Tk, size_t base, size_t ks, int hd, int t,
                                           const att_join_t &jo, int b, int kh) {
    if (jo.out) { /* into the fused rows: dk rotated back, dv as it is */
        #pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int key = key0 + 8 * rr;
            const bool in = key < Tk;
            const size_t n = (size_t)b * Tk + (in ? key : 0), ok = n * jo.ld + jo.Dq + (size_t)kh * hd, ov = ok + jo.Dkv;
            const size_t p = (size_t)(jo.pos0 + (in ? key : 0)) * (hd / 2);
            att_join_row<DT>(att_join_out(jo, ok), jo.out16 ? jo.out16 + ok : NULL, dka, rr, jo.cs + p, jo.sn + p, t, in);
            att_join_row<DT>(att_join_out(jo, ov), jo.out16 ? jo.out16 + ov : NULL, dva, rr, NULL, NULL, t, in);
        }
        return;
    }
    const bool v2 = att_pairs(dk, hd) && att_pairs(dv, hd);
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int key = key0 + 8 * rr;
        if (key >= Tk) continue;
        const size_t o = base + (size_t)key * ks;
        #pragma unroll
        for (int jd = 0; jd < DT; jd++) {
            att_add2(dk + o, 8 * jd + 2 * t, hd, dka[jd][2 * rr], dka[jd][2 * rr + 1], v2);
            att_add2(dv + o, 8 * jd + 2 * t, hd, dva[jd][2 * rr], dva[jd][2 * rr + 1], v2);
        }
    }
}
/* the query rows [lo, hi) that see any of keys [j0, j1): p = i + Tk - Tq with j0 <= p and
 * p - window + 1 <= j1 - 1 */
__device__ static inline void att_dkdv_queries(int j0, int j1, int Tq, int Tk, int causal, int window, int *lo,
                                               int *hi) {
    *lo = 0, *hi = Tq;
    if (causal) {
        *lo = max(0, j0 - (Tk - Tq));
        if (window > 0) *hi = min(Tq, j1 + window - 1 - (Tk - Tq));
    }
}
/* P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - D) scale, 0 where not visible, over a warp's
 * keys key0, + 8 and the query tile from q0 (nq rows; L, D: its rows' lse and D). When every
 * key of the block's [j0, j1) is visible from every query of the tile (the visible range's ends
 * grow with the query: the last query's start and the first one's end decide) no element is
 * masked and the per-element test is skipped. */
template <int NTQ, bool BF>
__device__ static inline void att_dkdv_ds(float st[NTQ][4], float dpt[NTQ][4], const float *L, const float *D, int key0,
                                          int q0, int nq, int j0, int j1, int Tq, int Tk, int causal, int window,
                                          float scale, int t) {
    int lo_last, hi_first, unused;
    ops_att_range(q0 + nq - 1, Tq, Tk, causal, window, &lo_last, &unused);
    ops_att_range(q0, Tq, Tk, causal, window, &unused, &hi_first);
    const bool full = nq == NTQ * 8 && lo_last <= j0 && hi_first >= j1;
    #pragma unroll
    for (int j = 0; j < NTQ; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            const int col = 8 * j + 2 * t + (e & 1), key = key0 + 8 * (e >> 1);
            bool vis = true;
            if (!full) {
                int lo, hi;
                att_rows_range(q0 + col, Tq, Tk, causal, window, &lo, &hi);
                vis = key >= lo && key < hi;
            }
            const float p = vis ? att_exp<BF>(st[j][e] * scale - L[col]) : 0.0f;
            st[j][e] = p;
            dpt[j][e] = p * (dpt[j][e] - D[col]) * scale;
        }
}
/* The bf16 engine's dK/dV pass. The block's 64 keys and values become each warp's A fragments
 * once; then it walks the (query head, query tile) pairs with the tiles of Q and dO (and their
 * rows' lse and D) double-buffered: tile n + 1 is loaded into registers before the products of
 * tile n, stored into the other buffer after them, and one barrier per tile separates the two. */
template <int HD>
__device__ static inline void att_dkdv_bf(float *dk, float *dv, uint4 *ds, const float *q, const float *k,
                                          const float *v, const float *dout, const float *lse, const float *Drow,
                                          int Tq, int Tk, int H, int Hkv, int hd, int causal, int window,
                                          float scale, const att_bf16_t &c16, const att_join_t &jo) {
    typedef att_bwd_cfg<HD, true> C;
    constexpr int NTH = C::NTH, W4 = C::NW; /* W4 warps per share */
    DYN_SHARED(unsigned char, smem);
    /* buffer n & 1: its Q tile at sQ + (n & 1) QB, its dO tile QT LD further (computed: an array
     * of pointers indexed by n would live in local memory) */
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)smem, *sdO = sQ + C::QT * C::LD;
    const int QB = 2 * C::QT * C::LD;
    float *sL = (float *)(sQ + 2 * QB), *sD = sL + 2 * C::QT; /* [2][QT] each */
    const int b = blockIdx.z, kh = blockIdx.y, j0 = blockIdx.x * C::KB, rep = H / Hkv;
    /* warp w: keys 16 wk .., share wq of each query tile */
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int wk = C::SPLIT > 1 ? w % W4 : w, wq = C::SPLIT > 1 ? w / W4 : 0; /* (unsplit: w, 0) */
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
    const bool v16 = att16_vec(c16, hd);
    const int nkv = min(C::KB, Tk - j0), j1 = j0 + nkv;
    att_regs<C::QT, HD, NTH> ra, rb;
    /* the block's keys and values at the end of the two query buffers (KB 64: the second one's Q
     * and dO tiles; 128: both buffers, so the first tile is stored after a barrier) */
    __nv_bfloat16 *sKs = sQ + 2 * QB - 2 * C::KB * C::LD, *sVs = sKs + C::KB * C::LD;
    if constexpr (C::KB == C::QT) {
        const size_t kvo = ((size_t)b * Tk + j0) * ks + (size_t)kh * hd;
        att_ld16(ra, k + kvo, att16_at(c16.k, kvo), ks, nkv, hd, vec, v16);
        att_ld16(rb, v + kvo, att16_at(c16.v, kvo), ks, nkv, hd, vec, v16);
        att_st16(sKs, ra);
        att_st16(sVs, rb);
    } else {
        att_regs<C::KB, HD, NTH> rk, rv;
        const size_t kvo = ((size_t)b * Tk + j0) * ks + (size_t)kh * hd;
        att_ld16(rk, k + kvo, att16_at(c16.k, kvo), ks, nkv, hd, vec, v16);
        att_ld16(rv, v + kvo, att16_at(c16.v, kvo), ks, nkv, hd, vec, v16);
        att_st16(sKs, rk);
        att_st16(sVs, rv);
    }
    int iq_lo, iq_hi;
    att_dkdv_queries(j0, j1, Tq, Tk, causal, window, &iq_lo, &iq_hi);
    const int nqt = iq_hi > iq_lo ? (iq_hi - iq_lo + C::QT - 1) / C::QT : 0, tiles = rep * nqt;
    /* tile n: query head kh rep + n / nqt, queries from q0 = iq_lo + QT (n % nqt); a thread's
     * loads of it into ra, rb and (threads < QT) its row's lse and D into l_, d_ */
    float l_ = INFINITY, d_ = 0.0f;
    auto load = [&](int n) {
        const int h = kh * rep + n / nqt, q0 = iq_lo + C::QT * (n % nqt), nq = min(C::QT, Tq - q0);
        const size_t qo = ((size_t)b * Tq + q0) * qs + (size_t)h * hd;
        att_ld16(ra, q + qo, att16_at(c16.q, qo), qs, nq, hd, vec, v16);
        att_ld16(rb, dout + qo, att16_at(c16.dout, qo), qs, nq, hd, vec, v16);
        const int r = threadIdx.x;
        if (r < C::QT) {
            const size_t ro = ((size_t)b * H + h) * Tq + q0 + r;
            l_ = r < nq ? lse[ro] : INFINITY;
            d_ = r < nq ? Drow[ro] : 0.0f;
        }
    };
    auto store = [&](int n) {
        att_st16(sQ + (n & 1) * QB, ra);
        att_st16(sdO + (n & 1) * QB, rb);
        if (threadIdx.x < C::QT) sL[(n & 1) * C::QT + threadIdx.x] = l_, sD[(n & 1) * C::QT + threadIdx.x] = d_;
    };
    __syncthreads();
    uint32_t ka[C::KS][4], va[C::KS][4];
    att_frags<C::KS>(ka, sKs + 16 * wk * C::LD, C::LD, g, t);
    att_frags<C::KS>(va, sVs + 16 * wk * C::LD, C::LD, g, t);
    if constexpr (C::KB > C::QT) __syncthreads(); /* read before the first tile overwrites them */
    if (tiles) {
        load(0);
        store(0);
    }
    __syncthreads();
    float dka[C::DT][4], dva[C::DT][4];
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++)
        #pragma unroll
        for (int e = 0; e < 4; e++) dka[jd][e] = dva[jd][e] = 0.0f;
    const int key0 = j0 + 16 * wk + g;
    for (int n = 0; n < tiles; n++) {
        if (ATT_DKDV_EARLY(HD, C::SPLIT) && n + 1 < tiles) load(n + 1);
        const __nv_bfloat16 *Q = sQ + (n & 1) * QB, *dO = sdO + (n & 1) * QB;
        const float *L = sL + (n & 1) * C::QT, *D = sD + (n & 1) * C::QT;
        const int q0 = iq_lo + C::QT * (n % nqt), nq = min(C::QT, Tq - q0);
        /* per part of PQ queries from r0 (the warp's share: parts wq PW ..): S^T (16 keys x PQ
         * queries) and dP^T = V dO^T, then dV += P^T dO, dK += dS^T Q */
        constexpr int NP = C::NTQ / ATT_DKDV_PARTS, PQ = 8 * NP, PW = ATT_DKDV_PARTS / C::SPLIT;
        static_assert(NP % 2 == 0 && NP * ATT_DKDV_PARTS == C::NTQ, "parts of 16 queries");
        bool seen = true; /* (KB 128) whether any query of the tile sees any of the warp's 16 keys */
        if constexpr (C::KB > C::QT) {
            int lo_first, hi_last, unused;
            ops_att_range(q0, Tq, Tk, causal, window, &lo_first, &unused);
            ops_att_range(q0 + nq - 1, Tq, Tk, causal, window, &unused, &hi_last);
            seen = j0 + 16 * wk < hi_last && j0 + 16 * wk + 16 > lo_first;
        }
        #pragma unroll
        for (int pp = 0; pp < PW; pp++) {
            const int r0 = PQ * (wq * PW + pp);
            if (!seen) { /* (warp-uniform) no products; dS is 0 (stored where its tile exists: a short tile's keys) */
                if (ds && (j0 + 16 * wk) / 64 <= q0 / 64) {
                    uint4 *dst = ds + att_ds_block(b, kh * rep + n / nqt, H, Tq, q0 / 64, (j0 + 16 * wk) / 64, wk % 4) * WARP + lane;
                    #pragma unroll
                    for (int kk = 0; kk < NP / 2; kk++) dst[4 * (r0 / 16 + kk) * WARP] = make_uint4(0u, 0u, 0u, 0u);
                }
                continue;
            }
            float st[NP][4], dpt[NP][4];
            #pragma unroll
            for (int j = 0; j < NP; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) st[j][e] = dpt[j][e] = 0.0f;
            att_dots_bf<C::KS, NP>(st, ka, Q + r0 * C::LD, C::LD, g, t);
            att_dots_bf<C::KS, NP>(dpt, va, dO + r0 * C::LD, C::LD, g, t);
            att_dkdv_ds<NP, true>(st, dpt, L + r0, D + r0, key0, q0 + r0, max(0, min(PQ, nq - r0)), j0, j1, Tq, Tk, causal,
                            window, scale, t);
            /* dS^T as dK's product takes it (bf16 A fragments), and (ATT_DQ_FROM_DS) stored for the
             * dQ pass: blocks 4 qq + wk % 4 of tile (q0 / 64, (j0 + 16 wk) / 64) of head
             * kh rep + n / nqt (q0 = j0 + 64 (n % nqt) there: causal, Tq = Tk) */
            uint32_t pa[NP / 2][4];
            att_pack_a<NP / 2>(pa, dpt);
            if (ds) {
                static_assert(C::QT == 64 && C::KB % 64 == 0, "dS is stored in tiles of 64 x 64");
                uint4 *dst = ds + att_ds_block(b, kh * rep + n / nqt, H, Tq, q0 / 64, (j0 + 16 * wk) / 64, wk % 4) * WARP + lane;
                #pragma unroll
                for (int kk = 0; kk < NP / 2; kk++)
                    dst[4 * (r0 / 16 + kk) * WARP] = make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
            }
            att_pv_rm<NP, C::DT>(dva, st, dO + r0 * C::LD, C::LD, g, t);
            att_pv_rm_a<NP / 2, C::DT>(dka, pa, Q + r0 * C::LD, C::LD, g, t);
        }
        if (n + 1 < tiles) {
            if (!ATT_DKDV_EARLY(HD, C::SPLIT)) load(n + 1);
            store(n + 1);
        }
        __syncthreads();
    }
    if constexpr (C::SPLIT > 1) { /* the shares' sums into share 0's warps, which store them */
        att_shares_sum<C::DT, C::SPLIT, true>((float4 *)smem, dka, dva, wk, wq, lane);
        if (wq) return;
    }
    att_dkdv_out<C::DT>(dk, dv, dka, dva, key0, Tk, ((size_t)b * Tk) * ks + (size_t)kh * hd, ks, hd, t, jo, b, kh);
}
template <int HD, bool BF>
__global__ void __launch_bounds__(att_bwd_cfg<HD, BF>::NTH, att_bwd_cfg<HD, BF>::MINB)
k_att_bwd_dkdv(float *dk, float *dv, uint4 *ds, const float *q, const float *k, const float *v, const float *dout,
               const float *lse, const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window,
               float scale, att_bf16_t c16, att_join_t jo) {
    if constexpr (BF) {
        att_dkdv_bf<HD>(dk, dv, ds, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window, scale, c16, jo);
        return;
    } else { /* the fp32 engine: K, V, Q and dO tiles row-major in shared memory, single-buffered */
        typedef att_bwd_cfg<HD, false> C;
        DYN_SHARED(float, sK);
        float *sV = sK + C::KB * C::LD, *sQ = sV + C::KB * C::LD, *sdO = sQ + C::QT * C::LD, *sP = sdO + C::QT * C::LD;
        float *sL = sP + 4 * 16 * (C::QT + 1), *sD = sL + C::QT;
        const int b = blockIdx.z, kh = blockIdx.y, j0 = blockIdx.x * C::KB, rep = H / Hkv;
        const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
        const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
        const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
        const int nkv = min(C::KB, Tk - j0), j1 = j0 + nkv;
        const size_t kvo = ((size_t)b * Tk + j0) * ks + (size_t)kh * hd;
        att_stage<HD>(sK, C::LD, k + kvo, ks, C::KB, nkv, hd, vec);
        att_stage<HD>(sV, C::LD, v + kvo, ks, C::KB, nkv, hd, vec);
        float dka[C::DT][4], dva[C::DT][4];
        #pragma unroll
        for (int jd = 0; jd < C::DT; jd++)
            #pragma unroll
            for (int e = 0; e < 4; e++) dka[jd][e] = dva[jd][e] = 0.0f;
        int iq_lo, iq_hi;
        att_dkdv_queries(j0, j1, Tq, Tk, causal, window, &iq_lo, &iq_hi);
        const int key0 = j0 + 16 * w + g;
        for (int h = kh * rep; h < (kh + 1) * rep; h++)
            for (int q0 = iq_lo; q0 < iq_hi; q0 += C::QT) {
                const int nq = min(C::QT, Tq - q0);
                const size_t qo = ((size_t)b * Tq + q0) * qs + (size_t)h * hd;
                __syncthreads();
                att_stage<HD>(sQ, C::LD, q + qo, qs, C::QT, nq, hd, vec);
                att_stage<HD>(sdO, C::LD, dout + qo, qs, C::QT, nq, hd, vec);
                for (int r = threadIdx.x; r < C::QT; r += blockDim.x) {
                    const size_t ro = ((size_t)b * H + h) * Tq + q0 + r;
                    sL[r] = r < nq ? lse[ro] : INFINITY;
                    sD[r] = r < nq ? Drow[ro] : 0.0f;
                }
                __syncthreads();
                float st[C::NTQ][4], dpt[C::NTQ][4];
                #pragma unroll
                for (int j = 0; j < C::NTQ; j++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) st[j][e] = dpt[j][e] = 0.0f;
                att_dots_f32<HD, C::NTQ>(st, sK + 16 * w * C::LD, sQ, C::LD, g, t);
                att_dots_f32<HD, C::NTQ>(dpt, sV + 16 * w * C::LD, sdO, C::LD, g, t);
                att_dkdv_ds<C::NTQ, false>(st, dpt, sL, sD, key0, q0, nq, j0, j1, Tq, Tk, causal, window, scale, t);
                float *pw = sP + w * 16 * (C::QT + 1);
                att_pv_f32<C::NTQ, C::DT>(dva, st, pw, sdO, C::LD, g, t);
                att_pv_f32<C::NTQ, C::DT>(dka, dpt, pw, sQ, C::LD, g, t);
            }
        att_dkdv_out<C::DT>(dk, dv, dka, dva, key0, Tk, ((size_t)b * Tk) * ks + (size_t)kh * hd, ks, hd, t, jo, b, kh);
    }
}

/* ---- backward, dQ: a block owns 64 query rows of (b, h) ---- */
/* a warp's rows i0w + g, + 8: the keys they see, their lse and D (+inf and 0 past Tq) */
__device__ static inline void att_dq_rows(int lo[2], int hi[2], float L[2], float Dr[2], const float *lse,
                                          const float *Drow, int b, int h, int i0w, int Tq, int Tk, int H, int causal,
                                          int window, int g) {
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = i0w + g + 8 * rr;
        att_rows_range(i, Tq, Tk, causal, window, &lo[rr], &hi[rr]);
        const size_t ro = ((size_t)b * H + h) * Tq + i;
        L[rr] = i < Tq ? lse[ro] : INFINITY;
        Dr[rr] = i < Tq ? Drow[ro] : 0.0f;
    }
}
/* dS = P (dP - D) scale over one key tile from k0, P = exp(S scale - lse) (0 where not visible),
 * into dp */
template <int NT, bool BF>
__device__ static inline void att_dq_ds(const float s[NT][4], float dp[NT][4], const int lo[2], const int hi[2], int k0,
                                        const float L[2], const float Dr[2], float scale, int t) {
    #pragma unroll
    for (int j = 0; j < NT; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            const int rr = e >> 1, key = k0 + 8 * j + 2 * t + (e & 1);
            const bool vis = key >= lo[rr] && key < hi[rr];
            const float p = vis ? att_exp<BF>(s[j][e] * scale - L[rr]) : 0.0f;
            dp[j][e] = p * (dp[j][e] - Dr[rr]) * scale;
        }
}
/* dq += the warp's sums for rows i0w + g, + 8 (the block is their only writer) */
template <int DT>
__device__ static inline void att_dq_out(float *dq, const float dqa[DT][4], int b, int h, int i0w, int Tq, int H,
                                         int hd, int g, int t, const att_join_t &jo) {
    if (jo.out) { /* into the fused rows, rotated back */
        #pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int i = i0w + g + 8 * rr;
            const bool in = i < Tq;
            const size_t o = ((size_t)b * Tq + (in ? i : 0)) * jo.ld + (size_t)h * hd;
            const size_t p = (size_t)(jo.pos0 + (in ? i : 0)) * (hd / 2);
            att_join_row<DT>(att_join_out(jo, o), jo.out16 ? jo.out16 + o : NULL, dqa, rr, jo.cs + p, jo.sn + p, t, in);
        }
        return;
    }
    const bool v2 = att_pairs(dq, hd);
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = i0w + g + 8 * rr;
        if (i >= Tq) continue;
        float *row = dq + ((size_t)b * Tq + i) * H * hd + (size_t)h * hd;
        #pragma unroll
        for (int jd = 0; jd < DT; jd++) att_add2(row, 8 * jd + 2 * t, hd, dqa[jd][2 * rr], dqa[jd][2 * rr + 1], v2);
    }
}
template <int HD, bool BF> static inline size_t att_dq_smem() {
    typedef att_cfg<HD, BF> C;
    if (BF) { /* att_dq_bf: K and V tiles, twice; the shares' sums after them */
        const size_t tiles = sizeof(__nv_bfloat16) * 4 * (size_t)C::BK * C::LD;
        const size_t red = att_dq_cfg<HD, BF>::SPLIT > 1 ? sizeof(float) * ATT_THREADS * C::DT * 4 : 0;
        return tiles > red ? tiles : red;
    }
    return sizeof(float) * (2 * (size_t)C::BQ * C::LD + 2 * (size_t)C::BK * C::LD + 4 * 16 * (C::BK + 1));
}
/* The bf16 engine's dQ pass: Q and dO become each warp's A fragments once; key and value tiles
 * double-buffered as in att_fwd_bf; dQ += dS K from the row-major key tile. */
template <int HD>
__device__ static inline void att_dq_bf(float *dq, const float *q, const float *k, const float *v, const float *dout,
                                        const float *lse, const float *Drow, int Tq, int Tk, int H, int Hkv, int hd,
                                        int causal, int window, float scale, const att_bf16_t &c16,
                                        const att_join_t &jo) {
    typedef att_cfg<HD, true> C;
    typedef att_dq_cfg<HD, true> S;
    constexpr int W4 = ATT_THREADS / WARP; /* warps per share */
    static_assert(C::BQ == C::BK, "the query tiles are staged in a key tile's buffers");
    DYN_SHARED(unsigned char, smem);
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
    /* warp w: queries 16 wk .., share wq of each key tile */
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int wk = S::SPLIT > 1 ? w % W4 : w, wq = S::SPLIT > 1 ? w / W4 : 0; /* (unsplit: w, 0) */
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const int nq = min(C::BQ, Tq - i0);
    const size_t qo = ((size_t)b * Tq + i0) * qs + (size_t)h * hd, kvb = (size_t)b * Tk * ks + (size_t)kh * hd;
    att_kv_pipe<HD, S::NTH> kv(smem, k + kvb, v + kvb, att16_at(c16.k, kvb), att16_at(c16.v, kvb), ks, i0, nq, Tq, Tk, hd,
                       causal, window, hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout),
                       att16_vec(c16, hd));
    int lo[2], hi[2];
    float L[2], Dr[2];
    att_dq_rows(lo, hi, L, Dr, lse, Drow, b, h, i0 + 16 * wk, Tq, Tk, H, causal, window, g);
    uint32_t qa[C::KS][4], da[C::KS][4];
    kv.own_rows(qa, da, q + qo, att16_at(c16.q, qo), dout + qo, att16_at(c16.dout, qo), qs, nq, wk, g, t);
    kv.start();
    float dqa[C::DT][4];
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++) dqa[jd][0] = dqa[jd][1] = dqa[jd][2] = dqa[jd][3] = 0.0f;
    for (int n = 0; n < kv.tiles; n++) {
        if (ATT_DQ_EARLY(HD, S::SPLIT) && n + 1 < kv.tiles) kv.load(n + 1);
        /* per part of PK keys from c0 (the warp's share: parts wq PW ..): S and dP, dS, then
         * dQ += dS K */
        constexpr int NP = C::NT / ATT_DQ_PARTS, PK = 8 * NP, PW = ATT_DQ_PARTS / S::SPLIT;
        static_assert(NP % 2 == 0 && NP * ATT_DQ_PARTS == C::NT, "parts of 16 keys");
        #pragma unroll
        for (int pp = 0; pp < PW; pp++) {
            const int c0 = PK * (wq * PW + pp);
            const __nv_bfloat16 *K = kv.sk(n) + c0 * C::LD, *V = kv.sv(n) + c0 * C::LD;
            float s[NP][4], dp[NP][4];
            #pragma unroll
            for (int j = 0; j < NP; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
            att_dots_bf<C::KS, NP>(s, qa, K, C::LD, g, t);
            att_dots_bf<C::KS, NP>(dp, da, V, C::LD, g, t);
            att_dq_ds<NP, true>(s, dp, lo, hi, kv.klo + C::BK * n + c0, L, Dr, scale, t);
            att_pv_rm<NP, C::DT>(dqa, dp, K, C::LD, g, t);
        }
        if (n + 1 < kv.tiles) {
            if (!ATT_DQ_EARLY(HD, S::SPLIT)) kv.load(n + 1);
            kv.store(n + 1);
        }
        __syncthreads();
    }
    if constexpr (S::SPLIT > 1) { /* the shares' sums into share 0's warps, which store them */
        att_shares_sum<C::DT, S::SPLIT, false>((float4 *)smem, dqa, NULL, wk, wq, lane);
        if (wq) return;
    }
    att_dq_out<C::DT>(dq, dqa, b, h, i0 + 16 * wk, Tq, H, hd, g, t, jo);
}
template <int HD, bool BF>
__global__ void __launch_bounds__(att_dq_cfg<HD, BF>::NTH, att_dq_cfg<HD, BF>::MINB)
k_att_bwd_dq(float *dq, const float *q, const float *k, const float *v, const float *dout, const float *lse,
             const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window, float scale,
             att_bf16_t c16, att_join_t jo) {
    if constexpr (BF) {
        att_dq_bf<HD>(dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window, scale, c16, jo);
        return;
    } else { /* the fp32 engine: Q, dO, K and V tiles row-major in shared memory, single-buffered */
        typedef att_cfg<HD, false> C;
        DYN_SHARED(float, sQ);
        float *sdO = sQ + C::BQ * C::LD, *sK = sdO + C::BQ * C::LD, *sV = sK + C::BK * C::LD, *sP = sV + C::BK * C::LD;
        const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
        const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
        const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
        const float *kb = k + (size_t)b * Tk * ks + (size_t)kh * hd, *vb = v + (size_t)b * Tk * ks + (size_t)kh * hd;
        const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
        const int nq = min(C::BQ, Tq - i0);
        const size_t qo = ((size_t)b * Tq + i0) * qs + (size_t)h * hd;
        att_stage<HD>(sQ, C::LD, q + qo, qs, C::BQ, nq, hd, vec);
        att_stage<HD>(sdO, C::LD, dout + qo, qs, C::BQ, nq, hd, vec);
        int lo[2], hi[2], klo, khi, unused;
        float L[2], Dr[2];
        att_dq_rows(lo, hi, L, Dr, lse, Drow, b, h, i0 + 16 * w, Tq, Tk, H, causal, window, g);
        ops_att_range(i0, Tq, Tk, causal, window, &klo, &unused);
        ops_att_range(i0 + nq - 1, Tq, Tk, causal, window, &unused, &khi);
        float dqa[C::DT][4];
        #pragma unroll
        for (int jd = 0; jd < C::DT; jd++) dqa[jd][0] = dqa[jd][1] = dqa[jd][2] = dqa[jd][3] = 0.0f;
        for (int k0 = klo; k0 < khi; k0 += C::BK) {
            const int nk = min(C::BK, Tk - k0);
            __syncthreads();
            const size_t ko = (size_t)k0 * ks;
            att_stage<HD>(sK, C::LD, kb + ko, ks, C::BK, nk, hd, vec);
            att_stage<HD>(sV, C::LD, vb + ko, ks, C::BK, nk, hd, vec);
            __syncthreads();
            float s[C::NT][4], dp[C::NT][4];
            #pragma unroll
            for (int j = 0; j < C::NT; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
            att_dots_f32<HD, C::NT>(s, sQ + 16 * w * C::LD, sK, C::LD, g, t);
            att_dots_f32<HD, C::NT>(dp, sdO + 16 * w * C::LD, sV, C::LD, g, t);
            att_dq_ds<C::NT, false>(s, dp, lo, hi, k0, L, Dr, scale, t);
            att_pv_f32<C::NT, C::DT>(dqa, dp, sP + w * 16 * (C::BK + 1), sK, C::LD, g, t);
        }
        att_dq_out<C::DT>(dq, dqa, b, h, i0 + 16 * w, Tq, H, hd, g, t, jo);
    }
}

/* ---- backward, dQ from the stored dS (ATT_DQ_FROM_DS): a block owns BQ query rows of (b, h) ----
 * dQ = sum over the key tiles kj <= qi, in order, of dS_(qi, kj) K_kj (dS scaled already). The key
 * tiles are double-buffered in shared memory as in att_kv_pipe (K only: no V, Q, dO, lse or D). A
 * warp's dS block (16 queries x 16 keys) comes from global memory, one 16-byte load per lane, as
 * dK/dV's A fragment of dS^T: the lanes hold pairs of queries where dQ's A fragment pairs keys, so
 * it passes through the warp's own 16 x 24 bf16 buffer in shared memory -- four 4-byte stores
 * (rows 24 bf16 apart: a store's 8 rows x 16 bytes in distinct banks, one wavefront each) and one
 * ldmatrix.trans (mma.cuh: the transposed matrices are dS's fragment) -- then dQ += dS K. Two warps
 * per 16 queries, warp sh taking 16-key blocks 2 sh, 2 sh + 1 of every tile; their sums meet at
 * the end in share order (att_shares_sum): the same bits on every run. */
template <int HD> struct att_dqs_cfg {
    static constexpr int BQ = ATT_DQ_DS_BQ, NW = BQ / 16; /* NW warps of 16 queries, */
    static constexpr int SPLIT = 2;                       /* each twice (the key blocks' halves) */
    static constexpr int NTH = NW * WARP * SPLIT;
    static constexpr int BK = 64, LD = HD + 8, DT = HD / 8;
    static constexpr int TLD = 24, TB = 16 * TLD; /* a warp's transposing buffer: 16 keys x 24 bf16 */
    static_assert(BQ % 64 == 0, "whole query tiles a block");
};
template <int HD> static inline size_t att_dqs_smem() {
    typedef att_dqs_cfg<HD> C;
    const size_t tiles = sizeof(__nv_bfloat16) * (2 * (size_t)C::BK * C::LD + (size_t)(C::NTH / WARP) * C::TB);
    const size_t red = sizeof(float) * (size_t)C::NW * WARP * C::DT * 4;
    return tiles > red ? tiles : red;
}
template <int HD>
__global__ void __launch_bounds__(att_dqs_cfg<HD>::NTH, ATT_DQ_DS_MIN_BLOCKS)
k_att_bwd_dq_ds(float *dq, const uint4 *ds, const float *k, int T, int H, int Hkv, int hd, att_bf16_t c16,
                att_join_t jo) {
    typedef att_dqs_cfg<HD> C;
    DYN_SHARED(unsigned char, smem);
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem; /* key tile n at sK + (n & 1) BK LD */
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
    /* warp w: queries iw = i0 + 16 wq .. (block qq of query tile qi), share sh of each key tile */
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const int wq = w % C::NW, sh = w / C::NW, iw = i0 + 16 * wq, qi = iw / 64, qq = iw % 64 / 16;
    __nv_bfloat16 *sT = sK + 2 * C::BK * C::LD + w * C::TB;
    const size_t ks = (size_t)Hkv * hd, kb = (size_t)b * T * ks + (size_t)kh * hd;
    const int nq = min(C::BQ, T - i0), tiles = (i0 + nq + C::BK - 1) / C::BK;
    const bool vec = hd % 4 == 0 && aligned16(k), v16 = att16_vec(c16, hd);
    att_regs<C::BK, HD, C::NTH> rk;
    auto load = [&](int n) {
        const size_t ko = kb + (size_t)C::BK * n * ks;
        att_ld16(rk, k + ko, att16_at(c16.k, ko), ks, min(C::BK, T - C::BK * n), hd, vec, v16);
    };
    float dqa[C::DT][4];
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++) dqa[jd][0] = dqa[jd][1] = dqa[jd][2] = dqa[jd][3] = 0.0f;
    load(0);
    att_st16(sK, rk);
    __syncthreads();
    /* the lane's stores into sT (a0 .. a3: keys g, g + 8 x queries 2t, 2t + 8) and its ldmatrix row:
     * matrix i = lane / 8 (dS's A registers: queries 8 (i & 1) .., keys 8 (i >> 1) ..) */
    uint32_t *st0 = (uint32_t *)(sT + g * C::TLD + 2 * t), *st1 = st0 + 4 * C::TLD;
    const __nv_bfloat16 *lrow = sT + (8 * (lane >> 4) + (lane & 7)) * C::TLD + 8 * ((lane >> 3) & 1);
    /* the warp's dS blocks of tile n (kj = n <= qi: the tile exists; warp-uniform), loaded a tile
     * ahead like K's (ATT_DQ_DS_AHEAD) or at the tile */
    const bool rows = iw < T;
    const uint4 *src = ds + att_ds_block(b, h, H, T, qi, 0, 4 * qq + 2 * sh) * WARP + lane;
    uint4 x0 = make_uint4(0u, 0u, 0u, 0u), x1 = x0;
    if (ATT_DQ_DS_AHEAD && rows) x0 = src[0], x1 = src[WARP];
    for (int n = 0; n < tiles; n++) {
        if (n + 1 < tiles) load(n + 1);
        if (!ATT_DQ_DS_AHEAD && rows && n <= qi) x0 = src[n * 16 * WARP], x1 = src[(n * 16 + 1) * WARP];
        const uint4 c0 = x0, c1 = x1;
        if (ATT_DQ_DS_AHEAD && rows && n + 1 <= qi) x0 = src[(n + 1) * 16 * WARP], x1 = src[((n + 1) * 16 + 1) * WARP];
        if (rows && n <= qi) {
            const __nv_bfloat16 *K = sK + (n & 1) * C::BK * C::LD;
            #pragma unroll
            for (int u = 0; u < 2; u++) {
                const uint4 x = u ? c1 : c0;
                __syncwarp(); /* the last block's ldmatrix is done */
                st0[0] = x.x, st1[0] = x.y, st0[4] = x.z, st1[4] = x.w;
                __syncwarp();
                uint32_t a[1][4];
                ldsm_x4_t(a[0], lrow);
                att_pv_rm_a<1, C::DT>(dqa, a, K + 16 * (2 * sh + u) * C::LD, C::LD, g, t);
            }
        }
        if (n + 1 < tiles) att_st16(sK + ((n + 1) & 1) * C::BK * C::LD, rk);
        __syncthreads();
    }
    att_shares_sum<C::DT, C::SPLIT, false>((float4 *)smem, dqa, NULL, wq, sh, lane);
    if (sh) return;
    att_dq_out<C::DT>(dq, dqa, b, h, iw, T, H, hd, g, t, jo);
}

/* ---- the decode step: one warp per (row n, head h), len[n] cache rows from base[n] ----
 * shared per warp: the query (hd) and a key tile (32 rows of hd + 1) */
#define ATT_ROWS_WARPS 4
__global__ void __launch_bounds__(ATT_ROWS_WARPS * WARP)
k_att_rows(float *out, const float *q, const float *kc, const float *vc, const int *base, const int *len, int N,
           int H, int Hkv, int hd) {
    DYN_SHARED(float, smem);
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    const size_t it = (size_t)blockIdx.x * ATT_ROWS_WARPS + w;
    if (it >= (size_t)N * H) return;
    float *sq = smem + (size_t)w * (hd + WARP * (hd + 1)), *sk = sq + hd;
    const size_t n = it / H, h = it % H, ldk = (size_t)Hkv * hd;
    const size_t kvo = (size_t)base[n] * ldk + (h / (H / Hkv)) * hd;
    const float *qi = q + it * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int d = lane; d < hd; d += WARP) sq[d] = qi[d];
    __syncwarp();
    const int nd = (hd + WARP - 1) / WARP; /* output elements per lane: d = lane + 32 u */
    float o[ATT_MAX_HD / WARP];
#pragma unroll
    for (int u = 0; u < ATT_MAX_HD / WARP; u++) o[u] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int L = len[n];
    for (int j0 = 0; j0 < L; j0 += WARP) {
        const int nk = min(WARP, L - j0);
        /* stage the tile: consecutive lanes read consecutive floats of a row */
        for (int e = lane; e < nk * hd; e += WARP) {
            const int r = e / hd, c = e % hd;
            sk[r * (hd + 1) + c] = kc[kvo + (size_t)(j0 + r) * ldk + c];
        }
        __syncwarp();
        float s = -INFINITY;
        if (lane < nk) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++) acc += sq[d] * sk[lane * (hd + 1) + d];
            s = acc * scale;
        }
        const float mx = warp_max(s), mn = fmaxf(m, mx);
        const float f = m == -INFINITY ? 0.0f : ops_expf(m - mn);
        const float p = lane < nk ? ops_expf(s - mn) : 0.0f;
        l = l * f + warp_sum(p);
        m = mn;
        #pragma unroll
        for (int u = 0; u < ATT_MAX_HD / WARP; u++) o[u] *= f;
        for (int r = 0; r < nk; r++) {
            const float pr = __shfl_sync(FULL_MASK, p, r);
            const float *vr = vc + kvo + (size_t)(j0 + r) * ldk;
#pragma unroll
            for (int u = 0; u < ATT_MAX_HD / WARP; u++) {
                const int d = lane + WARP * u;
                if (u < nd && d < hd) o[u] += pr * vr[d];
            }
        }
        __syncwarp(); /* the tile is read before the next one is staged */
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int u = 0; u < ATT_MAX_HD / WARP; u++) {
        const int d = lane + WARP * u;
        if (u < nd && d < hd) out[it * hd + d] = o[u] * inv;
    }
}

/* ---- launchers ---- */
/* "att_fwd<64,bf16>": the instances' names for the emulator's reports */
template <int HD, bool BF> static inline const char *att_kname(int which) {
    static char names[4][40];
    static const char *base[4] = {"k_att_fwd", "k_att_bwd_dkdv", "k_att_bwd_dq", "k_att_bwd_dq_ds"};
    if (!names[which][0]) snprintf(names[which], sizeof names[which], "%s<%d,%s>", base[which], HD, BF ? "bf16" : "fp32");
    return names[which];
}
/* dynamic shared memory beyond the default 48 KiB needs an opt-in per kernel */
template <class K> static inline cudaError_t att_smem_optin(K *kern, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}
/* the padded head dimension of hd, 0 when the tiled kernels do not take it */
static inline int att_pad_hd(int hd) {
    return hd <= 0 ? 0 : hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= ATT_MAX_HD ? 128 : 0;
}
template <int HD, bool BF, bool W>
static inline cudaError_t att_forward_w(cudaStream_t s, float *out, __nv_bfloat16 *out16, float *lse, const float *q,
                                        const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                                        int causal, int window, att_bf16_t c16) {
    const size_t smem = att_fwd_smem<HD, BF, W>();
    cudaError_t e = att_smem_optin(k_att_fwd<HD, BF, W>, smem);
    if (e != cudaSuccess) return e;
    const int bq = att_fwd_cfg<HD, BF, W>::BQ;
    const dim3 grid((Tq + bq - 1) / bq, H, B);
    void (*kern)(float *, __nv_bfloat16 *, float *, const float *, const float *, const float *, int, int, int, int,
                 int, int, int, float, att_bf16_t) = k_att_fwd<HD, BF, W>;
    const char *nm = att_kname<HD, BF>(0);
    const int nth = att_fwd_cfg<HD, BF, W>::NTH;
    LAUNCH_AS(kern, nm, grid, nth, smem, s)
    (out, BF ? out16 : NULL, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window, 1.0f / sqrtf((float)hd),
     BF ? c16 : att_bf16_t{});
    return cudaSuccess;
}
/* the wide blocks where they are compiled (att_fwd_cfg) and q, k, v have their aligned bf16 copies */
template <int HD, bool BF>
static inline cudaError_t att_forward_t(cudaStream_t s, float *out, __nv_bfloat16 *out16, float *lse, const float *q,
                                        const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                                        int causal, int window, att_bf16_t c16) {
    constexpr bool W = att_fwd_cfg<HD, BF>::WIDE;
    if (W && c16.q && c16.k && c16.v && att16_vec(c16, hd))
        return att_forward_w<HD, BF, W>(s, out, out16, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, c16);
    return att_forward_w<HD, BF, false>(s, out, out16, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, c16);
}
/* The bytes of the dS buffer the backward takes dQ from (ATT_DQ_FROM_DS), or 0 where it does
 * not (k_att_bwd_dq then): bf16, hd padded to 64, causal with Tq = Tk and no window that cuts a
 * row's keys (the tiles of the lower triangle are then the dK/dV pass's query tiles as well). */
static inline size_t attention_ds_bytes(int bf, int B, int Tq, int Tk, int H, int hd, int causal, int window) {
    if (!ATT_DQ_FROM_DS || !bf || att_pad_hd(hd) != 64 || !causal || Tq != Tk || (window > 0 && window < Tk) ||
        B <= 0 || Tq <= 0 || H <= 0)
        return 0;
    return (size_t)B * H * att_ds_tiles(Tq) * 16 * WARP * sizeof(uint4);
}
/* k_att_bwd_dq_ds's launch (optin: its shared-memory opt-in only); instantiated at HD 64 only */
template <int HD>
static inline cudaError_t att_dq_ds_t(cudaStream_t s, float *dq, const uint4 *ds, const float *k, int B, int T, int H,
                                      int Hkv, int hd, att_bf16_t c16, att_join_t jo, bool optin) {
    if constexpr (HD == 64) {
        typedef att_dqs_cfg<HD> C;
        const size_t smem = att_dqs_smem<HD>();
        if (optin) return att_smem_optin(k_att_bwd_dq_ds<HD>, smem);
        const dim3 grid((T + C::BQ - 1) / C::BQ, H, B);
        void (*kern)(float *, const uint4 *, const float *, int, int, int, int, att_bf16_t, att_join_t) =
            k_att_bwd_dq_ds<HD>;
        const char *nm = att_kname<HD, true>(3);
    LAUNCH_AS(kern, nm, grid, C::NTH, smem, s)
        (dq, ds, k, T, H, Hkv, hd, c16, jo);
        return cudaSuccess;
    } else {
        (void)s, (void)dq, (void)ds, (void)k, (void)B, (void)T, (void)H, (void)Hkv, (void)hd, (void)c16, (void)jo,
            (void)optin;
        return cudaErrorInvalidValue;
    }
}
template <int HD, bool BF>
static inline cudaError_t att_backward_t(cudaStream_t s, float *dq, float *dk, float *dv, float *Drow,
                                         __nv_bfloat16 *dout16, const float *dout, const float *out, const float *lse,
                                         const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H,
                                         int Hkv, int hd, int causal, int window, att_bf16_t c16, att_join_t jo,
                                         uint4 *ds) {
    if (!BF) c16 = att_bf16_t{};
    /* dQ from dK/dV's dS: a buffer given, the case taken, and both passes run */
    if (!(BF && HD == 64) || !attention_ds_bytes(BF, B, Tq, Tk, H, hd, causal, window) || !(dk || dv || jo.out) ||
        !(dq || jo.out))
        ds = NULL;
    const size_t s_kv = att_dkdv_smem<HD, BF>(), s_q = att_dq_smem<HD, BF>();
    cudaError_t e = att_smem_optin(k_att_bwd_dkdv<HD, BF>, s_kv);
    if (e == cudaSuccess) e = ds ? att_dq_ds_t<HD>(s, NULL, NULL, NULL, 0, 0, 0, 0, 0, c16, jo, true)
                                 : att_smem_optin(k_att_bwd_dq<HD, BF>, s_q);
    if (e != cudaSuccess) return e;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t rd_blocks = (size_t)B * H * ((Tq + ATT_ROWDOT_WARPS - 1) / ATT_ROWDOT_WARPS);
    LAUNCH(k_att_rowdot, (unsigned)rd_blocks, ATT_ROWDOT_WARPS * WARP, 0, s)(Drow, dout16, dout, out, Tq, H, hd);
    if (dk || dv || jo.out) {
        /* dk and dv are written together (a NULL one is given a scratch copy by the caller) */
        const dim3 grid((Tk + att_bwd_cfg<HD, BF>::KB - 1) / att_bwd_cfg<HD, BF>::KB, Hkv, B);
        void (*kern)(float *, float *, uint4 *, const float *, const float *, const float *, const float *,
                     const float *, const float *, int, int, int, int, int, int, int, float, att_bf16_t,
                     att_join_t) = k_att_bwd_dkdv<HD, BF>;
        const char *nm = att_kname<HD, BF>(1);
        const int nth = att_bwd_cfg<HD, BF>::NTH;
    LAUNCH_AS(kern, nm, grid, nth, s_kv, s)
        (dk, dv, ds, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window, scale, c16, jo);
    }
    if (ds) /* dQ = dS K, dS from the dK/dV pass (Tq = Tk) */
        return att_dq_ds_t<HD>(s, dq, ds, k, B, Tq, H, Hkv, hd, c16, jo, false);
    if (dq || jo.out) {
        const dim3 grid((Tq + 63) / 64, H, B);
        void (*kern)(float *, const float *, const float *, const float *, const float *, const float *,
                     const float *, int, int, int, int, int, int, int, float, att_bf16_t, att_join_t) = k_att_bwd_dq<HD, BF>;
        const char *nm = att_kname<HD, BF>(2);
        const int nth = att_dq_cfg<HD, BF>::NTH;
    LAUNCH_AS(kern, nm, grid, nth, s_q, s)
        (dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window, scale, c16, jo);
    }
    return cudaSuccess;
}
#define ATT_DISPATCH(fn, HDP, bf, ...)                                                             \
    (HDP == 16    ? (bf ? fn<16, true>(__VA_ARGS__) : fn<16, false>(__VA_ARGS__))                  \
     : HDP == 32  ? (bf ? fn<32, true>(__VA_ARGS__) : fn<32, false>(__VA_ARGS__))                  \
     : HDP == 64  ? (bf ? fn<64, true>(__VA_ARGS__) : fn<64, false>(__VA_ARGS__))                  \
                  : (bf ? fn<128, true>(__VA_ARGS__) : fn<128, false>(__VA_ARGS__)))
/* hd <= ATT_MAX_HD (att_pad_hd(hd) != 0); bf: the tensor-core engine */
static inline cudaError_t attention_forward_launch(cudaStream_t s, int bf, float *out, __nv_bfloat16 *out16, float *lse,
                                                   const float *q, const float *k, const float *v, int B, int Tq,
                                                   int Tk, int H, int Hkv, int hd, int causal, int window,
                                                   att_bf16_t c16) {
    if (B <= 0 || Tq <= 0 || H <= 0) return cudaSuccess;
    const int HDP = att_pad_hd(hd);
    return ATT_DISPATCH(att_forward_t, HDP, bf, s, out, out16, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, c16);
}
/* Drow: B * H * Tq floats of scratch; dout16 (or NULL): dout's bf16 shadow, written by k_att_rowdot
 * (c16.dout may point at it: the passes after rowdot read it); jo.out set (attention_join_ok,
 * Tq = Tk): the gradients go into the fused rows, dq, dk, dv are not touched; ds:
 * attention_ds_bytes(...) bytes of scratch (16-byte aligned) for dQ from dK/dV's dS, or NULL
 * (k_att_bwd_dq) */
static inline cudaError_t attention_backward_launch(cudaStream_t s, int bf, float *dq, float *dk, float *dv,
                                                    float *Drow, __nv_bfloat16 *dout16, const float *dout,
                                                    const float *out, const float *lse, const float *q, const float *k,
                                                    const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                                                    int causal, int window, att_bf16_t c16,
                                                    att_join_t jo = att_join_t{}, void *ds = NULL) {
    if (B <= 0 || Tq <= 0 || H <= 0) return cudaSuccess;
    const int HDP = att_pad_hd(hd);
    return ATT_DISPATCH(att_backward_t, HDP, bf, s, dq, dk, dv, Drow, dout16, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv,
                        hd, causal, window, c16, jo, (uint4 *)ds);
}
static inline cudaError_t attention_rows_launch(cudaStream_t s, float *out, const float *q, const float *kc,
                                                const float *vc, const int *base, const int *len, int N, int H,
                                                int Hkv, int hd) {
    const size_t items = (size_t)N * H;
    if (!items) return cudaSuccess;
    const size_t smem = sizeof(float) * ATT_ROWS_WARPS * (hd + WARP * (hd + 1));
    cudaError_t e = att_smem_optin(k_att_rows, smem);
    if (e != cudaSuccess) return e;
    LAUNCH(k_att_rows, blocks_for(items, ATT_ROWS_WARPS, 1u << 30), ATT_ROWS_WARPS * WARP, smem, s)
    (out, q, kc, vc, base, len, N, H, Hkv, hd);
    return cudaSuccess;
}
#endif
