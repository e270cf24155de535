#include "core/backends/cuda/gemm_plan.h"

namespace rope {
namespace kernels {
namespace {

// Two ways to batch a block's (batch, query head) products with one stride
// each:
//   by kv head: one call per (b, r) over the block's kv heads kv, query head
//               kv * group + r (nb * group calls of nh / group products);
//               only when the block holds whole groups of query heads;
//   by batch:   one call per query head h over the block's batch elements
//               (nh calls of nb products).
// Fewer, larger calls are better; both read k/v in place. For the whole call
// this is: by kv head when batch * group <= q_heads.
bool BatchOverKvHeads(const AttentionDims& d, const AttentionBlock& block) {
  const int64_t group = d.q_heads / d.k_heads;
  const int64_t nb = block.b1 - block.b0, nh = block.h1 - block.h0;
  const bool whole_groups = block.h0 % group == 0 && block.h1 % group == 0;
  return whole_groups && nb * group <= nh;
}

}  // namespace

AttentionBlock WholeCall(const AttentionDims& d) {
  AttentionBlock block;
  block.b1 = d.batch;
  block.h1 = d.q_heads;
  block.i1 = d.q_seq;
  return block;
}

bool BlockRowsAreContiguous(const AttentionDims& d, const AttentionBlock& block) {
  const bool all_rows = block.i0 == 0 && block.i1 == d.q_seq;
  const bool all_heads = block.h0 == 0 && block.h1 == d.q_heads;
  const int64_t nb = block.b1 - block.b0, nh = block.h1 - block.h0;
  return (all_heads && all_rows) || (nb == 1 && all_rows) || (nb == 1 && nh == 1);
}

int64_t BlockRowBegin(const AttentionDims& d, const AttentionBlock& block) {
  return (block.b0 * d.q_heads + block.h0) * d.q_seq + block.i0;
}

int64_t BlockRowEnd(const AttentionDims& d, const AttentionBlock& block) {
  return ((block.b1 - 1) * d.q_heads + (block.h1 - 1)) * d.q_seq + block.i1;
}

std::vector<StridedGemm> PlanScoreGemms(const AttentionDims& d, float scale,
                                        const AttentionBlock& block) {
  const int64_t group = d.q_heads / d.k_heads;
  const int64_t q_tok = d.q_heads * d.head_dim;  // elements per query token
  const int64_t k_tok = d.k_heads * d.head_dim;
  const int64_t tile = d.q_seq * d.k_seq;  // one head's scores
  StridedGemm g;
  g.op_a = GemmOp::kT;
  g.op_b = GemmOp::kN;
  g.m = static_cast<int>(d.k_seq);
  g.n = static_cast<int>(block.i1 - block.i0);
  g.k = static_cast<int>(d.head_dim);
  g.alpha = scale;
  g.lda = static_cast<int>(k_tok);
  g.ldb = static_cast<int>(q_tok);
  g.ldc = static_cast<int>(d.k_seq);
  // Query row i0 of token-major q, and of a head's [q_seq, k_seq] scores.
  const int64_t q_row = block.i0 * q_tok, s_row = block.i0 * d.k_seq;
  std::vector<StridedGemm> plan;
  if (BatchOverKvHeads(d, block)) {
    const int64_t kv0 = block.h0 / group;
    g.stride_a = d.head_dim;
    g.stride_b = group * d.head_dim;
    g.stride_c = group * tile;
    g.batch = static_cast<int>((block.h1 - block.h0) / group);
    for (int64_t b = block.b0; b < block.b1; ++b) {
      for (int64_t r = 0; r < group; ++r) {
        const int64_t h = kv0 * group + r;
        g.a_offset = b * d.k_seq * k_tok + kv0 * d.head_dim;
        g.b_offset = b * d.q_seq * q_tok + q_row + h * d.head_dim;
        g.c_offset = (b * d.q_heads + h) * tile + s_row;
        plan.push_back(g);
      }
    }
  } else {
    g.stride_a = d.k_seq * k_tok;
    g.stride_b = d.q_seq * q_tok;
    g.stride_c = d.q_heads * tile;
    g.batch = static_cast<int>(block.b1 - block.b0);
    for (int64_t h = block.h0; h < block.h1; ++h) {
      g.a_offset = block.b0 * d.k_seq * k_tok + (h / group) * d.head_dim;
      g.b_offset = block.b0 * d.q_seq * q_tok + q_row + h * d.head_dim;
      g.c_offset = (block.b0 * d.q_heads + h) * tile + s_row;
      plan.push_back(g);
    }
  }
  return plan;
}

std::vector<StridedGemm> PlanOutputGemms(const AttentionDims& d, const AttentionBlock& block) {
  const int64_t group = d.q_heads / d.k_heads;
  const int64_t v_tok = d.k_heads * d.v_dim;
  const int64_t o_tok = d.q_heads * d.v_dim;
  const int64_t tile = d.q_seq * d.k_seq;
  StridedGemm g;
  g.op_a = GemmOp::kN;
  g.op_b = GemmOp::kN;
  g.m = static_cast<int>(d.v_dim);
  g.n = static_cast<int>(block.i1 - block.i0);
  g.k = static_cast<int>(d.k_seq);
  g.lda = static_cast<int>(v_tok);
  g.ldb = static_cast<int>(d.k_seq);
  g.ldc = static_cast<int>(o_tok);
  // Query row i0 of a head's probabilities, and of token-major output.
  const int64_t p_row = block.i0 * d.k_seq, o_row = block.i0 * o_tok;
  std::vector<StridedGemm> plan;
  if (BatchOverKvHeads(d, block)) {
    const int64_t kv0 = block.h0 / group;
    g.stride_a = d.v_dim;
    g.stride_b = group * tile;
    g.stride_c = group * d.v_dim;
    g.batch = static_cast<int>((block.h1 - block.h0) / group);
    for (int64_t b = block.b0; b < block.b1; ++b) {
      for (int64_t r = 0; r < group; ++r) {
        const int64_t h = kv0 * group + r;
        g.a_offset = b * d.k_seq * v_tok + kv0 * d.v_dim;
        g.b_offset = (b * d.q_heads + h) * tile + p_row;
        g.c_offset = b * d.q_seq * o_tok + o_row + h * d.v_dim;
        plan.push_back(g);
      }
    }
  } else {
    g.stride_a = d.k_seq * v_tok;
    g.stride_b = d.q_heads * tile;
    g.stride_c = d.q_seq * o_tok;
    g.batch = static_cast<int>(block.b1 - block.b0);
    for (int64_t h = block.h0; h < block.h1; ++h) {
      g.a_offset = block.b0 * d.k_seq * v_tok + (h / group) * d.v_dim;
      g.b_offset = (block.b0 * d.q_heads + h) * tile + p_row;
      g.c_offset = block.b0 * d.q_seq * o_tok + o_row + h * d.v_dim;
      plan.push_back(g);
    }
  }
  return plan;
}

}  // namespace kernels
}  // namespace rope
