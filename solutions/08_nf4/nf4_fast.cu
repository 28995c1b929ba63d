// Lesson 08's fast kernel: the fused NF4 GEMV y[M, N] = x[M, K] · Ŵᵀ that holds the lesson's recorded speed, on
// bitsandbytes' row-major bytes (gemv_nf4), on the same bytes in 16-row tiles (gemv_nf4_tiles) and on tiles with
// double-quantized absmax (gemv_nf4_tiles_dq). The format is harness/quant.py's quantize_nf4: W[N, K] =
// NF4[idx] · absmax, one fp32 absmax per 64 consecutive weights, two indices per byte, the first (even k) in the
// high nibble. The teaching kernels of the lesson are in nf4.cu; this file adds lesson 07's tensor-core GEMV
// around the same per-bank pair table, and the launch choices that keep every SM busy. Lesson 11's decode step
// launches the tiled GEMVs (with programmatic dependent launch when it turns set_pdl on).
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


// The pair table, built by a block's threads: entry b = the half2 (cb[b >> 4], cb[b & 15]), first value in the
// low half, so that byte b of a packed word becomes weights 2b and 2b + 1 in one 32-bit lookup.
__device__ __forceinline__ void build_pairs(uint32_t* pairs, const float* cb) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        const __half2 h = __floats2half2_rn(cb[i >> 4], cb[i & 15]);
        pairs[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    __syncthreads();
}

// ---------------------------------------------------------------------------------------------------------
// The fused NF4 GEMV: y[M, N] = x[M, K] · Ŵᵀ at decode, lesson 07's tensor-core GEMV with NF4 weights. A block
// computes 16·R outputs × 8·NT tokens (NT = 1 up to M = 8, else 2); its 8 warps split K in 128-wide items (two
// absmax blocks) and add their partial tiles at the end. The weights are the mma's A operand, decoded through
// the pair table: a byte is weights 2b and 2b + 1, so x needs no pairing, it is used in its own order.
// The scale comes after the mma, as in lesson 07, but an absmax covers only 64 weights, and the four lanes t of
// an mma step must share it: so lane t takes 8 bytes (16 weights) of each of the item's two blocks, mma steps
// 0-3 cover block 0 and 4-7 block 1, each into its own accumulators, multiplied by that block's absmax.
constexpr int NF4_MIN_BLOCKS = 2;
constexpr int NF4_MIN_BLOCKS_1 = 3;  // the 16 × 8 tile: three blocks per SM
constexpr int NWARPS = 8, NTHREADS = 32 * NWARPS;

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint2 load_stream8(const void* p) {  // read once: skip L1, 256-byte L2 fetches
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

// 8 packed bytes → 8 words of (value, value) pairs through the table (unscaled codebook values). `col` is the
// shared-memory address of this lane's column of the table (entry b at col + 128·b).
// Written as `pairs[byte * 32 + lane]`, the compiler rebuilt every address from the byte and the lane: four
// instructions before each load where an extract and one multiply-add suffice.
__device__ __forceinline__ void lookup16(uint2 v, uint32_t col, uint32_t (&w)[8]) {
    constexpr uint32_t STRIDE = 32 * 4;  // one copy of the table per bank: lanes never conflict
#pragma unroll
    for (int b = 0; b < 8; ++b) {
        const uint32_t byte = __byte_perm(b < 4 ? v.x : v.y, 0u, 0x4440u | (b % 4));
        // Not volatile, no memory clobber: the table is complete before the loads that give the bytes are issued.
        asm("ld.shared.u32 %0, [%1];\n" : "=r"(w[b]) : "r"(col + byte * STRIDE));
    }
}

// Plain NF4 has one FP32 absmax per 64 weights (`absmax`, tiled like the bytes on tiles). Double-quantized NF4 (DQ:
// bitsandbytes' compress_statistics, QLoRA's "double quantization") has one byte, q8, per 64 weights, stored so that
// a lane's four of a K item (two blocks × rows g and g + 8) are one 32-bit word, loaded with the item's weights,
// and decoded as code[q] · a2[b / 256] + offset in FP32 (b: the block's index in bitsandbytes' row-major order; code:
// its 256-value dynamic map; the multiply and the add each rounded, as bitsandbytes' dequantize_blockwise and its
// `+ offset` are), so that the kernel multiplies by bitsandbytes' absmax to the bit.
struct DQAbsmax {
    const uint8_t* q8;
    const float* a2;
    const float* offset;
    const float* code;
};

// TILES: the bytes stored in 16-row tiles (quant.to_tiles): tile [K/128][16 rows][64 bytes], absmax tile [K/64][16
// rows], so a warp's 1 KB per m16 tile and K item is one contiguous piece. Only the addresses change: same lanes,
// same arithmetic, the same output bit for bit.
// PERSIST: the block computes units (16·R outputs) blockIdx.x, + gridDim.x, ... (lesson 07's GEMV on tiles does the
// same): it fills its 32 KB table once for all of them, and each unit's partial tiles go to the other buffer than
// the last unit's, whose sum may still be reading it, so one barrier per unit.
template <int R, int NT, bool TILES = false, bool PERSIST = false, bool DQ = false>
// Blocks per SM: the 32 × 16 tile 1 (no spills), the 16 × 8 tile NF4_MIN_BLOCKS_1, the others NF4_MIN_BLOCKS.
__global__ void __launch_bounds__(NTHREADS, R * NT == 4 ? 1 : R * NT == 1 ? NF4_MIN_BLOCKS_1 : NF4_MIN_BLOCKS)
gemv_nf4_kernel(const __half* __restrict__ x, const uint8_t* __restrict__ Wq, const float* __restrict__ absmax,
                const DQAbsmax dq, const float* __restrict__ cb, __half* __restrict__ y, int M, int N, int K) {
    static_assert(TILES || !DQ, "double-quantized absmax: on tiles only");
    pdl_trigger();
    __shared__ uint32_t table[256];
    __shared__ float code[DQ ? 256 : 1];  // the absmax codes' values (build_pairs' barrier publishes them)
    if (DQ)
        for (int i = threadIdx.x; i < 256; i += NTHREADS) code[i] = dq.code[i];
    const float offset = DQ ? __ldg(dq.offset) : 0.f;
    build_pairs(table, cb);
    // 32 lanes looking up random bytes in one 1 KB table meet in the same banks (most of the pair dequantize
    // kernel's shared wavefronts are conflicts): a copy per bank, entry b of lane l at word 32b + l, and every
    // lane reads its own bank. 32 KB per block.
    extern __shared__ __align__(16) uint32_t pairs[];  // [256][32], filled with 16-byte stores
    for (int i = threadIdx.x; i < 256 * 8; i += NTHREADS) {  // 16-byte stores: entry i / 8, lanes 4·(i % 8) …
        const uint32_t v = table[i / 8];
        reinterpret_cast<uint4*>(pairs)[i] = make_uint4(v, v, v, v);
    }
    __syncthreads();
    const uint32_t col = (uint32_t)__cvta_generic_to_shared(pairs) + threadIdx.x % 32 * 4;
    __shared__ float red[PERSIST ? 2 : 1][NWARPS][R][NT][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int m0 = blockIdx.y * 8 * NT, items = K / 128, blocks = K / 64, units = (N + 16 * R - 1) / (16 * R);
    constexpr int ASTEP = TILES ? 16 : 1;  // from one absmax block of a row to the next
    bool has[NT];
    const __half* xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        has[nt] = m0 + 8 * nt + g < M;
        xr[nt] = x + (size_t)(has[nt] ? m0 + 8 * nt + g : 0) * K + 16 * t;
    }
    // Where the lane's rows of unit u start (K item 0): bytes, absmax values. A row past N re-reads row N-1 (tiles:
    // a zero row); its outputs are not stored.
    const uint8_t* wrow[R][2];
    const float* arow[R][2];
    const uint32_t* qrow[R];  // DQ: the lane's absmax codes, a word per K item
    uint32_t brow[R][2];      // DQ: the index of the row's first absmax block, row-major (for a2)
    auto start_unit = [&](int u) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int n = min(u * 16 * R + 16 * r + 8 * h + g, N - 1);
                const size_t tile = min(u * R + r, (N - 1) / 16);
                wrow[r][h] = TILES ? Wq + (tile * items * 16 + g) * 64 + 8 * t : Wq + (size_t)n * (K / 2) + 8 * t;
                if (DQ) {
                    qrow[r] = reinterpret_cast<const uint32_t*>(dq.q8) + tile * items * 8 + g;
                    brow[r][h] = (uint32_t)n * blocks;
                } else arow[r][h] = TILES ? absmax + tile * blocks * 16 + g : absmax + (size_t)n * blocks;
            }
    };
    auto dq_absmax = [&](uint32_t qw, int byte, float a2) {  // DQ: code byte `byte` of the word, decoded
        return __fadd_rn(__fmul_rn(code[(qw >> (8 * byte)) & 0xFFu], a2), offset);
    };
    start_unit(blockIdx.x);
    // From one K item to the next: bytes of a row, absmax values. On tiles, row g + 8 is 512 bytes and 8 values
    // after row g: offsets in the load instructions.
    constexpr int WSTEP = TILES ? 16 * 64 : 64;
    uint2 wv[2][R][2][2];  // [ring][r][row h][block half]: this item and the next, 8 bytes each
    uint32_t qv[2][R];     // DQ: [ring][r], the item's absmax codes
    // Whether one `if` guards all of an item's loads or each load has its own changes only ptxas's schedule of the
    // loop; each variant compiles the form it runs faster with (lessons/08_nf4/notes.md).
    constexpr bool ONE_BRANCH = TILES && R * NT == 1;
    auto load = [&](int slot, int it) {
        if (ONE_BRANCH && it >= items) return;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    if (ONE_BRANCH || it < items) wv[slot][r][h][q] = load_stream8(TILES ? wrow[r][0] + 512 * h + it * WSTEP + 32 * q : wrow[r][h] + it * 64 + 32 * q);
        if (DQ)
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (ONE_BRANCH || it < items) qv[slot][r] = __ldg(qrow[r] + it * 8);
    };
    load(0, warp);
    pdl_wait();  // x comes from the previous kernel; the table is built and the first weights are on their way
    auto unit = [&](int u, int buf) {  // the block's outputs 16·R·u ... 16·R·u + 16·R − 1
        float acc[R][NT][4] = {};
        // Unrolled twice so that the ring's moves become register renames; not on tiles with 32 outputs × 8
        // tokens, where the unrolled loop spills at 128 registers.
        constexpr int UNROLL = TILES && R * NT == 2 ? 1 : 2;
#pragma unroll UNROLL
        for (int it = warp; it < items; it += NWARPS) {
            load(1, it + NWARPS);
            uint32_t xb[NT][2][8];  // x of token g at the lane's 16 weights of each block, in order
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 2; ++q)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const int4 v = has[nt] ? __ldg(reinterpret_cast<const int4*>(xr[nt] + it * 128 + 64 * q) + i) : make_int4(0, 0, 0, 0);
                        xb[nt][q][4 * i] = v.x; xb[nt][q][4 * i + 1] = v.y; xb[nt][q][4 * i + 2] = v.z; xb[nt][q][4 * i + 3] = v.w;
                    }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float a2[2];  // DQ: blocks 2·it and 2·it + 1 of a row share their absmax2 (groups of 256 start even)
                if (DQ)
#pragma unroll
                    for (int h = 0; h < 2; ++h) a2[h] = __ldg(dq.a2 + (brow[r][h] + 2 * it) / 256);
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    uint32_t lo[8], hi[8];
                    lookup16(wv[0][r][0][q], col, lo);
                    lookup16(wv[0][r][1][q], col, hi);
                    const float s_lo = DQ ? dq_absmax(qv[0][r], 2 * q, a2[0]) : __ldg(TILES ? arow[r][0] + (2 * it + q) * ASTEP : arow[r][0] + 2 * it + q),
                                s_hi = DQ ? dq_absmax(qv[0][r], 2 * q + 1, a2[1]) : __ldg(TILES ? arow[r][0] + 8 + (2 * it + q) * ASTEP : arow[r][1] + 2 * it + q);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        float blk[4] = {};
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            const uint32_t a[4] = {lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1]};
                            mma16816(blk, a, xb[nt][q][2 * j], xb[nt][q][2 * j + 1]);
                        }
                        acc[r][nt][0] += s_lo * blk[0], acc[r][nt][1] += s_lo * blk[1];
                        acc[r][nt][2] += s_hi * blk[2], acc[r][nt][3] += s_hi * blk[3];
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
#pragma unroll
                for (int h = 0; h < 2; ++h) wv[0][r][h][0] = wv[1][r][h][0], wv[0][r][h][1] = wv[1][r][h][1];
                if (DQ) qv[0][r] = qv[1][r];
            }
        }
        if (PERSIST && u + (int)gridDim.x < units) {  // the next unit's first loads fly while this unit's sum is made
            start_unit(u + gridDim.x);
            load(0, warp);
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) red[buf][warp][r][nt][lane][e] = acc[r][nt][e];
        __syncthreads();
        for (int i = threadIdx.x; i < R * NT * 128; i += NTHREADS) {  // slot (r, nt, lane, e), as in lesson 07
            const int r = i / (NT * 128), nt = (i / 128) % NT, l = (i / 4) % 32, e = i % 4;
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < NWARPS; ++w) sum += red[buf][w][r][nt][l][e];
            const int n = u * 16 * R + 16 * r + l / 4 + 8 * (e / 2), m = m0 + 8 * nt + 2 * (l % 4) + e % 2;
            if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
        }
    };
    if constexpr (!PERSIST) unit(blockIdx.x, 0);
    else
        for (int u = blockIdx.x, buf = 0; u < units; u += gridDim.x, buf ^= 1) unit(u, buf);
}


constexpr int NF4_SMEM = 256 * 32 * 4;  // the dynamic shared memory a block needs: its table

// Lets a GEMV kernel ask for up to half an SM's shared memory (the PDL request below), then returns how many of its
// blocks fit on an SM. In that order: under the 48 KB default, a kernel whose static shared memory and table pass
// 48 KB fits no block, and launch_nf4 would quietly drop the looping path.
template <int R, int NT, bool TILES, bool PERSIST, bool DQ>
static int prepare_nf4_kernel() {
    const auto kernel = gemv_nf4_kernel<R, NT, TILES, PERSIST, DQ>;
    int sm_smem = 0, fit = 0;
    cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
    const int most = sm_smem / 2 + 1 > NF4_SMEM ? sm_smem / 2 + 1 : NF4_SMEM;  // the largest request below
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, NTHREADS, NF4_SMEM);
    return fit;
}

// Under PDL the blocks start while the kernel before still holds part of each SM, and fill the SMs with room first:
// three 16 × 8 blocks on some SMs where the grid has two per SM, and the kernel runs at the pace of its most crowded
// SMs. Asking for shared memory that fits only the grid's share keeps them spread (as in lessons 06 and 10).
template <int R, int NT, bool TILES, bool PERSIST, bool DQ>
static void launch_nf4_kernel(dim3 grid, const __half* x, const uint8_t* Wq, const float* absmax, const DQAbsmax& dq, const float* cb,
                              __half* y, int M, int N, int K, cudaStream_t stream) {
    constexpr int SMEM = NF4_SMEM;
    const auto kernel = gemv_nf4_kernel<R, NT, TILES, PERSIST, DQ>;
    static int sms = 0, sm_smem = 0, fit = 0;
    if (!sms) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
        fit = prepare_nf4_kernel<R, NT, TILES, PERSIST, DQ>();
    }
    const int share = (grid.x * grid.y + sms - 1) / sms;
    const size_t spread = g_pdl && share < fit ? sm_smem / (share + 1) + 1 : 0;  // share + 1 do not fit
    launch_pdl(kernel, grid, NTHREADS, spread > SMEM ? spread : SMEM, stream, x, Wq, absmax, dq, cb, y, M, N, K);
}

template <int R, int NT, bool TILES, bool DQ>
static void launch_nf4(const __half* x, const uint8_t* Wq, const float* absmax, const DQAbsmax& dq, const float* cb,
                       __half* y, int M, int N, int K, cudaStream_t stream) {
    const dim3 grid((N + 16 * R - 1) / (16 * R), (M + 8 * NT - 1) / (8 * NT));
    // On tiles at M <= 8, where the units outnumber the blocks that fit at once (N 14336, K 4096: 896 units of 16
    // outputs for 396 blocks): one generation of blocks, each filling its table once and computing every
    // gridDim.x-th unit, the next unit's first loads in flight while it sums a unit (lesson 07's rule).
    constexpr bool P = TILES && NT == 1;
    static int sms = 0, fit = 0;
    if (P && !sms) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        fit = prepare_nf4_kernel<R, NT, TILES, P, DQ>();
    }
    if (P && fit > 0 && grid.x > (unsigned)(fit * sms))
        launch_nf4_kernel<R, NT, TILES, P, DQ>(dim3(fit * sms), x, Wq, absmax, dq, cb, y, M, N, K, stream);
    else launch_nf4_kernel<R, NT, TILES, false, DQ>(grid, x, Wq, absmax, dq, cb, y, M, N, K, stream);
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The fused GEMV for any M (re-reading the weights per 16 tokens past M = 16); K a multiple of 128.
template <bool TILES, bool DQ = false>
static void launch_gemv(const __half* x, const uint8_t* packed, const float* absmax, const DQAbsmax& dq,
                        const float* codebook, __half* y, int M, int N, int K, cudaStream_t stream) {
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    // 32 outputs per block if that fills the SMs; up to 8 tokens, only if each warp also gets 8 K items or more (with
    // fewer, a block's fixed costs, its 32 KB table and its sum over warps, weigh more: smaller blocks, more per SM).
    const bool wide = (N + 31) / 32 >= sms;
    const bool long_k = K / 128 >= 8 * NWARPS;
    if (M <= 8) (wide && long_k ? launch_nf4<2, 1, TILES, DQ> : launch_nf4<1, 1, TILES, DQ>)(x, packed, absmax, dq, codebook, y, M, N, K, stream);
    else (wide ? launch_nf4<2, 2, TILES, DQ> : launch_nf4<1, 2, TILES, DQ>)(x, packed, absmax, dq, codebook, y, M, N, K, stream);
}

EXPORT void gemv_nf4(const __half* x, const uint8_t* packed, const float* absmax, const float* codebook, __half* y, int M,
                     int N, int K, cudaStream_t stream) {
    if (K % 128 || !aligned16(x) || reinterpret_cast<uintptr_t>(packed) % 8) return;
    launch_gemv<false>(x, packed, absmax, DQAbsmax{}, codebook, y, M, N, K, stream);
}

// The same GEMV on NF4 stored in 16-row tiles (quant.to_tiles): packed uint8 [ceil(N/16), K/128, 16, 64], absmax fp32
// [ceil(N/16), K/64, 16]; rows past N zero.
EXPORT void gemv_nf4_tiles(const __half* x, const uint8_t* packed, const float* absmax, const float* codebook, __half* y,
                           int M, int N, int K, cudaStream_t stream) {
    if (K % 128 || !aligned16(x) || reinterpret_cast<uintptr_t>(packed) % 8) return;
    launch_gemv<true>(x, packed, absmax, DQAbsmax{}, codebook, y, M, N, K, stream);
}

// The same GEMV on double-quantized NF4 in 16-row tiles (quant.to_tiles(quant.double_quantize(...))): qabsmax uint8
// [ceil(N/16), K/128, 8, 2, 2] (quant.NF4DQTiles), absmax2 fp32 [ceil(N·K/64 / 256)] and offset fp32 [1] in
// bitsandbytes' order, code fp32 [256] (its dynamic map, quant.dynamic_map()).
EXPORT void gemv_nf4_tiles_dq(const __half* x, const uint8_t* packed, const uint8_t* qabsmax, const float* absmax2,
                              const float* offset, const float* code, const float* codebook, __half* y, int M, int N,
                              int K, cudaStream_t stream) {
    if (K % 128 || !aligned16(x) || reinterpret_cast<uintptr_t>(packed) % 8 || reinterpret_cast<uintptr_t>(qabsmax) % 4)
        return;
    launch_gemv<true, true>(x, packed, nullptr, DQAbsmax{qabsmax, absmax2, offset, code}, codebook, y, M, N, K, stream);
}
