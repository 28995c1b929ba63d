// Marlin as a baseline for lessons 07 and 10. Not course code: Marlin is Elias Frantar's W4A16 kernel (IST-DASLab;
// Frantar, Castro, Chen, Hoefler, Alistarh, "MARLIN: Mixed-Precision Auto-Regressive Parallel Inference on Large
// Language Models", 2024), the one vLLM serves GPTQ and AWQ models with. It is compiled here from the copy that the
// optimum-quanto package ships (Apache-2.0; quanto adds a scaled zero point after the scale, Ŵ = q·s + sz with q in
// 0..15, so it runs both of the course's INT4 formats). harness/baselines/marlin.py finds that file, passes its folder with -I,
// packs weights into Marlin's layout and checks the results. This file only gives Marlin the course's launcher form.
// REQUIRES: sm_80
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

#include "marlin_cuda_kernel.cu"  // from optimum-quanto (harness/baselines/marlin.py adds its folder to the include path)

#define EXPORT extern "C"

// y[M, N] = x[M, K] · Ŵᵀ on Marlin's packed weights: B int32 [K/16, N·2], s and sz fp16 [K/128, N] in its scale
// order, locks int32 [N/128 · 16] zeroed once (Marlin leaves them zero again). harness.baselines.marlin.pack makes all four. Marlin's own choices for everything
// else: 128 × 128 block tiles up to 16 tokens, 64 × 256 past that, a block per SM, at most 16 parallel 64-token
// slices. The shapes it cannot take are refused in harness/baselines/marlin.py; here an unsupported call does nothing, and
// the caller's poisoned output then fails its check.
EXPORT void marlin_w4a16(const __half* x, const int32_t* B, const __half* s, const __half* sz, int* locks, __half* y,
                         int M, int N, int K, cudaStream_t stream) {
    int dev = 0;
    cudaGetDevice(&dev);
    marlin_cuda(x, B, y, const_cast<__half*>(s), const_cast<__half*>(sz), M, N, K, locks, 128, dev, stream);
}
