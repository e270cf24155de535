// The fake CUDA runtime (see device_under_test.h).
#include <dlfcn.h>

#include <string>

#include "gtest/gtest.h"
#include "core/backends/cuda/cublas_api.h"
#include "tests/cuda/device_under_test.h"
#include "tests/cuda/fake_runtime/fake_cuda_control.h"

#ifndef ROPE_FAKE_CUBLAS_PATH
#error "ROPE_FAKE_CUBLAS_PATH must name the fake libcublas.so.13"
#endif

namespace rope {
namespace test {
namespace {

// cuBLAS is dlopen'ed by name (cublas_api.h). This binary's RUNPATH names
// the fake runtime's directory, but AddressSanitizer's dlopen interceptor
// makes the loader search without it (the call then comes from libasan).
// Loaded by its path first, the fake is what every later dlopen of its
// name returns.
void* const fake_cublas = dlopen(ROPE_FAKE_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);

}  // namespace

void PrepareDevice() {
  ASSERT_NE(fake_cublas, nullptr) << ROPE_FAKE_CUBLAS_PATH << ": " << dlerror();
  RopeFakeCudaReset();
  // The backend resolves cuBLAS by name: it must get the fake (above).
  const absl::StatusOr<const CublasApi*> cublas = LoadCublas();
  ASSERT_TRUE(cublas.ok()) << cublas.status();
  Dl_info info;
  ASSERT_NE(dladdr(reinterpret_cast<void*>((*cublas)->create), &info), 0);
  ASSERT_NE(std::string(info.dli_fname).find("fake_cuda"), std::string::npos)
      << "cuBLAS came from " << info.dli_fname << ", not the fake runtime's directory";
}

bool DeviceIsFake() { return true; }

bool TryHideDevices() {
  RopeFakeCudaSetDeviceCount(0);
  return true;
}

int64_t OpenIpcMappings() { return RopeFakeCudaImportedMappings(); }

}  // namespace test
}  // namespace rope
