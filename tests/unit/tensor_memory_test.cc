// Where a call's tensors are (TensorView::memory) and where its results go:
// the engine refuses device memory on a backend without any, in one place,
// keeps one call's tensors in one memory, rotates into an output other than
// its input, and writes attention results into memory the caller provides,
// checked before any work. Every result is compared with the engine's own
// in-place / reply-bytes path, itself checked against the reference by
// rotate_test.cc and attention_test.cc.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using absl::StatusCode;
using test::Encode;
using test::HostTensor;
using test::RandomValues;
using test::StatusIs;

constexpr int64_t B = 2, S = 40, Hq = 4, Hkv = 2, D = 16;

RopeConfig Config() {
  RopeConfig config;
  config.head_dim = D;
  config.max_len = 256;
  config.layout = Layout::kHalf;
  return config;
}

std::unique_ptr<Engine> CpuEngine(int threads) {
  auto backend = NewCpuBackend(threads);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return std::make_unique<Engine>(std::move(backend).value(), EngineLimits{});
}

class TensorMemoryTest : public ::testing::Test {
 protected:
  TensorMemoryTest() : engine_(CpuEngine(3)) {
    std::mt19937 rng(7);
    q_ = Encode(DType::kBFloat16, {B, S, Hq, D},
                RandomValues(DType::kBFloat16, B * S * Hq * D, &rng));
    k_ = Encode(DType::kBFloat16, {B, S, Hkv, D},
                RandomValues(DType::kBFloat16, B * S * Hkv * D, &rng));
    v_ = Encode(DType::kBFloat16, {B, S, Hkv, 3},
                RandomValues(DType::kBFloat16, B * S * Hkv * 3, &rng));
  }

  RotateParams Rotate(HostTensor* q, HostTensor* k) {
    RotateParams params;
    params.config = Config();
    params.q = q->view();
    params.k = k->view();
    params.start_pos = 7;
    return params;
  }

  AttentionParams Attention() {
    AttentionParams params;
    params.config = Config();
    params.q = q_.const_view();
    params.k = k_.const_view();
    params.v = v_.const_view();
    params.causal = true;
    params.softmax = true;
    return params;
  }

  std::unique_ptr<Engine> engine_;
  HostTensor q_, k_, v_;
};

TEST_F(TensorMemoryTest, ABackendWithoutDeviceMemoryRefusesDeviceViewsBeforeAnyWork) {
  HostTensor q = q_, k = k_;
  RotateParams params = Rotate(&q, &k);
  params.q.memory = params.k.memory = TensorMemory::Device(0);
  EXPECT_TRUE(StatusIs(engine_->Rotate(params), StatusCode::kFailedPrecondition,
                       "q: this server's backend is cpu, which has no device memory"));
  EXPECT_EQ(q.bytes, q_.bytes);
  EXPECT_EQ(k.bytes, k_.bytes);

  AttentionParams attention = Attention();
  attention.q.memory = attention.k.memory = attention.v.memory = TensorMemory::Device(0);
  std::vector<float> scores(B * Hq * S * S), output(B * S * Hq * 3);
  AttentionOutputs outputs;
  outputs.scores.view = {DType::kFloat32, {}, scores.data(), scores.size() * sizeof(float),
                         TensorMemory::Device(0)};
  outputs.output.view = {DType::kFloat32, {}, output.data(), output.size() * sizeof(float),
                         TensorMemory::Device(0)};
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(attention, &outputs),
                       StatusCode::kFailedPrecondition, "has no device memory"));
  EXPECT_TRUE(StatusIs(engine_->DeviceMemoryFor("cuda_ipc_handle").status(),
                       StatusCode::kFailedPrecondition,
                       "cuda_ipc_handle: this server's backend is cpu"));
}

TEST_F(TensorMemoryTest, OneCallsTensorsAreInOneMemory) {
  HostTensor q = q_, k = k_;
  RotateParams params = Rotate(&q, &k);
  params.k.memory = TensorMemory::Device(0);
  EXPECT_TRUE(StatusIs(engine_->Rotate(params), StatusCode::kInvalidArgument,
                       "k is in device 0 memory but q is in host memory"));
  AttentionParams attention = Attention();
  attention.v.memory = TensorMemory::Device(1);
  std::string scores, output;
  AttentionOutputs outputs;
  outputs.scores.bytes = &scores;
  outputs.output.bytes = &output;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(attention, &outputs),
                       StatusCode::kInvalidArgument,
                       "v is in device 1 memory but q is in host memory"));
  // Results too: a host call does not write to device memory.
  attention = Attention();
  std::vector<float> on_device(B * Hq * S * S);
  outputs.scores = ResultBuffer();
  outputs.scores.name = "scores_out";
  outputs.scores.view = {DType::kFloat32, {}, on_device.data(), on_device.size() * sizeof(float),
                         TensorMemory::Device(0)};
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(attention, &outputs),
                       StatusCode::kInvalidArgument,
                       "scores_out is in device 0 memory but the call's tensors are in host"));
}

TEST_F(TensorMemoryTest, RotatesIntoAnOutputLeavingTheInputAsItWas) {
  HostTensor want_q = q_, want_k = k_;
  ASSERT_TRUE(engine_->Rotate(Rotate(&want_q, &want_k)).ok());

  // Every thread count: each task copies its own tokens before rotating them.
  for (int threads : {1, 3}) {
    const std::unique_ptr<Engine> engine = CpuEngine(threads);
    HostTensor q = q_, k = k_;
    HostTensor q_out = q_, k_out = k_;
    std::fill(q_out.bytes.begin(), q_out.bytes.end(), 0xee);
    std::fill(k_out.bytes.begin(), k_out.bytes.end(), 0xee);
    RotateParams params = Rotate(&q, &k);
    params.q_out = q_out.view();
    params.k_out = k_out.view();
    const absl::Status status = engine->Rotate(params);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(q_out.bytes, want_q.bytes) << threads << " threads";
    EXPECT_EQ(k_out.bytes, want_k.bytes) << threads << " threads";
    EXPECT_EQ(q.bytes, q_.bytes) << "the input q was written";
    EXPECT_EQ(k.bytes, k_.bytes) << "the input k was written";
  }

  // An output equal to its input is in place.
  HostTensor q = q_, k = k_;
  RotateParams params = Rotate(&q, &k);
  params.q_out = params.q;
  ASSERT_TRUE(engine_->Rotate(params).ok());
  EXPECT_EQ(q.bytes, want_q.bytes);
  EXPECT_EQ(k.bytes, want_k.bytes);
}

TEST_F(TensorMemoryTest, AnOutputHoldsExactlyItsInputsBytes) {
  HostTensor q = q_, k = k_;
  HostTensor short_out = q_;
  short_out.bytes.resize(short_out.bytes.size() - 2);
  RotateParams params = Rotate(&q, &k);
  params.q_out = short_out.view();
  EXPECT_TRUE(StatusIs(engine_->Rotate(params), StatusCode::kInvalidArgument,
                       "q_out.byte_size is 10238: q is 10240 bytes"));
  params = Rotate(&q, &k);
  params.k = TensorView();
  params.k_out = k.view();
  EXPECT_TRUE(StatusIs(engine_->Rotate(params), StatusCode::kInvalidArgument,
                       "k_out is set but k is missing"));
  EXPECT_EQ(q.bytes, q_.bytes);
  EXPECT_EQ(k.bytes, k_.bytes);
}

TEST_F(TensorMemoryTest, AttentionWritesIntoMemoryTheCallerProvides) {
  std::string want_scores, want_output;
  AttentionOutputs by_bytes;
  by_bytes.scores.bytes = &want_scores;
  by_bytes.output.bytes = &want_output;
  ASSERT_TRUE(engine_->AttentionScores(Attention(), &by_bytes).ok());

  std::vector<char> scores(want_scores.size(), 'x'), output(want_output.size(), 'x');
  AttentionOutputs into_views;
  into_views.scores.name = "scores_out";
  into_views.scores.view = {
      DType::kFloat32, {}, scores.data(), scores.size(), TensorMemory::Host()};
  into_views.output.name = "output_out";
  into_views.output.view = {
      DType::kFloat32, {}, output.data(), output.size(), TensorMemory::Host()};
  const absl::Status status = engine_->AttentionScores(Attention(), &into_views);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::string(scores.begin(), scores.end()), want_scores);
  EXPECT_EQ(std::string(output.begin(), output.end()), want_output);
  EXPECT_EQ(into_views.scores.shape, by_bytes.scores.shape);
  EXPECT_EQ(into_views.output.shape, (std::vector<int64_t>{B, S, Hq, 3}));

  // A view of another size is refused before anything is written.
  std::fill(scores.begin(), scores.end(), 'x');
  into_views.scores.view.byte_size = 4;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(Attention(), &into_views),
                       StatusCode::kInvalidArgument,
                       "scores_out.byte_size is 4: the scores are 51200 bytes"));
  into_views.scores.view.byte_size = scores.size();
  into_views.output.view.byte_size = output.size() + 4;
  EXPECT_TRUE(StatusIs(engine_->AttentionScores(Attention(), &into_views),
                       StatusCode::kInvalidArgument, "output_out.byte_size is"));
  EXPECT_EQ(std::string(scores.begin(), scores.end()), std::string(scores.size(), 'x'));
}

// A backend that says it has device memory on device 0 and records what it
// is handed instead of computing: the engine's routing of device views,
// which no CPU-only build can otherwise reach (the CUDA backend's own tests,
// tests/cuda, run the device paths on the fake runtime).
class RecordingDeviceBackend final : public Backend, public DeviceMemory {
 public:
  BackendInfo info() const override {
    BackendInfo info;
    info.name = "recording";
    info.device = "device 0";
    return info;
  }
  absl::Status Rotate(const RopeTable&, const RotateArgs& args) override {
    absl::MutexLock lock(&mu_);
    rotated_memory_ = args.memory;
    return absl::OkStatus();
  }
  absl::Status AttentionScores(const RopeTable&, const AttentionArgs& args) override {
    absl::MutexLock lock(&mu_);
    attention_memory_ = args.memory;
    return absl::OkStatus();
  }
  DeviceMemory* device_memory() override { return this; }
  int device() const override { return 0; }
  absl::StatusOr<std::shared_ptr<DeviceMemoryLease>> OpenIpcHandle(std::string_view, int,
                                                                   uint64_t) override {
    return absl::UnimplementedError("not opened in this test");
  }

  TensorMemory rotated_memory() const {
    absl::MutexLock lock(&mu_);
    return rotated_memory_;
  }
  TensorMemory attention_memory() const {
    absl::MutexLock lock(&mu_);
    return attention_memory_;
  }

 private:
  mutable absl::Mutex mu_;
  TensorMemory rotated_memory_ ABSL_GUARDED_BY(mu_);
  TensorMemory attention_memory_ ABSL_GUARDED_BY(mu_);
};

TEST_F(TensorMemoryTest, DeviceViewsReachABackendWithThatDeviceOnly) {
  auto owned = std::make_unique<RecordingDeviceBackend>();
  RecordingDeviceBackend* backend = owned.get();
  Engine engine(std::move(owned), EngineLimits{});
  HostTensor q = q_, k = k_;
  RotateParams params = Rotate(&q, &k);
  params.q.memory = params.k.memory = TensorMemory::Device(1);
  EXPECT_TRUE(StatusIs(engine.Rotate(params), StatusCode::kInvalidArgument,
                       "q is in device 1 memory: this server's backend computes on device 0"));
  params.q.memory = params.k.memory = TensorMemory::Device(0);
  ASSERT_TRUE(engine.Rotate(params).ok());
  EXPECT_EQ(backend->rotated_memory(), TensorMemory::Device(0));

  AttentionParams attention = Attention();
  attention.q.memory = attention.k.memory = attention.v.memory = TensorMemory::Device(0);
  std::string reply_scores, reply_output;
  AttentionOutputs outputs;
  outputs.scores.name = "scores_out";
  outputs.scores.bytes = &reply_scores;
  outputs.output.bytes = &reply_output;
  EXPECT_TRUE(StatusIs(engine.AttentionScores(attention, &outputs), StatusCode::kInvalidArgument,
                       "scores_out: the call's tensors are in device 0 memory"));
  std::vector<float> scores(B * Hq * S * S), output(B * S * Hq * 3);
  outputs.scores.bytes = nullptr;
  outputs.output.bytes = nullptr;
  outputs.scores.view = {DType::kFloat32, {}, scores.data(), scores.size() * sizeof(float),
                         TensorMemory::Device(0)};
  outputs.output.view = {DType::kFloat32, {}, output.data(), output.size() * sizeof(float),
                         TensorMemory::Device(0)};
  ASSERT_TRUE(engine.AttentionScores(attention, &outputs).ok());
  EXPECT_EQ(backend->attention_memory(), TensorMemory::Device(0));
}

}  // namespace
}  // namespace rope
