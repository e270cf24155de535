// The causal-mask + softmax kernel: one block per scores row, the phases of
// softmax_kernel_body.h separated by barriers, reductions as a shared-memory
// tree (the host tests run the same phases and tree).
#ifndef ROPE_BACKENDS_CUDA_ATTENTION_KERNELS_CUH_
#define ROPE_BACKENDS_CUDA_ATTENTION_KERNELS_CUH_

#include "core/backends/cuda/softmax_kernel_body.h"

namespace rope {
namespace kernels {

constexpr int kMaskSoftmaxMaxBlock = 256;

__global__ void __launch_bounds__(kMaskSoftmaxMaxBlock)
    MaskSoftmaxKernel(const MaskSoftmaxParams params) {
  __shared__ float partial[kMaskSoftmaxMaxBlock];
  const int t = threadIdx.x;
  const int block_dim = blockDim.x;
  const int64_t row_end = MaskSoftmaxRowEnd(params);
  const bool probabilities = NeedsProbabilities(params);
  for (int64_t row = params.row_begin + blockIdx.x; row < row_end; row += gridDim.x) {
    partial[t] = MaskMaxPhase(params, row, t, block_dim);
    if (!probabilities) continue;  // uniform across the block
    __syncthreads();
    for (int stride = block_dim / 2; stride > 0; stride /= 2) {
      TreeMaxStep(partial, t, stride);
      __syncthreads();
    }
    const float row_max = partial[0];
    __syncthreads();  // every thread has read partial[0] before it is reused
    partial[t] = ExpSumPhase(params, row, t, block_dim, row_max);
    __syncthreads();
    for (int stride = block_dim / 2; stride > 0; stride /= 2) {
      TreeSumStep(partial, t, stride);
      __syncthreads();
    }
    const float row_sum = partial[0];
    __syncthreads();  // as above, before the next row's first phase
    NormalizePhase(params, row, t, block_dim, row_sum);
  }
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_ATTENTION_KERNELS_CUH_
