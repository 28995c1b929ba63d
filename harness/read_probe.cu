// The pure-read kernel behind the "read bandwidth" ceiling (harness/roofline.py) and the ld.global rows of lesson
// 12's read probe (dev/probe_stream.py): it reads bytes and does nothing else, so its time is the floor of any
// kernel that must read the same bytes, as a decode GEMV must read its weights.
//   U 16-byte loads in flight per thread (ld.global.nc, L1 bypassed), a contiguous slice per block; each block
//   folds what it read into one word (so no load is dead) and writes it to out[blockIdx.x].
//   With pdl, launched with programmatic dependent launch (sm_90): the next launch may start its loads while this
//   one finishes (griddepcontrol), as a weight read may in a model's chain of kernels.
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"

__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
#else
__device__ __forceinline__ void pdl_launch_dependents() {}
__device__ __forceinline__ void pdl_wait() {}
#endif

template <int U, bool PDL>
__global__ void __launch_bounds__(256) read_ldg_kernel(const uint4* __restrict__ src, long n16, int* __restrict__ out) {
    if (PDL) pdl_launch_dependents();
    const long per = (n16 + gridDim.x - 1) / gridDim.x, b0 = per * blockIdx.x, b1 = min(b0 + per, n16);
    uint32_t acc = 0;
    for (long base = b0 + threadIdx.x; base < b1; base += 256L * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = base + 256L * u < b1 ? ldg_stream(src + base + 256L * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    acc = __reduce_xor_sync(0xffffffffu, acc);
    __shared__ uint32_t part[8];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    if (PDL) pdl_wait();  // the previous launch's writes of out are complete before ours
    if (threadIdx.x == 0) {
        uint32_t a = 0;
        for (int w = 0; w < 8; ++w) a ^= part[w];
        out[blockIdx.x] = (int)a;
    }
}

template <int U, bool PDL>
static void launch(int grid, cudaStream_t stream, const uint4* s, long n16, int* out) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(256);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = PDL ? 1 : 0;
    cudaLaunchKernelEx(&cfg, read_ldg_kernel<U, PDL>, s, n16, out);
}

// src: bytes as uint8 (a multiple of 16); out: at least `grid` ints. unroll ∈ {1, 2, 4, 8}; pdl ∈ {0, 1} (1 on
// sm_90 only: below it griddepcontrol does not exist).
EXPORT void read_ldg(const uint8_t* src, long long bytes, int* out, int grid, int unroll, int pdl, cudaStream_t stream) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    const long n16 = bytes / 16;
#define L(U)                                                                                                   \
    if (unroll == U) {                                                                                         \
        if (pdl) launch<U, true>(grid, stream, s, n16, out);                                                   \
        else launch<U, false>(grid, stream, s, n16, out);                                                      \
    }
    L(1) L(2) L(4) L(8)
#undef L
}
