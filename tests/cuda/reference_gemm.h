// A plain host implementation of one planned strided-batched GEMM, with
// cublasSgemmStridedBatched's column-major semantics, so that the attention
// GEMM plans can be checked without a GPU.
#ifndef ROPE_TESTS_CUDA_REFERENCE_GEMM_H_
#define ROPE_TESTS_CUDA_REFERENCE_GEMM_H_

#include "core/backends/cuda/gemm_plan.h"

namespace rope {
namespace test {

// C_i = alpha op(A_i) op(B_i) (+ beta C_i; C is not read when beta == 0),
// accumulating in double.
inline void RunGemmOnHost(const kernels::StridedGemm& g, const float* a, const float* b, float* c) {
  for (int i = 0; i < g.batch; ++i) {
    const float* ai = a + g.a_offset + i * g.stride_a;
    const float* bi = b + g.b_offset + i * g.stride_b;
    float* ci = c + g.c_offset + i * g.stride_c;
    for (int col = 0; col < g.n; ++col) {
      for (int row = 0; row < g.m; ++row) {
        double acc = 0;
        for (int kk = 0; kk < g.k; ++kk) {
          const float av = g.op_a == kernels::GemmOp::kN
                               ? ai[row + static_cast<int64_t>(kk) * g.lda]
                               : ai[kk + static_cast<int64_t>(row) * g.lda];
          const float bv = g.op_b == kernels::GemmOp::kN
                               ? bi[kk + static_cast<int64_t>(col) * g.ldb]
                               : bi[col + static_cast<int64_t>(kk) * g.ldb];
          acc += static_cast<double>(av) * bv;
        }
        float& out = ci[row + static_cast<int64_t>(col) * g.ldc];
        out = static_cast<float>(g.alpha * acc + (g.beta != 0.0f ? g.beta * out : 0.0));
      }
    }
  }
}

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_REFERENCE_GEMM_H_
