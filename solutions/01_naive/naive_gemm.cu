// Lesson 01: naive GEMM, y[M,N] = x[M,K] · W[N,K]ᵀ in FP32 (W stored as nn.Linear stores it).
//
// gemm_naive: one thread per output element. The 32 threads of a warp take 32 consecutive n, so at
// each step k they read W[n][k] for 32 rows of W that are K floats apart: 32 separate 32-byte
// sectors for 128 useful bytes (uncoalesced), and nothing is reused except through the caches.
//
// gemm_coalesced: one warp per output element. Its 32 lanes walk along K together, so each load
// instruction reads 32 consecutive floats of x and of W (4 full sectors), and a warp shuffle adds
// the 32 partial sums. Coalescing fixed; reuse is still left to the caches (lesson 02 fixes that).
#include <cuda_runtime.h>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

__global__ void gemm_naive_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                  float* __restrict__ y, int M, int N, int K) {
    // BEGIN EXERCISE 01.a: one thread per output element
    //> // TODO: make this thread compute one output y[m][n]. Find its row m and column n from the block
    //> // and thread indices (blocks of 32 × 8 threads, x along n, y along m: the thread map in step 2 of
    //> // the notebook), skip threads outside M × N, add up row m of x times row n of W over K in a float,
    //> // and store the sum. All three matrices are row-major. Index with size_t: m * K overflows int for
    //> // large layers. Roughly 9 lines.
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m < M && n < N) {
        const float* xr = x + (size_t)m * K;
        const float* wr = W + (size_t)n * K;
        float acc = 0.f;
        for (int k = 0; k < K; ++k) acc += xr[k] * wr[k];
        y[(size_t)m * N + n] = acc;
    }
    // END EXERCISE
}

__global__ void gemm_coalesced_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                      float* __restrict__ y, int M, int N, int K) {
    // BEGIN EXERCISE 01.b: coalesced — the lanes of a warp walk along K together
    //> // TODO: one warp per output. Number the warps across the whole grid and give warp w its output
    //> // (m, n), row by row (the thread map in step 2 of the notebook); warps past M × N return, whole.
    //> // Let the 32 lanes walk along K together, so that each load instruction reads 32 consecutive
    //> // floats of x and of W; then add the 32 partial sums with __shfl_xor_sync and let one lane store
    //> // the result. Roughly 10 lines.
    const int lane = threadIdx.x % 32;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (warp >= (long long)M * N) return;  // whole warps leave together, so the shuffle below is safe
    const int m = (int)(warp / N), n = (int)(warp % N);
    const float* xr = x + (size_t)m * K;
    const float* wr = W + (size_t)n * K;
    float acc = 0.f;
    for (int k = lane; k < K; k += 32) acc += xr[k] * wr[k];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) y[(size_t)m * N + n] = acc;
    // END EXERCISE
}

EXPORT void gemm_naive(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    const dim3 block(32, 8);  // 32 consecutive n per warp: the access pattern the lesson measures
    const dim3 grid((N + block.x - 1) / block.x, (M + block.y - 1) / block.y);
    gemm_naive_kernel<<<grid, block, 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void gemm_coalesced(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    const int threads = 256;  // 8 warps, 8 outputs per block
    const long long warps = (long long)M * N;
    const long long blocks = (warps * 32 + threads - 1) / threads;
    gemm_coalesced_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, W, y, M, N, K);
}
