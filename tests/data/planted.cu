// Planted bugs a check must catch, in small FP32 kernels for y[M, N] = x[M, K] · W[N, K]ᵀ (the tests' fake lesson):
//   oob_row      a bounds guard written `m <= M`: every element of y is right, and one row past its end is written;
//   race_refill  a shared-memory tiled kernel without the barrier before a tile is refilled (lesson 02's race):
//                racecheck names it; the values are right in most runs;
//   race_late    the barrier between filling a tile and reading it is missing, and the warps that fill the second
//                half of the tile are late (a sleep), so the race shows in the values in every run, not by luck;
//   tiled_ok     race_refill with both barriers: the control, clean under racecheck.
#include <cuda_runtime.h>
#define EXPORT extern "C"

constexpr int T = 16;

__global__ void oob_row_kernel(const float* x, const float* W, float* y, int M, int N, int K) {
    const int n = blockIdx.x * T + threadIdx.x, m = blockIdx.y * T + threadIdx.y;
    if (m <= M && n < N) {  // the planted bug: m <= M
        float acc = 0.f;
        for (int k = 0; k < K; ++k) acc += x[(size_t)min(m, M - 1) * K + k] * W[(size_t)n * K + k];
        y[(size_t)m * N + n] = acc;
    }
}

template <bool REFILL_BARRIER, bool FILL_BARRIER, bool LATE>
__global__ void tiled_kernel(const float* x, const float* W, float* y, int M, int N, int K) {
    __shared__ float xs[T][T], ws[T][T];
    const int tx = threadIdx.x, ty = threadIdx.y, n = blockIdx.x * T + tx, m = blockIdx.y * T + ty;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
        if (LATE && ty >= T / 2) __nanosleep(20000);
        xs[ty][tx] = m < M && k0 + tx < K ? x[(size_t)m * K + k0 + tx] : 0.f;
        ws[ty][tx] = blockIdx.x * T + ty < N && k0 + tx < K ? W[(size_t)(blockIdx.x * T + ty) * K + k0 + tx] : 0.f;
        if (FILL_BARRIER) __syncthreads();
        for (int k = 0; k < T; ++k) acc += xs[ty][k] * ws[tx][k];
        if (REFILL_BARRIER) __syncthreads();
    }
    if (m < M && n < N) y[(size_t)m * N + n] = acc;
}

static dim3 grid(int M, int N) { return dim3((N + T - 1) / T, (M + T - 1) / T); }

EXPORT void oob_row(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    // one more row of blocks than y needs, so row M has threads even when M is a multiple of 16
    oob_row_kernel<<<dim3((N + T - 1) / T, M / T + 1), dim3(T, T), 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void race_refill(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    tiled_kernel<false, true, false><<<grid(M, N), dim3(T, T), 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void race_late(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    tiled_kernel<true, false, true><<<grid(M, N), dim3(T, T), 0, stream>>>(x, W, y, M, N, K);
}

EXPORT void tiled_ok(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    tiled_kernel<true, true, false><<<grid(M, N), dim3(T, T), 0, stream>>>(x, W, y, M, N, K);
}
