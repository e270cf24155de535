// Backend: where the arithmetic runs (CPU threads, or a CUDA device).
//
// A backend receives fully validated, resolved arguments: shapes agree, byte
// sizes match, every position is in [0, table.max_len()). It must not be
// handed anything else; the Engine guarantees this. Implementations are
// thread-safe: the service calls them from many threads at once.
#ifndef ROPE_ENGINE_BACKEND_H_
#define ROPE_ENGINE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/attention_math.h"
#include "core/engine/dtype.h"
#include "core/engine/interrupt.h"
#include "core/engine/keyed_lru_cache.h"
#include "core/engine/rope_math.h"
#include "core/engine/rope_table.h"

namespace rope {

// Rotate q (and k when non-null) in place. q is [batch, seq, q_heads, head_dim]
// and k is [batch, seq, k_heads, head_dim], both of `dtype`, contiguous.
struct RotateArgs {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kInterleaved;
  bool inverse = false;
  int64_t batch = 0, seq = 0, head_dim = 0, rotary_dim = 0;
  void* q = nullptr;
  int64_t q_heads = 0;
  void* k = nullptr;  // optional
  int64_t k_heads = 0;
  math::PositionSpec positions;
  // q and k are device memory of this backend (CUDA shared memory opened by
  // OpenCudaIpcMemory), not host memory: rotated there, no copies. Only a
  // backend that opened them is ever handed such arguments.
  bool on_device = false;
};

// Device memory of another process, opened from a CUDA IPC handle
// (Backend::OpenCudaIpcMemory), mapped while this object lives; the
// destructor closes the mapping. data() is a device pointer: the host must
// not dereference it.
class DeviceMemoryLease {
 public:
  virtual ~DeviceMemoryLease() = default;
  virtual void* data() const = 0;
  // Bytes of the allocation the handle names (>= the bytes asked for).
  virtual uint64_t allocation_bytes() const = 0;
  virtual int device() const = 0;
};

// Attention of rotated q against rotated k. Query head h reads key/value
// head h / (q_heads / k_heads). The logits of query i and key j are
//   s = scale * (q . k), then softcap * tanh(s / softcap) when softcap > 0,
//   then - alibi_slopes[h] * |q_pos(i) - k_pos(j)| when alibi_slopes is set,
//   -inf where `mask` hides the key (attention_math.h);
// the probabilities are P = exp(s) / (sum over visible keys of exp(s) +
// exp(sinks[h]) when sinks is set), and LSE is the natural log of that
// denominator (-inf for a row that sees no key and has no sink).
//
// What is computed is what has a non-null pointer:
//   scores      [batch, q_heads, q_seq, k_seq]: P with `softmax`, else the logits
//   output      [batch, q_seq, q_heads, v_dim]: P v (needs v)
//   lse         [batch, q_heads, q_seq]
//   top_k_*     [batch, q_heads, q_seq, top_k]: the top_k visible keys by P,
//               ties to the smaller index; index -1 and P 0 past the keys a
//               row sees
//   key_mass    [batch, q_heads, k_seq]: the sum over queries of P
//   score_rows  [batch, q_heads, score_rows_count, k_seq]: rows
//               score_rows_start.. of what `scores` would hold
//
// Fully masked rows: logits all -inf; probabilities all 0 and output 0 (no
// NaN), as FlashAttention does.
//
// `legacy` marks a call with only today's fields (scores, output, causal):
// a backend computes it exactly as before these results existed (full score
// rows, bit for bit the replies clients have); any other call goes through
// the tiled pass that never holds a q_seq x k_seq buffer unless scores (or
// score_rows) are asked.
struct AttentionArgs {
  DType dtype = DType::kFloat32;  // of q, k and v
  Layout layout = Layout::kInterleaved;
  int64_t batch = 0, q_seq = 0, k_seq = 0, q_heads = 0, k_heads = 0;
  int64_t head_dim = 0, rotary_dim = 0, v_dim = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;  // optional
  math::PositionSpec q_positions;
  math::PositionSpec k_positions;
  bool causal = false;  // mirrors mask.causal
  bool softmax = false;
  float scale = 1.0f;
  math::AttentionMask mask;
  float softcap = 0.0f;                  // 0: none
  const float* sinks = nullptr;          // [q_heads] or null
  const float* alibi_slopes = nullptr;   // [q_heads] or null
  bool legacy = true;
  float* scores = nullptr;  // [batch, q_heads, q_seq, k_seq]
  float* output = nullptr;  // [batch, q_seq, q_heads, v_dim]
  float* lse = nullptr;     // [batch, q_heads, q_seq]
  int32_t* top_k_indices = nullptr;  // [batch, q_heads, q_seq, top_k]
  float* top_k_probs = nullptr;      // [batch, q_heads, q_seq, top_k]
  int64_t top_k = 0;
  float* key_mass = nullptr;  // [batch, q_heads, k_seq]
  float* score_rows = nullptr;  // [batch, q_heads, score_rows_count, k_seq]
  int64_t score_rows_start = 0, score_rows_count = 0;
  // q, k, v, scores and output are all device memory of this backend (CUDA
  // shared memory opened by OpenCudaIpcMemory): read and written there.
  bool on_device = false;
  // Polled between pieces of work when set; a backend that sees a non-OK
  // Check() may stop and return that status (outputs then unspecified).
  const Interrupt* interrupt = nullptr;
};

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

  // Opens the device allocation that a client process exported with
  // cudaIpcGetMemHandle (`handle`: the cudaIpcMemHandle_t's bytes) on CUDA
  // device `device`, and checks that it has at least `byte_size` bytes.
  // INVALID_ARGUMENT naming cuda_ipc_handle / cuda_device / byte_size when
  // the handle cannot be opened, the device is not this backend's or the
  // allocation is smaller; FAILED_PRECONDITION from a backend without
  // device memory (the default).
  virtual absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenCudaIpcMemory(
      std::string_view handle, int device, uint64_t byte_size);

  // Copies `bytes` between two places in device memory that this backend
  // opened (OpenCudaIpcMemory); returns after the copy. The default:
  // FAILED_PRECONDITION.
  virtual absl::Status CopyOnDevice(void* destination, const void* source, uint64_t bytes);

  // Runs fill(begin, end) over [0, rows) on the backend's threads; used to
  // build tables in parallel. The default runs it on the calling thread.
  virtual void ParallelRows(int64_t rows, const std::function<void(int64_t, int64_t)>& fill) {
    fill(0, rows);
  }
};

}  // namespace rope

#endif  // ROPE_ENGINE_BACKEND_H_
