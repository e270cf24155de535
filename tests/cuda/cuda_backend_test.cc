// The CUDA backend. Without a device (CI, this machine) the device tests
// skip with the reason, and what needs no device still runs: the no-device
// errors, option checks and the CUDA/cuBLAS status mapping. With a device
// (scripts/gpu_check.sh on a lent GPU), or on the fake CUDA runtime
// (rope_cuda_fake_device_test: host memory, host-emulated kernels, see
// device_under_test.h): the backend against the CPU backend
// over the whole rotate and attention grids (rotation bit for bit), staging
// in many chunks, attention in chunks, concurrent calls, the device table
// cache's counters and eviction, out-of-memory mapping, and AttentionScores
// stopping at each of its interrupt checks (cancelled, deadline passed) with
// the worker context fit for the next call.
#include "core/backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <pthread.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/backends/cuda/attention_chunks.h"
#include "core/backends/cuda/cublas_api.h"
#include "core/backends/cuda/cuda_status.h"
#include "core/backends/cuda/device_memory.h"
#include "core/engine/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/interrupt.h"
#include "tests/cuda/backend_cases.h"
#include "tests/cuda/device_under_test.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace {

using test::AttentionCase;
using test::AttentionData;
using test::RotateCase;
using test::RotateData;
using test::StatusIs;

// ---- Without a device ---------------------------------------------------------

TEST(CudaAvailabilityTest, NoDeviceIsFailedPreconditionNamingTheReason) {
  test::PrepareDevice();
  test::TryHideDevices();
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
  options = CudaBackendOptions();
  options.attention_chunk_work = -1;
  EXPECT_TRUE(StatusIs(NewCudaBackend(0, options).status(), absl::StatusCode::kInvalidArgument,
                       "cuda attention_chunk_work is -1"));
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
    test::PrepareDevice();
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

// Float8 outputs (q and k only read, one byte per element into q_out /
// k_out) over the grid, both formats, with scales, through staging chunks.
void ExpectFloat8RotateMatchesCpu(Backend& cuda, const RotateCase& c, DType out) {
  SCOPED_TRACE(absl::StrCat(c.Name(), " to ", DTypeName(out)));
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
  const RotateData in = test::MakeRotateData(c, 5);
  const size_t q_elements = in.q.size() / DTypeSize(c.dtype);
  const size_t k_elements = in.k.size() / DTypeSize(c.dtype);
  std::vector<uint8_t> results[2][2];
  int i = 0;
  for (Backend* backend : {&test::CpuBackend(), &cuda}) {
    RotateData data = in;
    std::vector<uint8_t>& q_out = results[i][0];
    std::vector<uint8_t>& k_out = results[i][1];
    q_out.assign(q_elements, 0xAA);
    k_out.assign(k_elements, 0xAA);
    RotateArgs args = data.Args(c);
    args.output_dtype = out;
    args.q_out = q_out.data();
    args.k_out = c.k_heads > 0 ? k_out.data() : nullptr;
    args.q_scale = 48.0f;
    args.k_scale = 0.75f;
    const absl::Status status = backend->Rotate(*table, args);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_TRUE(SameBytes(data.q, in.q)) << "q was written";
    EXPECT_TRUE(SameBytes(data.k, in.k)) << "k was written";
    ++i;
  }
  EXPECT_TRUE(SameBytes(results[1][0], results[0][0])) << "q_out";
  EXPECT_TRUE(SameBytes(results[1][1], results[0][1])) << "k_out";
}

TEST_F(CudaBackendTest, RotateToFloat8MatchesCpuBackendBitForBit) {
  CudaBackendOptions options;
  options.staging_bytes = 64 << 10;
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  int n = 0;
  for (RotateCase c : test::RotateGrid()) {
    if (n++ % 3 != 0) continue;  // a third of the grid: every dtype, layout and shape kind
    for (DType out : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      c.positions = n % 2 == 0 ? test::PositionMode::kStart : test::PositionMode::kPerToken;
      c.inverse = n % 4 == 1;
      ExpectFloat8RotateMatchesCpu(*cuda, c, out);
    }
  }
  // MLA's whole head, and more tokens than a staging chunk holds.
  RotateCase c;
  c.dtype = DType::kBFloat16;
  c.layout = Layout::kInterleaved;
  c.batch = 2;
  c.seq = 300;
  c.q_heads = 3;
  c.k_heads = 2;
  c.head_dim = 192;
  c.rotary_dim = 64;
  c.rotary_offset = 128;
  c.positions = test::PositionMode::kPerToken;
  ExpectFloat8RotateMatchesCpu(*cuda, c, DType::kFloat8E4M3);
}

// Axial RoPE and fractional positions reach the backends as per-request
// tables (core/engine/request_rows.h), uploaded per call: the same requests
// through an Engine on each backend give the same rotated bytes (the CPU
// makes a long call's rows chunk by chunk, the CUDA backend in one table).
TEST_F(CudaBackendTest, AxialAndFractionalRequestsMatchTheCpuEngine) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  absl::StatusOr<std::unique_ptr<Backend>> cpu = NewCpuBackend(2);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  Engine on_cuda(std::move(cuda), EngineLimits());
  Engine on_cpu(*std::move(cpu), EngineLimits());
  RopeConfig config;
  config.theta = 256;
  config.head_dim = 64;
  config.max_len = 8192;
  config.axial.axes = {{16, 0, 2.0, 0}, {24, 0, 0, 0.5}, {24, 10000, 0, 0}};
  constexpr int64_t kB = 2, kS = Engine::kRequestRowsChunk + 300, kH = 2;
  std::mt19937 rng(12);
  std::uniform_int_distribution<int64_t> position(0, 8191);
  std::vector<int64_t> positions(3 * kB * kS);
  for (int64_t& p : positions) p = position(rng);
  std::vector<double> fractional(3 * kS);
  for (double& p : fractional) p = static_cast<double>(position(rng)) + 0.375;
  test::RotateCase shape;
  shape.dtype = DType::kBFloat16;
  shape.batch = kB;
  shape.seq = kS;
  shape.q_heads = kH;
  shape.k_heads = 1;
  shape.head_dim = 64;
  shape.rotary_dim = 64;
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    RotateData want = test::MakeRotateData(shape, 5);
    RotateData got = test::MakeRotateData(shape, 5);
    RotateParams params;
    params.config = config;
    if (variant == 0) params.positions = positions;
    if (variant == 1) params.fractional_positions = fractional;
    if (variant == 2) params.start_pos = 100;
    const auto run = [&](Engine& engine, RotateData& data) {
      params.q = TensorView{shape.dtype, {kB, kS, kH, 64}, data.q.data(), data.q.size(),
                            TensorMemory{}};
      params.k = TensorView{shape.dtype, {kB, kS, 1, 64}, data.k.data(), data.k.size(),
                            TensorMemory{}};
      return engine.Rotate(params);
    };
    ASSERT_TRUE(run(on_cpu, want).ok());
    const absl::Status status = run(on_cuda, got);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_TRUE(SameBytes(got.q, want.q)) << "q";
    EXPECT_TRUE(SameBytes(got.k, want.k)) << "k";
  }
  // AttentionScores: every axis at the start positions (joined rows indexed
  // by position, causal), and fractional query positions.
  test::AttentionCase a;
  a.q_seq = 5;
  a.k_seq = 7;
  a.q_heads = 2;
  a.k_heads = 1;
  a.head_dim = 64;
  a.rotary_dim = 64;
  AttentionData data = test::MakeAttentionData(a, 9);
  for (bool fractional_q : {false, true}) {
    AttentionParams p;
    p.config = config;
    p.q = ConstTensorView(DType::kFloat32, {1, 5, 2, 64}, data.q.data(), data.q.size());
    p.k = ConstTensorView(DType::kFloat32, {1, 7, 1, 64}, data.k.data(), data.k.size());
    p.q_start_pos = 4094;
    p.k_start_pos = 4093;
    p.causal = !fractional_q;
    if (fractional_q) {
      p.q_start_pos = 0;
      p.q_fractional_positions = {0.5, 1, 2.25, 3, 4, 5, 6.75, 7, 8, 9, 10, 11.5, 12, 13, 14};
    }
    std::string want, got;
    AttentionOutputs want_out, got_out;
    want_out.scores.bytes = &want;
    got_out.scores.bytes = &got;
    ASSERT_TRUE(on_cpu.AttentionScores(p, &want_out).ok());
    ASSERT_TRUE(on_cuda.AttentionScores(p, &got_out).ok());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size() / sizeof(float); ++i) {
      float w, g;
      std::memcpy(&w, want.data() + i * sizeof(float), sizeof(float));
      std::memcpy(&g, got.data() + i * sizeof(float), sizeof(float));
      if (std::isinf(w)) {
        EXPECT_EQ(g, w) << i;
      } else {
        EXPECT_NEAR(g, w, 1e-4f * (1 + std::fabs(w))) << i;
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

// Out of place (RotateArgs::q_source, k_source: a host region's q_out):
// the chunks are read from the sources and written to q and k, which match
// the CPU backend's in-place answer; the sources are not written.
TEST_F(CudaBackendTest, RotateOutOfPlaceThroughStagingMatchesCpuBackend) {
  CudaBackendOptions options;
  options.staging_bytes = 64 << 10;
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  RotateCase c;
  c.dtype = DType::kFloat16;
  c.layout = Layout::kHalf;
  c.batch = 2;
  c.seq = 300;
  c.q_heads = 8;
  c.k_heads = 2;
  c.head_dim = 64;
  c.rotary_dim = 32;
  c.positions = test::PositionMode::kPerToken;
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
  RotateData want = test::MakeRotateData(c, 5);
  RotateData source = test::MakeRotateData(c, 5);
  ASSERT_TRUE(test::CpuBackend().Rotate(*table, want.Args(c)).ok());
  const std::vector<uint8_t> q_before = source.q, k_before = source.k;
  std::vector<uint8_t> q_out(source.q.size(), 0xee), k_out(source.k.size(), 0xee);
  RotateArgs args = source.Args(c);
  args.q_source = args.q;
  args.k_source = args.k;
  args.q = q_out.data();
  args.k = k_out.data();
  const absl::Status status = cuda->Rotate(*table, args);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(SameBytes(q_out, want.q)) << "q_out";
  EXPECT_TRUE(SameBytes(k_out, want.k)) << "k_out";
  EXPECT_TRUE(SameBytes(source.q, q_before)) << "the source q was written";
  EXPECT_TRUE(SameBytes(source.k, k_before)) << "the source k was written";
}

TEST_F(CudaBackendTest, AttentionMatchesCpuBackendOverTheGrid) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  for (const AttentionCase& c : test::AttentionGrid()) {
    SCOPED_TRACE(c.Name());
    const std::shared_ptr<const RopeTable> table =
        test::PlainTable(c.rotary_dim, test::kAttentionGridMaxLen);
    AttentionData want = test::MakeAttentionData(c, 5);
    AttentionData got = test::MakeAttentionData(c, 5);
    ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
    const absl::Status status = cuda->AttentionScores(*table, got.Args(c));
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << "scores";
    EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << "output";
  }
}

// The tiled kernels (every mask, transform and result; AttentionArgs::legacy
// false) against the CPU backend's tiled pass, which tests/unit checks
// against the float64 reference.
TEST_F(CudaBackendTest, TiledAttentionMatchesCpuBackendOverTheGrid) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  for (const test::TiledAttentionCase& c : test::TiledAttentionGrid()) {
    SCOPED_TRACE(c.Name());
    const std::shared_ptr<const RopeTable> table =
        test::PlainTable(c.base.rotary_dim, test::kAttentionGridMaxLen);
    test::TiledAttentionData want = test::MakeTiledAttentionData(c, 21);
    test::TiledAttentionData got = test::MakeTiledAttentionData(c, 21);
    ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
    const absl::Status status = cuda->AttentionScores(*table, got.Args(c));
    ASSERT_TRUE(status.ok()) << status;
    constexpr double kTolerance = 2e-5;  // float32 sums in another order
    if (c.lse) EXPECT_TRUE(test::CloseToCpu(got.lse, want.lse, kTolerance)) << "lse";
    if (c.output) {
      EXPECT_TRUE(test::CloseToCpu(got.base.output, want.base.output, kTolerance)) << "output";
    }
    if (c.scores) {
      EXPECT_TRUE(test::CloseToCpu(got.base.scores, want.base.scores, kTolerance)) << "scores";
    }
    if (c.score_rows_count > 0) {
      EXPECT_TRUE(test::CloseToCpu(got.score_rows, want.score_rows, kTolerance)) << "score_rows";
    }
    if (c.key_mass) EXPECT_TRUE(test::CloseToCpu(got.key_mass, want.key_mass, 1e-4)) << "key_mass";
    if (c.top_k > 0) {
      // Near ties may order differently; the probabilities must agree.
      EXPECT_TRUE(test::CloseToCpu(got.top_k_probs, want.top_k_probs, kTolerance)) << "top_k";
    }
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
  // One block each (4096 rows), of three tables.
  const std::shared_ptr<const RopeTable> a = test::PlainTable(16, 4096);
  const std::shared_ptr<const RopeTable> b = test::PlainTable(32, 4096);
  const std::shared_ptr<const RopeTable> c = test::PlainTable(8, 4096);
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
    EXPECT_TRUE(StatusIs(huge.Reserve(int64_t{1} << 50, "a test", cudaStreamPerThread),
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

// Chunks of one query row, and of a few heads: every chunk kind of
// attention_chunks.h on the device (the host tests run the same plans).
TEST_F(CudaBackendTest, AttentionInChunksMatchesCpuBackendOverTheGrid) {
  for (int64_t chunk_work : {int64_t{1}, int64_t{20000}}) {
    SCOPED_TRACE(chunk_work);
    CudaBackendOptions options;
    options.attention_chunk_work = chunk_work;
    std::unique_ptr<Backend> cuda = MakeBackend(options);
    ASSERT_NE(cuda, nullptr);
    for (const AttentionCase& c : test::AttentionGrid()) {
      SCOPED_TRACE(c.Name());
      const std::shared_ptr<const RopeTable> table =
          test::PlainTable(c.rotary_dim, test::kAttentionGridMaxLen);
      AttentionData want = test::MakeAttentionData(c, 5);
      AttentionData got = test::MakeAttentionData(c, 5);
      ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
      const absl::Status status = cuda->AttentionScores(*table, got.Args(c));
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << "scores";
      EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << "output";
    }
  }
}

// A call with interrupt checks in every phase: q, k, v and the output one
// staging chunk each, the scores two, and 8 compute chunks (one head each).
AttentionCase InterruptCase() {
  AttentionCase c;
  c.dtype = DType::kFloat16;
  c.batch = 2;
  c.q_seq = 48;
  c.k_seq = 64;
  c.q_heads = 4;
  c.k_heads = 2;
  c.head_dim = 64;
  c.rotary_dim = 64;
  c.v_dim = 32;
  c.causal = true;
  c.softmax = true;
  return c;
}

kernels::AttentionDims DimsOf(const AttentionCase& c) {
  kernels::AttentionDims d;
  d.batch = c.batch;
  d.q_seq = c.q_seq;
  d.k_seq = c.k_seq;
  d.q_heads = c.q_heads;
  d.k_heads = c.k_heads;
  d.head_dim = c.head_dim;
  d.v_dim = c.v_dim;
  return d;
}

// One worker context, so that the call after a stopped one reuses the
// stopped call's context.
CudaBackendOptions InterruptOptions(const AttentionCase& c) {
  CudaBackendOptions options;
  options.contexts = 1;
  options.staging_bytes = 64 << 10;
  const kernels::AttentionDims d = DimsOf(c);
  options.attention_chunk_work =
      static_cast<int64_t>(static_cast<double>(c.q_seq * c.k_seq) * kernels::WorkPerScore(d));
  return options;
}

// An uninterrupted call on `cuda` matches the CPU backend.
void ExpectAttentionMatchesCpu(Backend& cuda, const AttentionCase& c,
                               const Interrupt* interrupt = nullptr) {
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, 4096);
  AttentionData want = test::MakeAttentionData(c, 21);
  AttentionData got = test::MakeAttentionData(c, 21);
  ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
  AttentionArgs args = got.Args(c);
  args.interrupt = interrupt;
  const absl::Status status = cuda.AttentionScores(*table, args);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << "scores";
  EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << "output";
}

absl::Status AttentionWith(Backend& cuda, const AttentionCase& c, const Interrupt& interrupt) {
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, 4096);
  AttentionData data = test::MakeAttentionData(c, 21);
  AttentionArgs args = data.Args(c);
  args.interrupt = &interrupt;
  return cuda.AttentionScores(*table, args);
}

TEST_F(CudaBackendTest, AttentionOfACancelledCallerIsCancelledAndTheNextCallSucceeds) {
  const AttentionCase c = InterruptCase();
  std::unique_ptr<Backend> cuda = MakeBackend(InterruptOptions(c));
  ASSERT_NE(cuda, nullptr);
  const Interrupt cancelled([] { return true; }, absl::InfiniteFuture());
  EXPECT_TRUE(StatusIs(AttentionWith(*cuda, c, cancelled), absl::StatusCode::kCancelled,
                       "AttentionScores stopped: the caller cancelled"));
  ExpectAttentionMatchesCpu(*cuda, c);
}

TEST_F(CudaBackendTest, AttentionPastItsDeadlineIsDeadlineExceededAndTheNextCallSucceeds) {
  const AttentionCase c = InterruptCase();
  std::unique_ptr<Backend> cuda = MakeBackend(InterruptOptions(c));
  ASSERT_NE(cuda, nullptr);
  const Interrupt late(nullptr, absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(StatusIs(AttentionWith(*cuda, c, late), absl::StatusCode::kDeadlineExceeded,
                       "AttentionScores stopped: the caller's deadline passed"));
  ExpectAttentionMatchesCpu(*cuda, c);
}

// The caller goes away at the k-th check, for every k: in the uploads,
// between compute chunks, in the downloads. The call stops at that very
// check (no further polls), and the context it leaves behind serves the next
// call correctly.
TEST_F(CudaBackendTest, AttentionStopsAtTheCheckThatFindsItCancelledAtEveryCheck) {
  const AttentionCase c = InterruptCase();
  std::unique_ptr<Backend> cuda = MakeBackend(InterruptOptions(c));
  ASSERT_NE(cuda, nullptr);
  int checks = 0;
  const Interrupt counting([&checks] { return ++checks < 0; }, absl::InfiniteFuture());
  ExpectAttentionMatchesCpu(*cuda, c, &counting);
  const size_t chunks =
      kernels::PlanAttentionChunks(DimsOf(c), InterruptOptions(c).attention_chunk_work).size();
  EXPECT_EQ(chunks, 8u);
  // 3 uploads and 2 downloads of 1 staging chunk, scores 2, and the chunks.
  EXPECT_EQ(checks, static_cast<int>(3 + chunks + 3));
  ASSERT_LE(checks, 100);
  for (int k = 1; k <= checks; ++k) {
    SCOPED_TRACE(k);
    int polls = 0;
    const Interrupt at_k([&polls, k] { return ++polls >= k; }, absl::InfiniteFuture());
    EXPECT_TRUE(StatusIs(AttentionWith(*cuda, c, at_k), absl::StatusCode::kCancelled,
                         "AttentionScores stopped"));
    EXPECT_EQ(polls, k);
    ExpectAttentionMatchesCpu(*cuda, c);
  }
}

// A long call (~2 T float32 operations: ~10 chunks of the automatic size on
// an H100/H200) cancelled in the middle of its compute chunks. Prints how
// long the call took to return after the cancellation was seen by the
// check (the device runs out the chunks already enqueued): a measurement
// for the GPU run's report, not an assertion.
TEST_F(CudaBackendTest, LongAttentionCancelledMidwayStopsAndReportsHowSoon) {
  if (test::DeviceIsFake()) GTEST_SKIP() << "~2 T operations: too long for host-emulated kernels";
  int device = 0;
  cudaDeviceProp properties;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaGetDeviceProperties(&properties, device), cudaSuccess);
  CudaBackendOptions options;
  options.contexts = 1;
  const double chunk_work = 2147483648.0 * properties.multiProcessorCount;  // the automatic size
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);

  AttentionArgs args;
  args.dtype = DType::kFloat16;
  args.batch = 1;
  args.q_seq = 4096;
  args.k_seq = 4096;
  args.q_heads = 8;
  args.k_heads = 8;
  args.head_dim = 8192;
  args.rotary_dim = 128;
  args.q_positions.seq = args.q_seq;
  args.k_positions.seq = args.k_seq;
  args.causal = true;
  args.softmax = true;
  args.scale = 1.0f / 90.5f;
  const int64_t elems = args.q_seq * args.q_heads * args.head_dim;
  std::vector<uint16_t> q(elems, 0x2c00), k(elems, 0x2c00);  // 0.0625 in float16
  std::vector<float> scores(args.q_heads * args.q_seq * args.k_seq);
  args.q = q.data();
  args.k = k.data();
  args.scores = scores.data();
  kernels::AttentionDims d;
  d.batch = 1;
  d.q_seq = args.q_seq;
  d.k_seq = args.k_seq;
  d.q_heads = args.q_heads;
  d.k_heads = args.k_heads;
  d.head_dim = args.head_dim;
  const int64_t chunks = static_cast<int64_t>(kernels::PlanAttentionChunks(d, chunk_work).size());
  const int64_t staging = options.staging_bytes;
  const int64_t upload_checks = 2 * ((elems * 2 + staging - 1) / staging);
  const std::shared_ptr<const RopeTable> table = test::PlainTable(args.rotary_dim, 4096);

  int checks = 0;
  const Interrupt counting([&checks] { return ++checks < 0; }, absl::InfiniteFuture());
  args.interrupt = &counting;
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(cuda->AttentionScores(*table, args).ok());
  const double whole_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  const int trip = static_cast<int>(upload_checks + chunks / 2 + 1);
  int polls = 0;
  std::chrono::steady_clock::time_point tripped;
  const Interrupt midway(
      [&] {
        if (++polls < trip) return false;
        tripped = std::chrono::steady_clock::now();
        return true;
      },
      absl::InfiniteFuture());
  args.interrupt = &midway;
  EXPECT_TRUE(StatusIs(cuda->AttentionScores(*table, args), absl::StatusCode::kCancelled,
                       "AttentionScores stopped"));
  const double stop_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tripped).count();
  EXPECT_EQ(polls, trip);
  std::printf("long attention: %lld compute chunks of %.3g operations, %d checks, whole call "
              "%.1f ms; cancelled at check %d (compute chunk %lld): returned %.2f ms later\n",
              static_cast<long long>(chunks), chunk_work, checks, whole_ms, trip,
              static_cast<long long>(chunks / 2 + 1), stop_ms);
  ExpectAttentionMatchesCpu(*cuda, InterruptCase());
}

}  // namespace
}  // namespace rope
