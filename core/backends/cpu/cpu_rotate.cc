#include "core/backends/cpu/cpu_rotate.h"

#include <cstring>

#include "core/engine/dtype.h"

namespace rope {
namespace {

// Tokens per task: small enough to balance, large enough (at decode shapes
// with a few heads) that task overhead stays invisible.
constexpr int64_t kMinTokensPerTask = 8;

// Copies tokens [begin, end) of `source` (tokens of `token_bytes`) to `x`.
void CopyTokens(const void* source, void* x, int64_t token_bytes, int64_t begin, int64_t end) {
  std::memcpy(static_cast<char*>(x) + begin * token_bytes,
              static_cast<const char*>(source) + begin * token_bytes,
              static_cast<size_t>((end - begin) * token_bytes));
}

}  // namespace

void CpuRotate(const cpu::CpuKernels& kernels, const RopeTable& table, const RotateArgs& args,
               ThreadPool* pool) {
  const TableRows rows = table.rows();
  const int64_t element = static_cast<int64_t>(DTypeSize(args.dtype));
  const int64_t q_token = args.q_heads * args.head_dim * element;
  const int64_t k_token = args.k_heads * args.head_dim * element;
  pool->ParallelFor(args.batch * args.seq, kMinTokensPerTask, [&](int64_t begin, int64_t end) {
    // Out of place: each task copies its own tokens first, while they are
    // about to be in cache anyway. (A float8 output reads the sources where
    // they are and writes only q_out / k_out.)
    if (!IsFloat8(args.output_dtype)) {
      if (args.q_source != nullptr) CopyTokens(args.q_source, args.q, q_token, begin, end);
      if (args.k != nullptr && args.k_source != nullptr) {
        CopyTokens(args.k_source, args.k, k_token, begin, end);
      }
    }
    kernels.rotate(args, rows, begin, end);
  });
}

}  // namespace rope
