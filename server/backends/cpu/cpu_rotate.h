// Rotation on the CPU: the RotateArgs contract of backend.h, run over a
// thread pool with one chunk of tokens per task.
#ifndef ROPE_BACKENDS_CPU_CPU_ROTATE_H_
#define ROPE_BACKENDS_CPU_CPU_ROTATE_H_

#include "common/thread_pool.h"
#include "server/engine/backend.h"

namespace rope {

// Rotates args.q (and args.k) in place. Arguments are already validated.
void CpuRotate(const RopeTable& table, const RotateArgs& args, ThreadPool* pool);

// Rotates `heads` consecutive head vectors of one token, each of head_dim
// values, of storage type `dtype`, by the table rows given. Exposed for the
// attention path, which rotates copies of q and k.
void CpuRotateToken(DType dtype, Layout layout, void* x, int64_t heads, int64_t head_dim,
                    int rotary_dim, const float* cos_row, const float* sin_row, float sign);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_ROTATE_H_
