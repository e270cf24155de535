// IpcExporter (ipc_exporter.h) on the runtime under test (device_under_test.h):
// in rope_cuda_backend_test on a GPU (skipped without one), in
// rope_cuda_fake_device_test on the fake runtime. Another process's
// allocation opens here with cudaIpcOpenMemHandle, reads as exported, and
// takes writes that the exporter then sees.
#include "tests/cuda/ipc_exporter.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda/device_under_test.h"

namespace rope {
namespace {

TEST(IpcExporterTest, AllocationOfAnotherProcessOpensHereAndTakesWritesInPlace) {
  test::PrepareDevice();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device here";
  }
  std::vector<uint8_t> contents(1 << 20);
  std::mt19937 random(11);
  for (uint8_t& byte : contents) byte = static_cast<uint8_t>(random());
  absl::StatusOr<std::unique_ptr<test::IpcExporter>> exporter = test::IpcExporter::Start(contents);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  ASSERT_EQ((*exporter)->handle().size(), sizeof(cudaIpcMemHandle_t));
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, (*exporter)->handle().data(), sizeof(handle));

  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  std::vector<uint8_t> got(contents.size());
  EXPECT_EQ(cudaMemcpy(got.data(), p, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(got == contents);
  for (size_t i = 1000; i < 3000; ++i) contents[i] ^= 0xff;
  EXPECT_EQ(cudaMemcpy(static_cast<uint8_t*>(p) + 1000, contents.data() + 1000, 2000,
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  const absl::StatusOr<std::vector<uint8_t>> read_back = (*exporter)->ReadBack();
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  EXPECT_TRUE(*read_back == contents) << "the exporter does not see the write";
  EXPECT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  const absl::Status stopped = (*exporter)->Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace rope
