// Attention scores on the CPU: rotate float32 copies of q and k, one sgemm
// (OpenBLAS) per (batch, query head) reading the shared key head in place
// through its leading dimension (GQA without copies), then scale, causal mask
// and softmax per row, and an optional P.V sgemm.
#ifndef ROPE_BACKENDS_CPU_CPU_ATTENTION_H_
#define ROPE_BACKENDS_CPU_CPU_ATTENTION_H_

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "server/engine/backend.h"

namespace rope {

// Fills args.scores (and args.output). Arguments are already validated.
absl::Status CpuAttentionScores(const RopeTable& table, const AttentionArgs& args,
                                ThreadPool* pool);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_ATTENTION_H_
