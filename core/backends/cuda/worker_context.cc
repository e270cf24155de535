#include "core/backends/cuda/worker_context.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace rope {

WorkerContext::WorkerContext(const CudaBackendOptions& options, const CublasApi& cublas)
    : cublas_api_(&cublas),
      staging_bytes_(options.staging_bytes),
      keep_workspace_bytes_(options.keep_workspace_bytes) {}

WorkerContext::~WorkerContext() {
  (void)Quiesce();
  if (cublas_ != nullptr) (void)cublas_api_->destroy(cublas_);
  // Their frees are ordered on this context's streams: before those go.
  for (DeviceBuffer* buffer : DeviceBuffers()) buffer->Release();
}

std::vector<DeviceBuffer*> WorkerContext::DeviceBuffers() {
  std::vector<DeviceBuffer*> buffers = {&q_in,          &k_in,        &v_in,     &qf,
                                        &kf,            &vf,          &scores,   &probs,
                                        &output,        &positions,   &table_rows, &lse,
                                        &top_k_indices, &top_k_probs, &key_mass, &score_rows,
                                        &head_values};
  for (Slot& slot : slots_) buffers.push_back(&slot.device);
  return buffers;
}

absl::StatusOr<std::unique_ptr<WorkerContext>> WorkerContext::Create(
    const CudaBackendOptions& options, const CublasApi& cublas) {
  std::unique_ptr<WorkerContext> context(new WorkerContext(options, cublas));
  for (Slot& slot : context->slots_) {
    ROPE_RETURN_IF_ERROR(slot.stream.Create());
    ROPE_RETURN_IF_ERROR(slot.done.Create());
  }
  ROPE_RETURN_IF_ERROR(context->compute_done_.Create());
  for (CudaEvent& mark : context->progress_) ROPE_RETURN_IF_ERROR(mark.Create());
  ROPE_RETURN_IF_ERROR(context->ReserveSlots(options.staging_bytes));
  ROPE_CUBLAS_RETURN_IF_ERROR(cublas.create(&context->cublas_), "creating a cuBLAS handle");
  ROPE_CUBLAS_RETURN_IF_ERROR(cublas.set_stream(context->cublas_, context->compute_stream()),
                              "binding the cuBLAS handle to its stream");
  // Plain float32 GEMMs (no TF32): the scores must agree with the CPU
  // backend to float32 rounding.
  ROPE_CUBLAS_RETURN_IF_ERROR(cublas.set_math_mode(context->cublas_, CUBLAS_PEDANTIC_MATH),
                              "setting cuBLAS math mode");
  return context;
}

absl::Status WorkerContext::ReserveSlots(int64_t bytes) {
  for (Slot& slot : slots_) {
    if (slot.host.capacity() >= bytes && slot.device.capacity() >= bytes) continue;
    ROPE_RETURN_IF_ERROR(Reuse(static_cast<int>(&slot - slots_)));  // nothing may still use them
    ROPE_RETURN_IF_ERROR(slot.host.Reserve(bytes, "a staging buffer"));
    ROPE_RETURN_IF_ERROR(slot.device.Reserve(bytes, "a staging buffer", slot.stream.get()));
  }
  return absl::OkStatus();
}

absl::Status WorkerContext::ReservePinnedSlots(int64_t bytes) {
  for (int i = 0; i < kSlots; ++i) {
    if (slots_[i].host.capacity() >= bytes) continue;
    ROPE_RETURN_IF_ERROR(Reuse(i));  // nothing may still use it
    ROPE_RETURN_IF_ERROR(slots_[i].host.Reserve(bytes, "a staging buffer"));
  }
  return absl::OkStatus();
}

absl::Status WorkerContext::Reuse(int i) {
  Slot& slot = slots_[i];
  if (slot.in_flight) {
    ROPE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot.done.get()), "waiting for a staged copy");
    slot.in_flight = false;
  }
  for (const CopyOut& out : slot.copy_out) {
    std::memcpy(out.host, slot.host.data() + out.slot_offset, out.bytes);
  }
  slot.copy_out.clear();
  return absl::OkStatus();
}

absl::Status WorkerContext::UploadStaged(const void* src, void* dst, int64_t bytes,
                                         StopCheck stop) {
  // Every chunk goes through a slot's pinned buffer: make sure each holds
  // one, whatever earlier calls did to the slots, rather than trust it.
  ROPE_RETURN_IF_ERROR(ReservePinnedSlots(std::min(staging_bytes_, bytes)));
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst);
  int next = 0;
  for (int64_t done = 0; done < bytes; done += staging_bytes_, next ^= 1) {
    ROPE_RETURN_IF_ERROR(stop());
    const int64_t n = std::min(staging_bytes_, bytes - done);
    Slot& slot = slots_[next];
    ROPE_RETURN_IF_ERROR(Reuse(next));
    std::memcpy(slot.host.data(), from + done, n);
    ROPE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(to + done, slot.host.data(), n, cudaMemcpyHostToDevice, slot.stream.get()),
        "copying a request tensor to the device");
    ROPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.done.get(), slot.stream.get()),
                              "recording a staged copy");
    slot.in_flight = true;
  }
  return ComputeWaitsForSlots();
}

absl::Status WorkerContext::DownloadStaged(const void* src, void* dst, int64_t bytes,
                                           StopCheck stop) {
  ROPE_RETURN_IF_ERROR(ReservePinnedSlots(std::min(staging_bytes_, bytes)));
  ROPE_RETURN_IF_ERROR(SlotsWaitForCompute());
  const char* from = static_cast<const char*>(src);
  char* to = static_cast<char*>(dst);
  int next = 0;
  for (int64_t done = 0; done < bytes; done += staging_bytes_, next ^= 1) {
    ROPE_RETURN_IF_ERROR(stop());
    const int64_t n = std::min(staging_bytes_, bytes - done);
    Slot& slot = slots_[next];
    ROPE_RETURN_IF_ERROR(Reuse(next));  // delivers the chunk before last
    ROPE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.host.data(), from + done, n,
                                              cudaMemcpyDeviceToHost, slot.stream.get()),
                              "copying a result from the device");
    ROPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.done.get(), slot.stream.get()),
                              "recording a staged copy");
    slot.in_flight = true;
    slot.copy_out.push_back(CopyOut{to + done, 0, n});
  }
  for (int i = 0; i < kSlots; ++i) ROPE_RETURN_IF_ERROR(Reuse(i));
  return absl::OkStatus();
}

absl::Status WorkerContext::MarkProgress(int i) {
  ROPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(progress_[i].get(), compute_stream()),
                            "recording the compute stream's progress");
  return absl::OkStatus();
}

absl::Status WorkerContext::WaitForProgress(int i) {
  ROPE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(progress_[i].get()),
                            "waiting for the compute stream's progress");
  return absl::OkStatus();
}

absl::Status WorkerContext::ComputeWaitsForSlots() {
  for (int i = 1; i < kSlots; ++i) {
    if (!slots_[i].in_flight) continue;
    ROPE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_stream(), slots_[i].done.get(), 0),
                              "ordering the compute stream after staged copies");
  }
  return absl::OkStatus();
}

absl::Status WorkerContext::SlotsWaitForCompute() {
  ROPE_CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_done_.get(), compute_stream()),
                            "recording the end of compute");
  for (int i = 1; i < kSlots; ++i) {
    ROPE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(slots_[i].stream.get(), compute_done_.get(), 0),
                              "ordering staged copies after compute");
  }
  return absl::OkStatus();
}

absl::Status WorkerContext::Quiesce() {
  absl::Status status;
  for (Slot& slot : slots_) {
    if (slot.stream.get() != nullptr) {
      const cudaError_t error = cudaStreamSynchronize(slot.stream.get());
      if (status.ok()) status = CudaStatus(error, "waiting for a worker stream");
    }
    slot.in_flight = false;
    slot.copy_out.clear();
  }
  if (!status.ok()) return status;  // the device is lost: free nothing more on it
  for (DeviceBuffer* buffer :
       {&q_in, &k_in, &v_in, &qf, &kf, &vf, &scores, &probs, &output, &positions, &table_rows}) {
    buffer->ShrinkTo(keep_workspace_bytes_);
  }
  if (positions_host.capacity() > keep_workspace_bytes_) positions_host.Release();
  if (table_rows_host.capacity() > keep_workspace_bytes_) table_rows_host.Release();
  // A call larger than a staging chunk (one Rotate token that did not fit)
  // grew the slots; give the memory back rather than pin it for good. The
  // device half is reserved again by the next call that needs it; the
  // pinned half is kept at the staging size (if the smaller allocation
  // fails, the larger buffer stays: still usable).
  for (Slot& slot : slots_) {
    slot.device.ShrinkTo(staging_bytes_);
    (void)slot.host.ShrinkTo(staging_bytes_, "a staging buffer");
  }
  return status;
}

ContextPool::Lease::~Lease() {
  if (context_ == nullptr) return;
  const absl::Status quiesced = context_->Quiesce();
  pool_->Return(std::move(context_), quiesced);
}

absl::StatusOr<ContextPool::Lease> ContextPool::Acquire() {
  {
    // Refused before any CUDA call: on a lost context every one fails.
    absl::MutexLock lock(&mu_);
    if (!fault_.ok()) return Unusable();
  }
  // Also clears this thread's last-error slot: an error a runtime call left
  // there outside the backend's calls would otherwise be reported by this
  // call's first kernel launcher (cudaGetLastError) as its own.
  const cudaError_t selected = cudaSetDevice(device_);
  const cudaError_t pending = cudaGetLastError();
  // A sticky error met where no lease saw it (outside the backend's calls,
  // or swallowed while a lease shrank its buffers) is returned again by
  // every runtime call: by these two.
  const cudaError_t error = selected != cudaSuccess ? selected : pending;
  if (IsStickyCudaError(error)) {
    const absl::Status status = CudaStatus(error, absl::StrCat("selecting CUDA device ", device_));
    absl::MutexLock lock(&mu_);
    if (fault_.ok()) fault_ = status;
    return Unusable();
  }
  ROPE_CUDA_RETURN_IF_ERROR(selected, absl::StrCat("selecting CUDA device ", device_));
  {
    absl::MutexLock lock(&mu_);
    auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !idle_.empty() || created_ < options_.contexts || !fault_.ok();
    };
    mu_.Await(absl::Condition(&available));
    if (!fault_.ok()) return Unusable();
    if (!idle_.empty()) {
      std::unique_ptr<WorkerContext> context = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(context));
    }
    ++created_;
  }
  absl::StatusOr<std::unique_ptr<WorkerContext>> context = WorkerContext::Create(options_, cublas_);
  if (!context.ok()) {
    absl::MutexLock lock(&mu_);
    --created_;
    return context.status();
  }
  return Lease(this, *std::move(context));
}

absl::Status ContextPool::Unusable() const {
  return absl::UnavailableError(absl::StrCat(
      "CUDA device ", device_,
      " failed earlier and cannot be used again until the process restarts: ", fault_.message()));
}

absl::Status ContextPool::fault() const {
  absl::MutexLock lock(&mu_);
  return fault_;
}

void ContextPool::Return(std::unique_ptr<WorkerContext> context, const absl::Status& quiesced) {
  absl::MutexLock lock(&mu_);
  if (quiesced.ok()) {
    idle_.push_back(std::move(context));
    return;
  }
  if (fault_.ok()) fault_ = quiesced;
  broken_.push_back(std::move(context));
}

}  // namespace rope
