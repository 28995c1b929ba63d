// Lesson 04: tensor cores. y[M,N] = x[M,K] · W[N,K]ᵀ in FP16 (FP32 accumulation, FP16 output) and INT8
// (INT32 accumulation and output), one kernel per step of the notebook:
//   1. gemm_wmma_*    WMMA: 16×16×16 fragments through the nvcuda::wmma API (exercise 04.a)
//   2. gemm_mma_*     ldmatrix + mma.sync m16n8k16: the PTX whose fragment layout is specified (04.b); ptxas
//                     lowers WMMA's own PTX (wmma.load, wmma.mma) to LDSM and HMMA/IMMA machine code too
//   3. gemm_mma_db_*  + a two-stage cp.async pipeline: tile k+1 lands while tile k is multiplied (04.c)
// A block computes a 128×128 tile of y with 4 warps of 64×64. Shared tiles are 128 bytes of K deep (64 halves,
// 128 int8s). x is row-major, the MMA's A; W[N,K] read as the K×N matrix Wᵀ is column-major, the MMA's B: no
// transpose anywhere. INT8 is the same code: m16n8k32's s8 fragments have m16n8k16's f16 layout, byte for half.
// Shapes: any M, N (loads past them read zeros, stores past them are skipped); K a multiple of 16 bytes, so
// each 16-byte copy lies inside one row and starts 16-byte aligned.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

using namespace nvcuda;

// 2 × 2 warps of 64 × 64: 128 FP32 accumulators per lane, over 200 registers with the fragments (ptxas -v), so an
// SM holds two of these blocks; while one waits for its tiles, the other's warps can issue MMAs.
constexpr int BM = 128, BN = 128, WM = 64, WN = 64, THREADS = 128;
constexpr int ROW = 128, CHUNKS = ROW / 16;  // a tile row: 128 bytes of K, eight 16-byte chunks
constexpr int PADDED = ROW + 16;             // WMMA's tiles: rows padded by 16 bytes

template <typename T> struct Types;
template <> struct Types<__half> { using Acc = float; using Out = __half; };
template <> struct Types<int8_t> { using Acc = int; using Out = int; };
__device__ __forceinline__ __half to_out(float v) { return __float2half(v); }
__device__ __forceinline__ int to_out(int v) { return v; }

// Where chunk c of tile row r sits, in bytes. ldmatrix reads 8 rows of 16 bytes at a time, same chunk:
// the 8 must fall in 8 different groups of 4 banks, or they queue. Two cures:
//  - padding (SWZ false): a 144-byte row stride moves each row 16 bytes along the banks;
//  - a swizzle (SWZ true): rows stay 128 bytes, and chunk c of row r is stored at c XOR (r mod 8).
template <bool SWZ> __device__ __forceinline__ int at(int r, int c) { return SWZ ? r * ROW + (c ^ (r & 7)) * 16 : r * PADDED + c * 16; }

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// cp.async copies 16 bytes global → shared without a register in between; a source size of 0 writes zeros.
__device__ __forceinline__ void cp_async16(char* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
// Copies are issued in groups; wait<N> returns when at most the N newest groups are still in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Starts the copy of a 128-row tile: rows row0.. of src (rows × K), elements k0.. of each row, 128 bytes.
// Eight neighbouring threads copy one row's 128 bytes: every warp reads whole 128-byte lines.
template <bool SWZ, typename T>
__device__ __forceinline__ void load_tile(char* s, const T* __restrict__ src, int rows, int K, int row0, int k0) {
    constexpr int E = 16 / sizeof(T);  // elements per chunk
#pragma unroll
    for (int i = threadIdx.x; i < BM * CHUNKS; i += THREADS) {
        const int r = i / CHUNKS, c = i % CHUNKS, k = k0 + c * E;
        const bool ok = row0 + r < rows && k < K;
        cp_async16(s + at<SWZ>(r, c), ok ? src + (size_t)(row0 + r) * K + k : src, ok);
    }
}
// ------------------------------------------------------------------------------------------------
// 1. WMMA. A fragment is a 16×16 tile spread over the warp's 32 lanes in a layout the API keeps to itself.

template <typename T> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
template <typename T> using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, typename Types<T>::Acc>;
// acc (the warp's 64×64 as 4×4 fragments) += the warp's rows of As · its columns of Bs, over one tile's K.
// As: 128 rows of x, Bs: 128 rows of W, both padded (row stride LD elements); the warp's rows start at wm, wn.
// In INT8 a K step of 16 is 16 bytes, so every other fragment pointer is only 16-byte aligned: outside the CUDA
// guide's 256-bit rule for load_matrix_sync. ptxas lowers these loads to ldmatrix (LDSM), whose rows need 16.
template <typename T>
__device__ __forceinline__ void wmma_tile(FragC<T> (&acc)[4][4], const T* As, const T* Bs, int wm, int wn) {
    constexpr int LD = PADDED / sizeof(T), BK = ROW / sizeof(T);  // row stride; K elements in a tile
    FragA<T> a[4];  // this K step's 16×16 pieces of the warp's 64 rows of x ...
    FragB<T> b[4];  // ... and of its 64 rows of W
    // BEGIN EXERCISE 04.a: the WMMA fragment loop
    // TODO: add this tile's products to acc (roughly 10 lines): step through the tile's BK columns 16 at a
    // time; at each step fill a[0..3] from the warp's rows of As and b[0..3] from its rows of Bs, then update
    // all 16 accumulators.
    (void)acc; (void)As; (void)Bs; (void)wm; (void)wn; (void)a; (void)b; (void)BK;
    // END EXERCISE
}

template <typename T>
__global__ void __launch_bounds__(THREADS) gemm_wmma_kernel(const T* __restrict__ x, const T* __restrict__ W,
                                                            typename Types<T>::Out* __restrict__ y, int M, int N, int K) {
    using Acc = typename Types<T>::Acc;
    extern __shared__ __align__(128) char smem[];
    char *As = smem, *Bs = smem + BM * PADDED;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / 2) * WM, wn = (warp % 2) * WN;
    FragC<T> acc[4][4];
#pragma unroll
    for (int f = 0; f < 16; ++f) wmma::fill_fragment(acc[f / 4][f % 4], Acc(0));
    for (int k0 = 0; k0 < K; k0 += ROW / (int)sizeof(T)) {
        load_tile<false>(As, x, M, K, m0, k0), load_tile<false>(Bs, W, N, K, n0, k0);
        cp_async_commit(), cp_async_wait<0>(), __syncthreads();  // every thread's copies have landed
        wmma_tile<T>(acc, reinterpret_cast<const T*>(As), reinterpret_cast<const T*>(Bs), wm, wn);
        __syncthreads();  // every warp is done reading before the next copies overwrite the tiles
    }
    // The accumulator's layout is the API's secret, so each fragment goes through a per-warp 16×16 scratch
    // in shared memory (free now), from which the lanes write y with the bounds checked.
    Acc* scratch = reinterpret_cast<Acc*>(smem) + warp * 256;
#pragma unroll
    for (int f = 0; f < 16; ++f) {  // fragment (i, j) = (f / 4, f % 4)
        wmma::store_matrix_sync(scratch, acc[f / 4][f % 4], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            const int row = m0 + wm + 16 * (f / 4) + e / 16, col = n0 + wn + 16 * (f % 4) + e % 16;
            if (row < M && col < N) y[(size_t)row * N + col] = to_out(scratch[e]);
        }
        __syncwarp();
    }
}
// ------------------------------------------------------------------------------------------------
// 2. ldmatrix + mma.sync: the same tensor cores with the fragment layout in the open (PTX ISA, "Matrix
// fragments for mma.m16n8k16"). With g = lane / 4 and t = lane % 4, a lane holds, of the 16×16 A tile,
// rows g and g + 8 at K columns 2t, 2t+1 and 2t+8, 2t+9 (a0..a3); of the 16×8 B tile, K rows 2t, 2t+1 and
// 2t+8, 2t+9 of column g (b0, b1); of the 16×8 accumulator, rows g and g + 8 at columns 2t, 2t+1 (c0..c3).

// acc (16×8) += a (16×16 halves, or 16×32 int8s) · b: one tensor-core instruction for the whole warp.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// ldmatrix.x4 loads four 8×8 matrices of 16-byte rows: lane L gives the address of row L % 8 of matrix
// L / 8, and receives in r[q] the 4 bytes at row lane / 4, bytes 4·(lane % 4) of matrix q: mma's layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const char* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// acc (the warp's 64×64 as 4×8 m16n8 tiles, 4 values each) += one swizzled tile pair's products over its K:
// four K steps of 32 bytes, each 2 chunks of every row.
template <typename Acc>
__device__ __forceinline__ void mma_tile(Acc (&acc)[4][8][4], const char* As, const char* Bs, int wm, int wn) {
    const int lane = threadIdx.x % 32;
    uint32_t a[4][4], b[4][4];  // per K step: 4 A tiles (16 rows each), 4 B pairs (16 rows of W = two n8 tiles)
    // BEGIN EXERCISE 04.b: ldmatrix + mma.sync, one tile's K loop
    // TODO: for each of the tile's 4 K steps (32 bytes: chunks 2s and 2s + 1), fill a[0..3] and b[0..3] with
    // one ldmatrix_x4 each and add all 4×8 m16n8 products to acc (roughly 15 lines). Work out first which
    // row and chunk of the tile each lane must point at; at<true>(row, chunk) turns that into a byte offset.
    (void)acc; (void)As; (void)Bs; (void)wm; (void)wn; (void)lane; (void)a; (void)b;
    // END EXERCISE
}

// Writes the warp's accumulators straight from registers (the layout is known): rows g, g + 8, columns 2t, 2t + 1.
template <typename Acc, typename Out>
__device__ __forceinline__ void store_acc(Out* y, int M, int N, int row0, int col0, const Acc (&acc)[4][8][4]) {
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int f = 0; f < 128; ++f) {  // value e = f % 4 of m16n8 tile (i, j) = (f / 32, f / 4 % 8)
        const int row = row0 + 16 * (f / 32) + g + 8 * (f % 4 / 2), col = col0 + 8 * (f / 4 % 8) + 2 * t + f % 2;
        if (row < M && col < N) y[(size_t)row * N + col] = to_out(acc[f / 32][f / 4 % 8][f % 4]);
    }
}

// STAGES 1: load a tile, wait, multiply, repeat. STAGES 2: the double buffer of exercise 04.c.
template <typename T, int STAGES>
__global__ void __launch_bounds__(THREADS) gemm_mma_kernel(const T* __restrict__ x, const T* __restrict__ W,
                                                           typename Types<T>::Out* __restrict__ y, int M, int N, int K) {
    using Acc = typename Types<T>::Acc;
    constexpr int TILE = BM * ROW, BK = ROW / sizeof(T);  // bytes of one tile; K elements in it
    extern __shared__ __align__(128) char smem[];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, warp = threadIdx.x / 32;
    const int wm = (warp / 2) * WM, wn = (warp % 2) * WN;
    Acc acc[4][8][4] = {};
    const int tiles = (K + BK - 1) / BK;
    auto As = [&](int st) { return smem + 2 * st * TILE; };  // stage st: x's tile, then W's
    auto Bs = [&](int st) { return smem + (2 * st + 1) * TILE; };
    if constexpr (STAGES == 1) {
        for (int kt = 0; kt < tiles; ++kt) {  // as the WMMA kernel: copy, wait, multiply, wait
            load_tile<true>(As(0), x, M, K, m0, kt * BK), load_tile<true>(Bs(0), W, N, K, n0, kt * BK);
            cp_async_commit(), cp_async_wait<0>(), __syncthreads();
            mma_tile(acc, As(0), Bs(0), wm, wn);
            __syncthreads();
        }
    } else {
        // BEGIN EXERCISE 04.c: the cp.async double buffer
        // TODO: multiply all `tiles` tiles, with the copy of tile kt + 1 in flight while mma_tile works on tile
        // kt (roughly 15 lines). Tile kt lives in stage kt % 2: As(kt % 2), Bs(kt % 2). K = 0 means no tile at
        // all: then copy nothing (y stays zero). No warp may read a stage before its copies have landed, and no
        // copy may overwrite a stage another warp is still reading.
        (void)tiles; (void)As; (void)Bs; (void)wm; (void)wn;
        // END EXERCISE
    }
    store_acc(y, M, N, m0 + wm, n0 + wn, acc);
}
// ------------------------------------------------------------------------------------------------
// Launchers: one block per 128×128 tile of y. More than 48 KB of shared memory needs an opt-in per kernel.
template <typename T, class Kernel>
static void launch(Kernel kernel, int smem, const T* x, const T* W, typename Types<T>::Out* y, int M, int N, int K,
                   cudaStream_t stream) {
    if (M == 0 || N == 0) return;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kernel<<<dim3((N + BN - 1) / BN, (M + BM - 1) / BM), THREADS, smem, stream>>>(x, W, y, M, N, K);
}
constexpr int WMMA_SMEM = 2 * BM * PADDED, MMA_SMEM = 2 * BM * ROW;  // one stage: x's tile and W's

EXPORT void gemm_wmma_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t s) {
    launch(gemm_wmma_kernel<__half>, WMMA_SMEM, x, W, y, M, N, K, s); }
EXPORT void gemm_wmma_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t s) {
    launch(gemm_wmma_kernel<int8_t>, WMMA_SMEM, x, W, y, M, N, K, s); }
EXPORT void gemm_mma_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t s) {
    launch(gemm_mma_kernel<__half, 1>, MMA_SMEM, x, W, y, M, N, K, s); }
EXPORT void gemm_mma_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t s) {
    launch(gemm_mma_kernel<int8_t, 1>, MMA_SMEM, x, W, y, M, N, K, s); }
EXPORT void gemm_mma_db_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t s) {
    launch(gemm_mma_kernel<__half, 2>, 2 * MMA_SMEM, x, W, y, M, N, K, s); }
EXPORT void gemm_mma_db_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t s) {
    launch(gemm_mma_kernel<int8_t, 2>, 2 * MMA_SMEM, x, W, y, M, N, K, s); }
