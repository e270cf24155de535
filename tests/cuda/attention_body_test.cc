// The attention path of the CUDA backend run on the host: the rotated-copy
// kernel body over its whole grid (q, k, and v with rotary_dim 0), the
// planned cuBLAS calls through a reference GEMM, and the mask/softmax kernel
// phases for every thread of every row, with the barriers in between, chunk
// by chunk as cuda_attention.cc runs them; then against the CPU backend over
// mask x softmax x v x GQA x dtype x layout, fully masked rows included, as
// one chunk and in chunks of every kind. Runs without a GPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cuda/attention_chunks.h"
#include "core/backends/cuda/gemm_plan.h"
#include "core/backends/cuda/kernel_common.h"
#include "core/backends/cuda/rotate_kernel_body.h"
#include "core/backends/cuda/softmax_kernel_body.h"
#include "tests/cuda/backend_cases.h"
#include "tests/cuda/grid_emulation.h"
#include "tests/cuda/reference_gemm.h"

namespace rope {
namespace {

using kernels::MaskSoftmaxParams;
using test::AttentionCase;
using test::AttentionData;

template <typename Tag, bool kInterleaved>
void RunCopy(const kernels::RotatedCopyParams& p, int block_dim, int64_t max_blocks) {
  const int64_t blocks = kernels::BlocksFor(kernels::RotatedCopyItems(p), block_dim, max_blocks);
  test::RunGridOnHost(blocks, block_dim, [&p](int64_t b, int t, int bd, int64_t gd) {
    kernels::RotatedCopyKernelBody<Tag, kInterleaved>(p, b, t, bd, gd);
  });
}

void RotatedCopyOnHost(DType dtype, Layout layout, const kernels::RotatedCopyParams& p) {
  constexpr int kBlock = 64;
  constexpr int64_t kMaxBlocks = 5;  // small, so the grid-stride loop runs
  const bool inter = layout == Layout::kInterleaved;
  switch (dtype) {
    case DType::kFloat32:
      return inter ? RunCopy<math::F32, true>(p, kBlock, kMaxBlocks)
                   : RunCopy<math::F32, false>(p, kBlock, kMaxBlocks);
    case DType::kFloat16:
      return inter ? RunCopy<math::F16, true>(p, kBlock, kMaxBlocks)
                   : RunCopy<math::F16, false>(p, kBlock, kMaxBlocks);
    case DType::kBFloat16:
      return inter ? RunCopy<math::BF16, true>(p, kBlock, kMaxBlocks)
                   : RunCopy<math::BF16, false>(p, kBlock, kMaxBlocks);
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return;  // not an input type
  }
}

// The softmax kernel as the GPU runs it, one block per row (grid-stride
// over rows from row_begin), each phase for every thread before the next
// barrier.
void MaskSoftmaxOnHost(const MaskSoftmaxParams& p, int64_t max_blocks) {
  const int block_dim = kernels::MaskSoftmaxBlockDim(p.k_seq);
  const int64_t rows = kernels::MaskSoftmaxRows(p);
  const int64_t row_end = kernels::MaskSoftmaxRowEnd(p);
  const int64_t grid = kernels::BlocksFor(rows, 1, max_blocks);
  std::vector<float> partial(block_dim);
  for (int64_t block = 0; block < grid; ++block) {
    for (int64_t row = p.row_begin + block; row < row_end; row += grid) {
      for (int t = 0; t < block_dim; ++t) partial[t] = kernels::MaskMaxPhase(p, row, t, block_dim);
      for (int stride = block_dim / 2; stride > 0; stride /= 2) {
        for (int t = 0; t < block_dim; ++t) kernels::TreeMaxStep(partial.data(), t, stride);
      }
      if (!kernels::NeedsProbabilities(p)) continue;
      const float row_max = partial[0];
      for (int t = 0; t < block_dim; ++t) {
        partial[t] = kernels::ExpSumPhase(p, row, t, block_dim, row_max);
      }
      for (int stride = block_dim / 2; stride > 0; stride /= 2) {
        for (int t = 0; t < block_dim; ++t) kernels::TreeSumStep(partial.data(), t, stride);
      }
      const float row_sum = partial[0];
      for (int t = 0; t < block_dim; ++t) kernels::NormalizePhase(p, row, t, block_dim, row_sum);
    }
  }
}

// The whole CUDA attention path with host stand-ins for the device, in the
// chunks planned for `chunk_work`.
void AttentionOnHost(const RopeTable& table, const AttentionArgs& a, double chunk_work) {
  const int64_t q_elems = a.batch * a.q_seq * a.q_heads * a.head_dim;
  const int64_t k_elems = a.batch * a.k_seq * a.k_heads * a.head_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> qf(q_elems, nan), kf(k_elems, nan), vf, probs;

  kernels::RotatedCopyParams copy;
  copy.head_dim = static_cast<int>(a.head_dim);
  copy.rotary_dim = static_cast<int>(a.rotary_dim);
  copy.rotary_offset = static_cast<int>(a.rotary_offset);
  copy.table = table.rows();
  copy.in = a.q;
  copy.out = qf.data();
  copy.tokens = a.batch * a.q_seq;
  copy.heads = static_cast<int>(a.q_heads);
  copy.positions = a.q_positions;
  RotatedCopyOnHost(a.dtype, a.layout, copy);
  copy.in = a.k;
  copy.out = kf.data();
  copy.tokens = a.batch * a.k_seq;
  copy.heads = static_cast<int>(a.k_heads);
  copy.positions = a.k_positions;
  RotatedCopyOnHost(a.dtype, a.layout, copy);
  if (a.v != nullptr) {
    vf.assign(a.batch * a.k_seq * a.k_heads * a.v_dim, nan);
    copy.in = a.v;
    copy.out = vf.data();
    copy.head_dim = static_cast<int>(a.v_dim);
    copy.rotary_dim = 0;
    copy.rotary_offset = 0;
    RotatedCopyOnHost(a.dtype, a.layout, copy);
  }

  kernels::AttentionDims dims;
  dims.batch = a.batch;
  dims.q_seq = a.q_seq;
  dims.k_seq = a.k_seq;
  dims.q_heads = a.q_heads;
  dims.k_heads = a.k_heads;
  dims.head_dim = a.head_dim;
  dims.v_dim = a.v_dim;
  MaskSoftmaxParams m;
  m.scores = a.scores;
  m.batch = a.batch;
  m.heads = a.q_heads;
  m.q_seq = a.q_seq;
  m.k_seq = a.k_seq;
  m.q_positions = a.q_positions;
  m.k_positions = a.k_positions;
  m.causal = a.causal;
  m.softmax = a.softmax;
  if (a.v != nullptr && !a.softmax) {
    probs.assign(a.batch * a.q_heads * a.q_seq * a.k_seq, nan);
    m.probs = probs.data();
  }
  const float* p = m.probs != nullptr ? m.probs : a.scores;
  for (const kernels::AttentionBlock& chunk : kernels::PlanAttentionChunks(dims, chunk_work)) {
    for (const kernels::StridedGemm& g : kernels::PlanScoreGemms(dims, a.scale, chunk)) {
      test::RunGemmOnHost(g, kf.data(), qf.data(), a.scores);
    }
    m.row_begin = kernels::BlockRowBegin(dims, chunk);
    m.row_end = kernels::BlockRowEnd(dims, chunk);
    MaskSoftmaxOnHost(m, /*max_blocks=*/7);
    if (a.v != nullptr) {
      for (const kernels::StridedGemm& g : kernels::PlanOutputGemms(dims, chunk)) {
        test::RunGemmOnHost(g, vf.data(), p, a.output);
      }
    }
  }
}

// The work budget of a chunk, as a multiple of one part of a case's work.
enum class ChunkSize {
  kWholeCall,
  kBatchElement,
  kHead,
  kTwoHeads,
  kFourHeads,
  kRow,
  kThreeRows,
};

double ChunkWork(const AttentionCase& c, ChunkSize size) {
  kernels::AttentionDims d;
  d.head_dim = c.head_dim;
  d.v_dim = c.v_dim;
  const double row = static_cast<double>(c.k_seq) * kernels::WorkPerScore(d);
  const double head = static_cast<double>(c.q_seq) * row;
  switch (size) {
    case ChunkSize::kWholeCall:
      return 1e30;
    case ChunkSize::kBatchElement:
      return static_cast<double>(c.q_heads) * head;
    case ChunkSize::kHead:
      return head;
    case ChunkSize::kTwoHeads:
      return 2 * head;
    case ChunkSize::kFourHeads:
      return 4 * head;
    case ChunkSize::kRow:
      return row;
    case ChunkSize::kThreeRows:
      return 3 * row;
  }
  return 0;
}

const char* ChunkSizeName(ChunkSize size) {
  switch (size) {
    case ChunkSize::kWholeCall:
      return "WholeCall";
    case ChunkSize::kBatchElement:
      return "BatchElement";
    case ChunkSize::kHead:
      return "Head";
    case ChunkSize::kTwoHeads:
      return "TwoHeads";
    case ChunkSize::kFourHeads:
      return "FourHeads";
    case ChunkSize::kRow:
      return "Row";
    case ChunkSize::kThreeRows:
      return "ThreeRows";
  }
  return "?";
}

class AttentionBodyTest
    : public ::testing::TestWithParam<std::tuple<AttentionCase, ChunkSize>> {};

TEST_P(AttentionBodyTest, MatchesCpuBackend) {
  const AttentionCase& c = std::get<0>(GetParam());
  const std::shared_ptr<const RopeTable> table =
      test::PlainTable(c.rotary_dim, test::kAttentionGridMaxLen);
  AttentionData want = test::MakeAttentionData(c, 11);
  ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
  AttentionData got = test::MakeAttentionData(c, 11);
  AttentionOnHost(*table, got.Args(c), ChunkWork(c, std::get<1>(GetParam())));
  // Float32 sums in another order: a few 1e-7 relative on O(1) values.
  EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << "scores";
  EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << "output";
}

INSTANTIATE_TEST_SUITE_P(
    Grid, AttentionBodyTest,
    ::testing::Combine(::testing::ValuesIn(test::AttentionGrid()),
                       ::testing::Values(ChunkSize::kWholeCall, ChunkSize::kBatchElement,
                                         ChunkSize::kHead, ChunkSize::kTwoHeads,
                                         ChunkSize::kFourHeads, ChunkSize::kRow,
                                         ChunkSize::kThreeRows)),
    [](const ::testing::TestParamInfo<std::tuple<AttentionCase, ChunkSize>>& info) {
      return std::get<0>(info.param).Name() + "_" + ChunkSizeName(std::get<1>(info.param));
    });

// A row whose every key is after the query: scores all -inf, probabilities
// and output all zero, never NaN.
TEST(MaskSoftmaxBodyTest, FullyMaskedRowIsAllZeroProbabilities) {
  std::vector<float> scores = {1.0f, 2.0f, 3.0f, 4.0f, 0.5f, 0.25f, 0.125f, 1.0f};
  MaskSoftmaxParams p;
  p.scores = scores.data();
  p.batch = 1;
  p.heads = 1;
  p.q_seq = 2;  // query positions 3 and 4
  p.k_seq = 4;  // key positions 4..7
  p.q_positions.start_pos = 3;
  p.q_positions.seq = 2;
  p.k_positions.start_pos = 4;
  p.k_positions.seq = 4;
  p.causal = true;
  p.softmax = true;
  MaskSoftmaxOnHost(p, 1);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(scores[j], 0.0f) << j;
  EXPECT_FLOAT_EQ(scores[4], 1.0f);  // only key 4 is visible to query 4
  for (int j = 5; j < 8; ++j) EXPECT_EQ(scores[j], 0.0f) << j;
}

TEST(MaskSoftmaxBodyTest, BlockDimIsAPowerOfTwoBetween32And256) {
  EXPECT_EQ(kernels::MaskSoftmaxBlockDim(1), 32);
  EXPECT_EQ(kernels::MaskSoftmaxBlockDim(33), 64);
  EXPECT_EQ(kernels::MaskSoftmaxBlockDim(200), 256);
  EXPECT_EQ(kernels::MaskSoftmaxBlockDim(1 << 20), 256);
}

// Both ways of batching the GEMMs appear in the grid above; check the
// choice itself on shapes that force each.
TEST(GemmPlanTest, BatchesOverKvHeadsOrOverTheBatchWhicheverIsFewerCalls) {
  kernels::AttentionDims d;
  d.batch = 1;
  d.q_seq = 4;
  d.k_seq = 4;
  d.q_heads = 32;
  d.k_heads = 8;
  d.head_dim = 128;
  d.v_dim = 128;
  std::vector<kernels::StridedGemm> plan = kernels::PlanScoreGemms(d, 1.0f);
  ASSERT_EQ(plan.size(), 4u);  // one call per (b, r), each over the 8 kv heads
  EXPECT_EQ(plan[0].batch, 8);
  EXPECT_EQ(plan[0].stride_a, 128);  // the next kv head, read in place
  d.batch = 64;
  plan = kernels::PlanOutputGemms(d);
  ASSERT_EQ(plan.size(), 32u);  // one call per query head, over the batch
  EXPECT_EQ(plan[0].batch, 64);
}

}  // namespace
}  // namespace rope
