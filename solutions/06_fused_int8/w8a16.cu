// Lesson 06 teaching kernels: INT8 weights with FP16 activations (W8A16), and W8A8.
//
//   y[M, N] = x[M, K] · Ŵ[N, K]ᵀ,   Ŵ = q · scale,   q int8 [N, K],   scale fp16 [N, K/128]
//
// (one scale per 128 weights along a row; harness/quant.py is the reference). At decode M is 1 to 16: every
// weight is read once and used M times, so the floor is the time to read the bytes. INT8 halves the bytes of FP16
// weights, but only if no FP16 copy of W is ever written. The kernels here:
//
//   dequant_w8_basic   q, scale → an FP16 W in memory: the unfused routes (b) and (c) run it first;
//   gemv_f16_basic     y = x · Wᵀ on that FP16 W: route (c)'s second kernel;
//   gemv_w8a16_basic   route (d), fused: the same GEMV reading q and scale, dequantizing in registers;
//   linear_w8a8_basic  W8A8: x quantized per token to INT8, then the same GEMV on INT8 × INT8.
//
// The three GEMVs are one template (gemv_kernel) over a format struct that says how a lane's 16 weights are
// loaded, how they meet x, and what the store does with the sum.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int GROUP = 128;  // weights per scale
constexpr int WARPS = 4;    // per block; each warp computes one output column n
constexpr int TOKENS = 8;   // tokens (rows of x) a warp computes; grid.y covers the rest of M

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// 16 int8 weights (one 16-byte load, v.x holds weights 0-3 with weight 0 in the low byte) → 8 half2 words,
// w[i] = (weight 2i, weight 2i + 1) · s. The trick: the half whose bits are 0x64 followed by a byte m is exactly
// 1024 + m. Flip a weight's sign bit and the byte reads as the unsigned b + 128, so the half is 1024 + 128 + b.
// __byte_perm(a, b, sel) builds a word from the 8 bytes of a (0-3) and b (4-7): sel's hex digits, lowest
// first, pick each result byte. Then one __hsub2 and one __hmul2 finish two weights at a time.
__device__ __forceinline__ void dequant16(const int4 v, __half2 s, uint32_t (&w)[8]) {
    // BEGIN EXERCISE 06.a: INT8 → FP16 in registers, with the group's scale
    //> // TODO: fill w[0..7] as described above, with no int → float conversion instruction: per 32-bit word of
    //> // v, flip the four sign bits, place two bytes under 0x64 twice (__byte_perm), subtract, scale.
    //> // Roughly 10 lines. Hints: the notebook, step 2.
    //> for (int i = 0; i < 8; ++i) w[i] = 0u;
    //> (void)v; (void)s;
    const uint32_t words[4] = {uint32_t(v.x), uint32_t(v.y), uint32_t(v.z), uint32_t(v.w)};
    const __half2 offset = __float2half2_rn(1152.0f);  // 1024 + 128
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t u = words[j] ^ 0x80808080u;  // b + 128 in each byte
        // selector 0x4140: bytes (u.0, 0x64, u.1, 0x64) → the halves 0x64·u.0 and 0x64·u.1
        const uint32_t lo = __byte_perm(u, 0x64646464u, 0x4140u), hi = __byte_perm(u, 0x64646464u, 0x4342u);
        w[2 * j] = h2_bits(__hmul2(__hsub2(bits_h2(lo), offset), s));
        w[2 * j + 1] = h2_bits(__hmul2(__hsub2(bits_h2(hi), offset), s));
    }
    // END EXERCISE
}

// Weights are read once: skip L1 (the .nc path with no_allocate), keep L1 for x, which every warp re-reads.
__device__ __forceinline__ int4 load_stream(const void* p) {
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// acc += x[0..15] · w (8 half2 words), in FP32.
__device__ __forceinline__ void dot16_f16(const __half* x, const uint32_t (&w)[8], float& acc) {
    const int4 a = __ldg(reinterpret_cast<const int4*>(x)), b = __ldg(reinterpret_cast<const int4*>(x) + 1);
    const uint32_t xs[8] = {uint32_t(a.x), uint32_t(a.y), uint32_t(a.z), uint32_t(a.w),
                            uint32_t(b.x), uint32_t(b.y), uint32_t(b.z), uint32_t(b.w)};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float2 xf = __half22float2(bits_h2(xs[i])), wf = __half22float2(bits_h2(w[i]));
        acc = fmaf(xf.x, wf.x, fmaf(xf.y, wf.y, acc));
    }
}

// The formats. Each: X and T, the types of x and W; Acc, the sum's type; Frag, a lane's 16 weights in
// registers; weights() loads them (row points at weight k of row n); dot() adds x[k..k+15] · those 16
// weights to acc; finish() turns a token's whole sum into the output's value.
struct F16W {  // route (c): W is FP16 already (32 bytes per 16 weights)
    using X = __half; using T = __half; using Acc = float; using Frag = uint32_t[8];
    __device__ static void weights(const T* row, const __half*, int, int, int, Frag& w) {
        const int4 a = load_stream(row), b = load_stream(row + 8);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    }
    __device__ static void dot(const X* x, const Frag& w, Acc& acc) { dot16_f16(x, w, acc); }
    __device__ static float finish(Acc acc, const __half*, const float*, int, int) { return acc; }
};
struct I8W {  // route (d), fused W8A16: 16 bytes per 16 weights, dequantized in registers
    using X = __half; using T = int8_t; using Acc = float; using Frag = uint32_t[8];
    __device__ static void weights(const T* row, const __half* scales, int n, int k, int K, Frag& w) {
        // 16 weights starting at a multiple of 16 lie inside one group of 128: one scale for all of them
        dequant16(load_stream(row), __half2half2(scales[(size_t)n * (K / GROUP) + k / GROUP]), w);
    }
    __device__ static void dot(const X* x, const Frag& w, Acc& acc) { dot16_f16(x, w, acc); }
    __device__ static float finish(Acc acc, const __half*, const float*, int, int) { return acc; }
};

// y[m, n] for one n per warp and TOKENS tokens m0 … m0 + TOKENS - 1. The warp's 32 lanes split the row's K in
// pieces of 16 weights, side by side: each step of the warp reads 32 neighbouring pieces (one coalesced 512-byte
// read of INT8 weights). Each lane ends with a partial sum per token; the warp adds them.
template <class WF>
__global__ void __launch_bounds__(32 * WARPS)
gemv_kernel(const typename WF::X* __restrict__ x, const typename WF::T* __restrict__ W,
            const __half* __restrict__ scales, const float* __restrict__ sx, __half* __restrict__ y, int M, int N,
            int K) {
    const int lane = threadIdx.x % 32, n = blockIdx.x * WARPS + threadIdx.x / 32, m0 = blockIdx.y * TOKENS;
    if (n >= N) return;  // the whole warp leaves: its lanes share n
    const typename WF::T* row = W + (size_t)n * K;
    typename WF::Acc acc[TOKENS] = {};
    // BEGIN EXERCISE 06.b: the lanes split K, the warp adds their sums
    //> // TODO: walk this lane's pieces of K (16 weights each, 32 lanes side by side): WF::weights() loads and
    //> // converts them once, WF::dot() adds their products with each token's x (tokens inside M only).
    //> // Then add the 32 lanes' sums of each token without shared memory (__shfl_xor_sync), and let one lane
    //> // store y[m, n] = WF::finish(sum, scales, sx, m, n) as a half for the tokens inside M.
    //> // Roughly 15 lines. Hints: the notebook, step 3.
    //> (void)lane; (void)row; (void)acc; (void)x; (void)sx; (void)y; (void)M; (void)m0;
    for (int k = 16 * lane; k < K; k += 16 * 32) {
        typename WF::Frag w;
        WF::weights(row + k, scales, n, k, K, w);
#pragma unroll
        for (int t = 0; t < TOKENS; ++t)
            if (m0 + t < M) WF::dot(x + (size_t)(m0 + t) * K + k, w, acc[t]);
    }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
        // butterfly: after offsets 16, 8, 4, 2, 1 every lane holds the sum of all 32
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], offset);
        if (lane == 0 && m0 + t < M)
            y[(size_t)(m0 + t) * N + n] = __float2half_rn(WF::finish(acc[t], scales, sx, m0 + t, n));
    }
    // END EXERCISE
}

// W[n, k] = q[n, k] · scale[n, k / 128]: one thread per 16 weights (16 bytes in, 32 bytes out).
__global__ void dequant_w8_kernel(const int8_t* __restrict__ q, const __half* __restrict__ scales,
                                  __half* __restrict__ W, int N, int K) {
    const size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x, n = c * 16 / K, k = c * 16 % K;
    if (c >= (size_t)N * K / 16) return;
    uint32_t w[8];
    dequant16(load_stream(q + c * 16), __half2half2(scales[n * (K / GROUP) + k / GROUP]), w);
    reinterpret_cast<int4*>(W)[2 * c] = make_int4(w[0], w[1], w[2], w[3]);
    reinterpret_cast<int4*>(W)[2 * c + 1] = make_int4(w[4], w[5], w[6], w[7]);
}

// W8A8's activations, one block per token row: scale = absmax / 127, q = round-to-nearest-even(x / scale),
// the arithmetic of harness.quant.quantize_per_token_int8. The absmax of non-negative floats can be found
// with an integer atomicMax on their bits: for floats ≥ 0, a larger value has larger bits.
constexpr int QTHREADS = 256;
__global__ void __launch_bounds__(QTHREADS)
quantize_tokens_kernel(const __half* __restrict__ x, int8_t* __restrict__ xq, float* __restrict__ sx, int K) {
    const __half* xr = x + (size_t)blockIdx.x * K;
    int8_t* qr = xq + (size_t)blockIdx.x * K;
    __shared__ int absmax_bits;
    if (threadIdx.x == 0) absmax_bits = 0;
    __syncthreads();
    float m = 0.f;
    for (int k = threadIdx.x; k < K; k += QTHREADS) m = fmaxf(m, fabsf(__half2float(xr[k])));
    atomicMax(&absmax_bits, __float_as_int(m));
    __syncthreads();
    const float scale = __int_as_float(absmax_bits) / 127.f;
    const float div = fmaxf(scale, 1.17549435e-38f);  // FLT_MIN, as the reference: a zero row stays zero
    if (threadIdx.x == 0) sx[blockIdx.x] = scale;
    for (int k = threadIdx.x; k < K; k += QTHREADS)
        qr[k] = (int8_t)max(-127, min(127, __float2int_rn(__half2float(xr[k]) / div)));
}

// W8A8's format for gemv_kernel: both operands INT8, so the products are exact integers, summed in INT32; the
// scales come back only at the end, once per output.
struct W8A8 {  // INT8 x (quantized per token, scale sx[m]) × INT8 W (one scale sw[n] per row)
    using X = int8_t; using T = int8_t; using Acc = int; using Frag = int4;
    __device__ static void weights(const T* row, const __half*, int, int, int, Frag& w) { w = load_stream(row); }
    // BEGIN EXERCISE 06.c: the INT8 dot product and the scaling epilogue
    //> // TODO: dot(): acc += the 16 int8 products of x[0..15] and w, exactly, in INT32 (__dp4a does 4 at once).
    //> // finish(): the token's INT32 sum → y's value: undo both quantizations (sx: per token m, float;
    //> // sw: per output n, half). Roughly 8 lines in all. Hints: the notebook, step 5.
    //> __device__ static void dot(const X* x, const Frag& w, Acc& acc) { (void)x; (void)w; (void)acc; }
    //> __device__ static float finish(Acc acc, const __half* sw, const float* sx, int m, int n) {
    //>     (void)acc; (void)sw; (void)sx; (void)m; (void)n;
    //>     return 0.f;
    //> }
    __device__ static void dot(const X* x, const Frag& w, Acc& acc) {
        const int4 a = __ldg(reinterpret_cast<const int4*>(x));
        acc = __dp4a(a.x, w.x, acc);
        acc = __dp4a(a.y, w.y, acc);
        acc = __dp4a(a.z, w.z, acc);
        acc = __dp4a(a.w, w.w, acc);
    }
    __device__ static float finish(Acc acc, const __half* sw, const float* sx, int m, int n) {
        return float(acc) * sx[m] * __half2float(sw[n]);
    }
    // END EXERCISE
};

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class WF>
static void launch_gemv(const typename WF::X* x, const typename WF::T* W, const __half* scales, const float* sx,
                        __half* y, int M, int N, int K, cudaStream_t stream) {
    const dim3 grid((N + WARPS - 1) / WARPS, (M + TOKENS - 1) / TOKENS);
    gemv_kernel<WF><<<grid, 32 * WARPS, 0, stream>>>(x, W, scales, sx, y, M, N, K);
}

// The Python side (harness.problems, through the catalog) refuses shapes these kernels do not take, with the
// reason; here a call that slipped past (K not a multiple of 16, a misaligned pointer) does nothing rather than
// read out of bounds.
EXPORT void dequant_w8_basic(const int8_t* q, const __half* scales, __half* W, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(W)) return;
    const size_t chunks = (size_t)N * K / 16;
    dequant_w8_kernel<<<(unsigned)((chunks + 255) / 256), 256, 0, stream>>>(q, scales, W, N, K);
}

EXPORT void gemv_f16_basic(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    if (K % 16 || !aligned16(x) || !aligned16(W)) return;
    launch_gemv<F16W>(x, W, nullptr, nullptr, y, M, N, K, stream);
}

EXPORT void gemv_w8a16_basic(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                             cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    launch_gemv<I8W>(x, q, scales, nullptr, y, M, N, K, stream);
}

// W8A8: quantize x per token into xq and sx, then the GEMV with INT8 on both sides; sw [N] per output channel.
EXPORT void linear_w8a8_basic(const __half* x, const int8_t* q, const __half* sw, int8_t* xq, float* sx, __half* y,
                              int M, int N, int K, cudaStream_t stream) {
    if (K % 16 || !aligned16(x) || !aligned16(q) || !aligned16(xq)) return;
    quantize_tokens_kernel<<<M, QTHREADS, 0, stream>>>(x, xq, sx, K);
    launch_gemv<W8A8>(xq, q, sw, sx, y, M, N, K, stream);
}
