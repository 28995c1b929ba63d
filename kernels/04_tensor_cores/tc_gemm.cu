// Lesson 04: tensor cores. y[M,N] = x[M,K] · W[N,K]ᵀ with
//   - FP16 inputs, FP32 accumulation, FP16 output   (gemm_*_f16), and
//   - INT8 inputs, INT32 accumulation, INT32 output (gemm_*_s8: the W8A8 building block),
// written twice: with the nvcuda::wmma API (gemm_wmma_*) and with the PTX instructions it
// compiles to, ldmatrix and mma.sync (gemm_mma_*).
//
// A tensor-core instruction multiplies whole tiles, so the unit of work is a *fragment*: a tile of
// a matrix spread across the 32 lanes of a warp. WMMA hides the layout: load_matrix_sync fills a
// 16×16 fragment, mma_sync does acc += a·b on 16×16×16, store_matrix_sync writes it back. mma.sync
// exposes it (PTX ISA, "Matrix fragments for mma.m16n8k16"): with g = lane / 4 and t = lane % 4,
// lane holds rows g and g + 8 of a 16-row A tile, columns 2t, 2t+1 (+8) of K, and the matching pieces
// of B and of the 16×8 accumulator. Owning the layout lets a kernel double-buffer fragments in
// registers and write results straight from registers, which WMMA's opaque fragments make hard.
//
// Shared structure (both kernels):
//  - A block computes a 128×BN tile of y with warps owning 64×64 warp tiles: 4×4 WMMA fragments, or
//    4×8 mma.sync m16n8 tiles, 128 accumulators per thread either way.
//  - x is row-major [M,K] (WMMA's matrix_a, row_major); W is [N,K]: read as the K×N matrix Wᵀ it is
//    column-major (matrix_b, col_major, mma's ".col"): no transpose anywhere.
//  - Shared tiles are TILE_BYTES of K deep (64 halves or 128 int8s), rows padded by 16 bytes. ldmatrix
//    (what load_matrix_sync becomes) reads 8 rows of 16 bytes per phase; with a 144-byte stride those 8
//    rows start in banks 0, 4, 8, …, 28: all 32 banks, no conflict. Unpadded, all 8 would hit one bank.
//  - Tiles move global → shared with cp.async (16 bytes, no registers in between) in a STAGES-deep
//    ring: while the tensor cores work on tile k, the next tiles are in flight. The mma.sync kernel
//    also keeps the next K step's fragments in flight, across tile boundaries (see its K loop).
//  - Blocks are launched in groups of GROUP_M tile rows (the Triton tutorial's ordering), so blocks
//    that run together share rows of x and columns of W in L2.
// The INT8 kernels use the same bytes per tile: K is simply twice as long per byte, and mma.sync's
// m16n8k32 s8 fragments have exactly the register layout of m16n8k16 f16 ones, byte for half.
// Odd shapes: loads past M, N or K read zeros (cp.async's src-size 0 zero-fills); when K is not a
// multiple of 16 bytes' worth of elements (or a pointer is not 16-byte aligned) a scalar-loader
// instantiation is used, because a 16-byte copy would straddle two rows. Stores are guarded.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

using namespace nvcuda;

// Tile configurations: block tile width BN, shared tile depth in bytes, pipeline stages. The defaults
// come from the sweeps in tools/tune_tc.py (H100; NOTES.md); override with -D to explore.
#ifndef WMMA_BN
#define WMMA_BN 128
#endif
#ifndef WMMA_TB
#define WMMA_TB 128
#endif
#ifndef WMMA_STAGES
#define WMMA_STAGES 2
#endif
#ifndef MMA_BN
#define MMA_BN 256
#endif
#ifndef MMA_TB
#define MMA_TB 128
#endif
#ifndef MMA_STAGES
#define MMA_STAGES 3
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
// Measurement switch for tools/tune_tc.py --ablate, mma.sync kernels only: bit 1 skips the refills of the K
// loop (the tiles keep stale data), bit 2 loads each tile's fragments once, bit 4 drops the barrier. The
// results are wrong; only the timing means something (what each part of the loop costs). 0 everywhere else.
#ifndef TC_ABLATE
#define TC_ABLATE 0
#endif

template <int BN_, int TILE_BYTES_, int STAGES_>
struct Cfg {
    static constexpr int BM = 128, BN = BN_, WM = 64, WN = 64;
    static constexpr int WARPS_N = BN / WN, THREADS = 32 * (BM / WM) * WARPS_N;
    static constexpr int TILE_BYTES = TILE_BYTES_, ROW_BYTES = TILE_BYTES + 16, CHUNKS = TILE_BYTES / 16;
    static constexpr int STAGES = STAGES_, STAGE_BYTES = (BM + BN) * ROW_BYTES;
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
};
using WmmaCfg = Cfg<WMMA_BN, WMMA_TB, WMMA_STAGES>;
using MmaCfg = Cfg<MMA_BN, MMA_TB, MMA_STAGES>;

// Element type → accumulator and output types, and the raw bits type for scalar loads.
template <typename T> struct Types;
template <> struct Types<__half> { using Acc = float; using Out = __half; using Raw = uint16_t; };
template <> struct Types<int8_t> { using Acc = int; using Out = int; using Raw = uint8_t; };

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies a ROWS × TILE_BYTES tile of src (rows × K elements, K-contiguous) into shared memory, one
// 16-byte chunk per thread and step. A thread's chunks all sit in the same column of chunks, rows
// THREADS / CHUNKS apart, so one pointer, one row mask and one k offset describe them all: the
// per-tile work is then a bounds test and an add per chunk, not a full address computation.
template <class C, typename T, bool VEC, int ROWS>
struct TileLoader {
    static constexpr int E = 16 / sizeof(T);                     // elements per chunk
    static constexpr int PER = ROWS * C::CHUNKS / C::THREADS;    // chunks per thread
    static constexpr int ROW_STEP = C::THREADS / C::CHUNKS;      // rows between a thread's chunks
    static_assert(ROWS * C::CHUNKS % C::THREADS == 0, "every thread copies the same number of chunks");
    const T* p;        // this thread's first chunk, at k = 0
    size_t step;       // ROW_STEP rows of src, in elements
    int kofs, soff;    // the chunk's k offset in the tile; its byte offset in the shared tile
    unsigned rows_ok;  // bit i: chunk i's row is inside the matrix

    __device__ TileLoader(const T* src, int rows, int K, int row0) {
        const int c = threadIdx.x, r = c / C::CHUNKS;
        kofs = (c % C::CHUNKS) * E;
        soff = r * C::ROW_BYTES + (c % C::CHUNKS) * 16;
        step = (size_t)ROW_STEP * K;
        rows_ok = 0;
#pragma unroll
        for (int i = 0; i < PER; ++i) rows_ok |= unsigned(row0 + r + i * ROW_STEP < rows) << i;
        p = src + (size_t)min(row0 + r, rows - 1) * K + kofs;
    }

    __device__ __forceinline__ void load(char* tile, int k0, int K) const {
        const int k = k0 + kofs;
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const bool ok = ((rows_ok >> i) & 1) && k < K;  // K % E == 0: all E elements of the chunk or none
                cp_async16(tile + soff + i * ROW_STEP * C::ROW_BYTES, ok ? (const void*)(p + i * step + k0) : (const void*)p, ok);
            }
        } else {  // element by element, zero past K: a 16-byte copy would straddle two rows
            using Raw = typename Types<T>::Raw;
#pragma unroll 1
            for (int i = 0; i < PER; ++i) {
                const Raw* q = reinterpret_cast<const Raw*>(p + i * step + k0);
                Raw* dst = reinterpret_cast<Raw*>(tile + soff + i * ROW_STEP * C::ROW_BYTES);
                const bool row_in = (rows_ok >> i) & 1;
#pragma unroll
                for (int e = 0; e < E; ++e) dst[e] = (row_in && k + e < K) ? q[e] : Raw(0);
            }
        }
    }
};

// Which output tile this block computes: GROUP_M tile rows at a time, walking along n in a group.
template <class C>
__device__ __forceinline__ void tile_origin(int M, int N, int& m0, int& n0) {
    const int tiles_m = (M + C::BM - 1) / C::BM, tiles_n = (N + C::BN - 1) / C::BN;
    const int per_group = GROUP_M * tiles_n, first_m = (blockIdx.x / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    m0 = (first_m + (blockIdx.x % per_group) % group_rows) * C::BM;
    n0 = ((blockIdx.x % per_group) / group_rows) * C::BN;
}

// The WMMA kernel's K loop: a STAGES-deep cp.async ring; compute(As, Bs) consumes one tile
// (As: BM rows of x, Bs: BN rows of W, each row TILE_BYTES of K at a ROW_BYTES stride).
template <class C, typename T, bool VEC, class Compute>
__device__ __forceinline__ void mainloop(const T* x, const T* W, int M, int N, int K, int m0, int n0, char* smem,
                                         Compute&& compute) {
    constexpr int BK = C::TILE_BYTES / sizeof(T);
    const TileLoader<C, T, VEC, C::BM> load_x(x, M, K, m0);
    const TileLoader<C, T, VEC, C::BN> load_w(W, N, K, n0);
    auto load_stage = [&](int s, int kt) {
        load_x.load(smem + s * C::STAGE_BYTES, kt * BK, K);
        load_w.load(smem + s * C::STAGE_BYTES + C::BM * C::ROW_BYTES, kt * BK, K);
    };
    const int ktiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, s);
        cp_async_commit();  // an empty group keeps the wait count below uniform
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<C::STAGES - 2>();  // tile kt has landed (this thread's copies)...
        __syncthreads();                 // ...and everyone's; everyone is also done with tile kt-1's stage
        if (kt + C::STAGES - 1 < ktiles) load_stage((kt + C::STAGES - 1) % C::STAGES, kt + C::STAGES - 1);
        cp_async_commit();
        const char* stage = smem + (kt % C::STAGES) * C::STAGE_BYTES;
        compute(stage, stage + C::BM * C::ROW_BYTES);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the tiles: their memory may be reused
}

__device__ __forceinline__ void store1(__half* y, float v) { *y = __float2half_rn(v); }
__device__ __forceinline__ void store1(int* y, int v) { *y = v; }
__device__ __forceinline__ void store2(__half* y, float a, float b) { *reinterpret_cast<__half2*>(y) = __floats2half2_rn(a, b); }
__device__ __forceinline__ void store2(int* y, int a, int b) { *reinterpret_cast<int2*>(y) = make_int2(a, b); }

// ------------------------------------------------------------------------------------------------
// WMMA

template <typename T, bool VEC>
__global__ void __launch_bounds__(WmmaCfg::THREADS)
gemm_wmma_kernel(const T* __restrict__ x, const T* __restrict__ W, typename Types<T>::Out* __restrict__ y,
                 int M, int N, int K, bool vec_out) {
    using C = WmmaCfg;
    using Acc = typename Types<T>::Acc;
    using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
    using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, Acc>;
    constexpr int FM = C::WM / 16, FN = C::WN / 16;                                // 4×4 fragments
    constexpr int BK = C::TILE_BYTES / sizeof(T), LDE = C::ROW_BYTES / sizeof(T);  // in elements
    extern __shared__ __align__(128) char smem[];
    int m0, n0;
    tile_origin<C>(M, N, m0, n0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / C::WARPS_N) * C::WM, wn = (warp % C::WARPS_N) * C::WN;

    FragC acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], Acc(0));

    mainloop<C, T, VEC>(x, W, M, N, K, m0, n0, smem, [&](const char* a_tile, const char* b_tile) {
        const T* As = reinterpret_cast<const T*>(a_tile);
        const T* Bs = reinterpret_cast<const T*>(b_tile);
        // BEGIN EXERCISE 04.a: the WMMA fragment loop
        // TODO: for each 16-deep step kk of this BK-deep tile:
        //   load FM fragments of A (rows wm + i·16 of As, columns kk) and FN fragments of B
        //   (rows wn + j·16 of Bs, columns kk) with wmma::load_matrix_sync(frag, pointer, LDE),
        //   then acc[i][j] += a[i]·b[j] with wmma::mma_sync for every i, j.
        (void)As; (void)Bs;
        // END EXERCISE
    });

    // Epilogue through a per-warp 16×16 scratch (the pipeline's memory, now free): the fragment
    // layout is opaque, memory is not. Each lane then writes 8 consecutive outputs of one row.
    Acc* scratch = reinterpret_cast<Acc*>(smem) + warp * 256;
    const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int row = m0 + wm + i * 16 + r, col = n0 + wn + j * 16 + c;
            const Acc* v = scratch + r * 16 + c;
            if (row < M) {
                auto* out = y + (size_t)row * N + col;
#pragma unroll
                for (int e = 0; e < 8; e += 2) {
                    if (vec_out && col + e + 1 < N) store2(out + e, v[e], v[e + 1]);
                    else {
                        if (col + e < N) store1(out + e, v[e]);
                        if (col + e + 1 < N) store1(out + e + 1, v[e + 1]);
                    }
                }
            }
            __syncwarp();
        }
}

// ------------------------------------------------------------------------------------------------
// ldmatrix + mma.sync

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const char* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// acc (16×8) += a (16×K) · b (K×8): K = 16 halves, or 32 int8s, per instruction.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(MmaCfg::THREADS)
gemm_mma_kernel(const T* __restrict__ x, const T* __restrict__ W, typename Types<T>::Out* __restrict__ y,
                int M, int N, int K, bool vec_out) {
    using C = MmaCfg;
    using Acc = typename Types<T>::Acc;
    constexpr int FM = C::WM / 16, FN = C::WN / 8;  // 4 × 8 m16n8 tiles per warp
    constexpr int KSTEPS = C::TILE_BYTES / 32;      // one mma's K is 32 bytes (16 halves, 32 int8s)
    static_assert(KSTEPS % 2 == 0, "the fragment buffers alternate per K step and restart at 0 per tile");
    extern __shared__ __align__(128) char smem[];
    int m0, n0;
    tile_origin<C>(M, N, m0, n0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / C::WARPS_N) * C::WM, wn = (warp % C::WARPS_N) * C::WN;

    Acc acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = Acc(0);

    // ldmatrix.x4 loads four 8×8 matrices of 16-byte rows; lane L gives the address of row L % 8 of
    // matrix L / 8, and gets back, in register q, row lane / 4, bytes 4·(lane % 4).. of matrix q.
    // A (16 rows × 32 bytes): matrices (rows 0-7, bytes 0-15), (8-15, 0-15), (0-7, 16-31), (8-15, 16-31)
    //   = mma's a0..a3. B (16 rows of W = two n8 tiles × 32 bytes): (n 0-7, bytes 0-15), (0-7, 16-31),
    //   (8-15, 0-15), (8-15, 16-31) = b0, b1 of the first n8 tile, then of the second.
    // BEGIN EXERCISE 04.b: ldmatrix addresses and the mma.sync loop
    // TODO: compute each lane's byte offsets into the A and B tiles (see the comment above); the K loop
    // below adds i·16 rows (A), j·16 rows (B) and 32 bytes per K step to them. Then fill in the mma.sync
    // of one K step, further down.
    const int a_off = 0, b_off = 0;
    // END EXERCISE

    // Its own K loop, not mainloop(): fragments are double-buffered in registers (step s+1's ldmatrix are issued
    // before step s's mma.sync, so their shared-memory latency hides behind tensor-core work), across tile
    // boundaries too. The barrier moves from the start of tile kt to its last K step: once tile kt+1 has landed,
    // the warp loads its first fragments and only then issues tile kt's last MMAs, so no warp meets a tile with
    // empty registers. The refill of the stage tile kt-1 used waits until after that barrier (step 0 of tile kt),
    // when every warp has read its last fragments from it. (H100, NOTES.md: 40-41% → 50-52% of cuBLAS FP16,
    // INT8 67-70% → 83-86% of torch._int_mm; 4 stages or copies spread over the K steps were no better.)
    constexpr int BK = C::TILE_BYTES / sizeof(T);
    const TileLoader<C, T, VEC, C::BM> load_x(x, M, K, m0);
    const TileLoader<C, T, VEC, C::BN> load_w(W, N, K, n0);
    auto load_stage = [&](int st, int kt) {
        load_x.load(smem + st * C::STAGE_BYTES, kt * BK, K);
        load_w.load(smem + st * C::STAGE_BYTES + C::BM * C::ROW_BYTES, kt * BK, K);
    };
    uint32_t a[2][FM][4], b[2][FN / 2][4];
    auto load = [&](int buf, int st, int s) {  // the fragments of K step s of stage st
        const char* As = smem + st * C::STAGE_BYTES;
        const char* Bs = As + C::BM * C::ROW_BYTES;
#pragma unroll
        for (int i = 0; i < FM; ++i) ldmatrix_x4(a[buf][i], As + a_off + i * 16 * C::ROW_BYTES + s * 32);
#pragma unroll
        for (int j = 0; j < FN / 2; ++j) ldmatrix_x4(b[buf][j], Bs + b_off + j * 16 * C::ROW_BYTES + s * 32);
    };
    const int ktiles = (K + BK - 1) / BK;
#pragma unroll
    for (int st = 0; st < C::STAGES - 1; ++st) {
        if (st < ktiles) load_stage(st, st);
        cp_async_commit();  // an empty group keeps the wait counts uniform
    }
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    int rs = 0;  // the stage being read
    load(0, 0, 0);
    for (int kt = 0; kt < ktiles; ++kt) {
#pragma unroll
        for (int s = 0; s < KSTEPS; ++s) {
            if (s == 0) {  // tile kt-1's stage is free: every warp passed the barrier after its last ldmatrix
                const int nt = kt + C::STAGES - 1;
                if (nt < ktiles && !(TC_ABLATE & 1)) load_stage(nt % C::STAGES, nt);
                cp_async_commit();
            }
            if (s == KSTEPS - 1) {  // tile kt+1 must have landed (everyone's copies) before its fragments are read
                cp_async_wait<C::STAGES - 2>();
                if (!(TC_ABLATE & 4)) __syncthreads();
                rs = rs + 1 == C::STAGES ? 0 : rs + 1;
            }
            if (s + 1 < KSTEPS) {
                if (!(TC_ABLATE & 2)) load((s + 1) % 2, rs, s + 1);
            } else if (kt + 1 < ktiles) {
                load(0, rs, 0);  // KSTEPS is even: step 0 always uses buffer 0
            }
            const int u = (TC_ABLATE & 2) ? 0 : s % 2;
            // BEGIN EXERCISE 04.b: (continued) the mma.sync of one K step
            // TODO: acc[i][j] += A tile i · B tile j for the FM × FN m16n8 tiles of this K step: the
            // fragments are a[u][i] and, for n8 tile j, b[u][j / 2] registers (j % 2)·2 and (j % 2)·2 + 1.
            (void)u;
            // END EXERCISE
        }
    }
    cp_async_wait<0>();

    // Epilogue straight from registers: acc[i][j] holds rows g and g + 8, columns 2t and 2t + 1.
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm + i * 16 + g + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                const int col = n0 + wn + j * 8 + 2 * t;
                auto* out = y + (size_t)row * N + col;
                const Acc v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (vec_out && col + 1 < N) store2(out, v0, v1);
                else {
                    if (col < N) store1(out, v0);
                    if (col + 1 < N) store1(out + 1, v1);
                }
            }
        }
}

// ------------------------------------------------------------------------------------------------
// Launchers

template <class C, typename T, class Kernel>
static void launch(Kernel vec_kernel, Kernel scalar_kernel, const T* x, const T* W, typename Types<T>::Out* y,
                   int M, int N, int K, cudaStream_t stream) {
    constexpr int E = 16 / sizeof(T);
    const bool vec_in = K % E == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0;
    // Paired stores need an even N (so every row starts aligned) and an aligned y.
    const bool vec_out = N % 2 == 0 && reinterpret_cast<uintptr_t>(y) % (2 * sizeof(*y)) == 0;
    const dim3 grid(((M + C::BM - 1) / C::BM) * ((N + C::BN - 1) / C::BN));
    Kernel kernel = vec_in ? vec_kernel : scalar_kernel;
    // More than 48 KB of shared memory needs an explicit opt-in per kernel.
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
    kernel<<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(x, W, y, M, N, K, vec_out);
}

EXPORT void gemm_wmma_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    launch<WmmaCfg>(gemm_wmma_kernel<__half, true>, gemm_wmma_kernel<__half, false>, x, W, y, M, N, K, stream);
}
EXPORT void gemm_wmma_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t stream) {
    launch<WmmaCfg>(gemm_wmma_kernel<int8_t, true>, gemm_wmma_kernel<int8_t, false>, x, W, y, M, N, K, stream);
}
EXPORT void gemm_mma_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    launch<MmaCfg>(gemm_mma_kernel<__half, true>, gemm_mma_kernel<__half, false>, x, W, y, M, N, K, stream);
}
EXPORT void gemm_mma_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t stream) {
    launch<MmaCfg>(gemm_mma_kernel<int8_t, true>, gemm_mma_kernel<int8_t, false>, x, W, y, M, N, K, stream);
}
