// Lesson 06: INT8 weights, FP16 activations (W8A16) at decode: y[M,N] = x[M,K] · Ŵ[N,K]ᵀ with
// Ŵ = q · scale, q int8 [N, K], scale fp16 [N, K/128] (symmetric, one scale per 128 weights along K;
// harness/quant.py is the reference).
//
// At M ≤ 16 every weight is used for M multiply-adds only, so the time is the bytes read: INT8 weights
// halve them against FP16, if nothing else is added. Three kernels:
//   dequant_w8   q, scale → FP16 W in memory (the unfused route: +2 bytes written and read per weight);
//   gemv_f16     y = x · Wᵀ for FP16 W: the GEMV the unfused route runs after dequant_w8;
//   gemv_w8a16   the fused kernel: the same GEMV reading q and scale, dequantizing in registers.
// The two GEMVs are one template: they differ only in how a lane's 16 weights become 8 half2 words.
//
// Why tensor cores in a memory-bound kernel: with CUDA-core FMAs, each weight costs M multiply-adds plus
// the conversions of x, and by M = 4 the arithmetic, not the memory, sets the time (NOTES.md has the
// numbers of that first version). One mma.sync does 16 tokens × 8 outputs × 16 weights: up to M = 16 the
// arithmetic is then nearly free, and the kernel stays memory-bound.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

#ifndef GEMV_WARPS
#define GEMV_WARPS 8  // warps per block, splitting K
#endif
constexpr int GROUP = 128, WARPS = GEMV_WARPS, THREADS = 32 * WARPS;
#ifndef GEMV_UNROLL
#define GEMV_UNROLL 2  // 64-wide K blocks a warp loads before using the first
#endif
#ifndef GEMV_I8_CHUNKS
#define GEMV_I8_CHUNKS 1  // 16-byte INT8 loads per lane and K block: 1 (64-wide blocks) or 2 (128-wide)
#endif
constexpr int U = GEMV_UNROLL;

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// 16 int8 → 8 half2 (weights k, k+1 in word k/2), times the group's scale. With the sign bit flipped,
// byte b is the unsigned b + 128; placed as the low mantissa byte of the half 1024 (0x6400) it is the
// half 1024 + b + 128, exactly, and one subtraction of 1152 leaves b. Per pair of weights: one
// byte_perm, one HSUB2, one HMUL2; no int→float conversion instruction.
__device__ __forceinline__ void dequant16(const int4 v, __half2 s, uint32_t (&w)[8]) {
    // BEGIN EXERCISE 06.a: INT8 → FP16 in registers
    //> // TODO: for each of the 4 words of v (flip the sign bits first: word ^ 0x80808080), build two half2
    //> // from its bytes (0, 1) and (2, 3) with __byte_perm(u, 0x64646464, selector) so that each half is
    //> // 0x64 followed by the byte; subtract 1152 from both halves (__hsub2), multiply by s (__hmul2).
    //> for (int i = 0; i < 8; ++i) w[i] = 0u;
    //> (void)v; (void)s;
    const uint32_t words[4] = {uint32_t(v.x), uint32_t(v.y), uint32_t(v.z), uint32_t(v.w)};
    const __half2 magic = __float2half2_rn(1152.0f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t u = words[j] ^ 0x80808080u;
        // selector digits, high byte first: 4 = 0x64 from the second operand; 0..3 = bytes of u
        w[2 * j] = h2_bits(__hmul2(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4140u)), magic), s));
        w[2 * j + 1] = h2_bits(__hmul2(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4342u)), magic), s));
    }
    // END EXERCISE
}

#ifndef GEMV_L2_PREFETCH
#define GEMV_L2_PREFETCH 256  // bytes the L2 fetches around each weight load: 0 (no hint), 128 or 256
#endif
// A weight is read once: skip L1, and ask L2 to fetch the surrounding 256 bytes of the row (the
// neighbouring lanes' and warps' pieces), so DRAM sees long bursts.
__device__ __forceinline__ int4 load_stream(const void* p) {
    int4 v;
#if GEMV_L2_PREFETCH == 256
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#elif GEMV_L2_PREFETCH == 128
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#else
    v = __ldcs(reinterpret_cast<const int4*>(p));
#endif
    return v;
}

// Weight formats: one lane's 2·WORDS consecutive weights of a row (a K block of KB = 8·WORDS holds 4
// lanes' worth) as WORDS half2 words, from LOADS 16-byte loads.
struct F16W {
    using T = __half;
    static constexpr int LOADS = 2, WORDS = 8, KB = 64;  // 16 halves
    __device__ static void load(const T* p, int4 (&v)[LOADS]) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) v[i] = load_stream(p + 8 * i);
    }
    __device__ static void convert(const int4 (&v)[LOADS], __half2, uint32_t (&w)[WORDS]) {
        const uint32_t* u = reinterpret_cast<const uint32_t*>(v);
#pragma unroll
        for (int i = 0; i < WORDS; ++i) w[i] = u[i];
    }
};
struct I8W {
    using T = int8_t;
    static constexpr int LOADS = GEMV_I8_CHUNKS, WORDS = 8 * LOADS, KB = 64 * LOADS;  // 16 int8 per load
    static_assert(GROUP % KB == 0, "a K block must lie inside one scale group");
    __device__ static void load(const T* p, int4 (&v)[LOADS]) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) v[i] = load_stream(p + 16 * i);
    }
    __device__ static void convert(const int4 (&v)[LOADS], __half2 s, uint32_t (&w)[WORDS]) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) dequant16(v[i], s, *reinterpret_cast<uint32_t(*)[8]>(w + 8 * i));
    }
};

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Decode GEMV on tensor cores. A block computes up to 16 tokens (M, padded with zero rows) × 8·R outputs;
// its 8 warps split K and add their partial tiles at the end. Each mma.m16n8k16 multiplies a 16×16 piece
// of x by a 16×8 piece of Wᵀ. Lane (g = lane / 4, t = lane % 4) must supply W's row g at the K positions
// 2t, 2t+1, 2t+8, 2t+9 of each 16-step (PTX ISA, mma.m16n8k16 fragments), which in memory would be four
// scattered 2-byte pieces. But a dot product does not care about the order of its K terms: so each lane
// loads 16 *consecutive* weights, k = 16t … 16t+15 of a 64-wide block (one coalesced 16-byte load), and
// step j of the block treats k = 16t + 4j + {0, 1, 2, 3} as the fragment's {2t, 2t+1, 2t+8, 2t+9}. As long
// as x's fragments use the same renaming, which costs nothing because x is loaded by the same lanes, the
// products are the same. (Marlin reorders the weights offline to the same end.) With GEMV_I8_CHUNKS = 2 a
// lane takes 32 INT8 weights of a 128-wide block, and the renaming runs over 8 steps.
// M > 16: grid.y gives each 16 tokens their own blocks, which re-read W: correct for any M, fast only to 16.
#ifndef GEMV_MIN_BLOCKS
#define GEMV_MIN_BLOCKS 1
#endif
template <class WF, int R>  // R: n8 tiles per block, which computes 16 tokens × 8·R outputs
__global__ void __launch_bounds__(THREADS, GEMV_MIN_BLOCKS)
gemv_kernel(const __half* __restrict__ x, const typename WF::T* __restrict__ W, const __half* __restrict__ scales,
            __half* __restrict__ y, int M, int N, int K) {
    __shared__ float red[WARPS][R][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * 8 * R, m0 = blockIdx.y * 16;
    const bool row_lo = m0 + g < M, row_hi = m0 + g + 8 < M;  // x rows this lane feeds (others are zero)
    constexpr int KB = WF::KB, WORDS = WF::WORDS, XL = WORDS / 4;  // XL: 16-byte loads of x per row
    const __half* x_lo = x + (size_t)(row_lo ? m0 + g : 0) * K + 2 * WORDS * t;
    const __half* x_hi = x + (size_t)(row_hi ? m0 + g + 8 : 0) * K + 2 * WORDS * t;
    const typename WF::T* wrow[R];
    const __half* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // a row past N re-reads row N-1; its outputs are not stored
        const int n = min(n0 + 8 * r + g, N - 1);
        wrow[r] = W + (size_t)n * K + 2 * WORDS * t;
        srow[r] = scales ? scales + (size_t)n * (K / GROUP) : nullptr;
    }
    float acc[R][4] = {};
    const int kblocks = K / KB;
    for (int kb0 = warp; kb0 < kblocks; kb0 += WARPS * U) {
        int4 wv[U][R][WF::LOADS], xv[U][2][XL];
#pragma unroll
        for (int u = 0; u < U; ++u) {  // all of this step's loads first: U·R weight loads in flight
            const int kb = kb0 + u * WARPS;  // the block's warps read adjacent 64-wide blocks together
            if (kb >= kblocks) continue;
#pragma unroll
            for (int r = 0; r < R; ++r) WF::load(wrow[r] + (size_t)kb * KB, wv[u][r]);
            const int4 zero = make_int4(0, 0, 0, 0);
#pragma unroll
            for (int i = 0; i < XL; ++i) {
                xv[u][0][i] = row_lo ? __ldg(reinterpret_cast<const int4*>(x_lo + kb * KB) + i) : zero;
                xv[u][1][i] = row_hi ? __ldg(reinterpret_cast<const int4*>(x_hi + kb * KB) + i) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int kb = kb0 + u * WARPS;
            if (kb >= kblocks) continue;
            const uint32_t* xl = reinterpret_cast<const uint32_t*>(xv[u][0]);  // row g: WORDS words
            const uint32_t* xh = reinterpret_cast<const uint32_t*>(xv[u][1]);  // row g + 8
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const __half2 s = srow[r] ? __half2half2(srow[r][kb * KB / GROUP]) : __float2half2_rn(1.0f);
                uint32_t w[WORDS];
                WF::convert(wv[u][r], s, w);
#pragma unroll
                for (int j = 0; j < WORDS / 2; ++j) {
                    const uint32_t a[4] = {xl[2 * j], xh[2 * j], xl[2 * j + 1], xh[2 * j + 1]};
                    mma16816(acc[r], a, w[2 * j], w[2 * j + 1]);
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[warp][r][lane][e] = acc[r][e];
    __syncthreads();
    // BEGIN EXERCISE 06.b: adding the warps' partial tiles, and the store
    //> // TODO: each of the R·32·4 accumulator slots (r, lane, e) is the sum over the WARPS warps of
    //> // red[w][r][lane][e]; it is output (m0 + lane/4 + 8·(e/2), n0 + 8r + 2·(lane%4) + e%2) of y.
    //> // Let the block's threads share the slots, and store those inside M × N (__float2half_rn).
    for (int i = threadIdx.x; i < R * 32 * 4; i += THREADS) {
        const int r = i / 128, l = (i / 4) % 32, e = i % 4;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][r][l][e];
        const int m = m0 + l / 4 + 8 * (e / 2), n = n0 + 8 * r + 2 * (l % 4) + e % 2;
        if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
    }
    // END EXERCISE
}

template <class WF>
static void launch_gemv(const __half* x, const typename WF::T* W, const __half* scales, __half* y, int M, int N,
                        int K, cudaStream_t stream) {
    // 32 outputs per block when that still gives every SM a block, else 16: more loads per warp in
    // flight against more blocks (the sweep in NOTES.md: N = 8192 prefers 32, N = 4096 prefers 16).
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if ((N + 31) / 32 >= sms) {
        const dim3 grid((N + 31) / 32, (M + 15) / 16);
        gemv_kernel<WF, 4><<<grid, THREADS, 0, stream>>>(x, W, scales, y, M, N, K);
    } else {
        const dim3 grid((N + 15) / 16, (M + 15) / 16);
        gemv_kernel<WF, 2><<<grid, THREADS, 0, stream>>>(x, W, scales, y, M, N, K);
    }
}

// Dequantize: W[n, k] = q[n, k] · scale[n, k / 128], 16 weights per thread (16 bytes in, 32 bytes out).
__global__ void dequant_w8_kernel(const int8_t* __restrict__ q, const __half* __restrict__ scales,
                                  __half* __restrict__ W, int N, int K) {
    const size_t chunks = (size_t)N * K / 16;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < chunks; c += (size_t)gridDim.x * blockDim.x) {
        const size_t n = c * 16 / K, k = c * 16 % K;
        uint32_t w[8];
        dequant16(__ldcs(reinterpret_cast<const int4*>(q) + c), __half2half2(scales[n * (K / GROUP) + k / GROUP]), w);
        reinterpret_cast<int4*>(W)[2 * c] = make_int4(w[0], w[1], w[2], w[3]);
        reinterpret_cast<int4*>(W)[2 * c + 1] = make_int4(w[4], w[5], w[6], w[7]);
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The Python wrappers check K % 128 == 0 with a clear message; here a bad call does nothing rather
// than read out of bounds.
EXPORT void gemv_w8a16(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                       cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    launch_gemv<I8W>(x, q, scales, y, M, N, K, stream);
}

EXPORT void gemv_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    if (K % F16W::KB || !aligned16(x) || !aligned16(W)) return;
    launch_gemv<F16W>(x, W, nullptr, y, M, N, K, stream);
}

EXPORT void dequant_w8(const int8_t* q, const __half* scales, __half* W, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(W)) return;
    const size_t chunks = (size_t)N * K / 16;
    const int blocks = (int)((chunks + 255) / 256 < 132 * 16 ? (chunks + 255) / 256 : 132 * 16);
    if (blocks) dequant_w8_kernel<<<blocks, 256, 0, stream>>>(q, scales, W, N, K);
}
