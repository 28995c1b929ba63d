// Lesson 08: NF4 (bitsandbytes' 4-bit NormalFloat): W[N, K] = NF4[idx] · absmax, one fp32 absmax per 64
// consecutive weights, two indices per byte, the first (even k) in the high nibble (harness/quant.py's
// quantize_nf4, the reference). Unlike INT4, an index is not a number: it selects one of 16 values of a
// codebook, so no exponent trick turns it into a half; every weight is a table lookup, and where the table
// lives decides the speed.
//   dequant_nf4_global  the codebook read from global memory (through L1) for every weight;
//   dequant_nf4_branchy the codebook as a decision tree on the index bits (constants in the code);
//   dequant_nf4_smem    the codebook in shared memory, 16 entries, loaded once per block;
//   dequant_nf4_shfl    the codebook in registers, entry l in lane l (and l + 16): a warp shuffle per weight;
//   dequant_nf4_pairs   a 256-entry table of value pairs in shared memory: one lookup per byte (two weights).
// All write FP16 W (the unfused route of a W-NF4 A-FP16 layer) with the same loop (dequant_loop): a thread
// takes a packed word (8 weights) at a time and writes 16 bytes.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int BLOCK = 64, THREADS = 256;

// Lookups: how each version turns a 4-bit index into its codebook value.
struct GlobalLookup {  // an L1-cached global load per weight
    const float* cb;
    __device__ float operator()(uint32_t i) const { return __ldg(cb + i); }
};
struct BranchyLookup {  // a tree of ifs on the index bits, as bitsandbytes' csrc/kernels.cu (dDequantizeNF4) had it
    const float* cb;    // (unused: the values are compiled in, harness/quant.py's codebook in float32)
    __device__ float operator()(uint32_t i) const {
        if (i & 8) {
            if (i & 4) {
                if (i & 2) return (i & 1) ? 1.0f : 0.722956717f;
                return (i & 1) ? 0.562616944f : 0.4407098f;
            }
            if (i & 2) return (i & 1) ? 0.337915182f : 0.246112287f;
            return (i & 1) ? 0.160930172f : 0.0795803294f;
        }
        if (i & 4) {
            if (i & 2) return (i & 1) ? 0.0f : -0.0910499915f;
            return (i & 1) ? -0.18477343f : -0.284441352f;
        }
        if (i & 2) return (i & 1) ? -0.394917488f : -0.525073051f;
        return (i & 1) ? -0.69619292f : -1.0f;
    }
};
struct SmemLookup {  // 16 floats in shared memory: 16 banks, so lanes never conflict (equal indices broadcast)
    const float* cb;
    __device__ float operator()(uint32_t i) const { return cb[i]; }
};
struct ShflLookup {  // lane l holds entry l % 16; the lane wanting entry i reads lane i's register
    float mine;
    __device__ float operator()(uint32_t i) const {
        // BEGIN EXERCISE 08.b: the codebook lookup as a warp shuffle
        // TODO: return the value of `mine` held by lane i (__shfl_sync, all 32 lanes take part).
        (void)i;
        return 0.f;
        // END EXERCISE
    }
};

// One packed word (4 bytes, 8 weights of one absmax block) → 8 halves, in order.
template <class Lookup>
__device__ __forceinline__ uint4 decode8(uint32_t word, float absmax, const Lookup& lookup) {
    uint4 out;
    // BEGIN EXERCISE 08.a: unpack 8 indices, look them up, scale
    // TODO: byte b of the word (bits 8b … 8b+7) holds weight 2b in its high nibble and 2b + 1 in its low one.
    // For each byte: lookup(hi) · absmax and lookup(lo) · absmax as one half2 (__floats2half2_rn(first,
    // second)), stored as 32-bit word b of out (out.x … out.w).
    (void)word; (void)absmax; (void)lookup;
    out = make_uint4(0u, 0u, 0u, 0u);
    // END EXERCISE
    return out;
}

template <class Lookup>
struct Decoder {  // decode8 with one of the lookups above
    Lookup lookup;
    __device__ uint4 operator()(uint32_t word, float absmax) const { return decode8(word, absmax, lookup); }
};

// A thread per packed word (4 bytes in, 16 bytes out), four words per trip for loads in flight, so that every
// load and store instruction of a warp covers consecutive bytes (128 in, 512 out). (A first version gave each
// thread 16 consecutive bytes and stored its 64 output bytes with four 16-byte stores: each store instruction
// then wrote every other 16 bytes, half-filled 32-byte sectors that L2 sometimes had to complete from DRAM; in
// ncu the slow versions read 9-13 MB more than the 38 MB of input.) The trip count is the same for all the
// lanes of a warp (the shuffle version needs all 32 in every shuffle): a lane past the end decodes a zero
// word and stores nothing.
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
            q[u] = w < words ? __ldcs(packed + w) : 0u;  // read once: evict first
            a[u] = w < words ? __ldg(absmax + w / 8) : 0.f;  // 8 words per absmax block
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const uint4 out = decode(q[u], a[u]);
            if (w0 + u * stride < words) __stcs(W + w0 + u * stride, out);
        }
    }
}

__global__ void __launch_bounds__(THREADS) dequant_global_kernel(const uint32_t* packed, const float* absmax,
                                                                 const float* cb, uint4* W, size_t words) {
    dequant_loop(packed, absmax, W, words, Decoder<GlobalLookup>{{cb}});
}

__global__ void __launch_bounds__(THREADS) dequant_branchy_kernel(const uint32_t* packed, const float* absmax,
                                                                  const float* cb, uint4* W, size_t words) {
    dequant_loop(packed, absmax, W, words, Decoder<BranchyLookup>{{cb}});
}

__global__ void __launch_bounds__(THREADS) dequant_smem_kernel(const uint32_t* packed, const float* absmax,
                                                               const float* cb, uint4* W, size_t words) {
    __shared__ float table[16];
    if (threadIdx.x < 16) table[threadIdx.x] = cb[threadIdx.x];
    __syncthreads();
    dequant_loop(packed, absmax, W, words, Decoder<SmemLookup>{{table}});
}

__global__ void __launch_bounds__(THREADS) dequant_shfl_kernel(const uint32_t* packed, const float* absmax,
                                                               const float* cb, uint4* W, size_t words) {
    dequant_loop(packed, absmax, W, words, Decoder<ShflLookup>{{__ldg(cb + threadIdx.x % 16)}});
}

// The table can hold pairs instead: entry b (a whole byte) is the half2 (NF4[b >> 4], NF4[b & 15]), 256 words,
// 1 KB of shared memory. Then a byte is one lookup for two weights, and one HMUL2 by the block's absmax scales
// them: per pair a byte extract, an LDS and an HMUL2, against two extracts, two lookups, two multiplies and a
// conversion above. The price: the values and absmax are rounded to half before the product (three roundings
// instead of one), and random bytes from 32 lanes meet in the same banks (ncu counts the conflicts).
struct PairDecoder {
    const uint32_t* pairs;
    __device__ uint4 operator()(uint32_t word, float absmax) const {
        const __half2 s = __float2half2_rn(absmax);
        uint4 out;
        uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const uint32_t e = pairs[(word >> (8 * b)) & 0xFFu];
            const __half2 h = __hmul2(*reinterpret_cast<const __half2*>(&e), s);
            o[b] = *reinterpret_cast<const uint32_t*>(&h);
        }
        return out;
    }
};

__global__ void __launch_bounds__(THREADS) dequant_pairs_kernel(const uint32_t* packed, const float* absmax,
                                                                const float* cb, uint4* W, size_t words) {
    __shared__ uint32_t pairs[256];
    // BEGIN EXERCISE 08.c: the pair table
    // TODO: for i < 256 (the block's threads, striding by blockDim.x), pairs[i] = the half2 (cb[i >> 4],
    // cb[i & 15]) as its 32 bits (first value in the low half: __floats2half2_rn(first, second)); a barrier.
    for (int i = threadIdx.x; i < 256; i += blockDim.x) pairs[i] = 0u;
    __syncthreads();
    // END EXERCISE
    dequant_loop(packed, absmax, W, words, PairDecoder{pairs});
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class Kernel>
static void launch(Kernel kernel, const uint8_t* packed, const float* absmax, const float* cb, __half* W, int N, int K,
                   cudaStream_t stream) {
    // The Python wrappers check K % 64 with a clear message; here a bad call does nothing.
    if (K % BLOCK || !aligned16(packed) || !aligned16(W)) return;
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t words = (size_t)N * K / 8;
    const size_t want = (words + 4 * THREADS - 1) / (4 * THREADS), cap = (size_t)sms * 8;  // 8 blocks of 256 per SM
    if (words)
        kernel<<<(int)(want < cap ? want : cap), THREADS, 0, stream>>>(reinterpret_cast<const uint32_t*>(packed), absmax,
                                                                       cb, reinterpret_cast<uint4*>(W), words);
}

EXPORT void dequant_nf4_global(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N,
                               int K, cudaStream_t stream) {
    launch(dequant_global_kernel, packed, absmax, codebook, W, N, K, stream);
}

EXPORT void dequant_nf4_branchy(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N,
                                int K, cudaStream_t stream) {
    launch(dequant_branchy_kernel, packed, absmax, codebook, W, N, K, stream);
}

EXPORT void dequant_nf4_smem(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N,
                             int K, cudaStream_t stream) {
    launch(dequant_smem_kernel, packed, absmax, codebook, W, N, K, stream);
}

EXPORT void dequant_nf4_shfl(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N,
                             int K, cudaStream_t stream) {
    launch(dequant_shfl_kernel, packed, absmax, codebook, W, N, K, stream);
}

EXPORT void dequant_nf4_pairs(const uint8_t* packed, const float* absmax, const float* codebook, __half* W, int N,
                              int K, cudaStream_t stream) {
    launch(dequant_pairs_kernel, packed, absmax, codebook, W, N, K, stream);
}
