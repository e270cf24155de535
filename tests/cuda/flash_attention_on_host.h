// The tiled attention kernels (flash_attention_kernels.cuh) run on the
// host: each block's phases for every thread in turn, with the barriers
// between them kept as the order of the loops, and the key-mass kernel over
// its whole grid. Used by the kernel-body tests and by the emulated
// launchers of the fake CUDA runtime, so both run what the device runs.
#ifndef ROPE_TESTS_CUDA_FLASH_ATTENTION_ON_HOST_H_
#define ROPE_TESTS_CUDA_FLASH_ATTENTION_ON_HOST_H_

#include <cstdint>
#include <vector>

#include "core/backends/cuda/flash_attention_body.h"
#include "tests/cuda/grid_emulation.h"

namespace rope {
namespace test {

// Block-dimension and grid choices as the launchers make them.
inline int64_t FlashGrid(const kernels::FlashAttentionParams& p, int64_t max_blocks) {
  return kernels::BlocksFor(kernels::FlashRowEnd(p) - p.row_begin, 1, max_blocks);
}

inline void FlashForwardOnHost(const kernels::FlashAttentionParams& p, int64_t max_blocks) {
  using namespace kernels;
  const int bd = FlashBlockDim(p.k_seq);
  const int64_t grid = FlashGrid(p, max_blocks);
  std::vector<float> q_shared(p.head_dim), s(bd), partial(bd);
  const int64_t row_end = FlashRowEnd(p);
  for (int64_t block = 0; block < grid; ++block) {
    for (int64_t row = p.row_begin + block; row < row_end; row += grid) {
      for (int t = 0; t < bd; ++t) ForwardBegin(p, row, t, bd, q_shared.data());
      int64_t first, last;
      KeyRange(p, RowOf(p, row), &first, &last);
      // One state per thread, as on the device (they stay equal).
      std::vector<RowState> state(bd, RowState{NegativeInfinity(), 0.0f});
      std::vector<float> alpha(bd, 1.0f);
      for (int64_t k0 = first; k0 < last; k0 += bd) {
        for (int t = 0; t < bd; ++t) {
          s[t] = TileLogit(p, row, k0, last, t, q_shared.data());
          partial[t] = s[t];
        }
        for (int stride = bd / 2; stride > 0; stride /= 2) {
          for (int t = 0; t < bd; ++t) TreeMaxStep(partial.data(), t, stride);
        }
        bool any = false;
        for (int t = 0; t < bd; ++t) any = UpdateMax(&state[t], partial[0], &alpha[t]);
        if (!any) continue;
        for (int t = 0; t < bd; ++t) {
          s[t] = TileExp(s[t], state[t]);
          partial[t] = s[t];
        }
        for (int stride = bd / 2; stride > 0; stride /= 2) {
          for (int t = 0; t < bd; ++t) TreeSumStep(partial.data(), t, stride);
        }
        const int64_t n = last - k0 < bd ? last - k0 : bd;
        for (int t = 0; t < bd; ++t) {
          state[t].l += partial[0];
          OutputPhase(p, row, k0, n, t, bd, alpha[t], s.data());
        }
      }
      for (int t = 0; t < bd; ++t) ForwardFinish(p, row, t, bd, state[t]);
    }
  }
}

inline void FlashRowsOnHost(const kernels::FlashAttentionParams& p, int64_t max_blocks) {
  using namespace kernels;
  const int bd = FlashBlockDim(p.k_seq);
  const int64_t grid = FlashGrid(p, max_blocks);
  std::vector<float> q_shared(p.head_dim), logits(bd), probs(bd);
  const int64_t row_end = FlashRowEnd(p);
  for (int64_t block = 0; block < grid; ++block) {
    for (int64_t row = p.row_begin + block; row < row_end; row += grid) {
      for (int t = 0; t < bd; ++t) LoadQueryPhase(p, row, t, bd, q_shared.data());
      int64_t filled = 0;
      for (int64_t k0 = 0; k0 < p.k_seq; k0 += bd) {
        for (int t = 0; t < bd; ++t) {
          RowsWritePhase(p, row, k0, t, q_shared.data(), logits.data(), probs.data());
        }
        for (int t = 0; t < bd; ++t) {
          RowsTopKPhase(p, row, k0, t, bd, logits.data(), probs.data(), &filled);
        }
      }
      for (int t = 0; t < bd; ++t) RowsTopKFinish(p, row, t, filled);
    }
  }
}

inline void FlashKeyMassOnHost(const kernels::FlashAttentionParams& p, int64_t max_blocks) {
  constexpr int kBlock = 128;  // flash_attention_kernels.cuh's kKeyMassBlock
  const int64_t blocks = kernels::BlocksFor(kernels::KeyMassItems(p), kBlock, max_blocks);
  RunGridOnHost(blocks, kBlock, [&p](int64_t b, int t, int bd, int64_t gd) {
    kernels::KeyMassKernelBody(p, b, t, bd, gd);
  });
}

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_FLASH_ATTENTION_ON_HOST_H_
