// Lesson 07: INT4 weights, FP16 activations (W4A16) at decode: y[M,N] = x[M,K] · Ŵ[N,K]ᵀ with, per group of 128
// weights along K, Ŵ = q · scale (symmetric, q in −8..7) or Ŵ = (q − zero) · scale (asymmetric, q in 0..15).
// q is packed 8 per int32, weight k in bits 4·(k % 8) of word k / 8 (low nibble first): harness/quant.py's
// pack_int4, the reference. scale fp16 [N, K/128], zero uint8 [N, K/128].
//
// Half the bytes of INT8 for the same weights, so at decode the floor halves again; but each 16-byte load now
// brings 32 weights to convert instead of 16, and the conversion, not the memory, can become the limit.
//   gemv_w4a16, gemv_w4a16_asym  the fused decode GEMV (tensor cores, as lesson 06's), any M (re-reads W per
//                                16 tokens past M = 16);
//   dequant_w4                   the unfused route's first kernel: q, scale → FP16 W in memory.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

#ifndef GEMV_WARPS
#define GEMV_WARPS 8  // warps per block, splitting K
#endif
#ifndef GEMV_PREFETCH
#define GEMV_PREFETCH 2  // 128-wide K blocks of weights a warp has in flight while it converts one
#endif
#ifndef GEMV_MIN_BLOCKS
#define GEMV_MIN_BLOCKS 1  // blocks per SM the 16-output kernel must fit (caps its registers)
#endif
#ifndef GEMV_R
#define GEMV_R 2  // n8 tiles per block: 2 or 4 (0: 4 when N / 32 fills the SMs, else 2)
#endif
constexpr int GROUP = 128, KB = 128, WARPS = GEMV_WARPS, THREADS = 32 * WARPS, PF = GEMV_PREFETCH;

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// One packed word (8 weights) → 4 half2, times the group's scale. A nibble n placed in the low mantissa bits
// under the exponent 0x64 is the half 1024 + n exactly, and one AND-OR (a single LOP3) places two nibbles of a
// word at once, those 16 bits apart: nibbles i and i+4. So output word i holds weights i and i + 4 of the 8,
// and x must be paired the same way (pair_x below). Then (1024 + n) − (1024 + zero) is n − zero, exactly (one
// HSUB2), and one HMUL2 scales. Symmetric q (−8..7, two's complement nibbles) becomes q + 8 by flipping each
// nibble's top bit (one XOR per word), with zero = 8: zz is the half2 (1024 + zero, 1024 + zero).
template <bool SYM>
__device__ __forceinline__ void dequant8(uint32_t word, __half2 zz, __half2 s, uint32_t (&w)[4]) {
    // BEGIN EXERCISE 07.a: INT4 → FP16 in registers
    //> // TODO: u = word (symmetric: word ^ 0x88888888); for i = 0..3 the half2 with nibbles i and i + 4 of u is
    //> // ((u >> 4i) & 0x000F000F) | 0x64006400; subtract zz (__hsub2), multiply by s (__hmul2), store as w[i].
    //> for (int i = 0; i < 4; ++i) w[i] = 0u;
    //> (void)word; (void)zz; (void)s;
    const uint32_t u = SYM ? word ^ 0x88888888u : word;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t h = ((u >> (4 * i)) & 0x000F000Fu) | 0x64006400u;  // ptxas makes this one LOP3
        w[i] = h2_bits(__hmul2(__hsub2(bits_h2(h), zz), s));
    }
    // END EXERCISE
}

// 32 packed weights (one 16-byte load) → 16 half2: word 4q + i holds weights 8q + i and 8q + i + 4.
template <bool SYM>
__device__ __forceinline__ void dequant32(const int4 v, __half2 zz, __half2 s, uint32_t (&w)[16]) {
    dequant8<SYM>(uint32_t(v.x), zz, s, *reinterpret_cast<uint32_t(*)[4]>(w));
    dequant8<SYM>(uint32_t(v.y), zz, s, *reinterpret_cast<uint32_t(*)[4]>(w + 4));
    dequant8<SYM>(uint32_t(v.z), zz, s, *reinterpret_cast<uint32_t(*)[4]>(w + 8));
    dequant8<SYM>(uint32_t(v.w), zz, s, *reinterpret_cast<uint32_t(*)[4]>(w + 12));
}

// 8 halves x0..x7 (4 words, x0 x1 in the first) → the pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7) that match
// dequant32's weight pairs: one byte permute per word.
__device__ __forceinline__ void pair_x(const uint32_t* in, uint32_t* out) {
    out[0] = __byte_perm(in[0], in[2], 0x5410);  // low halves of x0x1 and x4x5
    out[1] = __byte_perm(in[0], in[2], 0x7632);  // high halves
    out[2] = __byte_perm(in[1], in[3], 0x5410);
    out[3] = __byte_perm(in[1], in[3], 0x7632);
}

__device__ __forceinline__ int4 load_stream(const void* p) {  // read once: skip L1, 256-byte L2 fetches
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The decode GEMV, lesson 06's design with 4-bit weights. A block computes 16 tokens (M, padded with zero rows)
// × 8·R outputs; its 8 warps split K in 128-wide blocks (one scale group) and add their partial tiles at the
// end. In a block, lane (g = lane / 4, t = lane % 4) loads 16 bytes of weight row g: the 32 weights
// k = 32t … 32t+31, which dequant32 turns into 16 half2 words. Eight mma.m16n8k16 steps consume them: step j
// treats words 2j and 2j+1 as the B fragment's K positions {2t, 2t+1} and {2t+8, 2t+9}. The physical K
// positions behind each logical one differ from the PTX layout, which is allowed because a dot product
// does not care about the order of its terms, as long as x's A fragment holds x at the same positions:
// the lane loads x[32t … 32t+31] of rows g and g+8 and pairs it like the weights.
// M > 16: grid.y gives each 16 tokens their own blocks, which re-read W.
template <bool SYM, int R>  // R: n8 tiles per block, which computes 16 tokens × 8·R outputs
__global__ void __launch_bounds__(THREADS, R == 2 ? GEMV_MIN_BLOCKS : 1)  // 1: stops ptxas trading spills for occupancy
gemv_kernel(const __half* __restrict__ x, const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
            const uint8_t* __restrict__ zeros, __half* __restrict__ y, int M, int N, int K) {
    __shared__ float red[WARPS][R][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * 8 * R, m0 = blockIdx.y * 16, groups = K / GROUP;
    const bool row_lo = m0 + g < M, row_hi = m0 + g + 8 < M;  // x rows this lane feeds (others are zero)
    const __half* x_lo = x + (size_t)(row_lo ? m0 + g : 0) * K + 32 * t;
    const __half* x_hi = x + (size_t)(row_hi ? m0 + g + 8 : 0) * K + 32 * t;
    const int32_t* wrow[R];
    size_t srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // a row past N re-reads row N-1; its outputs are not stored
        const int n = min(n0 + 8 * r + g, N - 1);
        wrow[r] = Wq + (size_t)n * (K / 8) + 4 * t;
        srow[r] = (size_t)n * groups;
    }
    float acc[R][4] = {};
    // The weights stream from DRAM: each warp keeps the next PF K blocks' loads in flight (a ring in registers)
    // while it converts the current one. x is small and hot in L1: it is loaded when needed.
    int4 wv[PF + 1][R];
#pragma unroll
    for (int p = 0; p < PF; ++p)
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (warp + p * WARPS < groups) wv[p][r] = load_stream(wrow[r] + (size_t)(warp + p * WARPS) * (KB / 8));
    for (int kb = warp; kb < groups; kb += WARPS) {
        const int ahead = kb + PF * WARPS;  // the block's warps read adjacent K blocks together
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (ahead < groups) wv[PF][r] = load_stream(wrow[r] + (size_t)ahead * (KB / 8));
        uint32_t xl[16], xh[16];  // x of rows g and g+8, paired like the weights
        const int4 zero = make_int4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int4 lo = row_lo ? __ldg(reinterpret_cast<const int4*>(x_lo + kb * KB) + i) : zero;
            const int4 hi = row_hi ? __ldg(reinterpret_cast<const int4*>(x_hi + kb * KB) + i) : zero;
            pair_x(reinterpret_cast<const uint32_t*>(&lo), xl + 4 * i);
            pair_x(reinterpret_cast<const uint32_t*>(&hi), xh + 4 * i);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const __half2 s = __half2half2(scales[srow[r] + kb]);
            const __half2 zz = SYM ? __float2half2_rn(1032.0f)
                                   : __half2half2(__ushort_as_half((unsigned short)(0x6400 | zeros[srow[r] + kb])));
            uint32_t w[16];
            dequant32<SYM>(wv[0][r], zz, s, w);
            // BEGIN EXERCISE 07.b: the mma steps over the lane's 32 weights
            //> // TODO: 8 steps j: A = {xl[2j], xh[2j], xl[2j+1], xh[2j+1]}, B = w[2j], w[2j+1], into acc[r]
            //> // with mma16816.
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t a[4] = {xl[2 * j], xh[2 * j], xl[2 * j + 1], xh[2 * j + 1]};
                mma16816(acc[r], a, w[2 * j], w[2 * j + 1]);
            }
            // END EXERCISE
        }
#pragma unroll
        for (int p = 0; p < PF; ++p)  // the ring moves on (register renames; no memory traffic)
#pragma unroll
            for (int r = 0; r < R; ++r) wv[p][r] = wv[p + 1][r];
    }

#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[warp][r][lane][e] = acc[r][e];
    __syncthreads();
    // The warps' partial tiles: slot (r, lane, e) is output (m0 + lane/4 + 8·(e/2), n0 + 8r + 2·(lane%4) + e%2).
    for (int i = threadIdx.x; i < R * 32 * 4; i += THREADS) {
        const int r = i / 128, l = (i / 4) % 32, e = i % 4;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][r][l][e];
        const int m = m0 + l / 4 + 8 * (e / 2), n = n0 + 8 * r + 2 * (l % 4) + e % 2;
        if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
    }
}

template <bool SYM>
static void launch_gemv(const __half* x, const int32_t* Wq, const __half* scales, const uint8_t* zeros, __half* y,
                        int M, int N, int K, cudaStream_t stream) {
    // 32 outputs per block when that still gives every SM a block, else 16 (lesson 06's rule).
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (GEMV_R == 4 || (GEMV_R == 0 && (N + 31) / 32 >= sms))
        gemv_kernel<SYM, 4><<<dim3((N + 31) / 32, (M + 15) / 16), THREADS, 0, stream>>>(x, Wq, scales, zeros, y, M, N, K);
    else
        gemv_kernel<SYM, 2><<<dim3((N + 15) / 16, (M + 15) / 16), THREADS, 0, stream>>>(x, Wq, scales, zeros, y, M, N, K);
}

// Dequantize (symmetric): W[n, k] = q[n, k] · scale[n, k / 128]; a thread per packed word (8 weights: 4 bytes
// in, 16 out), so a warp reads 128 and writes 512 consecutive bytes. dequant8, then the pairs (w0,w4) (w1,w5)
// (w2,w6) (w3,w7) are put back in K order with one byte permute per output word.
__global__ void dequant_w4_kernel(const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
                                  __half* __restrict__ W, int N, int K) {
    const size_t words = (size_t)N * K / 8;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < words; c += (size_t)gridDim.x * blockDim.x) {
        const size_t n = c * 8 / K, k = c * 8 % K;
        uint32_t w[4];
        dequant8<true>(uint32_t(__ldcs(Wq + c)), __float2half2_rn(1032.0f), __half2half2(scales[n * (K / GROUP) + k / GROUP]), w);
        reinterpret_cast<int4*>(W)[c] = make_int4(__byte_perm(w[0], w[1], 0x5410), __byte_perm(w[2], w[3], 0x5410),
                                                  __byte_perm(w[0], w[1], 0x7632), __byte_perm(w[2], w[3], 0x7632));
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The Python wrappers check K % 128 == 0 with a clear message; here a bad call does nothing rather than
// read out of bounds.
EXPORT void gemv_w4a16(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                       cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    launch_gemv<true>(x, q, scales, nullptr, y, M, N, K, stream);
}

EXPORT void gemv_w4a16_asym(const __half* x, const int32_t* q, const __half* scales, const uint8_t* zeros, __half* y,
                            int M, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    launch_gemv<false>(x, q, scales, zeros, y, M, N, K, stream);
}

EXPORT void dequant_w4(const int32_t* q, const __half* scales, __half* W, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(W)) return;
    const size_t words = (size_t)N * K / 8;
    const int blocks = (int)((words + 255) / 256 < 132 * 16 ? (words + 255) / 256 : 132 * 16);
    if (blocks) dequant_w4_kernel<<<blocks, 256, 0, stream>>>(q, scales, W, N, K);
}
