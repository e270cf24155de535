// NoCudaDeviceCause: what ropeserve says when CUDA finds no device, with and
// without an NVIDIA driver's version file (a file of the test's own).
#include "core/backends/cuda/no_device_cause.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(NoCudaDeviceCauseTest, NoDriverIsNamedNotAnInsufficientOne) {
  const std::string cause =
      NoCudaDeviceCause("cudaErrorInsufficientDriver",
                        "CUDA driver version is insufficient for CUDA runtime version",
                        ::testing::TempDir() + "/no-such-driver-version");
  EXPECT_THAT(cause, HasSubstr("no NVIDIA GPU driver on this machine"));
  EXPECT_THAT(cause, Not(HasSubstr("Insufficient")));
  EXPECT_THAT(cause, Not(HasSubstr("insufficient")));
}

TEST(NoCudaDeviceCauseTest, AnOldDriverIsNamedWithItsVersion) {
  const std::string path = ::testing::TempDir() + "/nvidia-version";
  std::ofstream(path) << "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.42.01\nGCC version\n";
  const std::string cause =
      NoCudaDeviceCause("cudaErrorInsufficientDriver", "insufficient", path);
  EXPECT_THAT(cause, HasSubstr("the NVIDIA driver (NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                               "470.42.01) is older than the CUDA runtime of this build: update "
                               "the NVIDIA driver"));
  EXPECT_THAT(NoCudaDeviceCause("cudaErrorNoDevice", "no CUDA-capable device", path),
              HasSubstr("the NVIDIA driver is loaded but CUDA sees no GPU"));
  EXPECT_EQ(NoCudaDeviceCause("cudaErrorUnknown", "unknown error", path),
            "cudaGetDeviceCount: cudaErrorUnknown: unknown error");
}

}  // namespace
}  // namespace rope
