// The CUDA backend's host side on the fake CUDA runtime (tests/cuda/
// fake_runtime: host memory, queued streams, host-emulated kernels, faults
// on demand): what a device run cannot show cheaply. Allocation failures at
// every call site, sticky errors at every call site, a table evicted while
// a cancelled call's kernels still read it, recoverable errors left in the
// thread's last-error slot, the pool of worker contexts after a fault, and
// memory that is stream-ordered and given back. And the fake's own CUDA IPC
// (exported by a child process, tests/cuda/ipc_exporter.h), pointer
// attributes and driver entry point. Every test also requires that the
// backend never misused the runtime (unknown handles, bad frees).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
#include "core/backends/cuda/cublas_api.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/cuda_status.h"
#include "core/backends/cuda/worker_context.h"
#include "core/engine/interrupt.h"
#include "tests/cuda/backend_cases.h"
#include "tests/cuda/device_under_test.h"
#include "tests/cuda/fake_runtime/fake_cuda_control.h"
#include "tests/cuda/ipc_exporter.h"

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

constexpr int64_t kStaging = 64 << 10;

CudaBackendOptions SmallOptions() {
  CudaBackendOptions options;
  options.staging_bytes = kStaging;
  options.contexts = 1;
  return options;
}

// bfloat16, explicit positions (uploaded), GQA.
RotateCase SmallRotate() {
  RotateCase c;
  c.dtype = DType::kBFloat16;
  c.layout = Layout::kHalf;
  c.batch = 2;
  c.seq = 5;
  c.q_heads = 4;
  c.k_heads = 2;
  c.head_dim = 64;
  c.rotary_dim = 64;
  c.positions = test::PositionMode::kPerToken;
  return c;
}

// One token (400 heads x 128 float32, 200 KiB) larger than a staging slot:
// the slots grow for the call.
RotateCase LargeTokenRotate() {
  RotateCase c;
  c.seq = 2;
  c.q_heads = 300;
  c.k_heads = 100;
  c.head_dim = 128;
  c.rotary_dim = 96;
  return c;
}

// q, k and v one staging chunk each; chunks of one work unit each.
AttentionCase SmallAttention() {
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

// Rotates `c` on `cuda`; when that succeeds, the bytes must be the CPU
// backend's.
absl::Status CheckedRotate(Backend& cuda, const RotateCase& c) {
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
  RotateData want = test::MakeRotateData(c, 3);
  RotateData got = test::MakeRotateData(c, 3);
  EXPECT_TRUE(test::CpuBackend().Rotate(*table, want.Args(c)).ok());
  const absl::Status status = cuda.Rotate(*table, got.Args(c));
  if (status.ok()) {
    EXPECT_TRUE(got.q == want.q) << c.Name() << ": q differs from the CPU backend's";
    EXPECT_TRUE(got.k == want.k) << c.Name() << ": k differs from the CPU backend's";
  }
  return status;
}

absl::Status CheckedAttention(Backend& cuda, const AttentionCase& c,
                              const Interrupt* interrupt = nullptr) {
  const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, 4096);
  AttentionData want = test::MakeAttentionData(c, 5);
  AttentionData got = test::MakeAttentionData(c, 5);
  EXPECT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
  AttentionArgs args = got.Args(c);
  args.interrupt = interrupt;
  const absl::Status status = cuda.AttentionScores(*table, args);
  if (status.ok()) {
    EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << c.Name() << ": scores";
    EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << c.Name() << ": output";
  }
  return status;
}

// The calls every fault test makes: positions uploaded, slots grown for one
// call, attention with v in chunks.
std::vector<absl::Status> RunSequence(Backend& cuda) {
  return {CheckedRotate(cuda, SmallRotate()), CheckedRotate(cuda, LargeTokenRotate()),
          CheckedAttention(cuda, SmallAttention())};
}

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { test::PrepareDevice(); }
  void TearDown() override {
    EXPECT_EQ(RopeFakeCudaMisuses(), 0) << "the backend misused the CUDA runtime (see stderr)";
  }

  static std::unique_ptr<Backend> MakeBackend(const CudaBackendOptions& options = SmallOptions()) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }
};

// ---- Memory: stream-ordered, given back -------------------------------------------

TEST_F(FakeCudaTest, DeviceMemoryIsStreamOrderedAndAllGivenBack) {
  CudaBackendOptions options = SmallOptions();
  options.contexts = 2;
  // Room for one table: each new rotary_dim evicts the last.
  options.table_cache_bytes = test::PlainTable(96, 4096)->byte_size();
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);
  for (int round = 0; round < 2; ++round) {
    for (const absl::Status& status : RunSequence(*cuda)) EXPECT_TRUE(status.ok()) << status;
  }
  // Per round: rotary_dim 64, 96 (evicting 64), 64 again (evicting 96).
  EXPECT_EQ(cuda->info().device_table_cache->evictions, 4);
  cuda.reset();
  // cudaMalloc and cudaFree wait for the whole device; nothing may use them.
  EXPECT_EQ(RopeFakeCudaCalls("cudaMalloc"), 0);
  EXPECT_EQ(RopeFakeCudaCalls("cudaFree"), 0);
  EXPECT_GT(RopeFakeCudaCalls("cudaMallocAsync"), 0);
  EXPECT_EQ(RopeFakeCudaCalls("cudaFreeAsync"), RopeFakeCudaCalls("cudaMallocAsync"));
  EXPECT_EQ(RopeFakeCudaDeviceBytes(), 0);
  EXPECT_EQ(RopeFakeCudaPinnedBytes(), 0);
  EXPECT_EQ(RopeFakeCudaPoolReleaseThreshold(),
            static_cast<uint64_t>(options.keep_workspace_bytes));
}

TEST_F(FakeCudaTest, DeviceWithoutMemoryPoolsIsFailedPrecondition) {
  RopeFakeCudaSetMemoryPoolsSupported(0);
  EXPECT_TRUE(StatusIs(NewCudaBackend(0, SmallOptions()).status(),
                       absl::StatusCode::kFailedPrecondition, "cudaDevAttrMemoryPoolsSupported"));
}

// ---- Pinned staging slots ----------------------------------------------------------

// A slot whose pinned buffer could not grow keeps the one it had (it used
// to be freed first, leaving a null slot in a context back in the pool, that
// the next AttentionScores upload wrote through).
TEST_F(FakeCudaTest, StagingSlotThatCannotGrowKeepsItsBufferAndTheNextCallsSucceed) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  RopeFakeCudaFailCall("cudaMallocHost", 1, cudaErrorMemoryAllocation);
  EXPECT_TRUE(StatusIs(CheckedRotate(*cuda, LargeTokenRotate()),
                       absl::StatusCode::kResourceExhausted,
                       "bytes of pinned host memory for a staging buffer"));
  EXPECT_EQ(RopeFakeCudaPinnedBytes(), 2 * kStaging) << "a slot lost its staging buffer";
  EXPECT_TRUE(CheckedAttention(*cuda, SmallAttention()).ok());
  EXPECT_TRUE(CheckedRotate(*cuda, SmallRotate()).ok());
  EXPECT_TRUE(CheckedRotate(*cuda, LargeTokenRotate()).ok());
}

// One large call used to pin twice its size per context for good.
TEST_F(FakeCudaTest, SlotsGrownByALargeCallAreShrunkWhenItEnds) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  const int64_t pinned = RopeFakeCudaPinnedBytes();
  EXPECT_EQ(pinned, 2 * kStaging);
  const int64_t device = RopeFakeCudaDeviceBytes();
  const int64_t table = test::PlainTable(LargeTokenRotate().rotary_dim, 4096)->byte_size();
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(CheckedRotate(*cuda, LargeTokenRotate()).ok());
    // Kept: the call's (small) pinned buffer of block pointers, cos and sin.
    EXPECT_EQ(RopeFakeCudaPinnedBytes(), pinned + 2 * sizeof(const float*));
    // The table's block and the call's block pointers.
    EXPECT_LE(RopeFakeCudaDeviceBytes(), device + table + 2 * sizeof(const float*));
  }
  EXPECT_TRUE(CheckedRotate(*cuda, SmallRotate()).ok());
}

// The staged copies make sure of their slots themselves, whatever state a
// failed call left them in.
TEST_F(FakeCudaTest, StagedCopiesReserveTheirPinnedSlotsFirst) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const absl::StatusOr<const CublasApi*> cublas = LoadCublas();
  ASSERT_TRUE(cublas.ok()) << cublas.status();
  absl::StatusOr<std::unique_ptr<WorkerContext>> context =
      WorkerContext::Create(SmallOptions(), **cublas);
  ASSERT_TRUE(context.ok()) << context.status();
  WorkerContext& c = **context;
  for (int i = 0; i < WorkerContext::kSlots; ++i) c.slot(i).host.Release();

  std::vector<char> in(3 * kStaging + 123), out(in.size());
  std::mt19937 random(7);
  for (char& byte : in) byte = static_cast<char>(random());
  DeviceBuffer device;  // destroyed before the context (its stream)
  ASSERT_TRUE(device.Reserve(static_cast<int64_t>(in.size()), "a test", c.compute_stream()).ok());
  ASSERT_TRUE(c.SlotsWaitForCompute().ok());
  const int64_t bytes = static_cast<int64_t>(in.size());
  ASSERT_TRUE(c.UploadStaged(in.data(), device.data(), bytes).ok());
  for (int i = 0; i < WorkerContext::kSlots; ++i) c.slot(i).host.Release();
  ASSERT_TRUE(c.DownloadStaged(device.data(), out.data(), bytes).ok());
  EXPECT_TRUE(in == out);
}

// ---- Errors left in the thread's last-error slot ---------------------------------

TEST_F(FakeCudaTest, CudaStatusClearsTheThreadsLastError) {
  RopeFakeCudaFailCall("cudaStreamCreateWithFlags", 1, cudaErrorInvalidValue);
  cudaStream_t stream = nullptr;
  const cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  ASSERT_EQ(error, cudaErrorInvalidValue);
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_TRUE(StatusIs(CudaStatus(error, "creating a stream"), absl::StatusCode::kInternal,
                       "creating a stream: cudaErrorInvalidValue"));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// A recoverable error used to stay in the thread's last-error slot, where
// the next call's first kernel launcher (cudaGetLastError) took it for its
// own.
TEST_F(FakeCudaTest, RecoverableErrorInOneCallDoesNotFailTheNextOnTheSameThread) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  RopeFakeCudaFailCall("cudaStreamWaitEvent", 1, cudaErrorInvalidValue);
  EXPECT_TRUE(StatusIs(CheckedAttention(*cuda, SmallAttention()), absl::StatusCode::kInternal,
                       "cudaErrorInvalidValue"));
  EXPECT_TRUE(CheckedRotate(*cuda, SmallRotate()).ok());
  EXPECT_TRUE(CheckedAttention(*cuda, SmallAttention()).ok());
  EXPECT_EQ(cuda->info().fault, "");
}

// ---- A table evicted during a call -------------------------------------------------

// The caller of an AttentionScores call goes away at its first compute
// chunk, while the rotated copies that read the table are still queued; at
// that very moment another call (on another context) evicts the table. The
// table must outlive the queued kernels: the cancelled call's lease waits
// for them before the call lets go of the table (it used to be the other
// way round, freeing memory a queued kernel then read).
TEST_F(FakeCudaTest, TableEvictedDuringACancelledCallOutlivesTheKernelsStillQueued) {
  const AttentionCase c = SmallAttention();
  const std::shared_ptr<const RopeTable> attention_table = test::PlainTable(c.rotary_dim, 4096);
  const RotateCase other = SmallRotate();
  const std::shared_ptr<const RopeTable> other_table =
      test::PlainTable(other.rotary_dim, other.max_len + 1);
  CudaBackendOptions options = SmallOptions();
  options.contexts = 2;
  options.attention_chunk_work = 1;  // many compute chunks
  options.table_cache_bytes = attention_table->byte_size() + other_table->byte_size() - 1;
  std::unique_ptr<Backend> cuda = MakeBackend(options);
  ASSERT_NE(cuda, nullptr);

  int polls = 0;
  absl::Status evicting_call;
  // Polls 1-3: the uploads of q, k and v; poll 4: the first compute chunk.
  const Interrupt evict_then_cancel(
      [&] {
        if (++polls < 4) return false;
        RotateCase r = other;
        r.max_len = other.max_len + 1;
        RotateData d = test::MakeRotateData(r, 1);
        evicting_call = cuda->Rotate(*other_table, d.Args(r));
        return true;
      },
      absl::InfiniteFuture());
  AttentionData data = test::MakeAttentionData(c, 5);
  AttentionArgs args = data.Args(c);
  args.interrupt = &evict_then_cancel;
  EXPECT_TRUE(StatusIs(cuda->AttentionScores(*attention_table, args), absl::StatusCode::kCancelled,
                       "AttentionScores stopped"));
  EXPECT_EQ(polls, 4);
  EXPECT_TRUE(evicting_call.ok()) << evicting_call;
  EXPECT_EQ(cuda->info().device_table_cache->evictions, 1);
  EXPECT_EQ(RopeFakeCudaStickyError(), cudaSuccess)
      << "a queued kernel read memory freed under it (see stderr)";
  EXPECT_EQ(cuda->info().fault, "");
  EXPECT_TRUE(CheckedAttention(*cuda, c).ok());
}

// ---- Sticky errors -----------------------------------------------------------------

TEST_F(FakeCudaTest, StickyErrorFaultsTheBackendAndLaterCallsAreRefusedAtOnce) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->info().fault, "");
  RopeFakeCudaFailCall("kernel", 1, cudaErrorIllegalAddress);
  const absl::Status failed = CheckedRotate(*cuda, SmallRotate());
  EXPECT_TRUE(StatusIs(failed, absl::StatusCode::kInternal, "cudaErrorIllegalAddress"));
  EXPECT_TRUE(StatusIs(failed, absl::StatusCode::kInternal, "until the process restarts"));
  const std::string fault = cuda->info().fault;
  EXPECT_NE(fault.find("CUDA device 0 is unusable"), std::string::npos) << fault;
  EXPECT_NE(fault.find("cudaErrorIllegalAddress"), std::string::npos) << fault;
  const int64_t calls = RopeFakeCudaCalls("cudaMemcpyAsync");
  EXPECT_TRUE(StatusIs(CheckedRotate(*cuda, SmallRotate()), absl::StatusCode::kUnavailable,
                       "CUDA device 0 failed earlier and cannot be used again"));
  EXPECT_TRUE(StatusIs(CheckedAttention(*cuda, SmallAttention()), absl::StatusCode::kUnavailable,
                       "cudaErrorIllegalAddress"));
  EXPECT_EQ(RopeFakeCudaCalls("cudaMemcpyAsync"), calls) << "refused calls still used the device";
}

// Calls waiting for the only context when it breaks are refused, not left
// waiting for ever or handed the broken context.
TEST_F(FakeCudaTest, CallWaitingForTheContextThatBreaksIsRefused) {
  std::unique_ptr<Backend> cuda = MakeBackend();
  ASSERT_NE(cuda, nullptr);
  RopeFakeCudaFailCall("kernel", 1, cudaErrorLaunchFailure);
  absl::Status waiter_status;
  std::thread waiter;
  int polls = 0;
  const Interrupt start_waiter(
      [&] {
        if (++polls == 4) {
          waiter = std::thread([&] { waiter_status = CheckedRotate(*cuda, SmallRotate()); });
          absl::SleepFor(absl::Milliseconds(200));  // it waits for the context meanwhile
        }
        return false;
      },
      absl::InfiniteFuture());
  EXPECT_TRUE(StatusIs(CheckedAttention(*cuda, SmallAttention(), &start_waiter),
                       absl::StatusCode::kInternal, "cudaErrorLaunchFailure"));
  ASSERT_TRUE(waiter.joinable());
  waiter.join();
  EXPECT_TRUE(StatusIs(waiter_status, absl::StatusCode::kUnavailable, "failed earlier"));
}

// The runtime calls a Rotate and an AttentionScores make, by function: the
// sites where a fault can be injected.
const char* const kCallSites[] = {
    "cudaMallocAsync",          "cudaMallocHost",      "cudaMemcpyAsync",
    "cudaEventRecord",          "cudaStreamWaitEvent", "cudaEventSynchronize",
    "cudaStreamSynchronize",    "cudaLaunchKernel",    "kernel",
    "cublasSgemmStridedBatched"};

std::vector<std::pair<std::string, int64_t>> CountCallSites(const CudaBackendOptions& options) {
  test::PrepareDevice();
  absl::StatusOr<std::unique_ptr<Backend>> cuda = NewCudaBackend(0, options);
  EXPECT_TRUE(cuda.ok()) << cuda.status();
  std::vector<std::pair<std::string, int64_t>> sites;
  if (!cuda.ok()) return sites;
  std::vector<int64_t> before;
  for (const char* f : kCallSites) before.push_back(RopeFakeCudaCalls(f));
  for (const absl::Status& status : RunSequence(**cuda)) EXPECT_TRUE(status.ok()) << status;
  for (size_t i = 0; i < std::size(kCallSites); ++i) {
    sites.emplace_back(kCallSites[i], RopeFakeCudaCalls(kCallSites[i]) - before[i]);
  }
  return sites;
}

// A sticky error at the n-th call of each runtime function a Rotate and an
// AttentionScores make: the call that meets it fails with INTERNAL naming
// it (or, when only the lease's final wait meets it, the call has its
// results and the next is refused), the backend reports the fault, every
// later call is refused with UNAVAILABLE, and nothing crashes or misuses
// the runtime on the way.
TEST_F(FakeCudaTest, StickyErrorAtEveryCallSiteFaultsTheBackendCleanly) {
  const CudaBackendOptions options = SmallOptions();
  int cases = 0;
  for (const auto& [function, count] : CountCallSites(options)) {
    if (function == "cublasSgemmStridedBatched") continue;  // returns a cuBLAS status
    for (int64_t n = 1; n <= count; ++n) {
      SCOPED_TRACE(absl::StrCat(function, " call ", n));
      test::PrepareDevice();
      std::unique_ptr<Backend> cuda = MakeBackend(options);
      ASSERT_NE(cuda, nullptr);
      RopeFakeCudaFailCall(function.c_str(), n, cudaErrorLaunchFailure);
      const std::vector<absl::Status> results = RunSequence(*cuda);
      size_t first = 0;
      while (first < results.size() && results[first].ok()) ++first;
      if (first < results.size() && results[first].code() == absl::StatusCode::kInternal) {
        // Named by the runtime call that met it, or by cuBLAS for a GEMM.
        const std::string message(results[first].message());
        EXPECT_TRUE(message.find("cudaErrorLaunchFailure") != std::string::npos ||
                    message.find("CUBLAS_STATUS_EXECUTION_FAILED") != std::string::npos)
            << message;
        ++first;
      }
      for (size_t i = first; i < results.size(); ++i) {
        EXPECT_TRUE(StatusIs(results[i], absl::StatusCode::kUnavailable, "failed earlier"));
      }
      EXPECT_NE(cuda->info().fault.find("cudaErrorLaunchFailure"), std::string::npos)
          << cuda->info().fault;
      EXPECT_TRUE(StatusIs(CheckedRotate(*cuda, SmallRotate()), absl::StatusCode::kUnavailable,
                           "cudaErrorLaunchFailure"));
      ++cases;
    }
  }
  EXPECT_GT(cases, 20);
  EXPECT_EQ(RopeFakeCudaMisuses(), 0);
}

// ---- Allocation failures -----------------------------------------------------------

// An allocation failing at the n-th cudaMallocAsync or cudaMallocHost of
// the calls: that call alone fails, with RESOURCE_EXHAUSTED naming what it
// was allocating (none does when it was a lease shrinking a staging slot
// back, which then keeps the larger one); the others, and every call after,
// match the CPU backend; and everything is given back when the backend
// goes.
TEST_F(FakeCudaTest, AllocationFailureAtEveryCallSiteFailsOnlyThatCall) {
  const CudaBackendOptions options = SmallOptions();
  int cases = 0;
  for (const auto& [function, count] : CountCallSites(options)) {
    if (function != "cudaMallocAsync" && function != "cudaMallocHost") continue;
    for (int64_t n = 1; n <= count; ++n) {
      SCOPED_TRACE(absl::StrCat(function, " call ", n));
      test::PrepareDevice();
      std::unique_ptr<Backend> cuda = MakeBackend(options);
      ASSERT_NE(cuda, nullptr);
      RopeFakeCudaFailCall(function.c_str(), n, cudaErrorMemoryAllocation);
      int failed = 0;
      for (const absl::Status& status : RunSequence(*cuda)) {
        if (status.ok()) continue;
        ++failed;
        EXPECT_TRUE(StatusIs(status, absl::StatusCode::kResourceExhausted,
                             function == "cudaMallocHost" ? "bytes of pinned host memory for"
                                                          : "bytes of device memory for"));
      }
      EXPECT_LE(failed, 1);
      if (failed == 0) {
        EXPECT_EQ(function, "cudaMallocHost") << "only a lease shrinking a slot may absorb it";
      }
      for (const absl::Status& status : RunSequence(*cuda)) EXPECT_TRUE(status.ok()) << status;
      EXPECT_EQ(cuda->info().fault, "");
      cuda.reset();
      EXPECT_EQ(RopeFakeCudaDeviceBytes(), 0);
      EXPECT_EQ(RopeFakeCudaPinnedBytes(), 0);
      ++cases;
    }
  }
  EXPECT_GT(cases, 10);
}

// The same while the backend starts (its first worker context): refused
// with RESOURCE_EXHAUSTED, and nothing left allocated.
TEST_F(FakeCudaTest, AllocationFailureWhileStartingIsResourceExhaustedAndLeaksNothing) {
  struct Site {
    const char* function;
    int error;
    const char* message;
  };
  const Site sites[] = {
      {"cudaMallocHost", cudaErrorMemoryAllocation, "bytes of pinned host memory for"},
      {"cudaMallocAsync", cudaErrorMemoryAllocation, "bytes of device memory for"},
      {"cublasCreate_v2", CUBLAS_STATUS_ALLOC_FAILED, "creating a cuBLAS handle"}};
  for (const Site& site : sites) {
    for (int64_t n = 1; n <= 2; ++n) {
      SCOPED_TRACE(absl::StrCat(site.function, " call ", n));
      if (n == 2 && std::string(site.function) == "cublasCreate_v2") continue;
      test::PrepareDevice();
      RopeFakeCudaFailCall(site.function, n, site.error);
      EXPECT_TRUE(StatusIs(NewCudaBackend(0, SmallOptions()).status(),
                           absl::StatusCode::kResourceExhausted, site.message));
      EXPECT_EQ(RopeFakeCudaDeviceBytes(), 0);
      EXPECT_EQ(RopeFakeCudaPinnedBytes(), 0);
    }
  }
}

// ---- CUDA IPC ---------------------------------------------------------------------

using test::IpcExporter;

std::vector<uint8_t> RandomBytes(size_t size, unsigned seed) {
  std::vector<uint8_t> bytes(size);
  std::mt19937 random(seed);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(random());
  return bytes;
}

cudaIpcMemHandle_t HandleOf(const std::string& bytes) {
  cudaIpcMemHandle_t handle;
  EXPECT_EQ(bytes.size(), sizeof(handle));
  std::memset(&handle, 0, sizeof(handle));
  std::memcpy(&handle, bytes.data(), std::min(bytes.size(), sizeof(handle)));
  return handle;
}

std::vector<uint8_t> Download(const void* p, size_t size) {
  std::vector<uint8_t> bytes(size);
  EXPECT_EQ(cudaMemcpy(bytes.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
  return bytes;
}

std::unique_ptr<IpcExporter> StartExporter(const std::vector<uint8_t>& contents, int device = 0) {
  absl::StatusOr<std::unique_ptr<IpcExporter>> exporter = IpcExporter::Start(contents, device);
  EXPECT_TRUE(exporter.ok()) << exporter.status();
  return exporter.ok() ? *std::move(exporter) : nullptr;
}

class FakeCudaIpcTest : public FakeCudaTest {
 protected:
  void TearDown() override {
    EXPECT_EQ(RopeFakeCudaImportedMappings(), 0) << "an imported mapping was left open";
    FakeCudaTest::TearDown();
  }
};

TEST_F(FakeCudaIpcTest, HandleFromAnotherProcessOpensItsAllocationBothWays) {
  const std::vector<uint8_t> contents = RandomBytes(10000, 1);
  std::unique_ptr<IpcExporter> exporter = StartExporter(contents);
  ASSERT_NE(exporter, nullptr);
  EXPECT_EQ(exporter->handle().size(), 64u);
  void* p = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, HandleOf(exporter->handle()), cudaIpcMemLazyEnablePeerAccess),
            cudaSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 1);
  EXPECT_EQ(RopeFakeCudaDeviceBytes(), 0) << "imported memory is the exporter's";
  EXPECT_TRUE(Download(p, contents.size()) == contents);
  EXPECT_EQ(RopeFakeCudaCheckAccess(p, static_cast<int64_t>(contents.size())), 1);

  // A write through the mapping is the exporter's allocation.
  std::vector<uint8_t> want = contents;
  const std::vector<uint8_t> patch = RandomBytes(300, 2);
  std::copy(patch.begin(), patch.end(), want.begin() + 4000);
  ASSERT_EQ(
      cudaMemcpy(static_cast<char*>(p) + 4000, patch.data(), patch.size(), cudaMemcpyHostToDevice),
      cudaSuccess);
  const absl::StatusOr<std::vector<uint8_t>> read_back = exporter->ReadBack();
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  EXPECT_TRUE(*read_back == want);

  EXPECT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 0);
  EXPECT_TRUE(exporter->Stop().ok());
  EXPECT_EQ(RopeFakeCudaCalls("cudaIpcOpenMemHandle"), 1);
  EXPECT_EQ(RopeFakeCudaCalls("cudaIpcCloseMemHandle"), 1);
}

TEST_F(FakeCudaIpcTest, OpeningAHandleTwiceGivesTheSamePointerUntilClosedTwice) {
  const std::vector<uint8_t> contents = RandomBytes(4096, 3);
  std::unique_ptr<IpcExporter> exporter = StartExporter(contents);
  ASSERT_NE(exporter, nullptr);
  const cudaIpcMemHandle_t handle = HandleOf(exporter->handle());
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&first, handle, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  ASSERT_EQ(cudaIpcOpenMemHandle(&second, handle, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  EXPECT_EQ(first, second);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 1);
  EXPECT_EQ(cudaIpcCloseMemHandle(first), cudaSuccess);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 1);
  EXPECT_TRUE(Download(second, contents.size()) == contents) << "closed at the first close";
  EXPECT_EQ(cudaIpcCloseMemHandle(second), cudaSuccess);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 0);
}

// As the real runtime does: a process cannot open its own handle.
TEST_F(FakeCudaIpcTest, OnlyTheStartOfACudaMallocAllocationExportsAndNotToItself) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(RopeFakeCudaDeviceBytes(), 1000);
  cudaIpcMemHandle_t handle;
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, p), cudaSuccess);
  void* opened = reinterpret_cast<void*>(1);
  EXPECT_EQ(cudaIpcOpenMemHandle(&opened, handle, cudaIpcMemLazyEnablePeerAccess),
            cudaErrorInvalidValue);
  EXPECT_EQ(opened, nullptr);
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, static_cast<char*>(p) + 256), cudaErrorInvalidValue);

  void* async = nullptr;
  ASSERT_EQ(cudaMallocAsync(&async, 1000, nullptr), cudaSuccess);
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, async), cudaErrorInvalidValue) << "stream-ordered";
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 1000), cudaSuccess);
  EXPECT_EQ(cudaIpcGetMemHandle(&handle, pinned), cudaErrorInvalidValue) << "pinned";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);

  EXPECT_EQ(cudaFreeAsync(async, nullptr), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(RopeFakeCudaDeviceBytes(), 0);
}

TEST_F(FakeCudaIpcTest, HandlesOfAnotherKindAndFlagsOtherThanLazyPeerAccessAreRefused) {
  std::unique_ptr<IpcExporter> exporter = StartExporter(RandomBytes(100, 4));
  ASSERT_NE(exporter, nullptr);
  void* p = nullptr;
  std::string bad_magic = exporter->handle();
  bad_magic[0] ^= 1;
  EXPECT_EQ(cudaIpcOpenMemHandle(&p, HandleOf(bad_magic), cudaIpcMemLazyEnablePeerAccess),
            cudaErrorInvalidValue);
  EXPECT_EQ(
      cudaIpcOpenMemHandle(&p, HandleOf(std::string(64, '\0')), cudaIpcMemLazyEnablePeerAccess),
      cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcOpenMemHandle(&p, HandleOf(exporter->handle()), 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcOpenMemHandle(&p, HandleOf(exporter->handle()), 2), cudaErrorInvalidValue);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 0);
}

// An open mapping outlives the exporter; its handle cannot be opened again.
TEST_F(FakeCudaIpcTest, HandleOfAnExporterThatExitedFailsToMap) {
  const std::vector<uint8_t> contents = RandomBytes(5000, 5);
  std::unique_ptr<IpcExporter> exporter = StartExporter(contents);
  ASSERT_NE(exporter, nullptr);
  const cudaIpcMemHandle_t handle = HandleOf(exporter->handle());
  void* p = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  EXPECT_TRUE(exporter->Stop().ok());
  EXPECT_TRUE(Download(p, contents.size()) == contents);
  void* again = nullptr;
  EXPECT_EQ(cudaIpcOpenMemHandle(&again, handle, cudaIpcMemLazyEnablePeerAccess),
            cudaErrorMapBufferObjectFailed);
  EXPECT_EQ(again, nullptr);
  EXPECT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  EXPECT_EQ(cudaIpcOpenMemHandle(&again, handle, cudaIpcMemLazyEnablePeerAccess),
            cudaErrorMapBufferObjectFailed);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 0);
}

TEST_F(FakeCudaIpcTest, FaultInjectedIntoAnOpenFailsThatOpenOnlyAndAStickyOneStillCloses) {
  std::unique_ptr<IpcExporter> exporter = StartExporter(RandomBytes(100, 6));
  ASSERT_NE(exporter, nullptr);
  const cudaIpcMemHandle_t handle = HandleOf(exporter->handle());
  void* p = nullptr;
  RopeFakeCudaFailCall("cudaIpcOpenMemHandle", 1, cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess),
            cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 0);
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  EXPECT_EQ(RopeFakeCudaCalls("cudaIpcOpenMemHandle"), 2);

  RopeFakeCudaFailCall("cudaIpcOpenMemHandle", 1, cudaErrorIllegalAddress);
  void* again = nullptr;
  EXPECT_EQ(cudaIpcOpenMemHandle(&again, handle, cudaIpcMemLazyEnablePeerAccess),
            cudaErrorIllegalAddress);
  EXPECT_EQ(RopeFakeCudaStickyError(), cudaErrorIllegalAddress);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 1);
  EXPECT_EQ(cudaIpcCloseMemHandle(p), cudaErrorIllegalAddress) << "the context's error";
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 0) << "closed all the same";
  RopeFakeCudaReset();
}

TEST_F(FakeCudaIpcTest, FreeingImportedMemoryOrClosingWhatIsNotOpenIsAMisuse) {
  std::unique_ptr<IpcExporter> exporter = StartExporter(RandomBytes(100, 7));
  ASSERT_NE(exporter, nullptr);
  void* p = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, HandleOf(exporter->handle()), cudaIpcMemLazyEnablePeerAccess),
            cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(RopeFakeCudaImportedMappings(), 1) << "cudaFree does not close it";
  void* own = nullptr;
  ASSERT_EQ(cudaMalloc(&own, 100), cudaSuccess);
  EXPECT_EQ(cudaIpcCloseMemHandle(own), cudaErrorInvalidValue);
  EXPECT_EQ(cudaIpcCloseMemHandle(static_cast<char*>(p) + 1), cudaErrorInvalidValue);
  EXPECT_EQ(RopeFakeCudaMisuses(), 3);
  EXPECT_EQ(cudaFree(own), cudaSuccess);
  EXPECT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  RopeFakeCudaReset();  // the misuses were the test's
}

TEST_F(FakeCudaIpcTest, ExporterOnAnotherDeviceAndExporterErrors) {
  EXPECT_EQ(IpcExporter::Start({}).status().code(), absl::StatusCode::kInvalidArgument);
  // The child is another process: its fake runtime has one device.
  const absl::StatusOr<std::unique_ptr<IpcExporter>> missing = IpcExporter::Start({1, 2, 3}, 1);
  EXPECT_TRUE(StatusIs(missing.status(), absl::StatusCode::kInternal,
                       "cudaSetDevice: cudaErrorInvalidDevice"));

  ASSERT_EQ(setenv("ROPE_FAKE_CUDA_DEVICES", "2", 1), 0);
  std::unique_ptr<IpcExporter> exporter = StartExporter({1, 2, 3}, 1);
  unsetenv("ROPE_FAKE_CUDA_DEVICES");
  ASSERT_NE(exporter, nullptr);
  EXPECT_EQ(exporter->device(), 1);
  void* p = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, HandleOf(exporter->handle()), cudaIpcMemLazyEnablePeerAccess),
            cudaSuccess);
  cudaPointerAttributes attributes;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, static_cast<char*>(p) + 2), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attributes.device, 1) << "the handle's device";
  EXPECT_EQ(attributes.devicePointer, static_cast<char*>(p) + 2);
  EXPECT_EQ(attributes.hostPointer, nullptr);
  EXPECT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
  EXPECT_TRUE(exporter->Stop().ok());
  EXPECT_TRUE(exporter->Stop().ok()) << "the same answer again";
  EXPECT_EQ(exporter->ReadBack().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FakeCudaIpcTest, PointerAttributesByKindOfMemory) {
  RopeFakeCudaSetDeviceCount(2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* device = nullptr;
  void* async = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 1000), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&async, 1000, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 1000), cudaSuccess);
  cudaPointerAttributes a;
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(device) + 999), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.devicePointer, static_cast<char*>(device) + 999);
  EXPECT_EQ(a.hostPointer, nullptr);
  ASSERT_EQ(cudaPointerGetAttributes(&a, async), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(pinned) + 10), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  EXPECT_EQ(a.hostPointer, static_cast<char*>(pinned) + 10);
  int on_the_stack = 0;
  ASSERT_EQ(cudaPointerGetAttributes(&a, &on_the_stack), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(a.devicePointer, nullptr);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&a, device), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered) << "freed";
  EXPECT_EQ(cudaFreeAsync(async, nullptr), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

using GetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr dptr);

// How the backend gets it (without linking libcuda).
GetAddressRange DriverGetAddressRange() {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000,
                                             cudaEnableDefault, &status),
            cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  return reinterpret_cast<GetAddressRange>(function);
}

CUdeviceptr Address(const void* p, size_t offset = 0) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p) + offset);
}

TEST_F(FakeCudaIpcTest, DriverGetAddressRangeFindsTheDeviceAllocationHoldingAnAddress) {
  const GetAddressRange get_address_range = DriverGetAddressRange();
  ASSERT_NE(get_address_range, nullptr);
  std::unique_ptr<IpcExporter> exporter = StartExporter(RandomBytes(3000, 8));
  ASSERT_NE(exporter, nullptr);
  void* imported = nullptr;
  ASSERT_EQ(
      cudaIpcOpenMemHandle(&imported, HandleOf(exporter->handle()), cudaIpcMemLazyEnablePeerAccess),
      cudaSuccess);
  void* device = nullptr;
  void* async = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 1000), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&async, 2000, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 1000), cudaSuccess);

  struct Case {
    void* base;
    size_t size;
  };
  for (const Case& c : {Case{device, 1000}, Case{async, 2000}, Case{imported, 3000}}) {
    for (size_t offset : {size_t{0}, size_t{1}, c.size / 2, c.size - 1}) {
      SCOPED_TRACE(absl::StrCat("size ", c.size, " offset ", offset));
      CUdeviceptr base = 0;
      size_t size = 0;
      ASSERT_EQ(get_address_range(&base, &size, Address(c.base, offset)), CUDA_SUCCESS);
      EXPECT_EQ(base, Address(c.base));
      EXPECT_EQ(size, c.size);
    }
    EXPECT_EQ(get_address_range(nullptr, nullptr, Address(c.base, 1)), CUDA_SUCCESS);
    CUdeviceptr base = 0;
    size_t size = 0;
    EXPECT_EQ(get_address_range(&base, &size, Address(c.base, c.size)), CUDA_ERROR_NOT_FOUND);
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  int on_the_stack = 0;
  EXPECT_EQ(get_address_range(&base, &size, Address(&on_the_stack)), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(get_address_range(&base, &size, Address(pinned)), CUDA_ERROR_NOT_FOUND) << "pinned";
  EXPECT_EQ(get_address_range(&base, &size, 0), CUDA_ERROR_NOT_FOUND);
  // Counted and faulted like the runtime's functions.
  RopeFakeCudaFailCall("cuMemGetAddressRange", 1, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get_address_range(&base, &size, Address(device)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get_address_range(&base, &size, Address(device)), CUDA_SUCCESS);
  EXPECT_EQ(RopeFakeCudaCalls("cuMemGetAddressRange"), 23);

  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(get_address_range(&base, &size, Address(device)), CUDA_ERROR_NOT_FOUND) << "freed";
  EXPECT_EQ(cudaFreeAsync(async, nullptr), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaIpcCloseMemHandle(imported), cudaSuccess);
  EXPECT_EQ(get_address_range(&base, &size, Address(imported)), CUDA_ERROR_NOT_FOUND) << "closed";
}

TEST_F(FakeCudaIpcTest, DriverEntryPointOfAnotherSymbolIsNotFound) {
  void* function = reinterpret_cast<void*>(1);
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  EXPECT_EQ(
      cudaGetDriverEntryPointByVersion("cuMemAlloc", &function, 12000, cudaEnableDefault, &status),
      cudaErrorSymbolNotFound);
  EXPECT_EQ(function, nullptr);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(cudaGetLastError(), cudaErrorSymbolNotFound);
  RopeFakeCudaFailCall("cudaGetDriverEntryPointByVersion", 1, cudaErrorNotSupported);
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000,
                                             cudaEnableDefault, &status),
            cudaErrorNotSupported);
  EXPECT_EQ(RopeFakeCudaCalls("cudaGetDriverEntryPointByVersion"), 2);
}

}  // namespace
}  // namespace rope
