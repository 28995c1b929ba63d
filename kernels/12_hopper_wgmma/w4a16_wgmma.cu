// Lesson 12's teaching kernel: lesson 10's W4A16 layer on Hopper's own machinery.
// y[M,N] = x[M,K] · Ŵ[N,K]ᵀ, Ŵ = q · scale, lesson 10's format: symmetric INT4 in mma fragment order, one FP16
// scale per 128 weights along K (harness/quant.py, to_fragments).
//
// Three things are new, each a piece of the sm_90a hardware:
//   - the copy engine (TMA): one thread asks for a whole K tile (x as a 2-D box through a tensor map, the weights
//     and scales as 1-D bulk copies); no other thread computes an address or issues a load;
//   - mbarriers: a 64-bit counter in shared memory. A stage's "full" barrier completes when the bytes the
//     producer announced have landed; its "empty" barrier completes when every thread has let go of the stage;
//   - wgmma: one instruction per warpgroup (4 warps) multiplies 64 outputs × 64 tokens × 16 of K, A (the
//     weights) from the registers the warps dequantized into, B (x) read by the tensor cores from shared memory.
// A block: 128 outputs (two warpgroups) × 64 tokens, K in tiles of 128 (one scale group), a ring of 4 stages.
// REQUIRES: sm_90a
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

constexpr int GROUP = 128;    // K tile = one scale group
constexpr int TBN = 128;      // outputs per block: two warpgroups of 64
constexpr int BM = 64;        // tokens per block: wgmma's N
constexpr int STAGES = 4;     // K tiles in the ring
constexpr int THREADS = 256;  // 8 warps
// One stage: x (two boxes of 64 K × 64 tokens × 2 bytes), the weights of the block's 8 m16 tiles (1 KB each), the
// 128 scales; rounded up to 1024 bytes, the swizzle's atom, so every stage starts where the pattern begins.
constexpr int X_BYTES = BM * GROUP * 2, W_BYTES = TBN * GROUP / 2, S_BYTES = TBN * 2;
constexpr int STAGE = (X_BYTES + W_BYTES + S_BYTES + 1023) / 1024 * 1024;
constexpr int SMEM = STAGES * STAGE + 1024;  // + room to align the ring

// --- lesson 10's dequantize: one fragment-order word (8 nibbles u = q + 8) → the lane's 4 A registers of one
// k16 step, q as exact halves (the 0x6400 trick), times the row's scale (registers 0, 2: row g; 1, 3: row g + 8).
__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ void frag_w(uint32_t u, __half2 s_lo, __half2 s_hi, uint32_t (&a)[4]) {
    const uint32_t v = u >> 8, magic = 0x64006400u;
    const __half2 k1032 = __float2half2_rn(1032.0f), sixteenth = __float2half2_rn(0.0625f),
                  m72 = __float2half2_rn(-72.0f);
    a[0] = h2_bits(__hmul2(__hsub2(bits_h2((u & 0x000F000Fu) | magic), k1032), s_lo));
    a[1] = h2_bits(__hmul2(__hfma2(bits_h2((u & 0x00F000F0u) | magic), sixteenth, m72), s_hi));
    a[2] = h2_bits(__hmul2(__hsub2(bits_h2((v & 0x000F000Fu) | magic), k1032), s_lo));
    a[3] = h2_bits(__hmul2(__hfma2(bits_h2((v & 0x00F000F0u) | magic), sixteenth, m72), s_hi));
}

// --- mbarriers (shared-memory addresses as 32-bit numbers, as PTX takes them) -----------------------------------
// A barrier counts arrivals down from its count; when they reach zero and no announced bytes are still to land,
// its phase completes and it resets for the next phase. Phases alternate parity 0, 1, 0, …: a waiter names the
// parity of the phase it waits for, so phase k of a stage's barrier (its k-th use) has parity k & 1. One bit is
// enough: try_wait is defined only for the current phase and the one before (PTX ISA), and the ring keeps every
// waiter within that, because a stage is refilled only after all its readers have let go of it.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// One arrival that also announces `bytes` more to land (the producer's, before its copies).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// One plain arrival (a consumer letting go of a stage).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Wait until the phase of parity `parity` has completed. try_wait may suspend the thread until then or for a
// system-dependent time limit (PTX ISA), so the loop is not a pure spin. What landed before the phase completed is
// then visible to this thread: a bulk copy's completion carries an implicit generic-async proxy fence.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// --- the copy engine: each copy counts its bytes on `bar` as they land ------------------------------------------
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// The box of the tensor map whose first element is (column c0 = K, row c1 = token).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// --- wgmma -------------------------------------------------------------------------------------------------------
// The accumulators are registers the tensor cores write while the warps run on; the empty asm statements keep the
// compiler from moving them across the fence and the wait.
template <int R> __device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Before the first wgmma of a batch: registers (A, the accumulators) written by ordinary instructions become
// visible to the asynchronous tensor cores. (Shared memory written by ordinary stores would need fence.proxy.async
// too; here wgmma reads only what the copy engine wrote.)
__device__ __forceinline__ void wgmma_fence(float (&d)[32]) {
    pin(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
// Close the batch of wgmma issued so far into one group.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until every committed group has finished: the accumulators hold the sums, shared memory is read. Before
// this, touching the accumulators or the A registers of an in-flight wgmma is undefined (PTX ISA, wgmma.wait_group).
__device__ __forceinline__ void wgmma_wait_all(float (&d)[32]) {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    pin(d);
}
// B's matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address >> 4, 16-29 the leading
// byte offset >> 4 (unused for a K-major 128-byte swizzle: 1), 32-45 the byte step between 8-row atoms >> 4
// (1024), 62-63 the swizzle (1 = 128 bytes). 128-byte rows are a layout wgmma reads only in this mode (PTX ISA,
// "Shared Memory Matrix Layout"). The start address is the unswizzled one: the hardware applies the swizzle to the
// address bits as it reads, so each atom starts 1024-aligned and the descriptor's base offset (bits 49-51) stays 0.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// d += A · B for 64 outputs × 64 tokens × 16 of K. A: warp w of the warpgroup holds rows 16w … 16w+15 in
// mma.m16n8k16's A layout. B: 64 tokens × 16 of K, K-major, in shared memory at the descriptor. D: warp w, lane
// (g, t), register r is output row 16w + g + 8·((r % 4) / 2), token 8·(r / 4) + 2t + r % 2.
__device__ __forceinline__ void wgmma_64x64x16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

// x's tile in a stage, as the copy engine writes it with CU_TENSOR_MAP_SWIZZLE_128B: two boxes (K 0-63, K 64-127),
// each 64 token rows × 128 bytes; within each 8-row, 1024-byte atom the 16-byte piece p of row r sits at piece
// p ^ (r % 8). Then the weights: m16 tile i's 1 KB (two 64-wide K chunks × 32 lanes × 16 bytes), then the scales.
__global__ void __launch_bounds__(THREADS, 1)
wgmma_w4a16_basic_kernel(const __grid_constant__ CUtensorMap xmap, const int32_t* __restrict__ Wq,
                         const __half* __restrict__ scales, __half* __restrict__ y, int M, int N, int K) {
    extern __shared__ uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n0 = blockIdx.x * TBN, m0 = blockIdx.y * BM, nk = K / GROUP, tiles16 = (N + 15) / 16;
    const int npad = tiles16 * 16;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024 - (raw & 1023)) & 1023, sbase = raw + pad;  // the ring, 1024-aligned
    const uint8_t* smem = smem_raw + pad;
    const uint32_t full0 = (uint32_t)__cvta_generic_to_shared(full), empty0 = (uint32_t)__cvta_generic_to_shared(empty);

    // The producer (thread 0): K tile kt into stage s. It announces the bytes, then issues the copies; the stage's
    // full barrier completes when they have all landed. Thread 0 is also a math thread of warp 0: its waits hold
    // warp 0, and through the collective wgmma warp 0's whole warpgroup (a producer warp of its own would not).
    // Weight tiles past N are not copied (their warps compute on stale bytes and store nothing), so the bytes
    // announced are exactly those copied.
    const int my_tiles = min(8, tiles16 - n0 / 16);
    const uint32_t s_bytes = (uint32_t)min(TBN, npad - n0) * 2;
    auto produce = [&](int kt, int s) {
        const uint32_t st = sbase + s * STAGE, bar = full0 + 8 * s;
        mbar_arrive_expect_tx(bar, X_BYTES + my_tiles * 1024 + s_bytes);
        tma_load_2d(st, &xmap, kt * GROUP, m0, bar);  // tokens past M arrive as zeros
        tma_load_2d(st + BM * 128, &xmap, kt * GROUP + 64, m0, bar);
        const uint8_t* w = reinterpret_cast<const uint8_t*>(Wq) + ((size_t)(n0 / 16) * (K / 64) + 2 * kt) * 512;
        for (int i = 0; i < my_tiles; ++i) bulk_copy(st + X_BYTES + i * 1024, w + (size_t)i * (K / 64) * 512, 1024, bar);
        bulk_copy(st + X_BYTES + W_BYTES, scales + (size_t)kt * npad + n0, s_bytes, bar);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);              // the producer's one arrival (plus the bytes it announces)
            mbar_init(empty0 + 8 * s, THREADS);       // every thread lets go of the stage
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
        for (int i = 0; i < STAGES && i < nk; ++i) produce(i, i);
    }
    __syncthreads();

    float acc[32];
#pragma unroll
    for (int r = 0; r < 32; ++r) acc[r] = 0.f;
    uint32_t a[8][4];  // the warp's A registers for the tile's 8 k16 steps
    for (int i = 0; i < nk; ++i) {
        const int s = i % STAGES;
        const uint32_t st = sbase + s * STAGE;
        // BEGIN EXERCISE 12.a: the ring: hand back the last tile's stage, refill it, wait for this tile
        // TODO (roughly 10 lines): every thread is done with tile i - 1's stage: say so on that stage's empty
        //   barrier. Thread 0 then waits until everyone has, and refills that stage with tile i + 3, STAGES
        //   after tile i - 1 (if there is one), by calling produce. Last, every thread waits on stage s's
        //   full barrier for tile i's bytes. Each barrier's phase parity follows how many times its stage has been used.
        // END EXERCISE
        __syncwarp();  // thread 0 may have been refilling: its warp meets again before the warp-wide wgmma below

        // Dequantize the warp's 16 weight rows for the tile's 8 k16 steps into A registers.
        const uint8_t* stage = smem + s * STAGE;
        const __half* sc = reinterpret_cast<const __half*>(stage + X_BYTES + W_BYTES) + warp * 16 + g;
        const __half2 s_lo = __half2half2(sc[0]), s_hi = __half2half2(sc[8]);
#pragma unroll
        for (int kq = 0; kq < 2; ++kq) {
            const uint4 wv = reinterpret_cast<const uint4*>(stage + X_BYTES + warp * 1024 + kq * 512)[lane];
            frag_w(wv.x, s_lo, s_hi, a[4 * kq + 0]);
            frag_w(wv.y, s_lo, s_hi, a[4 * kq + 1]);
            frag_w(wv.z, s_lo, s_hi, a[4 * kq + 2]);
            frag_w(wv.w, s_lo, s_hi, a[4 * kq + 3]);
        }

        // BEGIN EXERCISE 12.b: the tile's multiply on the tensor cores
        // TODO (roughly 5 lines): make a[] and acc visible to the tensor cores, issue one wgmma_64x64x16
        //   per k16 step j = 0 … 7 with A = a[j] and B = x's 16 K columns of step j in this stage (a matrix
        //   descriptor of where they start), close them into a group and wait for it, so that the stage
        //   can be handed back at the top of the next iteration.
        (void)st;
        // END EXERCISE
    }

    // D is yᵀ: its rows are outputs n, its columns tokens m (the layout above wgmma_64x64x16).
#pragma unroll
    for (int r = 0; r < 32; ++r) {
        const int n = n0 + 16 * warp + g + 8 * ((r % 4) / 2), m = m0 + 8 * (r / 4) + 2 * t + r % 2;
        if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(acc[r]);
    }
}

// The tensor map of x [M, K] fp16: boxes of 64 K × 64 tokens, the 128-byte swizzle, zeros outside the matrix.
// Made on the host for every call (x moves between calls); the driver's function is looked up once.
static bool make_xmap(CUtensorMap* map, const __half* x, int M, int K) {
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
    const cuuint32_t box[2] = {64, (cuuint32_t)BM}, elem_strides[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(x), dims, strides, box, elem_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Fragment order (lesson 10): q int32 [ceil(N/16), K/64, 32, 4], scales fp16 [K/128, ceil(N/16)·16]. The Python
// wrapper checks shapes and formats with clear messages; here a bad call does nothing rather than read out of
// bounds (the check then reports every output unwritten).
EXPORT void linear_w4a16_wgmma_basic(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N,
                                     int K, cudaStream_t stream) {
    if (K % GROUP || K < GROUP || !aligned16(x) || !aligned16(q) || !aligned16(scales) || M < 1 || N < 1) return;
    static bool ready = false;
    if (!ready) {
        cudaFuncSetAttribute(wgmma_w4a16_basic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
        ready = true;
    }
    CUtensorMap map;
    if (!make_xmap(&map, x, M, K)) return;
    const dim3 grid((N + TBN - 1) / TBN, (M + BM - 1) / BM);
    wgmma_w4a16_basic_kernel<<<grid, THREADS, SMEM, stream>>>(map, q, scales, y, M, N, K);
}
