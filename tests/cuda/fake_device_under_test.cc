// The fake CUDA runtime (see device_under_test.h).
#include <dlfcn.h>

#include <string>

#include "gtest/gtest.h"
#include "server/backends/cuda/cublas_api.h"
#include "tests/cuda/device_under_test.h"
#include "tests/cuda/fake_runtime/fake_cuda_control.h"

namespace rope {
namespace test {

void PrepareDevice() {
  RopeFakeCudaReset();
  // cuBLAS is dlopen'ed by name (cublas_api.h): the fake one must come first
  // (this binary's RUNPATH has its directory; LD_LIBRARY_PATH would win).
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

}  // namespace test
}  // namespace rope
