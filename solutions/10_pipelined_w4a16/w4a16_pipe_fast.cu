// Lesson 10's fast kernel (solutions/ only, no exercise; the lesson's teaching file is w4a16_pipe.cu).
// Lesson 10: the dequantization bottleneck inside a pipelined tensor-core W4A16 kernel.
// y[M,N] = x[M,K] · Ŵ[N,K]ᵀ, Ŵ = q · scale, symmetric INT4 q (−8..7), one FP16 scale per 128 weights along K.
// One kernel body, five steps of a ladder and a decode GEMV, each step a launcher measured against the one before (lessons/10_pipelined_w4a16/notes.md,
// results/10.json):
//   gemm_w4a16_writeback         lesson 07's packed weights → an FP16 tile in shared memory → ldmatrix → mma;
//   gemm_w4a16_writeback_padded  the same with the FP16 tile's rows padded by 16 bytes (the bank conflicts);
//   gemm_w4a16_frag              weights in fragment order (harness/quant.py, to_fragments): a lane's 16-byte
//                                load is its own A fragments of four mma steps, dequantized in registers;
//   gemm_w4a16_frag_pipe         + a cp.async ring of TILE_STAGES K tiles (TILE_STAGES_M8 at M <= 8 unsplit), so
//                                loads overlap the math (from 64 tokens on mbarriers; at 128 tokens on sm_90 filled
//                                by the copy engine, TMA);
//   gemm_w4a16_frag_split        + split-K where the output tiles cannot fill the SMs (K slices within the block
//                                where the split's parts would be short);
//   linear_w4a16_frag            + at M <= 8 where the tiles would split K, lesson 07's decode GEMV on the same bytes
//                                (gemv_w4a16_frag: K split across a block's warps, no fix-up): the lesson's kernel.
// Every step: x through ldmatrix from a swizzled shared tile, mma.sync m16n8k16 with the weights as A (16
// outputs) and x as B (8 tokens), FP32 accumulation. The first four are single-K-range (no split) on purpose.
// REQUIRES: sm_80
#include <cuda.h>  // CUtensorMap (the copy engine path; the encoder is looked up through the runtime)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
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

constexpr int TILE_STAGES = 4;  // cp.async ring depth of the pipelined steps (from TILE_SKEW tokens: TILE_STAGES_SKEW)
constexpr int TILE_SKEW = 64;  // tiles of this many tokens and up: the K loop on mbarriers, no block barrier
constexpr int TILE_STAGES_SKEW = 5;  // ... their ring depth at 128 tokens (it loads one K tile less ahead than the barrier's)
constexpr int TILE_STAGES_SKEW64 = 4;  // ... at 64 tokens (M 33-64): 97 KB and ≤ 128 registers, so two blocks fit an SM
constexpr int TILE_STAGES_M8 = 5;  // ... of the 8-token tile (M <= 8) where K is not split (its stage is the smallest: 10 KB)
constexpr int TILE_SPLIT_COST = 4;  // what a block costs besides its K tiles, in K tiles (choosing the split; lesson 09)
constexpr int TILE_SPLIT_BLOCKS = 2;  // blocks per SM a wave counts (at most what fits)
constexpr int TILE_STAGES_KW = 4;  // ring depth of the K-sliced blocks (a stage holds 2 or 4 K tiles)
constexpr int TILE_SLICE_MAX_KT = 8;  // K slices replace a split whose parts would have fewer K tiles than this
constexpr int TILE_ACC = 2;  // accumulator sets where a tile of ≤ 32 tokens runs one block per SM
#ifndef TILE_TMA
#define TILE_TMA 1  // sm_90+: the 128-token tile's ring filled by the copy engine (0: by cp.async, on mbarriers)
#endif
constexpr int TILE_FULL_PCT = 80;  // tiles of ≤ 32 tokens are not split once they alone give this % of the SMs a block

constexpr int GROUP = 128, TBN = 128, THREADS = 256;  // K tile = one scale group; outputs per block; 8 warps
enum Mode { WRITEBACK = 0, WRITEBACK_PADDED = 1, FRAGMENTS = 2 };

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) | c, one LOP3
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Shared memory is addressed by 32-bit shared-window addresses (__cvta_generic_to_shared), computed once.
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem, bool valid) {  // invalid: 16 zero bytes
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// mbarriers (sm_80+): a 64-bit shared-memory counter that completes a phase once `count` arrivals have come in.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {  // release: this thread's writes (and landed copies) first
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {  // until the phase of this parity completes
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // try_wait suspends the warp a while instead of spinning
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n"
                 ::"r"(bar), "r"(parity) : "memory");
#else
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.test_wait.parity.shared.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n"
                 ::"r"(bar), "r"(parity) : "memory");
#endif
}

// The copy engine (TMA, sm_90+): one thread asks for a whole box of a matrix described by a tensor map the host
// encodes; the engine computes the addresses, zero-fills what lies outside the matrix and counts the bytes that land
// on an mbarrier, whose phase completes once the arrivals and the announced bytes are in (lesson 04).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define SM90(...) __trap()  // never launched there: the host takes the cp.async ring
#else
#define SM90(...) __VA_ARGS__
#endif
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {  // arrive, announcing bytes to come
    SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    SM90(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                      ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory"));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {  // four 8x8 b16 matrices
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
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
__device__ __forceinline__ void sts128(uint32_t addr, const uint32_t (&w)[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One fragment-order word (8 unsigned nibbles u = q + 8) → the lane's A fragment of one mma step: 4 half2
// of q, exact small integers (the scale comes after). Nibbles i and i + 4 are the halves of register i: a0 (row
// g, columns 2t, 2t+1), a1 (row g + 8), a2 (row g, columns 2t+8, 2t+9), a3 (row g + 8); they come out of lesson
// 07's trick: a nibble ANDed into the mantissa under the exponent of 1024 (0x6400) is the half 1024 + n;
// nibbles 1 and 5 are used 4 bits up (1024 + 16n, brought down by an HFMA2 with 1/16), nibbles 2, 3, 6, 7 after
// one shift by 8. Two instructions per register, and no permutation: the offline layout did that.
__device__ __forceinline__ void frag_q(uint32_t u, uint32_t (&a)[4]) {
    const uint32_t v = u >> 8, magic = 0x64006400u;
    const __half2 k1032 = __float2half2_rn(1032.0f), sixteenth = __float2half2_rn(0.0625f), m72 = __float2half2_rn(-72.0f);
    a[0] = h2_bits(__hsub2(bits_h2(and_or(u, 0x000F000Fu, magic)), k1032));
    a[1] = h2_bits(__hfma2(bits_h2(and_or(u, 0x00F000F0u, magic)), sixteenth, m72));
    a[2] = h2_bits(__hsub2(bits_h2(and_or(v, 0x000F000Fu, magic)), k1032));
    a[3] = h2_bits(__hfma2(bits_h2(and_or(v, 0x00F000F0u, magic)), sixteenth, m72));
}

// Ŵ = q · scale in the fragment: registers 0 and 2 are row g, 1 and 3 row g + 8.
__device__ __forceinline__ void scale_frag(uint32_t (&a)[4], __half2 s_lo, __half2 s_hi) {
    a[0] = h2_bits(__hmul2(bits_h2(a[0]), s_lo));
    a[1] = h2_bits(__hmul2(bits_h2(a[1]), s_hi));
    a[2] = h2_bits(__hmul2(bits_h2(a[2]), s_lo));
    a[3] = h2_bits(__hmul2(bits_h2(a[3]), s_hi));
}

// Lesson 07's packed word (8 signed weights k..k+7, weight k + i in bits 4i) → 4 half2 in K order, scaled: the
// write-back steps' conversion. Flip each nibble's top bit (q + 8), then the same trick gives the pairs
// (w0, w4) (w1, w5) (w2, w6) (w3, w7), which one byte permute per word puts back in K order.
__device__ __forceinline__ void packed_dequant(uint32_t word, __half2 s, uint32_t (&w)[4]) {
    const uint32_t u = word ^ 0x88888888u, v = u >> 8, magic = 0x64006400u;
    const __half2 k1032 = __float2half2_rn(1032.0f), sixteenth = __float2half2_rn(0.0625f), m72 = __float2half2_rn(-72.0f);
    const uint32_t p04 = h2_bits(__hsub2(bits_h2(and_or(u, 0x000F000Fu, magic)), k1032));
    const uint32_t p15 = h2_bits(__hfma2(bits_h2(and_or(u, 0x00F000F0u, magic)), sixteenth, m72));
    const uint32_t p26 = h2_bits(__hsub2(bits_h2(and_or(v, 0x000F000Fu, magic)), k1032));
    const uint32_t p37 = h2_bits(__hfma2(bits_h2(and_or(v, 0x00F000F0u, magic)), sixteenth, m72));
    w[0] = h2_bits(__hmul2(bits_h2(__byte_perm(p04, p15, 0x5410)), s));  // w0 w1
    w[1] = h2_bits(__hmul2(bits_h2(__byte_perm(p26, p37, 0x5410)), s));  // w2 w3
    w[2] = h2_bits(__hmul2(bits_h2(__byte_perm(p04, p15, 0x7632)), s));  // w4 w5
    w[3] = h2_bits(__hmul2(bits_h2(__byte_perm(p26, p37, 0x7632)), s));  // w6 w7
}

// x's shared tile: BM token rows × 128 halves (256 bytes, 16 pieces of 16 bytes). ldmatrix reads the same
// piece of 8 consecutive rows at once; unswizzled, those are 256 bytes apart, all in the same 4 banks (8-way
// conflict). Piece p of row r is stored at p ^ (r % 8): 8 consecutive rows, 8 different bank groups.
__device__ __forceinline__ int x_slot(int r, int p) { return p ^ (r & 7); }

// The lane's B fragments (x) for two k16 steps and 8 tokens. ldmatrix.x4: lanes 8q … 8q+7 give the row
// addresses of matrix q, and lane (g, t) receives row g, halves 2t, 2t+1 of each matrix. With matrix q = piece
// 4·j2 + q of the 8 token rows (K 32·j2 + 8q … +7), the four registers are b0, b1 of step 2·j2 and b0, b1 of
// step 2·j2 + 1 (PTX: B[k][n] with k = 2t, 2t+1 and 2t+8, 2t+9, n = g).
// x_row_addr: the address this lane gives, relative to the stage: row r = r0 + lane % 8, piece p = 4·j2 + lane / 8.
// x_frags: the ldmatrix.x4 at that address (plus the stage and the n8 tile's rows).
__device__ __forceinline__ uint32_t x_row_addr(int r0, int j2, int lane) {
    const int r = r0 + (lane & 7), p = 4 * j2 + (lane >> 3);
    return r * 256 + x_slot(r, p) * 16;
}
__device__ __forceinline__ void x_frags(uint32_t (&b)[4], uint32_t addr) { ldsm_x4(b, addr); }

// A block: 128 outputs × BM tokens, K tiles of 128 (one scale group) from its K range [kt_begin, kt_end).
// 8 warps: WM along the tokens × 8 / WM along the outputs; a warp owns 16·MT outputs × 8·NT tokens.
// With KW K slices (KW = 2 or 4, WM = 1): 128 / KW outputs, 8 / KW warps per slice; a stage holds KW consecutive
// K tiles in this layout one after another, and slice k computes the stage's tile k.
// Shared memory per stage: x (BM × 256 B), then the weights: FRAGMENTS: the block's 8 m16 tiles in fragment
// order (1 KB each: two 64-wide K chunks × 32 lanes × 16 B) and its 128 scales (256 B); WRITEBACK*: lesson 07's
// packed rows (128 × 64 B). WRITEBACK* also has one FP16 tile, 128 rows × (128 + PAD) halves.
template <int MODE, int BM, int WM, int STAGES, int KW = 1, int ACC_ = 1, bool TMA_ = false>
struct Cfg {
    static_assert(KW == 1 || (MODE == FRAGMENTS && WM == 1), "K slices: fragment order, one warp row");
    // TMA: the ring filled by the copy engine (sm_90+). x's tile is two boxes of BM rows × 64 halves, [half][row],
    // rows of 128 bytes in the engine's 128-byte swizzle (piece c of row r at c ^ (r % 8)), so a stage starts on
    // 1 KB (the swizzle's period); then the weights and scales as before. Full and empty mbarriers follow the ring.
    static constexpr bool TMA = TMA_;
    static_assert(!TMA || (MODE == FRAGMENTS && KW == 1 && STAGES > 1), "the copy engine: fragment order, a ring");
    static constexpr int BN = TBN / KW, TWN = 8 / WM / KW, MT = BN / TWN / 16, NT = BM / WM / 8;  // BN: outputs per block
    static constexpr int X_BYTES = BM * 256, W_BYTES = BN * 64, S_BYTES = MODE == FRAGMENTS ? BN * 2 : 0;
    static constexpr int SUB = X_BYTES + W_BYTES + S_BYTES;
    static constexpr int STAGE = TMA ? (SUB + 1023) / 1024 * 1024 : KW * SUB;  // a stage: KW K tiles, one per slice
    static constexpr int XROW = TMA ? 128 : 256;  // bytes from one token row of x's tile to the next
    static constexpr int PAD = MODE == WRITEBACK_PADDED ? 8 : 0, WROW = GROUP + PAD;  // FP16 tile row, in halves
    // SKEW: the ring's K loop without __syncthreads (the kernel); then STAGES mbarriers follow the ring. It loads
    // STAGES - 2 tiles ahead, so it needs 4 stages.
    static constexpr bool SKEW = !TMA && BM >= TILE_SKEW && MODE == FRAGMENTS && KW == 1 && STAGES >= 4;
    static constexpr int SMEM = STAGES * STAGE + (MODE == FRAGMENTS ? 0 : TBN * WROW * 2) + (SKEW ? 8 * STAGES : 0)
                                + (TMA ? 16 * STAGES + 1024 : 0);
    // Two blocks per SM: the tiles of ≤ 32 tokens, and the 64-token tile in fragment order (125 registers instead of
    // 137, no spills). K-sliced blocks run one per SM (the launcher).
    static constexpr int MIN_BLOCKS = (BM <= 32 || (BM == 64 && WM == 1 && MODE == FRAGMENTS)) && KW == 1 ? 2 : 1;
    // Small warp tiles scale after the mma: per K tile, 4 FFMA per m16n8 tile instead of 4 HMUL2 per mma step
    // of each m16 tile (32 per K tile), at the price of a second accumulator.
    static constexpr bool LATE_SCALE = MT * NT <= 2;
    // Accumulator sets (the launcher's choice): mma step q of a 64-wide K chunk adds into set q % ACC, the sets
    // added at the end (of the K tile with LATE_SCALE, of the K loop without), so that a warp's next mma on an output
    // tile need not wait for the last.
    static constexpr int ACC = ACC_;
    static_assert(ACC == 1 || (MODE == FRAGMENTS && KW == 1 && BM <= 32 && (ACC == 2 || (ACC == 4 && BM <= 16))),
                  "accumulator sets: 2 (or 4 up to 16 tokens) for the unsliced fragment-order tiles of ≤ 32 tokens");
    // Where the ring's next copies are issued. Right after the barrier, every warp of the block first spends ~80
    // instructions on them (addresses, predicates, 11 LDGSTS) with no mma ready, all at the same time. The
    // tensor-core-bound tiles (64 tokens and up) on the barrier's ring issue them after the third of the four k32
    // steps instead: 4-6% faster at M = 128 and 256, 2% at 64. The memory-bound small tiles keep them first: 1-2%
    // slower otherwise. Without the barrier (SKEW) the warps are not in step, and first is 1-2% faster again
    // (lessons/10_pipelined_w4a16/notes.md).
    static constexpr int LOAD_STEP = MODE != FRAGMENTS || STAGES == 1 ? 0 : BM >= 64 && !SKEW && !TMA ? 3 : 0;
    static_assert(KW == 1 || LOAD_STEP == 0, "K slices issue the copies after the barrier");
};

// The copy engine's tensor maps (TMA configurations only): x [M, K] in boxes of BM × 64 halves, swizzled; the
// fragment-order weights as [N/16 rows, K·2 words] in boxes of 8 × 256 words (a K tile of the block's 8 m16 tiles);
// the scales [K/128, N] in boxes of 1 × 128.
struct Maps { CUtensorMap x, w, s; };

template <int MODE, int BM, int WM, int STAGES, int KW = 1, int ACC = 1, bool TMA = false>
__global__ void __launch_bounds__(THREADS, (Cfg<MODE, BM, WM, STAGES, KW, ACC, TMA>::MIN_BLOCKS))
w4a16_kernel(const __half* __restrict__ x, const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
             __half* __restrict__ y, int M, int N, int K, float* __restrict__ ws, int* __restrict__ counters,
             const __grid_constant__ Maps maps) {
    using C = Cfg<MODE, BM, WM, STAGES, KW, ACC, TMA>;
    constexpr int MT = C::MT, NT = C::NT, BN = C::BN;
    extern __shared__ __align__(128) uint8_t smem[];
    pdl_trigger();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int kw = KW == 1 ? 0 : warp / (8 / KW), wi = KW == 1 ? warp : warp % (8 / KW);  // K slice, place in it
    const int wm0 = (wi / C::TWN) * (BM / WM), wn0 = (wi % C::TWN) * (16 * MT);
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, groups = K / GROUP, splits = gridDim.z;
    const int kt_begin = (int)((long)groups * blockIdx.z / splits), kt_end = (int)((long)groups * (blockIdx.z + 1) / splits);
    const int nk = (kt_end - kt_begin + KW - 1) / KW, tiles16 = (N + 15) / 16, npad = tiles16 * 16;  // nk: stages
    const uint32_t sraw = (uint32_t)__cvta_generic_to_shared(smem), sbase = TMA ? (sraw + 1023) & ~1023u : sraw;

    // Each thread's copies, planned once: source at K tile 0 (a K tile adds a fixed stride), offset in a stage.
    // The first version computed them in every K tile: 500 instructions per warp and K tile, a third of them
    // integer address arithmetic (SASS, lessons/10_pipelined_w4a16/notes.md).
    // With K slices a stage holds KW consecutive K tiles (sub-stages of the one-slice layout); piece c of a stage's
    // x, weights or scales is piece c % (pieces per tile) of its tile c / (pieces per tile). The stage starting at
    // K tile kt covers kt … kt + KW − 1; tiles past the range are not loaded (xk, wk, sk: which tile of the stage).
    constexpr int XP = KW * BM * 16, WP = KW * BN * 4, XN = (XP + THREADS - 1) / THREADS, WN = WP / THREADS;
    static_assert(WP % THREADS == 0, "every thread copies the same number of weight pieces");
    const __half* xsrc[XN];
    uint32_t xdst[XN];
    bool xok[XN];
    int xk[XN];
#pragma unroll
    for (int j = 0; j < XN; ++j) {  // x: piece p of token row r; rows past M are zeros
        const int c = threadIdx.x + j * THREADS, c1 = KW == 1 ? c : c % (BM * 16), r = c1 / 16, p = c1 % 16;
        xk[j] = KW == 1 ? 0 : c / (BM * 16);
        xok[j] = m0 + r < M;
        xsrc[j] = x + (size_t)(xok[j] ? m0 + r : 0) * K + p * 8 + xk[j] * GROUP;
        xdst[j] = xk[j] * C::SUB + r * 256 + x_slot(r, p) * 16;
    }
    const uint8_t* wsrc[WN];
    uint32_t wdst[WN];
    bool wok[WN];
    int wk[WN];
#pragma unroll
    for (int j = 0; j < WN; ++j) {
        const int c = threadIdx.x + j * THREADS, c1 = KW == 1 ? c : c % (BN * 4);
        wk[j] = KW == 1 ? 0 : c / (BN * 4);
        wdst[j] = wk[j] * C::SUB + C::X_BYTES + c1 * 16;
        if (MODE == FRAGMENTS) {  // BN / 16 m16 tiles × 1 KB per K tile, contiguous per tile in memory
            const int tile = n0 / 16 + c1 / 64;
            wok[j] = tile < tiles16;
            wsrc[j] = reinterpret_cast<const uint8_t*>(Wq) + (size_t)(wok[j] ? tile : 0) * (K / 64) * 512 + (c1 % 64) * 16
                      + wk[j] * 1024;
        } else {  // lesson 07's rows: piece c % 4 of row c / 4; rows past N re-read row N - 1 (not stored)
            wok[j] = true;
            wsrc[j] = reinterpret_cast<const uint8_t*>(Wq + (size_t)min(n0 + c / 4, N - 1) * (K / 8) + (c % 4) * 4);
        }
    }
    // Threads 0-15: 8 of the stage's KW × BN scales each.
    const int sk = KW == 1 ? 0 : (int)threadIdx.x / (BN / 8), s1 = KW == 1 ? (int)threadIdx.x : (int)threadIdx.x % (BN / 8);
    const bool sok = n0 + s1 * 8 < npad;
    const __half* ssrc = scales + (sok ? n0 + s1 * 8 : 0) + (size_t)sk * npad;
    const uint32_t sdst = sk * C::SUB + C::X_BYTES + C::W_BYTES + s1 * 16;

    auto load_x = [&](int kt, uint32_t stage) {
#pragma unroll
        for (int j = 0; j < XN; ++j)
            if ((XP % THREADS == 0 || threadIdx.x + j * THREADS < XP) && (KW == 1 || kt + xk[j] < kt_end))
                cp_async16(stage + xdst[j], xsrc[j] + kt * GROUP, xok[j]);
    };
    auto load_w = [&](int kt, uint32_t stage) {  // the weights and their scales: no kernel writes them
#pragma unroll
        for (int j = 0; j < WN; ++j)
            if (KW == 1 || kt + wk[j] < kt_end)
                cp_async16(stage + wdst[j], wsrc[j] + (size_t)kt * (MODE == FRAGMENTS ? 1024 : GROUP / 2), wok[j]);
        if (MODE == FRAGMENTS && threadIdx.x < KW * BN / 8 && (KW == 1 || kt + sk < kt_end))
            cp_async16(stage + sdst, ssrc + (size_t)kt * npad, sok);
    };
    auto load_tile = [&](int kt, uint32_t stage) { load_x(kt, stage), load_w(kt, stage); };

    // The lane's shared-memory reads, relative to a stage: x's ldmatrix rows for the four k32 steps (the
    // swizzle depends on lane % 8 only, since the warp's token rows start at a multiple of 8), its 16-byte
    // piece of each m16 tile's fragments, and the scales of its rows g and g + 8.
    // TMA: the same row and piece in the copy engine's layout ([half][row], 128-byte rows, the same XOR).
    uint32_t xl[4];
#pragma unroll
    for (int j2 = 0; j2 < 4; ++j2) {
        const uint32_t a = x_row_addr(wm0, j2, lane);
        xl[j2] = C::TMA ? (a >> 8) * 128 + (a & 127) + ((a >> 7) & 1) * (BM * 128) : a;
    }
    const uint32_t wl = C::X_BYTES + (wn0 / 16) * 1024 + lane * 16, sl = C::X_BYTES + C::W_BYTES + (wn0 + g) * 2;

    constexpr int NACC = C::ACC;
    float acc[MT][NT][4] = {};
    float accx[!C::LATE_SCALE && NACC > 1 ? NACC - 1 : 1][MT][NT][4] = {};
    uint32_t rd = sbase, wr = sbase;  // the stage to compute from, the stage to load into
    auto next = [&](uint32_t s) { return s + C::STAGE == sbase + STAGES * C::STAGE ? sbase : s + C::STAGE; };
    constexpr int AHEAD = STAGES - 1 - C::SKEW;  // tiles loaded ahead of the one computed
    // TMA: stage s's full mbarrier completes when its copies have landed, its empty one when the 8 warps have read it.
    const uint32_t full = sbase + STAGES * C::STAGE, empty = full + 8 * STAGES;
    auto tma_w = [&](int kt, int s) {  // thread 0: a stage's weights and scales, announcing all of its bytes
        const uint32_t stg = sbase + s * C::STAGE, bar = full + 8 * s;
        mbar_expect_tx(bar, C::X_BYTES + C::W_BYTES + C::S_BYTES);  // whole boxes, zeros included
        tma_box(stg + C::X_BYTES, &maps.w, kt * 256, n0 / 16, bar);
        tma_box(stg + C::X_BYTES + C::W_BYTES, &maps.s, n0, kt, bar);
    };
    auto tma_x = [&](int kt, int s) {  // thread 0: x's two boxes (K halves 0-63, 64-127 of the tile)
        const uint32_t stg = sbase + s * C::STAGE, bar = full + 8 * s;
        tma_box(stg, &maps.x, kt * GROUP, m0, bar);
        tma_box(stg + BM * 128, &maps.x, kt * GROUP + 64, m0, bar);
    };
    auto load_next = [&](int i) {  // in iteration i: tile i + AHEAD into the stage tile i + AHEAD - STAGES has left
        if constexpr (C::TMA) {  // the stage of tile j = i - 1, once every warp has read it, gets tile j + STAGES
            const int j = i - 1;  // (after the wait, LOAD_STEP 0: 3-4% faster than halfway through the tile)
            if (warp == 0 && j >= 0 && j + STAGES < nk) {  // all of warp 0 waits (mma.sync wants the warp whole)
                mbar_wait(empty + 8 * (j % STAGES), (uint32_t)(j / STAGES) & 1u);
                if (lane == 0) tma_w(kt_begin + j + STAGES, j % STAGES), tma_x(kt_begin + j + STAGES, j % STAGES);
                __syncwarp();
            }
        } else {
            if (i + AHEAD < nk) load_tile(kt_begin + (i + AHEAD) * KW, wr);
            cp_async_commit();
            wr = next(wr);
        }
    };
    // The ring's first tiles: their weights before pdl_wait() (under PDL they stream in while the previous kernel
    // finishes), x after it. Commit groups stay one per tile: group 0 also holds the later tiles' weights.
    const uint32_t bars = sbase + STAGES * C::STAGE;  // SKEW: tile i's mbarrier is i % STAGES, phase i / STAGES
    if constexpr (C::SKEW) {
        if (threadIdx.x < STAGES) mbar_init(bars + 8 * threadIdx.x, THREADS);
        __syncthreads();
    }
    if constexpr (C::TMA) {  // every stage's weights before pdl_wait(), x after it
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; ++s) mbar_init(full + 8 * s, 1), mbar_init(empty + 8 * s, 8);
            SM90(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));  // visible to the copy engine
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int s = 0; s < STAGES && s < nk; ++s) tma_w(kt_begin + s, s);
        pdl_wait();
        if (threadIdx.x == 0)
            for (int s = 0; s < STAGES && s < nk; ++s) tma_x(kt_begin + s, s);
    } else if (STAGES > 1) {
#pragma unroll
        for (int s = 0; s < AHEAD; ++s, wr = next(wr))
            if (s < nk) load_w(kt_begin + s * KW, wr);
        pdl_wait();
        uint32_t st = sbase;
#pragma unroll
        for (int s = 0; s < AHEAD; ++s, st = next(st)) {
            if (s < nk) load_x(kt_begin + s * KW, st);
            cp_async_commit();
        }
        if constexpr (C::SKEW) {  // tile 0: this thread's copies have landed
            cp_async_wait<AHEAD - 1>();
            mbar_arrive(bars);
        }
    } else {
        pdl_wait();
    }
    for (int i = 0; i < nk; ++i) {
        const int kt = kt_begin + i * KW;
        if (STAGES == 1) {  // no pipeline: load, wait for it, compute
            __syncthreads();  // everyone is done with the previous tile
            load_tile(kt, sbase);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        } else if constexpr (C::TMA) {  // no block barrier either: each warp waits for its data, and warp 0, before a
            mbar_wait(full + 8 * (i % STAGES), (uint32_t)(i / STAGES) & 1u);  // refill, for the warps done with it
            if (C::LOAD_STEP == 0) {
                load_next(i);
            }
        } else if constexpr (C::SKEW) {
            // No block barrier: a barrier once a K tile keeps the 8 warps in step, so that they all stop for their
            // next fragments (shared-memory loads, dequantization) at the same moment and the tensor cores idle; at
            // 128 tokens it cost 12-14% (timing without it; lessons/10_pipelined_w4a16/notes.md). Instead each thread says on tile i + 1's
            // mbarrier that its copies of tile i + 1 have landed, and waits on tile i's for everyone's, said at
            // their iteration i - 1. So the warps may drift up to a K tile apart; past the wait every warp has
            // started tile i - 1 and is done with tile i - 2, whose stage this iteration refills (AHEAD).
            cp_async_wait<(C::SKEW ? AHEAD - 2 : 0)>();  // committed: up to tile i + AHEAD - 1
            mbar_arrive(bars + 8 * ((i + 1) % STAGES));
            mbar_wait(bars + 8 * (i % STAGES), (uint32_t)(i / STAGES) & 1u);
            if (C::LOAD_STEP == 0) {
                load_next(i);
            }
        } else {
            cp_async_wait<(STAGES > 1 ? STAGES - 2 : 0)>();  // this thread's copies of tile i have landed...
            __syncthreads();  // ...and everyone's; everyone is also done with tile i - 1's stage
            if (C::LOAD_STEP == 0) {
                load_next(i);
            }
        }
        const uint32_t st = rd + kw * C::SUB;  // the warp's K tile of the stage
        rd = next(rd);

        if (MODE == FRAGMENTS && (KW == 1 || kt + kw < kt_end)) {
            __half s_lo[MT], s_hi[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) s_lo[mt] = lds16(st + sl + 32 * mt), s_hi[mt] = lds16(st + sl + 32 * mt + 16);
            float blk[C::LATE_SCALE ? NACC : 1][MT][NT][4];  // LATE_SCALE: this K tile's Σ q·x
#pragma unroll
            for (int h = 0; h < (C::LATE_SCALE ? NACC : 1); ++h)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) blk[h][mt][nt][e] = 0.f;
#pragma unroll
            for (int kq = 0; kq < 2; ++kq) {  // 64-wide K chunks: one 16-byte load per m16 tile = 4 mma steps
                uint4 wv[MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) wv[mt] = lds128(st + wl + (mt * 2 + kq) * 512);
#pragma unroll
                for (int jj = 0; jj < 2; ++jj) {
                    uint32_t b[NT][4];
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) x_frags(b[nt], st + xl[2 * kq + jj] + nt * 8 * C::XROW);
#pragma unroll
                    for (int s = 0; s < 2; ++s)
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            uint32_t a[4];
                            frag_q(reinterpret_cast<const uint32_t*>(&wv[mt])[2 * jj + s], a);
                            if (!C::LATE_SCALE) scale_frag(a, __half2half2(s_lo[mt]), __half2half2(s_hi[mt]));
                            const int h = (2 * jj + s) % NACC;  // the accumulator set (a constant, unrolled)
#pragma unroll
                            for (int nt = 0; nt < NT; ++nt) {
                                float(&c)[4] = C::LATE_SCALE ? blk[C::LATE_SCALE ? h : 0][mt][nt]
                                                             : h == 0 ? acc[mt][nt] : accx[h > 0 ? h - 1 : 0][mt][nt];
                                mma16816(c, a, b[nt][2 * s], b[nt][2 * s + 1]);
                            }
                        }
                    if (C::LOAD_STEP == 2 * kq + jj + 1) {
                        load_next(i);
                    }
                }
            }
            if constexpr (C::TMA) {  // this warp is done with the stage (arriving after its last read, before the
                                     // tile's last mma, was 2-4% slower: the arrive waits for the reads' data)
                __syncwarp();
                if (lane == 0) mbar_arrive(empty + 8 * (i % STAGES));
            }
            if (C::LATE_SCALE) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {  // e / 2: row g or g + 8
                            float sum = blk[0][mt][nt][e];
#pragma unroll
                            for (int h = 1; h < (C::LATE_SCALE ? NACC : 1); ++h) sum += blk[h][mt][nt][e];
                            acc[mt][nt][e] += __half2float(e < 2 ? s_lo[mt] : s_hi[mt]) * sum;
                        }
            }
        } else if (MODE != FRAGMENTS) {
            // Write-back: every thread dequantizes its pieces into the FP16 tile, then the warps read A with ldmatrix.
            const uint32_t wt = sbase + STAGES * C::STAGE;
#pragma unroll
            for (int j = 0; j < WN; ++j) {
                const int c = threadIdx.x + j * THREADS, r = c / 4, p = c % 4;
                const uint4 v = lds128(st + C::X_BYTES + c * 16);
                const __half2 s = __half2half2(__ldg(scales + (size_t)min(n0 + r, N - 1) * groups + kt));
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    uint32_t w[4];
                    packed_dequant(reinterpret_cast<const uint32_t*>(&v)[q], s, w);
                    sts128(wt + (r * C::WROW + 32 * p + 8 * q) * 2, w);
                }
            }
            __syncthreads();
            // ldmatrix matrices: rows 0-7 / 8-15 of the m16 tile × columns 0-7 / 8-15 of the k16 step
            const uint32_t al = wt + ((wn0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * C::WROW + 8 * (lane >> 4)) * 2;
#pragma unroll
            for (int j2 = 0; j2 < 4; ++j2) {
                uint32_t b[NT][4];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) x_frags(b[nt], st + xl[j2] + nt * 2048);
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        uint32_t a[4];
                        ldsm_x4(a, al + (16 * mt * C::WROW + 16 * (2 * j2 + s)) * 2);
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt) mma16816(acc[mt][nt], a, b[nt][2 * s], b[nt][2 * s + 1]);
                    }
            }
        }
    }
    cp_async_wait<0>();
    if constexpr (!C::LATE_SCALE)
#pragma unroll
        for (int h = 0; h < NACC - 1; ++h)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][nt][e] += accx[h][mt][nt][e];

    // K slices: slices 1 … KW − 1 leave their sums in shared memory (the ring is free once every warp is past the
    // barrier), slice 0 adds them in slice order. Blocks with K slices are never split (the launcher).
    if constexpr (KW > 1) {
        float4* part = reinterpret_cast<float4*>(smem);
        auto at = [&](int k, int mt, int nt) { return part + (((k - 1) * (8 / KW) + wi) * MT * NT + mt * NT + nt) * 32 + lane; };
        __syncthreads();
        if (kw > 0)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) *at(kw, mt, nt) = make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]);
        __syncthreads();
        if (kw > 0) return;
        for (int k = 1; k < KW; ++k)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const float4 v = *at(k, mt, nt);
                    acc[mt][nt][0] += v.x, acc[mt][nt][1] += v.y, acc[mt][nt][2] += v.z, acc[mt][nt][3] += v.w;
                }
    }

    // Split K: every part stores its partials, then one thread publishes them (a barrier, a GPU-scope fence that
    // also releases what the block's other threads stored, and the counter's increment, which returns the count
    // before it). The part that sees splits - 1 arrivals before its own is the last: it adds all the parts in split
    // order (its own from registers) and stores the tile. Nobody waits for another block, so the kernel cannot hang
    // whatever order, or however few at a time, the GPU runs its blocks in; the sum's order, and so the result, does
    // not depend on which part came last.
    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x, z = blockIdx.z;
        float* mine = ws + ((size_t)tile * splits + z) * (BM * TBN);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) __stcg(mine + ((mt * NT + nt) * 4 + e) * THREADS + threadIdx.x, acc[mt][nt][e]);
        __syncthreads();
        __shared__ int last;
        if (threadIdx.x == 0) {
            int before;
            asm volatile("fence.acq_rel.gpu;\n"
                         "atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;\n" : "=r"(before) : "l"(counters + tile) : "memory");
            last = before == splits - 1;
            if (last) counters[tile] = 0;  // ready for the next launch (which increments only after this kernel is done)
        }
        __syncthreads();
        if (!last) return;
        const float* part = ws + (size_t)tile * splits * (BM * TBN) + threadIdx.x;
        float sum[MT][NT][4] = {};
        for (int p = 0; p < splits; ++p, part += BM * TBN)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        sum[mt][nt][e] += p == z ? acc[mt][nt][e] : __ldcg(part + ((mt * NT + nt) * 4 + e) * THREADS);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = sum[mt][nt][e];
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {  // C is yᵀ: rows are outputs n, columns tokens m
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

static int smem_optin() {  // shared memory a block may ask for on this GPU (TILE_SMEM_CAP: as if it had less)
    static int optin = 0;
    if (!optin) cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
#ifdef TILE_SMEM_CAP
    return optin < TILE_SMEM_CAP ? optin : TILE_SMEM_CAP;
#else
    return optin;
#endif
}
template <int MODE, int BM, int WM, int STAGES, int KW = 1, bool TMA = false>
static bool fits() { return Cfg<MODE, BM, WM, STAGES, KW, 1, TMA>::SMEM <= smem_optin(); }

// The copy engine's maps for this call (launch() encodes them; the pointers change from call to call).
static Maps g_maps{};
static bool encode_map(CUtensorMap* map, CUtensorMapDataType type, void* p, uint64_t cols, uint64_t rows, int elem,
                       uint32_t box_cols, uint32_t box_rows, bool swizzle) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void* fn = nullptr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn)
            return false;
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    const cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols * elem};
    const cuuint32_t box[2] = {box_cols, box_rows}, estr[2] = {1, 1};
    return encode(map, type, 2, p, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
static bool encode_maps(const __half* x, const int32_t* Wq, const __half* scales, int M, int N, int K, int bm) {
    const int tiles16 = (N + 15) / 16;
    return encode_map(&g_maps.x, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, const_cast<__half*>(x), K, M, 2, 64, bm, true) &&
           encode_map(&g_maps.w, CU_TENSOR_MAP_DATA_TYPE_UINT32, const_cast<int32_t*>(Wq), (uint64_t)K * 2, tiles16, 4,
                      256, 8, false) &&
           encode_map(&g_maps.s, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, const_cast<__half*>(scales), tiles16 * 16, K / GROUP, 2,
                      TBN, 1, false);
}

template <int MODE, int BM, int WM, int STAGES, int KW = 1, int ACC = 1, bool TMA = false>
static void launch_cfg(const __half* x, const int32_t* Wq, const __half* scales, __half* y, int M, int N, int K,
                       bool split, cudaStream_t stream) {
    using C = Cfg<MODE, BM, WM, STAGES, KW, ACC, TMA>;
    auto kernel = w4a16_kernel<MODE, BM, WM, STAGES, KW, ACC, TMA>;
    static int sms = 0, per_sm = 0, pdl_smem = 0;
    if (!sms) {
        int sm_smem = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
        pdl_smem = sm_smem / 3 + 1 > C::SMEM ? sm_smem / 3 + 1 : C::SMEM;
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pdl_smem);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, C::SMEM);
        per_sm = per_sm < 1 ? 1 : per_sm;
    }
    const dim3 tiles((N + C::BN - 1) / C::BN, (M + BM - 1) / BM);
    const int ntiles = tiles.x * tiles.y, ktiles = K / GROUP;
    auto fills = [&](int bn) { return (long)((N + bn - 1) / bn) * tiles.y * 100 >= (long)sms * TILE_FULL_PCT; };
    auto one_wave = [&](int bn) { return fills(bn) && (long)((N + bn - 1) / bn) * tiles.y <= sms; };
    // Split K when the tiles cannot fill the SMs: a block costs its K tiles + TILE_SPLIT_COST (the ring's
    // filling, the partial tile's round trip), the time is waves × that (lesson 09's model); ≥ 4 K tiles a split.
    int splits = 1;
    // A tile of ≤ 32 tokens is memory-bound: where its tiles already give most SMs a block (K 4096, N 14336: 112 for
    // 132), a split only adds each part's ring fill and the fix-up (M = 1: 17.6 µs split, 16.5 unsplit; lessons/10_pipelined_w4a16/notes.md).
    if (BM <= 32 && fills(TBN)) split = false;
    if (split) {
        const int slots = sms * (per_sm < TILE_SPLIT_BLOCKS ? per_sm : TILE_SPLIT_BLOCKS);
        auto cost = [&](int s) { return (float)(((long)ntiles * s + slots - 1) / slots) * ((float)ktiles / s + TILE_SPLIT_COST); };
        // Parts of ≥ 4 K tiles; of ≥ 8 for the 64-token tile, which counts two blocks per SM: 4096² at M = 64 took
        // 18.6 µs as 8 parts of 4 K tiles, 16.4 as 4 of 8 (lessons/10_pipelined_w4a16/notes.md).
        const int min_part = BM == 64 && per_sm > 1 ? 8 : 4;
        for (int s = 2; s <= 16 && s <= ktiles / min_part; ++s)
            if (cost(s) < cost(splits)) splits = s;
        // K slices instead, where the split's parts would be short (fewer than TILE_SLICE_MAX_KT K tiles: the ring's
        // filling and the fix-up weigh as much as the part's own tiles) and 64- or 32-output tiles give the SMs one
        // block each: 4096² (8 parts of 4 K tiles) takes 128 blocks of 32 outputs × 4 slices, 8.1 → 7.0 µs at M = 1
        // in a graph. The block's 8 warps take 4 (or 2) K tiles at a time, one each, and add their sums in shared
        // memory at the end. With long parts they lose: one block of 8 warps per SM instead of two, and every block
        // loads x for all of K (8192², M = 16: 17.6 → 19.6 µs; lessons/10_pipelined_w4a16/notes.md).
        if constexpr (KW == 1 && MODE == FRAGMENTS && WM == 1 && BM <= 32)
            if (splits > 1 && ktiles < TILE_SLICE_MAX_KT * splits) {
                if (one_wave(TBN / 2) && fits<MODE, BM, WM, TILE_STAGES_KW, 2>())
                    return launch_cfg<MODE, BM, WM, TILE_STAGES_KW, 2>(x, Wq, scales, y, M, N, K, false, stream);
                if (one_wave(TBN / 4) && fits<MODE, BM, WM, TILE_STAGES_KW, 4>())
                    return launch_cfg<MODE, BM, WM, TILE_STAGES_KW, 4>(x, Wq, scales, y, M, N, K, false, stream);
            }
        if (splits > 1 && !reserve_split((size_t)ntiles * splits * BM * TBN * sizeof(float), ntiles, stream)) splits = 1;
    }
    // Unsplit at M <= 8, a deeper ring: K 4096, N 14336 (112 tiles, one block per SM) 14.5 → 13.9 µs in a graph with
    // a fifth stage. Where the tiles are split it gained nothing (8192², K 14336) or lost (4096²: 8.2 → 8.7 µs), and
    // from 16 tokens on it gained nothing and cost up to 3% at 32 (lessons/10_pipelined_w4a16/notes.md).
    constexpr int DEEP = KW == 1 && BM == 8 && STAGES == TILE_STAGES ? TILE_STAGES_M8 : STAGES;
    // Two accumulator sets where the tiles run one block per SM (unsplit, at most one tile per SM): with 2 warps a
    // scheduler the tiles of ≤ 32 tokens wait on their own instructions more than on memory. At M = 32 on K 4096,
    // N 14336 (112 tiles) ncu's most sampled stall was `wait` (a fixed-latency dependency, 25%; the tensor pipe 33%
    // busy), and a warp's consecutive mma on one output tile wait for each other through the accumulator. Two sets
    // there, in a graph: 14.0 → 13.8 µs at M = 1, 16.0 → 15.7 at 16, 22.7 → 21.6 at 32; four no faster. Where two
    // blocks share an SM their warps hide it, and the sets' registers and adds cost 0.4% of lesson 11's step at
    // batch 1 and 4 (lessons/10_pipelined_w4a16/notes.md, “Where M = 32 waits, and two accumulator sets where a block has the SM to itself”).
    if constexpr (KW == 1 && ACC == 1 && MODE == FRAGMENTS && BM <= 32 && STAGES > 1)
        if (splits == 1 && ntiles <= sms)
            return launch_cfg<MODE, BM, WM, DEEP, 1, TILE_ACC>(x, Wq, scales, y, M, N, K, false, stream);
    if constexpr (DEEP != STAGES && ACC == 1)
        if (splits == 1) return launch_cfg<MODE, BM, WM, DEEP>(x, Wq, scales, y, M, N, K, false, stream);
    // Under PDL the blocks start while the kernel before still holds part of each SM, and up to 5 of them (M ≤ 16)
    // would crowd onto the SMs with room; the memory-bound kernel then waits on its most crowded SMs. Asking for a
    // third of an SM's shared memory keeps them at two per SM, as the split counts (lesson 11 at batch 1: 2,820 µs a
    // step with PDL and without this, 2,211 with it, 2,540 without PDL; lessons/10_pipelined_w4a16/notes.md).
    launch_pdl(kernel, dim3(tiles.x, tiles.y, splits), THREADS, g_pdl ? pdl_smem : C::SMEM, stream, x, Wq, scales, y,
               M, N, K, g_ws, g_counters, TMA ? g_maps : Maps{});
}

// The copy-engine configuration of a tile: where its machine code is sm_90+ (an sm_80 build running on an H100 has no
// copy engine), its shared memory fits, and the driver encodes the maps.
template <int MODE, int BM, int WM, int STAGES>
static bool tma_ok(const __half* x, const int32_t* Wq, const __half* scales, int M, int N, int K) {
    static const bool built = [] {
        cudaFuncAttributes a;
        return cudaFuncGetAttributes(&a, w4a16_kernel<MODE, BM, WM, STAGES, 1, 1, true>) == cudaSuccess && a.binaryVersion >= 90;
    }();
    return built && fits<MODE, BM, WM, STAGES, 1, true>() && encode_maps(x, Wq, scales, M, N, K, BM);
}

// Tile by M: up to 64 tokens, 8 warps side by side along N, each dequantizing its 16 outputs' weights once for all
// the tile's tokens (at 64 tokens 2-4% faster than 4 × 2 warps, which dequantize every weight twice); the 128-token
// tile takes 4 × 2 warps of 32 outputs: a warp over all 128 tokens reads twice x's fragments per mma and was 7%
// slower (lessons/10_pipelined_w4a16/notes.md).
template <int MODE, int STAGES>
static void launch(const __half* x, const int32_t* Wq, const __half* scales, __half* y, int M, int N, int K, bool split,
                   cudaStream_t stream) {
    // The mbarrier K loop's ring (SKEW: 64 tokens and up) where a block may have its shared memory: 5 stages of the
    // 128-token tile are 201 KB (H100: 227 KB a block; A100: 163 KB, which takes the barrier's 3 stages, 121 KB;
    // sm_86/89: 99 KB, which takes two 64-token tiles of 4 stages, 97 KB). The 64-token tile has 4 stages, so that
    // two blocks share an SM where a shape's tiles (or a split's parts) outnumber the SMs: at M = 33-64 4-10% faster
    // than one block of 5 stages on K 4096, N 14336 (split in 2), 8192² and N 28672 (lessons/10_pipelined_w4a16/notes.md).
    constexpr bool SKEWED = STAGES > 1;
    constexpr int SK = SKEWED ? TILE_STAGES_SKEW : STAGES, SK64 = SKEWED ? TILE_STAGES_SKEW64 : STAGES;
    constexpr int S128 = STAGES < 3 ? STAGES : 3;
    // On sm_90 the 128-token tile's ring is filled by the copy engine: thread 0 asks for 4 boxes a K tile, where every
    // thread issued 11 cp.async and waited for them. M = 128 2-4% faster, M = 256 3-15% (K 4096, N 14336 51.8 → 49.9
    // µs, 8192² 55.2 → 53.5; lessons/10_pipelined_w4a16/notes.md). The 64-token tile stays on cp.async: 2-3% slower on the engine
    // on four of the five shapes timed. The memory-bound tiles of ≤ 32 tokens lose more: the same bytes land later
    // from one thread's boxes than from 256 threads' cp.async (K 4096, N 14336 at M = 1: 13.8 → 18.6 µs in a graph).
    if constexpr (MODE == FRAGMENTS && SKEWED && TILE_TMA)
        if (M > 64 && tma_ok<MODE, 128, 2, SK>(x, Wq, scales, M, N, K))
            return launch_cfg<MODE, 128, 2, SK, 1, 1, true>(x, Wq, scales, y, M, N, K, split, stream);
    if (M <= 8) launch_cfg<MODE, 8, 1, STAGES>(x, Wq, scales, y, M, N, K, split, stream);
    else if (M <= 16) launch_cfg<MODE, 16, 1, STAGES>(x, Wq, scales, y, M, N, K, split, stream);
    else if (M <= 32) launch_cfg<MODE, 32, 1, STAGES>(x, Wq, scales, y, M, N, K, split, stream);
    else if (M <= 64 && fits<MODE, 64, 1, SK64>())
        launch_cfg<MODE, 64, 1, SK64>(x, Wq, scales, y, M, N, K, split, stream);
    else if (M <= 64) launch_cfg<MODE, 64, 1, STAGES>(x, Wq, scales, y, M, N, K, split, stream);
    else if (fits<MODE, 128, 2, SK>())
        launch_cfg<MODE, 128, 2, SK>(x, Wq, scales, y, M, N, K, split, stream);
    else if (fits<MODE, 128, 2, S128>())
        launch_cfg<MODE, 128, 2, S128>(x, Wq, scales, y, M, N, K, split, stream);
    else launch_cfg<MODE, 64, 2, STAGES>(x, Wq, scales, y, M, N, K, split, stream);
}

// ---------------------------------------------------------------------------------------------------------------
// Step 6, the decode sizes (M <= TILE_GEMV_MAX_M): lesson 07's GEMV on the same fragment-order bytes.
// Where 128-output tiles cannot fill the SMs, step 5 splits K across blocks and pays the fix-up at the end of every
// call (stores, release, acquire, loads: 1.7-1.8 µs of a 15 µs call at M = 1; lessons/10_pipelined_w4a16/notes.md, “What the split costs at decode sizes, and a cheaper fix-up”).
// Lesson 07's GEMV splits K inside the block instead: a block of 16·R outputs whose 8 warps take every 8th K group,
// each warp's next group of weights in flight in registers while it computes one, the warps' partial tiles added in
// shared memory at the end. Nothing crosses blocks. On fragment order a lane's 16-byte load of a 64-wide K chunk is
// already its A fragments of four mma steps (frag_q, no permutation); x's B fragments are in K order, so they come
// from shared memory by ldmatrix as in the tile kernel (x_frags).
constexpr int TILE_GEMV_MAX_M = 8;  // linear_w4a16_frag runs the GEMV up to this many tokens, where the tiles would split K
constexpr int GEMV_WARPS = 8;

__device__ __forceinline__ uint4 ldg_stream(const void* p) {  // read once: skip L1, 256-byte L2 fetches (lesson 07)
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <int R, bool PERSIST>
__global__ void __launch_bounds__(32 * GEMV_WARPS, 2)
gemv_frag_kernel(const __half* __restrict__ x, const int32_t* __restrict__ Wq, const __half* __restrict__ scales,
                 __half* __restrict__ y, int M, int N, int K) {
    constexpr int ACC = R == 1 ? 2 : 1;  // accumulator sets of the mma chains per K group
    pdl_trigger();
    // PERSIST: units blockIdx.x, + gridDim.x, …; a unit's partial tiles go to the other buffer than the last unit's,
    // whose sum may still be reading it: one barrier per unit.
    __shared__ float red[PERSIST ? 2 : 1][GEMV_WARPS][R][32][4];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int m0 = blockIdx.y * 8, rows = min(M - m0, 8), groups = K / GROUP, tiles16 = (N + 15) / 16;
    const int npad = tiles16 * 16, units = (tiles16 + R - 1) / R;
    // x through shared memory: per warp two 8-token tiles of one K group (this one, the next), swizzled as the
    // tile kernel's stages (x_slot), copied with cp.async one group ahead and read with ldmatrix (x_frags): per group
    // and lane one to four copies and four ldmatrix, where loading the B fragments from global memory takes sixteen
    // 4-byte loads (K 14336, N 4096 at M = 8: 20.8 → 15.4 µs in a graph). Token rows past M are zeroed once.
    __shared__ __align__(128) uint8_t xs[GEMV_WARPS][2][8 * 256];
    const uint32_t xw = (uint32_t)__cvta_generic_to_shared(xs[warp]);
    for (int c = lane; c < 2 * 8 * 16; c += 32)
        if ((c / 16) % 8 >= rows) asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(xw + c * 16), "r"(0));
    auto load_x = [&](uint32_t slot, int kb) {
        if (kb < groups)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = lane + 32 * i, r = c / 16, p = c % 16;
                if (r < rows) cp_async16(slot + r * 256 + x_slot(r, p) * 16, x + (size_t)(m0 + r) * K + kb * GROUP + p * 8, true);
            }
        cp_async_commit();
    };
    uint32_t xcur = xw;  // the slot of the group being computed; the other takes the next
    uint32_t xl[4];
#pragma unroll
    for (int j2 = 0; j2 < 4; ++j2) xl[j2] = x_row_addr(0, j2, lane);
    // Unit u's m16 tile r (with R = 2 and an odd tile count, the last unit repeats its tile; not stored): the lane's
    // 16 bytes of K chunk c are int32 words (tile · K/64 + c) · 128 + 4 · lane; its scales, rows g and g + 8 of the
    // tile in the group's row of the transposed scales.
    const int32_t* wl[R];
    const __half* sl[R];
    auto start_unit = [&](int u) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int tile = min(u * R + r, tiles16 - 1);
            wl[r] = Wq + (size_t)tile * (K / 64) * 128 + 4 * lane;
            sl[r] = scales + tile * 16 + g;
        }
    };
    start_unit(blockIdx.x);
    uint4 wv[2][R][2];  // [this group, the next][tile][64-wide chunk]
    auto load = [&](int slot, int kb) {
        if (kb < groups)
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) wv[slot][r][h] = ldg_stream(wl[r] + (size_t)(2 * kb + h) * 128);
    };
    load(0, warp);
    pdl_wait();  // x comes from the previous kernel; the first weights are already on their way
    __syncwarp();  // the zeroed rows, before any lane's copies
    load_x(xcur, warp);
    auto unit = [&](int u, int buf) {
        float acc[R][4] = {};
#pragma unroll 2
        for (int kb = warp; kb < groups; kb += GEMV_WARPS) {
            load(1, kb + GEMV_WARPS);
            float blk[R][ACC][4] = {};  // Σ q·x over the group, then × the rows' scales
            __syncwarp();  // every lane is done reading the other slot (the previous group)
            load_x(xcur ^ 2048u, kb + GEMV_WARPS);
            cp_async_wait<1>();  // this lane's copies of this group have landed...
            __syncwarp();        // ...and every lane's
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // 64-wide chunks; x's B fragments of a chunk serve every tile
                uint32_t b[4][2];  // mma step j: x of token g at K 128·kb + 64·h + 16·j + {2t, 2t + 8}
#pragma unroll
                for (int jj = 0; jj < 2; ++jj) {
                    uint32_t f[4];
                    x_frags(f, xcur + xl[2 * h + jj]);
                    b[2 * jj][0] = f[0], b[2 * jj][1] = f[1], b[2 * jj + 1][0] = f[2], b[2 * jj + 1][1] = f[3];
                }
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        uint32_t a[4];
                        frag_q(reinterpret_cast<const uint32_t*>(&wv[0][r][h])[j], a);
                        mma16816(blk[r][j % ACC], a, b[j][0], b[j][1]);
                    }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float s_lo = __half2float(sl[r][(size_t)kb * npad]), s_hi = __half2float(sl[r][(size_t)kb * npad + 8]);
#pragma unroll
                for (int e = 0; e < 4; ++e) {  // e / 2: row g or g + 8
                    float sum = blk[r][0][e];
#pragma unroll
                    for (int q = 1; q < ACC; ++q) sum += blk[r][q][e];
                    acc[r][e] += (e < 2 ? s_lo : s_hi) * sum;
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) wv[0][r][0] = wv[1][r][0], wv[0][r][1] = wv[1][r][1];  // register renames
            xcur ^= 2048u;
        }
        if (PERSIST && u + (int)gridDim.x < units) {  // the next unit's first loads fly while this one is summed
            start_unit(u + gridDim.x);
            load(0, warp);
            __syncwarp();
            load_x(xcur, warp);
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < 4; ++e) red[buf][warp][r][lane][e] = acc[r][e];
        __syncthreads();
        // Slot (r, lane, e) is output 16·(R·u + r) + lane/4 + 8·(e/2) of token m0 + 2·(lane%4) + e%2.
        for (int i = threadIdx.x; i < R * 128; i += 32 * GEMV_WARPS) {
            const int r = i / 128, l = (i / 4) % 32, e = i % 4;
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < GEMV_WARPS; ++w) sum += red[buf][w][r][l][e];
            const int n = 16 * (u * R + r) + l / 4 + 8 * (e / 2), m = m0 + 2 * (l % 4) + e % 2;
            if (m < M && n < N) y[(size_t)m * N + n] = __float2half_rn(sum);
        }
    };
    if constexpr (!PERSIST) unit(blockIdx.x, 0);
    else
        for (int u = blockIdx.x, buf = 0; u < units; u += gridDim.x, buf ^= 1) unit(u, buf);
    cp_async_wait<0>();
}

// 32 outputs per block where that still gives every SM a block, else 16; 8 tokens per block row (grid.y covers
// any M, for the checks; the lesson's kernel takes it up to TILE_GEMV_MAX_M). One generation of blocks where the
// units outnumber the blocks that fit, at one 8-token row: lesson 07's launch. Under PDL the blocks would crowd
// onto the SMs the previous kernel has left (they fit 2-5 per SM): the request for shared memory of lessons 06
// and 08 lets only the grid's share fit on an SM.
template <int R>
static void launch_gemv_r(const __half* x, const int32_t* Wq, const __half* scales, __half* y, int M, int N, int K,
                          cudaStream_t stream) {
    static int sms = 0, sm_smem = 0, fit = 0, fit1 = 0;  // fit: blocks per SM of the looping kernel, fit1: of the other
    if (!sms) {
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, gemv_frag_kernel<R, true>, 32 * GEMV_WARPS, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit1, gemv_frag_kernel<R, false>, 32 * GEMV_WARPS, 0);
        cudaFuncSetAttribute(gemv_frag_kernel<R, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm_smem / 2 + 1);
    }
    const int units = ((N + 15) / 16 + R - 1) / R;
    if (M <= 8 && fit > 0 && units > fit * sms) {
        launch_pdl(gemv_frag_kernel<R, true>, dim3(fit * sms), 32 * GEMV_WARPS, 0, stream, x, Wq, scales, y, M, N, K);
    } else {
        const dim3 grid(units, (M + 7) / 8);
        const int share = (int)((grid.x * grid.y + sms - 1) / sms);
        const size_t smem = g_pdl && share < fit1 ? sm_smem / (share + 1) + 1 : 0;
        launch_pdl(gemv_frag_kernel<R, false>, grid, 32 * GEMV_WARPS, smem, stream, x, Wq, scales, y, M, N, K);
    }
}
static void launch_gemv(const __half* x, const int32_t* Wq, const __half* scales, __half* y, int M, int N, int K,
                        cudaStream_t stream) {
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if ((N + 31) / 32 >= sms) launch_gemv_r<2>(x, Wq, scales, y, M, N, K, stream);
    else launch_gemv_r<1>(x, Wq, scales, y, M, N, K, stream);
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// The Python wrappers check shapes and formats with clear messages; here a bad call does nothing rather than
// read out of bounds.
static bool ok_args(int K, const void* x, const void* q, const void* s) {
    return K % GROUP == 0 && aligned16(x) && aligned16(q) && aligned16(s);
}

// Lesson 07's format: q int32 [N, K/8], scales fp16 [N, K/128].
EXPORT void gemm_w4a16_writeback(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                                 cudaStream_t stream) {
    if (ok_args(K, x, q, x)) launch<WRITEBACK, 1>(x, q, scales, y, M, N, K, false, stream);
}
EXPORT void gemm_w4a16_writeback_padded(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N,
                                        int K, cudaStream_t stream) {
    if (ok_args(K, x, q, x)) launch<WRITEBACK_PADDED, 1>(x, q, scales, y, M, N, K, false, stream);
}
// Fragment order: q int32 [ceil(N/16), K/64, 32, 4], scales fp16 [K/128, ceil(N/16)·16] (quant.to_fragments).
EXPORT void gemm_w4a16_frag(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                            cudaStream_t stream) {
    if (ok_args(K, x, q, scales)) launch<FRAGMENTS, 1>(x, q, scales, y, M, N, K, false, stream);
}
EXPORT void gemm_w4a16_frag_pipe(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                                 cudaStream_t stream) {
    if (ok_args(K, x, q, scales)) launch<FRAGMENTS, TILE_STAGES>(x, q, scales, y, M, N, K, false, stream);
}
EXPORT void gemm_w4a16_frag_split(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N,
                                  int K, cudaStream_t stream) {
    if (ok_args(K, x, q, scales)) launch<FRAGMENTS, TILE_STAGES>(x, q, scales, y, M, N, K, true, stream);
}
EXPORT void gemv_w4a16_frag(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                            cudaStream_t stream) {
    if (ok_args(K, x, q, scales)) launch_gemv(x, q, scales, y, M, N, K, stream);
}
EXPORT void linear_w4a16_frag(const __half* x, const int32_t* q, const __half* scales, __half* y, int M, int N, int K,
                              cudaStream_t stream) {
    if (!ok_args(K, x, q, scales)) return;
    // The GEMV where the 8-token tiles would split K (launch_cfg's rule), in a graph at M = 1 (lessons/10_pipelined_w4a16/notes.md):
    // K 14336, N 4096 15.4 → 13.7 µs, 8192² 16.9 → 15.3-16.2, 4096² 7.0 → 5.5. Where the tiles fill the SMs unsplit the
    // GEMV lost (K 4096, N 28672: 23.6 → 26.2) or tied, and lesson 11's step with the GEMV on every layer at batch 1
    // and 4 was 8-10% slower under PDL (not profiled; our reading: before the previous kernel ends a GEMV block has one
    // K group of loads in flight, a tile kernel's block its ring's). With this rule the step is within ±0.3%.
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const bool splits = (long)((N + TBN - 1) / TBN) * 100 < (long)sms * TILE_FULL_PCT;
    if (M <= TILE_GEMV_MAX_M && splits) launch_gemv(x, q, scales, y, M, N, K, stream);
    else launch<FRAGMENTS, TILE_STAGES>(x, q, scales, y, M, N, K, true, stream);
}
