// What ropeserve links in a CUDA build: the loader of the CUDA backend
// plugin (librope_cuda.so beside the binaries). The plugin must load on any
// machine; then the answer is the device's: a backend on a GPU machine,
// FAILED_PRECONDITION about the device (not about the plugin) elsewhere.
#include <memory>

#include "gtest/gtest.h"
#include "core/backends/cuda/cuda_backend.h"

namespace rope {
namespace {

TEST(CudaPluginTest, LoadsAndAnswersForTheDevice) {
  const absl::StatusOr<int> count = CountCudaDevices();
  const absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0);
  if (count.ok()) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->info().name, "cuda");
    return;
  }
  std::printf("no device: %s\n", count.status().ToString().c_str());
  for (const absl::Status& status : {count.status(), backend.status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("CUDA device"), absl::string_view::npos) << status;
    EXPECT_EQ(status.message().find("plugin"), absl::string_view::npos) << status;
  }
}

}  // namespace
}  // namespace rope
