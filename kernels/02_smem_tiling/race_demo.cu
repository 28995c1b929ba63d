// Lesson 02, exercise 02.b: find a race with compute-sanitizer.
//
// y[M,N] = x[M,K] · W[N,K]ᵀ, split differently from tiled_gemm.cu so that it gives none of 02.a away: a block of
// T threads owns one row m of y and T of its columns. It walks along K in chunks of T. At each step every thread
// copies one element of row m of x into the shared chunk xs; then every thread reads the whole chunk against its
// own row of W (straight from global memory, in lesson 01's uncoalesced order: speed is not the point here).
//
// The exercise version has a race. How many of its results come out wrong depends on the GPU, the shape and the
// timing, and some runs pass: a value check cannot be trusted to find it. `grade.check_isolated(2, "gemm_xchunk",
// sanitize="racecheck")` runs the check under compute-sanitizer's racecheck, which reports the hazard.
#include <cuda_runtime.h>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int T = 64;

__global__ void gemm_xchunk_kernel(const float* __restrict__ x, const float* __restrict__ W,
                                   float* __restrict__ y, int M, int N, int K) {
    __shared__ float xs[T];  // xs[k] = x[m][k0 + k]
    const int t = threadIdx.x;
    const int m = blockIdx.y, n = blockIdx.x * T + t;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
        xs[t] = k0 + t < K ? x[(size_t)m * K + k0 + t] : 0.f;
        __syncthreads();  // the whole chunk is written before anyone reads it
        if (n < N) {
            const int len = min(T, K - k0);
            for (int k = 0; k < len; ++k) acc += xs[k] * W[(size_t)n * K + k0 + k];
        }
        // BEGIN EXERCISE 02.b: the race racecheck reports
        // TODO (1 line, once you have read racecheck's report): run the check under racecheck (lesson 02,
        // step 5). Which shared array does it name, at which two lines, written and read by whom? Then make
        // that hazard impossible. Threads with n >= N skip the reads: what do they do meanwhile?
        // END EXERCISE
    }
    if (n < N) y[(size_t)m * N + n] = acc;
}

EXPORT void gemm_xchunk(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    const dim3 grid((N + T - 1) / T, M);
    gemm_xchunk_kernel<<<grid, T, 0, stream>>>(x, W, y, M, N, K);
}
