// The CUDA backend's tiled attention run on the host: the rotated-copy
// kernel body over its grid, then the forward, rows and key-mass kernels of
// flash_attention_kernels.cuh phase by phase (flash_attention_on_host.h),
// in chunks of rows as cuda_attention.cc launches them; against the CPU
// backend's tiled pass (itself checked against a float64 reference in
// tests/unit) over masks x transforms x positions x results x dtypes.
// Runs without a GPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cuda/flash_attention_body.h"
#include "core/backends/cuda/rotate_kernel_body.h"
#include "tests/cuda/backend_cases.h"
#include "tests/cuda/flash_attention_on_host.h"
#include "tests/cuda/grid_emulation.h"

namespace rope {
namespace {

using test::TiledAttentionCase;
using test::TiledAttentionData;

template <typename Tag, bool kInterleaved>
void RunCopy(const kernels::RotatedCopyParams& p) {
  constexpr int kBlock = 64;
  const int64_t blocks = kernels::BlocksFor(kernels::RotatedCopyItems(p), kBlock, 5);
  test::RunGridOnHost(blocks, kBlock, [&p](int64_t b, int t, int bd, int64_t gd) {
    kernels::RotatedCopyKernelBody<Tag, kInterleaved>(p, b, t, bd, gd);
  });
}

void CopyOnHost(DType dtype, Layout layout, const kernels::RotatedCopyParams& p) {
  const bool inter = layout == Layout::kInterleaved;
  switch (dtype) {
    case DType::kFloat32:
      return inter ? RunCopy<math::F32, true>(p) : RunCopy<math::F32, false>(p);
    case DType::kFloat16:
      return inter ? RunCopy<math::F16, true>(p) : RunCopy<math::F16, false>(p);
    case DType::kBFloat16:
      return inter ? RunCopy<math::BF16, true>(p) : RunCopy<math::BF16, false>(p);
  }
}

// cuda_attention.cc's tiled path with host stand-ins for the device;
// `rows_per_chunk` rows per launch.
void TiledOnHost(const RopeTable& table, const AttentionArgs& a, int64_t rows_per_chunk) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> qf(a.batch * a.q_seq * a.q_heads * a.head_dim, nan);
  std::vector<float> kf(a.batch * a.k_seq * a.k_heads * a.head_dim, nan);
  std::vector<float> vf;
  kernels::RotatedCopyParams copy;
  copy.head_dim = static_cast<int>(a.head_dim);
  copy.rotary_dim = static_cast<int>(a.rotary_dim);
  copy.table = table.rows();
  copy.in = a.q;
  copy.out = qf.data();
  copy.tokens = a.batch * a.q_seq;
  copy.heads = static_cast<int>(a.q_heads);
  copy.positions = a.q_positions;
  CopyOnHost(a.dtype, a.layout, copy);
  copy.in = a.k;
  copy.out = kf.data();
  copy.tokens = a.batch * a.k_seq;
  copy.heads = static_cast<int>(a.k_heads);
  copy.positions = a.k_positions;
  CopyOnHost(a.dtype, a.layout, copy);
  const bool with_v = a.v != nullptr && a.output != nullptr;
  if (with_v) {
    vf.assign(a.batch * a.k_seq * a.k_heads * a.v_dim, nan);
    copy.in = a.v;
    copy.out = vf.data();
    copy.head_dim = static_cast<int>(a.v_dim);
    copy.rotary_dim = 0;
    CopyOnHost(a.dtype, a.layout, copy);
  }
  const int64_t rows = a.batch * a.q_heads * a.q_seq;
  std::vector<float> lse_workspace(rows, nan);
  kernels::FlashAttentionParams p;
  p.q = qf.data();
  p.k = kf.data();
  p.v = with_v ? vf.data() : nullptr;
  p.output = with_v ? a.output : nullptr;
  p.lse = a.lse != nullptr ? a.lse : lse_workspace.data();
  p.scores = a.scores;
  p.score_rows = a.score_rows;
  p.score_rows_start = a.score_rows_start;
  p.score_rows_count = a.score_rows_count;
  p.top_k_indices = a.top_k_indices;
  p.top_k_probs = a.top_k_probs;
  p.top_k = a.top_k;
  p.key_mass = a.key_mass;
  p.softmax = a.softmax;
  p.batch = a.batch;
  p.q_seq = a.q_seq;
  p.k_seq = a.k_seq;
  p.q_heads = a.q_heads;
  p.k_heads = a.k_heads;
  p.head_dim = a.head_dim;
  p.v_dim = with_v ? a.v_dim : 0;
  p.q_positions = a.q_positions;
  p.k_positions = a.k_positions;
  p.mask = a.mask;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.sinks = a.sinks;
  p.alibi_slopes = a.alibi_slopes;
  for (int64_t begin = 0; begin < rows; begin += rows_per_chunk) {
    p.row_begin = begin;
    p.row_end = std::min(rows, begin + rows_per_chunk);
    test::FlashForwardOnHost(p, /*max_blocks=*/3);
  }
  if (a.scores != nullptr || a.score_rows != nullptr || a.top_k_indices != nullptr) {
    for (int64_t begin = 0; begin < rows; begin += rows_per_chunk) {
      p.row_begin = begin;
      p.row_end = std::min(rows, begin + rows_per_chunk);
      test::FlashRowsOnHost(p, /*max_blocks=*/3);
    }
  }
  if (a.key_mass != nullptr) test::FlashKeyMassOnHost(p, /*max_blocks=*/4);
}

// Top-k against the CPU's: the same keys, except that two keys whose
// probabilities agree to the tolerance may trade places.
::testing::AssertionResult SameTopK(const std::vector<int32_t>& got_idx,
                                    const std::vector<float>& got_p,
                                    const std::vector<int32_t>& want_idx,
                                    const std::vector<float>& want_p, double tolerance) {
  if (got_idx.size() != want_idx.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t n = 0; n < got_idx.size(); ++n) {
    if (got_idx[n] == want_idx[n] && (want_idx[n] < 0 ? got_p[n] == 0.0f : true)) continue;
    if (got_idx[n] >= 0 && want_idx[n] >= 0 &&
        std::fabs(got_p[n] - want_p[n]) <= tolerance * (1.0 + want_p[n])) {
      continue;  // a near tie
    }
    return ::testing::AssertionFailure()
           << "place " << n << ": key " << got_idx[n] << " (" << got_p[n] << ") vs key "
           << want_idx[n] << " (" << want_p[n] << ")";
  }
  return test::CloseToCpu(got_p, want_p, tolerance);
}

class FlashAttentionBodyTest
    : public ::testing::TestWithParam<std::tuple<TiledAttentionCase, int64_t>> {};

TEST_P(FlashAttentionBodyTest, MatchesCpuBackend) {
  const TiledAttentionCase& c = std::get<0>(GetParam());
  const std::shared_ptr<const RopeTable> table =
      test::PlainTable(c.base.rotary_dim, test::kAttentionGridMaxLen);
  TiledAttentionData want = test::MakeTiledAttentionData(c, 21);
  const absl::Status status = test::CpuBackend().AttentionScores(*table, want.Args(c));
  ASSERT_TRUE(status.ok()) << status;
  TiledAttentionData got = test::MakeTiledAttentionData(c, 21);
  TiledOnHost(*table, got.Args(c), std::get<1>(GetParam()));
  constexpr double kTolerance = 2e-5;  // float32 sums in another order
  if (c.lse) {
    EXPECT_TRUE(test::CloseToCpu(got.lse, want.lse, kTolerance)) << "lse";
  }
  if (c.output) {
    EXPECT_TRUE(test::CloseToCpu(got.base.output, want.base.output, kTolerance)) << "output";
  }
  if (c.scores) {
    EXPECT_TRUE(test::CloseToCpu(got.base.scores, want.base.scores, kTolerance)) << "scores";
  }
  if (c.score_rows_count > 0) {
    EXPECT_TRUE(test::CloseToCpu(got.score_rows, want.score_rows, kTolerance)) << "score_rows";
  }
  if (c.key_mass) {
    EXPECT_TRUE(test::CloseToCpu(got.key_mass, want.key_mass, 1e-4)) << "key_mass";
  }
  if (c.top_k > 0) {
    EXPECT_TRUE(SameTopK(got.top_k_indices, got.top_k_probs, want.top_k_indices,
                         want.top_k_probs, kTolerance));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, FlashAttentionBodyTest,
    ::testing::Combine(::testing::ValuesIn(test::TiledAttentionGrid()),
                       ::testing::Values(int64_t{1} << 40, int64_t{7})),
    [](const ::testing::TestParamInfo<std::tuple<TiledAttentionCase, int64_t>>& info) {
      return std::get<0>(info.param).Name() +
             (std::get<1>(info.param) == 7 ? "_Chunks7" : "_OneChunk");
    });

}  // namespace
}  // namespace rope
