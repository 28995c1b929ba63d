// Lesson 03: register tiling, y[M,N] = x[M,K] · W[N,K]ᵀ in FP32, one step at a time.
//
// Lesson 02 computes one output per thread: every FMA needs two shared-memory loads, so the
// shared-memory pipe, not the FMA units, sets the speed. Each step below makes a thread reuse what it
// loads from shared memory more often, or hides a wait:
//   1. gemm_regtile_1d   a thread computes 8 outputs of one column (64×64 block tile, 512 threads)
//   2. gemm_regtile_2d   a thread computes an 8×8 micro-tile (128×128 block tile, 256 threads)
//   3. gemm_regtile_vec  + 128-bit global loads (one LDG.128 brings 4 floats)
//   4. gemm_regtile_warp + warp tiling: a thread's 8×8 is spread over its warp's tile (no bank conflicts)
//   5. gemm_regtile_db   + double buffering: the next tile's loads fly while this tile's FMAs run
// Tiles are BK = 8 deep. Both x and W are K-contiguous, so a tile row is copied along K and stored
// transposed, s[k][row]: a thread then reads its rows (or columns) of step k side by side. A row
// stride of ROWS + 4 floats makes those transposed stores conflict-free and keeps rows 16-byte aligned.
// Odd shapes: loads past M, N or K read zeros; stores past M or N are skipped.
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int BK = 8, PAD = 4;
constexpr int BM = 128, BN = 128, THREADS = 256;  // steps 2-5: 256 threads × 64 outputs = 128×128
// Each output is an accumulator register for the whole K loop. __launch_bounds__(THREADS, 2) below asks ptxas for
// at most 128 registers a thread (65,536 per SM / 512 threads), so that two blocks share an SM.

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

// Copy rows row0.. of src (rows × K) and K columns k0..k0+BK-1 into s[k][row], one float at a time.
template <int ROWS, int NTHREADS>
__device__ __forceinline__ void load_tile_scalar(const float* __restrict__ src, int rows, int K, int row0, int k0,
                                                 float (*s)[ROWS + PAD]) {
#pragma unroll
    for (int p = 0; p < ROWS * BK / NTHREADS; ++p) {
        const int i = threadIdx.x + p * NTHREADS, r = i / BK, k = i % BK;  // 8 threads read a row's 32 bytes
        s[k][r] = row0 + r < rows && k0 + k < K ? src[(size_t)(row0 + r) * K + k0 + k] : 0.f;
    }
}

// src[row][k .. k+3] (src: rows × K floats, row-major) as one float4, zeros past `rows` and past K. Callers pass k
// a multiple of 4.
__device__ __forceinline__ float4 load4(const float* __restrict__ src, int rows, int K, int row, int k) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    // BEGIN EXERCISE 03.b: 128-bit global loads
    //> // TODO: fill v with src[row][k], src[row][k+1], src[row][k+2], src[row][k+3] (roughly 10 lines).
    //> // - Nothing to load when row is past the last row: v stays zero.
    //> // - One 128-bit load (reinterpret the address as const float4*) brings all four at once. It needs a
    //> //   16-byte-aligned address: when is the start of every row, and so every group of four, aligned?
    //> // - Otherwise read the four one by one, each only if it lies before K.
    if (row < rows) {
        const float* p = src + (size_t)row * K + k;
        if (K % 4 == 0 && aligned16(src)) {  // every row starts 16-byte aligned; k is a multiple of 4
            if (k < K) v = *reinterpret_cast<const float4*>(p);
        } else {
            if (k < K) v.x = p[0];
            if (k + 1 < K) v.y = p[1];
            if (k + 2 < K) v.z = p[2];
            if (k + 3 < K) v.w = p[3];
        }
    }
    // END EXERCISE
    return v;
}

// The transposed store of one load4: s[k + c][row] = v's c-th value.
__device__ __forceinline__ void store4(float (*s)[BM + PAD], int row, int k, float4 v) {
    s[k][row] = v.x;
    s[k + 1][row] = v.y;
    s[k + 2][row] = v.z;
    s[k + 3][row] = v.w;
}

// A thread's 8×8 outputs are 2×2 blocks of 4×4: rows am + {0..3} and am + RS + {0..3}, columns
// bn + {0..3} and bn + CS + {0..3}. RS = CS = 4 is one contiguous 8×8 block (steps 2, 3); the warp
// tiling of steps 4 and 5 spreads the blocks out (RS = 32, CS = 16). Which of acc's 64 registers holds which of
// these outputs is the exercise's to choose: micro_tile adds to them, store_acc writes them to y.
// BEGIN EXERCISE 03.a: the register micro-tile
//> template <int RS, int CS>
//> __device__ __forceinline__ void micro_tile(const float (*As)[BM + PAD], const float (*Ws)[BN + PAD], int am, int bn,
//>                                            float (&acc)[8][8]) {
//>     // TODO: for each of the BK steps k of the tile, add to acc the outer product of this thread's
//>     // 8 values of x (As[k], its two groups of 4 rows) and its 8 values of W (Ws[k], its two groups of
//>     // 4 columns): 64 FMAs from 16 values (roughly 15 lines).
//>     // - Copy the 16 values into register arrays first, so each is read from shared memory once.
//>     // - Read each group of 4 with one 128-bit shared load (reinterpret its address as const float4*).
//>     // - #pragma unroll on every loop: only compile-time indices keep acc, a and b in registers.
//>     (void)As; (void)Ws; (void)am; (void)bn; (void)acc;
//> }
//>
//> // Write a thread's 8×8 (the layout micro_tile gives acc) to y, whose rows are N floats; the thread's outputs
//> // start at row m, column n (block offset included).
//> template <int RS, int CS>
//> __device__ __forceinline__ void store_acc(float* __restrict__ y, int M, int N, int m, int n, const float (&acc)[8][8]) {
//>     // TODO: store each of the 64 outputs where it belongs, skipping rows past M and columns past N (roughly
//>     // 15 lines). One store per output is right; four at once (float4) is faster where it is safe.
//>     (void)y; (void)M; (void)N; (void)m; (void)n; (void)acc;
//> }
template <int RS, int CS>
__device__ __forceinline__ void micro_tile(const float (*As)[BM + PAD], const float (*Ws)[BN + PAD], int am, int bn,
                                           float (&acc)[8][8]) {
#pragma unroll
    for (int k = 0; k < BK; ++k) {
        float a[8], b[8];  // rows am + {0..3}, am + RS + {0..3}; columns bn + {0..3}, bn + CS + {0..3}
        const float4 a0 = *reinterpret_cast<const float4*>(&As[k][am]);
        const float4 a1 = *reinterpret_cast<const float4*>(&As[k][am + RS]);
        const float4 b0 = *reinterpret_cast<const float4*>(&Ws[k][bn]);
        const float4 b1 = *reinterpret_cast<const float4*>(&Ws[k][bn + CS]);
        a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w; a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
        b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w; b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

template <int RS, int CS>
__device__ __forceinline__ void store_acc(float* __restrict__ y, int M, int N, int m, int n, const float (&acc)[8][8]) {
    const bool vec = N % 4 == 0 && aligned16(y);  // float4 stores when every row of y is 16-byte aligned
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m + (i / 4) * RS + i % 4;
        if (row >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = n + h * CS;
            float* out = y + (size_t)row * N + col;
            if (vec && col < N) {
                *reinterpret_cast<float4*>(out) = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            } else if (!vec) {
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    if (col + c < N) out[c] = acc[i][4 * h + c];
            }
        }
    }
}
// END EXERCISE

// Step 1: thread t computes rows 8·(t / 64) .. +7 of column t % 64. Per k it reads one value of W and
// eight of x (the same eight for the whole warp: a broadcast) and does 8 FMAs.
__global__ void __launch_bounds__(512) regtile_1d_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                                         float* __restrict__ y, int M, int N, int K) {
    constexpr int T = 64;  // block tile T×T, 8 outputs per thread
    __shared__ __align__(16) float As[BK][T + PAD], Ws[BK][T + PAD];
    const int tn = threadIdx.x % T, tm = (threadIdx.x / T) * 8;
    const int m0 = blockIdx.y * T, n0 = blockIdx.x * T;
    float acc[8] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile_scalar<T, 512>(x, M, K, m0, k0, As);
        load_tile_scalar<T, 512>(W, N, K, n0, k0, Ws);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Ws[k][tn];  // kept in a register for 8 FMAs
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = fmaf(As[k][tm + i], b, acc[i]);
        }
        __syncthreads();  // everyone is done with this tile before it is overwritten
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (m0 + tm + i < M && n0 + tn < N) y[(size_t)(m0 + tm + i) * N + n0 + tn] = acc[i];
}

// Steps 2-4 share one body; they differ in how tiles are loaded (VEC) and where a thread's 8×8 sits.
// Thread layout: 16×16 threads, each an 8×8 block (WARP = false), or 2×4 warps of a 64×32 warp tile,
// in which lane (l % 8, l / 8) owns rows 4·(l % 8) + {0..3, 32..35} and columns 4·(l / 8) + {0..3, 16..19}.
template <bool VEC, bool WARP>
__global__ void __launch_bounds__(THREADS, 2) regtile_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                                             float* __restrict__ y, int M, int N, int K) {
    constexpr int RS = WARP ? 32 : 4, CS = WARP ? 16 : 4;
    __shared__ __align__(16) float As[BK][BM + PAD], Ws[BK][BN + PAD];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int am = WARP ? (warp / 4) * 64 + (lane % 8) * 4 : (tid / 16) * 8;
    const int bn = WARP ? (warp % 4) * 32 + (lane / 8) * 4 : (tid % 16) * 8;
    const int lr = tid / 2, lk = (tid % 2) * 4;  // the row and k of this thread's float4 of each tile
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[8][8] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        if (VEC) {
            store4(As, lr, lk, load4(x, M, K, m0 + lr, k0 + lk));
            store4(Ws, lr, lk, load4(W, N, K, n0 + lr, k0 + lk));
        } else {
            load_tile_scalar<BM, THREADS>(x, M, K, m0, k0, As);
            load_tile_scalar<BN, THREADS>(W, N, K, n0, k0, Ws);
        }
        __syncthreads();
        micro_tile<RS, CS>(As, Ws, am, bn, acc);
        __syncthreads();
    }
    store_acc<RS, CS>(y, M, N, m0 + am, n0 + bn, acc);
}

// Step 5: step 4 with two buffers of each tile. While the FMAs of tile t run on one buffer, tile t+1's
// global loads are already in flight into registers; they are stored to the other buffer afterwards.
__global__ void __launch_bounds__(THREADS, 2) regtile_db_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                                                float* __restrict__ y, int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM + PAD], Ws[2][BK][BN + PAD];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int am = (warp / 4) * 64 + (lane % 8) * 4, bn = (warp % 4) * 32 + (lane / 8) * 4;
    const int lr = tid / 2, lk = (tid % 2) * 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[8][8] = {};
    store4(As[0], lr, lk, load4(x, M, K, m0 + lr, lk));  // tile 0 into buffer 0
    store4(Ws[0], lr, lk, load4(W, N, K, n0 + lr, lk));
    __syncthreads();
    // BEGIN EXERCISE 03.c: the double buffer
    //> // TODO: run over the K tiles, micro_tile<32, 16> on one buffer while the next tile travels into
    //> // the other (roughly 15 lines). Per tile, if there is a next tile, its two float4 go through
    //> // registers (load4, then store4 into the other buffer), and the micro-tile runs on this buffer:
    //> // in which order, so that the loads are in flight while the FMAs run?
    //> // - One __syncthreads per tile is enough. Where must it stand, and why may the other buffer be
    //> //   written before it without waiting for the warps still computing on this one?
    int cur = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool next = k0 + BK < K;
        float4 a, w;
        if (next) {  // issued now, these loads land while the FMAs below run
            a = load4(x, M, K, m0 + lr, k0 + BK + lk);
            w = load4(W, N, K, n0 + lr, k0 + BK + lk);
        }
        micro_tile<32, 16>(As[cur], Ws[cur], am, bn, acc);
        if (next) {  // the other buffer was last read before the previous barrier
            store4(As[cur ^ 1], lr, lk, a);
            store4(Ws[cur ^ 1], lr, lk, w);
        }
        __syncthreads();
        cur ^= 1;
    }
    // END EXERCISE
    store_acc<32, 16>(y, M, N, m0 + am, n0 + bn, acc);
}

static dim3 grid_for(int M, int N, int bm, int bn) { return dim3((N + bn - 1) / bn, (M + bm - 1) / bm); }

EXPORT void gemm_regtile_1d(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    regtile_1d_kernel<<<grid_for(M, N, 64, 64), 512, 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void gemm_regtile_2d(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    regtile_kernel<false, false><<<grid_for(M, N, BM, BN), THREADS, 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void gemm_regtile_vec(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    regtile_kernel<true, false><<<grid_for(M, N, BM, BN), THREADS, 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void gemm_regtile_warp(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    regtile_kernel<true, true><<<grid_for(M, N, BM, BN), THREADS, 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void gemm_regtile_db(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    regtile_db_kernel<<<grid_for(M, N, BM, BN), THREADS, 0, stream>>>(x, W, y, M, N, K);
}
