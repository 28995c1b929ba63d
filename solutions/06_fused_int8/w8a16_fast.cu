// Lesson 06's fast kernel (solutions/ only; the teaching kernels, with the exercises, are in w8a16.cu). It has
// the teaching file's dequant16 (the same code) and adds tensor cores, a tiled kernel, weights in tiles, and
// programmatic dependent launch (lesson 11).
//
// INT8 weights, FP16 activations (W8A16): y[M,N] = x[M,K] · Ŵ[N,K]ᵀ with Ŵ = q · scale, q int8
// [N, K], scale fp16 [N, K/128] (symmetric, one scale per 128 weights along K; harness/quant.py is the
// reference). And W8A8: x quantized per token to INT8 at run time, so both operands are INT8.
//
// At M ≤ 16 every weight is used for M multiply-adds only, so the floor is the time to read the bytes: INT8
// weights halve them against FP16, if nothing else is added. The kernels:
//   dequant_w8   q, scale → FP16 W in memory (the unfused route: +2 bytes written and read per weight);
//   gemv_f16     y = x · Wᵀ for FP16 W: the GEMV the unfused route runs after dequant_w8;
//   gemv_w8a16   the fused decode kernel (M ≤ 16): the same GEMV reading q and scale, dequantizing in
//                registers. The two GEMVs are one template: they differ only in how a lane's 16 weights
//                become 8 half2 words.
//   gemv_w8a16_tiles  the same fused GEMV on q stored in 16-row tiles (quant.to_tiles): the same bytes in
//                the order the kernel reads them;
//   gemm_w8a16   the fused tiled kernel for larger M: cp.async tiles in shared memory, weights
//                dequantized from shared memory straight into mma fragments, split-K for skinny grids;
//   linear_w8a16 what a model calls: the GEMV up to M = 16, the tiled kernel above;
//   linear_w8a8  the W8A8 path: x quantized per token (quantize_tokens_kernel), then the same tiled kernel
//                with INT8 x and the INT8 tensor-core instruction, both scales applied in the epilogue.
//
// Why tensor cores in a memory-bound kernel: with CUDA-core FMAs, each weight costs M multiply-adds plus
// the conversions of x, and by M = 4 the arithmetic, not the memory, sets the time (the lesson's notes have
// the numbers). One mma.sync does 16 tokens × 8 outputs × 16 weights: up to M = 16 the
// arithmetic is then nearly free, and the kernel stays memory-bound.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

// Programmatic dependent launch (PDL, sm_90+; lesson 11). Off unless set_pdl(1): the decode step turns it on. A
// kernel launched with it may start while the kernel before it in the stream still runs, so before pdl_wait(),
// which returns once that kernel has finished and its writes are visible, it reads only a layer's constants
// (weights, scales, codebook) and writes nothing.
// pdl_trigger() lets the next kernel start once every block of this one has started. Launched without the
// attribute, both are no-ops; kernels that do not call pdl_wait() are never launched with it.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
static bool g_pdl = false;
EXPORT void set_pdl(int on) { g_pdl = on != 0; }
template <typename... P, typename... A>
static void launch_pdl(void (*kernel)(P...), dim3 grid, int threads, size_t smem, cudaStream_t stream, A... args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t cfg = {grid, dim3(threads), smem, stream, &attr, g_pdl ? 1u : 0u};
    cudaLaunchKernelEx(&cfg, kernel, args...);
}

constexpr int GROUP = 128, WARPS = 8 /* per block, splitting K */, THREADS = 32 * WARPS;
constexpr int U = 2;  // 64-wide K blocks a warp loads before using the first

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// 16 int8 → 8 half2 (weights k, k+1 in word k/2), times the group's scale. With the sign bit flipped,
// byte b is the unsigned b + 128; placed as the low mantissa byte of the half 1024 (0x6400) it is the
// half 1024 + b + 128, exactly, and one subtraction of 1152 leaves b. Per pair of weights: one
// byte_perm, one HSUB2, one HMUL2; no int→float conversion instruction.
__device__ __forceinline__ void dequant16(const int4 v, __half2 s, uint32_t (&w)[8]) {
    const uint32_t words[4] = {uint32_t(v.x), uint32_t(v.y), uint32_t(v.z), uint32_t(v.w)};
    const __half2 magic = __float2half2_rn(1152.0f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t u = words[j] ^ 0x80808080u;
        // selector digits, high byte first: 4 = 0x64 from the second operand; 0..3 = bytes of u
        w[2 * j] = h2_bits(__hmul2(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4140u)), magic), s));
        w[2 * j + 1] = h2_bits(__hmul2(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4342u)), magic), s));
    }
}

// A weight is read once: skip L1, and ask L2 to fetch the surrounding 256 bytes of the row (the
// neighbouring lanes' and warps' pieces), so DRAM sees long bursts.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
__device__ __forceinline__ int4 load_stream(const void* p) {
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
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
    static constexpr int LOADS = 1, WORDS = 8 * LOADS, KB = 64 * LOADS;  // 16 int8 per load
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
// products are the same. (Marlin reorders the weights offline to the same end.)
// M > 16: grid.y gives each 16 tokens their own blocks, which re-read W: correct for any M, fast only to 16.
//
// TILES: the weights stored in 16-row tiles (quant.to_tiles, done once offline): tile [K/64][16 rows][64
// bytes], so the 1 KB of a tile's K block is contiguous and a block (one tile, R = 2) reads one contiguous
// stream, as lesson 12's pure read does. Row-major, the same block reads 64 bytes from each of its 16 rows
// per K block, K bytes apart. Same loads, same arithmetic, the same result bit for bit; only the addresses
// differ (lessons/06_fused_int8/notes.md has the measurements). LOW: M ≤ 8, so x's rows g + 8 are zero, never loaded.
constexpr int GEMV_MIN_BLOCKS = 1;
// R: n8 tiles per block (16 tokens × 8·R outputs); UU: K blocks each warp loads before using the first.
template <class WF, int R, bool TILES = false, bool LOW = false, int UU = U>
__global__ void __launch_bounds__(THREADS, TILES ? (UU == 1 || LOW ? 32 : 16) / WARPS : GEMV_MIN_BLOCKS)
gemv_kernel(const __half* __restrict__ x, const typename WF::T* __restrict__ W, const __half* __restrict__ scales,
            __half* __restrict__ y, int M, int N, int K, bool pdl) {
    pdl_trigger();
    __shared__ float red[WARPS][R][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * 8 * R, m0 = blockIdx.y * 16;
    const bool row_lo = m0 + g < M, row_hi = !LOW && m0 + g + 8 < M;  // x rows this lane feeds (others are zero)
    constexpr int KB = WF::KB, WORDS = WF::WORDS, XL = WORDS / 4;  // XL: 16-byte loads of x per row
    static_assert(!TILES || (R == 2 && KB == 64), "a tile is 16 rows × 64-wide K blocks: one per block");
    constexpr size_t WSTEP = TILES ? 16 * KB : KB;  // elements from a row's K block to its next
    const __half* x_lo = x + (size_t)(row_lo ? m0 + g : 0) * K + 2 * WORDS * t;
    const __half* x_hi = x + (size_t)(row_hi ? m0 + g + 8 : 0) * K + 2 * WORDS * t;
    const typename WF::T* wrow[R];
    const __half* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // a row past N re-reads row N-1 (tiles: a zero row); its outputs are not stored
        const int n = min(n0 + 8 * r + g, N - 1);
        wrow[r] = TILES ? W + (size_t)blockIdx.x * 16 * K + (8 * r + g) * KB + 2 * WORDS * t
                        : W + (size_t)n * K + 2 * WORDS * t;
        srow[r] = scales ? scales + (size_t)n * (K / GROUP) : nullptr;
    }
    float acc[R][4] = {};
    const int kblocks = K / KB;
    // x comes from the previous kernel. Under PDL the first step's weights are asked of L2 before waiting for it
    // (a prefetch holds no register: loading them here would cost this kernel a block per SM at R = 2).
#pragma unroll
    for (int u = 0; u < UU; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (pdl && warp + u * WARPS < kblocks) prefetch_l2(wrow[r] + (size_t)(warp + u * WARPS) * WSTEP);
    // With few tiles (two K blocks in flight per warp) and M ≤ 8, the block first asks L2 for its tile's scales: 16
    // consecutive rows, one slab of 16·K/64 bytes. Each K block's scale loads then hit L2 instead of DRAM: a little
    // faster at N = 4096; with two or more tiles per SM, or at M > 8, no gain (lessons/06_fused_int8/notes.md).
    if (TILES && LOW && UU == 2 && scales) {
        const char* slab = reinterpret_cast<const char*>(scales + (size_t)n0 * (K / GROUP));
        const int bytes = min(16, N - n0) * (K / GROUP) * (int)sizeof(__half);
        for (int off = threadIdx.x * 128; off < bytes; off += THREADS * 128) prefetch_l2(slab + off);
    }
    pdl_wait();
#pragma unroll 1  // (left to itself, nvcc unrolls the tiled M ≤ 8 kernel's loop 3 times and spills at 64 registers)
    for (int kb0 = warp; kb0 < kblocks; kb0 += WARPS * UU) {
        int4 wv[UU][R][WF::LOADS], xv[UU][2][XL];
#pragma unroll
        for (int u = 0; u < UU; ++u) {  // all of this step's loads first: UU·R weight loads in flight
            const int kb = kb0 + u * WARPS;  // the block's warps read adjacent 64-wide blocks together
            if (kb >= kblocks) continue;
#pragma unroll
            for (int r = 0; r < R; ++r) WF::load(wrow[r] + (size_t)kb * WSTEP, wv[u][r]);
            const int4 zero = make_int4(0, 0, 0, 0);
#pragma unroll
            for (int i = 0; i < XL; ++i) {
                xv[u][0][i] = row_lo ? __ldg(reinterpret_cast<const int4*>(x_lo + kb * KB) + i) : zero;
                xv[u][1][i] = row_hi ? __ldg(reinterpret_cast<const int4*>(x_hi + kb * KB) + i) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < UU; ++u) {
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
    for (int i = threadIdx.x; i < R * 32 * 4; i += THREADS) {
        const int r = i / 128, l = (i / 4) % 32, e = i % 4;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][r][l][e];
        const int m = m0 + l / 4 + 8 * (e / 2), n = n0 + 8 * r + 2 * (l % 4) + e % 2;
        if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
    }
}

template <class WF>
static void launch_gemv(const __half* x, const typename WF::T* W, const __half* scales, __half* y, int M, int N,
                        int K, cudaStream_t stream) {
    // 32 outputs per block when that still gives every SM a block, else 16: more loads per warp in
    // flight against more blocks (the sweep in lessons/06_fused_int8/notes.md: N = 8192 prefers 32, N = 4096 prefers 16).
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if ((N + 31) / 32 >= sms)
        launch_pdl(gemv_kernel<WF, 4>, dim3((N + 31) / 32, (M + 15) / 16), THREADS, 0, stream, x, W, scales, y, M, N, K, g_pdl);
    else
        launch_pdl(gemv_kernel<WF, 2>, dim3((N + 15) / 16, (M + 15) / 16), THREADS, 0, stream, x, W, scales, y, M, N, K, g_pdl);
}

// The fused GEMV on weights in 16-row tiles: one tile per block. With at least two tiles per SM, each warp keeps
// one K block in flight and four blocks share an SM (≤ 64 registers); with fewer tiles, each warp keeps two
// (lessons/06_fused_int8/notes.md: the sweep behind both).
// Under PDL a kernel's blocks start while the kernel before it still holds part of each SM, and fill the SMs that
// have room first: four of these blocks on some SMs where the grid has three or fewer per SM, and this memory-bound
// kernel then runs at the pace of its most crowded SMs (lesson 10's kernel met the same). Up to 8 tokens, asking for
// shared memory that lets only the grid's share of blocks fit on an SM keeps them spread: lesson 11's W8A16 step at
// batch 1 and 4 runs faster. At 16 tokens it made that step slower, so there the blocks are left alone
// (the request also takes the SM's L1, where the blocks of an SM share x; lessons/06_fused_int8/notes.md).
template <bool LOW, int UU>
static void launch_tiles(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                         cudaStream_t stream) {
    const auto kernel = gemv_kernel<I8W, 2, true, LOW, UU>;
    static int sms = 0, sm_smem = 0, fit = 0;  // fit: blocks per SM that registers and static shared memory allow
    if (!sms) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, THREADS, 0);
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_smem / 2 + 1);
    }
    const dim3 grid((N + 15) / 16, LOW ? 1 : (M + 15) / 16);
    const int share = (grid.x * grid.y + sms - 1) / sms;
    const size_t smem = g_pdl && LOW && share < fit ? sm_smem / (share + 1) + 1 : 0;  // share + 1 do not fit
    launch_pdl(kernel, grid, THREADS, smem, stream, x, q, scales, y, M, N, K, g_pdl);
}
static void launch_gemv_tiles(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                              cudaStream_t stream) {
    if constexpr (I8W::KB == 64) {  // the tile's K block
        static int sms = 0;
        if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        const bool many = (N + 15) / 16 >= 2 * sms;
        if (M <= 8) (many ? launch_tiles<true, 1> : launch_tiles<true, 2>)(x, q, scales, y, M, N, K, stream);
        else (many ? launch_tiles<false, 1> : launch_tiles<false, 2>)(x, q, scales, y, M, N, K, stream);
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

// ---------------------------------------------------------------------------------------------
// The tiled kernel (M > 16, and the W8A8 GEMM). A block computes a 128 × BM tile of yᵀ (128 outputs, BM
// tokens); K goes through shared memory in 128-wide tiles (one scale group) in a STAGES-deep cp.async ring,
// as in lesson 04. Four warps across the outputs (× WM across tokens) each own 32 outputs × BM/WM tokens.
//
// The weights are the mma's A operand, the tokens its B operand: y's transpose is computed (yᵀ = Ŵ · xᵀ).
// With the GEMV's K renaming, lane (g, t) takes 16 consecutive K positions 16t … 16t+15 of a 64-wide
// chunk, from weight rows g and g+8 of an m16 tile and from token row g of an n8 tile, so every shared-
// memory read is a 16-byte LDS.128. An A fragment needs four registers from two rows; the weights come out
// of dequant16 as fresh values, which the compiler places straight into those registers. A B fragment
// needs two consecutive words of one token row: two registers of one LDS.128 as they are. (Tokens as A
// would need four register moves per fragment: 450 IMAD.MOVs per K tile, more than 3 per HMMA, in the
// lesson's notes.) No FP16 copy of W exists anywhere, not even in shared memory.
//
// Shared layout per stage, chunk by chunk: x as [2][BM][64 elements], W as [2][128][64 bytes]. A phase of
// LDS.128 serves 8 lanes, here rows g and g+1: FP16 rows are 128 bytes, so row r's 16-byte pieces are
// stored swapped in pairs when r is odd (piece p at p ^ (r & 1)) and the two rows cover all 32 banks.
// 64-byte rows store piece p at p ^ ((r / 2) % 4): two adjacent rows still fill 128 bytes, and the 8 rows
// an ldmatrix phase reads (same piece, rows r … r+7) land on 8 different 16-byte bank groups.
//
// Activation formats: FP16 x with W dequantized (mma m16n8k16 f16, FP32 accumulators), or INT8 x with W
// used as it is (mma m16n8k32 s8, INT32 accumulators), where both operands come from ldmatrix.
//
// Split-K: with few tiles (N = 4096 gives 32 columns of tiles) the grid cannot fill 132 SMs nor keep
// enough bytes in flight. gridDim.z blocks then share a tile's K range; each writes its partial tile to a
// workspace and the last to arrive (a counter per tile) adds the partials in a fixed order and stores y.
constexpr int TILE_STAGES = 4;  // cp.async ring depth
constexpr int TILE_STAGES_64 = 3;  // W8A16's 64-token tile: 96 KB instead of 128 KB, two blocks per SM (lessons/06_fused_int8/notes.md)

constexpr int TILE_SPLIT_BLOCKS = 2;  // blocks per SM a wave counts (at most what fits)
constexpr int TBN = 128, TBK = 128, TWN = 4;  // block tile width, K tile (= GROUP), warps across N

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
// Weights: a block reads 128 bytes of each of its rows per K tile; the hint has L2 fetch the next 128 too.
__device__ __forceinline__ void cp_async16_stream(void* smem, const void* gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma16832(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct ActF16 {  // W8A16
    using T = __half;
    using Acc = float;
    static constexpr int ROW = 128;  // bytes of a 64-wide chunk row of x
};
struct ActS8 {  // W8A8
    using T = int8_t;
    using Acc = int;
    static constexpr int ROW = 64;
};

// Where 16-byte piece p of row r of a chunk lives in shared memory (see the layout note above).
__device__ __forceinline__ int row64_piece(int r, int p) { return p ^ ((r >> 1) & 3); }
template <class AF> __device__ __forceinline__ int x_piece(int r, int p) { return AF::ROW == 128 ? p ^ (r & 1) : row64_piece(r, p); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((uint32_t)__cvta_generic_to_shared(p)));
}

// Epilogue scales: W8A16 has none (the scales were applied in dequant16); W8A8 multiplies the INT32 sum
// by the token's and the channel's scale.
struct Epilogue {
    const float* sx;   // [M] per-token scales (W8A8) or null
    const __half* sw;  // [N] per-channel scales (W8A8) or null
    __device__ float operator()(float acc, int m, int n) const {
        return sx ? acc * sx[m] * __half2float(sw[n]) : acc;
    }
};

template <class AF, int BM, int WM, int STAGES>
__global__ void __launch_bounds__(32 * WM * TWN, 1)  // the explicit 1 stops ptxas trading spills for occupancy
tiled_kernel(const typename AF::T* __restrict__ x, const int8_t* __restrict__ W, const __half* __restrict__ scales,
             __half* __restrict__ y, int M, int N, int K, Epilogue epi, typename AF::Acc* __restrict__ ws,
             int* __restrict__ counters) {
    using Acc = typename AF::Acc;
    // Warp tile: 32 weight rows (MT = 2 m16 tiles) × BM/WM tokens (NT = BM/WM/8 n8 tiles).
    constexpr int THREADS = 32 * WM * TWN, MT = TBN / TWN / 16, NT = BM / WM / 8;
    constexpr int X_BYTES = 2 * BM * AF::ROW, W_BYTES = 2 * TBN * 64, STAGE = X_BYTES + W_BYTES;
    constexpr int XPR = AF::ROW / 16, X_PIECES = 2 * BM * XPR, W_PIECES = 2 * TBN * 4;  // 16-byte pieces
    static_assert(X_PIECES % THREADS == 0 && W_PIECES % THREADS == 0, "pieces must split evenly over threads");
    constexpr int XN = X_PIECES / THREADS, WNP = W_PIECES / THREADS;
    extern __shared__ __align__(16) uint8_t smem[];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm0 = (warp / TWN) * (BM / WM), wn0 = (warp % TWN) * (TBN / TWN);
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.y * BM;
    const int ktiles = K / TBK, splits = gridDim.z;
    const int kt_begin = (int)((long)ktiles * blockIdx.z / splits), kt_end = (int)((long)ktiles * (blockIdx.z + 1) / splits);
    const int nk = kt_end - kt_begin;

    // This thread's copies. Piece j of the thread is piece threadIdx.x + j·THREADS of the tile: the same
    // column piece p, rows further on by a compile-time step, so one base pointer per operand serves all.
    static_assert(BM % (THREADS / XPR) == 0 && TBN % (THREADS / 4) == 0, "copy rows must not wrap");
    const int xr0 = threadIdx.x / XPR, xp = threadIdx.x % XPR, wr0 = threadIdx.x / 4, wp = threadIdx.x % 4;
    const uint8_t* xbase = reinterpret_cast<const uint8_t*>(x + (size_t)(m0 + xr0) * K) + xp * 16;
    const int8_t* wbase = W + (size_t)(n0 + wr0) * K + wp * 16;
    auto load_tile = [&](int kt, int stage) {
        uint8_t* base = smem + stage * STAGE;
        const size_t xk = (size_t)kt * TBK * sizeof(typename AF::T), wk = (size_t)kt * TBK;
#pragma unroll
        for (int j = 0; j < XN; ++j) {
            constexpr int ROWS = THREADS / XPR;  // rows one pass of the threads covers
            const int dr = (j * ROWS) % BM, c = (j * ROWS) / BM, r = xr0 + dr;
            const bool ok = m0 + r < M;
            const uint8_t* src = xbase + (size_t)dr * K * sizeof(typename AF::T) + c * 64 * sizeof(typename AF::T) + xk;
            cp_async16(base + (c * BM + r) * AF::ROW + x_piece<AF>(r, xp) * 16, ok ? src : (const uint8_t*)x, ok);
        }
#pragma unroll
        for (int j = 0; j < WNP; ++j) {
            constexpr int ROWS = THREADS / 4;
            const int dr = (j * ROWS) % TBN, c = (j * ROWS) / TBN, r = wr0 + dr;
            const bool ok = n0 + r < N;
            const int8_t* src = wbase + (size_t)dr * K + c * 64 + wk;
            cp_async16_stream(base + X_BYTES + (c * TBN + r) * 64 + row64_piece(r, wp) * 16, ok ? src : W, ok);
        }
    };

    // W8A16: the scales of this lane's 2·MT weight rows (g and g + 8 of each m16 tile), one tile ahead.
    const __half* srow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            srow[mt][h] = scales ? scales + (size_t)min(n0 + wn0 + 16 * mt + 8 * h + g, N - 1) * (K / GROUP) : nullptr;
    __half s_next[MT][2] = {};
    auto load_scales = [&](int kt) {
        if constexpr (sizeof(typename AF::T) == 2) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) s_next[mt][h] = kt < kt_end ? __ldg(srow[mt][h] + kt) : __ushort_as_half(0);
        }
    };

    Acc acc[MT][NT][4] = {};
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load_tile(kt_begin + s, s);
        cp_async_commit();
    }
    load_scales(kt_begin);
    for (int i = 0; i < nk; ++i) {
        __half s_cur[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) s_cur[mt][0] = s_next[mt][0], s_cur[mt][1] = s_next[mt][1];
        load_scales(kt_begin + i + 1);
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile i have landed...
        __syncthreads();              // ...and everyone's; everyone is also done with tile i - 1's stage
        if (i + STAGES - 1 < nk) load_tile(kt_begin + i + STAGES - 1, (i + STAGES - 1) % STAGES);
        cp_async_commit();

        const uint8_t* xs = smem + (i % STAGES) * STAGE;
        const uint8_t* wsm = xs + X_BYTES;
#pragma unroll
        for (int c = 0; c < 2; ++c) {  // two 64-wide chunks of the tile
            if constexpr (sizeof(typename AF::T) == 2) {
                // Weights: the A fragment of step j is {row g, row g+8, row g, row g+8} × words {2j, 2j, 2j+1,
                // 2j+1} of the lane's 16 weights (K renaming); dequant16 writes them where the mma wants them.
                uint32_t a[MT][4][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    uint32_t w[2][8];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = wn0 + 16 * mt + 8 * h + g;
                        dequant16(*reinterpret_cast<const int4*>(wsm + (c * TBN + row) * 64 + row64_piece(row, t) * 16),
                                  __half2half2(s_cur[mt][h]), w[h]);
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        a[mt][j][0] = w[0][2 * j]; a[mt][j][1] = w[1][2 * j];
                        a[mt][j][2] = w[0][2 * j + 1]; a[mt][j][3] = w[1][2 * j + 1];
                    }
                }
                // Tokens: the B fragment of step j is words 2j, 2j+1 of token g's 16 elements: two consecutive
                // registers of the 16-byte shared loads, as they are.
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int r = wm0 + 8 * nt + g;
                    uint32_t b[8];
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        const int4 v = *reinterpret_cast<const int4*>(xs + (c * BM + r) * AF::ROW + x_piece<AF>(r, 2 * t + q) * 16);
                        b[4 * q] = v.x; b[4 * q + 1] = v.y; b[4 * q + 2] = v.z; b[4 * q + 3] = v.w;
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j)
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) mma16816(acc[mt][nt], a[mt][j], b[2 * j], b[2 * j + 1]);
                }
            } else {
                // INT8 × INT8 needs no conversion, so nothing stands between shared memory and the fragments:
                // ldmatrix delivers both in the instruction's own K order (lesson 04), no renaming needed.
                uint32_t a[MT][2][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {  // lanes 0-15: rows 0-15, bytes 32j…; lanes 16-31: bytes 32j+16…
                        const int row = wn0 + 16 * mt + lane % 16;
                        ldmatrix_x4(a[mt][j], wsm + (c * TBN + row) * 64 + row64_piece(row, 2 * j + lane / 16) * 16);
                    }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int r = wm0 + 8 * nt + lane % 8;  // lane group i: token rows, bytes 16i…
                    uint32_t b[4];
                    ldmatrix_x4(b, xs + (c * BM + r) * AF::ROW + x_piece<AF>(r, lane / 8) * 16);
#pragma unroll
                    for (int j = 0; j < 2; ++j)
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) mma16832(acc[mt][nt], a[mt][j], b[2 * j], b[2 * j + 1]);
                }
            }
        }
    }
    cp_async_wait<0>();

    // Split K: publish this block's partial tile; the last block of the tile adds all partials (in split
    // order, so the result does not depend on which block came last) and goes on to the store.
    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        Acc* mine = ws + ((size_t)tile * splits + blockIdx.z) * (BM * TBN);
        // slot s of thread i at s·THREADS + i: the threads of a warp store consecutive words
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) mine[((mt * NT + nt) * 4 + e) * THREADS + threadIdx.x] = acc[mt][nt][e];
        __threadfence();
        __syncthreads();
        __shared__ int last;
        if (threadIdx.x == 0) {
            last = atomicAdd(counters + tile, 1) == splits - 1;
            if (last) counters[tile] = 0;  // ready for the next launch
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        const Acc* part = ws + (size_t)tile * splits * (BM * TBN) + threadIdx.x;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0;
        for (int z = 0; z < splits; ++z, part += BM * TBN)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][nt][e] += __ldcg(part + ((mt * NT + nt) * 4 + e) * THREADS);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                // the tile is yᵀ: rows are outputs n, columns tokens m
                const int n = n0 + wn0 + 16 * mt + g + 8 * (e / 2), m = m0 + wm0 + 8 * nt + 2 * t + e % 2;
                if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(epi(float(acc[mt][nt][e]), m, n));
            }
}

// Split-K workspace and tile counters, grown on demand and kept (counters return to zero by themselves).
// One stream at a time: two concurrent launches would share them.
static void* g_ws = nullptr;
static size_t g_ws_bytes = 0;
static int* g_counters = nullptr;
static int g_counter_n = 0;
static bool reserve_split(size_t bytes, int tiles, cudaStream_t stream) {
    if (bytes > g_ws_bytes) {
        if (g_ws) cudaFree(g_ws);
        if (cudaMalloc(&g_ws, bytes) != cudaSuccess) { g_ws = nullptr; g_ws_bytes = 0; cudaGetLastError(); return false; }
        g_ws_bytes = bytes;
    }
    if (tiles > g_counter_n) {
        if (g_counters) cudaFree(g_counters);
        if (cudaMalloc(&g_counters, tiles * sizeof(int)) != cudaSuccess) {
            g_counters = nullptr; g_counter_n = 0; cudaGetLastError(); return false;
        }
        cudaMemsetAsync(g_counters, 0, tiles * sizeof(int), stream);
        g_counter_n = tiles;
    }
    return true;
}

template <class AF, int BM, int WM, int STAGES>
static void launch_tiled_cfg(const typename AF::T* x, const int8_t* W, const __half* scales, __half* y, int M, int N,
                             int K, Epilogue epi, cudaStream_t stream) {
    constexpr int THREADS = 32 * WM * TWN, SMEM = STAGES * (2 * BM * AF::ROW + 2 * TBN * 64);
    static bool configured = false;
    if (!configured) {
        cudaFuncSetAttribute(tiled_kernel<AF, BM, WM, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
        configured = true;
    }
    static int sms = 0, per_sm = 0;
    if (!sms) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tiled_kernel<AF, BM, WM, STAGES>, THREADS, SMEM);
        per_sm = per_sm < 1 ? 1 : per_sm;
    }
    const dim3 tiles((N + TBN - 1) / TBN, (M + BM - 1) / BM);
    const int ntiles = tiles.x * tiles.y, ktiles = K / TBK;
    // Split K so the blocks fill whole waves: the time is about waves / splits (each split does 1/splits of
    // the work), so take the split with the fewest waves per split; ties go to fewer splits (less to add
    // up). At least 4 K tiles per split, so the pipeline still runs.
    const int slots = sms * (per_sm < TILE_SPLIT_BLOCKS ? per_sm : TILE_SPLIT_BLOCKS);
    int splits = 1;
    for (int s = 2; s <= 16 && s <= ktiles / 4; ++s) {
        const long waves = ((long)ntiles * s + slots - 1) / slots, best = ((long)ntiles * splits + slots - 1) / slots;
        if (waves * splits < best * s) splits = s;
    }
    if (splits > 1 && !reserve_split((size_t)ntiles * splits * BM * TBN * sizeof(typename AF::Acc), ntiles, stream))
        splits = 1;
    tiled_kernel<AF, BM, WM, STAGES><<<dim3(tiles.x, tiles.y, splits), THREADS, SMEM, stream>>>(
        x, W, scales, y, M, N, K, epi, static_cast<typename AF::Acc*>(g_ws), g_counters);
}

template <class AF>
static void launch_tiled(const typename AF::T* x, const int8_t* W, const __half* scales, __half* y, int M, int N, int K,
                         Epilogue epi, cudaStream_t stream) {
    // The block's rows follow M: fewer padded rows at small M, more reuse of each dequantized weight at large M.
    if (M <= 32) launch_tiled_cfg<AF, 32, 1, TILE_STAGES>(x, W, scales, y, M, N, K, epi, stream);
    else if (M <= 64) launch_tiled_cfg<AF, 64, 1, sizeof(typename AF::T) == 2 ? TILE_STAGES_64 : TILE_STAGES>(x, W, scales, y, M, N, K, epi, stream);
    else launch_tiled_cfg<AF, 128, 2, TILE_STAGES>(x, W, scales, y, M, N, K, epi, stream);
}

// Per-token INT8 quantization (W8A8's activations): one block per row, scale = absmax / 127,
// q = round-to-nearest-even(x / scale), the same arithmetic as harness.quant.quantize_per_token_int8.
constexpr int QTHREADS = 256;
__global__ void __launch_bounds__(QTHREADS)
quantize_tokens_kernel(const __half* __restrict__ x, int8_t* __restrict__ xq, float* __restrict__ sx, int K) {
    const int row = blockIdx.x;
    const __half* xr = x + (size_t)row * K;
    int8_t* qr = xq + (size_t)row * K;
    __shared__ float warp_max[QTHREADS / 32];
    float m = 0.f;
    for (int k = threadIdx.x; k < K; k += QTHREADS) m = fmaxf(m, fabsf(__half2float(xr[k])));
#pragma unroll
    for (int o = 16; o; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    m = 0.f;
#pragma unroll
    for (int w = 0; w < QTHREADS / 32; ++w) m = fmaxf(m, warp_max[w]);
    const float scale = m / 127.f, div = fmaxf(scale, 1.17549435e-38f);  // FLT_MIN, as the reference
    if (threadIdx.x == 0) sx[row] = scale;
    for (int k = threadIdx.x; k < K; k += QTHREADS) {
        const int q = __float2int_rn(__half2float(xr[k]) / div);
        qr[k] = (int8_t)max(-127, min(127, q));
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

// q in 16-row tiles (quant.to_tiles): int8 [ceil(N/16), K/64, 16, 64], rows past N zero; scales as gemv_w8a16's.
EXPORT void gemv_w8a16_tiles(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                             cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    launch_gemv_tiles(x, q, scales, y, M, N, K, stream);
}

EXPORT void gemv_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    if (K % F16W::KB || !aligned16(x) || !aligned16(W)) return;
    launch_gemv<F16W>(x, W, nullptr, y, M, N, K, stream);
}

EXPORT void dequant_w8(const int8_t* q, const __half* scales, __half* W, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(W)) return;
    const size_t chunks = (size_t)N * K / 16;
    static int sms = 0;  // a grid-stride loop: at most 16 blocks per SM
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t cap = (size_t)sms * 16;
    const int blocks = (int)((chunks + 255) / 256 < cap ? (chunks + 255) / 256 : cap);
    if (blocks) dequant_w8_kernel<<<blocks, 256, 0, stream>>>(q, scales, W, N, K);
}

// The tiled kernel for any M (K a multiple of 128); linear_w8a16 is what a model layer calls.
EXPORT void gemm_w8a16(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                       cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    launch_tiled<ActF16>(x, q, scales, y, M, N, K, Epilogue{nullptr, nullptr}, stream);
}

EXPORT void linear_w8a16(const __half* x, const int8_t* q, const __half* scales, __half* y, int M, int N, int K,
                         cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q)) return;
    if (M <= 16) launch_gemv<I8W>(x, q, scales, y, M, N, K, stream);
    else launch_tiled<ActF16>(x, q, scales, y, M, N, K, Epilogue{nullptr, nullptr}, stream);
}

// W8A8 end to end: quantize x per token (into xq, sx), then the INT8 GEMM with its scaling epilogue.
EXPORT void linear_w8a8(const __half* x, const int8_t* q, const __half* sw, int8_t* xq, float* sx, __half* y, int M,
                        int N, int K, cudaStream_t stream) {
    if (K % TBK || !aligned16(x) || !aligned16(q) || !aligned16(xq)) return;
    quantize_tokens_kernel<<<M, QTHREADS, 0, stream>>>(x, xq, sx, K);
    launch_tiled<ActS8>(xq, q, nullptr, y, M, N, K, Epilogue{sx, sw}, stream);
}
