// Backend: where the arithmetic runs (CPU threads, or a CUDA device).
//
// A backend receives fully validated, resolved arguments: shapes agree, byte
// sizes match, every position is in [0, table.max_len()), and every tensor
// is in host memory or, for a backend with device memory, on its device
// (backend_args.h). It must not be handed anything else; the Engine
// guarantees this. Implementations are
// thread-safe: the service calls them from many threads at once.
#ifndef ROPE_ENGINE_BACKEND_H_
#define ROPE_ENGINE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/engine/backend_args.h"
#include "core/engine/device_memory.h"
#include "core/engine/dtype.h"
#include "core/engine/interrupt.h"
#include "core/engine/keyed_lru_cache.h"
#include "core/engine/rope_math.h"
#include "core/engine/rope_table.h"

namespace rope {

struct BackendInfo {
  std::string name;    // "cpu" or "cuda"
  std::string device;  // e.g. "x86_64, 2 threads" or "NVIDIA H200 (sm_90)"
  int threads = 1;
  // CPU backend only (empty elsewhere): the SIMD path its kernels run, e.g.
  // "avx2" (core/backends/cpu/cpu_simd.h lists them).
  std::string cpu_simd;
  // Device backends only (0 / absent on the CPU): the device's memory as
  // last sampled (used counts every process on it; sampled at start-up and
  // by calls, at most every 100 ms), and the device-resident table cache.
  int64_t device_memory_total_bytes = 0;
  int64_t device_memory_used_bytes = 0;
  std::optional<TableCacheStats> device_table_cache;
  // Empty while the backend works. Otherwise why it can no longer serve any
  // call, for the rest of the process's life (a sticky CUDA error: the
  // device context is lost); calls then fail with UNAVAILABLE, and the
  // process should drain and exit so that it is restarted (server/main.cc).
  std::string fault;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendInfo info() const = 0;

  // Returns OK after rotating in place; on error q/k contents are unspecified.
  virtual absl::Status Rotate(const RopeTable& table, const RotateArgs& args) = 0;

  // Fills args.scores (and args.output when args.v is set).
  virtual absl::Status AttentionScores(const RopeTable& table, const AttentionArgs& args) = 0;

  // True when a call only computes on the calling thread and the backend's
  // own pool: it never waits for a device, a free context or another call,
  // so the service may run a small call on a gRPC I/O thread
  // (ServiceOptions::inline_rotate_max_bytes). The CPU backend's answer.
  virtual bool CallsNeverWait() const { return false; }

  // The backend's device memory (device_memory.h), or null when it has
  // none (the default; the CPU backend): then it is never handed a device
  // view (the engine refuses them, Engine::DeviceMemoryFor).
  virtual DeviceMemory* device_memory() { return nullptr; }

  // Runs fill(begin, end) over [0, rows) on the backend's threads; used to
  // build tables in parallel. The default runs it on the calling thread.
  virtual void ParallelRows(int64_t rows, const std::function<void(int64_t, int64_t)>& fill) {
    fill(0, rows);
  }
};

}  // namespace rope

#endif  // ROPE_ENGINE_BACKEND_H_
