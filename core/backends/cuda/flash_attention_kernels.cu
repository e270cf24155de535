// Launchers of the tiled attention kernels (declared in kernel_launchers.h).
#include "core/backends/cuda/flash_attention_kernels.cuh"
#include "core/backends/cuda/kernel_launchers.h"

namespace rope {
namespace kernels {
namespace {

template <typename Kernel>
cudaError_t LaunchRows(Kernel kernel, const FlashAttentionParams& params,
                       const LaunchConfig& launch) {
  const int64_t rows = FlashRowEnd(params) - params.row_begin;
  if (rows <= 0) return cudaSuccess;
  const int block_dim = FlashBlockDim(params.k_seq);
  const size_t shared =
      static_cast<size_t>(FlashSharedFloats(params.head_dim, block_dim)) * sizeof(float);
  if (shared > 48 * 1024) return cudaErrorInvalidValue;  // head_dim past 12k floats
  const int64_t blocks = BlocksFor(rows, 1, launch.max_blocks);
  kernel<<<static_cast<unsigned>(blocks), block_dim, shared, launch.stream>>>(params);
  return cudaGetLastError();
}

}  // namespace

cudaError_t FlashForward(const FlashAttentionParams& params, const LaunchConfig& launch) {
  return LaunchRows(FlashForwardKernel, params, launch);
}

cudaError_t FlashRows(const FlashAttentionParams& params, const LaunchConfig& launch) {
  return LaunchRows(FlashRowsKernel, params, launch);
}

cudaError_t FlashKeyMass(const FlashAttentionParams& params, const LaunchConfig& launch) {
  const int64_t items = KeyMassItems(params);
  if (items <= 0) return cudaSuccess;
  const int64_t blocks = BlocksFor(items, kKeyMassBlock, launch.max_blocks);
  FlashKeyMassKernel<<<static_cast<unsigned>(blocks), kKeyMassBlock, 0, launch.stream>>>(params);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace rope
