#include "core/backends/cpu/cpu_backend.h"

#include <cblas.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "core/backends/cpu/cpu_attention.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "core/backends/cpu/cpu_rotate.h"
#include "core/backends/cpu/cpu_simd.h"
#include "core/backends/cpu/cpu_tiled_attention.h"

namespace rope {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, const cpu::CpuKernels* kernels) : kernels_(*kernels), pool_(threads) {
    // Parallelism comes from our pool (one sgemm per task); OpenBLAS's own
    // threads would oversubscribe the cores.
    openblas_set_num_threads(1);
  }

  // Small calls run on the calling thread (ThreadPool::ParallelFor runs one
  // chunk inline), larger ones also on the pool, whose caller takes part.
  bool CallsNeverWait() const override { return true; }

  BackendInfo info() const override {
    BackendInfo info;
    info.name = "cpu";
    info.device = absl::StrCat("cpu (", std::thread::hardware_concurrency(),
                               " hardware threads, ", pool_.threads(), " in use, SIMD ",
                               kernels_.name, ", OpenBLAS ",
                               openblas_get_corename(), ")");
    info.threads = pool_.threads();
    info.cpu_simd = kernels_.name;
    return info;
  }

  // Host memory only: a backend without device_memory() is never handed
  // device views (Engine::DeviceMemoryFor refuses them).
  absl::Status Rotate(const RopeTable& table, const RotateArgs& args) override {
    CpuRotate(kernels_, table, args, &pool_);
    return absl::OkStatus();
  }

  absl::Status AttentionScores(const RopeTable& table, const AttentionArgs& args) override {
    if (args.legacy) return CpuAttentionScores(kernels_, table, args, &pool_);
    return CpuTiledAttention(kernels_, table, args, &pool_);
  }

  void ParallelRows(int64_t rows, const std::function<void(int64_t, int64_t)>& fill) override {
    pool_.ParallelFor(rows, 1024, fill);
  }

 private:
  const cpu::CpuKernels& kernels_;
  // ParallelFor is thread-safe; mutable so that info() can stay const.
  mutable ThreadPool pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(const CpuBackendOptions& options) {
  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  if (threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu threads is ", threads, ": must be at most 1024"));
  }
  absl::StatusOr<const cpu::CpuKernels*> kernels =
      SelectCpuKernels(options.simd, options.simd_origin);
  if (!kernels.ok()) return kernels.status();
  return std::unique_ptr<Backend>(new CpuBackend(threads, *kernels));
}

absl::StatusOr<std::unique_ptr<Backend>> NewCpuBackend(int threads) {
  CpuBackendOptions options;
  options.threads = threads;
  options.simd = CpuSimdFromEnvironment();
  options.simd_origin = kCpuSimdEnv;
  return NewCpuBackend(options);
}

}  // namespace rope
