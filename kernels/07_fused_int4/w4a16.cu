// Lesson 07: INT4 weights, FP16 activations (W4A16), the teaching kernels. Symmetric INT4, one FP16 scale per
// group of 128 weights along K:
//   y[M, N] = x[M, K] · Ŵᵀ,   Ŵ[n, k] = q[n, k] · scale[n, k / 128],   q in −8..7.
// q is packed 8 per int32: weight k of a row sits in bits 4·(k % 8) … 4·(k % 8) + 3 of word k / 8, low nibble
// first (harness/quant.py's pack_int4, the reference). scales are fp16 [N, K/128].
//   dequant_int4  q, scale → FP16 W in memory: the unfused route's first kernel, and a check of exercise 07.a alone;
//   gemv_int4     the fused decode GEMV: weights unpacked in registers, the mma's A operand, scaled after the mma.
// The lesson's fast kernels, which the lesson measures these against, are in solutions/07_fused_int4/w4a16_fast.cu.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int GROUP = 128;           // weights per scale along K; also the K block a warp takes at a time
constexpr int WARPS = 8;             // warps per GEMV block: they split K and add their sums at the end
constexpr int THREADS = 32 * WARPS;

// A half2 and its 32 bits, reinterpreted (no conversion).
__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// (a & b) | c in one instruction. LOP3 computes any function of three 32-bit inputs; its 8-bit immediate is the
// function's truth table, 0xea for (A & B) | C. Written out, ptxas may emit two instructions instead of one.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// One packed word, weights q0 … q7 (qi in nibble i, bits 4i … 4i + 3, two's complement), into four half2 of exact q:
//   w[i] = (qi, qi+4): low half qi, high half qi+4, for i = 0 … 3.
// Why this order: the FP16 number with exponent bits 0x64 and mantissa m (0x6400 | m) is exactly 1024 + m. One
// 32-bit word holds two halves, 16 bits apart, and nibbles i and i + 4 are 16 bits apart too: one LOP3 can mask
// both nibbles out of the packed word and OR the exponent 0x64 over each.
// The budget: one XOR and one shift for the word, then per output word one and_or and one __hsub2 or __hfma2.
__device__ __forceinline__ void dequant8(uint32_t word, uint32_t (&w)[4]) {
    // BEGIN EXERCISE 07.a: INT4 → FP16 in registers, one LOP3 per pair of weights
    // TODO: w[i] = the half2 (qi, qi+4), exact, for i = 0..3, within the budget above: an XOR, one shift, and
    // per output word one and_or, then one __hsub2 or __hfma2 that leaves exactly q. Convert with bits_h2 /
    // h2_bits. Roughly 8 lines. Hints: the notebook, step 2.
    for (int i = 0; i < 4; ++i) w[i] = 0u;
    (void)word;
    // END EXERCISE
}

// 32 packed weights (one 16-byte load, 4 words) → 16 half2: word 4j + i holds weights 8j + i and 8j + i + 4.
__device__ __forceinline__ void dequant32(int4 v, uint32_t (&w)[16]) {
    dequant8(uint32_t(v.x), *reinterpret_cast<uint32_t(*)[4]>(w));
    dequant8(uint32_t(v.y), *reinterpret_cast<uint32_t(*)[4]>(w + 4));
    dequant8(uint32_t(v.z), *reinterpret_cast<uint32_t(*)[4]>(w + 8));
    dequant8(uint32_t(v.w), *reinterpret_cast<uint32_t(*)[4]>(w + 12));
}

// 8 halves x0 … x7 (one 16-byte load) → the pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7): the order dequant8
// gives the weights, so that word i of x meets word i of the weights. One byte permute per word.
__device__ __forceinline__ void pair_x(int4 v, uint32_t* out) {
    const uint32_t* in = reinterpret_cast<const uint32_t*>(&v);
    out[0] = __byte_perm(in[0], in[2], 0x5410);  // low halves of (x0, x1) and (x4, x5)
    out[1] = __byte_perm(in[0], in[2], 0x7632);  // their high halves
    out[2] = __byte_perm(in[1], in[3], 0x5410);
    out[3] = __byte_perm(in[1], in[3], 0x7632);
}

// c += A·B on the tensor cores, 16×16 FP16 A (4 registers per lane) times 16×8 FP16 B (2), FP32 C (lesson 04).
// Lane (g = lane / 4, t = lane % 4) holds, in this order: a[0] row g and a[1] row g + 8 of A at k {2t, 2t+1}, a[2]
// row g and a[3] row g + 8 at k {2t+8, 2t+9}; B column g at k {2t, 2t+1} (b0) and {2t+8, 2t+9} (b1); C rows g
// (c[0], c[1]) and g + 8 (c[2], c[3]) at columns 2t and 2t + 1.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The unfused route's first kernel: W[n, k] = q[n, k] · scale[n, k / 128] in FP16, one thread per packed word.
// dequant8 gives (q0, q4) (q1, q5) (q2, q6) (q3, q7); a byte permute per output word puts them back in K order.
__global__ void dequant_int4_kernel(const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
                                    __half* __restrict__ W, int N, int K) {
    const size_t words = (size_t)N * K / 8;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < words; c += (size_t)gridDim.x * blockDim.x) {
        const size_t n = c * 8 / K, k = c * 8 % K;
        uint32_t w[4];
        dequant8(uint32_t(Wq[c]), w);
        const __half2 s = __half2half2(scales[n * (K / GROUP) + k / GROUP]);
        for (int i = 0; i < 4; ++i) w[i] = h2_bits(__hmul2(bits_h2(w[i]), s));
        reinterpret_cast<int4*>(W)[c] = make_int4(__byte_perm(w[0], w[1], 0x5410), __byte_perm(w[2], w[3], 0x5410),
                                                  __byte_perm(w[0], w[1], 0x7632), __byte_perm(w[2], w[3], 0x7632));
    }
}

// The decode GEMV. The weights are the mma's A operand (16 output rows n per instruction) and x its B operand
// (8 tokens m), so the instruction computes a 16 × 8 tile of yᵀ and at M ≤ 8 no weight row is padding.
// A block computes outputs n0 … n0 + 15 for tokens m0 … m0 + 7 (rows past N re-read row N − 1, tokens past M are
// zeros; neither is stored). Its 8 warps split K in blocks of 128 weights, one scale group each: warp w takes
// K blocks w, w + 8, w + 16, …
// In K block kb, lane (g, t) loads 16 bytes of weight rows n0 + g and n0 + g + 8: the 32 weights
// k = 128·kb + 32t … + 31, which dequant32 turns into 16 half2 words, and x of token m0 + g at the same 32 k
// (B's column g = token m0 + g), paired to match. The mma's K positions need not be the physical ones: a dot
// product does not care about the order of its terms, as long as each weight meets its own x. Eight mma steps
// take the 16 words two at a time.
// The sums are Σ q·x over the K block; the group's scale multiplies them once, after the mma (s·Σ q·x = Σ s·q·x).
__global__ void __launch_bounds__(THREADS)
gemv_int4_kernel(const __half* __restrict__ x, const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
                 __half* __restrict__ y, int M, int N, int K) {
    __shared__ float red[WARPS][32][4];  // each warp's 16 × 8 tile of sums, in its lanes' C order
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * 16, groups = K / GROUP;
    const int row_lo = min(n0 + g, N - 1), row_hi = min(n0 + g + 8, N - 1);
    // Where the lane's data of K block 0 start; K block kb is 16 words (W) or 128 halves (x) further on.
    const int32_t* w_lo = Wq + (size_t)row_lo * (K / 8) + 4 * t;
    const int32_t* w_hi = Wq + (size_t)row_hi * (K / 8) + 4 * t;
    const __half* s_lo = scales + (size_t)row_lo * groups;
    const __half* s_hi = scales + (size_t)row_hi * groups;
    for (int m0 = blockIdx.y * 8; m0 < M; m0 += 8 * gridDim.y) {  // once, unless M needs more than 65535 grid rows
        const bool has_x = m0 + g < M;
        const __half* xg = x + (size_t)(has_x ? m0 + g : 0) * K + 32 * t;

        float acc[4] = {};  // C: rows g, g (tokens 2t, 2t + 1), then rows g + 8, g + 8
        for (int kb = warp; kb < groups; kb += WARPS) {
            // BEGIN EXERCISE 07.b: one K block: unpack, eight mma steps, then the scale
            // TODO: add this K block's contribution to acc. Load the lane's 16 bytes of rows lo and hi (int4
            // loads at w_lo / w_hi + 16·kb) and unpack each with dequant32; load x's 32 halves for this lane
            // (4 int4 loads at xg + 128·kb; zeros when !has_x) and pair them with pair_x; run the mma over the
            // 16 words into a fresh float[4] (step j takes words 2j and 2j + 1: which goes in which A register?);
            // then multiply each sum by its row's scale for this group and add it to acc. Roughly 20 lines.
            (void)w_lo; (void)w_hi; (void)xg; (void)s_lo; (void)s_hi; (void)has_x;
            // END EXERCISE
        }

        // The warps' tiles, added: slot (lane l, e) is output n0 + l/4 + 8·(e/2) of token m0 + 2·(l%4) + e%2.
        for (int e = 0; e < 4; ++e) red[warp][lane][e] = acc[e];
        __syncthreads();
        if (threadIdx.x < 128) {
            const int l = threadIdx.x / 4, e = threadIdx.x % 4;
            float sum = 0.f;
            for (int w = 0; w < WARPS; ++w) sum += red[w][l][e];
            const int n = n0 + l / 4 + 8 * (e / 2), m = m0 + 2 * (l % 4) + e % 2;
            if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
        }
        __syncthreads();  // red is read before the next token tile writes it
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The Python wrappers refuse K % 128 != 0 with a clear message; here a bad call does nothing rather than read out
// of bounds.
EXPORT void dequant_int4(const int32_t* q, const __half* scales, __half* W, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(W)) return;
    const size_t words = (size_t)N * K / 8;
    const int blocks = (int)((words + 255) / 256 < 4096 ? (words + 255) / 256 : 4096);  // then a grid-stride loop
    if (blocks) dequant_int4_kernel<<<blocks, 256, 0, stream>>>(q, scales, W, N, K);
}

EXPORT void gemv_int4(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                      cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q) || M <= 0 || N <= 0) return;
    const int token_tiles = (M + 7) / 8;
    gemv_int4_kernel<<<dim3((N + 15) / 16, token_tiles < 65535 ? token_tiles : 65535), THREADS, 0, stream>>>(
        x, q, scales, y, M, N, K);
}
