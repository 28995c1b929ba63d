// What a WMMA fragment holds: the API leaves the layout unspecified ("the mapping of matrix elements into fragment
// elements is unspecified"), and lesson 04's WMMA kernel relies on the one the compiler uses on sm_90 (it fills
// fragments with ldmatrix from swizzled tiles, and writes results from registers). This probe measures it.
//  - layout(out): a 16×16 tile in shared memory holds its own row index (pass 0) or column index (pass 1) in every
//    element; after load_matrix_sync each lane writes where each of its fragment elements came from. Fragments:
//    0 A FP16 row-major, 1 B FP16 col-major, 2 FP32 accumulator, 3 A INT8, 4 B INT8, 5 INT32 accumulator.
//    out[pass][kind][lane][element] (16 elements; -1 past the fragment's num_elements).
//  - reads(out): which elements mma_sync reads: each element in turn is zeroed in every lane of a loaded fragment;
//    out[operand][element] is 1 if the product changed. Operands: 0 A FP16, 1 B FP16, 2 A INT8, 3 B INT8.
// lessons/04_tensor_cores/wmma_layout.py prints the result and compares it with mma.sync's layout (PTX ISA, "Matrix fragments").
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <mma.h>
#include <cstdint>

#define EXPORT extern "C"

using namespace nvcuda;

__device__ int as_int(__half v) { return int(__half2float(v)); }
__device__ int as_int(float v) { return int(v); }
__device__ int as_int(int v) { return v; }
__device__ int as_int(signed char v) { return v; }
__device__ void set_zero(__half& v) { v = __float2half(0.f); }
template <typename V>
__device__ void set_zero(V& v) { v = V(0); }

template <class F>
__device__ void dump(const F& f, int* out) {
    const int lane = threadIdx.x;
    for (int e = 0; e < 16; ++e) out[lane * 16 + e] = e < F::num_elements ? as_int(f.x[e]) : -1;
}

__global__ void layout(int* out) {
    __shared__ __half h[256];
    __shared__ float f[256];
    __shared__ int8_t b[256];
    __shared__ int n[256];
    for (int pass = 0; pass < 2; ++pass) {
        for (int i = threadIdx.x; i < 256; i += 32) {
            const int v = pass ? i % 16 : i / 16;
            h[i] = __int2half_rn(v), f[i] = float(v), b[i] = int8_t(v), n[i] = v;
        }
        __syncwarp();
        int* o = out + pass * 6 * 512;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a16;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c32;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> a8;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> b8;
        wmma::fragment<wmma::accumulator, 16, 16, 16, int> ci;
        wmma::load_matrix_sync(a16, h, 16);
        wmma::load_matrix_sync(b16, h, 16);
        wmma::load_matrix_sync(c32, f, 16, wmma::mem_row_major);
        wmma::load_matrix_sync(a8, b, 16);
        wmma::load_matrix_sync(b8, b, 16);
        wmma::load_matrix_sync(ci, n, 16, wmma::mem_row_major);
        dump(a16, o), dump(b16, o + 512), dump(c32, o + 1024), dump(a8, o + 1536), dump(b8, o + 2048), dump(ci, o + 2560);
        __syncwarp();
    }
}

// 1 if D = A·B changes when element e of operand `which` is zeroed in every lane.
template <class FA, class FB, class FC, typename Acc>
__device__ int changes(const FA& a, const FB& b, bool zero_a, int e, Acc* d0, Acc* d1) {
    FA a2 = a;
    FB b2 = b;
    if (zero_a) set_zero(a2.x[e]);
    else set_zero(b2.x[e]);
    FC c;
    wmma::fill_fragment(c, Acc(0));
    wmma::mma_sync(c, a2, b2, c);
    wmma::store_matrix_sync(d1, c, 16, wmma::mem_row_major);
    __syncwarp();
    int diff = 0;
    for (int i = threadIdx.x; i < 256; i += 32) diff |= d0[i] != d1[i];
    diff = __any_sync(~0u, diff);
    __syncwarp();
    return diff;
}

__global__ void reads(int* out) {
    __shared__ __half h[256];
    __shared__ int8_t b[256];
    __shared__ float df[2][256];
    __shared__ int di[2][256];
    for (int i = threadIdx.x; i < 256; i += 32) h[i] = __int2half_rn(1 + i * 7 % 5), b[i] = int8_t(1 + i * 7 % 5);
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a16;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> a8;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> b8;
    using C32 = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
    using CI = wmma::fragment<wmma::accumulator, 16, 16, 16, int>;
    wmma::load_matrix_sync(a16, h, 16);
    wmma::load_matrix_sync(b16, h, 16);
    wmma::load_matrix_sync(a8, b, 16);
    wmma::load_matrix_sync(b8, b, 16);
    {
        C32 c;
        wmma::fill_fragment(c, 0.f);
        wmma::mma_sync(c, a16, b16, c);
        wmma::store_matrix_sync(df[0], c, 16, wmma::mem_row_major);
        CI ci;
        wmma::fill_fragment(ci, 0);
        wmma::mma_sync(ci, a8, b8, ci);
        wmma::store_matrix_sync(di[0], ci, 16, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int e = 0; e < 16; ++e) {  // unrolled: x[e] stays a register
        const int r0 = changes<decltype(a16), decltype(b16), C32>(a16, b16, true, e, df[0], df[1]);
        const int r1 = changes<decltype(a16), decltype(b16), C32>(a16, b16, false, e, df[0], df[1]);
        int r2 = -1, r3 = -1;
        if (e < 8) {
            r2 = changes<decltype(a8), decltype(b8), CI>(a8, b8, true, e, di[0], di[1]);
            r3 = changes<decltype(a8), decltype(b8), CI>(a8, b8, false, e, di[0], di[1]);
        }
        if (threadIdx.x == 0) out[e] = r0, out[16 + e] = r1, out[32 + e] = r2, out[48 + e] = r3;
    }
}

EXPORT void wmma_layout(int* out, cudaStream_t stream) { layout<<<1, 32, 0, stream>>>(out); }
EXPORT void wmma_reads(int* out, cudaStream_t stream) { reads<<<1, 32, 0, stream>>>(out); }
