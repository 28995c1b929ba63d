// Lesson 07's fast kernels (solutions/ only; the lesson's teaching kernels are in w4a16.cu beside it). Half the
// bytes of INT8 for the same weights, so at decode the floor halves again; but each 16-byte load now brings 32
// weights to convert instead of 16, and the latency of that work, not the memory, sets the time: in the lesson's
// profile neither DRAM nor the issue slots come near their peak.
// lessons/07_fused_int4/notes.md has what each choice below was measured against.
// Ŵ = q · scale (symmetric, q in −8..7) or Ŵ = (q − zero) · scale (asymmetric, q in 0..15), per group of 128
// weights along K; q packed 8 per int32, weight k in bits 4·(k % 8) of word k / 8 (harness/quant.py's pack_int4).
// scale fp16 [N, K/128], zero uint8 [N, K/128].
//   gemv_w4a16, gemv_w4a16_asym  the fused decode GEMV (tensor cores), any M (re-reads W per 16 tokens);
//   gemv_w4a16_tiles(_asym)      the same GEMV on packed weights stored in 16-row tiles (quant.to_tiles):
//                                the same bytes in the order the kernel reads them (where the units outnumber
//                                the blocks that fit, one generation of blocks loops over them);
//   gemm_w4a16, gemm_w4a16_asym  the fused tiled kernel for larger M: cp.async stages, split-K;
//   linear_w4a16, linear_w4a16_asym  what a model calls: the GEMV up to M = 16, then the tiled kernel;
//   dequant_w4                   the unfused route's first kernel: q, scale → FP16 W in memory.
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

// PF: 128-wide K blocks of weights a warp has in flight while it converts one (2 takes more registers, which leaves
// room for fewer warps per SM).
constexpr int GEMV_MIN_BLOCKS = 2;  // blocks per SM the GEMV must fit (caps its registers)
constexpr int GROUP = 128, KB = 128, WARPS = 8 /* per block, splitting K */, THREADS = 32 * WARPS, PF = 1;
constexpr int RING_UNROLL = PF + 1;  // the K loop unrolled by the ring's length

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// (a & b) | c in one instruction; written out, ptxas may emit two LOP3 instead of one.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));  // 0xea = (A & B) | C
    return d;
}

// A group's zero point in the two forms dequant8 subtracts: 1024 + zero and 64 + zero (half2, both halves).
struct Zero {
    __half2 lo, hi;
};
template <bool SYM>
__device__ __forceinline__ Zero make_zero(const uint8_t* zeros, size_t i) {
    if (SYM) return {__float2half2_rn(1032.0f), __float2half2_rn(72.0f)};  // q + 8 after the XOR: zero = 8
    const int z = __ldg(zeros + i);
    return {__half2half2(__ushort_as_half((unsigned short)(0x6400 | z))), __float2half2_rn(64.0f + z)};
}

// One packed word (8 weights) → 4 half2 of q − zero, exact small integers (the scale comes later: after the
// mma in the GEMV, one multiply per sum instead of one per weight pair; see scale_words for the tiled kernel).
// A nibble n ANDed into the low mantissa bits under the exponent 0x64 is the half 1024 + n exactly; one LOP3
// does that for two nibbles 16 bits apart (nibbles i and i + 4), so output word i holds weights i and i + 4 of
// the 8, and x is paired to match (pair_x). The odd nibbles are used where they lie, 4 bits up: the half is then
// 1024 + 16n, and a multiply by 1/16 (exact) inside an HFMA2 brings it to 64 + n, which saves the shifts: one
// shift per word (by 8) for nibbles 2, 3, 6, 7. Then subtract the zero point (1024 + zero or 64 + zero).
// Symmetric q (−8..7, two's complement nibbles) becomes q + 8 by flipping each nibble's top bit (one XOR per
// word), zero = 8. The XOR could fold into the LOP3s: (w & 0x000F000F) ^ 0x64086408 is one LOP3 (truth table
// 0x6a) with the same result as ((w ^ 0x88888888) & 0x000F000F) | 0x64006400, and 0x64806480 does it for the
// odd nibbles; Marlin stores q + 8 and needs no XOR.
template <bool SYM>
__device__ __forceinline__ void dequant8(uint32_t word, Zero z, uint32_t (&w)[4]) {
    const uint32_t u = SYM ? word ^ 0x88888888u : word, v = u >> 8, magic = 0x64006400u;
    const __half2 sixteenth = __float2half2_rn(0.0625f), neg_hi = __hneg2(z.hi);
    w[0] = h2_bits(__hsub2(bits_h2(and_or(u, 0x000F000Fu, magic)), z.lo));
    w[1] = h2_bits(__hfma2(bits_h2(and_or(u, 0x00F000F0u, magic)), sixteenth, neg_hi));
    w[2] = h2_bits(__hsub2(bits_h2(and_or(v, 0x000F000Fu, magic)), z.lo));
    w[3] = h2_bits(__hfma2(bits_h2(and_or(v, 0x00F000F0u, magic)), sixteenth, neg_hi));
}

// 32 packed weights (one 16-byte load) → 16 half2 of q − zero: word 4q + i holds weights 8q + i and 8q + i + 4.
template <bool SYM>
__device__ __forceinline__ void dequant32(const int4 v, Zero z, uint32_t (&w)[16]) {
    dequant8<SYM>(uint32_t(v.x), z, *reinterpret_cast<uint32_t(*)[4]>(w));
    dequant8<SYM>(uint32_t(v.y), z, *reinterpret_cast<uint32_t(*)[4]>(w + 4));
    dequant8<SYM>(uint32_t(v.z), z, *reinterpret_cast<uint32_t(*)[4]>(w + 8));
    dequant8<SYM>(uint32_t(v.w), z, *reinterpret_cast<uint32_t(*)[4]>(w + 12));
}

// The tiled kernel scales the weights, not the sums: its accumulators run over all of K, and per K tile a lane
// holds 64 weight pairs and 32 or 64 sums, so a partial sum per group would save at most half the multiplies and
// cost as many registers as the sums. The GEMV, with 32 pairs against 4 sums per K block, scales the sums.
template <int N> __device__ __forceinline__ void scale_words(uint32_t* w, __half2 s) {  // Ŵ = (q − zero) · scale
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = h2_bits(__hmul2(bits_h2(w[i]), s));
}

// 8 halves x0..x7 (4 words, x0 x1 in the first) → the pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7) that match
// dequant32's weight pairs: one byte permute per word.
__device__ __forceinline__ void pair_x(const uint32_t* in, uint32_t* out) {
    out[0] = __byte_perm(in[0], in[2], 0x5410);  // low halves of x0x1 and x4x5
    out[1] = __byte_perm(in[0], in[2], 0x7632);  // high halves
    out[2] = __byte_perm(in[1], in[3], 0x5410);
    out[3] = __byte_perm(in[1], in[3], 0x7632);
}

__device__ __forceinline__ int4 load_stream(const void* p) {  // read once: skip L1, long L2 fetches
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A lane's 32 weights of output rows g (lo) and g + 8 (hi), from dequant32, against x of token g (b), paired
// the same way: eight mma.m16n8k16 steps, the weights as A (16 outputs), x as B (8 tokens).
__device__ __forceinline__ void mma_steps(float (&acc)[4], const uint32_t (&lo)[16], const uint32_t (&hi)[16],
                                          const uint32_t (&b)[16]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const uint32_t a[4] = {lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1]};
        mma16816(acc, a, b[2 * j], b[2 * j + 1]);
    }
}

// The decode GEMV. A block computes 16·R outputs × 8·NT tokens (NT = 1 up to M = 8, else 2; rows past M
// are zeros); its 8 warps split K in 128-wide blocks (one scale group) and add their partial tiles at the end.
// The weights are the mma's A operand, 16 output rows per m16 tile, and the tokens its B operand, so at M ≤ 8
// no half of the instruction is spent on padding (lesson 06 put x in A: 16 token rows for 1 real one).
// Lane (g = lane / 4, t = lane % 4) loads 16 bytes of weight rows g and g + 8 of each m16 tile: the 32
// weights k = 32t … 32t+31, which dequant32 turns into 16 half2 words; eight mma steps consume them (step j:
// words 2j and 2j + 1 as the fragment's K positions {2t, 2t+1} and {2t+8, 2t+9}). The physical K positions
// behind each logical one differ from the PTX layout, which is allowed because a dot product does not care
// about the order of its terms, as long as x's B fragment holds x at the same positions: the lane loads
// x[32t … 32t+31] of token g and pairs it like the weights.
//
// TILES: the weights stored in 16-row tiles (quant.to_tiles, done once offline): tile [K/128][16 rows][16 words],
// so the 1 KB a warp reads per m16 tile and K block is one contiguous piece, and the blocks stream their tiles
// one after the other (lesson 06, section (e)); the scales (and zeros) as tile [K/128][16 rows]. Rows past N are
// zeros. Nothing else changes: same lanes, same arithmetic, the same output bit for bit.
template <bool SYM, int R, int NT, bool TILES = false, bool PERSIST = false>
__global__ void __launch_bounds__(THREADS, GEMV_MIN_BLOCKS)
gemv_kernel(const __half* __restrict__ x, const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
            const uint8_t* __restrict__ zeros, __half* __restrict__ y, int M, int N, int K, bool prefetch_scales) {
    pdl_trigger();
    // PERSIST: the block computes units (16·R outputs) blockIdx.x, + gridDim.x, ... and writes each unit's partial
    // tiles to the other buffer than the last unit's, whose sum may still be reading it: one barrier per unit.
    __shared__ float red[PERSIST ? 2 : 1][WARPS][R][NT][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int m0 = blockIdx.y * 8 * NT, groups = K / GROUP, units = (N + 16 * R - 1) / (16 * R);
    bool has[NT];  // x rows this lane feeds (others are zero)
    const __half* xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        has[nt] = m0 + 8 * nt + g < M;
        xr[nt] = x + (size_t)(has[nt] ? m0 + 8 * nt + g : 0) * K + 32 * t;
    }
    // Where the lane's rows of unit u start (K block 0): int32 words of weights, and the index of their scale
    // (and zero). A row past N re-reads row N-1 (tiles: a zero row); its outputs are not stored.
    auto tile_of = [&](int u, int r) { return (size_t)min(u * R + r, (N - 1) / 16); };  // (R = 2, odd tile count: the last)
    auto row_of = [&](int u, int r, int h) { return (size_t)min(u * 16 * R + 16 * r + 8 * h + g, N - 1); };
    const int32_t* wrow[R][2];
    size_t srow[R][2];
    auto start_unit = [&](int u) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                wrow[r][h] = TILES ? Wq + (tile_of(u, r) * groups * 16 + g) * 16 + 4 * t : Wq + row_of(u, r, h) * (K / 8) + 4 * t;
                srow[r][h] = TILES ? tile_of(u, r) * groups * 16 + g : row_of(u, r, h) * groups;
            }
    };
    start_unit(blockIdx.x);
    // From a row's K block to its next: int32 words of weights, scales. On tiles, row g + 8 is 128 words and 8
    // scales after row g: offsets in the load instructions, not more pointers in registers.
    constexpr int WSTEP = TILES ? 16 * KB / 8 : KB / 8, SSTEP = TILES ? 16 : 1;
    auto wptr = [&](int r, int h) { return TILES ? wrow[r][0] + 128 * h : wrow[r][h]; };
    auto sidx = [&](int r, int h, int kb) { return (TILES ? srow[r][0] + 8 * h : srow[r][h]) + (size_t)kb * SSTEP; };
    // The weights stream from DRAM: each warp keeps its next PF K blocks' loads in flight (a ring in registers)
    // while it converts the current one; x is small and hot in L1: it is loaded when needed.
    int4 wv[PF + 1][R][2];
    auto load = [&](int slot, int kb) {
        if (kb < groups)
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) wv[slot][r][h] = load_stream(wptr(r, h) + (size_t)kb * WSTEP);
    };
    auto first_loads = [&] {
#pragma unroll
        for (int p = 0; p < PF; ++p) load(p, warp + p * WARPS);
    };
    first_loads();
    // At 9-16 tokens on tiles, the block asks L2 for its scales of all of K up front, and each K block's scale load
    // finds them there instead of in DRAM; worth it where the grid is at most two waves (not at M <= 8). A prefetch
    // holds no register, and this variant is at its cap of 128; the zero-point variant still spilled with it, so it
    // goes without.
    if (SYM && TILES && NT == 2 && prefetch_scales)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const char* slab = reinterpret_cast<const char*>(scales + srow[r][0] - g);  // the tile's [K/128][16]
            for (int off = threadIdx.x * 128; off < groups * 32; off += THREADS * 128)
                asm volatile("prefetch.global.L2 [%0];\n" ::"l"(slab + off));
        }
    pdl_wait();  // x comes from the previous kernel; the ring's first weights are already on their way
    auto unit = [&](int u, int buf) {  // the block's outputs 16·R·u ... 16·R·u + 16·R − 1
        float acc[R][NT][4] = {};
        // Unrolled by the ring's length, so that the ring's moves at the end become register renames.
#pragma unroll RING_UNROLL
        for (int kb = warp; kb < groups; kb += WARPS) {
            load(PF, kb + PF * WARPS);  // the block's warps read adjacent K blocks together
            uint32_t xb[NT][16];  // x of token g (of each n8 tile), paired like the weights
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int4 v = has[nt] ? __ldg(reinterpret_cast<const int4*>(xr[nt] + kb * KB) + i) : make_int4(0, 0, 0, 0);
                    pair_x(reinterpret_cast<const uint32_t*>(&v), xb[nt] + 4 * i);
                }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                uint32_t w[2][16];
                float sc[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    dequant32<SYM>(wv[0][r][h], make_zero<SYM>(zeros, sidx(r, h, kb)), w[h]);
                    sc[h] = __half2float(scales[sidx(r, h, kb)]);
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {  // Σ (q − zero)·x over the K block, then × the rows' scales
                    float blk[4] = {};
                    mma_steps(blk, w[0], w[1], xb[nt]);
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[r][nt][e] += sc[e / 2] * blk[e];  // e/2: row g or g + 8
                }
            }
#pragma unroll
            for (int p = 0; p < PF; ++p)  // the ring moves on (register renames; no memory traffic)
#pragma unroll
                for (int r = 0; r < R; ++r) wv[p][r][0] = wv[p + 1][r][0], wv[p][r][1] = wv[p + 1][r][1];
        }
        if (PERSIST && u + (int)gridDim.x < units) {  // the next unit's first loads fly while this unit's sum is made
            start_unit(u + gridDim.x);
            first_loads();
        }

#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) red[buf][warp][r][nt][lane][e] = acc[r][nt][e];
        __syncthreads();
        // The warps' partial tiles: slot (r, nt, lane, e) is output 16·R·u + 16r + lane/4 + 8·(e/2) of token
        // m0 + 8nt + 2·(lane%4) + e%2.
        for (int i = threadIdx.x; i < R * NT * 128; i += THREADS) {
            const int r = i / (NT * 128), nt = (i / 128) % NT, l = (i / 4) % 32, e = i % 4;
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) sum += red[buf][w][r][nt][l][e];
            const int n = u * 16 * R + 16 * r + l / 4 + 8 * (e / 2), m = m0 + 8 * nt + 2 * (l % 4) + e % 2;
            if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
        }
    };
    if constexpr (!PERSIST) unit(blockIdx.x, 0);
    else
        for (int u = blockIdx.x, buf = 0; u < units; u += gridDim.x, buf ^= 1) unit(u, buf);
}

template <bool SYM, int R, bool TILES>
static void launch_gemv_r(const __half* x, const int32_t* Wq, const __half* scales, const uint8_t* zeros, __half* y,
                          int M, int N, int K, int sms, cudaStream_t stream) {
    dim3 grid((N + 16 * R - 1) / (16 * R), M <= 8 ? 1 : (M + 15) / 16);
    const bool prefetch = TILES && M > 8 && grid.x * grid.y <= 4u * sms;  // at most two waves of 2 blocks per SM
    if (M <= 8) {
        // On tiles, where the units outnumber the blocks that fit at once (N 14336, K 4096: 448 units of 32 outputs
        // for 264 blocks): one generation of blocks, each computing every gridDim.x-th unit, with the next unit's
        // first loads in flight while it sums a unit. Where one generation holds every unit, a block per unit is
        // faster, so that launch stays.
        constexpr bool P = TILES;
        static int fit = 0;
        if (P && !fit) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, gemv_kernel<SYM, R, 1, TILES, P>, THREADS, 0);
        if (P && fit > 0 && grid.x > (unsigned)(fit * sms)) {
            grid.x = fit * sms;
            launch_pdl(gemv_kernel<SYM, R, 1, TILES, P>, grid, THREADS, 0, stream, x, Wq, scales, zeros, y, M, N, K, false);
        } else launch_pdl(gemv_kernel<SYM, R, 1, TILES>, grid, THREADS, 0, stream, x, Wq, scales, zeros, y, M, N, K, false);
    } else launch_pdl(gemv_kernel<SYM, R, 2, TILES>, grid, THREADS, 0, stream, x, Wq, scales, zeros, y, M, N, K, prefetch);
}

template <bool SYM, bool TILES = false>
static void launch_gemv(const __half* x, const int32_t* Wq, const __half* scales, const uint8_t* zeros, __half* y,
                        int M, int N, int K, cudaStream_t stream) {
    // 32 outputs per block when that still gives every SM a block, else 16 (lesson 06's rule; on tiles too). On tiles
    // at 9-16 tokens, 32 always: each block reads all of x's 16 rows, so half the blocks read half the x.
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if ((N + 31) / 32 >= sms || (TILES && M > 8))
        launch_gemv_r<SYM, 2, TILES>(x, Wq, scales, zeros, y, M, N, K, sms, stream);
    else launch_gemv_r<SYM, 1, TILES>(x, Wq, scales, zeros, y, M, N, K, sms, stream);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {  // read once: 256-byte L2 fetches
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The tiled tensor-core kernel for M > 16: lesson 06's tiled kernel with 4-bit weights. A block computes
// 128 outputs × BM tokens; K tiles of 128 (one scale group) flow through a cp.async ring of STAGES shared-
// memory stages. The weights are the mma's A operand (yᵀ = Ŵ·xᵀ, so the block's 4·WM warps each own 32
// weight rows × BM/WM tokens), dequantized from shared memory straight into A fragments, and the K renaming
// of the GEMV carries over: lane t's 16-byte piece of a weight row is its 32 weights k = 32t … 32t+31,
// dequant32's word 4q + i holds weights 8q + i and 8q + i + 4, and the lane pairs x the same way.
// Shared memory per stage: W 128 rows × 64 bytes (lane t reads piece t: two rows fill the 32 banks), and
// x BM rows × 256 bytes, where lane t reads pieces 4t … 4t+3 of its token row. Unswizzled, the lanes t and t+2
// (pieces 8 apart, 128 bytes) would hit the same banks, as would the rows r and r+1 of a quarter-warp, so
// piece p of row r is stored at p ^ (p / 8 % 2) ^ 2·(r % 2), and the 8 lanes of each quarter-warp read 8
// different 16-byte bank groups.
// Split-K as in lesson 06 when the tiles cannot fill the SMs.
constexpr int TILE_STAGES = 4;  // cp.async ring depth for the 32- and 64-token tiles (the 128-token tile: 3)
constexpr int TILE_SPLIT_BLOCKS = 2;  // blocks per SM a wave counts (at most what fits)
constexpr int TBN = 128, TWN = 4;  // outputs per block tile, warps across them
__device__ __forceinline__ int x_slot(int r, int p) { return p ^ ((p >> 3) & 1) ^ ((r & 1) << 1); }
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}

template <bool SYM, int BM, int WM, int STAGES, bool PAIRED>
__global__ void __launch_bounds__(32 * WM * TWN, 1)  // the explicit 1 stops ptxas trading spills for occupancy
tiled_kernel(const __half* __restrict__ x, const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
             const uint8_t* __restrict__ zeros, __half* __restrict__ y, int M, int N, int K, float* __restrict__ ws,
             int* __restrict__ counters) {
    // Warp tile: 32 weight rows (MT = 2 m16 tiles) × BM/WM tokens (NT n8 tiles).
    constexpr int THREADS = 32 * WM * TWN, MT = TBN / TWN / 16, NT = BM / WM / 8;
    constexpr int X_BYTES = BM * 256, STAGE = X_BYTES + TBN * 64;
    constexpr int XN = BM * 16 / THREADS, WN = TBN * 4 / THREADS;  // 16-byte copies per thread and stage
    static_assert(BM * 16 % THREADS == 0 && TBN * 4 % THREADS == 0, "copies must split evenly over threads");
    extern __shared__ __align__(16) uint8_t smem[];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm0 = (warp / TWN) * (BM / WM), wn0 = (warp % TWN) * (TBN / TWN);
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.y * BM, groups = K / GROUP, splits = gridDim.z;
    const int kt_begin = (int)((long)groups * blockIdx.z / splits), kt_end = (int)((long)groups * (blockIdx.z + 1) / splits);
    const int nk = kt_end - kt_begin;

    // Copy j of a thread: x piece threadIdx.x % 16 of row threadIdx.x / 16 + j·THREADS/16; W piece
    // threadIdx.x % 4 of row threadIdx.x / 4 + j·THREADS/4.
    const int xr0 = threadIdx.x / 16, xp = threadIdx.x % 16, wr0 = threadIdx.x / 4, wp = threadIdx.x % 4;
    auto load_tile = [&](int kt, int stage) {
        uint8_t* base = smem + stage * STAGE;
#pragma unroll
        for (int j = 0; j < XN; ++j) {
            const int r = xr0 + j * (THREADS / 16);
            const bool ok = m0 + r < M;
            const __half* src = ok ? x + (size_t)(m0 + r) * K + kt * GROUP + xp * 8 : x;
            cp_async16_zfill(base + r * 256 + x_slot(r, xp) * 16, src, ok);  // rows past M: zeros
        }
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int r = wr0 + j * (THREADS / 4);
            cp_async16(base + X_BYTES + r * 64 + wp * 16,  // rows past N re-read row N-1; not stored
                       Wq + (size_t)min(n0 + r, N - 1) * (K / 8) + kt * (GROUP / 8) + wp * 4);
        }
    };

    // The scales (and zeros) of this lane's 2·MT weight rows, one K tile ahead.
    size_t srow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) srow[mt][h] = (size_t)min(n0 + wn0 + 16 * mt + 8 * h + g, N - 1) * groups;
    __half2 s_next[MT][2];
    Zero z_next[MT][2];
    auto load_sz = [&](int kt) {
        if (kt >= kt_end) return;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                s_next[mt][h] = __half2half2(__ldg(scales + srow[mt][h] + kt));
                z_next[mt][h] = make_zero<SYM>(zeros, srow[mt][h] + kt);
            }
    };

    float acc[MT][NT][4] = {};
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load_tile(kt_begin + s, s);
        cp_async_commit();
    }
    load_sz(kt_begin);
    for (int i = 0; i < nk; ++i) {
        __half2 s_cur[MT][2];
        Zero z_cur[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) s_cur[mt][h] = s_next[mt][h], z_cur[mt][h] = z_next[mt][h];
        load_sz(kt_begin + i + 1);
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile i have landed...
        __syncthreads();              // ...and everyone's; everyone is also done with tile i - 1's stage
        if (i + STAGES - 1 < nk) load_tile(kt_begin + i + STAGES - 1, (i + STAGES - 1) % STAGES);
        cp_async_commit();

        const uint8_t* xs = smem + (i % STAGES) * STAGE;
        const uint8_t* wsm = xs + X_BYTES;
        int4 wv[MT][2];  // the lane's 32 weights of rows g and g + 8 of each m16 tile
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) wv[mt][h] = *reinterpret_cast<const int4*>(wsm + (wn0 + 16 * mt + 8 * h + g) * 64 + t * 16);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {  // the lane's weights 16hh … 16hh+15: words 2hh and 2hh + 1 of each piece
            uint32_t a[MT][4][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                uint32_t w[2][8];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint32_t* v = reinterpret_cast<const uint32_t*>(&wv[mt][h]) + 2 * hh;
                    dequant8<SYM>(v[0], z_cur[mt][h], *reinterpret_cast<uint32_t(*)[4]>(w[h]));
                    dequant8<SYM>(v[1], z_cur[mt][h], *reinterpret_cast<uint32_t(*)[4]>(w[h] + 4));
                    scale_words<8>(w[h], s_cur[mt][h]);
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    a[mt][j][0] = w[0][2 * j]; a[mt][j][1] = w[1][2 * j];
                    a[mt][j][2] = w[0][2 * j + 1]; a[mt][j][3] = w[1][2 * j + 1];
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int r = wm0 + 8 * nt + g;
                uint32_t b[8];  // token r's x at the lane's weights 16hh …, paired like them
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const int4 v = *reinterpret_cast<const int4*>(xs + r * 256 + x_slot(r, 4 * t + 2 * hh + q) * 16);
                    if (PAIRED) *reinterpret_cast<int4*>(b + 4 * q) = v;  // paired already (pair_x_kernel)
                    else pair_x(reinterpret_cast<const uint32_t*>(&v), b + 4 * q);
                }
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) mma16816(acc[mt][nt], a[mt][j], b[2 * j], b[2 * j + 1]);
            }
        }
    }
    cp_async_wait<0>();

    // Split K: publish this block's partial tile; the last block of the tile adds all partials (in split
    // order, so the result does not depend on which block came last) and goes on to the store.
    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        float* mine = ws + ((size_t)tile * splits + blockIdx.z) * (BM * TBN);
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
        const float* part = ws + (size_t)tile * splits * (BM * TBN) + threadIdx.x;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
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
            for (int e = 0; e < 4; ++e) {  // the tile is yᵀ: rows are outputs n, columns tokens m
                const int n = n0 + wn0 + 16 * mt + g + 8 * (e / 2), m = m0 + wm0 + 8 * nt + 2 * t + e % 2;
                if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(acc[mt][nt][e]);
            }
}

// Split-K workspace and tile counters, grown on demand and kept (counters return to zero by themselves).
// One stream at a time: two concurrent launches would share them.
static float* g_ws = nullptr;
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

template <bool SYM, int BM, int WM, int STAGES, bool PAIRED = (BM > 32)>
static void launch_tiled_cfg(const __half* x, const int32_t* Wq, const __half* scales, const uint8_t* zeros, __half* y,
                             int M, int N, int K, cudaStream_t stream) {
    constexpr int THREADS = 32 * WM * TWN, SMEM = STAGES * (BM * 256 + TBN * 64);
    static int sms = 0, per_sm = 0;
    if (!sms) {
        cudaFuncSetAttribute(tiled_kernel<SYM, BM, WM, STAGES, PAIRED>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tiled_kernel<SYM, BM, WM, STAGES, PAIRED>, THREADS, SMEM);
        per_sm = per_sm < 1 ? 1 : per_sm;
    }
    const dim3 tiles((N + TBN - 1) / TBN, (M + BM - 1) / BM);
    const int ntiles = tiles.x * tiles.y, ktiles = K / GROUP;
    // Split K so the blocks fill whole waves (lesson 06's rule): the time is about waves / splits, so take
    // the split with the fewest waves per split, ties to fewer splits; at least 4 K tiles per split.
    const int slots = sms * (per_sm < TILE_SPLIT_BLOCKS ? per_sm : TILE_SPLIT_BLOCKS);
    int splits = 1;
    for (int s = 2; s <= 16 && s <= ktiles / 4; ++s) {
        const long waves = ((long)ntiles * s + slots - 1) / slots, best = ((long)ntiles * splits + slots - 1) / slots;
        if (waves * splits < best * s) splits = s;
    }
    if (splits > 1 && !reserve_split((size_t)ntiles * splits * BM * TBN * sizeof(float), ntiles, stream)) splits = 1;
    tiled_kernel<SYM, BM, WM, STAGES, PAIRED><<<dim3(tiles.x, tiles.y, splits), THREADS, SMEM, stream>>>(
        x, Wq, scales, zeros, y, M, N, K, g_ws, g_counters);
}

// x with each 8-element piece in pair_x's order: the tiled kernel's four warps across N would otherwise each
// pair the same x rows, K tile after K tile (at 64 tokens, 128 byte permutes per lane and K tile, against 160
// instructions for its weights' conversion and 64 for their scale).
__global__ void pair_x_kernel(const __half* __restrict__ x, __half* __restrict__ xp, size_t pieces) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < pieces; i += (size_t)gridDim.x * blockDim.x) {
        const int4 v = __ldg(reinterpret_cast<const int4*>(x) + i);
        int4 o;
        pair_x(reinterpret_cast<const uint32_t*>(&v), reinterpret_cast<uint32_t*>(&o));
        reinterpret_cast<int4*>(xp)[i] = o;
    }
}
static __half* g_xp = nullptr;  // the paired x, grown on demand and kept
static size_t g_xp_bytes = 0;
static const __half* paired_x(const __half* x, int M, int K, cudaStream_t stream) {
    const size_t bytes = (size_t)M * K * sizeof(__half);
    if (bytes > g_xp_bytes) {
        if (g_xp) cudaFree(g_xp);
        // Out of memory: nothing is computed, and the error stays set for the harness to raise.
        if (cudaMalloc(&g_xp, bytes) != cudaSuccess) { g_xp = nullptr; g_xp_bytes = 0; return nullptr; }
        g_xp_bytes = bytes;
    }
    const size_t pieces = bytes / 16;
    const int blocks = (int)((pieces + 255) / 256 < 1024 ? (pieces + 255) / 256 : 1024);
    pair_x_kernel<<<blocks, 256, 0, stream>>>(x, g_xp, pieces);
    return g_xp;
}

template <bool SYM>
static void launch_tiled(const __half* x, const int32_t* Wq, const __half* scales, const uint8_t* zeros, __half* y,
                         int M, int N, int K, cudaStream_t stream) {
    // The 32-token tile pairs x itself (the extra launch costs more than 4 warps pairing 32 rows); the larger
    // tiles read x paired once, by pair_x_kernel.
    if (M > 32 && !(x = paired_x(x, M, K, stream))) return;
    if (M <= 32) launch_tiled_cfg<SYM, 32, 1, TILE_STAGES>(x, Wq, scales, zeros, y, M, N, K, stream);
    else if (M <= 64) launch_tiled_cfg<SYM, 64, 1, TILE_STAGES>(x, Wq, scales, zeros, y, M, N, K, stream);
    else launch_tiled_cfg<SYM, 128, 2, 3>(x, Wq, scales, zeros, y, M, N, K, stream);
}

constexpr int LINEAR_GEMV_MAX_M = 16;  // linear_w4a16: the GEMV up to this M, the tiled kernel past it

// Dequantize (symmetric): W[n, k] = q[n, k] · scale[n, k / 128]; a thread per packed word (8 weights: 4 bytes
// in, 16 out), so a warp reads 128 and writes 512 consecutive bytes. dequant8, then the pairs (w0,w4) (w1,w5)
// (w2,w6) (w3,w7) are put back in K order with one byte permute per output word.
__global__ void dequant_w4_kernel(const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
                                  __half* __restrict__ W, int N, int K) {
    const size_t words = (size_t)N * K / 8;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < words; c += (size_t)gridDim.x * blockDim.x) {
        const size_t n = c * 8 / K, k = c * 8 % K;
        uint32_t w[4];
        dequant8<true>(uint32_t(__ldcs(Wq + c)), make_zero<true>(nullptr, 0), w);
        scale_words<4>(w, __half2half2(scales[n * (K / GROUP) + k / GROUP]));
        reinterpret_cast<int4*>(W)[c] = make_int4(__byte_perm(w[0], w[1], 0x5410), __byte_perm(w[2], w[3], 0x5410),
                                                  __byte_perm(w[0], w[1], 0x7632), __byte_perm(w[2], w[3], 0x7632));
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The Python wrappers check K % 128 == 0 with a clear message; here a bad call does nothing rather than
// read out of bounds.
static bool ok_args(int K, const void* x, const void* q) { return K % GROUP == 0 && aligned16(x) && aligned16(q); }

EXPORT void gemv_w4a16(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                       cudaStream_t stream) {
    if (ok_args(K, x, q)) launch_gemv<true>(x, q, scales, nullptr, y, M, N, K, stream);
}

EXPORT void gemv_w4a16_asym(const __half* x, const int32_t* q, const __half* scales, const uint8_t* zeros, __half* y,
                            int M, int N, int K, cudaStream_t stream) {
    if (ok_args(K, x, q)) launch_gemv<false>(x, q, scales, zeros, y, M, N, K, stream);
}

// packed in 16-row tiles (quant.to_tiles): int32 [ceil(N/16), K/128, 16, 16], scales fp16 and zeros uint8
// [ceil(N/16), K/128, 16]; rows past N zero.
EXPORT void gemv_w4a16_tiles(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                             cudaStream_t stream) {
    if (ok_args(K, x, q)) launch_gemv<true, true>(x, q, scales, nullptr, y, M, N, K, stream);
}

EXPORT void gemv_w4a16_tiles_asym(const __half* x, const int32_t* q, const __half* scales, const uint8_t* zeros,
                                  __half* y, int M, int N, int K, cudaStream_t stream) {
    if (ok_args(K, x, q)) launch_gemv<false, true>(x, q, scales, zeros, y, M, N, K, stream);
}

EXPORT void gemm_w4a16(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                       cudaStream_t stream) {
    if (ok_args(K, x, q)) launch_tiled<true>(x, q, scales, nullptr, y, M, N, K, stream);
}

EXPORT void gemm_w4a16_asym(const __half* x, const int32_t* q, const __half* scales, const uint8_t* zeros, __half* y,
                            int M, int N, int K, cudaStream_t stream) {
    if (ok_args(K, x, q)) launch_tiled<false>(x, q, scales, zeros, y, M, N, K, stream);
}

// What a model layer calls: the GEMV at decode, the tiled kernel past LINEAR_GEMV_MAX_M tokens.
EXPORT void linear_w4a16(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                         cudaStream_t stream) {
    if (!ok_args(K, x, q)) return;
    if (M <= LINEAR_GEMV_MAX_M) launch_gemv<true>(x, q, scales, nullptr, y, M, N, K, stream);
    else launch_tiled<true>(x, q, scales, nullptr, y, M, N, K, stream);
}

EXPORT void linear_w4a16_asym(const __half* x, const int32_t* q, const __half* scales, const uint8_t* zeros, __half* y,
                              int M, int N, int K, cudaStream_t stream) {
    if (!ok_args(K, x, q)) return;
    if (M <= LINEAR_GEMV_MAX_M) launch_gemv<false>(x, q, scales, zeros, y, M, N, K, stream);
    else launch_tiled<false>(x, q, scales, zeros, y, M, N, K, stream);
}

EXPORT void dequant_w4(const int32_t* q, const __half* scales, __half* W, int N, int K, cudaStream_t stream) {
    if (K % GROUP || !aligned16(q) || !aligned16(W)) return;
    const size_t words = (size_t)N * K / 8;
    static int sms = 0;  // a grid-stride loop: at most 16 blocks per SM
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t cap = (size_t)sms * 16;
    const int blocks = (int)((words + 255) / 256 < cap ? (words + 255) / 256 : cap);
    if (blocks) dequant_w4_kernel<<<blocks, 256, 0, stream>>>(q, scales, W, N, K);
}
