// CUDA shared memory on the CUDA backend: device memory that another
// process exported with cudaIpcGetMemHandle (IpcExporter, a child process),
// opened through the backend's DeviceMemory and rotated where it lies.
//
// Linked into rope_cuda_backend_test (a GPU; the tests skip without one) and
// rope_cuda_fake_device_test (the fake runtime: the exporter's cudaMalloc is
// a memfd that this process maps; host-emulated kernels).
//   - the backend: rotation in place over the rotate grid, bit for bit the
//     CPU backend's, at aligned and unaligned offsets; the exporter sees
//     the result; attention over the attention grid read and written in the
//     allocation; the handle, device and size checks; closing.
//   - the calls (core/proto_engine/rope_calls.h and shm_calls.h over an
//     Engine on this backend and a ShmRegistry): register by handle, status,
//     Rotate by reference in place and into an output reference,
//     AttentionScores by reference (inputs and results in the region), the
//     refusals (mixing with bytes, results not in a CUDA region, another
//     owner), unregister.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/proto_engine/rope_calls.h"
#include "core/proto_engine/shm_calls.h"
#include "core/proto_engine/shm_registry.h"
#include "rope/v1/rope.pb.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/engine/engine.h"
#include "tests/cuda/backend_cases.h"
#include "tests/cuda/device_under_test.h"
#include "tests/cuda/ipc_exporter.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace {

using test::IpcExporter;
using test::RotateCase;
using test::RotateData;
using test::StatusIs;

constexpr int64_t kAlign = 256;

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::vector<uint8_t> RandomBytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Finite bfloat16 values in [-2, 2) (the upper halves of float32s), for
// the calls below that attend over the region's bytes.
std::vector<uint8_t> FiniteBf16Bytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const float f = value(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    bytes[i] = static_cast<uint8_t>(bits >> 16);
    bytes[i + 1] = static_cast<uint8_t>(bits >> 24);
  }
  return bytes;
}

void ToDevice(void* device, const std::vector<uint8_t>& host) {
  ASSERT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<uint8_t> FromDevice(const void* device, int64_t bytes) {
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  EXPECT_EQ(cudaMemcpy(host.data(), device, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

class CudaIpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::PrepareDevice();
    const absl::StatusOr<int> count = CountCudaDevices();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device here: " << count.status().message();
    absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
  }

  // An exporter of `bytes` random bytes.
  static std::unique_ptr<IpcExporter> Export(int64_t bytes, uint32_t seed = 7) {
    absl::StatusOr<std::unique_ptr<IpcExporter>> exporter =
        IpcExporter::Start(RandomBytes(bytes, seed));
    EXPECT_TRUE(exporter.ok()) << exporter.status();
    return exporter.ok() ? *std::move(exporter) : nullptr;
  }

  std::unique_ptr<Backend> backend_;
};

// ---- The backend ----------------------------------------------------------------

TEST_F(CudaIpcTest, RotatesAnotherProcesssMemoryInPlaceBitForBitLikeTheCpuBackend) {
  std::vector<RotateCase> cases;
  int64_t most = 0;
  for (RotateCase c : test::RotateGrid()) {
    for (test::PositionMode mode : {test::PositionMode::kStart, test::PositionMode::kPerToken}) {
      c.positions = mode;
      c.inverse = cases.size() % 3 == 0;
      cases.push_back(c);
      const RotateData data = test::MakeRotateData(c, 1);
      // q at 0 or one element on, k on the next 256-byte boundary (+ that element).
      most = std::max<int64_t>(most, AlignUp(data.q.size() + kAlign) + data.k.size() + kAlign);
    }
  }
  std::unique_ptr<IpcExporter> exporter = Export(most);
  ASSERT_NE(exporter, nullptr);
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> memory =
      backend_->device_memory()->OpenIpcHandle(exporter->handle(), 0, static_cast<uint64_t>(most));
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ((*memory)->device(), 0);
  EXPECT_GE((*memory)->allocation_bytes(), static_cast<uint64_t>(most));
  char* region = static_cast<char*>((*memory)->data());

  std::vector<uint8_t> last_q;
  int64_t last_q_offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const RotateCase& c = cases[i];
    SCOPED_TRACE(c.Name());
    const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
    RotateData want = test::MakeRotateData(c, static_cast<uint32_t>(i));
    RotateData got = test::MakeRotateData(c, static_cast<uint32_t>(i));
    ASSERT_TRUE(test::CpuBackend().Rotate(*table, want.Args(c)).ok());

    // Every other case one element off the 16-byte boundary: the kernels'
    // scalar path (the vector path needs 16-byte alignment).
    const int64_t q_offset = i % 2 == 0 ? 0 : static_cast<int64_t>(DTypeSize(c.dtype));
    const int64_t k_offset = AlignUp(q_offset + got.q.size()) + q_offset;
    ToDevice(region + q_offset, got.q);
    if (!got.k.empty()) ToDevice(region + k_offset, got.k);
    RotateArgs args = got.Args(c);
    args.q = region + q_offset;
    if (args.k != nullptr) args.k = region + k_offset;
    args.memory = TensorMemory::Device(0);
    const absl::Status rotated = backend_->Rotate(*table, args);
    ASSERT_TRUE(rotated.ok()) << rotated;
    EXPECT_EQ(FromDevice(region + q_offset, got.q.size()), want.q) << "q";
    if (!got.k.empty()) {
      EXPECT_EQ(FromDevice(region + k_offset, got.k.size()), want.k) << "k";
    }
    last_q = want.q;
    last_q_offset = q_offset;
  }

  // The exporting process sees the rotation in its own allocation.
  absl::StatusOr<std::vector<uint8_t>> seen = exporter->ReadBack();
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_GE(static_cast<int64_t>(seen->size()), last_q_offset + static_cast<int64_t>(last_q.size()));
  EXPECT_TRUE(std::equal(last_q.begin(), last_q.end(), seen->begin() + last_q_offset));

  memory->reset();
  if (test::OpenIpcMappings() >= 0) {
    EXPECT_EQ(test::OpenIpcMappings(), 0) << "not closed";
  }
}

// Attention reading q, k, v and writing scores and output in another
// process's allocation: the CPU backend's results within the tolerance of
// the staged path's test (float32 sums in another order).
TEST_F(CudaIpcTest, AttentionInAnotherProcesssMemoryMatchesTheCpuBackend) {
  struct Placed {
    test::AttentionCase c;
    int64_t q, k, v, scores, output, end;  // byte offsets in the allocation
  };
  std::vector<Placed> cases;
  int64_t most = 0;
  for (const test::AttentionCase& c : test::AttentionGrid()) {
    const test::AttentionData data = test::MakeAttentionData(c, 5);
    Placed p{c, 0, 0, 0, 0, 0, 0};
    p.q = 0;
    p.k = AlignUp(p.q + data.q.size());
    p.v = AlignUp(p.k + data.k.size());
    p.scores = AlignUp(p.v + data.v.size());
    p.output = AlignUp(p.scores + data.scores.size() * sizeof(float));
    p.end = p.output + data.output.size() * sizeof(float);
    most = std::max(most, p.end);
    cases.push_back(p);
  }
  std::unique_ptr<IpcExporter> exporter = Export(most);
  ASSERT_NE(exporter, nullptr);
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> memory =
      backend_->device_memory()->OpenIpcHandle(exporter->handle(), 0, static_cast<uint64_t>(most));
  ASSERT_TRUE(memory.ok()) << memory.status();
  char* region = static_cast<char*>((*memory)->data());
  for (const Placed& p : cases) {
    const test::AttentionCase& c = p.c;
    SCOPED_TRACE(c.Name());
    const std::shared_ptr<const RopeTable> table =
        test::PlainTable(c.rotary_dim, test::kAttentionGridMaxLen);
    test::AttentionData want = test::MakeAttentionData(c, 5);
    test::AttentionData got = test::MakeAttentionData(c, 5);
    ASSERT_TRUE(test::CpuBackend().AttentionScores(*table, want.Args(c)).ok());
    ToDevice(region + p.q, got.q);
    ToDevice(region + p.k, got.k);
    if (!got.v.empty()) ToDevice(region + p.v, got.v);
    AttentionArgs args = got.Args(c);
    args.q = region + p.q;
    args.k = region + p.k;
    if (args.v != nullptr) args.v = region + p.v;
    args.scores = reinterpret_cast<float*>(region + p.scores);
    if (args.output != nullptr) args.output = reinterpret_cast<float*>(region + p.output);
    args.memory = TensorMemory::Device(0);
    const absl::Status status = backend_->AttentionScores(*table, args);
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<uint8_t> scores =
        FromDevice(region + p.scores, got.scores.size() * sizeof(float));
    std::memcpy(got.scores.data(), scores.data(), scores.size());
    EXPECT_TRUE(test::CloseToCpu(got.scores, want.scores, 2e-5)) << "scores";
    if (!got.output.empty()) {
      const std::vector<uint8_t> output =
          FromDevice(region + p.output, got.output.size() * sizeof(float));
      std::memcpy(got.output.data(), output.data(), output.size());
      EXPECT_TRUE(test::CloseToCpu(got.output, want.output, 2e-5)) << "output";
    }
  }
}

TEST_F(CudaIpcTest, OpeningRefusesABadHandleAnotherDeviceAndASizePastTheAllocation) {
  std::unique_ptr<IpcExporter> exporter = Export(4096);
  ASSERT_NE(exporter, nullptr);
  EXPECT_TRUE(StatusIs(
      backend_->device_memory()->OpenIpcHandle(exporter->handle().substr(1), 0, 4096).status(),
      absl::StatusCode::kInvalidArgument,
      "cuda_ipc_handle is 63 bytes: a cudaIpcMemHandle_t is 64"));
  EXPECT_TRUE(
      StatusIs(backend_->device_memory()->OpenIpcHandle(exporter->handle(), 1, 4096).status(),
               absl::StatusCode::kInvalidArgument,
               "cuda_device is 1: this server computes on CUDA device 0"));
  EXPECT_TRUE(
      StatusIs(backend_->device_memory()->OpenIpcHandle(exporter->handle(), 0, 4097).status(),
               absl::StatusCode::kInvalidArgument,
               "byte_size is 4097: the allocation cuda_ipc_handle names holds 4096 bytes"));
  const std::string garbage(64, '\x5a');
  EXPECT_TRUE(StatusIs(backend_->device_memory()->OpenIpcHandle(garbage, 0, 16).status(),
                       absl::StatusCode::kInvalidArgument, "cuda_ipc_handle could not be opened"));
  if (test::OpenIpcMappings() >= 0) {
    EXPECT_EQ(test::OpenIpcMappings(), 0) << "a refusal leaked";
  }

  // The backend still works: the whole allocation opens and rotates.
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> memory =
      backend_->device_memory()->OpenIpcHandle(exporter->handle(), 0, 4096);
  ASSERT_TRUE(memory.ok()) << memory.status();

  // Once the exporter has freed its allocation the handle opens no more.
  memory->reset();
  ASSERT_TRUE(exporter->Stop().ok());
  EXPECT_TRUE(StatusIs(backend_->device_memory()->OpenIpcHandle(exporter->handle(), 0, 16).status(),
                       absl::StatusCode::kInvalidArgument, "cuda_ipc_handle could not be opened"));
}

// ---- The calls ------------------------------------------------------------------

constexpr char kOwner[] = "ipv4:127.0.0.1:5000";

// A call of `owner` whose references resolve in `registry`.
CallContext CallOf(const ShmRegistry& registry, std::string owner = kOwner) {
  CallContext call;
  call.regions.registry = &registry;
  call.regions.owner = [owner] { return owner; };
  return call;
}

v1::RopeConfig SmallConfig() {
  v1::RopeConfig config;
  config.set_head_dim(16);
  config.set_max_len(256);
  config.set_layout(v1::HALF);
  return config;
}

// A Rotate by reference of q [1,5,4,16] and k [1,5,2,16] bfloat16 in region
// "dev": q at 0, k at 1024.
v1::RotateRequest RotateByReference() {
  v1::RotateRequest request;
  *request.mutable_config() = SmallConfig();
  request.set_start_pos(9);
  for (auto [tensor, heads, offset] : {std::tuple{request.mutable_q(), 4, 0},
                                       std::tuple{request.mutable_k(), 2, 1024}}) {
    tensor->set_dtype(v1::BFLOAT16);
    for (int64_t d : {1, 5, heads, 16}) tensor->add_shape(d);
    tensor->mutable_shm()->set_region("dev");
    tensor->mutable_shm()->set_offset(static_cast<uint64_t>(offset));
    tensor->mutable_shm()->set_byte_size(static_cast<uint64_t>(5 * heads * 16 * 2));
  }
  return request;
}

// The same request with its bytes (from `region`) in the message, rotated
// by the CPU backend: the expected q and k.
std::pair<std::string, std::string> RotatedOnTheCpu(const v1::RotateRequest& by_reference,
                                                    const std::vector<uint8_t>& region) {
  static Engine* cpu = [] {
    absl::StatusOr<std::unique_ptr<Backend>> backend = NewCpuBackend(1);
    return new Engine(*std::move(backend), EngineLimits{});
  }();
  v1::RotateRequest request = by_reference;
  for (v1::Tensor* tensor : {request.mutable_q(), request.mutable_k()}) {
    const v1::SharedMemoryRef ref = tensor->shm();
    tensor->clear_shm();
    tensor->set_data(reinterpret_cast<const char*>(region.data()) + ref.offset(), ref.byte_size());
  }
  v1::RotateResponse reply;
  const absl::Status status = AnswerRotate(*cpu, &request, &reply);
  EXPECT_TRUE(status.ok()) << status;
  return {reply.q().data(), reply.k().data()};
}

std::string Slice(const std::vector<uint8_t>& bytes, uint64_t offset, uint64_t size) {
  return std::string(reinterpret_cast<const char*>(bytes.data()) + offset, size);
}

TEST_F(CudaIpcTest, RegisteredByHandleARegionServesRotateByReferenceOnTheDevice) {
  constexpr int64_t kBytes = 8192;
  absl::StatusOr<std::unique_ptr<IpcExporter>> exported =
      IpcExporter::Start(FiniteBf16Bytes(kBytes, 11));
  ASSERT_TRUE(exported.ok()) << exported.status();
  std::unique_ptr<IpcExporter> exporter = *std::move(exported);
  const std::vector<uint8_t> before = *exporter->ReadBack();
  Engine engine(std::move(backend_), EngineLimits{});
  ShmRegistry registry(ShmLimits{});

  v1::RegisterSharedMemoryRequest registration;
  registration.set_name("dev");
  registration.set_cuda_ipc_handle(exporter->handle());
  registration.set_cuda_device(0);
  registration.set_byte_size(kBytes);
  ASSERT_TRUE(AnswerRegisterSharedMemory(engine, registry, kOwner, registration).ok());
  EXPECT_TRUE(StatusIs(AnswerRegisterSharedMemory(engine, registry, kOwner, registration),
                       absl::StatusCode::kAlreadyExists, "region \"dev\" is already registered"));
  EXPECT_EQ(registry.regions(), 1);
  EXPECT_EQ(registry.mapped_bytes(), 0) << "device regions map no host memory";
  v1::SharedMemoryStatusResponse status;
  ASSERT_TRUE(AnswerSharedMemoryStatus(registry, kOwner, {}, &status).ok());
  ASSERT_EQ(status.regions_size(), 1);
  EXPECT_EQ(status.regions(0).name(), "dev");
  EXPECT_TRUE(status.regions(0).cuda_ipc());
  EXPECT_EQ(status.regions(0).cuda_device(), 0);
  EXPECT_EQ(status.regions(0).key(), "");
  EXPECT_EQ(status.regions(0).byte_size(), static_cast<uint64_t>(kBytes));

  // In place: the reply names the references, and the device holds the
  // CPU backend's answer.
  v1::RotateRequest request = RotateByReference();
  const auto [want_q, want_k] = RotatedOnTheCpu(request, before);
  v1::RotateResponse reply;
  const absl::Status rotated = AnswerRotate(engine, &request, &reply, CallOf(registry));
  ASSERT_TRUE(rotated.ok()) << rotated;
  EXPECT_EQ(reply.q().shm().region(), "dev");
  EXPECT_TRUE(reply.q().data().empty());
  EXPECT_EQ(reply.k().shm().offset(), 1024u);
  std::vector<uint8_t> after = *exporter->ReadBack();
  EXPECT_EQ(Slice(after, 0, want_q.size()), want_q);
  EXPECT_EQ(Slice(after, 1024, want_k.size()), want_k);
  EXPECT_EQ(Slice(after, 4096, 4096), Slice(before, 4096, 4096)) << "outside the references";

  // Into output references (a device-to-device copy, then in place there);
  // the inputs stay as they were.
  request = RotateByReference();
  request.mutable_q_out()->set_region("dev");
  request.mutable_q_out()->set_offset(4096);
  request.mutable_q_out()->set_byte_size(request.q().shm().byte_size());
  request.mutable_k_out()->set_region("dev");
  request.mutable_k_out()->set_offset(6144);
  request.mutable_k_out()->set_byte_size(request.k().shm().byte_size());
  const auto [want_q2, want_k2] = RotatedOnTheCpu(RotateByReference(), after);
  reply.Clear();
  ASSERT_TRUE(AnswerRotate(engine, &request, &reply, CallOf(registry)).ok());
  EXPECT_EQ(reply.q().shm().offset(), 4096u);
  const std::vector<uint8_t> outputs = *exporter->ReadBack();
  EXPECT_EQ(Slice(outputs, 4096, want_q2.size()), want_q2);
  EXPECT_EQ(Slice(outputs, 6144, want_k2.size()), want_k2);
  EXPECT_EQ(Slice(outputs, 0, 4096), Slice(after, 0, 4096)) << "the inputs changed";

  // Attention by reference: q [1,5,4,16] and k [1,5,2,16] as above (now
  // rotated, no matter), v [1,5,2,16] at 2048, causal softmax; scores
  // [1,4,5,5] (400 bytes) at 4096, output [1,5,4,16] (1280 bytes) at 6144.
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = SmallConfig();
  *attention.mutable_q() = RotateByReference().q();
  *attention.mutable_k() = RotateByReference().k();
  *attention.mutable_v() = RotateByReference().k();
  attention.mutable_v()->mutable_shm()->set_offset(2048);
  attention.set_causal(true);
  attention.set_softmax(true);
  attention.mutable_scores_out()->set_region("dev");
  attention.mutable_scores_out()->set_offset(4096);
  attention.mutable_scores_out()->set_byte_size(400);
  attention.mutable_output_out()->set_region("dev");
  attention.mutable_output_out()->set_offset(6144);
  attention.mutable_output_out()->set_byte_size(1280);
  const std::vector<uint8_t> inputs = *exporter->ReadBack();
  v1::AttentionScoresRequest by_bytes = attention;
  by_bytes.clear_scores_out();
  by_bytes.clear_output_out();
  for (v1::Tensor* tensor : {by_bytes.mutable_q(), by_bytes.mutable_k(), by_bytes.mutable_v()}) {
    const v1::SharedMemoryRef ref = tensor->shm();
    tensor->clear_shm();
    tensor->set_data(Slice(inputs, ref.offset(), ref.byte_size()));
  }
  Engine cpu(*NewCpuBackend(1), EngineLimits{});
  v1::AttentionScoresResponse want;
  ASSERT_TRUE(AnswerAttentionScores(cpu, by_bytes, &want).ok());
  v1::AttentionScoresResponse scores;
  const absl::Status attended =
      AnswerAttentionScores(engine, attention, &scores, CallOf(registry));
  ASSERT_TRUE(attended.ok()) << attended;
  EXPECT_EQ(scores.scores().shm().offset(), 4096u);
  EXPECT_TRUE(scores.scores().data().empty());
  EXPECT_EQ(std::vector<int64_t>(scores.scores().shape().begin(), scores.scores().shape().end()),
            (std::vector<int64_t>{1, 4, 5, 5}));
  EXPECT_EQ(scores.output().shm().offset(), 6144u);
  const std::vector<uint8_t> results = *exporter->ReadBack();
  for (auto [offset, expected] : {std::pair{uint64_t{4096}, &want.scores().data()},
                                  std::pair{uint64_t{6144}, &want.output().data()}}) {
    std::vector<float> got(expected->size() / sizeof(float)), wanted(got.size());
    std::memcpy(got.data(), results.data() + offset, expected->size());
    std::memcpy(wanted.data(), expected->data(), expected->size());
    EXPECT_TRUE(test::CloseToCpu(got, wanted, 2e-5)) << "at offset " << offset;
  }

  // OUTPUT and LSE only, by reference on the device (the tiled path, no
  // Sq x Sk buffer): output [1,5,4,16] at 6144, lse [1,4,5] (80 bytes) at
  // 7424, against the CPU engine's reply by bytes.
  v1::AttentionScoresRequest tiled = attention;
  tiled.clear_scores_out();
  tiled.add_results(v1::OUTPUT);
  tiled.add_results(v1::LSE);
  tiled.mutable_lse_out()->set_region("dev");
  tiled.mutable_lse_out()->set_offset(7424);
  tiled.mutable_lse_out()->set_byte_size(80);
  v1::AttentionScoresRequest tiled_bytes = by_bytes;
  tiled_bytes.add_results(v1::OUTPUT);
  tiled_bytes.add_results(v1::LSE);
  v1::AttentionScoresResponse tiled_want;
  ASSERT_TRUE(AnswerAttentionScores(cpu, tiled_bytes, &tiled_want).ok());
  v1::AttentionScoresResponse tiled_reply;
  const absl::Status tiled_status =
      AnswerAttentionScores(engine, tiled, &tiled_reply, CallOf(registry));
  ASSERT_TRUE(tiled_status.ok()) << tiled_status;
  EXPECT_FALSE(tiled_reply.has_scores());
  EXPECT_EQ(tiled_reply.lse().shm().offset(), 7424u);
  EXPECT_TRUE(tiled_reply.lse().data().empty());
  const std::vector<uint8_t> tiled_results = *exporter->ReadBack();
  for (auto [offset, expected] : {std::pair{uint64_t{6144}, &tiled_want.output().data()},
                                  std::pair{uint64_t{7424}, &tiled_want.lse().data()}}) {
    ASSERT_FALSE(expected->empty());
    std::vector<float> got(expected->size() / sizeof(float)), wanted(got.size());
    std::memcpy(got.data(), tiled_results.data() + offset, expected->size());
    std::memcpy(wanted.data(), expected->data(), expected->size());
    EXPECT_TRUE(test::CloseToCpu(got, wanted, 2e-5)) << "tiled, at offset " << offset;
  }

  // Refusals: tensors split between the device and bytes, in Rotate and in
  // AttentionScores; scores not to a CUDA region, or of the wrong size;
  // another client.
  request = RotateByReference();
  request.mutable_k()->clear_shm();
  request.mutable_k()->set_data(std::string(5 * 2 * 16 * 2, '\0'));
  EXPECT_TRUE(StatusIs(AnswerRotate(engine, &request, &reply, CallOf(registry)),
                       absl::StatusCode::kInvalidArgument,
                       "q.shm (region \"dev\") is CUDA device memory but k (bytes) is not"));
  v1::AttentionScoresRequest bad = attention;
  *bad.mutable_v() = by_bytes.v();
  EXPECT_TRUE(StatusIs(AnswerAttentionScores(engine, bad, &scores, CallOf(registry)),
                       absl::StatusCode::kInvalidArgument,
                       "q.shm (region \"dev\") is CUDA device memory but v (bytes) is not"));
  bad = attention;
  bad.clear_scores_out();
  EXPECT_TRUE(StatusIs(AnswerAttentionScores(engine, bad, &scores, CallOf(registry)),
                       absl::StatusCode::kInvalidArgument, "scores_out is not set"));
  bad = attention;
  bad.mutable_scores_out()->set_byte_size(404);
  EXPECT_TRUE(StatusIs(AnswerAttentionScores(engine, bad, &scores, CallOf(registry)),
                       absl::StatusCode::kInvalidArgument,
                       "scores_out.byte_size is 404: the scores are 400 bytes"));
  request = RotateByReference();
  EXPECT_TRUE(
      StatusIs(AnswerRotate(engine, &request, &reply, CallOf(registry, "ipv4:127.0.0.1:5001")),
               absl::StatusCode::kNotFound, "q.shm.region \"dev\" is not registered"));

  // A region larger than the allocation is refused at registration.
  registration.set_name("too-large");
  registration.set_byte_size(kBytes + 1);
  EXPECT_TRUE(StatusIs(AnswerRegisterSharedMemory(engine, registry, kOwner, registration),
                       absl::StatusCode::kInvalidArgument, "byte_size is 8193"));

  v1::UnregisterSharedMemoryRequest unregister;
  unregister.set_name("dev");
  ASSERT_TRUE(AnswerUnregisterSharedMemory(registry, kOwner, unregister).ok());
  EXPECT_EQ(registry.regions(), 0);
  if (test::OpenIpcMappings() >= 0) {
    EXPECT_EQ(test::OpenIpcMappings(), 0) << "not closed";
  }
}

}  // namespace
}  // namespace rope
