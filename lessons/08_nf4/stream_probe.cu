// How fast can one kernel read a weight matrix of decode size (8-134 MB) on this GPU? The decode kernels of
// lessons 06-10 reach 58-80% of the copy bandwidth at M = 1, and cuBLAS reads 30-35 MB of FP16 weights at only
// 65-69% of it (lessons/08_nf4/notes.md). This file reads bytes and nothing else, so dev/probe_stream.py can
// separate the cost of the read itself from the cost of the arithmetic (its ld.global reads are
// harness/read_probe.cu's, the kernel of the read-bandwidth ceiling):
//   read_bulk   one thread per block streams its slice through a ring of S shared-memory stages with the
//               Hopper bulk copy engine (cp.async.bulk, completion counted in bytes on an mbarrier); the
//               block's threads read each stage from shared memory;
//   *_pdl       the same, launched with programmatic dependent launch: the next launch may start its loads
//               while this one finishes (griddepcontrol), as a weight read may in a model's chain of kernels.
// Each block folds what it read into one word (so no load is dead) and writes it to out[blockIdx.x].
// And one kernel that writes, for lesson 08's dequantize kernels (tools/bench_nf4.py):
//   expand      the bytes a 4-bit dequantize kernel moves, with no decoding: per packed word (8 weights) the word
//               and its block's FP32 scale in, 16 bytes out, in lesson 08's loop (a thread per word, four words
//               per trip, each warp instruction on consecutive bytes). What the lesson's kernels take beyond it
//               is their decoding; what it takes is the floor for any kernel with that loop.
//   expand_bulk the same bytes moved by the bulk copy engine both ways: chunks of 1024 words and their scales
//               into a ring of S stages, each chunk's 16 KB out from a shared-memory buffer (cp.async.bulk
//               global ← shared, evict-first); the block's threads only rearrange. Is the floor the loop's or DRAM's?
//   fill        the writes alone, in lesson 08's loop (dev/probe_floor.py times all three).
// REQUIRES: sm_90
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"

// Built for sm_80 too where there is no GPU (CI); there the Hopper instructions become traps.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define HOPPER(...) __trap()
#else
#define HOPPER(...) __VA_ARGS__
#endif

__device__ __forceinline__ void pdl_launch_dependents() { HOPPER(asm volatile("griddepcontrol.launch_dependents;\n" ::)); }
__device__ __forceinline__ void pdl_wait() { HOPPER(asm volatile("griddepcontrol.wait;\n" ::: "memory")); }

// --- the bulk copy engine: one thread issues, an mbarrier per stage counts the bytes that landed ---------------
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    HOPPER(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    HOPPER(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    HOPPER(asm volatile(
        "{\n .reg .pred p;\n WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory"));
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    HOPPER(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory"));
}

template <int S, bool PDL>
__global__ void __launch_bounds__(256) read_bulk_kernel(const uint8_t* __restrict__ src, long bytes, int chunk,
                                                        int* __restrict__ out) {
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) uint64_t full[S];
    if (PDL) pdl_launch_dependents();
    // The block's slice, in whole chunks (the last block takes the rest; bytes is a multiple of 16).
    const long nchunks = (bytes + chunk - 1) / chunk, per = (nchunks + gridDim.x - 1) / gridDim.x;
    const long c0 = per * blockIdx.x, c1 = min(c0 + per, nchunks);
    const uint32_t rbase = (uint32_t)__cvta_generic_to_shared(ring), fbase = (uint32_t)__cvta_generic_to_shared(full);
    auto issue = [&](long c) {  // thread 0: chunk c into its stage
        const int s = (int)((c - c0) % S);
        const uint32_t n = (uint32_t)min((long)chunk, bytes - c * chunk);
        mbar_expect_tx(fbase + 8 * s, n);
        bulk_copy(rbase + s * chunk, src + c * chunk, n, fbase + 8 * s);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) mbar_init(fbase + 8 * s, 1);
        HOPPER(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
        for (long c = c0; c < c1 && c < c0 + S; ++c) issue(c);
    }
    __syncthreads();
    uint32_t acc = 0;
    for (long c = c0; c < c1; ++c) {
        const int s = (int)((c - c0) % S);
        mbar_wait(fbase + 8 * s, (uint32_t)(((c - c0) / S) & 1));
        const int n16 = (int)(min((long)chunk, bytes - c * chunk) / 16);
        const uint4* st = reinterpret_cast<const uint4*>(ring + s * chunk);
        for (int i = threadIdx.x; i < n16; i += 256) {
            const uint4 v = st[i];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();  // everyone is done with stage s
        if (threadIdx.x == 0 && c + S < c1) issue(c + S);
    }
    acc = __reduce_xor_sync(0xffffffffu, acc);
    __shared__ uint32_t part[8];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    if (PDL) pdl_wait();
    if (threadIdx.x == 0) {
        uint32_t a = 0;
        for (int w = 0; w < 8; ++w) a ^= part[w];
        out[blockIdx.x] = (int)a;
    }
}

__global__ void __launch_bounds__(256) expand_kernel(const uint32_t* __restrict__ packed, const float* __restrict__ scale,
                                                    uint4* __restrict__ out, long words) {
    const long stride = (long)gridDim.x * blockDim.x, lane = threadIdx.x % 32;
    for (long w0 = blockIdx.x * (long)blockDim.x + threadIdx.x; w0 - lane < words; w0 += 4 * stride) {
        uint32_t q[4];
        float a[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const long w = w0 + u * stride;
            q[u] = w < words ? __ldcs(packed + w) : 0u;
            a[u] = w < words ? __ldg(scale + w / 8) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)  // every byte read reaches the output, so no load is dead
            if (w0 + u * stride < words) __stcs(out + w0 + u * stride, make_uint4(q[u], __float_as_uint(a[u]), q[u], q[u]));
    }
}

__global__ void __launch_bounds__(256) fill_kernel(uint4* __restrict__ out, long words) {
    const long stride = (long)gridDim.x * blockDim.x;
    for (long w0 = blockIdx.x * (long)blockDim.x + threadIdx.x; w0 < words; w0 += 4 * stride)
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (w0 + u * stride < words) __stcs(out + w0 + u * stride, make_uint4((uint32_t)(w0 + u * stride), 1u, 2u, 3u));
}

constexpr int CHUNK_WORDS = 1024, CHUNK_IN = CHUNK_WORDS * 4 + CHUNK_WORDS / 8 * 4;  // 4 KB words + 512 B scales

__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
    HOPPER(asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;\n"
                        ::"l"(dst), "r"(src), "r"(bytes), "l"(0x12F0000000000000ull) : "memory"));  // evict first
}

// Block b moves chunks b, b + grid, …: thread 0 keeps S chunks' loads in flight and, after each chunk is rearranged
// into one of two output buffers, stores it with one bulk copy; a buffer is written again only once the bulk
// engine has read it (wait_group.read 1).
template <int S>
__global__ void __launch_bounds__(256) expand_bulk_kernel(const uint32_t* __restrict__ packed,
                                                         const float* __restrict__ scale, uint4* __restrict__ out,
                                                         long chunks) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t full[S];
    const uint32_t rbase = (uint32_t)__cvta_generic_to_shared(smem), fbase = (uint32_t)__cvta_generic_to_shared(full);
    uint4* obuf = reinterpret_cast<uint4*>(smem + S * CHUNK_IN);  // two buffers of 16 KB after the ring
    auto issue = [&](long c, int s) {
        mbar_expect_tx(fbase + 8 * s, CHUNK_IN);
        bulk_copy(rbase + s * CHUNK_IN, packed + c * CHUNK_WORDS, CHUNK_WORDS * 4, fbase + 8 * s);
        bulk_copy(rbase + s * CHUNK_IN + CHUNK_WORDS * 4, scale + c * (CHUNK_WORDS / 8), CHUNK_WORDS / 2, fbase + 8 * s);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) mbar_init(fbase + 8 * s, 1);
        HOPPER(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
        for (int s = 0; s < S && blockIdx.x + (long)s * gridDim.x < chunks; ++s) issue(blockIdx.x + (long)s * gridDim.x, s);
    }
    __syncthreads();
    int k = 0;
    for (long c = blockIdx.x; c < chunks; c += gridDim.x, ++k) {
        const int s = k % S, b = k & 1;
        mbar_wait(fbase + 8 * s, (uint32_t)((k / S) & 1));
        const uint32_t* q = reinterpret_cast<const uint32_t*>(smem + s * CHUNK_IN);
        const float* a = reinterpret_cast<const float*>(smem + s * CHUNK_IN + CHUNK_WORDS * 4);
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int w = threadIdx.x + 256 * u;
            v[u] = make_uint4(q[w], __float_as_uint(a[w / 8]), q[w], q[w]);
        }
        if (threadIdx.x == 0) HOPPER(asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory"));
        __syncthreads();  // buffer b is free (its store two chunks ago has been read)
#pragma unroll
        for (int u = 0; u < 4; ++u) obuf[b * CHUNK_WORDS + threadIdx.x + 256 * u] = v[u];
        HOPPER(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));  // visible to the bulk engine
        __syncthreads();  // stage s read and buffer b written by every thread
        if (threadIdx.x == 0) {
            bulk_store(out + c * CHUNK_WORDS, rbase + S * CHUNK_IN + b * CHUNK_WORDS * 16, CHUNK_WORDS * 16);
            HOPPER(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"));
            if (c + (long)S * gridDim.x < chunks) issue(c + (long)S * gridDim.x, s);
        }
    }
    if (threadIdx.x == 0) HOPPER(asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"));
}

template <typename Kern, typename... Args>
static void launch(Kern kernel, int grid, int smem, bool pdl, cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, args...);
}

// stages ∈ {2, 4, 8}; chunk: bytes per stage (a multiple of 16; stages × chunk ≤ 227 KB).
EXPORT void read_bulk(const uint8_t* src, long long bytes, int* out, int grid, int stages, int chunk, int pdl,
                      cudaStream_t stream) {
    const int smem = stages * chunk;
#define B(S)                                                                                                   \
    if (stages == S) {                                                                                         \
        auto k = pdl ? read_bulk_kernel<S, true> : read_bulk_kernel<S, false>;                                 \
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);                            \
        launch(k, grid, smem, pdl != 0, stream, src, (long)bytes, chunk, out);                                 \
    }
    B(2) B(4) B(8)
#undef B
}

// packed: `words` 4-byte words (16-byte aligned); scale: words / 8 floats; out: 16 bytes per word. grid: blocks of 256.
EXPORT void expand(const uint8_t* packed, const float* scale, uint8_t* out, long long words, int grid, cudaStream_t stream) {
    if (words > 0) launch(expand_kernel, grid, 0, false, stream, reinterpret_cast<const uint32_t*>(packed), scale,
                          reinterpret_cast<uint4*>(out), (long)words);
}

// The same with the bulk copy engine; words a multiple of 1024 (dev/probe_floor.py checks), stages ∈ {4, 8}.
EXPORT void expand_bulk(const uint8_t* packed, const float* scale, uint8_t* out, long long words, int grid, int stages,
                        cudaStream_t stream) {
    if (words <= 0 || words % CHUNK_WORDS) return;
    const auto q = reinterpret_cast<const uint32_t*>(packed);
    const auto o = reinterpret_cast<uint4*>(out);
#define E(S)                                                                                                   \
    if (stages == S) {                                                                                         \
        const int smem = S * CHUNK_IN + 2 * CHUNK_WORDS * 16;                                                  \
        cudaFuncSetAttribute(expand_bulk_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);        \
        launch(expand_bulk_kernel<S>, grid, smem, false, stream, q, scale, o, (long)(words / CHUNK_WORDS));    \
    }
    E(4) E(8)
#undef E
}

// out: 16 bytes per word, written with lesson 08's loop and nothing read.
EXPORT void fill(uint8_t* out, long long words, int grid, cudaStream_t stream) {
    if (words > 0) launch(fill_kernel, grid, 0, false, stream, reinterpret_cast<uint4*>(out), (long)words);
}
