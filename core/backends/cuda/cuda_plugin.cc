// The entry point of librope_cuda.so (see cuda_plugin_api.h): hands the real
// backend's factory functions to the loader in ropeserve.
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_plugin_api.h"

extern "C" __attribute__((visibility("default"))) const rope::CudaPluginApi* RopeCudaPluginApi() {
  static const rope::CudaPluginApi api = [] {
    rope::CudaPluginApi a;
    a.abi = rope::kCudaPluginAbi;
    a.options_size = sizeof(rope::CudaBackendOptions);
    a.info_size = sizeof(rope::BackendInfo);
    a.rotate_args_size = sizeof(rope::RotateArgs);
    a.attention_args_size = sizeof(rope::AttentionArgs);
    a.interrupt_size = sizeof(rope::Interrupt);
    a.count_devices = &rope::CountCudaDevices;
    a.new_backend = &rope::NewCudaBackend;
    return a;
  }();
  return &api;
}
