// CountCudaDevices / NewCudaBackend for ropeserve in a CUDA build: they load
// the CUDA backend plugin (librope_cuda.so, beside the executable) on first
// use and forward to it. See cuda_plugin_api.h for why it is a plugin.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_plugin_api.h"

#ifndef ROPE_CUDA_PLUGIN_FILE
#error "ROPE_CUDA_PLUGIN_FILE must name the plugin's file (librope_cuda.so)"
#endif

namespace rope {
namespace {

// The directory of the running executable, with a trailing '/'.
std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  const std::string exe(path, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1);
}

absl::StatusOr<const CudaPluginApi*> Load() {
  // Beside the executable first, then the loader's own search path.
  const std::string beside = ExecutableDir() + ROPE_CUDA_PLUGIN_FILE;
  void* plugin = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string errors;
  if (plugin == nullptr) {
    errors = dlerror();
    plugin = dlopen(ROPE_CUDA_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
  }
  if (plugin == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the CUDA backend plugin: ", errors, "; ", dlerror()));
  }
  // Never dlclose'd: backends created by it live as long as the process.
  auto entry = reinterpret_cast<RopeCudaPluginEntry>(dlsym(plugin, ROPE_CUDA_PLUGIN_ENTRY));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(beside, " has no ", ROPE_CUDA_PLUGIN_ENTRY, ": not a ropeserve CUDA plugin"));
  }
  const CudaPluginApi* api = entry();
  // abi first: an older plugin's table may end before the sizes.
  if (api == nullptr || api->abi != kCudaPluginAbi ||
      api->options_size != sizeof(CudaBackendOptions) || api->info_size != sizeof(BackendInfo) ||
      api->rotate_args_size != sizeof(RotateArgs) ||
      api->attention_args_size != sizeof(AttentionArgs) ||
      api->interrupt_size != sizeof(Interrupt)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA backend plugin was built from another version of ropeserve (abi ",
                     api == nullptr ? -1 : api->abi, ", want ", kCudaPluginAbi, ")"));
  }
  return api;
}

absl::StatusOr<const CudaPluginApi*> Plugin() {
  static const absl::StatusOr<const CudaPluginApi*>* const plugin =
      new absl::StatusOr<const CudaPluginApi*>(Load());
  return *plugin;
}

}  // namespace

absl::StatusOr<int> CountCudaDevices() {
  absl::StatusOr<const CudaPluginApi*> plugin = Plugin();
  if (!plugin.ok()) return plugin.status();
  return (*plugin)->count_devices();
}

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device,
                                                        const CudaBackendOptions& options) {
  absl::StatusOr<const CudaPluginApi*> plugin = Plugin();
  if (!plugin.ok()) return plugin.status();
  return (*plugin)->new_backend(device, options);
}

}  // namespace rope
