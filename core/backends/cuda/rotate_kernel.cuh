// The rotation kernels: thin __global__ wrappers over the per-thread bodies
// of rotate_kernel_body.h (which the host tests run over the same grid).
#ifndef ROPE_BACKENDS_CUDA_ROTATE_KERNEL_CUH_
#define ROPE_BACKENDS_CUDA_ROTATE_KERNEL_CUH_

#include "core/backends/cuda/rotate_kernel_body.h"

namespace rope {
namespace kernels {

constexpr int kRotateBlock = 256;

template <typename Tag, bool kInterleaved, bool kVector>
__global__ void __launch_bounds__(kRotateBlock) RotateKernel(const RotateKernelParams params) {
  RotateKernelBody<Tag, kInterleaved, kVector>(params, blockIdx.x, threadIdx.x, blockDim.x,
                                               gridDim.x);
}

template <typename Tag, bool kInterleaved>
__global__ void __launch_bounds__(kRotateBlock) RotateFloat8Kernel(const RotateFloat8Params params) {
  RotateFloat8KernelBody<Tag, kInterleaved>(params, blockIdx.x, threadIdx.x, blockDim.x, gridDim.x);
}

template <typename Tag, bool kInterleaved>
__global__ void __launch_bounds__(kRotateBlock) RotatedCopyKernel(const RotatedCopyParams params) {
  RotatedCopyKernelBody<Tag, kInterleaved>(params, blockIdx.x, threadIdx.x, blockDim.x, gridDim.x);
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_ROTATE_KERNEL_CUH_
