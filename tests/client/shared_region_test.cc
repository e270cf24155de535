// Registration requests that need no server: SharedRegion's (a POSIX object)
// and CudaRegionRequest's (a CUDA IPC handle), with the checks the latter
// makes before any call.
#include "client/shared_region.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace client {
namespace {

using ::testing::HasSubstr;

// 64 distinct bytes standing in for a cudaIpcMemHandle_t (zeros included:
// the handle is bytes, not a C string).
std::string FakeHandle() {
  std::string handle(kCudaIpcHandleSize, '\0');
  for (size_t i = 0; i < handle.size(); ++i) handle[i] = static_cast<char>(i * 7);
  return handle;
}

TEST(CudaRegionRequestTest, CarriesTheHandleDeviceAndSizeWithoutKeyOrOffset) {
  const std::string handle = FakeHandle();
  absl::StatusOr<v1::RegisterSharedMemoryRequest> request =
      CudaRegionRequest("kv", handle, 3, 1 << 20);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->name(), "kv");
  EXPECT_EQ(request->cuda_ipc_handle(), handle);
  EXPECT_EQ(request->cuda_ipc_handle().size(), 64u);
  EXPECT_EQ(request->cuda_device(), 3);
  EXPECT_EQ(request->byte_size(), 1u << 20);
  EXPECT_EQ(request->key(), "");
  EXPECT_EQ(request->offset(), 0u);
}

TEST(CudaRegionRequestTest, RejectsAHandleThatIsNot64Bytes) {
  for (size_t size : {0, 1, 63, 65, 128}) {
    absl::StatusOr<v1::RegisterSharedMemoryRequest> request =
        CudaRegionRequest("kv", std::string(size, 'h'), 0, 4096);
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_THAT(std::string(request.status().message()),
                HasSubstr("cuda_ipc_handle is " + std::to_string(size) + " bytes"));
    EXPECT_THAT(std::string(request.status().message()), HasSubstr("is 64"));
  }
}

TEST(CudaRegionRequestTest, RejectsAnEmptyNameANegativeDeviceAndSizeZero) {
  const std::string handle = FakeHandle();
  absl::StatusOr<v1::RegisterSharedMemoryRequest> unnamed = CudaRegionRequest("", handle, 0, 64);
  EXPECT_EQ(unnamed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unnamed.status().message()), HasSubstr("name"));

  absl::StatusOr<v1::RegisterSharedMemoryRequest> device = CudaRegionRequest("kv", handle, -1, 64);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(device.status().message()), HasSubstr("cuda_device is -1"));

  absl::StatusOr<v1::RegisterSharedMemoryRequest> empty = CudaRegionRequest("kv", handle, 0, 0);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("byte_size is 0"));
}

TEST(SharedRegionTest, RegisterRequestNamesThePosixObjectAndNoCudaFields) {
  absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create("q", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  const v1::RegisterSharedMemoryRequest request = (*region)->RegisterRequest();
  EXPECT_EQ(request.name(), "q");
  EXPECT_EQ(request.key(), (*region)->key());
  EXPECT_THAT(request.key(), HasSubstr("-q"));
  EXPECT_EQ(request.byte_size(), 4096u);
  EXPECT_TRUE(request.cuda_ipc_handle().empty());

  const v1::SharedMemoryRef ref = (*region)->Ref(64, 128);
  EXPECT_EQ(ref.region(), "q");
  EXPECT_EQ(ref.offset(), 64u);
  EXPECT_EQ(ref.byte_size(), 128u);
}

}  // namespace
}  // namespace client
}  // namespace rope
