// Lesson 09: W4A8, 4-bit weights and INT8 activations on the INT8 tensor cores (the teaching kernel).
//
// y[M, N] = x̂ · Ŵᵀ. x̂ = xq · sx: x quantized per token at run time. Ŵ: harness/quant.py's two-level weights,
//   Ŵ[n, k] = scale[n] · c[n, k],   c = (u − gzero) · gscale,
// a float scale per output channel (level 1) and, per group of 128 weights along K, an integer gscale (1..15)
// and gzero (0..15) with a 4-bit code u (level 2). The coded c stays within −128..127, so the INT8 mma can sum
// c · xq over all of K in INT32, and the only float work is one multiply per output at the end.
//
// The tensor core takes the weights as unsigned bytes (mma .u8.s8): each byte is 128 + c, which the format
// keeps inside 0..255. The +128 adds 128 · Σₖ xq[m, k] to every output of token m; the quantization kernel
// sums each token's codes once, and the epilogue takes that away.
//
//   linear_w4a8_simple   x → per-token INT8 (quantize_tokens_kernel) → w4a8_simple_kernel
// The fast kernel of this lesson, with the same format, is solutions/09_w4a8/w4a8_fast.cu.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int GROUP = 128;  // weights per level-2 group along K; the kernel's K step is one group

// ---------------------------------------------------------------------------------------------
// mma.m16n8k32 (u8 × s8 → s32), one warp. Lane = 4g + t. The A fragment (16 weight rows × 32 K slots) is four
// registers of four bytes: a[0] row g, slots 4t…4t+3; a[1] row g+8, slots 4t…; a[2] row g, slots 16+4t…;
// a[3] row g+8, slots 16+4t…. B (32 K slots × 8 tokens): b0 slots 4t… and b1 slots 16+4t… of token g.
// C (16 rows × 8 tokens): c[e] is row g + 8·(e / 2), token 2t + e % 2.
__device__ __forceinline__ void mma_u8s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t mad_hi(uint32_t a, uint32_t b, uint32_t c) {  // the high 32 bits of a·b, + c
    uint32_t d;
    asm("mad.hi.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// K renaming. The sum over K does not care which real k sits in which K slot, as long as A and B agree. Lane t
// takes the 32 weights k = 32t … 32t+31 of the group (four packed words, one 16-byte load). Word j holds
// weights 32t+8j … 32t+8j+7 and feeds mma step j: its low nibbles (weights 8j … 8j+3 of the word's eight) fill
// the slots 4t…4t+3, its high nibbles (8j+4 … 8j+7) the slots 16+4t…. B then needs x[32t+8j … 32t+8j+7] of its
// token: eight consecutive bytes, so x is used as it lies in memory.

// The unpack: the four words `v` of one weight row (row g for h = 0, g + 8 for h = 1) → the A registers of
// that row in the four mma steps: a[j][h] and a[j][h + 2] for word j, four bytes 128 + c each, in K order.
// pack_w4a8's order: byte i of a word holds weight i of it in its low nibble and weight 4 + i in its high one.
__device__ __forceinline__ void unpack_row(uint4 v, uint32_t gscale, uint32_t gzero, uint32_t (&a)[4][4], int h) {
    // BEGIN EXERCISE 09.a: the unpack, two instructions per four weights
    // TODO: for each word j (v.x, v.y, v.z, v.w), write a[j][h] (its low nibbles) and a[j][h + 2] (its
    // high nibbles), every byte 128 + (u − gzero)·gscale: the four bytes of a register at once, with one
    // mask and one 32-bit multiply-add (mad_hi above for the high nibbles), as your Python unpack_word of
    // the lesson's section 2 does. Roughly 8 lines.
    (void)v; (void)gscale; (void)gzero;
    for (int j = 0; j < 4; ++j) a[j][h] = a[j][h + 2] = 0u;
    // END EXERCISE
}

// ---------------------------------------------------------------------------------------------
// Per-token INT8 quantization, one block per token: scale = absmax / 127, the codes q (the lesson's section 3
// gives the rule), and the token's sum of q for the epilogue (exercise 09.c removes the +128 with it).
constexpr int QTHREADS = 256;
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* shared) {  // shared: QTHREADS / 32 slots
#pragma unroll
    for (int o = 16; o; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    v = shared[0];
#pragma unroll
    for (int w = 1; w < QTHREADS / 32; ++w) v = op(v, shared[w]);
    return v;
}

__global__ void __launch_bounds__(QTHREADS)
quantize_tokens_kernel(const __half* __restrict__ x, int8_t* __restrict__ xq, float* __restrict__ sx,
                       int* __restrict__ xsum, int K) {
    const __half* xr = x + (size_t)blockIdx.x * K;
    int8_t* qr = xq + (size_t)blockIdx.x * K;
    __shared__ float smax[QTHREADS / 32];
    __shared__ int ssum[QTHREADS / 32];
    float m = 0.f;
    for (int k = threadIdx.x; k < K; k += QTHREADS) m = fmaxf(m, fabsf(__half2float(xr[k])));
    m = block_reduce(m, [](float a, float b) { return fmaxf(a, b); }, smax);
    const float scale = m / 127.f, div = fmaxf(scale, 1.17549435e-38f);  // an all-zero row: q = 0, no NaN
    if (threadIdx.x == 0) sx[blockIdx.x] = scale;
    // BEGIN EXERCISE 09.b: the token's codes, and their sum for the epilogue
    // TODO: write the token's K INT8 codes into qr, by the rule of the lesson's section 3 (`div` is the
    // divisor), and their sum over the whole row into xsum[blockIdx.x]: each thread sums its share,
    // block_reduce above combines the shares (every thread of the block must call it). Roughly 8 lines.
    (void)div; (void)qr; (void)ssum; (void)xsum;
    // END EXERCISE
}

// The epilogue of one m16n8 tile: acc (the C fragment) holds, for weight row n and token m, the INT32 sum over
// K of (128 + c) · xq. Rows n0 … n0+15 and tokens m0 … m0+7; rows past N and tokens past M are not stored.
__device__ __forceinline__ void store_tile(const int (&acc)[4], int n0, int m0, const int* __restrict__ xsum,
                                           const float* __restrict__ sx, const __half* __restrict__ wscale,
                                           __half* __restrict__ y, int M, int N) {
    // BEGIN EXERCISE 09.c: the epilogue, the +128 removed per token
    // TODO: for each of the four values, find its row n and token m (the C fragment above, with
    // lane = threadIdx.x % 32), and if both are inside y, store y[m, n]: take the +128's contribution
    // away in integers (exact; xsum[m] is the token's sum of xq), then apply the token's scale sx[m] and
    // the channel's scale wscale[n]. Roughly 8 lines.
    (void)acc; (void)n0; (void)m0; (void)xsum; (void)sx; (void)wscale; (void)y; (void)M; (void)N;
    // END EXERCISE
}

// ---------------------------------------------------------------------------------------------
// The GEMM, on the INT8 tensor core. The weights are the mma's A operand (yᵀ = Ŵ · xᵀ). Each warp owns 16
// weight rows and 8·NT tokens; at each group along K it loads its rows' four words per lane straight from
// global memory into registers, unpacks them once, and uses them for all NT token tiles.
constexpr int WARPS = 4;  // warps per block, 16 weight rows each
constexpr int NT = 4;     // n8 token tiles per warp: 32 tokens

__global__ void __launch_bounds__(32 * WARPS)
w4a8_simple_kernel(const int8_t* __restrict__ xq, const float* __restrict__ sx, const int* __restrict__ xsum,
                   const int32_t* __restrict__ Wq, const __half* __restrict__ wscale,
                   const uint8_t* __restrict__ gscale, const uint8_t* __restrict__ gzero, __half* __restrict__ y,
                   int M, int N, int K) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = (blockIdx.x * WARPS + warp) * 16, m0 = blockIdx.y * 8 * NT, groups = K / GROUP;
    if (n0 >= N) return;  // a warp wholly past the last row (no barrier below waits for it)
    // This lane's two weight rows; rows past N read row N − 1 (in bounds) and are never stored.
    const int row[2] = {min(n0 + g, N - 1), min(n0 + g + 8, N - 1)};

    int acc[NT][4] = {};
    for (int kt = 0; kt < groups; ++kt) {
        uint32_t a[4][4];  // [mma step j][fragment register]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(Wq + (size_t)row[h] * (K / 8) + kt * (GROUP / 8)) + t);
            const size_t p = (size_t)row[h] * groups + kt;
            unpack_row(v, __ldg(gscale + p), __ldg(gzero + p), a, h);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int m = m0 + 8 * nt + g;
            uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;  // tokens past M count as zeros
            if (m < M) {
                const uint4* src = reinterpret_cast<const uint4*>(xq + (size_t)m * K + kt * GROUP + 32 * t);
                x0 = __ldg(src);
                x1 = __ldg(src + 1);
            }
            const uint32_t b[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};  // x[32t … 32t+31]
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_u8s8(acc[nt], a[j], b[2 * j], b[2 * j + 1]);
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) store_tile(acc[nt], n0, m0 + 8 * nt, xsum, sx, wscale, y, M, N);
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// What a model layer calls: quantize x per token (into xq, sx, xsum), then the W4A8 GEMM. The Python wrapper
// refuses bad shapes with a clear message (K a multiple of 128, at most 65536); here a bad call does nothing
// rather than read out of bounds.
EXPORT void linear_w4a8_simple(const __half* x, const int32_t* q, const __half* scale, const uint8_t* gscale,
                               const uint8_t* gzero, int8_t* xq, float* sx, int* xsum, __half* y, int M, int N,
                               int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(xq)) return;
    quantize_tokens_kernel<<<M, QTHREADS, 0, stream>>>(x, xq, sx, xsum, K);
    const dim3 grid((N + 16 * WARPS - 1) / (16 * WARPS), (M + 8 * NT - 1) / (8 * NT));
    w4a8_simple_kernel<<<grid, 32 * WARPS, 0, stream>>>(xq, sx, xsum, q, scale, gscale, gzero, y, M, N, K);
}
