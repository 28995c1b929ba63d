// Lesson 02, exercise 02.b: find a race with compute-sanitizer.
//
// A compact tiled GEMM (16×16 tiles) with one line missing in the exercise version. How many of its results
// come out wrong depends on the GPU, the shape and the timing — a race only bites when one warp overwrites a
// tile while another still reads it — and some runs pass, which is why a value check cannot be trusted to
// find it. `grade.check_isolated(2, "gemm_tiled_race",
// sanitize="racecheck")` runs the check under compute-sanitizer's racecheck, which reports the hazard.
#include <cuda_runtime.h>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int T = 16;

__global__ void gemm_tiled_race_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                       float* __restrict__ y, int M, int N, int K) {
    __shared__ float xs[T][T + 1], ws[T][T + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m = blockIdx.y * T + ty, n = blockIdx.x * T + tx, wrow = blockIdx.x * T + ty;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
        xs[ty][tx] = (m < M && k0 + tx < K) ? x[(size_t)m * K + k0 + tx] : 0.f;
        ws[ty][tx] = (wrow < N && k0 + tx < K) ? W[(size_t)wrow * K + k0 + tx] : 0.f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += xs[ty][k] * ws[tx][k];
        // BEGIN EXERCISE 02.b: the race racecheck reports
        // TODO (roughly 1 line): run racecheck on this kernel (lesson 02, step 5) and read its report:
        // which shared array, which lines, which kind of hazard? Then make the hazard impossible here.
        // END EXERCISE
    }
    if (m < M && n < N) y[(size_t)m * N + n] = acc;
}

EXPORT void gemm_tiled_race(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    const dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
    gemm_tiled_race_kernel<<<grid, block, 0, stream>>>(x, W, y, M, N, K);
}
