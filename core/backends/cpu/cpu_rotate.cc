#include "core/backends/cpu/cpu_rotate.h"

namespace rope {
namespace {

// Tokens per task: small enough to balance, large enough (at decode shapes
// with a few heads) that task overhead stays invisible.
constexpr int64_t kMinTokensPerTask = 8;

}  // namespace

void CpuRotate(const cpu::CpuKernels& kernels, const RopeTable& table, const RotateArgs& args,
               ThreadPool* pool) {
  cpu::RotateParams p;
  p.dtype = args.dtype;
  p.interleaved = args.layout == Layout::kInterleaved;
  p.inverse = args.inverse;
  p.q = args.q;
  p.q_heads = args.q_heads;
  p.k = args.k;
  p.k_heads = args.k_heads;
  p.head_dim = args.head_dim;
  p.rotary_dim = args.rotary_dim;
  p.rotary_offset = args.rotary_offset;
  p.seq = args.seq;
  p.table = table.rows();
  p.positions = args.positions;
  p.output_dtype = args.output_dtype;
  p.q_out = static_cast<uint8_t*>(args.q_out);
  p.k_out = static_cast<uint8_t*>(args.k_out);
  p.q_scale = args.q_scale;
  p.k_scale = args.k_scale;
  pool->ParallelFor(args.batch * args.seq, kMinTokensPerTask,
                    [&](int64_t begin, int64_t end) { kernels.rotate(p, begin, end); });
}

}  // namespace rope
