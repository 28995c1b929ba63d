// How fast can mma.sync (and WMMA, which compiles to it) multiply on this GPU, with nothing else in the way?
// Lesson 04's tensor-core kernels reach ~40-46% of cuBLAS FP16 on the H100 and ncu shows their tensor pipe
// "50% busy" (lessons/04_tensor_cores/notes.md); cuBLAS uses Hopper's wgmma. This file issues tensor-core instructions from registers and
// nothing else (no memory in the loop, no shared memory, no address arithmetic), so dev/probe_mma.py can measure
// the ceiling of the instruction itself, for ILP independent accumulator chains per warp and W warps per SM:
//   kind 0  mma.sync.m16n8k16 FP16 × FP16 → FP32   (HMMA.16816.F32: what lesson 04's FP16 kernels issue)
//   kind 1  mma.sync.m16n8k16 FP16 × FP16 → FP16   (HMMA.16816.F16: half the accumulator registers)
//   kind 2  mma.sync.m16n8k32 INT8 × INT8 → INT32  (IMMA.16832: lesson 04's INT8 mma.sync kernel)
//   kind 3  wmma 16×16×16 FP16 → FP32              (two HMMA.16816 per mma_sync)
// Each warp runs `iters` rounds of ILP instructions; chain c's accumulator depends only on its own previous
// round. Thread 0 of each block records its SM and clock64() before and after the loop, so the probe also
// reports operations per SM per clock cycle, independent of the clock the GPU ran at (per SM: first start to
// last end of its blocks; blocks sharing an SM need not finish together). Accumulators are summed into out[]
// at the end, so no instruction is dead.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <cstdint>

#define EXPORT extern "C"

using namespace nvcuda;

__device__ __forceinline__ void mma_f32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16(uint32_t (&c)[2], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
                 : "+r"(c[0]), "+r"(c[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A block's thread 0 writes (SM id, clock64 before, clock64 after) to stamps[3 · blockIdx.x ...].
template <int KIND, int ILP>
__global__ void mma_peak_kernel(const uint32_t* __restrict__ src, float* __restrict__ out, long long* __restrict__ stamps,
                                int iters) {
    const int tid = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    // Operands from memory (random data from the caller), so the compiler cannot fold them.
    uint32_t a[4], b[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = src[(lane * 6 + i) % 192];
    b[0] = src[(lane * 6 + 4) % 192];
    b[1] = src[(lane * 6 + 5) % 192];
    float sum = 0.f;
    __syncthreads();
    const long long t0 = clock64();
    if constexpr (KIND == 0) {
        float c[ILP][4] = {};
        for (int it = 0; it < iters; ++it)
#pragma unroll
            for (int i = 0; i < ILP; ++i) mma_f32(c[i], a, b);
#pragma unroll
        for (int i = 0; i < ILP; ++i) sum += c[i][0] + c[i][1] + c[i][2] + c[i][3];
    } else if constexpr (KIND == 1) {
        uint32_t c[ILP][2] = {};
        for (int it = 0; it < iters; ++it)
#pragma unroll
            for (int i = 0; i < ILP; ++i) mma_f16(c[i], a, b);
#pragma unroll
        for (int i = 0; i < ILP; ++i) {
            const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&c[i][0]));
            const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&c[i][1]));
            sum += lo.x + lo.y + hi.x + hi.y;
        }
    } else if constexpr (KIND == 2) {
        int c[ILP][4] = {};
        for (int it = 0; it < iters; ++it)
#pragma unroll
            for (int i = 0; i < ILP; ++i) mma_s8(c[i], a, b);
#pragma unroll
        for (int i = 0; i < ILP; ++i) sum += float(c[i][0] + c[i][1] + c[i][2] + c[i][3]);
    } else {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[ILP];
        wmma::load_matrix_sync(fa, reinterpret_cast<const __half*>(src), 16);
        wmma::load_matrix_sync(fb, reinterpret_cast<const __half*>(src) + 256, 16);
#pragma unroll
        for (int i = 0; i < ILP; ++i) wmma::fill_fragment(c[i], 0.f);
        for (int it = 0; it < iters; ++it)
#pragma unroll
            for (int i = 0; i < ILP; ++i) wmma::mma_sync(c[i], fa, fb, c[i]);
#pragma unroll
        for (int i = 0; i < ILP; ++i)
#pragma unroll
            for (int e = 0; e < c[i].num_elements; ++e) sum += c[i].x[e];
    }
    __syncthreads();
    const long long t1 = clock64();
    if (threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        stamps[3 * blockIdx.x] = sm;
        stamps[3 * blockIdx.x + 1] = t0;
        stamps[3 * blockIdx.x + 2] = t1;
    }
    out[tid] = sum;
}

// src: at least 512 random 32-bit words. out: grid × warps × 32 floats; stamps: 3 × grid words.
// kind ∈ {0, 1, 2, 3}; ilp ∈ {1, 2, 4, 8}; warps: warps per block (1-32).
EXPORT void mma_peak(const uint32_t* src, float* out, long long* stamps, int kind, int ilp, int grid, int warps, int iters,
                     cudaStream_t stream) {
#define K(KD, I)                                                                                               \
    if (kind == KD && ilp == I) mma_peak_kernel<KD, I><<<grid, 32 * warps, 0, stream>>>(src, out, stamps, iters);
#define ALL(KD) K(KD, 1) K(KD, 2) K(KD, 4) K(KD, 8)
    ALL(0) ALL(1) ALL(2) ALL(3)
#undef ALL
#undef K
}
