// Rotation on the CPU: the RotateArgs contract of backend.h, run by the SIMD
// kernels of one path (cpu_kernels.h) over a thread pool, one chunk of tokens
// per task.
#ifndef ROPE_BACKENDS_CPU_CPU_ROTATE_H_
#define ROPE_BACKENDS_CPU_CPU_ROTATE_H_

#include "common/thread_pool.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "core/engine/backend.h"

namespace rope {

// Rotates args.q (and args.k) in place, after copying args.q_source
// (args.k_source) into them when set. Arguments are already validated, and
// in host memory.
void CpuRotate(const cpu::CpuKernels& kernels, const RopeTable& table, const RotateArgs& args,
               ThreadPool* pool);

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_ROTATE_H_
