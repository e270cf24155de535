// The cuBLAS calls of the attention path, planned as plain data so that the
// host tests can run each plan through a reference GEMM and check the
// pointers, leading dimensions and strides without a GPU.
//
// Every call is a column-major strided-batched GEMM
//   C_i = alpha * op(A_i) op(B_i) + beta * C_i,  X_i = X + x_offset + i * stride_x,
// the convention of cublasSgemmStridedBatched. Row-major tensors are read as
// their column-major transposes. GQA is a stride choice: query head h reads
// key/value head h / (q_heads / k_heads) in place; nothing is copied.
#ifndef ROPE_BACKENDS_CUDA_GEMM_PLAN_H_
#define ROPE_BACKENDS_CUDA_GEMM_PLAN_H_

#include <cstdint>
#include <vector>

namespace rope {
namespace kernels {

enum class GemmOp : int { kN = 0, kT = 1 };

struct StridedGemm {
  GemmOp op_a = GemmOp::kN, op_b = GemmOp::kN;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;  // in elements
  int lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 0;
};

// Shapes of one attention call (all float32 workspaces on the device):
//   q [batch, q_seq, q_heads, head_dim], k [batch, k_seq, k_heads, head_dim],
//   v [batch, k_seq, k_heads, v_dim], scores and probabilities
//   [batch, q_heads, q_seq, k_seq], output [batch, q_seq, q_heads, v_dim].
struct AttentionDims {
  int64_t batch = 0, q_seq = 0, k_seq = 0, q_heads = 0, k_heads = 0;
  int64_t head_dim = 0, v_dim = 0;
};

// A box of the scores tensor: batch elements [b0, b1), query heads [h0, h1),
// query rows [i0, i1), every key. A call's work is planned per block (see
// attention_chunks.h); the whole call is one block.
struct AttentionBlock {
  int64_t b0 = 0, b1 = 0, h0 = 0, h1 = 0, i0 = 0, i1 = 0;
};

AttentionBlock WholeCall(const AttentionDims& d);

// Whether the block's scores rows (b, h, i), numbered (b * q_heads + h) *
// q_seq + i, are one contiguous range: several batch elements with every
// head and row, or one batch element with every row of some heads, or some
// rows of one head. Then they are [BlockRowBegin, BlockRowEnd).
bool BlockRowsAreContiguous(const AttentionDims& d, const AttentionBlock& block);
int64_t BlockRowBegin(const AttentionDims& d, const AttentionBlock& block);
int64_t BlockRowEnd(const AttentionDims& d, const AttentionBlock& block);

// scores[b, h] = scale * q[b, :, h, :] . k[b, :, h / group, :]^T, computed as
// scores^T = k q^T: A = k (op T), B = q (op N), C = scores. Only the block's
// part of scores is written.
std::vector<StridedGemm> PlanScoreGemms(const AttentionDims& d, float scale,
                                        const AttentionBlock& block);
inline std::vector<StridedGemm> PlanScoreGemms(const AttentionDims& d, float scale) {
  return PlanScoreGemms(d, scale, WholeCall(d));
}

// output[b, :, h, :] = probs[b, h] . v[b, :, h / group, :], computed as
// output^T = v^T probs^T: A = v (op N), B = probs (op N), C = output. Reads
// only the block's probabilities and writes only its part of output.
std::vector<StridedGemm> PlanOutputGemms(const AttentionDims& d, const AttentionBlock& block);
inline std::vector<StridedGemm> PlanOutputGemms(const AttentionDims& d) {
  return PlanOutputGemms(d, WholeCall(d));
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_GEMM_PLAN_H_
