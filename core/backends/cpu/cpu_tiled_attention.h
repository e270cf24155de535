// Attention on the CPU without a q_seq x k_seq buffer: the tiled pass with
// an online softmax (FlashAttention-2's), for every call that is not legacy
// (backend.h, AttentionArgs::legacy).
//
// The work is cut into tiles: the query heads that share a key/value head
// times a block of query tokens (the rows of one OpenBLAS sgemm) against a
// block of keys. A tile of keys that the mask hides from every query of the
// block is never touched; one that it hides from some is masked per pair.
// Each task rotates its query rows once and each key tile as it reaches it
// (the rotation costs 1/(2 x rows) of the tile's products), so no rotated
// copy of k exists beyond one tile per thread.
//
//   pass 1 (query tiles): running maximum, sum and P v per row; OUTPUT and
//     LSE. Threads over (batch, key/value head, query heads, query tile),
//     and over key ranges too (merged as merge_state does) when those are
//     fewer than the threads (decode).
//   pass 2 (query tiles): SCORES, SCORE_ROWS and TOP_K, the probabilities
//     as exp(logit - LSE); TOP_K keeps its heap in the output row itself.
//   pass 3 (key tiles): KEY_MASS, each key's probabilities summed over the
//     query tiles in order (deterministic, no atomics).
// Passes 2 and 3 need the final LSE: pass 1 runs first whenever they need
// probabilities, into a [batch, q_heads, q_seq] buffer when LSE itself was
// not asked for.
//
// Memory beyond the inputs and the requested results: per thread, about
// rows x (head_dim + v_dim + 2 x keys_per_tile) + keys_per_tile x (head_dim
// + v_dim) floats (under 1 MiB for head_dim 128), plus that LSE buffer and
// the split states of pass 1 (at most 16 MiB).
#ifndef ROPE_BACKENDS_CPU_CPU_TILED_ATTENTION_H_
#define ROPE_BACKENDS_CPU_CPU_TILED_ATTENTION_H_

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "core/engine/backend.h"

namespace rope {

// Fills the results of `args` that have a pointer. Arguments are validated.
// RESOURCE_EXHAUSTED when a workspace cannot be allocated; CANCELLED /
// DEADLINE_EXCEEDED from args.interrupt (results then unspecified).
absl::Status CpuTiledAttention(const cpu::CpuKernels& kernels, const RopeTable& table,
                               const AttentionArgs& args, ThreadPool* pool);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_TILED_ATTENTION_H_
