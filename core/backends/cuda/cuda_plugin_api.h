// The boundary between ropeserve and the CUDA backend plugin.
//
// ropeserve does not link CUDA: in a CUDA build the backend (kernels, CUDA
// runtime, cuBLAS) is a shared object, librope_cuda.so beside the ropeserve
// binary, that cuda_backend_loader.cc dlopens the first time a CUDA backend
// is asked for. Why: a library linked into the executable puts its
// thread-local storage into every thread's stack, and the Prometheus
// endpoint's civetweb threads have fixed ~100 KiB stacks of which OpenBLAS
// already takes 60 KiB; the CUDA runtime's 4 KiB (page-aligned) made
// /metrics scrapes overflow them. A dlopen'ed library's TLS is allocated on
// demand instead, and ropeserve also starts where no CUDA library exists.
//
// The plugin and the binary come from one build (same compiler, same
// headers); the version check refuses a plugin from another.
#ifndef ROPE_BACKENDS_CUDA_CUDA_PLUGIN_API_H_
#define ROPE_BACKENDS_CUDA_CUDA_PLUGIN_API_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/engine/backend.h"

namespace rope {

struct CudaPluginApi {
  // kCudaPluginAbi and the sizes of the types that cross the boundary (the
  // Backend interface's argument structs included: AttentionArgs carries a
  // `const Interrupt*` that the plugin polls, calling back into ropeserve).
  int abi = 0;
  size_t options_size = 0;
  size_t info_size = 0;
  size_t rotate_args_size = 0;
  size_t attention_args_size = 0;
  size_t interrupt_size = 0;
  absl::StatusOr<int> (*count_devices)() = nullptr;
  absl::StatusOr<std::unique_ptr<Backend>> (*new_backend)(
      int device, const CudaBackendOptions& options) = nullptr;
};

// 2: AttentionArgs::interrupt, CudaBackendOptions::attention_chunk_work.
// 3: BackendInfo::fault.
// 4: CUDA IPC memory.
// 5: Backend::device_memory() (DeviceMemory), TensorMemory in RotateArgs and
//    AttentionArgs, RotateArgs::q_source / k_source.
constexpr int kCudaPluginAbi = 5;

// The plugin's one exported symbol.
#define ROPE_CUDA_PLUGIN_ENTRY "RopeCudaPluginApi"
extern "C" {
using RopeCudaPluginEntry = const CudaPluginApi* (*)();
}

}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_CUDA_PLUGIN_API_H_
