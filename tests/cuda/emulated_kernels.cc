// The kernel launchers of kernel_launchers.h for the fake CUDA runtime
// (tests/cuda/fake_runtime): instead of launching the device kernels, each
// enqueues on the launch's stream a host emulation that runs the kernel's
// per-thread body over the same launch grid (grid_emulation.h; the softmax
// phase by phase with its barriers, as attention_kernels.cuh does) when the
// fake device gets there. The launch-time choices (vector path, grid size,
// block size) are those of rotate_kernel.cu and attention_kernels.cu.
//
// Before running, an emulated kernel checks that everything it will touch
// (q, k, the table rows its positions reach, the positions, the scores) is
// live fake device memory: memory freed while the kernel was queued makes
// it raise cudaErrorIllegalAddress, as a device might, and under
// AddressSanitizer every byte it touches is checked as well.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/backends/cuda/dispatch.cuh"
#include "core/backends/cuda/kernel_launchers.h"
#include "tests/cuda/fake_runtime/fake_cuda_control.h"
#include "tests/cuda/flash_attention_on_host.h"
#include "tests/cuda/grid_emulation.h"

namespace rope {
namespace kernels {
namespace {

constexpr int kRotateBlock = 256;          // rotate_kernel.cuh
constexpr int kMaskSoftmaxMaxBlock = 256;  // attention_kernels.cuh

// Enqueues `body` on `stream` and returns the launch's error, as a <<<>>>
// launch followed by cudaGetLastError does.
cudaError_t Launch(cudaStream_t stream, std::function<void()> body) {
  auto* work = new std::function<void()>(std::move(body));
  (void)RopeFakeCudaLaunchKernel(
      stream,
      [](void* data, int execute) {
        auto* w = static_cast<std::function<void()>*>(data);
        if (execute != 0) (*w)();
        delete w;
      },
      work);
  return cudaGetLastError();
}

bool Live(const void* p, int64_t bytes) { return RopeFakeCudaCheckAccess(p, bytes) != 0; }

// Checks the explicit positions (if any), then, for every token of
// [first, first + tokens), the table's block pointers for its position and
// the cos and sin rows they lead to (rotary_dim / 2 floats each): as a real
// kernel would, this reads device memory only.
bool ExplicitPositionsLive(const math::PositionSpec& positions) {
  return positions.count == 0 ||
         Live(positions.explicit_positions,
              positions.count * static_cast<int64_t>(sizeof(int64_t)));
}

bool PositionsAndTableLive(const math::PositionSpec& positions, int64_t first, int64_t tokens,
                           const TableRows& table, int rotary_dim) {
  if (!ExplicitPositionsLive(positions)) return false;
  const int64_t row_bytes = (rotary_dim / 2) * static_cast<int64_t>(sizeof(float));
  for (int64_t t = first; t < first + tokens; ++t) {
    const int64_t b = t / positions.seq;
    const int64_t pos = positions.At(b, t - b * positions.seq);
    const int64_t slot = (pos >> table.block_shift) - table.first_block;
    if (slot < 0 || !Live(table.cos_blocks + slot, sizeof(const float*)) ||
        !Live(table.sin_blocks + slot, sizeof(const float*)) || !Live(table.Cos(pos), row_bytes) ||
        !Live(table.Sin(pos), row_bytes)) {
      return false;
    }
  }
  return true;
}

}  // namespace

cudaError_t CheckKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&CheckKernelImage));
}

cudaError_t Rotate(const RotateKernelParams& params, Storage storage, bool interleaved,
                   const LaunchConfig& launch) {
  if (params.tokens <= 0 || params.rotary_dim <= 0) return cudaSuccess;
  const int64_t elem = StorageBytes(storage);
  std::function<void()> body;
  ROPE_DISPATCH_STORAGE(
      storage, Tag, {ROPE_DISPATCH_BOOL(interleaved, kInterleaved, {
        const bool vector = RotateUsesVectors<Tag, kInterleaved>(params);
        ROPE_DISPATCH_BOOL(vector, kVector, {
          const int64_t items = RotateItems<Tag, kInterleaved, kVector>(params);
          const int64_t blocks = BlocksFor(items, kRotateBlock, launch.max_blocks);
          body = [params, blocks, elem]() {
            const RotateKernelParams& p = params;
            if (!Live(p.q, p.tokens * p.q_heads * p.head_dim * elem) ||
                (p.k != nullptr && !Live(p.k, p.tokens * p.k_heads * p.head_dim * elem)) ||
                !PositionsAndTableLive(p.positions, p.first_token, p.tokens, p.table,
                                       p.rotary_dim)) {
              return;
            }
            test::RunGridOnHost(blocks, kRotateBlock, [&p](int64_t b, int t, int bd, int64_t gd) {
              RotateKernelBody<Tag, kInterleaved, kVector>(p, b, t, bd, gd);
            });
          };
        })
      })})
  return Launch(launch.stream, std::move(body));
}

cudaError_t RotateFloat8(const RotateFloat8Params& params, Storage storage, bool interleaved,
                         const LaunchConfig& launch) {
  const int64_t items = RotateFloat8Items(params);
  if (items <= 0) return cudaSuccess;
  const int64_t blocks = BlocksFor(items, kRotateBlock, launch.max_blocks);
  const int64_t elem = StorageBytes(storage);
  std::function<void()> body;
  ROPE_DISPATCH_STORAGE(
      storage, Tag, {ROPE_DISPATCH_BOOL(interleaved, kInterleaved, {
        body = [params, blocks, elem]() {
          const RotateFloat8Params& p = params;
          const int64_t q_elems = p.tokens * p.q_heads * p.head_dim;
          const int64_t k_elems = p.k != nullptr ? p.tokens * p.k_heads * p.head_dim : 0;
          if (!Live(p.q, q_elems * elem) || !Live(p.q_out, q_elems) ||
              (p.k != nullptr && (!Live(p.k, k_elems * elem) || !Live(p.k_out, k_elems)))) {
            return;
          }
          if (p.rotary_dim > 0 && !PositionsAndTableLive(p.positions, p.first_token, p.tokens,
                                                         p.table, p.rotary_dim)) {
            return;
          }
          test::RunGridOnHost(blocks, kRotateBlock, [&p](int64_t b, int t, int bd, int64_t gd) {
            RotateFloat8KernelBody<Tag, kInterleaved>(p, b, t, bd, gd);
          });
        };
      })})
  return Launch(launch.stream, std::move(body));
}

cudaError_t RotatedCopy(const RotatedCopyParams& params, Storage storage, bool interleaved,
                        const LaunchConfig& launch) {
  const int64_t items = RotatedCopyItems(params);
  if (items <= 0) return cudaSuccess;
  const int64_t blocks = BlocksFor(items, kRotateBlock, launch.max_blocks);
  const int64_t elem = StorageBytes(storage);
  std::function<void()> body;
  ROPE_DISPATCH_STORAGE(
      storage, Tag, {ROPE_DISPATCH_BOOL(interleaved, kInterleaved, {
        body = [params, blocks, elem, items]() {
          const RotatedCopyParams& p = params;
          if (!Live(p.in, items * elem) ||
              !Live(p.out, items * static_cast<int64_t>(sizeof(float)))) {
            return;
          }
          if (p.rotary_dim > 0 &&
              !PositionsAndTableLive(p.positions, 0, p.tokens, p.table, p.rotary_dim)) {
            return;
          }
          test::RunGridOnHost(blocks, kRotateBlock, [&p](int64_t b, int t, int bd, int64_t gd) {
            RotatedCopyKernelBody<Tag, kInterleaved>(p, b, t, bd, gd);
          });
        };
      })})
  return Launch(launch.stream, std::move(body));
}

cudaError_t MaskSoftmax(const MaskSoftmaxParams& params, const LaunchConfig& launch) {
  const int64_t rows = MaskSoftmaxRows(params);
  if (rows <= 0 || params.k_seq <= 0) return cudaSuccess;
  if (!params.causal && !NeedsProbabilities(params)) return cudaSuccess;
  const int block_dim = MaskSoftmaxBlockDim(params.k_seq);
  const int64_t grid = BlocksFor(rows, 1, launch.max_blocks);
  return Launch(launch.stream, [params, block_dim, grid]() {
    const MaskSoftmaxParams& p = params;
    const int64_t all = p.batch * p.heads * p.q_seq * p.k_seq * static_cast<int64_t>(sizeof(float));
    if (!Live(p.scores, all) || (p.probs != nullptr && !Live(p.probs, all)) ||
        !ExplicitPositionsLive(p.q_positions) || !ExplicitPositionsLive(p.k_positions)) {
      return;
    }
    // attention_kernels.cuh, one block after another, each phase for every
    // thread of the block before its barrier.
    std::vector<float> partial(kMaskSoftmaxMaxBlock);
    const int64_t row_end = MaskSoftmaxRowEnd(p);
    const bool probabilities = NeedsProbabilities(p);
    for (int64_t block = 0; block < grid; ++block) {
      for (int64_t row = p.row_begin + block; row < row_end; row += grid) {
        for (int t = 0; t < block_dim; ++t) partial[t] = MaskMaxPhase(p, row, t, block_dim);
        if (!probabilities) continue;
        for (int stride = block_dim / 2; stride > 0; stride /= 2) {
          for (int t = 0; t < block_dim; ++t) TreeMaxStep(partial.data(), t, stride);
        }
        const float row_max = partial[0];
        for (int t = 0; t < block_dim; ++t) {
          partial[t] = ExpSumPhase(p, row, t, block_dim, row_max);
        }
        for (int stride = block_dim / 2; stride > 0; stride /= 2) {
          for (int t = 0; t < block_dim; ++t) TreeSumStep(partial.data(), t, stride);
        }
        const float row_sum = partial[0];
        for (int t = 0; t < block_dim; ++t) NormalizePhase(p, row, t, block_dim, row_sum);
      }
    }
  });
}

namespace {

// Whether everything a tiled attention kernel may touch is live device
// memory: the rotated copies, the results and workspaces it writes, the
// positions and the per-head values.
bool FlashLive(const FlashAttentionParams& p) {
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const int64_t rows = p.batch * p.q_heads * p.q_seq;
  auto live = [](const void* ptr, int64_t bytes) { return ptr == nullptr || Live(ptr, bytes); };
  return live(p.q, rows * p.head_dim * f) &&
         live(p.k, p.batch * p.k_seq * p.k_heads * p.head_dim * f) &&
         live(p.v, p.batch * p.k_seq * p.k_heads * p.v_dim * f) &&
         live(p.output, rows * p.v_dim * f) && live(p.lse, rows * f) &&
         live(p.scores, rows * p.k_seq * f) &&
         live(p.score_rows, p.batch * p.q_heads * p.score_rows_count * p.k_seq * f) &&
         live(p.top_k_indices, rows * p.top_k * static_cast<int64_t>(sizeof(int32_t))) &&
         live(p.top_k_probs, rows * p.top_k * f) &&
         live(p.key_mass, p.batch * p.q_heads * p.k_seq * f) &&
         live(p.sinks, p.q_heads * f) && live(p.alibi_slopes, p.q_heads * f) &&
         ExplicitPositionsLive(p.q_positions) && ExplicitPositionsLive(p.k_positions);
}

}  // namespace

cudaError_t FlashForward(const FlashAttentionParams& params, const LaunchConfig& launch) {
  if (FlashRowEnd(params) - params.row_begin <= 0) return cudaSuccess;
  const int64_t max_blocks = launch.max_blocks;
  return Launch(launch.stream, [params, max_blocks]() {
    if (FlashLive(params)) test::FlashForwardOnHost(params, max_blocks);
  });
}

cudaError_t FlashRows(const FlashAttentionParams& params, const LaunchConfig& launch) {
  if (FlashRowEnd(params) - params.row_begin <= 0) return cudaSuccess;
  const int64_t max_blocks = launch.max_blocks;
  return Launch(launch.stream, [params, max_blocks]() {
    if (FlashLive(params)) test::FlashRowsOnHost(params, max_blocks);
  });
}

cudaError_t FlashKeyMass(const FlashAttentionParams& params, const LaunchConfig& launch) {
  if (KeyMassItems(params) <= 0) return cudaSuccess;
  const int64_t max_blocks = launch.max_blocks;
  return Launch(launch.stream, [params, max_blocks]() {
    if (FlashLive(params)) test::FlashKeyMassOnHost(params, max_blocks);
  });
}

}  // namespace kernels
}  // namespace rope
