// Launchers of the rotation kernels (declared in kernel_launchers.h).
#include "core/backends/cuda/dispatch.cuh"
#include "core/backends/cuda/kernel_launchers.h"
#include "core/backends/cuda/rotate_kernel.cuh"

namespace rope {
namespace kernels {

cudaError_t CheckKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, RotateKernel<math::F32, true, false>);
}

cudaError_t Rotate(const RotateKernelParams& params, Storage storage, bool interleaved,
                   const LaunchConfig& launch) {
  if (params.tokens <= 0 || params.rotary_dim <= 0) return cudaSuccess;
  ROPE_DISPATCH_STORAGE(storage, Tag, {
    ROPE_DISPATCH_BOOL(interleaved, kInterleaved, {
      const bool vector = RotateUsesVectors<Tag, kInterleaved>(params);
      ROPE_DISPATCH_BOOL(vector, kVector, {
        const int64_t items = RotateItems<Tag, kInterleaved, kVector>(params);
        const int64_t blocks = BlocksFor(items, kRotateBlock, launch.max_blocks);
        RotateKernel<Tag, kInterleaved, kVector>
            <<<static_cast<unsigned>(blocks), kRotateBlock, 0, launch.stream>>>(params);
      })
    })
  })
  return cudaGetLastError();
}

cudaError_t RotateFloat8(const RotateFloat8Params& params, Storage storage, bool interleaved,
                         const LaunchConfig& launch) {
  const int64_t items = RotateFloat8Items(params);
  if (items <= 0) return cudaSuccess;
  const int64_t blocks = BlocksFor(items, kRotateBlock, launch.max_blocks);
  ROPE_DISPATCH_STORAGE(storage, Tag, {
    ROPE_DISPATCH_BOOL(interleaved, kInterleaved, {
      RotateFloat8Kernel<Tag, kInterleaved>
          <<<static_cast<unsigned>(blocks), kRotateBlock, 0, launch.stream>>>(params);
    })
  })
  return cudaGetLastError();
}

cudaError_t RotatedCopy(const RotatedCopyParams& params, Storage storage, bool interleaved,
                        const LaunchConfig& launch) {
  const int64_t items = RotatedCopyItems(params);
  if (items <= 0) return cudaSuccess;
  const int64_t blocks = BlocksFor(items, kRotateBlock, launch.max_blocks);
  ROPE_DISPATCH_STORAGE(storage, Tag, {
    ROPE_DISPATCH_BOOL(interleaved, kInterleaved, {
      RotatedCopyKernel<Tag, kInterleaved>
          <<<static_cast<unsigned>(blocks), kRotateBlock, 0, launch.stream>>>(params);
    })
  })
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace rope
