// Launchers of the CUDA kernels: plain functions returning cudaError_t,
// free of absl/proto types, callable from host C++ compiled by g++ (the
// kernels themselves are in the .cuh/.cu files). Runtime choices (storage
// type, layout, the 16-byte path) become template parameters inside; only
// the backend turns a cudaError_t into a Status.
//
// Every launcher enqueues on `launch.stream` and returns the launch error
// (cudaGetLastError); errors of the kernel's execution surface at the next
// synchronisation. A launch with no work enqueues nothing and returns
// cudaSuccess.
#ifndef ROPE_BACKENDS_CUDA_KERNEL_LAUNCHERS_H_
#define ROPE_BACKENDS_CUDA_KERNEL_LAUNCHERS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backends/cuda/flash_attention_body.h"
#include "core/backends/cuda/kernel_common.h"
#include "core/backends/cuda/rotate_kernel_body.h"
#include "core/backends/cuda/softmax_kernel_body.h"

namespace rope {
namespace kernels {

struct LaunchConfig {
  cudaStream_t stream = nullptr;
  // Most blocks of one grid; the grid-stride loops cover the rest. A few
  // waves of the device's multiprocessors is plenty for these kernels.
  int64_t max_blocks = 65535;
};

// cudaSuccess when this binary holds kernels the current device can run
// (machine code for its architecture, or PTX its driver can compile);
// cudaErrorNoKernelImageForDevice (or the driver's error) otherwise.
cudaError_t CheckKernelImage();

// Rotates q (and k) in place; see RotateKernelParams. Takes the 16-byte path
// when RotateUsesVectors allows it.
cudaError_t Rotate(const RotateKernelParams& params, Storage storage, bool interleaved,
                   const LaunchConfig& launch);

// Rotation into float8 outputs; see RotateFloat8Params.
cudaError_t RotateFloat8(const RotateFloat8Params& params, Storage storage, bool interleaved,
                         const LaunchConfig& launch);

// Rotated float32 copy; see RotatedCopyParams.
cudaError_t RotatedCopy(const RotatedCopyParams& params, Storage storage, bool interleaved,
                        const LaunchConfig& launch);

// Causal mask + softmax over scores rows; see MaskSoftmaxParams. Enqueues
// nothing when there is neither a mask nor probabilities to compute.
cudaError_t MaskSoftmax(const MaskSoftmaxParams& params, const LaunchConfig& launch);

// The tiled attention of flash_attention_body.h over rows [row_begin,
// row_end) (forward: OUTPUT and LSE; rows: SCORES, SCORE_ROWS, TOP_K, which
// read the LSE), and the key mass of every key (reads the LSE).
// cudaErrorInvalidValue when head_dim needs more than 48 KiB of shared
// memory.
cudaError_t FlashForward(const FlashAttentionParams& params, const LaunchConfig& launch);
cudaError_t FlashRows(const FlashAttentionParams& params, const LaunchConfig& launch);
cudaError_t FlashKeyMass(const FlashAttentionParams& params, const LaunchConfig& launch);

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_KERNEL_LAUNCHERS_H_
