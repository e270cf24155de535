#include "server/backends/cuda/gemm_plan.h"

namespace rope {
namespace kernels {
namespace {

// Two ways to batch the (batch, query head) products with one stride each:
//   by kv head: one call per (b, r) over the k_heads heads h = kv * group + r
//               (batch * group calls of k_heads products);
//   by batch:   one call per query head h over the batch (q_heads calls).
// Fewer, larger calls are better; both read k/v in place.
bool BatchOverKvHeads(const AttentionDims& d) {
  const int64_t group = d.q_heads / d.k_heads;
  return d.batch * group <= d.q_heads;
}

}  // namespace

std::vector<StridedGemm> PlanScoreGemms(const AttentionDims& d, float scale) {
  const int64_t group = d.q_heads / d.k_heads;
  const int64_t q_tok = d.q_heads * d.head_dim;  // elements per query token
  const int64_t k_tok = d.k_heads * d.head_dim;
  const int64_t tile = d.q_seq * d.k_seq;  // one head's scores
  StridedGemm g;
  g.op_a = GemmOp::kT;
  g.op_b = GemmOp::kN;
  g.m = static_cast<int>(d.k_seq);
  g.n = static_cast<int>(d.q_seq);
  g.k = static_cast<int>(d.head_dim);
  g.alpha = scale;
  g.lda = static_cast<int>(k_tok);
  g.ldb = static_cast<int>(q_tok);
  g.ldc = static_cast<int>(d.k_seq);
  std::vector<StridedGemm> plan;
  if (BatchOverKvHeads(d)) {
    g.stride_a = d.head_dim;
    g.stride_b = group * d.head_dim;
    g.stride_c = group * tile;
    g.batch = static_cast<int>(d.k_heads);
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t r = 0; r < group; ++r) {
        g.a_offset = b * d.k_seq * k_tok;
        g.b_offset = b * d.q_seq * q_tok + r * d.head_dim;
        g.c_offset = (b * d.q_heads + r) * tile;
        plan.push_back(g);
      }
    }
  } else {
    g.stride_a = d.k_seq * k_tok;
    g.stride_b = d.q_seq * q_tok;
    g.stride_c = d.q_heads * tile;
    g.batch = static_cast<int>(d.batch);
    for (int64_t h = 0; h < d.q_heads; ++h) {
      g.a_offset = (h / group) * d.head_dim;
      g.b_offset = h * d.head_dim;
      g.c_offset = h * tile;
      plan.push_back(g);
    }
  }
  return plan;
}

std::vector<StridedGemm> PlanOutputGemms(const AttentionDims& d) {
  const int64_t group = d.q_heads / d.k_heads;
  const int64_t v_tok = d.k_heads * d.v_dim;
  const int64_t o_tok = d.q_heads * d.v_dim;
  const int64_t tile = d.q_seq * d.k_seq;
  StridedGemm g;
  g.op_a = GemmOp::kN;
  g.op_b = GemmOp::kN;
  g.m = static_cast<int>(d.v_dim);
  g.n = static_cast<int>(d.q_seq);
  g.k = static_cast<int>(d.k_seq);
  g.lda = static_cast<int>(v_tok);
  g.ldb = static_cast<int>(d.k_seq);
  g.ldc = static_cast<int>(o_tok);
  std::vector<StridedGemm> plan;
  if (BatchOverKvHeads(d)) {
    g.stride_a = d.v_dim;
    g.stride_b = group * tile;
    g.stride_c = group * d.v_dim;
    g.batch = static_cast<int>(d.k_heads);
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t r = 0; r < group; ++r) {
        g.a_offset = b * d.k_seq * v_tok;
        g.b_offset = (b * d.q_heads + r) * tile;
        g.c_offset = b * d.q_seq * o_tok + r * d.v_dim;
        plan.push_back(g);
      }
    }
  } else {
    g.stride_a = d.k_seq * v_tok;
    g.stride_b = d.q_heads * tile;
    g.stride_c = d.q_seq * o_tok;
    g.batch = static_cast<int>(d.batch);
    for (int64_t h = 0; h < d.q_heads; ++h) {
      g.a_offset = (h / group) * d.v_dim;
      g.b_offset = h * tile;
      g.c_offset = h * d.v_dim;
      plan.push_back(g);
    }
  }
  return plan;
}

}  // namespace kernels
}  // namespace rope
