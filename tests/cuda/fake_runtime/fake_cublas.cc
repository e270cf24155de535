// The fake libcublas.so.13: the cuBLAS entry points the CUDA backend
// resolves (core/backends/cuda/cublas_api.h), over the fake runtime. A
// GEMM is a host-emulated kernel on the handle's stream (it runs when the
// stream is waited for), checks that its operands are live device memory,
// and computes cublasSgemmStridedBatched's column-major product in double.
// Written from cuBLAS's documented semantics, not from the backend's plans.
// Faults: RopeFakeCudaFailCall("cublasCreate_v2", n, CUBLAS_STATUS_...),
// and "kernel" for a GEMM's execution (fake_cuda_control.h).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tests/cuda/fake_runtime/fake_cuda_control.h"

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

// The injected status for this call of `function`, or EXECUTION_FAILED in
// a poisoned context.
cublasStatus_t EnterCublas(const char* function) {
  const int injected = RopeFakeCudaEnter(function);
  if (injected != 0) return static_cast<cublasStatus_t>(injected);
  if (RopeFakeCudaStickyError() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

struct Gemm {
  cublasOperation_t op_a, op_b;
  int m, n, k;
  float alpha, beta;
  const float* a;
  int lda;
  long long stride_a;
  const float* b;
  int ldb;
  long long stride_b;
  float* c;
  int ldc;
  long long stride_c;
  int batch;
};

// Bytes from `p` to one past the last element an operand of `rows` x
// `cols` (as stored: column-major with leading dimension `ld`) touches over
// the batch.
int64_t Extent(int rows, int cols, int ld, long long stride, int batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  const int64_t last =
      static_cast<int64_t>(batch - 1) * stride + static_cast<int64_t>(cols - 1) * ld + (rows - 1);
  return (last + 1) * static_cast<int64_t>(sizeof(float));
}

void RunGemm(void* data, int execute) {
  const Gemm* g = static_cast<const Gemm*>(data);
  if (execute != 0) {
    // op(A) is m x k: stored m x k (N) or k x m (T); op(B) is k x n.
    const bool a_n = g->op_a == CUBLAS_OP_N, b_n = g->op_b == CUBLAS_OP_N;
    const bool ok =
        RopeFakeCudaCheckAccess(
            g->a, Extent(a_n ? g->m : g->k, a_n ? g->k : g->m, g->lda, g->stride_a, g->batch)) &&
        RopeFakeCudaCheckAccess(
            g->b, Extent(b_n ? g->k : g->n, b_n ? g->n : g->k, g->ldb, g->stride_b, g->batch)) &&
        RopeFakeCudaCheckAccess(g->c, Extent(g->m, g->n, g->ldc, g->stride_c, g->batch));
    for (int i = 0; ok && i < g->batch; ++i) {
      const float* a = g->a + i * g->stride_a;
      const float* b = g->b + i * g->stride_b;
      float* c = g->c + i * g->stride_c;
      for (int col = 0; col < g->n; ++col) {
        for (int row = 0; row < g->m; ++row) {
          double sum = 0;
          for (int l = 0; l < g->k; ++l) {
            const float av = a_n ? a[row + static_cast<int64_t>(l) * g->lda]
                                 : a[l + static_cast<int64_t>(row) * g->lda];
            const float bv = b_n ? b[l + static_cast<int64_t>(col) * g->ldb]
                                 : b[col + static_cast<int64_t>(l) * g->ldb];
            sum += static_cast<double>(av) * bv;
          }
          float& out = c[row + static_cast<int64_t>(col) * g->ldc];
          // beta == 0: C is not read (it may hold anything, NaN included).
          out = static_cast<float>(g->alpha * sum + (g->beta != 0.0f ? g->beta * out : 0.0));
        }
      }
    }
  }
  delete g;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (const cublasStatus_t s = EnterCublas("cublasCreate_v2"); s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  const cublasStatus_t s = EnterCublas("cublasDestroy_v2");
  delete reinterpret_cast<Handle*>(handle);  // a poisoned context still lets go of it
  return s;
}

__attribute__((visibility("default"))) cublasStatus_t cublasSetStream_v2(cublasHandle_t handle,
                                                                         cudaStream_t stream) {
  if (const cublasStatus_t s = EnterCublas("cublasSetStream_v2"); s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  reinterpret_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasSetMathMode(cublasHandle_t handle,
                                                                        cublasMath_t mode) {
  if (const cublasStatus_t s = EnterCublas("cublasSetMathMode"); s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  reinterpret_cast<Handle*>(handle)->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

__attribute__((visibility("default"))) cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
    long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
    int batchCount) {
  if (const cublasStatus_t s = EnterCublas("cublasSgemmStridedBatched");
      s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || transa == CUBLAS_OP_C || transb == CUBLAS_OP_C) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // alpha and beta are host pointers (the default pointer mode): read now.
  auto* gemm = new Gemm{transa,  transb, m,   n,       k, *alpha, *beta,   A,         lda,
                        strideA, B,      ldb, strideB, C, ldc,    strideC, batchCount};
  if (RopeFakeCudaLaunchKernel(reinterpret_cast<Handle*>(handle)->stream, &RunGemm, gemm) !=
      cudaSuccess) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
