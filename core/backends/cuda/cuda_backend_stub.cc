// The CUDA backend of a build without CUDA: CMake compiles this file instead
// of the real backend when nvcc was not found (or -DROPE_ENABLE_CUDA=OFF).
#include "core/backends/cuda/cuda_backend.h"

namespace rope {
namespace {

absl::Status NoCuda() {
  return absl::UnimplementedError(
      "this build has no CUDA backend: install the CUDA toolkit (nvcc) and reconfigure with "
      "-DROPE_ENABLE_CUDA=ON");
}

}  // namespace

absl::StatusOr<int> CountCudaDevices() { return NoCuda(); }

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device,
                                                        const CudaBackendOptions& options) {
  return NoCuda();
}

}  // namespace rope
