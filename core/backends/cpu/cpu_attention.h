// Attention scores on the CPU. Keys are rotated once into float32 panels,
// one per key head. The work is cut into blocks of (query heads sharing a key
// head) x (query tokens); each block rotates its query rows and runs one
// OpenBLAS sgemm over only the keys its last row can see (causally masked
// key blocks are never multiplied; GQA heads share the key panel through the
// GEMM's rows, without copies of k), then masks / softmaxes each row in cache
// and writes it once; an optional P.V sgemm per head follows.
#ifndef ROPE_BACKENDS_CPU_CPU_ATTENTION_H_
#define ROPE_BACKENDS_CPU_CPU_ATTENTION_H_

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "core/engine/backend.h"

namespace rope {

// Fills args.scores (and args.output). Arguments are already validated.
// RESOURCE_EXHAUSTED when a float32 workspace cannot be allocated;
// CANCELLED / DEADLINE_EXCEEDED from args.interrupt.
absl::Status CpuAttentionScores(const cpu::CpuKernels& kernels, const RopeTable& table,
                                const AttentionArgs& args, ThreadPool* pool);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_ATTENTION_H_
