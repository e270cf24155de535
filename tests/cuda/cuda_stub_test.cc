// The stub CUDA backend of a build without CUDA: it says how to enable CUDA.
#include "gtest/gtest.h"
#include "core/backends/cuda/cuda_backend.h"

namespace rope {
namespace {

TEST(CudaStubTest, NewCudaBackendSaysHowToEnableCuda) {
  const absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(backend.status().message().find("reconfigure with -DROPE_ENABLE_CUDA=ON"),
            absl::string_view::npos)
      << backend.status();
  EXPECT_EQ(CountCudaDevices().status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace rope
