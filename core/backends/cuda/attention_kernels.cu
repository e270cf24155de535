// Launcher of the mask/softmax kernel (declared in kernel_launchers.h).
#include "core/backends/cuda/attention_kernels.cuh"
#include "core/backends/cuda/kernel_launchers.h"

namespace rope {
namespace kernels {

cudaError_t MaskSoftmax(const MaskSoftmaxParams& params, const LaunchConfig& launch) {
  const int64_t rows = MaskSoftmaxRows(params);
  if (rows <= 0 || params.k_seq <= 0) return cudaSuccess;
  if (!params.causal && !NeedsProbabilities(params)) return cudaSuccess;  // nothing to do
  const int block_dim = MaskSoftmaxBlockDim(params.k_seq);
  const int64_t blocks = BlocksFor(rows, 1, launch.max_blocks);
  MaskSoftmaxKernel<<<static_cast<unsigned>(blocks), block_dim, 0, launch.stream>>>(params);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace rope
