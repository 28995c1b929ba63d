// Lesson 08: NF4 weights (bitsandbytes' 4-bit NormalFloat), decoded through a codebook.
// The format (harness/quant.py, quantize_nf4): W[N, K] = NF4[idx] · absmax. Two 4-bit indices per byte, the first
// (even k) in the high nibble; one fp32 absmax per 64 consecutive weights of a row. An index is not a number: it
// picks one of 16 values, so no bit trick turns it into a half. Every weight is a table lookup, and where the table
// lives sets what a lookup costs.
//
// Dequantize kernels (NF4 -> FP16 W, the unfused route), one loop, five places for the table:
//   dequant_nf4_global   the 16 values read from global memory (L1 keeps them close)
//   dequant_nf4_branchy  no table: a tree of ifs on the index bits
//   dequant_nf4_smem     the 16 values in shared memory
//   dequant_nf4_shfl     the 16 values in registers, value l in lane l: a warp shuffle per weight
//   dequant_nf4_pairs    256 pairs in shared memory: one lookup per byte gives two weights
//   dequant_nf4_banked   the pair table once per bank, so 32 lanes never collide (exercise 08.a)
// The fused GEMV:
//   gemv_nf4_warp        y = x · Ŵᵀ, a warp per output, weights decoded in registers (exercise 08.b)
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int BLOCK = 64, THREADS = 256, WARPS = THREADS / 32;

__device__ __forceinline__ uint32_t as_word(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }
__device__ __forceinline__ __half2 as_half2(uint32_t w) { return *reinterpret_cast<const __half2*>(&w); }

// ---- Lookups by index: a 4-bit index in, its codebook value out ----
struct GlobalLookup {  // an L1-cached load per weight
    const float* cb;
    __device__ float operator()(uint32_t i) const { return __ldg(cb + i); }
};
struct TreeLookup {  // bitsandbytes' old way: the values compiled into a tree of ifs (harness.quant.NF4's table)
    __device__ float operator()(uint32_t i) const {
        if (i & 8) {
            if (i & 4) {
                if (i & 2) return (i & 1) ? 1.0f : 0.722956836f;
                return (i & 1) ? 0.562617004f : 0.440709829f;
            }
            if (i & 2) return (i & 1) ? 0.337915242f : 0.246112302f;
            return (i & 1) ? 0.160930201f : 0.0795802996f;
        }
        if (i & 4) {
            if (i & 2) return (i & 1) ? 0.0f : -0.0910500363f;
            return (i & 1) ? -0.18477343f : -0.284441382f;
        }
        if (i & 2) return (i & 1) ? -0.394917488f : -0.525073051f;
        return (i & 1) ? -0.696192801f : -1.0f;
    }
};
struct SmemLookup {  // 16 floats in 16 banks: lanes never conflict (lanes asking for the same value share one read)
    const float* cb;
    __device__ float operator()(uint32_t i) const { return cb[i]; }
};
struct ShflLookup {  // lane l holds value l % 16; every lane of the warp takes part in every shuffle
    float mine;
    __device__ float operator()(uint32_t i) const { return __shfl_sync(0xffffffffu, mine, (int)i); }
};

// One packed word (8 weights of one absmax block) -> 8 halves in order, two lookups per byte.
template <class Lookup>
struct ByIndex {
    Lookup lookup;
    __device__ uint4 operator()(uint32_t word, float absmax) const {
        uint4 out;
        uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
        for (int b = 0; b < 4; ++b) {  // byte b: weight 2b in its high nibble, 2b + 1 in its low one
            const uint32_t byte = (word >> (8 * b)) & 0xFFu;
            o[b] = as_word(__floats2half2_rn(lookup(byte >> 4) * absmax, lookup(byte & 0xFu) * absmax));
        }
        return out;
    }
};

// ---- Lookups by byte: the table holds pairs. Entry b is the half2 (NF4[b >> 4], NF4[b & 15]), the first weight
// in the low half, as the GPU stores consecutive halves: one lookup and one HMUL2 give two weights. ----
__device__ __forceinline__ uint32_t pair_word(const float* cb, int b) {  // entry b, as the 32 bits a table holds
    return as_word(__floats2half2_rn(cb[b >> 4], cb[b & 15]));
}
__device__ __forceinline__ void fill_pairs(uint32_t* pairs, const float* cb) {  // one copy: 256 words, 1 KB
    if (threadIdx.x < 256) pairs[threadIdx.x] = pair_word(cb, threadIdx.x);  // blocks of THREADS = 256: an entry each
    __syncthreads();
}

// The same table once per bank (256 × 32 words, 32 KB): 32 lanes looking up random bytes in the 1 KB table meet
// in the same banks and wait for each other; with a copy per bank, lane l reads only from bank l.
// BEGIN EXERCISE 08.a: the pair table without bank conflicts
//> __device__ __forceinline__ void fill_banked(uint32_t* table, const float* cb) {
//>     // TODO: with the block's threads (striding by blockDim.x), fill all 256 × 32 words of `table` so that every
//>     // lane l finds every entry b (pair_word(cb, b)) in bank l, in the layout of the lesson's step 3 picture;
//>     // then a barrier. Roughly 4 lines.
//>     (void)table; (void)cb;
//>     __syncthreads();
//> }
//> __device__ __forceinline__ uint32_t banked_lookup(const uint32_t* table, uint32_t byte) {
//>     // TODO: entry `byte` from the copy that lives in this thread's lane's bank. Roughly 1 line.
//>     (void)table; (void)byte;
//>     return 0u;
//> }
__device__ __forceinline__ void fill_banked(uint32_t* table, const float* cb) {
    for (int i = threadIdx.x; i < 256 * 32; i += blockDim.x) {  // word i: entry i / 32, lane i % 32's copy
        table[i] = pair_word(cb, i / 32);
    }
    __syncthreads();
}
__device__ __forceinline__ uint32_t banked_lookup(const uint32_t* table, uint32_t byte) {
    return table[byte * 32 + threadIdx.x % 32];
}
// END EXERCISE

struct OneTable {
    const uint32_t* pairs;
    __device__ uint32_t operator()(uint32_t byte) const { return pairs[byte]; }
};
struct BankedTable {
    const uint32_t* table;
    __device__ uint32_t operator()(uint32_t byte) const { return banked_lookup(table, byte); }
};

template <class PairLookup>
struct ByByte {  // one packed word -> 8 halves: a lookup and an HMUL2 per byte
    PairLookup lookup;
    __device__ uint4 operator()(uint32_t word, float absmax) const {
        const __half2 s = __float2half2_rn(absmax);
        uint4 out;
        uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
        for (int b = 0; b < 4; ++b) o[b] = as_word(__hmul2(as_half2(lookup((word >> (8 * b)) & 0xFFu)), s));
        return out;
    }
};

// The loop every dequantize kernel shares: a thread per packed word (4 bytes in, 16 bytes out), four words per
// trip so that four loads are in flight, and every load or store instruction of a warp covers consecutive bytes
// (128 in, 512 out). All lanes of a warp make the same number of trips (the shuffle needs all 32): a lane past
// the end decodes a zero word and stores nothing.
template <class Decode>
__device__ __forceinline__ void dequant_loop(const uint32_t* __restrict__ packed, const float* __restrict__ absmax,
                                             uint4* __restrict__ W, size_t words, const Decode& decode) {
    constexpr int U = 4;
    const size_t stride = (size_t)gridDim.x * blockDim.x, lane = threadIdx.x % 32;
    for (size_t w0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x; w0 - lane < words; w0 += U * stride) {
        uint32_t q[U];
        float a[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const size_t w = w0 + u * stride;
            q[u] = w < words ? __ldcs(packed + w) : 0u;      // read once: evict first
            a[u] = w < words ? __ldg(absmax + w / 8) : 0.f;  // 8 words per absmax block
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const uint4 out = decode(q[u], a[u]);
            if (w0 + u * stride < words) __stcs(W + w0 + u * stride, out);
        }
    }
}

#define DEQUANT_KERNEL(name) \
    __global__ void __launch_bounds__(THREADS) name(const uint32_t* packed, const float* absmax, const float* cb, uint4* W, size_t words)
DEQUANT_KERNEL(dequant_global_kernel) { dequant_loop(packed, absmax, W, words, ByIndex<GlobalLookup>{{cb}}); }
DEQUANT_KERNEL(dequant_branchy_kernel) { dequant_loop(packed, absmax, W, words, ByIndex<TreeLookup>{{}}); }
DEQUANT_KERNEL(dequant_shfl_kernel) {
    dequant_loop(packed, absmax, W, words, ByIndex<ShflLookup>{{__ldg(cb + threadIdx.x % 16)}});
}
DEQUANT_KERNEL(dequant_smem_kernel) {
    __shared__ float table[16];
    if (threadIdx.x < 16) table[threadIdx.x] = cb[threadIdx.x];
    __syncthreads();
    dequant_loop(packed, absmax, W, words, ByIndex<SmemLookup>{{table}});
}
DEQUANT_KERNEL(dequant_pairs_kernel) {
    __shared__ uint32_t pairs[256];
    fill_pairs(pairs, cb);
    dequant_loop(packed, absmax, W, words, ByByte<OneTable>{{pairs}});
}
DEQUANT_KERNEL(dequant_banked_kernel) {
    __shared__ uint32_t table[256 * 32];
    fill_banked(table, cb);
    dequant_loop(packed, absmax, W, words, ByByte<BankedTable>{{table}});
}

// ---- The fused GEMV: y[m, n] = Σ_k x[m, k] · NF4[idx[n, k]] · absmax[n, k / 64], FP32 sums ----
// A warp per output row n: lane l takes the row's packed words l, l + 32, ... (each warp load covers 128
// consecutive bytes), decodes each through the banked table and multiplies it by x at the same 8 k; the scale
// waits until a word's 8 products are summed (one multiply per 8 weights, as lesson 07 does with its scales).
// BEGIN EXERCISE 08.b: the fused GEMV's lookup
//> __device__ __forceinline__ float row_dot(const uint32_t* row, const float* scale, const uint4* x8, int words,
//>                                          const uint32_t* table) {
//>     // TODO: lane l's partial sum of one output. Word w of the row holds the 8 weights at k = 8w ... 8w + 7
//>     // (byte b: weights 2b and 2b + 1), x8[w] the 8 halves of x there (two per 32-bit word, in order), and
//>     // scale[w / 8] the absmax of its block; banked_lookup decodes a byte from `table`. Which words are lane
//>     // l's, and how few multiplies by the scale does it need? Roughly 15 lines.
//>     (void)row; (void)scale; (void)x8; (void)words; (void)table;
//>     return 0.f;
//> }
__device__ __forceinline__ float row_dot(const uint32_t* row, const float* scale, const uint4* x8, int words,
                                         const uint32_t* table) {
    float acc = 0.f;
#pragma unroll 4
    for (int w = threadIdx.x % 32; w < words; w += 32) {
        const uint32_t word = __ldg(row + w);
        const uint4 xv = __ldg(x8 + w);
        const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
        float sum = 0.f;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const float2 wt = __half22float2(as_half2(banked_lookup(table, (word >> (8 * b)) & 0xFFu)));
            const float2 xt = __half22float2(as_half2(xs[b]));
            sum += wt.x * xt.x + wt.y * xt.y;
        }
        acc += sum * __ldg(scale + w / 8);
    }
    return acc;
}
// END EXERCISE

__global__ void __launch_bounds__(THREADS) gemv_warp_kernel(const __half* x, const uint32_t* packed, const float* absmax,
                                                            const float* cb, __half* y, int M, int N, int K) {
    __shared__ uint32_t table[256 * 32];
    fill_banked(table, cb);  // once per block, for every row it computes
    const int words = K / 8;
    for (int m = blockIdx.y; m < M; m += gridDim.y) {
        const uint4* x8 = reinterpret_cast<const uint4*>(x + (size_t)m * K);
        for (int n = blockIdx.x * WARPS + threadIdx.x / 32; n < N; n += gridDim.x * WARPS) {  // the same n for a warp
            float acc = row_dot(packed + (size_t)n * words, absmax + (size_t)n * (K / BLOCK), x8, words, table);
            for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (threadIdx.x % 32 == 0) y[(size_t)m * N + n] = __float2half_rn(acc);
        }
    }
}

// ---- Launchers (the Python side checks shapes and types first, with a clear message) ----
static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
static int sm_count() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return sms;
}

template <class Kernel>
static void launch(Kernel kernel, const uint8_t* packed, const float* absmax, const float* cb, __half* W, int N, int K,
                   cudaStream_t stream) {
    if (K % BLOCK || !aligned16(packed) || !aligned16(W)) return;
    static const int sms = sm_count();
    const size_t words = (size_t)N * K / 8;
    const size_t want = (words + 4 * THREADS - 1) / (4 * THREADS), cap = (size_t)sms * 8;  // ≤ 8 blocks/SM; the banked table fits fewer
    if (words)
        kernel<<<(int)(want < cap ? want : cap), THREADS, 0, stream>>>(reinterpret_cast<const uint32_t*>(packed), absmax,
                                                                       cb, reinterpret_cast<uint4*>(W), words);
}

EXPORT void dequant_nf4_global(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N, int K,
                               cudaStream_t stream) { launch(dequant_global_kernel, packed, absmax, codebook, W, N, K, stream); }
EXPORT void dequant_nf4_branchy(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N, int K,
                                cudaStream_t stream) { launch(dequant_branchy_kernel, packed, absmax, codebook, W, N, K, stream); }
EXPORT void dequant_nf4_smem(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N, int K,
                             cudaStream_t stream) { launch(dequant_smem_kernel, packed, absmax, codebook, W, N, K, stream); }
EXPORT void dequant_nf4_shfl(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N, int K,
                             cudaStream_t stream) { launch(dequant_shfl_kernel, packed, absmax, codebook, W, N, K, stream); }
EXPORT void dequant_nf4_pairs(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N, int K,
                              cudaStream_t stream) { launch(dequant_pairs_kernel, packed, absmax, codebook, W, N, K, stream); }
EXPORT void dequant_nf4_banked(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N, int K,
                               cudaStream_t stream) { launch(dequant_banked_kernel, packed, absmax, codebook, W, N, K, stream); }

// K a multiple of 128 (the problem's rule; the kernel itself needs 8); x 16-byte aligned, packed 4-byte aligned.
EXPORT void gemv_nf4_warp(const __half* x, const uint8_t* packed, const float* absmax, const float* codebook, __half* y,
                          int M, int N, int K, cudaStream_t stream) {
    if (K % 128 || !aligned16(x) || reinterpret_cast<uintptr_t>(packed) % 4 || !M || !N) return;
    static const int sms = sm_count();
    static int fit = 0;  // blocks of this kernel an SM holds at once (its 32 KB table decides)
    if (!fit) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, gemv_warp_kernel, THREADS, 0);
    const int rows = (N + WARPS - 1) / WARPS, most = (fit > 0 ? fit : 1) * sms;  // one generation of blocks
    const dim3 grid(rows < most ? rows : most, M < 65535 ? M : 65535);
    gemv_warp_kernel<<<grid, THREADS, 0, stream>>>(x, reinterpret_cast<const uint32_t*>(packed), absmax, codebook, y, M,
                                                   N, K);
}
