// Lesson 12's fast kernel: the W4A16 layer on Hopper's copy engine (TMA) and wgmma, beside the teaching kernel
// (w4a16_wgmma.cu), which holds the same ideas in one 64-token tile. No stub: nothing here is an exercise.
// y[M,N] = x[M,K] · Ŵ[N,K]ᵀ, Ŵ = q · scale, lesson 10's format: symmetric INT4 in mma fragment order, one FP16
// scale per 128 weights along K (harness/quant.py, to_fragments).
//
// What it adds to the teaching kernel:
//   - the token tile follows M (8, 16, 32, 64 or 128 tokens: wgmma's N), so a decode call multiplies no padding;
//   - split-K by lesson 09's cost model when the tiles cannot fill the SMs (lesson 10's fix-up);
//   - the warps dequantize the next K tile while the last one's wgmma run (wgmma.wait_group 1), into a second
//     register set: an in-flight wgmma's A registers must not be written (PTX ISA, wgmma.wait_group); and one block
//     barrier per K tile frees the stage instead of a second mbarrier;
//   - the weights are copied with an L2 evict-first hint (each is read once).
// The copies: one thread per block issues every copy of a K tile: x through a TMA tensor map (a 2-D box, rows
// past M filled with zeros by the hardware, written in the 128-byte swizzle wgmma reads), the weights and scales
// as 1-D bulk copies; each stage's mbarrier counts the bytes that landed. The copies run STAGES − 1 K tiles ahead.
// The math: wgmma (warpgroup MMA, 4 warps): each warp dequantizes its 16 weight rows straight into the A
// registers, and one instruction multiplies 64 outputs × BM tokens × 16 of K, reading x (B) from shared memory.
// Two warpgroups (256 threads) make a 128-output block, lesson 10's tile, so its split-K carries over.
// REQUIRES: sm_90a
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

// wgmma exists on sm_90a only; a build for any other architecture (the harness builds this file for sm_90a alone)
// would trap instead of assembling it.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HOPPER(...) __trap()
#else
#define HOPPER(...) __VA_ARGS__
#endif

constexpr int WG_STAGES = 4;  // K tiles in the shared-memory ring, at most (what fits in 200 KB at 1 block per SM)
constexpr int WG_SPLIT_BLOCKS = 2;  // blocks per SM a wave counts when choosing the split (at most what fits)
constexpr int WG_SPLIT_COST = 4;  // what a block costs besides its K tiles, in K tiles (the split rule of lessons 09-10)

constexpr int GROUP = 128, TBN = 128, THREADS = 256;  // K tile = one scale group; outputs per block; 2 warpgroups

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) | c, one LOP3
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
__device__ __forceinline__ __half lds16(uint32_t addr) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
    return __ushort_as_half(v);
}

// Lesson 10's conversion: one fragment-order word (8 nibbles u = q + 8) → the lane's 4 A registers of one k16
// step, q as exact halves; then × the row's scale (registers 0, 2: row g; 1, 3: row g + 8).
__device__ __forceinline__ void frag_w(uint32_t u, __half2 s_lo, __half2 s_hi, uint32_t (&a)[4]) {
    const uint32_t v = u >> 8, magic = 0x64006400u;
    const __half2 k1032 = __float2half2_rn(1032.0f), sixteenth = __float2half2_rn(0.0625f), m72 = __float2half2_rn(-72.0f);
    a[0] = h2_bits(__hmul2(__hsub2(bits_h2(and_or(u, 0x000F000Fu, magic)), k1032), s_lo));
    a[1] = h2_bits(__hmul2(__hfma2(bits_h2(and_or(u, 0x00F000F0u, magic)), sixteenth, m72), s_hi));
    a[2] = h2_bits(__hmul2(__hsub2(bits_h2(and_or(v, 0x000F000Fu, magic)), k1032), s_lo));
    a[3] = h2_bits(__hmul2(__hfma2(bits_h2(and_or(v, 0x00F000F0u, magic)), sixteenth, m72), s_hi));
}

// --- mbarriers and the copy engine ---------------------------------------------------------------------------
// A stage's mbarrier expects one arrival (the producer's, which also announces the bytes to come); it completes
// its phase when that arrival and all the announced bytes have landed. Waiters name the phase's parity; one bit is
// enough (try_wait is defined for the current phase and the one before, PTX ISA) because the block barrier before
// each refill keeps every waiter within one phase. try_wait may suspend the thread for a system-dependent time, so
// the wait loop is not a pure spin. A bulk copy's completion, seen on the mbarrier, carries an implicit
// generic-async proxy fence: its bytes are visible to the waiting thread's loads and to its wgmma.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    HOPPER(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    HOPPER(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    HOPPER(asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                        "@!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory"));
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    HOPPER(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
                        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(0x12F0000000000000ull) : "memory"));  // L2 evict-first: read once
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    HOPPER(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory"));
}

// --- wgmma ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { HOPPER(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")); }
__device__ __forceinline__ void wgmma_commit() { HOPPER(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory")); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    HOPPER(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"));
}
// Keeps the compiler from moving an accumulator while a wgmma that writes it is in flight.
template <int R> __device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// x's tile in shared memory, as the TMA writes it with CU_TENSOR_MAP_SWIZZLE_128B: per stage two boxes (K 0-63,
// K 64-127) of BM token rows × 128 bytes; within each 8-row, 1024-byte atom the 16-byte piece p of row r sits at
// piece p ^ (r % 8) (lesson 10 did this by hand): 128-byte rows are a layout wgmma reads only in this mode (PTX ISA,
// "Shared Memory Matrix Layout"). No thread stores to shared memory that wgmma reads, so no fence.proxy.async.
// wgmma reads B through a 64-bit matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
//   bits  0-13  start address >> 4 (shared window)      bits 16-29  leading-dimension byte offset >> 4
//   bits 32-45  stride-dimension byte offset >> 4       bits 62-63  swizzle: 1 = 128-byte
// For a K-major operand in the 128-byte swizzle the stride offset is the step between 8-row atoms (1024 bytes)
// and the leading offset is not used (1 by convention).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// k16 step j (0-7) of a K tile, K 16j … 16j+15, starts in box j / 4, 32 bytes into each 128-byte row: the swizzle
// is applied by the hardware to the address bits, so the step's start is its unswizzled offset.

// wgmma.m64nNk16, f32 += f16 × f16, A from registers (the layout of mma.m16n8k16's A, warp w of the warpgroup
// holding rows 16w … 16w+15), B (K-major, N = the tile's tokens) from shared memory. D: warp w, lane (g, t),
// register 4j + e is row 16w + g + 8·(e / 2), token 8j + 2t + e % 2 (mma.m16n8's C, repeated along N).
template <int N> __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc);
template <> __device__ __forceinline__ void wgmma_rs<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
    HOPPER(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)));
}
template <> __device__ __forceinline__ void wgmma_rs<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
    HOPPER(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)));
}
template <> __device__ __forceinline__ void wgmma_rs<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
    HOPPER(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)));
}
template <> __device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    HOPPER(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)));
}
template <> __device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
    HOPPER(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)));
}

// A block: 128 outputs (two warpgroups of 64; warp w owns the block's m16 tile w) × BM tokens, K tiles
// [kt_begin, kt_end). Shared memory per stage, 1024-aligned: x (2 boxes × BM × 128 B), the 8 m16 tiles' weights
// (1 KB each: two 64-wide chunks × 32 lanes × 16 B), the 128 scales (256 B).
template <int BM, int STAGES>
struct Cfg {
    static constexpr int X_BYTES = BM * 256, W_BYTES = TBN * 64, S_BYTES = TBN * 2;
    static constexpr int STAGE = (X_BYTES + W_BYTES + S_BYTES + 1023) / 1024 * 1024;
    static constexpr int SMEM = STAGES * STAGE + 1024;  // + room to align the ring to 1024 bytes
};
template <int BM> constexpr int stages_for() {  // WG_STAGES, or as many as fit in 200 KB
    constexpr int fit = (200 * 1024 - 1024) / Cfg<BM, 1>::STAGE;
    return WG_STAGES < fit ? WG_STAGES : fit;
}

template <int BM, int STAGES>
__global__ void __launch_bounds__(THREADS, 1)
wgmma_w4a16_kernel(const __grid_constant__ CUtensorMap xmap, const int32_t* __restrict__ Wq,
                   const __half* __restrict__ scales, __half* __restrict__ y, int M, int N, int K,
                   float* __restrict__ ws, int* __restrict__ counters) {
    using C = Cfg<BM, STAGES>;
    constexpr int ND = BM / 2;  // accumulator registers per thread
    extern __shared__ uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.y * BM, groups = K / GROUP, splits = gridDim.z;
    const int kt_begin = (int)((long)groups * blockIdx.z / splits), kt_end = (int)((long)groups * (blockIdx.z + 1) / splits);
    const int nk = kt_end - kt_begin, tiles16 = (N + 15) / 16, npad = tiles16 * 16;
    const uint32_t sbase = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023) & ~1023u;
    const uint32_t fbase = (uint32_t)__cvta_generic_to_shared(full);

    // The producer (thread 0): K tile kt into stage s. Weight tiles past N are not copied (their warps compute
    // on stale bytes and store nothing); the byte count announced is exactly what is copied.
    const int my_tiles = min(8, tiles16 - n0 / 16);
    const uint32_t s_bytes = (uint32_t)min(TBN, npad - n0) * 2;
    const CUtensorMap* xm = &xmap;
    auto produce = [&](int kt, int s) {
        const uint32_t st = sbase + s * C::STAGE, bar = fbase + 8 * s;
        mbar_expect_tx(bar, C::X_BYTES + my_tiles * 1024 + s_bytes);
        tma_load_2d(st, xm, kt * GROUP, m0, bar);
        tma_load_2d(st + BM * 128, xm, kt * GROUP + 64, m0, bar);
        const uint8_t* wsrc = reinterpret_cast<const uint8_t*>(Wq) + ((size_t)(n0 / 16) * (K / 64) + 2 * kt) * 512;
        for (int i = 0; i < my_tiles; ++i) bulk_copy(st + C::X_BYTES + i * 1024, wsrc + (size_t)i * (K / 64) * 512, 1024, bar);
        bulk_copy(st + C::X_BYTES + C::W_BYTES, scales + (size_t)kt * npad + n0, s_bytes, bar);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) mbar_init(fbase + 8 * s, 1);
        HOPPER(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));  // visible to the copy engine
        for (int i = 0; i < STAGES - 1 && i < nk; ++i) produce(kt_begin + i, i);
    }
    __syncthreads();

    float acc[ND];
#pragma unroll
    for (int i = 0; i < ND; ++i) acc[i] = 0.f;
    const uint32_t wl = C::X_BYTES + warp * 1024 + lane * 16, sl = C::X_BYTES + C::W_BYTES + (warp * 16 + g) * 2;

    // One K tile: wait for its bytes, dequantize the warp's 8 k16 steps into a[] (the previous tile's wgmma may
    // still be running, on the other register set), issue 8 wgmma, then wait until only this tile's are in
    // flight: the previous tile's stage is free once every warp has passed the barrier, and the producer refills
    // it with the tile STAGES − 1 ahead (at the first tile, the stage no tile has used yet).
    auto step = [&](int i, uint32_t (&a)[8][4]) {
        const int s = i % STAGES;
        const uint32_t st = sbase + s * C::STAGE;
        mbar_wait(fbase + 8 * s, (uint32_t)(i / STAGES) & 1u);
        const __half2 s_lo = __half2half2(lds16(st + sl)), s_hi = __half2half2(lds16(st + sl + 16));
#pragma unroll
        for (int kq = 0; kq < 2; ++kq) {
            const uint4 wv = lds128(st + wl + kq * 512);
            frag_w(wv.x, s_lo, s_hi, a[4 * kq + 0]);
            frag_w(wv.y, s_lo, s_hi, a[4 * kq + 1]);
            frag_w(wv.z, s_lo, s_hi, a[4 * kq + 2]);
            frag_w(wv.w, s_lo, s_hi, a[4 * kq + 3]);
        }
        wgmma_fence();
        pin(acc);
#pragma unroll
        for (int j = 0; j < 8; ++j) wgmma_rs<BM>(acc, a[j], smem_desc(st + (j / 4) * BM * 128 + (j % 4) * 32));
        wgmma_commit();
        pin(acc);
        wgmma_wait<1>();
        __syncthreads();
        if (threadIdx.x == 0 && i + STAGES - 1 < nk) produce(kt_begin + i + STAGES - 1, (i + STAGES - 1) % STAGES);
    };
    // Two register sets: step i dequantizes into one while step i - 1's wgmma may still read the other (writing an
    // in-flight wgmma's A registers is undefined); the unrolled pair of steps names them statically.
    uint32_t a0[8][4], a1[8][4];
    int i = 0;
    for (; i + 1 < nk; i += 2) {
        step(i, a0);
        step(i + 1, a1);
    }
    if (i < nk) step(i, a0);
    wgmma_wait<0>();
    pin(acc);

    // Split K (lesson 10): publish this block's partial tile; the last block of the tile adds all partials in
    // split order and stores.
    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        float* mine = ws + ((size_t)tile * splits + blockIdx.z) * (BM * TBN);
#pragma unroll
        for (int r = 0; r < ND; ++r) mine[r * THREADS + threadIdx.x] = acc[r];
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
        for (int r = 0; r < ND; ++r) acc[r] = 0.f;
        for (int z = 0; z < splits; ++z, part += BM * TBN)
#pragma unroll
            for (int r = 0; r < ND; ++r) acc[r] += __ldcg(part + r * THREADS);
    }
#pragma unroll
    for (int r = 0; r < ND; ++r) {  // D is yᵀ: rows are outputs n, columns tokens m
        const int n = n0 + 16 * warp + g + 8 * ((r % 4) / 2), m = m0 + 8 * (r / 4) + 2 * t + r % 2;
        if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(acc[r]);
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

// The tensor map of x [M, K] fp16: a box of 64 K × BM rows, 128-byte swizzle, zeros outside. Encoded on the host
// for every call (x moves between calls); the driver function is looked up once, through the runtime.
static bool make_xmap(CUtensorMap* map, const __half* x, int M, int K, int BM) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void* fn = nullptr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn)
            return false;
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)M}, strides[1] = {(cuuint64_t)K * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)BM}, estr[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(x), dims, strides, box, estr,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int BM>
static void launch_bm(const __half* x, const int32_t* Wq, const __half* scales, __half* y, int M, int N, int K,
                      cudaStream_t stream) {
    constexpr int STAGES = stages_for<BM>();
    using C = Cfg<BM, STAGES>;
    auto kernel = wgmma_w4a16_kernel<BM, STAGES>;
    static int sms = 0, per_sm = 0;
    if (!sms) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, C::SMEM);
        per_sm = per_sm < 1 ? 1 : per_sm;
    }
    CUtensorMap map;
    if (!make_xmap(&map, x, M, K, BM)) return;  // y stays as it was: the check reports every element unwritten
    const dim3 tiles((N + TBN - 1) / TBN, (M + BM - 1) / BM);
    const int ntiles = tiles.x * tiles.y, ktiles = K / GROUP;
    // Split K when the tiles cannot fill the SMs (lesson 09's cost model: waves × (K tiles + a block's fixed cost)).
    int splits = 1;
    const int slots = sms * (per_sm < WG_SPLIT_BLOCKS ? per_sm : WG_SPLIT_BLOCKS);
    auto cost = [&](int s) { return (float)(((long)ntiles * s + slots - 1) / slots) * ((float)ktiles / s + WG_SPLIT_COST); };
    for (int s = 2; s <= 16 && s <= ktiles / 4; ++s)
        if (cost(s) < cost(splits)) splits = s;
    if (splits > 1 && !reserve_split((size_t)ntiles * splits * BM * TBN * sizeof(float), ntiles, stream)) splits = 1;
    kernel<<<dim3(tiles.x, tiles.y, splits), THREADS, C::SMEM, stream>>>(map, Wq, scales, y, M, N, K, g_ws, g_counters);
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Fragment order (lesson 10): q int32 [ceil(N/16), K/64, 32, 4], scales fp16 [K/128, ceil(N/16)·16]. The Python
// wrapper checks shapes and formats with clear messages; here a bad call does nothing rather than read out of
// bounds. Tokens in tiles of 8 … 128 (wgmma's N); past 128, several token tiles.
EXPORT void linear_w4a16_wgmma(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                               cudaStream_t stream) {
    if (K % GROUP || !aligned16(x) || !aligned16(q) || !aligned16(scales) || M < 1 || N < 1) return;
    if (M <= 8) launch_bm<8>(x, q, scales, y, M, N, K, stream);
    else if (M <= 16) launch_bm<16>(x, q, scales, y, M, N, K, stream);
    else if (M <= 32) launch_bm<32>(x, q, scales, y, M, N, K, stream);
    else if (M <= 64) launch_bm<64>(x, q, scales, y, M, N, K, stream);
    else launch_bm<128>(x, q, scales, y, M, N, K, stream);
}
