// Lesson 00: a first kernel, out[i] = a * x[i] + b[i].
//
// It does 2 FLOPs per element and moves 12 bytes (read x and b, write out): an arithmetic
// intensity of 1/6 FLOP per byte, far left on the roofline. Its speed is set by memory
// bandwidth alone, so its GB/s, compared with a plain device-to-device copy, tells you how close a
// simple kernel gets to the memory ceiling.
#include <cuda_runtime.h>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

__global__ void scale_add_kernel(const float* __restrict__ x, const float* __restrict__ b,
                                 float* __restrict__ out, float a, int n) {
    // BEGIN EXERCISE 00.a: one thread per element
    // TODO: give each thread its own element i, counted across the whole grid from the block
    // and thread indices (the picture in step 2 of the notebook), and store out[i] = a * x[i] + b[i]
    // only where i is inside the array: the last block usually hangs past n. Roughly 2 lines.
    // Until you do, nothing is written and the check reports every element as "never written".
    // END EXERCISE
}

EXPORT void scale_add(const float* x, const float* b, float* out, float a, int n, cudaStream_t stream) {
    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;  // enough blocks to cover n, rounding up
    scale_add_kernel<<<blocks, threads, 0, stream>>>(x, b, out, a, n);
}
