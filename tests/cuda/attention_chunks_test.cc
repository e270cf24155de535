// The chunks an AttentionScores call is split into on the GPU, so that it
// can stop between them (attention_chunks.h): they partition the scores rows
// in order, each within the budget (or one query row), not too many, and a
// call within the budget is the whole call, planned as without chunks.
// (attention_body_test.cc runs chunked calls against the CPU backend.)
#include "core/backends/cuda/attention_chunks.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cuda/gemm_plan.h"

namespace rope {
namespace {

using kernels::AttentionBlock;
using kernels::AttentionDims;

AttentionDims Dims(int64_t batch, int64_t q_seq, int64_t k_seq, int64_t q_heads, int64_t k_heads,
                   int64_t head_dim, int64_t v_dim) {
  AttentionDims d;
  d.batch = batch;
  d.q_seq = q_seq;
  d.k_seq = k_seq;
  d.q_heads = q_heads;
  d.k_heads = k_heads;
  d.head_dim = head_dim;
  d.v_dim = v_dim;
  return d;
}

std::string Describe(const AttentionDims& d, double budget) {
  return "batch " + std::to_string(d.batch) + " q_seq " + std::to_string(d.q_seq) + " k_seq " +
         std::to_string(d.k_seq) + " heads " + std::to_string(d.q_heads) + "/" +
         std::to_string(d.k_heads) + " budget " + std::to_string(budget);
}

// Every property the backend relies on, for one call and budget.
void ExpectGoodChunks(const AttentionDims& d, double budget) {
  SCOPED_TRACE(Describe(d, budget));
  const std::vector<AttentionBlock> chunks = kernels::PlanAttentionChunks(d, budget);
  ASSERT_FALSE(chunks.empty());
  const double total = kernels::BlockWork(d, kernels::WholeCall(d));
  const double row = static_cast<double>(d.k_seq) * kernels::WorkPerScore(d);
  int64_t next_row = 0;
  for (const AttentionBlock& c : chunks) {
    ASSERT_TRUE(0 <= c.b0 && c.b0 < c.b1 && c.b1 <= d.batch);
    ASSERT_TRUE(0 <= c.h0 && c.h0 < c.h1 && c.h1 <= d.q_heads);
    ASSERT_TRUE(0 <= c.i0 && c.i0 < c.i1 && c.i1 <= d.q_seq);
    ASSERT_TRUE(kernels::BlockRowsAreContiguous(d, c));
    // In order, no gap, no overlap.
    EXPECT_EQ(kernels::BlockRowBegin(d, c), next_row);
    next_row = kernels::BlockRowEnd(d, c);
    // The rows counted from the block agree with the range.
    EXPECT_EQ(next_row - kernels::BlockRowBegin(d, c),
              (c.b1 - c.b0) * (c.h1 - c.h0) * (c.i1 - c.i0));
    const double work = kernels::BlockWork(d, c);
    EXPECT_TRUE(work <= budget || (c.i1 - c.i0 == 1 && work == row)) << "chunk work " << work;
  }
  EXPECT_EQ(next_row, d.batch * d.q_heads * d.q_seq);
  EXPECT_LE(static_cast<double>(chunks.size()), 5 * total / budget + 1);
}

TEST(AttentionChunksTest, ACallWithinTheBudgetIsOneChunkPlannedAsTheWholeCall) {
  const AttentionDims d = Dims(2, 128, 256, 32, 8, 128, 128);
  const double total = kernels::BlockWork(d, kernels::WholeCall(d));
  for (double budget : {total, 2 * total, 1e30}) {
    const std::vector<AttentionBlock> chunks = kernels::PlanAttentionChunks(d, budget);
    ASSERT_EQ(chunks.size(), 1u);
    const AttentionBlock& c = chunks[0];
    EXPECT_EQ(c.b0, 0);
    EXPECT_EQ(c.b1, 2);
    EXPECT_EQ(c.h0, 0);
    EXPECT_EQ(c.h1, 32);
    EXPECT_EQ(c.i0, 0);
    EXPECT_EQ(c.i1, 128);
  }
  // The whole call's plan: one call per (b, r) over the 8 kv heads.
  const std::vector<kernels::StridedGemm> plan =
      kernels::PlanScoreGemms(d, 1.0f, kernels::WholeCall(d));
  ASSERT_EQ(plan.size(), 8u);
  EXPECT_EQ(plan[0].batch, 8);
  EXPECT_EQ(plan[0].n, 128);
}

TEST(AttentionChunksTest, WorkCountsBothGemmsAndTheSoftmaxPerScore) {
  const AttentionDims d = Dims(2, 3, 5, 4, 2, 64, 32);
  EXPECT_EQ(kernels::WorkPerScore(d), 2 * (64 + 32) + kernels::kMaskSoftmaxWork);
  EXPECT_EQ(kernels::BlockWork(d, kernels::WholeCall(d)), 2 * 3 * 5 * 4 * kernels::WorkPerScore(d));
}

TEST(AttentionChunksTest, ChunksPartitionTheRowsWithinTheBudget) {
  const AttentionDims shapes[] = {
      Dims(1, 7, 7, 4, 4, 16, 0),        Dims(3, 3, 5, 2, 2, 8, 6),
      Dims(2, 1, 9, 4, 2, 16, 6),        Dims(1, 4, 40, 6, 3, 12, 0),
      Dims(4, 100, 300, 32, 8, 128, 128), Dims(1, 2048, 2048, 8, 1, 128, 0),
      Dims(5, 17, 33, 12, 4, 64, 64),
  };
  for (const AttentionDims& d : shapes) {
    const double row = static_cast<double>(d.k_seq) * kernels::WorkPerScore(d);
    const double total = kernels::BlockWork(d, kernels::WholeCall(d));
    // From below one row to the whole call, through every level.
    for (double budget = row / 3; budget < 2 * total; budget *= 1.7) ExpectGoodChunks(d, budget);
  }
}

TEST(AttentionChunksTest, LevelsSplitBatchThenHeadsThenRows) {
  const AttentionDims d = Dims(3, 10, 10, 8, 2, 16, 0);  // groups of 4 heads
  const double head = 10 * 10 * kernels::WorkPerScore(d);

  std::vector<AttentionBlock> chunks = kernels::PlanAttentionChunks(d, 2 * 8 * head);
  ASSERT_EQ(chunks.size(), 2u);  // batch elements {0, 1} and {2}
  EXPECT_EQ(chunks[0].b1, 2);
  EXPECT_EQ(chunks[1].b0, 2);
  EXPECT_EQ(chunks[1].h1 - chunks[1].h0, 8);

  // 6 heads fit: rounded down to one group of 4, so the GEMMs batch over kv
  // heads (4 calls of 1 product, one per head of the group) ...
  chunks = kernels::PlanAttentionChunks(d, 6 * head);
  ASSERT_EQ(chunks.size(), 6u);  // 3 batch elements x 2 groups
  EXPECT_EQ(chunks[1].b0, 0);
  EXPECT_EQ(chunks[1].h0, 4);
  EXPECT_EQ(chunks[1].h1, 8);
  EXPECT_EQ(kernels::PlanScoreGemms(d, 1.0f, chunks[1]).size(), 4u);

  // ... 3 heads fit: not a whole group, one call per head over the batch.
  chunks = kernels::PlanAttentionChunks(d, 3 * head);
  ASSERT_EQ(chunks.size(), 9u);  // heads [0, 3), [3, 6), [6, 8) per batch element
  EXPECT_EQ(chunks[1].h0, 3);
  EXPECT_EQ(chunks[1].h1, 6);
  const std::vector<kernels::StridedGemm> plan = kernels::PlanScoreGemms(d, 1.0f, chunks[1]);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].batch, 1);

  // Less than a head: rows of one head; a chunk of rows 4..7 of head 1.
  chunks = kernels::PlanAttentionChunks(d, 0.5 * head);
  ASSERT_EQ(chunks.size(), 3u * 8 * 2);
  const AttentionBlock& c = chunks[3];
  EXPECT_EQ(c.h0, 1);
  EXPECT_EQ(c.i0, 5);
  EXPECT_EQ(c.i1, 10);
  const std::vector<kernels::StridedGemm> rows = kernels::PlanScoreGemms(d, 1.0f, c);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].n, 5);
  EXPECT_EQ(rows[0].c_offset, (0 * 8 + 1) * 100 + 5 * 10);  // head 1's tile, row 5
  EXPECT_EQ(rows[0].b_offset, 5 * 8 * 16 + 1 * 16);          // query token 5, head 1
}

TEST(AttentionChunksTest, ARowLargerThanTheBudgetIsItsOwnChunk) {
  const AttentionDims d = Dims(1, 3, 1000, 2, 1, 64, 64);
  const std::vector<AttentionBlock> chunks = kernels::PlanAttentionChunks(d, 1.0);
  ASSERT_EQ(chunks.size(), 6u);
  for (const AttentionBlock& c : chunks) EXPECT_EQ(c.i1 - c.i0, 1);
}

}  // namespace
}  // namespace rope
