#include "core/backends/cuda/attention_chunks.h"

#include <algorithm>
#include <cmath>

namespace rope {
namespace kernels {
namespace {

// How many units of `unit_work` fit the budget: at least 1, at most `limit`.
int64_t UnitsPerChunk(double chunk_work, double unit_work, int64_t limit) {
  const double units = std::floor(chunk_work / unit_work);
  if (units >= static_cast<double>(limit)) return limit;
  return std::max<int64_t>(1, static_cast<int64_t>(units));
}

}  // namespace

double WorkPerScore(const AttentionDims& d) {
  return 2.0 * static_cast<double>(d.head_dim + d.v_dim) + kMaskSoftmaxWork;
}

double BlockWork(const AttentionDims& d, const AttentionBlock& block) {
  return static_cast<double>(block.b1 - block.b0) * static_cast<double>(block.h1 - block.h0) *
         static_cast<double>(block.i1 - block.i0) * static_cast<double>(d.k_seq) * WorkPerScore(d);
}

std::vector<AttentionBlock> PlanAttentionChunks(const AttentionDims& d, double chunk_work) {
  const AttentionBlock whole = WholeCall(d);
  if (BlockWork(d, whole) <= chunk_work) return {whole};
  const double row_work = static_cast<double>(d.k_seq) * WorkPerScore(d);
  const double head_work = static_cast<double>(d.q_seq) * row_work;
  const double batch_work = static_cast<double>(d.q_heads) * head_work;
  std::vector<AttentionBlock> chunks;
  AttentionBlock c = whole;
  if (batch_work <= chunk_work) {
    const int64_t per = UnitsPerChunk(chunk_work, batch_work, d.batch);
    for (c.b0 = 0; c.b0 < d.batch; c.b0 += per) {
      c.b1 = std::min(c.b0 + per, d.batch);
      chunks.push_back(c);
    }
    return chunks;
  }
  for (c.b0 = 0; c.b0 < d.batch; ++c.b0) {
    c.b1 = c.b0 + 1;
    if (head_work <= chunk_work) {
      int64_t per = UnitsPerChunk(chunk_work, head_work, d.q_heads);
      const int64_t group = d.q_heads / d.k_heads;
      if (per >= group) per -= per % group;  // whole groups: GEMMs batch over kv heads
      for (c.h0 = 0; c.h0 < d.q_heads; c.h0 += per) {
        c.h1 = std::min(c.h0 + per, d.q_heads);
        chunks.push_back(c);
      }
      continue;
    }
    const int64_t per = UnitsPerChunk(chunk_work, row_work, d.q_seq);
    for (c.h0 = 0; c.h0 < d.q_heads; ++c.h0) {
      c.h1 = c.h0 + 1;
      for (c.i0 = 0; c.i0 < d.q_seq; c.i0 += per) {
        c.i1 = std::min(c.i0 + per, d.q_seq);
        chunks.push_back(c);
      }
    }
  }
  return chunks;
}

}  // namespace kernels
}  // namespace rope
