// WorkerContext: what one call needs on the device, reused across calls:
// two staging slots (each a pinned host buffer, a device buffer, a stream
// and an event), a cuBLAS handle on the compute stream (slot 0's), events
// that mark the compute stream's progress, and device workspaces.
// ContextPool hands contexts to calls, one call each.
//
// Staged copies: host data moves through the pinned slots in chunks,
// alternating slots, so that the host-side memcpy of one chunk overlaps the
// DMA of the previous one, and uploads on one slot's stream overlap
// downloads on the other's.
#ifndef ROPE_BACKENDS_CUDA_WORKER_CONTEXT_H_
#define ROPE_BACKENDS_CUDA_WORKER_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cuda/cublas_api.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/device_memory.h"

namespace rope {

class WorkerContext {
 public:
  static constexpr int kSlots = 2;
  // Events that mark the compute stream's progress (see MarkProgress).
  static constexpr int kProgressMarks = 2;

  // Asked before each staging chunk of a copy: a non-OK status stops the
  // copy, which returns it (copies already enqueued still run; the lease's
  // Quiesce waits for them).
  using StopCheck = absl::FunctionRef<absl::Status()>;

  // A host range waiting to receive bytes of a slot's pinned buffer once
  // the slot's event completes.
  struct CopyOut {
    void* host = nullptr;
    int64_t slot_offset = 0;
    int64_t bytes = 0;
  };

  struct Slot {
    PinnedBuffer host;
    DeviceBuffer device;
    CudaStream stream;
    CudaEvent done;          // recorded after the slot's last enqueued copy
    bool in_flight = false;  // `done` has been recorded since the last wait
    std::vector<CopyOut> copy_out;
  };

  // Creates streams, events, the cuBLAS handle and the staging buffers on
  // the calling thread's current device.
  static absl::StatusOr<std::unique_ptr<WorkerContext>> Create(const CudaBackendOptions& options,
                                                               const CublasApi& cublas);
  ~WorkerContext();
  WorkerContext(const WorkerContext&) = delete;
  WorkerContext& operator=(const WorkerContext&) = delete;

  Slot& slot(int i) { return slots_[i]; }
  cudaStream_t compute_stream() const { return slots_[0].stream.get(); }
  cublasHandle_t cublas() const { return cublas_; }
  const CublasApi& cublas_api() const { return *cublas_api_; }
  int64_t staging_bytes() const { return staging_bytes_; }

  // Ensures both slots hold at least `bytes` (pinned and device). On failure
  // a slot keeps a pinned buffer at least as large as before (see
  // PinnedBuffer::Reserve); its device buffer may be empty.
  absl::Status ReserveSlots(int64_t bytes);
  // Ensures both slots' pinned buffers hold at least `bytes`.
  absl::Status ReservePinnedSlots(int64_t bytes);

  // Waits for slot i's last copy and delivers its pending CopyOuts.
  absl::Status Reuse(int i);

  // Copies `bytes` from host `src` to device `dst` through the slots (whose
  // pinned buffers it first ensures hold a staging chunk); on return the
  // copies are enqueued and the compute stream waits for all of them. `dst`
  // must be usable by every slot's stream (see SlotsWaitForCompute).
  absl::Status UploadStaged(const void* src, void* dst, int64_t bytes, StopCheck stop);
  absl::Status UploadStaged(const void* src, void* dst, int64_t bytes) {
    return UploadStaged(src, dst, bytes, NeverStop);
  }

  // Copies `bytes` from device `src` to host `dst` through the slots (whose
  // pinned buffers it first ensures hold a staging chunk), after everything
  // enqueued on the compute stream so far; on return `dst` holds the data
  // (on a stop, only some of it).
  absl::Status DownloadStaged(const void* src, void* dst, int64_t bytes, StopCheck stop);
  absl::Status DownloadStaged(const void* src, void* dst, int64_t bytes) {
    return DownloadStaged(src, dst, bytes, NeverStop);
  }

  // Progress of the compute stream: MarkProgress(i) records mark i after
  // everything enqueued on it so far; WaitForProgress(i) blocks until that
  // work is done (at once if mark i was never recorded).
  absl::Status MarkProgress(int i);
  absl::Status WaitForProgress(int i);

  // Makes the compute stream wait for everything enqueued on the other
  // slot's stream, or the other way round.
  absl::Status ComputeWaitsForSlots();
  absl::Status SlotsWaitForCompute();

  // Waits for every stream and drops undelivered CopyOuts (the call that
  // asked for them has failed). Then frees workspaces over the keep limit
  // and shrinks staging slots that a large call grew back to the staging
  // size. Returns the first error of the wait: the device could not finish
  // work already enqueued, which only a sticky error (the device context
  // is lost for the process's life) causes.
  absl::Status Quiesce();

  // Device workspaces of the attention path (grown on demand); the tiled
  // path's results and per-head values (sinks, ALiBi slopes) too.
  DeviceBuffer q_in, k_in, v_in, qf, kf, vf, scores, probs, output, positions;
  DeviceBuffer lse, top_k_indices, top_k_probs, key_mass, score_rows, head_values;
  PinnedBuffer positions_host, head_values_host;
  // The call's table block pointers (UploadTableRows): cos's, then sin's.
  DeviceBuffer table_rows;
  PinnedBuffer table_rows_host;

 private:
  WorkerContext(const CudaBackendOptions& options, const CublasApi& cublas);

  static absl::Status NeverStop() { return absl::OkStatus(); }

  // Every device buffer of the context: the workspaces and the slots'.
  std::vector<DeviceBuffer*> DeviceBuffers();

  Slot slots_[kSlots];
  CudaEvent compute_done_;
  CudaEvent progress_[kProgressMarks];
  const CublasApi* const cublas_api_;
  cublasHandle_t cublas_ = nullptr;
  const int64_t staging_bytes_;
  const int64_t keep_workspace_bytes_;
};

// Hands out worker contexts, creating up to `options.contexts` lazily;
// Acquire blocks while all are in use. Thread-safe.
//
// A context whose Quiesce fails (the device could not finish its queued
// work: a sticky error such as an illegal address, which leaves the
// process's CUDA context unusable for good) is never handed out again, and
// the pool is then faulted: fault() says why, and Acquire refuses at once.
class ContextPool {
 public:
  ContextPool(int device, const CudaBackendOptions& options, const CublasApi& cublas)
      : device_(device), options_(options), cublas_(cublas) {}
  ContextPool(const ContextPool&) = delete;
  ContextPool& operator=(const ContextPool&) = delete;

  // Returns its context to the pool (quiesced) when destroyed.
  class Lease {
   public:
    Lease(ContextPool* pool, std::unique_ptr<WorkerContext> context)
        : pool_(pool), context_(std::move(context)) {}
    Lease(Lease&&) = default;
    ~Lease();
    WorkerContext* operator->() const { return context_.get(); }
    WorkerContext& operator*() const { return *context_; }

   private:
    ContextPool* pool_;
    std::unique_ptr<WorkerContext> context_;
  };

  // Sets the calling thread's current device, clears the thread's last CUDA
  // error (left by whatever ran on it before), and leases a context.
  // UNAVAILABLE, naming the first fault, once the pool is faulted.
  absl::StatusOr<Lease> Acquire();

  // OK, or the error that broke a context (the first one).
  absl::Status fault() const;

 private:
  void Return(std::unique_ptr<WorkerContext> context, const absl::Status& quiesced);
  absl::Status Unusable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  const CudaBackendOptions options_;
  const CublasApi& cublas_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<WorkerContext>> idle_ ABSL_GUARDED_BY(mu_);
  int created_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
  // Contexts that failed to quiesce: kept until the pool is destroyed
  // rather than torn down on a call's thread by more calls into a device
  // context that is already lost.
  std::vector<std::unique_ptr<WorkerContext>> broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_WORKER_CONTEXT_H_
