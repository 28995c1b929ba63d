// Planted faults for the crash-isolation tests: a kernel that writes far out of bounds, and one that hangs.
#include <cuda_runtime.h>
#define EXPORT extern "C"

__global__ void oob_kernel(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i - (1 << 28)] = 1.f;  // 1 GiB before the start of the buffer: unmapped memory
}

__global__ void hang_kernel(float* y, int n) {
    // clock64() is never negative, but the compiler cannot know it: a loop it may not delete.
    for (;;) {
        if (clock64() < 0) break;
    }
    y[0] = 0.f;
}

EXPORT void oob_write(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    oob_kernel<<<(M * N + 255) / 256, 256, 0, stream>>>(y, M * N);
}

EXPORT void hang(const float* x, const float* W, float* y, int M, int N, int K, cudaStream_t stream) {
    hang_kernel<<<1, 32, 0, stream>>>(y, M * N);
}
