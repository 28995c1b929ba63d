// Lesson 09's fast kernel: W4A8, 4-bit weights and INT8 activations on the INT8 tensor cores. The teaching
// kernel (w4a8.cu) has the same format, unpack and epilogue; this one adds a 4-stage cp.async ring through
// shared memory, 32 weight rows per warp, 64-token tiles past M = 32, the group parameters loaded one K tile
// ahead, and split-K when the tiles cannot fill the SMs.
// y[M, N] = x̂ · Ŵᵀ with x̂ = xq · sx (x quantized per token at run time, as lesson 06's W8A8) and the two-level
// weights of harness/quant.py's quantize_w4a8: Ŵ[n, k] = scale[n] · c[n, k], c = (u − gzero) · gscale, an
// integer in −128..127 coded by a 4-bit u and a per-group (128 along K) integer gscale (1..15) and gzero.
//
// Why two levels: the INT8 mma adds INT32 products over all of K. A float scale per group (lesson 07's
// format) would force every group's sum out of the tensor core (convert, multiply, add: per output, per
// group); integer group parameters are applied to the weights *before* the mma, so the only float work is
// one multiply per output at the end, as in W8A8.
//
// The unpack ("two instructions per four weights", after LiquidGEMM, Hu et al. 2025; our arithmetic): the
// tensor core takes weights as unsigned bytes (mma .u8.s8), and each byte is 128 + c = u·gscale + (128 −
// gzero·gscale), which quantize_w4a8 keeps inside 0..255, so one 32-bit multiply-add computes four bytes with
// no carry between them. u sits one per byte after a mask (pack_w4a8's order); the high nibbles, masked in
// place, are 16u, and mad.hi by gscale·2²⁸ divides the 16 back out: an AND and an IMAD per four weights, no
// shifts. The +128 offset adds 128 · Σ_k xq[m, k] to every output of token m, which the quantization kernel
// sums once per token and the epilogue subtracts.
//   linear_w4a8  x → per-token INT8 (quantize_tokens_kernel, with the row sums) → the tiled INT8 GEMM.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int GROUP = 128;  // the K tile is one level-2 group

// ---------------------------------------------------------------------------------------------
// Per-token INT8 quantization: one block per row, scale = absmax / 127, q = round-to-nearest-even(x / scale)
// (harness.quant.quantize_per_token_int8's arithmetic), and the row's sum of q for the epilogue.
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
    const int row = blockIdx.x, pieces = K / 8;  // 8 halves (16 bytes) at a time
    const int4* xr = reinterpret_cast<const int4*>(x + (size_t)row * K);
    uint2* qr = reinterpret_cast<uint2*>(xq + (size_t)row * K);
    __shared__ float smax[QTHREADS / 32];
    __shared__ int ssum[QTHREADS / 32];
    float m = 0.f;
    for (int i = threadIdx.x; i < pieces; i += QTHREADS) {
        const int4 v = __ldg(xr + i);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(h[j]);
            m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
    }
    m = block_reduce(m, [](float a, float b) { return fmaxf(a, b); }, smax);
    const float scale = m / 127.f, div = fmaxf(scale, 1.17549435e-38f);  // FLT_MIN, as the reference
    if (threadIdx.x == 0) sx[row] = scale;
    int s = 0;
    for (int i = threadIdx.x; i < pieces; i += QTHREADS) {  // the row is re-read from L1/L2
        const int4 v = __ldg(xr + i);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
        uint32_t w[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(h[j]);
            const int q0 = max(-127, min(127, __float2int_rn(f.x / div)));
            const int q1 = max(-127, min(127, __float2int_rn(f.y / div)));
            s += q0 + q1;
            w[j / 2] |= ((uint32_t)(q0 & 0xFF) | (uint32_t)(q1 & 0xFF) << 8) << (16 * (j % 2));
        }
        qr[i] = make_uint2(w[0], w[1]);
    }
    s = block_reduce(s, [](int a, int b) { return a + b; }, ssum);
    if (threadIdx.x == 0) xsum[row] = s;
}

// ---------------------------------------------------------------------------------------------
// The unpack. A group's parameters in the form the multiply-adds use.
struct GroupParams {
    uint32_t s, s_hi, c;  // gscale, gscale << 28, and (128 − gzero·gscale) in each of the four bytes
};
__device__ __forceinline__ GroupParams make_params(uint32_t gs, uint32_t gz) {
    return {gs, gs << 28, (128u - gz * gs) * 0x01010101u};
}

__device__ __forceinline__ uint32_t mad_hi(uint32_t a, uint32_t b, uint32_t c) {  // (a·b) >> 32, + c
    uint32_t d;
    asm("mad.hi.u32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// One packed word (weights 8j … 8j+7 of a row, pack_w4a8's order) → two registers of four unsigned bytes,
// 128 + c for weights 8j … 8j+3 (lo) and 8j+4 … 8j+7 (hi), in K order.
__device__ __forceinline__ void unpack8(uint32_t word, GroupParams p, uint32_t& lo, uint32_t& hi) {
    lo = (word & 0x0F0F0F0Fu) * p.s + p.c;
    hi = mad_hi(word & 0xF0F0F0F0u, p.s_hi, p.c);
}

// The epilogue: the INT32 sum of (128 + c)·xq over K, for token m and output n → y.
__device__ __forceinline__ float finish(int acc, int xsum_m, float sx_m, float scale_n) {
    return (float)(acc - 128 * xsum_m) * sx_m * scale_n;
}

// ---------------------------------------------------------------------------------------------
// The tiled kernel: lesson 07's tiled kernel on the INT8 tensor core. A block computes 128 outputs × BM
// tokens; K tiles of 128 (one group) flow through a cp.async ring of STAGES stages. The weights are the
// mma's A operand (yᵀ = Ŵ·xᵀ): the block's 4·WM warps each own 32 weight rows × BM/WM tokens.
// mma.m16n8k32 (u8 × s8): A fragment {row g, row g+8} × {K slots 4t…4t+3, 16+4t…16+4t+3}, B fragment x of
// token g at the same slots. K renaming (lessons 06-07): lane t takes the 32 weights k = 32t … 32t+31 of
// each of its rows (one 16-byte shared load), and mma step j uses word j: its lo register as slots 4t…,
// its hi register as slots 16+4t…; x's B registers are then x[32t+8j … 32t+8j+7] of token g, consecutive
// bytes: 32 bytes per token row per K tile, two 16-byte loads, no permutation.
// Shared memory per stage: x BM rows × 128 bytes, W 128 rows × 64 bytes. A phase of a 16-byte load serves
// 8 lanes, rows g and g+1 × t = 0..3. W: two 64-byte rows are 128 contiguous bytes, all 32 banks. x: lanes
// read pieces 2t (then 2t+1) of two 128-byte rows, which would be the same four bank groups; odd rows store
// piece p at p ^ 1.
// Split-K (lesson 06's): when the tiles cannot fill the SMs, gridDim.z blocks share a tile's K range.
constexpr int TILE_STAGES = 4;  // cp.async ring depth
constexpr int TILE_SPLIT_COST = 4;  // what a block costs besides its K tiles, in K tiles (choosing the split)
constexpr int TILE_MIN_BLOCKS = 1;  // blocks per SM the 4-warp tiles must fit (caps their registers)
constexpr int TILE_SPLIT_BLOCKS = 2;  // blocks per SM a wave counts (at most what fits)
constexpr int TBN = 128, TWN = 4;  // outputs per block tile, warps across them

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {  // weights, read once
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma_u8s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int BM, int WM, int STAGES>
__global__ void __launch_bounds__(32 * WM * TWN, WM == 1 ? TILE_MIN_BLOCKS : 1)
w4a8_kernel(const int8_t* __restrict__ xq, const float* __restrict__ sx, const int* __restrict__ xsum,
            const int32_t* __restrict__ Wq, const __half* __restrict__ wscale, const uint8_t* __restrict__ gscale,
            const uint8_t* __restrict__ gzero, __half* __restrict__ y, int M, int N, int K, int* __restrict__ ws,
            int* __restrict__ counters) {
    // Warp tile: 32 weight rows (MT = 2 m16 tiles) × BM/WM tokens (NT n8 tiles).
    constexpr int THREADS = 32 * WM * TWN, MT = TBN / TWN / 16, NT = BM / WM / 8;
    constexpr int X_BYTES = BM * GROUP, STAGE = X_BYTES + TBN * 64;
    constexpr int XN = BM * 8 / THREADS, WN = TBN * 4 / THREADS;  // 16-byte copies per thread and stage
    static_assert(BM * 8 % THREADS == 0 && TBN * 4 % THREADS == 0, "copies must split evenly over threads");
    extern __shared__ __align__(16) uint8_t smem[];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm0 = (warp / TWN) * (BM / WM), wn0 = (warp % TWN) * (TBN / TWN);
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.y * BM, groups = K / GROUP, splits = gridDim.z;
    const int kt_begin = (int)((long)groups * blockIdx.z / splits), kt_end = (int)((long)groups * (blockIdx.z + 1) / splits);
    const int nk = kt_end - kt_begin;

    // Copy j of a thread: x piece threadIdx.x % 8 of row threadIdx.x / 8 + j·THREADS/8; W piece
    // threadIdx.x % 4 of row threadIdx.x / 4 + j·THREADS/4.
    const int xr0 = threadIdx.x / 8, xp = threadIdx.x % 8, wr0 = threadIdx.x / 4, wp = threadIdx.x % 4;
    auto load_tile = [&](int kt, int stage) {
        uint8_t* base = smem + stage * STAGE;
#pragma unroll
        for (int j = 0; j < XN; ++j) {
            const int r = xr0 + j * (THREADS / 8);
            const bool ok = m0 + r < M;
            const int8_t* src = ok ? xq + (size_t)(m0 + r) * K + kt * GROUP + xp * 16 : xq;
            cp_async16_zfill(base + r * GROUP + (xp ^ (r & 1)) * 16, src, ok);  // rows past M: zeros
        }
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int r = wr0 + j * (THREADS / 4);
            cp_async16(base + X_BYTES + r * 64 + wp * 16,  // rows past N re-read row N-1; not stored
                       Wq + (size_t)min(n0 + r, N - 1) * (K / 8) + kt * (GROUP / 8) + wp * 4);
        }
    };

    // The group parameters of this lane's 2·MT weight rows, one K tile ahead.
    size_t prow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) prow[mt][h] = (size_t)min(n0 + wn0 + 16 * mt + 8 * h + g, N - 1) * groups;
    uint32_t gs_next[MT][2], gz_next[MT][2];
    auto load_params = [&](int kt) {
        if (kt >= kt_end) return;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) gs_next[mt][h] = __ldg(gscale + prow[mt][h] + kt), gz_next[mt][h] = __ldg(gzero + prow[mt][h] + kt);
    };

    int acc[MT][NT][4] = {};
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load_tile(kt_begin + s, s);
        cp_async_commit();
    }
    load_params(kt_begin);
    for (int i = 0; i < nk; ++i) {
        GroupParams p[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) p[mt][h] = make_params(gs_next[mt][h], gz_next[mt][h]);
        load_params(kt_begin + i + 1);
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile i have landed...
        __syncthreads();              // ...and everyone's; everyone is also done with tile i - 1's stage
        if (i + STAGES - 1 < nk) load_tile(kt_begin + i + STAGES - 1, (i + STAGES - 1) % STAGES);
        cp_async_commit();

        const uint8_t* xs = smem + (i % STAGES) * STAGE;
        const uint8_t* wsm = xs + X_BYTES;
        uint32_t a[MT][4][4];  // [m16 tile][mma step j][fragment register]
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // row g (h = 0) or g + 8 (h = 1): fragment registers h and h + 2
                const uint4 v = *reinterpret_cast<const uint4*>(wsm + (wn0 + 16 * mt + 8 * h + g) * 64 + t * 16);
                const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) unpack8(words[j], p[mt][h], a[mt][j][h], a[mt][j][h + 2]);
            }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int r = wm0 + 8 * nt + g;
            uint32_t b[8];  // token r's x[32t … 32t+31]
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const uint4 v = *reinterpret_cast<const uint4*>(xs + r * GROUP + ((2 * t + q) ^ (r & 1)) * 16);
                b[4 * q] = v.x; b[4 * q + 1] = v.y; b[4 * q + 2] = v.z; b[4 * q + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma_u8s8(acc[mt][nt], a[mt][j], b[2 * j], b[2 * j + 1]);
        }
    }
    cp_async_wait<0>();

    // Split K: publish this block's partial tile; the last block of the tile adds all partials (in split
    // order; integers, so the order would not matter anyway) and goes on to the store.
    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        int* mine = ws + ((size_t)tile * splits + blockIdx.z) * (BM * TBN);
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
        const int* part = ws + (size_t)tile * splits * (BM * TBN) + threadIdx.x;
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
            for (int e = 0; e < 4; ++e) {  // the tile is yᵀ: rows are outputs n, columns tokens m
                const int n = n0 + wn0 + 16 * mt + g + 8 * (e / 2), m = m0 + wm0 + 8 * nt + 2 * t + e % 2;
                if (m < M && n < N)
                    y[(size_t)m * N + n] = __float2half_rn(finish(acc[mt][nt][e], __ldg(xsum + m), __ldg(sx + m),
                                                                  __half2float(__ldg(wscale + n))));
            }
}

// Split-K workspace and tile counters, grown on demand and kept (counters return to zero by themselves).
// One stream at a time: two concurrent launches would share them.
static int* g_ws = nullptr;
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

template <int BM, int WM, int STAGES>
static void launch_cfg(const int8_t* xq, const float* sx, const int* xsum, const int32_t* Wq, const __half* wscale,
                       const uint8_t* gscale, const uint8_t* gzero, __half* y, int M, int N, int K, cudaStream_t stream) {
    constexpr int THREADS = 32 * WM * TWN, SMEM = STAGES * (BM * GROUP + TBN * 64);
    static int sms = 0, per_sm = 0;
    if (!sms) {
        cudaFuncSetAttribute(w4a8_kernel<BM, WM, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a8_kernel<BM, WM, STAGES>, THREADS, SMEM);
        per_sm = per_sm < 1 ? 1 : per_sm;
    }
    const dim3 tiles((N + TBN - 1) / TBN, (M + BM - 1) / BM);
    const int ntiles = tiles.x * tiles.y, ktiles = K / GROUP;
    // Split K when the tiles cannot fill the SMs. A block costs its K tiles plus TILE_SPLIT_COST (filling the
    // cp.async ring, and with splits the partial tile's round trip through memory); the time is waves × that,
    // and each split keeps at least 4 K tiles. Counting only waves would split a few tall tiles into many short
    // blocks that spend their time filling and draining the ring.
    const int slots = sms * (per_sm < TILE_SPLIT_BLOCKS ? per_sm : TILE_SPLIT_BLOCKS);
    auto cost = [&](int s) { return (float)(((long)ntiles * s + slots - 1) / slots) * ((float)ktiles / s + TILE_SPLIT_COST); };
    int splits = 1;
    for (int s = 2; s <= 16 && s <= ktiles / 4; ++s)
        if (cost(s) < cost(splits)) splits = s;
    if (splits > 1 && !reserve_split((size_t)ntiles * splits * BM * TBN * sizeof(int), ntiles, stream)) splits = 1;
    w4a8_kernel<BM, WM, STAGES><<<dim3(tiles.x, tiles.y, splits), THREADS, SMEM, stream>>>(
        xq, sx, xsum, Wq, wscale, gscale, gzero, y, M, N, K, g_ws, g_counters);
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// What a model layer calls: quantize x per token (into xq, sx, xsum), then the W4A8 GEMM. The Python wrapper
// checks K % 128 == 0 and the shapes with clear messages; here a bad call does nothing rather than read out
// of bounds.
EXPORT void linear_w4a8(const __half* x, const int32_t* q, const __half* scale, const uint8_t* gscale,
                        const uint8_t* gzero, int8_t* xq, float* sx, int* xsum, __half* y, int M, int N, int K,
                        cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q) || !aligned16(xq)) return;
    quantize_tokens_kernel<<<M, QTHREADS, 0, stream>>>(x, xq, sx, xsum, K);
    // 32 tokens per block up to M = 32, then 64: more tokens per block read each weight fewer times, but the
    // 128-token tile needs twice the warps and registers and fits one block per SM.
    if (M <= 32) launch_cfg<32, 1, TILE_STAGES>(xq, sx, xsum, q, scale, gscale, gzero, y, M, N, K, stream);
    else launch_cfg<64, 1, TILE_STAGES>(xq, sx, xsum, q, scale, gscale, gzero, y, M, N, K, stream);
}
