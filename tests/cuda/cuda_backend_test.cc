// The CUDA backend. Without a device (CI, this machine) the device tests
// skip with the reason, and what needs no device still runs: the no-device
// errors, option checks and the CUDA/cuBLAS status mapping. With a device
// (scripts/gpu_check.sh on a lent GPU): the backend against the CPU backend
// over the whole rotate and attention grids (rotation bit for bit), staging
// in many chunks, concurrent calls, the device table cache's counters and
// eviction, and out-of-memory mapping.
#include "server/backends/cuda/cuda_backend.h"

#include <pthread.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/backends/cuda/cublas_api.h"
#include "server/backends/cuda/cuda_status.h"
#include "server/backends/cuda/device_memory.h"
#include "tests/cuda/backend_cases.h"

namespace rope {
namespace {

using test::AttentionCase;
using test::AttentionData;
using test::RotateCase;
using test::RotateData;

::testing::AssertionResult StatusIs(const absl::Status& status, absl::StatusCode code,
                                    const std::string& substr) {
  if (status.code() == code && status.message().find(substr) != absl::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "got " << status << ", want code " << absl::StatusCodeToString(code) << " with \""
         << substr << "\"";
}

// ---- Without a device ---------------------------------------------------------

TEST(CudaAvailabilityTest, NoDeviceIsFailedPreconditionNamingTheReason) {
  const absl::StatusOr<int> count = CountCudaDevices();
  if (count.ok()) GTEST_SKIP() << "this machine has " << *count << " CUDA device(s)";
  std::printf("CountCudaDevices: %s\n", count.status().ToString().c_str());
  EXPECT_TRUE(StatusIs(count.status(), absl::StatusCode::kFailedPrecondition, "CUDA device"));
  const absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0);
  EXPECT_TRUE(StatusIs(backend.status(), absl::StatusCode::kFailedPrecondition, "CUDA device"));
}

TEST(CudaOptionsTest, BadOptionsAreInvalidArgumentBeforeLookingForADevice) {
  CudaBackendOptions options;
  options.contexts = 0;
  EXPECT_TRUE(StatusIs(NewCudaBackend(0, options).status(), absl::StatusCode::kInvalidArgument,
                       "cuda contexts is 0"));
  options = CudaBackendOptions();
  options.staging_bytes = 1000;
  EXPECT_TRUE(StatusIs(NewCudaBackend(0, options).status(), absl::StatusCode::kInvalidArgument,
                       "cuda staging_bytes is 1000"));
  options = CudaBackendOptions();
  options.table_cache_bytes = 0;
  EXPECT_TRUE(StatusIs(NewCudaBackend(0, options).status(), absl::StatusCode::kInvalidArgument,
                       "cuda table_cache_bytes is 0"));
}

TEST(CudaStatusTest, ErrorsMapToTheMostSpecificCode) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  EXPECT_TRUE(StatusIs(CudaStatus(cudaErrorMemoryAllocation, "allocating q"),
                       absl::StatusCode::kResourceExhausted,
                       "allocating q: cudaErrorMemoryAllocation"));
  EXPECT_TRUE(StatusIs(CudaStatus(cudaErrorInsufficientDriver, "init"),
                       absl::StatusCode::kFailedPrecondition, "init: cudaErrorInsufficientDriver"));
  EXPECT_TRUE(StatusIs(CudaStatus(cudaErrorNoDevice, "init"), absl::StatusCode::kFailedPrecondition,
                       "cudaErrorNoDevice"));
  EXPECT_TRUE(StatusIs(CudaStatus(cudaErrorNoKernelImageForDevice, "launch"),
                       absl::StatusCode::kFailedPrecondition, "cudaErrorNoKernelImageForDevice"));
  EXPECT_TRUE(StatusIs(CudaStatus(cudaErrorIllegalAddress, "rotate"), absl::StatusCode::kInternal,
                       "rotate: cudaErrorIllegalAddress"));
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x").ok());
  EXPECT_TRUE(StatusIs(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "gemm"),
                       absl::StatusCode::kResourceExhausted, "gemm: CUBLAS_STATUS_ALLOC_FAILED"));
  EXPECT_TRUE(StatusIs(CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "gemm"),
                       absl::StatusCode::kInternal, "CUBLAS_STATUS_EXECUTION_FAILED"));
}

// cuBLAS is dlopen'ed (cublas_api.h): it loads without a device, and once
// loaded, threads with small fixed stacks (civetweb's, behind /metrics) still
// start; linked into the executable, its ~94 KB of static TLS made them fail.
TEST(CublasLoaderTest, LoadsAtRunTimeAndLeavesSmallStackThreadsWorking) {
  const absl::StatusOr<const CublasApi*> api = LoadCublas();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_NE((*api)->create, nullptr);
  EXPECT_NE((*api)->sgemm_strided_batched, nullptr);
  EXPECT_EQ(*LoadCublas(), *api);  // loaded once

  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 100 * 1024), 0);
  pthread_t thread;
  const int created = pthread_create(
      &thread, &attr, [](void*) -> void* { return nullptr; }, nullptr);
  EXPECT_EQ(created, 0) << "a thread with a 100 KiB stack did not start";
  if (created == 0) pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

// ---- On a device --------------------------------------------------------------

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<int> count = CountCudaDevices();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device here: " << count.status().message();
  }

  static std::unique_ptr<Backend> MakeBackend(const CudaBackendOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }
};

::testing::AssertionResult SameBytes(const std::vector<uint8_t>& got,
                                     const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return ::testing::AssertionFailure() << "first difference at byte " << i;
  }
  return ::testing::AssertionSuccess();
}

void ExpectRotateMatchesCpu(Backend& cuda, const RotateCase& c) {
  SCOPED_TRACE(c.Name());
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
  RotateData want = test::MakeRotateData(c, 3);
  RotateData got = test::MakeRotateData(c, 3);
  ASSERT_TRUE(test::CpuBackend().Rotate(*table, want.Args(c)).ok());
  const absl::Status status = cuda.Rotate(*table, got.Args(c));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(SameBytes(got.q, want.q)) << "q";
  EXPECT_TRUE(SameBytes(got.k, want.k)) << "k";
}

TEST_F(CudaBackendTest, RotateMatchesCpuBackendBitForBitOverTheGrid) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  for (RotateCase c : test::RotateGrid()) {
    for (test::PositionMode mode :
         {test::PositionMode::kStart, test::PositionMode::kPerSeq, test::PositionMode::kPerToken}) {
      for (bool inverse : {false, true}) {
        c.positions = mode;
        c.inverse = inverse;
        ExpectRotateMatchesCpu(*cuda, c);
      }
    }
  }
}

TEST_F(CudaBackendTest, RotateThroughManyStagingChunksMatchesCpuBackend) {
  CudaBackendOptions options;
  options.staging_bytes = 64 << 10;  // ~25 tokens a chunk below: ~80 chunks
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  RotateCase c;
  c.dtype = DType::kBFloat16;
  c.layout = Layout::kHalf;
  c.batch = 2;
  c.seq = 1000;
  c.q_heads = 8;
  c.k_heads = 2;
  c.head_dim = 128;
  c.rotary_dim = 128;
  for (test::PositionMode mode : {test::PositionMode::kStart, test::PositionMode::kPerToken}) {
    c.positions = mode;
    ExpectRotateMatchesCpu(*cuda, c);
  }
  // One token larger than a staging buffer: the slots grow for it.
  c.batch = 1;
  c.seq = 3;
  c.q_heads = 300;
  c.k_heads = 100;
  c.dtype = DType::kFloat32;
  ExpectRotateMatchesCpu(*cuda, c);
}

TEST_F(CudaBackendTest, AttentionMatchesCpuBackendOverTheGrid) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  for (const AttentionCase& c : test::AttentionGrid()) {
    SCOPED_TRACE(c.Name());
    const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, 4096);
    AttentionData want = test::MakeAttentionData(c, 5);
    AttentionData got = test::MakeAttentionData(c, 5);
    ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
    const absl::Status status = cuda->AttentionScores(*table, got.Args(c));
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << "scores";
    EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << "output";
  }
}

TEST_F(CudaBackendTest, LargeAttentionThroughSmallStagingMatchesCpuBackend) {
  CudaBackendOptions options;
  options.staging_bytes = 64 << 10;
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  AttentionCase c;
  c.dtype = DType::kFloat16;
  c.batch = 1;
  c.q_seq = 300;
  c.k_seq = 300;
  c.q_heads = 8;
  c.k_heads = 2;
  c.head_dim = 64;
  c.rotary_dim = 64;
  c.v_dim = 64;
  c.causal = true;
  c.softmax = true;
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, 4096);
  AttentionData want = test::MakeAttentionData(c, 9);
  AttentionData got = test::MakeAttentionData(c, 9);
  ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
  ASSERT_TRUE(cuda->AttentionScores(*table, got.Args(c)).ok());
  EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5));
  EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5));
}

TEST_F(CudaBackendTest, ConcurrentCallsOnFewerContextsAllMatch) {
  CudaBackendOptions options;
  options.contexts = 2;
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  const std::vector<RotateCase> grid = test::RotateGrid();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < grid.size(); i += 8) ExpectRotateMatchesCpu(*cuda, grid[i]);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST_F(CudaBackendTest, InfoNamesTheDeviceItsMemoryAndTheDeviceCache) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  const BackendInfo info = cuda->info();
  std::printf("device: %s\n", info.device.c_str());
  EXPECT_EQ(info.name, "cuda");
  EXPECT_NE(info.device.find("sm_"), std::string::npos) << info.device;
  EXPECT_GT(info.device_memory_total_bytes, 0);
  EXPECT_GT(info.device_memory_used_bytes, 0);
  EXPECT_LE(info.device_memory_used_bytes, info.device_memory_total_bytes);
  ASSERT_TRUE(info.device_table_cache.has_value());
  EXPECT_EQ(info.device_table_cache->entries, 0);
}

RotateCase SmallCase() {
  RotateCase c;
  c.batch = 1;
  c.seq = 4;
  c.q_heads = 2;
  c.k_heads = 1;
  c.head_dim = 16;
  c.rotary_dim = 16;
  return c;
}

absl::Status RotateWithTable(Backend& cuda, const RopeTable& table) {
  RotateCase c = SmallCase();
  c.rotary_dim = table.key().rotary_dim;
  c.head_dim = c.rotary_dim;
  RotateData d = test::MakeRotateData(c, 1);
  return cuda.Rotate(table, d.Args(c));
}

TEST_F(CudaBackendTest, DeviceCacheUploadsATableOnceAndCountsLikeTheHostCache) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  const std::shared_ptr<const RopeTable> table = test::PlainTable(16, 4096);
  ASSERT_TRUE(RotateWithTable(*cuda, *table).ok());
  ASSERT_TRUE(RotateWithTable(*cuda, *table).ok());
  const TableCacheStats s = *cuda->info().device_table_cache;
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.bytes, table->byte_size());
  EXPECT_EQ(s.evictions, 0);
}

TEST_F(CudaBackendTest, DeviceCacheEvictsTheLeastRecentlyUsedTableWithinItsBudget) {
  const std::shared_ptr<const RopeTable> a = test::PlainTable(16, 4096);
  const std::shared_ptr<const RopeTable> b = test::PlainTable(16, 4097);
  const std::shared_ptr<const RopeTable> c = test::PlainTable(16, 4098);
  CudaBackendOptions options;
  options.table_cache_bytes = a->byte_size() + b->byte_size() + 100;  // room for two
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  ASSERT_TRUE(RotateWithTable(*cuda, *a).ok());
  ASSERT_TRUE(RotateWithTable(*cuda, *b).ok());
  ASSERT_TRUE(RotateWithTable(*cuda, *a).ok());  // a is now the most recent
  ASSERT_TRUE(RotateWithTable(*cuda, *c).ok());  // evicts b
  TableCacheStats s = *cuda->info().device_table_cache;
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.bytes, a->byte_size() + c->byte_size());
  EXPECT_LE(s.bytes, s.budget_bytes);
  ASSERT_TRUE(RotateWithTable(*cuda, *a).ok());  // still cached: a hit
  ASSERT_TRUE(RotateWithTable(*cuda, *b).ok());  // evicted: a miss
  s = *cuda->info().device_table_cache;
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 4);
}

TEST_F(CudaBackendTest, TableLargerThanTheDeviceBudgetIsResourceExhausted) {
  CudaBackendOptions options;
  options.table_cache_bytes = 1000;
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  const std::shared_ptr<const RopeTable> table = test::PlainTable(16, 4096);
  EXPECT_TRUE(StatusIs(RotateWithTable(*cuda, *table), absl::StatusCode::kResourceExhausted,
                       "device table-cache budget of 1000 bytes"));
}

TEST_F(CudaBackendTest, DeviceOutOfMemoryIsResourceExhaustedAndLeavesTheDeviceUsable) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  {
    DeviceBuffer huge;
    EXPECT_TRUE(StatusIs(huge.Reserve(int64_t{1} << 50, "a test"),
                         absl::StatusCode::kResourceExhausted,
                         "bytes of device memory for a test"));
    EXPECT_EQ(huge.data(), nullptr);
  }
  // Attention whose scores alone (64 heads x 65536 x 65536 float32, 1 TiB)
  // cannot fit: refused before anything is written to the outputs.
  const BackendInfo info = cuda->info();
  AttentionCase c;
  c.q_seq = 65536;
  c.k_seq = 65536;
  c.q_heads = 64;
  c.k_heads = 64;
  c.head_dim = 8;
  c.rotary_dim = 8;
  const int64_t score_bytes = c.q_heads * c.q_seq * c.k_seq * 4;
  if (info.device_memory_total_bytes >= score_bytes) GTEST_SKIP() << "device too large for this";
  std::vector<uint16_t> q(c.q_seq * c.q_heads * c.head_dim), k(q.size());
  std::vector<float> scores(1);  // never written: the allocation fails first
  AttentionArgs args;
  args.dtype = DType::kBFloat16;
  args.batch = 1;
  args.q_seq = c.q_seq;
  args.k_seq = c.k_seq;
  args.q_heads = c.q_heads;
  args.k_heads = c.k_heads;
  args.head_dim = c.head_dim;
  args.rotary_dim = c.rotary_dim;
  args.q = q.data();
  args.k = k.data();
  args.q_positions.seq = c.q_seq;
  args.k_positions.seq = c.k_seq;
  args.scale = 1.0f;
  args.scores = scores.data();
  const std::shared_ptr<const RopeTable> table = test::PlainTable(8, 65536);
  EXPECT_TRUE(StatusIs(cuda->AttentionScores(*table, args), absl::StatusCode::kResourceExhausted,
                       "attention scores"));
  // And the device still works.
  ExpectRotateMatchesCpu(*cuda, SmallCase());
}

}  // namespace
}  // namespace rope
