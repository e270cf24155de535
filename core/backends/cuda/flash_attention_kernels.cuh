// The tiled attention kernels: forward (OUTPUT, LSE), rows (SCORES,
// SCORE_ROWS, TOP_K) and key mass, running the phases of
// flash_attention_body.h with barriers between them (the host tests run the
// same phases, thread by thread, in the same order).
#ifndef ROPE_BACKENDS_CUDA_FLASH_ATTENTION_KERNELS_CUH_
#define ROPE_BACKENDS_CUDA_FLASH_ATTENTION_KERNELS_CUH_

#include "core/backends/cuda/flash_attention_body.h"

namespace rope {
namespace kernels {

constexpr int kFlashMaxBlock = 128;

// Dynamic shared memory: FlashSharedFloats(head_dim, blockDim.x) floats.
__global__ void __launch_bounds__(kFlashMaxBlock)
    FlashForwardKernel(const FlashAttentionParams p) {
  extern __shared__ float shared[];
  const int t = threadIdx.x;
  const int block_dim = blockDim.x;
  float* q_shared = shared;
  float* s = shared + p.head_dim;
  float* partial = s + block_dim;
  const int64_t row_end = FlashRowEnd(p);
  for (int64_t row = p.row_begin + blockIdx.x; row < row_end; row += gridDim.x) {
    ForwardBegin(p, row, t, block_dim, q_shared);
    __syncthreads();
    int64_t first, last;
    KeyRange(p, RowOf(p, row), &first, &last);
    RowState state{NegativeInfinity(), 0.0f};
    for (int64_t k0 = first; k0 < last; k0 += block_dim) {
      const float logit = TileLogit(p, row, k0, last, t, q_shared);
      s[t] = logit;
      partial[t] = logit;
      __syncthreads();
      for (int stride = block_dim / 2; stride > 0; stride /= 2) {
        TreeMaxStep(partial, t, stride);
        __syncthreads();
      }
      float alpha = 1.0f;
      const bool any = UpdateMax(&state, partial[0], &alpha);
      __syncthreads();  // every thread has read partial[0]
      if (!any) continue;  // uniform across the block
      const float e = TileExp(s[t], state);
      s[t] = e;
      partial[t] = e;
      __syncthreads();
      for (int stride = block_dim / 2; stride > 0; stride /= 2) {
        TreeSumStep(partial, t, stride);
        __syncthreads();
      }
      state.l += partial[0];
      const int64_t n = last - k0 < block_dim ? last - k0 : block_dim;
      OutputPhase(p, row, k0, n, t, block_dim, alpha, s);
      __syncthreads();  // s and partial are rewritten by the next tile
    }
    ForwardFinish(p, row, t, block_dim, state);
    __syncthreads();  // q_shared is rewritten by the next row
  }
}

__global__ void __launch_bounds__(kFlashMaxBlock) FlashRowsKernel(const FlashAttentionParams p) {
  extern __shared__ float shared[];
  const int t = threadIdx.x;
  const int block_dim = blockDim.x;
  float* q_shared = shared;
  float* logits = shared + p.head_dim;
  float* probs = logits + block_dim;
  const int64_t row_end = FlashRowEnd(p);
  for (int64_t row = p.row_begin + blockIdx.x; row < row_end; row += gridDim.x) {
    LoadQueryPhase(p, row, t, block_dim, q_shared);
    __syncthreads();
    int64_t filled = 0;  // thread 0's
    for (int64_t k0 = 0; k0 < p.k_seq; k0 += block_dim) {
      RowsWritePhase(p, row, k0, t, q_shared, logits, probs);
      __syncthreads();
      RowsTopKPhase(p, row, k0, t, block_dim, logits, probs, &filled);
      __syncthreads();
    }
    RowsTopKFinish(p, row, t, filled);
    __syncthreads();
  }
}

constexpr int kKeyMassBlock = 128;

__global__ void __launch_bounds__(kKeyMassBlock) FlashKeyMassKernel(const FlashAttentionParams p) {
  KeyMassKernelBody(p, blockIdx.x, threadIdx.x, blockDim.x, gridDim.x);
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_FLASH_ATTENTION_KERNELS_CUH_
