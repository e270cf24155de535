#include "core/backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/thread_pool.h"
#include "core/backends/cuda/cublas_api.h"
#include "core/backends/cuda/cuda_ops.h"
#include "core/backends/cuda/cuda_ipc.h"
#include "core/backends/cuda/cuda_status.h"
#include "core/backends/cuda/device_table_cache.h"
#include "core/backends/cuda/kernel_launchers.h"
#include "core/backends/cuda/no_device_cause.h"
#include "core/backends/cuda/worker_context.h"
#include "common/status_macros.h"

namespace rope {
namespace {

// The CUDA backend's device memory: CUDA IPC allocations of client
// processes, opened on the backend's device.
class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}
  int device() const override { return device_; }
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenIpcHandle(std::string_view handle,
                                                                   int device,
                                                                   uint64_t byte_size) override {
    return OpenCudaIpcHandle(device_, handle, device, byte_size);
  }

 private:
  const int device_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaBackendOptions& options, const cudaDeviceProp& properties,
              const CublasApi& cublas)
      : device_(device),
        options_(options),
        description_(
            absl::StrFormat("%s (sm_%d%d, %d SMs, %.1f GiB), CUDA device %d", properties.name,
                            properties.major, properties.minor, properties.multiProcessorCount,
                            static_cast<double>(properties.totalGlobalMem) / (1 << 30), device)),
        // A few waves of blocks per multiprocessor; grid-stride loops do
        // the rest.
        max_blocks_(int64_t{32} * properties.multiProcessorCount),
        attention_chunk_work_(options.attention_chunk_work > 0
                                  ? static_cast<double>(options.attention_chunk_work)
                                  : kChunkWorkPerMultiprocessor * properties.multiProcessorCount),
        device_memory_(device),
        table_cache_(options.table_cache_bytes),
        contexts_(device, options, cublas),
        table_pool_(static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}

  ~CudaBackend() override {
    // Contexts free device resources on destruction: on this device.
    (void)cudaSetDevice(device_);
  }

  BackendInfo info() const override {
    BackendInfo info;
    info.name = "cuda";
    info.device = description_;
    info.threads = options_.contexts;
    {
      absl::MutexLock lock(&memory_mu_);
      info.device_memory_total_bytes = memory_total_;
      info.device_memory_used_bytes = memory_used_;
    }
    info.device_table_cache = table_cache_.stats();
    const absl::Status fault = contexts_.fault();
    if (!fault.ok()) {
      info.fault = absl::StrCat("CUDA device ", device_, " is unusable: ", fault.message());
    }
    return info;
  }

  // The device table (the call's blocks) is declared before the lease, so
  // it is released after it: when a call returns early (an error, a
  // cancelled caller) with work still enqueued, the lease's Quiesce first
  // waits for the kernels that read the blocks; only then may their memory
  // be freed (if they were evicted meanwhile, this is the last reference).
  absl::Status Rotate(const RopeTable& table, const RotateArgs& args) override {
    DeviceTable device_table;
    ROPE_ASSIGN_OR_RETURN(ContextPool::Lease context, contexts_.Acquire());
    SampleMemory(/*force=*/false);
    ROPE_ASSIGN_OR_RETURN(device_table, table_cache_.Get(table));
    if (!args.memory.is_host()) {
      return CudaRotateOnDevice(*context, device_table, args, max_blocks_);
    }
    return CudaRotate(*context, device_table, args, max_blocks_);
  }

  DeviceMemory* device_memory() override { return &device_memory_; }

  absl::Status AttentionScores(const RopeTable& table, const AttentionArgs& args) override {
    DeviceTable device_table;
    ROPE_ASSIGN_OR_RETURN(ContextPool::Lease context, contexts_.Acquire());
    SampleMemory(/*force=*/false);
    ROPE_ASSIGN_OR_RETURN(device_table, table_cache_.Get(table));
    return CudaAttentionScores(*context, device_table, args, max_blocks_, attention_chunk_work_);
  }

  // Host tables are built (in double precision) on host threads before
  // they are uploaded.
  void ParallelRows(int64_t rows, const std::function<void(int64_t, int64_t)>& fill) override {
    table_pool_.ParallelFor(rows, 1024, fill);
  }

  // Leases a context once, so that start-up fails rather than the first call
  // when the device cannot give us streams, pinned memory or cuBLAS.
  absl::Status WarmUp() {
    {
      ROPE_ASSIGN_OR_RETURN(ContextPool::Lease context, contexts_.Acquire());
      SampleMemory(/*force=*/true);
    }
    return contexts_.fault();
  }

 private:
  // Float32 operations per multiprocessor of one attention chunk: ~4 ms at
  // an H100's 0.5 TFLOP/s per SM, ~12 ms at an A100's or a T4's 0.18.
  static constexpr double kChunkWorkPerMultiprocessor = 2147483648.0;  // 2^31

  const int device_;
  const CudaBackendOptions options_;
  const std::string description_;
  const int64_t max_blocks_;
  const double attention_chunk_work_;
  CudaDeviceMemory device_memory_;
  DeviceTableCache table_cache_;
  ContextPool contexts_;
  ThreadPool table_pool_;

  // Device memory as last sampled, on a thread that has the device current
  // (at start-up, then by calls at most every kMemorySamplePeriod). info()
  // makes no CUDA call: it also runs on the /metrics endpoint's threads,
  // whose small stacks are not meant for driver calls.
  void SampleMemory(bool force) {
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&memory_mu_);
      if (!force && now - memory_sampled_ < kMemorySamplePeriod) return;
      memory_sampled_ = now;
    }
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    absl::MutexLock lock(&memory_mu_);
    memory_total_ = static_cast<int64_t>(total_bytes);
    memory_used_ = static_cast<int64_t>(total_bytes - free_bytes);
  }

  static constexpr absl::Duration kMemorySamplePeriod = absl::Milliseconds(100);
  mutable absl::Mutex memory_mu_;
  absl::Time memory_sampled_ ABSL_GUARDED_BY(memory_mu_) = absl::InfinitePast();
  int64_t memory_total_ ABSL_GUARDED_BY(memory_mu_) = 0;
  int64_t memory_used_ ABSL_GUARDED_BY(memory_mu_) = 0;
};

absl::Status CheckOptions(const CudaBackendOptions& options) {
  if (options.table_cache_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda table_cache_bytes is ", options.table_cache_bytes, ": must be > 0"));
  }
  if (options.contexts < 1 || options.contexts > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda contexts is ", options.contexts, ": must be in [1, 64]"));
  }
  if (options.staging_bytes < (int64_t{64} << 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda staging_bytes is ", options.staging_bytes, ": must be at least 65536"));
  }
  if (options.attention_chunk_work < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda attention_chunk_work is ",
                                                   options.attention_chunk_work,
                                                   ": must be >= 0 (0: automatic)"));
  }
  if (options.keep_workspace_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda keep_workspace_bytes is ",
                                                   options.keep_workspace_bytes, ": must be >= 0"));
  }
  return absl::OkStatus();
}

// Device buffers come from the device's default stream-ordered memory pool
// (device_memory.h). The pool keeps up to keep_workspace_bytes of freed
// memory for reuse, and gives the rest back to the device at each
// synchronisation, like the workspaces themselves (CudaBackendOptions).
absl::Status ConfigureMemoryPool(int device, const cudaDeviceProp& properties,
                                 const CudaBackendOptions& options) {
  int pools = 0;
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device),
      absl::StrCat("asking CUDA device ", device, " whether it has memory pools"));
  if (pools == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " (", properties.name,
        ") has no stream-ordered memory pools (cudaDevAttrMemoryPoolsSupported is 0), which "
        "the CUDA backend allocates from"));
  }
  cudaMemPool_t pool = nullptr;
  ROPE_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device),
                            absl::StrCat("getting the memory pool of CUDA device ", device));
  uint64_t threshold = static_cast<uint64_t>(options.keep_workspace_bytes);
  ROPE_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
      absl::StrCat("setting the release threshold of CUDA device ", device, "'s memory pool"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> CountCudaDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Whatever the reason (no device, no driver, a driver older than this
    // runtime), there is no device to use; the message names which.
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: ",
                     NoCudaDeviceCause(cudaGetErrorName(error), cudaGetErrorString(error))));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device: cudaGetDeviceCount found none");
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device,
                                                        const CudaBackendOptions& options) {
  ROPE_RETURN_IF_ERROR(CheckOptions(options));
  ROPE_ASSIGN_OR_RETURN(const int count, CountCudaDevices());
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", device,
                                                      " does not exist: this machine has ", count,
                                                      " CUDA device", count == 1 ? "" : "s"));
  }
  ROPE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), absl::StrCat("selecting CUDA device ", device));
  cudaDeviceProp properties;
  ROPE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device),
                            absl::StrCat("reading the properties of CUDA device ", device));
  const cudaError_t image = kernels::CheckKernelImage();
  if (image != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " (", properties.name, ", sm_", properties.major, properties.minor,
        ") cannot run this build's kernels (CUDA architectures ", ROPE_CUDA_ARCHITECTURES,
        "): ", cudaGetErrorName(image), ": ", cudaGetErrorString(image)));
  }
  ROPE_RETURN_IF_ERROR(ConfigureMemoryPool(device, properties, options));
  ROPE_ASSIGN_OR_RETURN(const CublasApi* cublas, LoadCublas());
  auto backend = std::make_unique<CudaBackend>(device, options, properties, *cublas);
  ROPE_RETURN_IF_ERROR(backend->WarmUp());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace rope
