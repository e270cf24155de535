// How the CUDA backend splits one AttentionScores call into chunks, so that
// it can check the call's Interrupt between them (see cuda_attention.cc).
//
// A chunk is a block of the scores tensor (gemm_plan.h) whose rows are
// contiguous, so that one set of GEMM calls and one mask/softmax launch do
// it. The chunks partition the call's rows in order, and each is the
// coarsest of these that fits the work budget:
//   a range of batch elements (all heads),
//   a range of query heads of one batch element (whole groups of heads
//     that share a kv head where the range spans a group, so that their
//     GEMMs still batch over kv heads),
//   a range of query rows of one head (down to one row).
// A call within the budget is one chunk: the whole call, planned exactly as
// without chunking. Otherwise each chunk's work is at most the budget, or
// one query row's work when a row alone exceeds it, and there are at most
// 5 * work / budget + 1 chunks.
//
// Work is an estimate in float32 operations: per score element, the two
// GEMMs' multiply-adds (2 * (head_dim + v_dim)) plus kMaskSoftmaxWork for
// writing the score and the mask/softmax kernel's passes over it.
//
// Framework-free; tested on the host.
#ifndef ROPE_BACKENDS_CUDA_ATTENTION_CHUNKS_H_
#define ROPE_BACKENDS_CUDA_ATTENTION_CHUNKS_H_

#include <vector>

#include "core/backends/cuda/gemm_plan.h"

namespace rope {
namespace kernels {

// ~16 bytes of memory traffic per score element at ~8 operations per byte
// of a GPU's float32 rate to its memory bandwidth.
constexpr double kMaskSoftmaxWork = 128;

// Estimated work of one score element, and of a block.
double WorkPerScore(const AttentionDims& d);
double BlockWork(const AttentionDims& d, const AttentionBlock& block);

// The chunks of a call for a budget of `chunk_work` (> 0) per chunk.
std::vector<AttentionBlock> PlanAttentionChunks(const AttentionDims& d, double chunk_work);

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_ATTENTION_CHUNKS_H_
