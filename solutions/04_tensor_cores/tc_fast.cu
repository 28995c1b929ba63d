// Lesson 04's fast kernel (solutions only: no exercise, no stub). The same y[M,N] = x[M,K] · W[N,K]ᵀ as the
// teaching file tc_gemm.cu, in FP16 (FP32 accumulation) and INT8 (INT32 accumulation), with the steps that
// file leaves out: 128×256 block tiles, fragments of the next K step loaded while this step's MMAs run,
// a 3-stage cp.async ring, a grouped launch order, and on sm_90 the copy engine (TMA) with mbarriers and
// its 128-byte swizzle (lesson 12 teaches those). lessons/04_tensor_cores/notes.md measures each step.
//
// A tensor-core instruction multiplies whole tiles, so the unit of work is a *fragment*: a tile of
// a matrix spread across the 32 lanes of a warp. WMMA hides the layout: load_matrix_sync fills a
// 16×16 fragment, mma_sync does acc += a·b on 16×16×16, store_matrix_sync writes it back. mma.sync
// exposes it (PTX ISA, "Matrix fragments for mma.m16n8k16"): with g = lane / 4 and t = lane % 4,
// lane holds rows g and g + 8 of a 16-row A tile, columns 2t, 2t+1 (+8) of K, and the matching pieces
// of B and of the 16×8 accumulator. Owning the layout lets a kernel read swizzled tiles and write
// results straight from registers, which WMMA's API cannot. The PTX ISA leaves the distribution of a WMMA
// fragment's elements over the lanes unspecified ("Matrix Fragments for WMMA"). So the "WMMA" kernel's
// copy-engine path (sm_90 machine code only) is not WMMA through its API: it is WMMA fragments filled by
// ldmatrix, mma.sync layout assumed. It writes fragment.x[] from ldmatrix and reads acc.x[] in mma.sync's
// layout, the layout lessons/04_tensor_cores/wmma_layout.cu measures on sm_90 and tests/test_kernels.py checks
// on every GPU run. Everywhere else it uses only the API (load_matrix_sync from padded tiles).
//
// Shared structure (both kernels):
//  - A block computes a 128×BN tile of y with warps owning 64×64 warp tiles: 4×4 WMMA fragments, or
//    4×8 mma.sync m16n8 tiles, 128 accumulators per thread either way.
//  - x is row-major [M,K] (WMMA's matrix_a, row_major); W is [N,K]: read as the K×N matrix Wᵀ it is
//    column-major (matrix_b, col_major, mma's ".col"): no transpose anywhere.
//  - Shared tiles are TILE_BYTES of K deep (64 halves or 128 int8s). ldmatrix (what load_matrix_sync
//    becomes) reads 8 rows of 16 bytes per phase: with rows padded by 16 bytes (a 144-byte stride) those 8
//    rows start in banks 0, 4, 8, …, 28: all 32 banks, no conflict. Unpadded (a 128-byte stride), all 8
//    rows start in the same 4 banks: an 8-way conflict.
//    The other cure, a swizzle (Cfg::at), is what both kernels use on sm_90.
//  - Tiles move global → shared in a STAGES-deep ring: while the tensor cores work on tile k, the next
//    tiles are in flight. Two ways to move them (the launcher picks):
//      cp.async (sm_80+, any shape): every thread copies 16-byte pieces, no registers in between, and
//        a block barrier per tile says when everyone's pieces have landed;
//      the copy engine (TMA, sm_90+, rows of whole 16-byte chunks): one thread asks for each tile as a
//        2-D box and an mbarrier per stage counts the bytes in; the math warps issue no copies and meet
//        no block barrier.
//    Both kernels keep the next K step's fragments in flight, across tiles (kloop, their K loop).
//  - Blocks are launched in groups of GROUP_M tile rows (the Triton tutorial's ordering), so blocks
//    that run together share rows of x and columns of W in L2.
// The INT8 kernels use the same bytes per tile: K is simply twice as long per byte, and mma.sync's
// m16n8k32 s8 fragments have exactly the register layout of m16n8k16 f16 ones, byte for half.
// Odd shapes: loads past M, N or K read zeros (cp.async's src-size 0 zero-fills; the copy engine
// fills boxes past the matrix with zeros); when K is not a multiple of 16 bytes' worth of elements (or
// a pointer is not 16-byte aligned) a scalar-loader instantiation is used, because a 16-byte copy
// would straddle two rows. Stores are guarded.
// REQUIRES: sm_80
#include <cuda.h>  // CUtensorMap (the driver function that encodes one is looked up through the runtime)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <mma.h>
#include <cstdint>

#define EXPORT extern "C"  // the harness binds every EXPORT launcher to Python

using namespace nvcuda;

// Tile configurations: block tile width BN, shared tile depth in bytes, pipeline stages (chosen by sweeps on the
// H100, lessons/04_tensor_cores/notes.md); GROUP_M: tile rows per group of the launch order.
constexpr int WMMA_BN = 128, WMMA_TB = 128, WMMA_STAGES = 2;
constexpr int MMA_BN = 256, MMA_TB = 128, MMA_STAGES = 3;
constexpr int GROUP_M = 8;
constexpr int TMA_STAGES = 4, WMMA_TMA_BN = 256;  // the copy-engine configurations

// A configuration: block tile BM × BN, shared tiles TILE_BYTES of K deep in a STAGES-deep ring. Each 16-byte chunk
// c of tile row r sits at at(r, c): rows padded by 16 bytes, or (SWZ) rows unpadded with chunk c stored at
// position c XOR (r mod 8), the copy engine's 128-byte swizzle. Either way the 8 rows one ldmatrix phase reads,
// same chunk, hit 8 different 16-byte bank groups. The cp.async tiles are padded, the copy engine's swizzled (the
// WMMA kernel's fragments then filled by ldmatrix in the layout measured on sm_90, taken on sm_90 machine code only).
template <int BN_, int TILE_BYTES_, int STAGES_, bool SWZ_ = false>
struct Cfg {
    static constexpr int BM = 128, BN = BN_, WM = 64, WN = 64;
    static constexpr int WARPS_N = BN / WN, WARPS = (BM / WM) * WARPS_N, THREADS = 32 * WARPS;
    static constexpr bool SWZ = SWZ_;
    static constexpr int TILE_BYTES = TILE_BYTES_, ROW_BYTES = TILE_BYTES + (SWZ ? 0 : 16), CHUNKS = TILE_BYTES / 16;
    static constexpr int STAGES = STAGES_, STAGE_BYTES = (BM + BN) * ROW_BYTES;
    // + 2 mbarriers per stage (copy-engine pipeline), + room to align the ring to 1 KB (the swizzle's period)
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 16 * STAGES + (SWZ ? 1024 : 0);
    static_assert(!SWZ || TILE_BYTES == 128, "the 128-byte swizzle needs 128-byte rows");
    __device__ static __forceinline__ int at(int row, int chunk) {
        return row * ROW_BYTES + (SWZ ? (chunk ^ (row & 7)) : chunk) * 16;
    }
};
using WmmaCfg = Cfg<WMMA_BN, WMMA_TB, WMMA_STAGES>;
using MmaCfg = Cfg<MMA_BN, MMA_TB, MMA_STAGES>;
using WmmaTmaCfg = Cfg<WMMA_TMA_BN, 128, TMA_STAGES, true>;
using MmaTmaCfg = Cfg<MMA_BN, 128, TMA_STAGES, true>;

// Element type → accumulator and output types, and the raw bits type for scalar loads.
template <typename T> struct Types;
template <> struct Types<__half> { using Acc = float; using Out = __half; using Raw = uint16_t; };
template <> struct Types<int8_t> { using Acc = int; using Out = int; using Raw = uint8_t; };

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const char* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// --- the copy engine (sm_90+) --------------------------------------------------------------------------------
// One thread asks the tensor memory accelerator for a whole 2-D box of a matrix (cp.async.bulk.tensor), described by
// a tensor map the host encodes: the engine computes every address, zero-fills what lies outside the matrix and
// counts the bytes that land on the stage's mbarrier (PTX ISA, "Tensor copy" and "mbarrier"). An mbarrier is a
// 64-bit counter in shared memory; a phase completes when its expected arrivals (and announced bytes) are in, and
// waiters name the parity of the phase they wait for.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define SM90(...) __trap()  // never launched there: the host takes the cp.async path
#else
#define SM90(...) __VA_ARGS__
#endif
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    SM90(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory"));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, int bytes) {  // arrive, announcing bytes to come
    SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
    unsigned done = 0;
    do {
        SM90(asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                          : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory"));
    } while (!done);
}
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int k, int row, uint64_t* bar) {
    SM90(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                      ::"r"(smem_addr(dst)), "l"(map), "r"(k), "r"(row), "r"(smem_addr(bar)) : "memory"));
}

// The copy-engine pipeline of a block: full[s] completes when stage s's tiles have landed, empty[s] when every warp
// has read them. Thread 0 asks for two 2-D boxes per stage (x's BM rows, W's BN rows): the first STAGES stages at
// the start, then, at tile kt, tile kt − 1 + STAGES into the stage tile kt − 1 used, once every warp has released
// it. No other thread issues a copy or computes an address, and no warp waits for another except through the data
// it needs. Swizzled tiles are boxes of TILE_BYTES; padded tiles (what load_matrix_sync can
// read, a fixed row stride) are boxes of ROW_BYTES, 16 bytes more of K per row that land in the padding, read for nothing.
template <class C, typename T>
struct TmaPipe {
    static constexpr int BK = C::TILE_BYTES / sizeof(T);
    char* smem;
    uint64_t *full, *empty;
    const CUtensorMap *mx, *mw;
    int m0, n0, ktiles;

    __device__ TmaPipe(char* smem_, const CUtensorMap* mx_, const CUtensorMap* mw_, int m0_, int n0_, int K)
        : smem(smem_), mx(mx_), mw(mw_), m0(m0_), n0(n0_), ktiles((K + BK - 1) / BK) {
        full = reinterpret_cast<uint64_t*>(smem + C::STAGES * C::STAGE_BYTES);
        empty = full + C::STAGES;
    }
    __device__ void start() {  // every thread: barriers initialised, the first STAGES tiles on their way
        if (threadIdx.x == 0) {
            for (int s = 0; s < C::STAGES; ++s) {
                mbar_init(full + s, 1);
                mbar_init(empty + s, C::WARPS);
            }
            SM90(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));  // visible to the copy engine
            for (int kt = 0; kt < C::STAGES && kt < ktiles; ++kt) issue(kt, kt);
        }
        __syncthreads();
    }
    __device__ __forceinline__ void issue(int kt, int st) {
        char* a = smem + st * C::STAGE_BYTES;
        mbar_expect_tx(full + st, C::STAGE_BYTES);  // whole boxes, zeros included
        tma_load(a, mx, kt * BK, m0, full + st);
        tma_load(a + C::BM * C::ROW_BYTES, mw, kt * BK, n0, full + st);
    }
    __device__ __forceinline__ const char* stage(int st) const { return smem + st * C::STAGE_BYTES; }
    __device__ __forceinline__ void wait(int st, int ph) { mbar_wait(full + st, ph); }
    __device__ __forceinline__ void release(int st) {  // this warp has read stage st
        __syncwarp();
        if (threadIdx.x % 32 == 0) mbar_arrive(empty + st);
    }
    // At tile kt: tile kt - 1's stage gets tile kt - 1 + STAGES. All of warp 0 waits for the stage to be released, and
    // thread 0 alone issues the copies: with thread 0 waiting alone, the WMMA build kept warp 0 split around that wait
    // (a reconvergence region in the K loop; the compiler knows mma_sync needs the whole warp) and ran slower (lessons/04_tensor_cores/notes.md).
    __device__ __forceinline__ void refill(int kt) {
        const int nt = kt - 1 + C::STAGES;
        if (threadIdx.x < 32 && kt >= 1 && nt < ktiles) {
            const int st = (kt - 1) % C::STAGES;
            mbar_wait(empty + st, ((kt - 1) / C::STAGES) & 1);
            if (threadIdx.x == 0) issue(nt, st);
            __syncwarp();
        }
    }
};

// Copies a ROWS × TILE_BYTES tile of src (rows × K elements, K-contiguous) into shared memory, one
// 16-byte chunk per thread and step. A thread's chunks all sit in the same column of chunks, rows
// THREADS / CHUNKS apart, so one pointer, one row mask and one k offset describe them all: the
// per-tile work is then a bounds test and an add per chunk, not a full address computation.
template <class C, typename T, bool VEC, int ROWS>
struct TileLoader {
    static constexpr int E = 16 / sizeof(T);                     // elements per chunk
    static constexpr int PER = ROWS * C::CHUNKS / C::THREADS;    // chunks per thread
    static constexpr int ROW_STEP = C::THREADS / C::CHUNKS;      // rows between a thread's chunks
    static_assert(ROWS * C::CHUNKS % C::THREADS == 0, "every thread copies the same number of chunks");
    const T* p;        // this thread's first chunk, at k = 0
    size_t step;       // ROW_STEP rows of src, in elements
    int kofs, soff;    // the chunk's k offset in the tile; its byte offset in the shared tile
    unsigned rows_ok;  // bit i: chunk i's row is inside the matrix

    __device__ TileLoader(const T* src, int rows, int K, int row0) {
        const int c = threadIdx.x, r = c / C::CHUNKS;
        kofs = (c % C::CHUNKS) * E;
        soff = r * C::ROW_BYTES + (c % C::CHUNKS) * 16;
        step = (size_t)ROW_STEP * K;
        rows_ok = 0;
#pragma unroll
        for (int i = 0; i < PER; ++i) rows_ok |= unsigned(row0 + r + i * ROW_STEP < rows) << i;
        p = src + (size_t)min(row0 + r, rows - 1) * K + kofs;
    }

    __device__ __forceinline__ void load(char* tile, int k0, int K) const {
        const int k = k0 + kofs;
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const bool ok = ((rows_ok >> i) & 1) && k < K;  // K % E == 0: all E elements of the chunk or none
                cp_async16(tile + soff + i * ROW_STEP * C::ROW_BYTES, ok ? (const void*)(p + i * step + k0) : (const void*)p, ok);
            }
        } else {  // element by element, zero past K: a 16-byte copy would straddle two rows
            using Raw = typename Types<T>::Raw;
#pragma unroll 1
            for (int i = 0; i < PER; ++i) {
                const Raw* q = reinterpret_cast<const Raw*>(p + i * step + k0);
                Raw* dst = reinterpret_cast<Raw*>(tile + soff + i * ROW_STEP * C::ROW_BYTES);
                const bool row_in = (rows_ok >> i) & 1;
#pragma unroll
                for (int e = 0; e < E; ++e) dst[e] = (row_in && k + e < K) ? q[e] : Raw(0);
            }
        }
    }
};

// Which output tile this block computes: GROUP_M tile rows at a time, walking along n in a group.
template <class C>
__device__ __forceinline__ void tile_origin(int M, int N, int& m0, int& n0) {
    const int tiles_m = (M + C::BM - 1) / C::BM, tiles_n = (N + C::BN - 1) / C::BN;
    const int per_group = GROUP_M * tiles_n, first_m = (blockIdx.x / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    m0 = (first_m + (blockIdx.x % per_group) % group_rows) * C::BM;
    n0 = ((blockIdx.x % per_group) / group_rows) * C::BN;
}

// The K loop both kernels run. Fragments are double-buffered in registers: step s+1's are loaded before step s's
// MMAs are issued, so their shared-memory latency hides behind tensor-core work, and across tile boundaries too: at
// the last K step of tile kt each warp waits for tile kt+1, loads its first fragments and only then issues tile kt's
// last MMAs, so no warp meets a tile with empty registers.
//  - copy engine (TMA): that wait is for tile kt+1's mbarrier; the warp releases tile kt's stage just before it, and
//    thread 0 refills tile kt-1's stage halfway through tile kt (TmaPipe::refill).
//  - cp.async: the wait is a block barrier (every thread's copies), and the refill of the stage tile kt-1 used is
//    issued by all threads at step 0 of tile kt, when every warp has passed that barrier after its last ldmatrix.
// A K step is 32 bytes of K. load(buf, As, Bs, s) fills fragment buffer buf with step s of the tiles at As (BM rows
// of x) and Bs (BN rows of W); math(u) issues one step's MMAs from buffer u. (H100, lessons/04_tensor_cores/notes.md.)
template <class C, typename T, bool VEC, bool TMA, class Load, class Math>
__device__ __forceinline__ void kloop(const T* x, const T* W, int M, int N, int K, int m0, int n0, char* smem,
                                      const CUtensorMap* mx, const CUtensorMap* mw, Load&& load, Math&& math) {
    constexpr int KSTEPS = C::TILE_BYTES / 32, BK = C::TILE_BYTES / sizeof(T);
    static_assert(KSTEPS % 2 == 0, "the fragment buffers alternate per K step and restart at 0 per tile");
    const int ktiles = (K + BK - 1) / BK;
    auto load_step = [&](int buf, int st, int s) {  // the fragments of K step s of stage st
        const char* As = smem + st * C::STAGE_BYTES;
        load(buf, As, As + C::BM * C::ROW_BYTES, s);
    };
    // The two pipelines behind one interface: step_hook(kt, s) before each K step's loads, next_tile(kt, rs) at
    // a tile's last K step (rs: the stage being read, advanced to tile kt+1's once it may be read).
    TmaPipe<C, T> pipe(smem, mx, mw, m0, n0, K);  // each path's state; the compiler drops the other's
    int ph = 0;                                  // copy engine: the parity of stage rs's current phase
    const TileLoader<C, T, VEC, C::BM> load_x(x, M, K, m0);
    const TileLoader<C, T, VEC, C::BN> load_w(W, N, K, n0);
    auto load_stage = [&](int st, int kt) {
        load_x.load(smem + st * C::STAGE_BYTES, kt * BK, K);
        load_w.load(smem + st * C::STAGE_BYTES + C::BM * C::ROW_BYTES, kt * BK, K);
    };
    if constexpr (TMA) {
        pipe.start();
        pipe.wait(0, 0);
    } else {
#pragma unroll
        for (int st = 0; st < C::STAGES - 1; ++st) {
            if (st < ktiles) load_stage(st, st);
            cp_async_commit();  // an empty group keeps the wait counts uniform
        }
        cp_async_wait<C::STAGES - 2>();
        __syncthreads();
    }
    auto step_hook = [&](int kt, int s) {
        if constexpr (TMA) {
            if (s == KSTEPS / 2) pipe.refill(kt);
        } else if (s == 0) {  // tile kt-1's stage is free: every warp passed the barrier after its last ldmatrix
            const int nt = kt + C::STAGES - 1;
            if (nt < ktiles) load_stage(nt % C::STAGES, nt);
            cp_async_commit();
        }
    };
    auto next_tile = [&](int kt, int& rs) {
        if constexpr (TMA) {
            pipe.release(rs);  // step KSTEPS-1's fragments were loaded during the last step
            if (++rs == C::STAGES) rs = 0, ph ^= 1;
            if (kt + 1 < ktiles) pipe.wait(rs, ph);
        } else {  // tile kt+1 must have landed (everyone's copies) before its fragments are read
            cp_async_wait<C::STAGES - 2>();
            __syncthreads();
            rs = rs + 1 == C::STAGES ? 0 : rs + 1;
        }
    };
    int rs = 0;  // the stage being read
    load_step(0, 0, 0);
    for (int kt = 0; kt < ktiles; ++kt) {
#pragma unroll
        for (int s = 0; s < KSTEPS; ++s) {
            step_hook(kt, s);
            if (s == KSTEPS - 1) next_tile(kt, rs);
            if (s + 1 < KSTEPS) {
                load_step((s + 1) % 2, rs, s + 1);
            } else if (kt + 1 < ktiles) {
                load_step(0, rs, 0);  // KSTEPS is even: step 0 always uses buffer 0
            }
            math(s % 2);
        }
    }
    if constexpr (!TMA) cp_async_wait<0>();
    __syncthreads();  // every warp is done with the tiles: their memory may be reused
}

__device__ __forceinline__ void store1(__half* y, float v) { *y = __float2half_rn(v); }
__device__ __forceinline__ void store1(int* y, int v) { *y = v; }
__device__ __forceinline__ void store2(__half* y, float a, float b) { *reinterpret_cast<__half2*>(y) = __floats2half2_rn(a, b); }
__device__ __forceinline__ void store2(int* y, int a, int b) { *reinterpret_cast<int2*>(y) = make_int2(a, b); }
// y_row[col], y_row[col + 1] = v0, v1 where inside the N columns; one paired store when vec_out allows.
template <typename Out, typename Acc>
__device__ __forceinline__ void store_pair(Out* y_row, int col, int N, bool vec_out, Acc v0, Acc v1) {
    if (vec_out && col + 1 < N) store2(y_row + col, v0, v1);
    else {
        if (col < N) store1(y_row + col, v0);
        if (col + 1 < N) store1(y_row + col + 1, v1);
    }
}
// A warp's FM × FN8 m16n8 accumulator tiles straight from registers, in mma.sync's layout: element e of tile (i, j),
// read as at(i, j, e), is row g + 8·(e / 2), column 2t + e % 2 (g = lane / 4, t = lane % 4).
template <int FM, int FN8, typename Out, class At>
__device__ __forceinline__ void store_tiles(Out* y, int M, int N, int row0, int col0, bool vec_out, At&& at) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + i * 16 + g + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < FN8; ++j) store_pair(y + (size_t)row * N, col0 + j * 8 + 2 * t, N, vec_out, at(i, j, 2 * h), at(i, j, 2 * h + 1));
        }
}

// ------------------------------------------------------------------------------------------------
// WMMA

// ldmatrix.x4 results (see the mma.sync kernel below) as WMMA fragments, in the layout load_matrix_sync gives them in
// sm_90 machine code: WMMA fragments filled by ldmatrix, mma.sync layout assumed. The PTX ISA leaves this layout
// unspecified; lessons/04_tensor_cores/wmma_layout.cu measures it (on the H100) and tests/test_kernels.py checks it:
//  - FP16 A or B 16×16: the four registers are the fragment's x[0..7], A = mma.sync's a0..a3, B = two n8 tiles' b0, b1;
//    x[8..15] repeat them, and mma_sync reads only x[0..7].
//  - INT8 16×16 (16 bytes of K): the four registers hold two K steps; A's step h is registers 2h, 2h+1 (rows g, g+8),
//    B's is registers h, h+2 (columns g, g+8).
template <class F>
__device__ __forceinline__ void set_regs(F& f, uint32_t r0, uint32_t r1, uint32_t r2 = 0, uint32_t r3 = 0) {
    uint32_t* x = reinterpret_cast<uint32_t*>(f.x);
    constexpr int n = sizeof(f.x) / 4;
    x[0] = r0, x[1] = r1;
    if constexpr (n >= 4) x[2] = r2, x[3] = r3;
    if constexpr (n == 8) x[4] = r0, x[5] = r1, x[6] = r2, x[7] = r3;
}
template <class F>
__device__ __forceinline__ void frags_from_ldsm(F (&f)[1], const uint32_t (&r)[4], bool) { set_regs(f[0], r[0], r[1], r[2], r[3]); }
template <class F>
__device__ __forceinline__ void frags_from_ldsm(F (&f)[2], const uint32_t (&r)[4], bool is_b) {
    set_regs(f[0], r[0], is_b ? r[2] : r[1]);
    set_regs(f[1], is_b ? r[1] : r[2], r[3]);
}

template <class C, typename T, bool VEC, bool TMA>
__global__ void __launch_bounds__(C::THREADS, 1)
gemm_wmma_kernel(const T* __restrict__ x, const T* __restrict__ W, typename Types<T>::Out* __restrict__ y,
                 int M, int N, int K, bool vec_out, const __grid_constant__ CUtensorMap mx,
                 const __grid_constant__ CUtensorMap mw) {
    using Acc = typename Types<T>::Acc;
    using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
    using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, Acc>;
    constexpr int FM = C::WM / 16, FN = C::WN / 16;  // 4×4 fragments
    constexpr int H = 2 / sizeof(T);                 // WMMA steps per 32-byte K step: 1 (FP16) or 2 (INT8, 16 bytes each)
    constexpr int LDE = C::ROW_BYTES / sizeof(T);    // the tiles' row stride, in elements
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = C::SWZ ? reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)) : smem_raw;
    int m0, n0;
    tile_origin<C>(M, N, m0, n0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / C::WARPS_N) * C::WM, wn = (warp % C::WARPS_N) * C::WN;

    FragC acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], Acc(0));

    FragA a[2][FM][H];  // two buffers (the K loop's double buffering) of one K step's fragments
    FragB b[2][FN][H];
    // Swizzled tiles (the copy engine's, sm_90): load_matrix_sync takes a pointer and one row stride and cannot follow
    // the swizzle, so ldmatrix fills the fragments, with the mma.sync kernel's addresses.
    const int a_row = wm + lane % 16, a_chunk = lane / 16;
    const int b_row = wn + lane % 8 + (lane / 16) * 8, b_chunk = (lane / 8) % 2;
    auto load = [&](int buf, const char* As, const char* Bs, int s) {
        if constexpr (C::SWZ) {
#pragma unroll
            for (int i = 0; i < FM; ++i) {
                uint32_t r[4];
                ldmatrix_x4(r, As + C::at(a_row + i * 16, a_chunk + 2 * s));
                frags_from_ldsm(a[buf][i], r, false);
            }
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                uint32_t r[4];
                ldmatrix_x4(r, Bs + C::at(b_row + j * 16, b_chunk + 2 * s));
                frags_from_ldsm(b[buf][j], r, true);
            }
        } else {  // padded rows: the fragments sit at a fixed stride
            const T* At = reinterpret_cast<const T*>(As);
            const T* Bt = reinterpret_cast<const T*>(Bs);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int h = 0; h < H; ++h) wmma::load_matrix_sync(a[buf][i][h], At + (wm + i * 16) * LDE + (s * H + h) * 16, LDE);
#pragma unroll
            for (int j = 0; j < FN; ++j)
#pragma unroll
                for (int h = 0; h < H; ++h) wmma::load_matrix_sync(b[buf][j][h], Bt + (wn + j * 16) * LDE + (s * H + h) * 16, LDE);
        }
    };
    kloop<C, T, VEC, TMA>(x, W, M, N, K, m0, n0, smem, &mx, &mw, load, [&](int u) {
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j)
#pragma unroll
                for (int h = 0; h < H; ++h) wmma::mma_sync(acc[i][j], a[u][i][h], b[u][j][h], acc[i][j]);
    });

    // Straight from registers on sm_90, reading acc.x[] in mma.sync's layout (assumed, not the API's: the layout
    // lessons/04_tensor_cores/wmma_layout.cu measures): a 16×16 accumulator is two of mma.sync's n8 tiles, x[0..3]
    // and x[4..7]. The scratch tile below is slower (lessons/04_tensor_cores/notes.md).
    if constexpr (C::SWZ) {
        store_tiles<FM, 2 * FN>(y, M, N, m0 + wm, n0 + wn, vec_out,
                                [&](int i, int j, int e) { return acc[i][j / 2].x[(j % 2) * 4 + e]; });
        return;
    }
    // Epilogue through a per-warp 16×16 scratch (the pipeline's memory, now free): the fragment
    // layout is opaque, memory is not. Each lane then writes 8 consecutive outputs of one row.
    Acc* scratch = reinterpret_cast<Acc*>(smem) + warp * 256;
    const int r = lane / 2, c = (lane % 2) * 8;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int row = m0 + wm + i * 16 + r, col = n0 + wn + j * 16 + c;
            const Acc* v = scratch + r * 16 + c;
            if (row < M) {
                auto* out = y + (size_t)row * N + col;
#pragma unroll
                for (int e = 0; e < 8; e += 2) {
                    if (vec_out && col + e + 1 < N) store2(out + e, v[e], v[e + 1]);
                    else {
                        if (col + e < N) store1(out + e, v[e]);
                        if (col + e + 1 < N) store1(out + e + 1, v[e + 1]);
                    }
                }
            }
            __syncwarp();
        }
}

// ------------------------------------------------------------------------------------------------
// ldmatrix + mma.sync

// acc (16×8) += a (16×K) · b (K×8): K = 16 halves, or 32 int8s, per instruction.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class C, typename T, bool VEC, bool TMA>
__global__ void __launch_bounds__(C::THREADS, 1)
gemm_mma_kernel(const T* __restrict__ x, const T* __restrict__ W, typename Types<T>::Out* __restrict__ y,
                int M, int N, int K, bool vec_out, const __grid_constant__ CUtensorMap mx,
                const __grid_constant__ CUtensorMap mw) {
    using Acc = typename Types<T>::Acc;
    constexpr int FM = C::WM / 16, FN = C::WN / 8;  // 4 × 8 m16n8 tiles per warp; one mma's K is a K step
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = C::SWZ ? reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)) : smem_raw;
    int m0, n0;
    tile_origin<C>(M, N, m0, n0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / C::WARPS_N) * C::WM, wn = (warp % C::WARPS_N) * C::WN;

    Acc acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = Acc(0);

    // ldmatrix.x4 loads four 8×8 matrices of 16-byte rows; lane L gives the address of row L % 8 of
    // matrix L / 8, and gets back, in register q, row lane / 4, bytes 4·(lane % 4).. of matrix q.
    // A (16 rows × 32 bytes): matrices (rows 0-7, bytes 0-15), (8-15, 0-15), (0-7, 16-31), (8-15, 16-31)
    //   = mma's a0..a3. B (16 rows of W = two n8 tiles × 32 bytes): (n 0-7, bytes 0-15), (0-7, 16-31),
    //   (8-15, 0-15), (8-15, 16-31) = b0, b1 of the first n8 tile, then of the second.
    const int a_row = wm + lane % 16, a_chunk = lane / 16;
    const int b_row = wn + lane % 8 + (lane / 16) * 8, b_chunk = (lane / 8) % 2;

    uint32_t a[2][FM][4], b[2][FN / 2][4];
    auto load = [&](int buf, const char* As, const char* Bs, int s) {
#pragma unroll
        for (int i = 0; i < FM; ++i) ldmatrix_x4(a[buf][i], As + C::at(a_row + i * 16, a_chunk + 2 * s));
#pragma unroll
        for (int j = 0; j < FN / 2; ++j) ldmatrix_x4(b[buf][j], Bs + C::at(b_row + j * 16, b_chunk + 2 * s));
    };
    kloop<C, T, VEC, TMA>(x, W, M, N, K, m0, n0, smem, &mx, &mw, load, [&](int u) {
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j) mma(acc[i][j], a[u][i], b[u][j / 2][(j % 2) * 2], b[u][j / 2][(j % 2) * 2 + 1]);
    });

    // Epilogue straight from registers: acc[i][j] holds rows g and g + 8, columns 2t and 2t + 1.
    store_tiles<FM, FN>(y, M, N, m0 + wm, n0 + wn, vec_out, [&](int i, int j, int e) { return acc[i][j][e]; });
}

// ------------------------------------------------------------------------------------------------
// Launchers

// The tensor map of a rows × K matrix (K contiguous) for boxes of C's tiles: ROW_BYTES of K × box_rows rows, zeros
// outside the matrix, swizzled if C's tiles are. Encoded for every call (the pointers change between calls); the
// driver's encoder is looked up once, through the runtime.
template <class C, typename T>
static bool tensor_map(CUtensorMap* map, const T* p, int rows, int K, int box_rows) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void* fn = nullptr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn)
            return false;
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)K * sizeof(T)};
    const cuuint32_t box[2] = {(cuuint32_t)(C::ROW_BYTES / sizeof(T)), (cuuint32_t)box_rows}, estr[2] = {1, 1};
    return encode(map, sizeof(T) == 2 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                  const_cast<T*>(p), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  C::SWZ ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// C: the cp.async configuration (any shape, sm_80+); CT: the copy-engine one, taken where the kernel's machine code
// is sm_90+ (an sm_80 build running on an H100 has no copy engine) and rows are whole 16-byte chunks. ONLY_SM90: the
// copy-engine kernel relies on something measured on sm_90 machine code only (WMMA's fragment layout), so a newer
// GPU running it from PTX takes the cp.async path. (Each WMMA/mma.sync × type launcher is its own instantiation, so
// each caches its own tma_built.)
template <class C, class CT, bool ONLY_SM90, typename T, class Kernel>
static void launch(Kernel vec_kernel, Kernel scalar_kernel, Kernel tma_kernel, const T* x, const T* W,
                   typename Types<T>::Out* y, int M, int N, int K, cudaStream_t stream) {
    constexpr int E = 16 / sizeof(T);
    const bool vec_in = K % E == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0;
    // Paired stores need an even N (so every row starts aligned) and an aligned y.
    const bool vec_out = N % 2 == 0 && reinterpret_cast<uintptr_t>(y) % (2 * sizeof(*y)) == 0;
    static const bool tma_built = [&] {
        cudaFuncAttributes attr;
        return cudaFuncGetAttributes(&attr, tma_kernel) == cudaSuccess && attr.binaryVersion >= 90 &&
               (!ONLY_SM90 || attr.binaryVersion == 90);
    }();
    CUtensorMap mx{}, mw{};
    const bool tma = vec_in && tma_built && tensor_map<CT>(&mx, x, M, K, CT::BM) && tensor_map<CT>(&mw, W, N, K, CT::BN);
    auto go = [&](auto cfg, Kernel kernel) {
        using G = decltype(cfg);
        const dim3 grid(((M + G::BM - 1) / G::BM) * ((N + G::BN - 1) / G::BN));
        // More than 48 KB of shared memory needs an explicit opt-in per kernel.
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM_BYTES);
        kernel<<<grid, G::THREADS, G::SMEM_BYTES, stream>>>(x, W, y, M, N, K, vec_out, mx, mw);
    };
    if (tma) go(CT{}, tma_kernel);
    else go(C{}, vec_in ? vec_kernel : scalar_kernel);
}

EXPORT void gemm_fast_wmma_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    launch<WmmaCfg, WmmaTmaCfg, WmmaTmaCfg::SWZ>(gemm_wmma_kernel<WmmaCfg, __half, true, false>,
                                                 gemm_wmma_kernel<WmmaCfg, __half, false, false>,
                                                 gemm_wmma_kernel<WmmaTmaCfg, __half, true, true>, x, W, y, M, N, K, stream);
}
EXPORT void gemm_fast_wmma_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t stream) {
    launch<WmmaCfg, WmmaTmaCfg, WmmaTmaCfg::SWZ>(gemm_wmma_kernel<WmmaCfg, int8_t, true, false>,
                                                 gemm_wmma_kernel<WmmaCfg, int8_t, false, false>,
                                                 gemm_wmma_kernel<WmmaTmaCfg, int8_t, true, true>, x, W, y, M, N, K, stream);
}
EXPORT void gemm_fast_mma_f16(const __half* x, const __half* W, __half* y, int M, int N, int K, cudaStream_t stream) {
    launch<MmaCfg, MmaTmaCfg, false>(gemm_mma_kernel<MmaCfg, __half, true, false>, gemm_mma_kernel<MmaCfg, __half, false, false>,
                                     gemm_mma_kernel<MmaTmaCfg, __half, true, true>, x, W, y, M, N, K, stream);
}
EXPORT void gemm_fast_mma_s8(const int8_t* x, const int8_t* W, int* y, int M, int N, int K, cudaStream_t stream) {
    launch<MmaCfg, MmaTmaCfg, false>(gemm_mma_kernel<MmaCfg, int8_t, true, false>, gemm_mma_kernel<MmaCfg, int8_t, false, false>,
                                     gemm_mma_kernel<MmaTmaCfg, int8_t, true, true>, x, W, y, M, N, K, stream);
}
