// inference.GRPCInferenceService (the KServe v2 / Triton protocol) on a real
// server on 127.0.0.1, beside rope.v1 on the same port:
//   * ModelInfer gives exactly the bytes of the rope.v1 call it stands for
//     (Rotate, AttentionScores), in every dtype, from raw bytes, typed
//     contents and shared memory;
//   * the ModelInfer part of the malformed-request corpus: each case changes
//     one thing of a valid request and must get its exact code and message
//     substring, after which the server still serves a valid request;
//   * probes, metadata, config, statistics, the repository index, streams,
//     the shared-memory calls, admission and drain, and --model_repository.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/backends/cpu/cpu_backend.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/service/service_fixture.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

using grpc::StatusCode;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

v1::Tensor RandomTensor(DType dtype, std::vector<int64_t> shape, unsigned seed) {
  std::mt19937 rng(seed);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return ToProto(Encode(dtype, std::move(shape), RandomValues(dtype, n, &rng)));
}

const char* DatatypeOf(v1::DType dtype) {
  return dtype == v1::FLOAT32 ? "FP32" : dtype == v1::FLOAT16 ? "FP16" : "BF16";
}

void AddInput(const std::string& name, const v1::Tensor& tensor, ModelInferRequest* request) {
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(DatatypeOf(tensor.dtype()));
  *input->mutable_shape() = tensor.shape();
  request->add_raw_input_contents(tensor.data());
}

void SetConfigParameters(const v1::RopeConfig& config, ModelInferRequest* request) {
  auto& p = *request->mutable_parameters();
  if (config.theta() != 0) p["theta"].set_double_param(config.theta());
  p["head_dim"].set_int64_param(config.head_dim());
  if (config.rotary_dim() != 0) p["rotary_dim"].set_int64_param(config.rotary_dim());
  p["max_len"].set_int64_param(config.max_len());
  p["layout"].set_string_param(config.layout() == v1::HALF ? "half" : "interleaved");
}

// The ModelInfer for the built-in "rotate" model that `rotate` stands for.
ModelInferRequest InferFor(const v1::RotateRequest& rotate) {
  ModelInferRequest request;
  request.set_model_name("rotate");
  request.set_id("req-1");
  SetConfigParameters(rotate.config(), &request);
  if (rotate.start_pos() != 0)
    (*request.mutable_parameters())["start_pos"].set_int64_param(rotate.start_pos());
  if (rotate.inverse()) (*request.mutable_parameters())["inverse"].set_bool_param(true);
  AddInput("q", rotate.q(), &request);
  if (rotate.has_k()) AddInput("k", rotate.k(), &request);
  if (rotate.positions_size() > 0) {
    auto* input = request.add_inputs();
    input->set_name("positions");
    input->set_datatype("INT64");
    input->add_shape(rotate.positions_size());
    request.add_raw_input_contents(std::string(
        reinterpret_cast<const char*>(rotate.positions().data()), 8 * rotate.positions_size()));
  }
  return request;
}

// The ModelInfer outputs that stand for a rope.v1 result.
std::vector<const char*> AttentionOutputNames(v1::AttentionResult result) {
  switch (result) {
    case v1::SCORES:
      return {"scores"};
    case v1::OUTPUT:
      return {"output"};
    case v1::LSE:
      return {"lse"};
    case v1::TOP_K:
      return {"top_k_indices", "top_k_probs"};
    case v1::KEY_MASS:
      return {"key_mass"};
    case v1::SCORE_ROWS:
      return {"score_rows"};
    default:
      return {};
  }
}

// The ModelInfer for the built-in "attention" model that `attention`
// stands for (its tensors as raw bytes).
ModelInferRequest InferFor(const v1::AttentionScoresRequest& attention) {
  ModelInferRequest request;
  request.set_model_name("attention");
  SetConfigParameters(attention.config(), &request);
  auto& p = *request.mutable_parameters();
  p["q_start_pos"].set_int64_param(attention.q_start_pos());
  p["k_start_pos"].set_int64_param(attention.k_start_pos());
  p["causal"].set_bool_param(attention.causal());
  p["softmax"].set_bool_param(attention.softmax());
  if (attention.scale() != 0) p["scale"].set_double_param(attention.scale());
  // The other options as Triton clients send them: numbers as parameters
  // (softcap as a double), per-head lists and positions as tensors, the
  // results as the outputs asked for.
  if (attention.has_window_left()) p["window_left"].set_int64_param(attention.window_left());
  if (attention.has_window_right()) p["window_right"].set_int64_param(attention.window_right());
  if (attention.chunk_size() != 0) p["chunk_size"].set_int64_param(attention.chunk_size());
  if (attention.softcap() != 0) p["softcap"].set_double_param(attention.softcap());
  if (attention.top_k() != 0) p["top_k"].set_int64_param(attention.top_k());
  if (attention.score_rows_start() != 0) {
    p["score_rows_start"].set_int64_param(attention.score_rows_start());
  }
  if (attention.score_rows_count() != 0) {
    p["score_rows_count"].set_int64_param(attention.score_rows_count());
  }
  AddInput("q", attention.q(), &request);
  AddInput("k", attention.k(), &request);
  if (attention.has_v()) AddInput("v", attention.v(), &request);
  const auto add_floats = [&](const char* name, const auto& values) {
    if (values.empty()) return;
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    input->add_shape(values.size());
    request.add_raw_input_contents(
        std::string(reinterpret_cast<const char*>(values.data()), 4 * values.size()));
  };
  add_floats("sinks", attention.sinks());
  add_floats("alibi_slopes", attention.alibi_slopes());
  const auto add_positions = [&](const char* name, const auto& values) {
    if (values.empty()) return;
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(values.size());
    request.add_raw_input_contents(
        std::string(reinterpret_cast<const char*>(values.data()), 8 * values.size()));
  };
  add_positions("q_positions", attention.q_positions());
  add_positions("k_positions", attention.k_positions());
  for (int result : attention.results()) {
    for (const char* name : AttentionOutputNames(static_cast<v1::AttentionResult>(result))) {
      request.add_outputs()->set_name(name);
    }
  }
  return request;
}

// Whether `got` (a ModelInfer output) is `want` (the rope.v1 reply's
// tensor): datatype, shape and every byte.
void ExpectSameTensor(const ModelInferResponse& response, const std::string& name,
                      const v1::Tensor& want, const char* datatype) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    if (output.name() != name) continue;
    EXPECT_EQ(output.datatype(), datatype) << name;
    EXPECT_EQ(std::vector<int64_t>(output.shape().begin(), output.shape().end()),
              std::vector<int64_t>(want.shape().begin(), want.shape().end()))
        << name;
    ASSERT_LT(i, response.raw_output_contents_size());
    EXPECT_FALSE(want.data().empty()) << name;
    EXPECT_TRUE(response.raw_output_contents(i) == want.data()) << name;
    return;
  }
  ADD_FAILURE() << "no output " << name;
}

// The output `name` of `response`: its raw bytes, checked to exist.
std::string OutputBytes(const ModelInferResponse& response, const std::string& name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) {
      EXPECT_LT(i, response.raw_output_contents_size());
      return i < response.raw_output_contents_size() ? response.raw_output_contents(i) : "";
    }
  }
  ADD_FAILURE() << "no output " << name;
  return "";
}

// The rope.v1 reply to `request` (OK checked).
v1::AttentionScoresResponse AttentionScores(inference::GRPCInferenceService::Stub*,
                                            v1::RopeService::Stub* stub,
                                            const v1::AttentionScoresRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::AttentionScoresResponse response;
  EXPECT_TRUE(
      GrpcStatusIs(stub->AttentionScores(&context, request, &response), StatusCode::OK, ""));
  return response;
}

class KServeTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    kserve_ = inference::GRPCInferenceService::NewStub(channel_);
  }
  void StartWith(const ServerOptions& options) {
    ServiceTest::TearDown();
    StartServer(options);
    kserve_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return kserve_->ModelInfer(&context, request, response);
  }
  v1::RotateResponse Rotate(const v1::RotateRequest& request) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RotateResponse response;
    EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response), StatusCode::OK, ""));
    return response;
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
};

// ---- ModelInfer == rope.v1, bit for bit --------------------------------------------

struct RotateCase {
  std::string name;
  v1::DType dtype;
  v1::Layout layout;
  bool with_k;
  bool positions;
  bool inverse;
};

class KServeRotateEquality : public KServeTest, public ::testing::WithParamInterface<RotateCase> {};

TEST_P(KServeRotateEquality, ModelInferGivesRotatesBytes) {
  const RotateCase& c = GetParam();
  const DType dtype = c.dtype == v1::FLOAT32   ? DType::kFloat32
                      : c.dtype == v1::FLOAT16 ? DType::kFloat16
                                               : DType::kBFloat16;
  v1::RotateRequest rotate;
  *rotate.mutable_config() = MakeConfig(64, 4096, c.layout, 48, 500000);
  *rotate.mutable_q() = RandomTensor(dtype, {2, 5, 4, 64}, 11);
  if (c.with_k) *rotate.mutable_k() = RandomTensor(dtype, {2, 5, 2, 64}, 12);
  if (c.positions) {
    for (int64_t p : {7, 300, 3, 4095, 0, 9, 8, 1, 2, 1000}) rotate.add_positions(p);
  } else {
    rotate.set_start_pos(17);
  }
  rotate.set_inverse(c.inverse);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(InferFor(rotate), &response), StatusCode::OK, ""));
  const v1::RotateResponse want = Rotate(rotate);
  EXPECT_EQ(response.model_name(), "rotate");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(response.id(), "req-1");
  ASSERT_EQ(response.outputs_size(), c.with_k ? 2 : 1);
  EXPECT_EQ(response.outputs(0).name(), "q_out");
  EXPECT_EQ(response.outputs(0).datatype(), DatatypeOf(c.dtype));
  EXPECT_EQ(
      std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
      (std::vector<int64_t>{2, 5, 4, 64}));
  EXPECT_TRUE(OutputBytes(response, "q_out") == want.q().data()) << "q_out differs from Rotate's q";
  if (c.with_k) {
    EXPECT_TRUE(OutputBytes(response, "k_out") == want.k().data())
        << "k_out differs from Rotate's k";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KServeRotateEquality,
    ::testing::Values(
        RotateCase{"Fp32Interleaved", v1::FLOAT32, v1::INTERLEAVED, true, false, false},
        RotateCase{"Fp16HalfPositions", v1::FLOAT16, v1::HALF, true, true, false},
        RotateCase{"Bf16HalfInverse", v1::BFLOAT16, v1::HALF, true, false, true},
        RotateCase{"Fp32QOnlyPositions", v1::FLOAT32, v1::INTERLEAVED, false, true, false}),
    [](const ::testing::TestParamInfo<RotateCase>& info) { return info.param.name; });

TEST_F(KServeTest, AttentionGivesAttentionScoresBytes) {
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(32, 256, v1::HALF);
  *attention.mutable_q() = RandomTensor(DType::kBFloat16, {1, 6, 4, 32}, 21);
  *attention.mutable_k() = RandomTensor(DType::kBFloat16, {1, 9, 2, 32}, 22);
  *attention.mutable_v() = RandomTensor(DType::kBFloat16, {1, 9, 2, 16}, 23);
  attention.set_q_start_pos(3);
  attention.set_causal(true);
  attention.set_softmax(true);
  attention.set_scale(0.125);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(InferFor(attention), &response), StatusCode::OK, ""));
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::AttentionScoresResponse want;
  ASSERT_TRUE(GrpcStatusIs(stub_->AttentionScores(&context, attention, &want), StatusCode::OK, ""));
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "scores");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_TRUE(OutputBytes(response, "scores") == want.scores().data());
  EXPECT_TRUE(OutputBytes(response, "output") == want.output().data());
}

// Sliding window, chunks, softcap, sinks and ALiBi slopes at once, asking
// for scores, output and lse by name.
TEST_F(KServeTest, AttentionMasksSoftcapSinksAndAlibiGiveAttentionScoresBytes) {
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(16, 256, v1::HALF);
  *attention.mutable_q() = RandomTensor(DType::kFloat32, {2, 7, 4, 16}, 41);
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {2, 11, 2, 16}, 42);
  *attention.mutable_v() = RandomTensor(DType::kFloat32, {2, 11, 2, 8}, 43);
  attention.set_q_start_pos(4);
  attention.set_causal(true);
  attention.set_window_left(3);
  attention.set_window_right(0);
  attention.set_chunk_size(8);
  attention.set_softcap(2.5);
  for (float sink : {0.5f, -1.0f, 2.0f, 0.0f}) attention.add_sinks(sink);
  for (float slope : {0.25f, 0.125f, 0.0625f, 0.03125f}) attention.add_alibi_slopes(slope);
  for (v1::AttentionResult result : {v1::SCORES, v1::OUTPUT, v1::LSE}) {
    attention.add_results(result);
  }
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(InferFor(attention), &response), StatusCode::OK, ""));
  const v1::AttentionScoresResponse want = AttentionScores(kserve_.get(), stub_.get(), attention);
  ASSERT_EQ(response.outputs_size(), 3);
  ExpectSameTensor(response, "scores", want.scores(), "FP32");
  ExpectSameTensor(response, "output", want.output(), "FP32");
  ExpectSameTensor(response, "lse", want.lse(), "FP32");
}

// The results that need no v and no S x S buffer, by name; top_k_indices
// is INT32. softcap sent as an int64 is the same number.
TEST_F(KServeTest, AttentionLseTopKKeyMassAndScoreRowsGiveAttentionScoresBytes) {
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(32, 256, v1::INTERLEAVED);
  *attention.mutable_q() = RandomTensor(DType::kBFloat16, {1, 9, 4, 32}, 51);
  *attention.mutable_k() = RandomTensor(DType::kBFloat16, {1, 13, 1, 32}, 52);
  attention.set_k_start_pos(2);
  attention.set_causal(true);
  attention.set_softcap(20);
  attention.set_top_k(3);
  attention.set_score_rows_start(2);
  attention.set_score_rows_count(5);
  for (v1::AttentionResult result : {v1::LSE, v1::TOP_K, v1::KEY_MASS, v1::SCORE_ROWS}) {
    attention.add_results(result);
  }
  ModelInferRequest request = InferFor(attention);
  (*request.mutable_parameters())["softcap"].set_int64_param(20);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  const v1::AttentionScoresResponse want = AttentionScores(kserve_.get(), stub_.get(), attention);
  ASSERT_EQ(response.outputs_size(), 5);
  EXPECT_EQ(response.outputs(0).name(), "lse");
  ExpectSameTensor(response, "lse", want.lse(), "FP32");
  ExpectSameTensor(response, "top_k_indices", want.top_k_indices(), "INT32");
  ExpectSameTensor(response, "top_k_probs", want.top_k_probs(), "FP32");
  ExpectSameTensor(response, "key_mass", want.key_mass(), "FP32");
  ExpectSameTensor(response, "score_rows", want.score_rows(), "FP32");

  // One of TOP_K's two outputs alone asks for TOP_K once.
  ModelInferRequest only_probs = InferFor(attention);
  only_probs.clear_outputs();
  only_probs.add_outputs()->set_name("top_k_probs");
  ASSERT_TRUE(GrpcStatusIs(Infer(only_probs, &response), StatusCode::OK, ""));
  ASSERT_EQ(response.outputs_size(), 1);
  ExpectSameTensor(response, "top_k_probs", want.top_k_probs(), "FP32");
}

// Explicit per-token positions (a packed batch: each sequence restarts at
// 0), from raw INT64 bytes and from typed INT32 contents.
TEST_F(KServeTest, AttentionExplicitPositionsGiveAttentionScoresBytes) {
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(16, 64, v1::HALF);
  *attention.mutable_q() = RandomTensor(DType::kFloat16, {1, 6, 2, 16}, 61);
  *attention.mutable_k() = RandomTensor(DType::kFloat16, {1, 6, 2, 16}, 62);
  *attention.mutable_v() = RandomTensor(DType::kFloat16, {1, 6, 2, 16}, 63);
  for (int64_t p : {0, 1, 2, 0, 1, 2}) {
    attention.add_q_positions(p);
    attention.add_k_positions(p + 5);
  }
  attention.set_causal(true);
  attention.set_window_left(1);
  for (v1::AttentionResult result : {v1::OUTPUT, v1::LSE}) attention.add_results(result);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(InferFor(attention), &response), StatusCode::OK, ""));
  const v1::AttentionScoresResponse want = AttentionScores(kserve_.get(), stub_.get(), attention);
  ExpectSameTensor(response, "output", want.output(), "FP32");
  ExpectSameTensor(response, "lse", want.lse(), "FP32");

  // k_positions as INT32 raw bytes, shaped [1, 6]: the same positions.
  ModelInferRequest narrow = InferFor(attention);
  auto* k_positions = narrow.mutable_inputs(narrow.inputs_size() - 1);
  ASSERT_EQ(k_positions->name(), "k_positions");
  k_positions->set_datatype("INT32");
  k_positions->clear_shape();
  k_positions->add_shape(1);
  k_positions->add_shape(6);
  std::string bytes;
  for (int64_t p : attention.k_positions()) {
    const int32_t value = static_cast<int32_t>(p);
    bytes.append(reinterpret_cast<const char*>(&value), 4);
  }
  *narrow.mutable_raw_input_contents(narrow.raw_input_contents_size() - 1) = bytes;
  ASSERT_TRUE(GrpcStatusIs(Infer(narrow, &response), StatusCode::OK, ""));
  ExpectSameTensor(response, "output", want.output(), "FP32");
  ExpectSameTensor(response, "lse", want.lse(), "FP32");
}

// FP64 positions are rope.v1's fractional positions: q_positions /
// k_positions of an attention model (raw bytes and typed contents), and a
// rotate model's positions.
TEST_F(KServeTest, Fp64PositionsAreFractionalPositions) {
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(16, 64, v1::HALF);
  *attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 2, 16}, 81);
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 4, 2, 16}, 82);
  for (double p : {2.5, 3.25, 7.75}) attention.add_q_fractional_positions(p);
  for (double p : {0.5, 1.0, 2.5, 6.125}) attention.add_k_fractional_positions(p);
  attention.add_results(v1::LSE);
  attention.add_results(v1::KEY_MASS);
  const v1::AttentionScoresResponse want = AttentionScores(kserve_.get(), stub_.get(), attention);
  ModelInferRequest request = InferFor(attention);
  auto* q_positions = request.add_inputs();
  q_positions->set_name("q_positions");
  q_positions->set_datatype("FP64");
  q_positions->add_shape(3);
  request.add_raw_input_contents(std::string(
      reinterpret_cast<const char*>(attention.q_fractional_positions().data()), 24));
  ModelInferResponse response;
  // k_positions as typed contents need every input typed: q and k too.
  ModelInferRequest typed = request;
  typed.clear_raw_input_contents();
  for (int i = 0; i < 2; ++i) {
    const std::string& bytes = i == 0 ? attention.q().data() : attention.k().data();
    for (size_t at = 0; at < bytes.size(); at += 4) {
      float value;
      std::memcpy(&value, bytes.data() + at, 4);
      typed.mutable_inputs(i)->mutable_contents()->add_fp32_contents(value);
    }
  }
  for (double p : attention.q_fractional_positions()) {
    typed.mutable_inputs(2)->mutable_contents()->add_fp64_contents(p);
  }
  auto* k_positions = typed.add_inputs();
  k_positions->set_name("k_positions");
  k_positions->set_datatype("FP64");
  k_positions->add_shape(4);
  for (double p : attention.k_fractional_positions()) {
    k_positions->mutable_contents()->add_fp64_contents(p);
  }
  ASSERT_TRUE(GrpcStatusIs(Infer(typed, &response), StatusCode::OK, ""));
  ExpectSameTensor(response, "lse", want.lse(), "FP32");
  ExpectSameTensor(response, "key_mass", want.key_mass(), "FP32");

  // Raw bytes for both.
  auto* k_raw = request.add_inputs();
  k_raw->set_name("k_positions");
  k_raw->set_datatype("FP64");
  k_raw->add_shape(4);
  request.add_raw_input_contents(std::string(
      reinterpret_cast<const char*>(attention.k_fractional_positions().data()), 32));
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  ExpectSameTensor(response, "lse", want.lse(), "FP32");

  v1::RotateRequest rotate;
  *rotate.mutable_config() = MakeConfig(8, 64);
  *rotate.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 2, 8}, 83);
  for (double p : {0.25, 10.5, 33.0}) rotate.add_fractional_positions(p);
  ModelInferRequest rotate_infer = InferFor(rotate);
  auto* positions = rotate_infer.add_inputs();
  positions->set_name("positions");
  positions->set_datatype("FP64");
  positions->add_shape(3);
  rotate_infer.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(rotate.fractional_positions().data()), 24));
  ASSERT_TRUE(GrpcStatusIs(Infer(rotate_infer, &response), StatusCode::OK, ""));
  const std::string rotated = Rotate(rotate).q().data();
  EXPECT_FALSE(rotated.empty());
  EXPECT_TRUE(OutputBytes(response, "q_out") == rotated);
}

TEST_F(KServeTest, TypedContentsAndInt32PositionsGiveTheSameBytes) {
  v1::RotateRequest rotate;
  *rotate.mutable_config() = MakeConfig(8, 64);
  *rotate.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 2, 8}, 5);
  for (int64_t p : {4, 63, 0}) rotate.add_positions(p);
  ModelInferRequest request;
  request.set_model_name("rotate");
  SetConfigParameters(rotate.config(), &request);
  auto* q = request.add_inputs();
  q->set_name("q");
  q->set_datatype("FP32");
  *q->mutable_shape() = rotate.q().shape();
  const std::string& bytes = rotate.q().data();
  for (size_t i = 0; i < bytes.size(); i += 4) {
    float value;
    std::memcpy(&value, bytes.data() + i, 4);
    q->mutable_contents()->add_fp32_contents(value);
  }
  auto* positions = request.add_inputs();
  positions->set_name("positions");
  positions->set_datatype("INT32");
  positions->add_shape(1);
  positions->add_shape(3);
  for (int64_t p : rotate.positions())
    positions->mutable_contents()->add_int_contents(static_cast<int32_t>(p));
  request.add_outputs()->set_name("q_out");
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  EXPECT_TRUE(OutputBytes(response, "q_out") == Rotate(rotate).q().data());
}

// ---- The malformed-request corpus, ModelInfer part ---------------------------------

struct InferCase {
  std::string name;
  std::function<void(ModelInferRequest*)> mutate;
  StatusCode code;
  std::string message;
};
void PrintTo(const InferCase& c, std::ostream* os) { *os << c.name; }

// Valid: rotate q [2,3,4,8] and k [2,3,2,8] float32, head_dim 8, max_len 64.
ModelInferRequest ValidInfer() {
  v1::RotateRequest rotate;
  *rotate.mutable_config() = MakeConfig(8, 64);
  *rotate.mutable_q() = RandomTensor(DType::kFloat32, {2, 3, 4, 8}, 1);
  *rotate.mutable_k() = RandomTensor(DType::kFloat32, {2, 3, 2, 8}, 2);
  rotate.set_start_pos(5);
  return InferFor(rotate);
}

ModelInferRequest::InferInputTensor* Input(ModelInferRequest* r, int i) {
  return r->mutable_inputs(i);
}
void Param(ModelInferRequest* r, const std::string& name, int64_t value) {
  (*r->mutable_parameters())[name].set_int64_param(value);
}

// Valid: attention q [1,4,4,8], k and v [1,5,2,8] float32, causal, no
// outputs named (scores and output).
ModelInferRequest ValidAttentionInfer() {
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(8, 64);
  *attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 4, 4, 8}, 3);
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 5, 2, 8}, 4);
  *attention.mutable_v() = RandomTensor(DType::kFloat32, {1, 5, 2, 8}, 5);
  attention.set_causal(true);
  return InferFor(attention);
}

// Adds FP32 input `name` [values.size()] as raw bytes.
void AddFloatInput(ModelInferRequest* r, const char* name, std::vector<float> values) {
  auto* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype("FP32");
  input->add_shape(static_cast<int64_t>(values.size()));
  r->add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(values.data()), 4 * values.size()));
}

std::vector<InferCase> InferCases() {
  const StatusCode kInvalid = StatusCode::INVALID_ARGUMENT;
  return {
      {"UnknownModel", [](ModelInferRequest* r) { r->set_model_name("llama"); },
       StatusCode::NOT_FOUND, "Request for unknown model: 'llama' is not found"},
      {"UnknownVersion", [](ModelInferRequest* r) { r->set_model_version("2"); },
       StatusCode::NOT_FOUND, "'rotate' version 2 is not found"},
      {"UnknownInput", [](ModelInferRequest* r) { Input(r, 1)->set_name("kk"); }, kInvalid,
       "unexpected inference input 'kk' for model 'rotate'"},
      {"InputTwice", [](ModelInferRequest* r) { Input(r, 1)->set_name("q"); }, kInvalid,
       "inference input 'q' is given twice"},
      {"MissingQ",
       [](ModelInferRequest* r) {
         r->mutable_inputs()->DeleteSubrange(0, 1);
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
       },
       kInvalid, "model 'rotate' needs inference input 'q'"},
      {"QInt32", [](ModelInferRequest* r) { Input(r, 0)->set_datatype("INT32"); }, kInvalid,
       "inference input 'q' data-type is 'INT32', but model 'rotate' expects 'FP32', 'FP16' or "
       "'BF16'"},
      {"QOneByteShort", [](ModelInferRequest* r) { r->mutable_raw_input_contents(0)->pop_back(); },
       kInvalid, "unexpected total byte size 767 for input 'q', expecting 768"},
      {"QShapeTooBig", [](ModelInferRequest* r) { Input(r, 0)->set_shape(0, 3); }, kInvalid,
       "unexpected total byte size 768 for input 'q', expecting 1152"},
      {"QNegativeDim", [](ModelInferRequest* r) { Input(r, 0)->set_shape(1, -3); }, kInvalid,
       "q.shape"},
      {"KHeadDimMismatch",
       [](ModelInferRequest* r) {
         Input(r, 1)->set_shape(3, 4);
         Input(r, 1)->set_shape(2, 4);
       },
       kInvalid, "k"},
      {"RawMissingForK",
       [](ModelInferRequest* r) { r->mutable_raw_input_contents()->RemoveLast(); }, kInvalid,
       "inference input 'k' has no data"},
      {"RawExtraEntry", [](ModelInferRequest* r) { r->add_raw_input_contents("x"); }, kInvalid,
       "raw_input_contents has 3 entries for 2 inputs"},
      {"ContentsBesideRaw",
       [](ModelInferRequest* r) { Input(r, 1)->mutable_contents()->add_fp32_contents(1); },
       kInvalid, "contents field must not be specified when using raw_input_contents for 'k'"},
      {"Fp16TypedContents",
       [](ModelInferRequest* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs()->DeleteSubrange(1, 1);
         Input(r, 0)->set_datatype("FP16");
         Input(r, 0)->mutable_contents()->add_fp32_contents(1);
       },
       kInvalid, "FP16 and BF16 have no typed contents"},
      {"UnknownOutput", [](ModelInferRequest* r) { r->add_outputs()->set_name("scores"); },
       kInvalid, "unexpected inference output 'scores' for model 'rotate'"},
      {"OutputTwice",
       [](ModelInferRequest* r) {
         r->add_outputs()->set_name("q_out");
         r->add_outputs()->set_name("q_out");
       },
       kInvalid, "inference output 'q_out' is requested twice"},
      {"KOutWithoutK",
       [](ModelInferRequest* r) {
         r->mutable_inputs()->DeleteSubrange(1, 1);
         r->mutable_raw_input_contents()->RemoveLast();
         r->add_outputs()->set_name("k_out");
       },
       kInvalid, "inference output 'k_out' needs inference input 'k'"},
      {"UnknownParameter", [](ModelInferRequest* r) { Param(r, "startpos", 1); }, kInvalid,
       "model 'rotate' has no parameter 'startpos'"},
      {"StartPosAsString",
       [](ModelInferRequest* r) { (*r->mutable_parameters())["start_pos"].set_string_param("5"); },
       kInvalid, "parameter 'start_pos' is a string_param: it must be an int64"},
      {"InverseAsInt", [](ModelInferRequest* r) { Param(r, "inverse", 1); }, kInvalid,
       "parameter 'inverse' is a int64_param: it must be a bool"},
      {"ThetaNotANumber",
       [](ModelInferRequest* r) { (*r->mutable_parameters())["theta"].set_string_param("fast"); },
       kInvalid, "parameter 'theta' is \"fast\": not a finite decimal number"},
      {"HeadDimNegative", [](ModelInferRequest* r) { Param(r, "head_dim", -8); }, kInvalid,
       "parameter 'head_dim' is -8"},
      {"HeadDimOdd", [](ModelInferRequest* r) { Param(r, "head_dim", 7); }, kInvalid,
       "head_dim is 7"},
      {"MaxLenMissing", [](ModelInferRequest* r) { r->mutable_parameters()->erase("max_len"); },
       kInvalid, "max_len"},
      {"LayoutUnknown",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["layout"].set_string_param("zigzag");
       },
       kInvalid, "parameter 'layout' is \"zigzag\""},
      {"RopeScalingMalformed",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["rope_scaling"].set_string_param("{\"rope_type\": \"linear\"");
       },
       kInvalid, "parameter 'rope_scaling'"},
      {"RopeScalingUnknownType",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["rope_scaling"].set_string_param(
             "{\"rope_type\": \"warp\", \"factor\": 2}");
       },
       kInvalid, "warp"},
      {"HfConfigBesideTheta",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["theta"].set_double_param(10000);
         (*r->mutable_parameters())["hf_config_json"].set_string_param(
             "{\"rope_theta\": 10000, \"head_dim\": 8}");
       },
       kInvalid, "theta"},
      {"PositionOutOfRange",
       [](ModelInferRequest* r) {
         r->mutable_parameters()->erase("start_pos");
         auto* p = r->add_inputs();
         p->set_name("positions");
         p->set_datatype("INT64");
         p->add_shape(3);
         int64_t values[3] = {0, 64, 1};
         r->add_raw_input_contents(std::string(reinterpret_cast<char*>(values), 24));
       },
       StatusCode::OUT_OF_RANGE, "positions[1] is 64"},
      {"PositionsWrongType",
       [](ModelInferRequest* r) {
         auto* p = r->add_inputs();
         p->set_name("positions");
         p->set_datatype("FP32");
         p->add_shape(1);
         r->add_raw_input_contents(std::string(4, '\0'));
       },
       kInvalid, "inference input 'positions' data-type is 'FP32'"},
      {"PositionsByteSize",
       [](ModelInferRequest* r) {
         auto* p = r->add_inputs();
         p->set_name("positions");
         p->set_datatype("INT64");
         p->add_shape(3);
         r->add_raw_input_contents(std::string(23, '\0'));
       },
       kInvalid, "unexpected total byte size 23 for input 'positions', expecting 24"},
      {"ShmRegionNotRegistered",
       [](ModelInferRequest* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         auto& p = *Input(r, 0)->mutable_parameters();
         p["shared_memory_region"].set_string_param("nowhere");
         p["shared_memory_byte_size"].set_int64_param(768);
         r->add_outputs()->set_name("q_out");
         auto& o = *r->mutable_outputs(0)->mutable_parameters();
         o["shared_memory_region"].set_string_param("nowhere");
         o["shared_memory_byte_size"].set_int64_param(768);
       },
       StatusCode::NOT_FOUND, "\"nowhere\""},
      {"ShmWithoutByteSize",
       [](ModelInferRequest* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         (*Input(r, 0)->mutable_parameters())["shared_memory_region"].set_string_param("x");
       },
       kInvalid, "input 'q' is in shared-memory region 'x' but has no 'shared_memory_byte_size'"},
      {"ShmByteSizeMismatch",
       [](ModelInferRequest* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         auto& p = *Input(r, 0)->mutable_parameters();
         p["shared_memory_region"].set_string_param("x");
         p["shared_memory_byte_size"].set_int64_param(100);
       },
       kInvalid, "unexpected total byte size 100 for input 'q', expecting 768"},
      {"ShmNegativeOffset",
       [](ModelInferRequest* r) {
         r->mutable_raw_input_contents()->DeleteSubrange(0, 1);
         auto& p = *Input(r, 0)->mutable_parameters();
         p["shared_memory_region"].set_string_param("x");
         p["shared_memory_byte_size"].set_int64_param(768);
         p["shared_memory_offset"].set_int64_param(-4);
       },
       kInvalid, "shared_memory_offset -4"},
      {"TritonPriorityIgnored", [](ModelInferRequest* r) { Param(r, "priority", 3); },
       StatusCode::OK, ""},
      {"OutputDtypeUnknown",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["output_dtype"].set_string_param("FP8");
       },
       kInvalid, "parameter 'output_dtype' is \"FP8\": must be \"FLOAT8_E4M3FN\" or \"FLOAT8_E5M2\""},
      {"OutputDtypeAsInt", [](ModelInferRequest* r) { Param(r, "output_dtype", 5); }, kInvalid,
       "parameter 'output_dtype' is a int64_param: it must be a string"},
      {"OutputScaleWithoutFloat8",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["output_scale"].set_double_param(2);
       },
       kInvalid, "output_scale is 2"},
      {"OutputScaleNegative",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["output_dtype"].set_string_param("float8_e5m2");
         (*r->mutable_parameters())["output_scale"].set_double_param(-1);
       },
       kInvalid, "output_scale is -1"},
      {"RotaryOffsetNegative", [](ModelInferRequest* r) { Param(r, "rotary_offset", -2); },
       kInvalid, "parameter 'rotary_offset' is -2"},
      {"RotaryOffsetPastHead", [](ModelInferRequest* r) { Param(r, "rotary_offset", 8); },
       kInvalid, "config.rotary_offset is 8: must be < head_dim 8"},
      {"LayerIndexWithoutConfigJson", [](ModelInferRequest* r) { Param(r, "hf_layer_index", 3); },
       kInvalid, "hf_layer_index"},
      {"NoRopeAsString",
       [](ModelInferRequest* r) { (*r->mutable_parameters())["no_rope"].set_string_param("yes"); },
       kInvalid, "parameter 'no_rope' is a string_param: it must be a bool"},
      {"FloorScaleWithoutNoRope",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["floor_scale"].set_double_param(8192);
       },
       kInvalid, "parameter 'floor_scale' tunes a NoPE layer's attention temperature"},
      {"NoRopeFloorScaleNegative",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["no_rope"].set_bool_param(true);
         (*r->mutable_parameters())["floor_scale"].set_double_param(-1);
       },
       kInvalid, "floor_scale is -1"},
      // The attention model's options (the request replaced by a valid
      // attention call first).
      {"AttentionSinksWrongLength",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         AddFloatInput(r, "sinks", {0.5f, 0.5f, 0.5f});
       },
       kInvalid, "sinks has 3 values: must be empty or one per query head (Hq = 4)"},
      {"AttentionAlibiSlopesInt64",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         AddFloatInput(r, "alibi_slopes", {1, 1, 1, 1});
         r->mutable_inputs(r->inputs_size() - 1)->set_datatype("INT32");
       },
       kInvalid, "inference input 'alibi_slopes' data-type is 'INT32', but it must be 'FP32'"},
      {"AttentionTopKPastSk",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         Param(r, "top_k", 6);
         r->add_outputs()->set_name("top_k_indices");
       },
       kInvalid, "top_k is 6: must be in [1, Sk] (Sk = 5 keys)"},
      {"AttentionTopKNegative",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         Param(r, "top_k", -1);
       },
       kInvalid, "parameter 'top_k' is -1: must be in [0, 4294967295]"},
      {"AttentionTopKOutputWithoutTopK",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         r->add_outputs()->set_name("top_k_probs");
       },
       kInvalid, "top_k is 0: results asks for TOP_K"},
      {"AttentionUnknownOutput",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         r->add_outputs()->set_name("lse");
         r->add_outputs()->set_name("attention_weights");
       },
       kInvalid, "unexpected inference output 'attention_weights' for model 'attention'"},
      {"AttentionUnknownParameter",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         Param(r, "window", 4);
       },
       kInvalid, "model 'attention' has no parameter 'window'"},
      {"AttentionWindowNegative",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         Param(r, "window_left", -2);
       },
       kInvalid, "window_left is -2"},
      {"AttentionChunkSizeAsBool",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         (*r->mutable_parameters())["chunk_size"].set_bool_param(true);
       },
       kInvalid, "parameter 'chunk_size' is a bool_param: it must be an int64"},
      {"AttentionSoftcapNotANumber",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         (*r->mutable_parameters())["softcap"].set_string_param("tight");
       },
       kInvalid, "parameter 'softcap' is \"tight\""},
      {"AttentionScoreRowsPastSq",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         Param(r, "score_rows_start", 3);
         Param(r, "score_rows_count", 4);
         r->add_outputs()->set_name("score_rows");
       },
       kInvalid, "score_rows"},
      {"AttentionQPositionsByteSize",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         auto* p = r->add_inputs();
         p->set_name("q_positions");
         p->set_datatype("INT64");
         p->add_shape(4);
         r->add_raw_input_contents(std::string(31, '\0'));
       },
       kInvalid, "unexpected total byte size 31 for input 'q_positions', expecting 32"},
      {"AttentionFractionalPositionsByteSize",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         auto* p = r->add_inputs();
         p->set_name("k_positions");
         p->set_datatype("FP64");
         p->add_shape(5);
         r->add_raw_input_contents(std::string(39, '\0'));
       },
       kInvalid, "unexpected total byte size 39 for input 'k_positions', expecting 40"},
      {"AttentionPositionsFp32",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         AddFloatInput(r, "q_positions", {0, 1, 2, 3});
       },
       kInvalid,
       "input 'q_positions' data-type is 'FP32', but it must be 'INT64', 'INT32' or 'FP64'"},
      {"AttentionLseRegionTooSmall",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         auto* o = r->add_outputs();
         o->set_name("lse");
         (*o->mutable_parameters())["shared_memory_region"].set_string_param("x");
         (*o->mutable_parameters())["shared_memory_byte_size"].set_int64_param(4);
       },
       kInvalid, "for output 'lse' (4 bytes) should be at least 64 bytes"},
      {"AttentionAllOptionsValid",
       [](ModelInferRequest* r) {
         *r = ValidAttentionInfer();
         Param(r, "window_left", 2);
         Param(r, "window_right", 0);
         Param(r, "chunk_size", 4);
         Param(r, "top_k", 2);
         Param(r, "score_rows_start", 1);
         Param(r, "score_rows_count", 2);
         (*r->mutable_parameters())["softcap"].set_double_param(30);
         AddFloatInput(r, "sinks", {0.5f, 0.5f, 0.5f, 0.5f});
         AddFloatInput(r, "alibi_slopes", {0.5f, 0.25f, 0.125f, 0.0625f});
         for (const char* name : {"scores", "output", "lse", "top_k_indices", "top_k_probs",
                                  "key_mass", "score_rows"}) {
           r->add_outputs()->set_name(name);
         }
       },
       StatusCode::OK, ""},
  };
}

class KServeCorpus : public KServeTest, public ::testing::WithParamInterface<InferCase> {
 protected:
  void ExpectServesAValidInfer() {
    ModelInferRequest request = ValidInfer();
    ModelInferResponse response;
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""))
        << "the server stopped answering valid requests";
    v1::RotateRequest rotate;
    *rotate.mutable_config() = MakeConfig(8, 64);
    *rotate.mutable_q() = RandomTensor(DType::kFloat32, {2, 3, 4, 8}, 1);
    *rotate.mutable_k() = RandomTensor(DType::kFloat32, {2, 3, 2, 8}, 2);
    rotate.set_start_pos(5);
    EXPECT_TRUE(OutputBytes(response, "q_out") == Rotate(rotate).q().data());
  }
};

TEST_P(KServeCorpus, GetsItsStatusAndTheServerKeepsServing) {
  const InferCase& c = GetParam();
  ModelInferRequest request = ValidInfer();
  c.mutate(&request);
  ModelInferResponse response;
  EXPECT_TRUE(GrpcStatusIs(Infer(request, &response), c.code, c.message));
  ExpectServesAValidInfer();
}

INSTANTIATE_TEST_SUITE_P(Corpus, KServeCorpus, ::testing::ValuesIn(InferCases()),
                         [](const ::testing::TestParamInfo<InferCase>& info) {
                           return info.param.name;
                         });

// ---- Probes, metadata, statistics, streams ------------------------------------------

TEST_F(KServeTest, ProbesMetadataConfigAndIndex) {
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(GrpcStatusIs(kserve_->ServerReady(&context, {}, &ready), StatusCode::OK, ""));
    EXPECT_TRUE(ready.ready());
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ModelMetadataRequest request;
    request.set_name("rotate");
    inference::ModelMetadataResponse metadata;
    ASSERT_TRUE(
        GrpcStatusIs(kserve_->ModelMetadata(&context, request, &metadata), StatusCode::OK, ""));
    ASSERT_EQ(metadata.inputs_size(), 3);
    EXPECT_EQ(metadata.inputs(0).name(), "q");
    EXPECT_EQ(metadata.inputs(0).shape(3), -1);
    EXPECT_EQ(metadata.inputs(2).datatype(), "INT64");
    EXPECT_EQ(metadata.outputs(1).name(), "k_out");
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ModelConfigRequest request;
    request.set_name("attention");
    inference::ModelConfigResponse config;
    ASSERT_TRUE(GrpcStatusIs(kserve_->ModelConfig(&context, request, &config), StatusCode::OK, ""));
    EXPECT_EQ(config.config().max_batch_size(), 0);
    // q, k, then the optional v, sinks, alibi_slopes, q_positions,
    // k_positions; an output per result.
    ASSERT_EQ(config.config().input_size(), 7);
    EXPECT_FALSE(config.config().input(1).optional());
    for (int i = 2; i < 7; ++i) EXPECT_TRUE(config.config().input(i).optional()) << i;
    EXPECT_EQ(config.config().input(3).name(), "sinks");
    EXPECT_EQ(config.config().input(3).data_type(), inference::TYPE_FP32);
    EXPECT_EQ(config.config().input(6).name(), "k_positions");
    EXPECT_EQ(config.config().input(6).data_type(), inference::TYPE_INT64);
    ASSERT_EQ(config.config().output_size(), 7);
    EXPECT_EQ(config.config().output(0).data_type(), inference::TYPE_FP32);
    EXPECT_EQ(config.config().output(2).name(), "lse");
    EXPECT_EQ(config.config().output(2).dims_size(), 3);
    EXPECT_EQ(config.config().output(3).name(), "top_k_indices");
    EXPECT_EQ(config.config().output(3).data_type(), inference::TYPE_INT32);
    EXPECT_EQ(config.config().output(6).name(), "score_rows");
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ModelMetadataRequest request;
    request.set_name("attention");
    inference::ModelMetadataResponse metadata;
    ASSERT_TRUE(
        GrpcStatusIs(kserve_->ModelMetadata(&context, request, &metadata), StatusCode::OK, ""));
    ASSERT_EQ(metadata.inputs_size(), 7);
    EXPECT_EQ(metadata.inputs(4).name(), "alibi_slopes");
    EXPECT_EQ(metadata.inputs(5).datatype(), "INT64");
    ASSERT_EQ(metadata.outputs_size(), 7);
    EXPECT_EQ(metadata.outputs(3).datatype(), "INT32");
    EXPECT_EQ(metadata.outputs(5).name(), "key_mass");
    EXPECT_EQ(metadata.outputs(5).shape_size(), 3);
    EXPECT_EQ(metadata.outputs(5).shape(0), -1);
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ModelConfigRequest request;
    request.set_name("nope");
    inference::ModelConfigResponse config;
    EXPECT_TRUE(GrpcStatusIs(kserve_->ModelConfig(&context, request, &config),
                             StatusCode::NOT_FOUND, "'nope' is not found"));
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::RepositoryIndexResponse index;
    ASSERT_TRUE(GrpcStatusIs(kserve_->RepositoryIndex(&context, {}, &index), StatusCode::OK, ""));
    ASSERT_EQ(index.models_size(), 2);
    EXPECT_EQ(index.models(0).name(), "attention");
    EXPECT_EQ(index.models(1).state(), "READY");
  }
}

TEST_F(KServeTest, StatisticsCountSuccessesAndFailures) {
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(ValidInfer(), &response), StatusCode::OK, ""));
  ModelInferRequest bad = ValidInfer();
  Param(&bad, "head_dim", 7);
  EXPECT_TRUE(GrpcStatusIs(Infer(bad, &response), StatusCode::INVALID_ARGUMENT, "head_dim"));
  grpc::ClientContext context;
  SetDeadline(&context);
  inference::ModelStatisticsRequest request;
  request.set_name("rotate");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(
      GrpcStatusIs(kserve_->ModelStatistics(&context, request, &stats), StatusCode::OK, ""));
  ASSERT_EQ(stats.model_stats_size(), 1);
  EXPECT_EQ(stats.model_stats(0).inference_count(), 1u);
  EXPECT_EQ(stats.model_stats(0).inference_stats().success().count(), 1u);
  EXPECT_EQ(stats.model_stats(0).inference_stats().fail().count(), 1u);
  EXPECT_GT(stats.model_stats(0).inference_stats().compute_infer().ns(), 0u);
}

TEST_F(KServeTest, StreamAnswersInOrderAndGoesOnAfterAnError) {
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = kserve_->ModelStreamInfer(&context);
  ModelInferRequest good = ValidInfer();
  ModelInferRequest bad = ValidInfer();
  bad.set_id("bad");
  Param(&bad, "head_dim", 7);
  good.set_id("a");
  ASSERT_TRUE(stream->Write(good));
  ASSERT_TRUE(stream->Write(bad));
  good.set_id("c");
  ASSERT_TRUE(stream->Write(good));
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  std::vector<std::string> ids, errors;
  while (stream->Read(&response)) {
    ids.push_back(response.infer_response().id());
    errors.push_back(response.error_message());
  }
  ASSERT_TRUE(GrpcStatusIs(stream->Finish(), StatusCode::OK, ""));
  ASSERT_EQ(ids, (std::vector<std::string>{"a", "bad", "c"}));
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("head_dim is 7"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "");
}

// A stream message's reply (written to the wire by the same writer as
// ModelInfer's, inside a ModelStreamInferResponse) is the unary reply.
TEST_F(KServeTest, StreamReplyIsTheModelInferReply) {
  ModelInferRequest request = ValidInfer();
  request.set_id("same");
  ModelInferResponse unary;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &unary), StatusCode::OK, ""));
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = kserve_->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  inference::ModelStreamInferResponse streamed;
  ASSERT_TRUE(stream->Read(&streamed));
  ASSERT_TRUE(GrpcStatusIs(stream->Finish(), StatusCode::OK, ""));
  EXPECT_EQ(streamed.error_message(), "");
  EXPECT_EQ(streamed.infer_response().SerializeAsString(), unary.SerializeAsString());
  EXPECT_EQ(unary.id(), "same");
  EXPECT_EQ(unary.outputs_size(), unary.raw_output_contents_size());
}

// A reply past max_message_bytes (attention scores here: the inputs are
// small) is refused before its bytes are written, naming the limit; the
// server goes on serving.
TEST_F(KServeTest, ReplyOverMaxMessageBytesIsRefusedNamingTheLimit) {
  ServerOptions options = DefaultOptions();
  options.max_message_bytes = 64 << 10;
  StartWith(options);
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(8, 512);
  // Scores [1, 1, 128, 256] float32: 128 KiB.
  *attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 128, 1, 8}, 31);
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 256, 1, 8}, 32);
  ModelInferResponse response;
  EXPECT_TRUE(GrpcStatusIs(Infer(InferFor(attention), &response), StatusCode::RESOURCE_EXHAUSTED,
                           "is over the server's max_message_bytes 65536"));
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 16, 1, 8}, 33);
  ASSERT_TRUE(GrpcStatusIs(Infer(InferFor(attention), &response), StatusCode::OK, ""));
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::AttentionScoresResponse want;
  ASSERT_TRUE(GrpcStatusIs(stub_->AttentionScores(&context, attention, &want), StatusCode::OK, ""));
  EXPECT_TRUE(OutputBytes(response, "scores") == want.scores().data());
}

// Each message of a stream is admitted like a ModelInfer: it holds a call
// slot from its arrival until its response is written. Idle streams beyond
// max_concurrent_calls leave every slot to other calls; a message that
// arrives while the slots are all held by other messages ends its stream
// RESOURCE_EXHAUSTED; each idle stream is served when it sends.
TEST_F(KServeTest, StreamMessagesHoldASlotOnlyWhileServed) {
  constexpr int kLimit = 2;
  constexpr int kStreams = 3 * kLimit;
  ServerOptions options = DefaultOptions();
  options.max_concurrent_calls = kLimit;
  StartWith(options);
  using Stream = grpc::ClientReaderWriter<ModelInferRequest, inference::ModelStreamInferResponse>;
  grpc::ClientContext contexts[kStreams];
  std::unique_ptr<Stream> streams[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    SetDeadline(&contexts[i]);
    streams[i] = kserve_->ModelStreamInfer(&contexts[i]);
  }
  ModelInferResponse response;
  for (int i = 0; i < 2 * kLimit; ++i) {
    EXPECT_TRUE(GrpcStatusIs(Infer(ValidInfer(), &response), StatusCode::OK, ""));
  }
  EXPECT_EQ(server_->gate().in_flight(), 0);

  // The first kLimit streams each send a message the backend holds: the
  // slots are theirs until their responses are written.
  backend_->Hold();
  for (int i = 0; i < kLimit; ++i) ASSERT_TRUE(streams[i]->Write(ValidInfer()));
  ASSERT_TRUE(backend_->WaitForHeld(kLimit, absl::Seconds(20)));
  EXPECT_EQ(server_->gate().in_flight(), kLimit);
  EXPECT_TRUE(GrpcStatusIs(Infer(ValidInfer(), &response), StatusCode::RESOURCE_EXHAUSTED,
                           "max_concurrent_calls 2"));
  Stream& refused = *streams[kStreams - 1];
  ASSERT_TRUE(refused.Write(ValidInfer()));
  inference::ModelStreamInferResponse reply;
  EXPECT_FALSE(refused.Read(&reply));
  EXPECT_TRUE(
      GrpcStatusIs(refused.Finish(), StatusCode::RESOURCE_EXHAUSTED, "max_concurrent_calls 2"));
  backend_->Release();

  // Every stream but the refused one is served, the held ones included.
  for (int i = 0; i < kStreams - 1; ++i) {
    if (i >= kLimit) {
      ASSERT_TRUE(streams[i]->Write(ValidInfer()));
    }
    ASSERT_TRUE(streams[i]->Read(&reply)) << "stream " << i;
    EXPECT_EQ(reply.error_message(), "") << "stream " << i;
    EXPECT_EQ(reply.infer_response().outputs_size(), 2) << "stream " << i;
    streams[i]->WritesDone();
    EXPECT_TRUE(GrpcStatusIs(streams[i]->Finish(), StatusCode::OK, "")) << "stream " << i;
  }
  ASSERT_TRUE(server_->gate().WaitForIdle(absl::Now() + absl::Seconds(20)));
}

TEST_F(KServeTest, DrainingServerIsNotReadyAndRefusesInference) {
  server_->StartDraining();
  grpc::ClientContext context;
  SetDeadline(&context);
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(GrpcStatusIs(kserve_->ServerReady(&context, {}, &ready), StatusCode::OK, ""));
  EXPECT_FALSE(ready.ready());
  ModelInferResponse response;
  EXPECT_TRUE(GrpcStatusIs(Infer(ValidInfer(), &response), StatusCode::UNAVAILABLE, "draining"));
}

// ---- Shared memory --------------------------------------------------------------

class ShmObject {
 public:
  explicit ShmObject(size_t bytes)
      : key_(absl::StrCat("/rope-kserve-test-", getpid())), bytes_(bytes) {
    const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    // Allocated whole, as clients should (the server allocates sparse ones).
    EXPECT_EQ(posix_fallocate(fd, 0, static_cast<off_t>(bytes)), 0);
    data_ = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~ShmObject() {
    munmap(data_, bytes_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* data() { return data_; }

 private:
  std::string key_;
  size_t bytes_;
  char* data_ = nullptr;
};

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>* p,
               const std::string& region, int64_t offset, int64_t size) {
  (*p)["shared_memory_region"].set_string_param(region);
  (*p)["shared_memory_offset"].set_int64_param(offset);
  (*p)["shared_memory_byte_size"].set_int64_param(size);
}

TEST_F(KServeTest, SystemSharedMemoryRoundTrip) {
  ShmObject object(1 << 16);
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name("io");
    request.set_key(object.key());
    request.set_byte_size(1 << 16);
    inference::SystemSharedMemoryRegisterResponse response;
    ASSERT_TRUE(GrpcStatusIs(kserve_->SystemSharedMemoryRegister(&context, request, &response),
                             StatusCode::OK, ""));
  }
  v1::RotateRequest rotate;
  *rotate.mutable_config() = MakeConfig(16, 128, v1::HALF);
  *rotate.mutable_q() = RandomTensor(DType::kFloat16, {1, 4, 2, 16}, 31);
  for (int64_t p : {1, 100, 7, 9}) rotate.add_positions(p);
  const std::string q = rotate.q().data();
  std::memcpy(object.data(), q.data(), q.size());
  std::memcpy(object.data() + 4096, rotate.positions().data(), 32);

  // q and positions from the region, q_out to the region at 8192.
  ModelInferRequest request;
  request.set_model_name("rotate");
  SetConfigParameters(rotate.config(), &request);
  auto* input = request.add_inputs();
  input->set_name("q");
  input->set_datatype("FP16");
  *input->mutable_shape() = rotate.q().shape();
  SetRegion(input->mutable_parameters(), "io", 0, static_cast<int64_t>(q.size()));
  auto* positions = request.add_inputs();
  positions->set_name("positions");
  positions->set_datatype("INT64");
  positions->add_shape(4);
  SetRegion(positions->mutable_parameters(), "io", 4096, 32);
  auto* output = request.add_outputs();
  output->set_name("q_out");
  SetRegion(output->mutable_parameters(), "io", 8192, static_cast<int64_t>(q.size()));
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  const std::string want = Rotate(rotate).q().data();
  EXPECT_EQ(std::string(object.data() + 8192, q.size()), want);
  EXPECT_EQ(std::string(object.data(), q.size()), q) << "the input region was modified";
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_TRUE(response.raw_output_contents(0).empty());

  // The same input region, q_out in the response: the region stays as it was.
  request.clear_outputs();
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  EXPECT_TRUE(OutputBytes(response, "q_out") == want);
  EXPECT_EQ(std::string(object.data(), q.size()), q) << "the input region was modified";

  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryStatusResponse status;
    ASSERT_TRUE(
        GrpcStatusIs(kserve_->SystemSharedMemoryStatus(&context, {}, &status), StatusCode::OK, ""));
    ASSERT_EQ(status.regions().count("io"), 1u);
    EXPECT_EQ(status.regions().at("io").key(), object.key());
    EXPECT_EQ(status.regions().at("io").byte_size(), 1u << 16);
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::CudaSharedMemoryStatusResponse status;
    ASSERT_TRUE(
        GrpcStatusIs(kserve_->CudaSharedMemoryStatus(&context, {}, &status), StatusCode::OK, ""));
    EXPECT_TRUE(status.regions().empty());
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryUnregisterResponse response_unregister;
    ASSERT_TRUE(
        GrpcStatusIs(kserve_->SystemSharedMemoryUnregister(&context, {}, &response_unregister),
                     StatusCode::OK, ""));
  }
  EXPECT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::NOT_FOUND, "\"io\""));
}

// An attention model's new tensors by region: sinks and q_positions read
// from it, lse written to it (its region a capacity, as in Triton), output
// in the reply.
TEST_F(KServeTest, AttentionSinksPositionsAndLseThroughSharedMemory) {
  ShmObject object(1 << 16);
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name("att");
    request.set_key(object.key());
    request.set_byte_size(1 << 16);
    inference::SystemSharedMemoryRegisterResponse response;
    ASSERT_TRUE(GrpcStatusIs(kserve_->SystemSharedMemoryRegister(&context, request, &response),
                             StatusCode::OK, ""));
  }
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = MakeConfig(16, 128, v1::HALF);
  *attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 5, 2, 16}, 71);
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 5, 1, 16}, 72);
  *attention.mutable_v() = RandomTensor(DType::kFloat32, {1, 5, 1, 16}, 73);
  attention.set_causal(true);
  for (float sink : {1.5f, -0.5f}) attention.add_sinks(sink);
  for (int64_t p : {10, 11, 12, 40, 41}) attention.add_q_positions(p);
  for (int64_t p : {9, 10, 11, 39, 40}) attention.add_k_positions(p);
  for (v1::AttentionResult result : {v1::OUTPUT, v1::LSE}) attention.add_results(result);
  const v1::AttentionScoresResponse want = AttentionScores(kserve_.get(), stub_.get(), attention);
  ASSERT_EQ(want.lse().data().size(), 40u);
  std::memcpy(object.data() + 1024, attention.sinks().data(), 8);
  std::memcpy(object.data() + 2048, attention.q_positions().data(), 40);

  ModelInferRequest request = InferFor(attention);
  // Inputs q, k, v, sinks, q_positions, k_positions: sinks (4th) and
  // q_positions (5th) from the region, their raw entries dropped.
  ASSERT_EQ(request.inputs(3).name(), "sinks");
  ASSERT_EQ(request.inputs(4).name(), "q_positions");
  SetRegion(request.mutable_inputs(3)->mutable_parameters(), "att", 1024, 8);
  SetRegion(request.mutable_inputs(4)->mutable_parameters(), "att", 2048, 40);
  request.mutable_raw_input_contents()->DeleteSubrange(3, 2);
  ASSERT_EQ(request.outputs(1).name(), "lse");
  SetRegion(request.mutable_outputs(1)->mutable_parameters(), "att", 8192, 4096);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  ExpectSameTensor(response, "output", want.output(), "FP32");
  EXPECT_EQ(std::string(object.data() + 8192, 40), want.lse().data());
  ASSERT_EQ(response.outputs_size(), 2);
  const auto& lse = response.outputs(1);
  EXPECT_EQ(lse.name(), "lse");
  EXPECT_EQ(std::vector<int64_t>(lse.shape().begin(), lse.shape().end()),
            std::vector<int64_t>(want.lse().shape().begin(), want.lse().shape().end()));
  EXPECT_EQ(lse.parameters().at("shared_memory_byte_size").int64_param(), 40);
  EXPECT_TRUE(response.raw_output_contents(1).empty());

  // A region smaller than lse is refused before any work.
  SetRegion(request.mutable_outputs(1)->mutable_parameters(), "att", 8192, 36);
  EXPECT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::INVALID_ARGUMENT,
                           "for output 'lse' (36 bytes) should be at least 40 bytes"));
}

TEST_F(KServeTest, CudaRegisterOnTheCpuBackendIsRefused) {
  grpc::ClientContext context;
  SetDeadline(&context);
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name("gpu");
  request.set_raw_handle(std::string(64, 'h'));
  request.set_byte_size(1024);
  inference::CudaSharedMemoryRegisterResponse response;
  EXPECT_TRUE(GrpcStatusIs(kserve_->CudaSharedMemoryRegister(&context, request, &response),
                           StatusCode::FAILED_PRECONDITION, "backend is cpu"));
}

// ---- --model_repository ---------------------------------------------------------

// A repository of one model, `folder`: the fixture's config.json and
// `settings` as its ropeserve.json.
std::string WriteRepository(const std::string& settings, const char* fixture,
                            const std::string& folder = "llama") {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    absl::StrCat("kserve-repo-", getpid(), "-", std::rand());
  std::filesystem::create_directories(dir / folder);
  std::filesystem::copy_file(std::filesystem::path(ROPE_HF_CONFIGS_DIR) / fixture,
                             dir / folder / "config.json");
  std::ofstream(dir / folder / "ropeserve.json") << settings;
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(KServeTest, RepositoryModelGivesTheRotateOfItsConfigJson) {
  ServerOptions options = DefaultOptions();
  options.model_repository =
      WriteRepository(R"({"operation": "rotate", "max_len": 4096, "datatype": "BF16"})",
                      "Llama-3.1-8B-Instruct.json");
  StartWith(options);
  v1::RotateRequest rotate;
  rotate.mutable_config()->set_hf_config_json(
      ReadFile(std::string(ROPE_HF_CONFIGS_DIR) + "/Llama-3.1-8B-Instruct.json"));
  rotate.mutable_config()->set_max_len(4096);
  rotate.mutable_config()->set_layout(v1::HALF);
  *rotate.mutable_q() = RandomTensor(DType::kBFloat16, {1, 3, 4, 128}, 41);
  rotate.set_start_pos(2000);
  ModelInferRequest request;
  request.set_model_name("llama");
  (*request.mutable_parameters())["start_pos"].set_int64_param(2000);
  AddInput("q", rotate.q(), &request);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  EXPECT_TRUE(OutputBytes(response, "q_out") == Rotate(rotate).q().data());

  grpc::ClientContext context;
  SetDeadline(&context);
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("llama");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(GrpcStatusIs(kserve_->ModelMetadata(&context, metadata_request, &metadata),
                           StatusCode::OK, ""));
  EXPECT_EQ(metadata.inputs(0).datatype(), "BF16");
  EXPECT_EQ(metadata.inputs(0).shape(3), 128);

  (*request.mutable_parameters())["theta"].set_double_param(10000);
  EXPECT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::INVALID_ARGUMENT,
                           "parameter 'theta' configures the built-in models"));
}

TEST_F(KServeTest, RepositoryThatDoesNotLoadStopsTheStart) {
  struct Bad {
    std::string settings;
    std::string message;
  };
  for (const Bad& bad :
       {Bad{R"({"operation": "spin"})", "\"operation\" is \"spin\""},
        Bad{R"({"operation": "rotate", "colour": 1})", "\"colour\" is not a setting"},
        Bad{R"({"operation": "rotate", "max_len": 4096, "layer_type": "nope"})", "nope"},
        Bad{R"({"operation": "rotate", "max_len": 4294967295})", "max_len"},
        Bad{"not json", "not a JSON object"}}) {
    ServerOptions options = DefaultOptions();
    options.model_repository = WriteRepository(bad.settings, "Llama-3.1-8B-Instruct.json");
    absl::StatusOr<std::unique_ptr<RopeServer>> server =
        RopeServer::Start(std::make_unique<Engine>(*NewCpuBackend(1), EngineLimits()), options);
    ASSERT_FALSE(server.ok()) << bad.settings;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
    EXPECT_NE(server.status().message().find(bad.message), std::string::npos) << server.status();
  }
}

}  // namespace
}  // namespace test
}  // namespace rope

namespace rope {
namespace test {
namespace {

std::string Fixture(const char* name) {
  return ReadFile(std::string(ROPE_HF_CONFIGS_DIR) + "/" + name);
}

// The serving engines' variants as request parameters of the built-in
// models: each ModelInfer gives the bytes of the rope.v1 call with the
// fields of the same names.
TEST_F(KServeTest, BuiltinModelsTakeTheVariantParameters) {
  {
    // An MLA-like head (32 features, then 16 rotating), HunYuan's dynamic
    // NTK with alpha from a rope_scaling object, float8 outputs, and q and
    // k of 3 and 2 heads.
    v1::RotateRequest rotate;
    *rotate.mutable_config() = MakeConfig(48, 4096, v1::HALF, 0, 10000);
    rotate.mutable_config()->set_rotary_offset(32);
    rotate.mutable_config()->mutable_dynamic_ntk_alpha()->set_alpha(1000);
    *rotate.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 3, 48}, 61);
    *rotate.mutable_k() = RandomTensor(DType::kFloat32, {1, 3, 2, 48}, 62);
    rotate.set_start_pos(4000);
    rotate.set_output_dtype(v1::FLOAT8_E4M3FN);
    rotate.set_output_scale(8);
    rotate.set_k_output_scale(0.5);
    ModelInferRequest request = InferFor(rotate);
    auto& p = *request.mutable_parameters();
    p["rotary_offset"].set_int64_param(32);
    p["rope_scaling"].set_string_param(R"({"type": "dynamic", "alpha": 1000})");
    p["output_dtype"].set_string_param("float8_e4m3fn");
    p["output_scale"].set_double_param(8);
    p["k_output_scale"].set_string_param("0.5");
    ModelInferResponse response;
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    const v1::RotateResponse want = Rotate(rotate);
    EXPECT_EQ(want.q().dtype(), v1::FLOAT8_E4M3FN);
    EXPECT_EQ(want.q().data().size(), 3u * 3 * 48);
    EXPECT_TRUE(OutputBytes(response, "q_out") == want.q().data());
    EXPECT_TRUE(OutputBytes(response, "k_out") == want.k().data());
    for (const auto& output : response.outputs()) {
      EXPECT_EQ(output.datatype(), "UINT8") << output.name();
      EXPECT_EQ(output.parameters().at("output_dtype").string_param(), "FLOAT8_E4M3FN");
    }
    // Without the offset parameter the first features rotate: other bytes.
    p.erase("rotary_offset");
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    EXPECT_FALSE(OutputBytes(response, "q_out") == want.q().data());
  }
  {
    // Ernie 4.5-VL's 3-D layout from a rope_scaling object: freq_allocation
    // 20 of 64 frequencies on t, h = w = 22.
    v1::RotateRequest rotate;
    *rotate.mutable_config() = MakeConfig(128, 4096, v1::INTERLEAVED, 0, 500000);
    for (uint32_t section : {20u, 22u, 22u}) rotate.mutable_config()->mutable_mrope()->add_section(section);
    rotate.mutable_config()->set_mrope_ernie_3d(true);
    *rotate.mutable_q() = RandomTensor(DType::kFloat32, {1, 2, 2, 128}, 63);
    for (int64_t p : {7, 8, 30, 31, 40, 41}) rotate.add_positions(p);
    v1::RotateRequest plain = rotate;
    plain.mutable_config()->clear_mrope();
    plain.mutable_config()->clear_mrope_ernie_3d();
    ModelInferRequest request = InferFor(plain);
    (*request.mutable_parameters())["rope_scaling"].set_string_param(
        R"({"rope_type": "ernie_3d", "freq_allocation": 20})");
    ModelInferResponse response;
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    EXPECT_TRUE(OutputBytes(response, "q_out") == Rotate(rotate).q().data());
  }
  {
    // Llama 4 Scout's layer 3 by index: a NoPE layer, the identity.
    v1::RotateRequest rotate;
    rotate.mutable_config()->set_max_len(65536);
    *rotate.mutable_q() = RandomTensor(DType::kBFloat16, {1, 2, 4, 128}, 64);
    rotate.set_start_pos(30000);
    ModelInferRequest request = InferFor(rotate);
    auto& p = *request.mutable_parameters();
    p.erase("head_dim");
    p["hf_config_json"].set_string_param(Fixture("Llama-4-Scout-17B-16E-Instruct.json"));
    p["hf_layer_index"].set_int64_param(3);
    ModelInferResponse response;
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    EXPECT_TRUE(OutputBytes(response, "q_out") == rotate.q().data());
    p["hf_layer_index"].set_int64_param(0);  // a chunked_attention layer rotates
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    EXPECT_FALSE(OutputBytes(response, "q_out") == rotate.q().data());
    p["hf_layer_index"].set_int64_param(48);
    EXPECT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::INVALID_ARGUMENT,
                             "hf_layer_index is 48: hf_config_json has 48 decoder layers"));
  }
  {
    // An explicit NoPE layer with Llama 4's temperature tuning in attention.
    v1::AttentionScoresRequest attention;
    *attention.mutable_config() = MakeConfig(64, 65536, v1::HALF);
    attention.mutable_config()->mutable_no_rope()->set_floor_scale(4);
    attention.mutable_config()->mutable_no_rope()->set_attn_scale(0.1);
    *attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 2, 64}, 65);
    *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 4, 1, 64}, 66);
    attention.set_q_start_pos(100);
    attention.set_k_start_pos(99);
    ModelInferRequest request = InferFor(attention);
    auto& p = *request.mutable_parameters();
    p["no_rope"].set_bool_param(true);
    p["floor_scale"].set_double_param(4);
    p["attn_scale"].set_string_param("0.1");
    ModelInferResponse response;
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    const v1::AttentionScoresResponse want = AttentionScores(kserve_.get(), stub_.get(), attention);
    EXPECT_TRUE(OutputBytes(response, "scores") == want.scores().data());
    p.erase("floor_scale");
    p.erase("attn_scale");
    ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
    EXPECT_FALSE(OutputBytes(response, "scores") == want.scores().data());
  }
}

// DeepSeek-V3's published config.json as a repository model, with nothing
// but its operation in ropeserve.json: served at the rope width
// (qk_rope_head_dim 64 of the 192-feature MLA head), paired as DeepSeek-V3's
// transformers code pairs (neighbours), with its YaRN (factor 40 over 4096)
// and max_position_embeddings 163840.
TEST_F(KServeTest, RepositoryServesDeepSeekV3AtTheRopeWidth) {
  ServerOptions options = DefaultOptions();
  options.model_repository =
      WriteRepository(R"({"operation": "rotate"})", "DeepSeek-V3.json", "deepseek-v3");
  StartWith(options);

  grpc::ClientContext context;
  SetDeadline(&context);
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("deepseek-v3");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(GrpcStatusIs(kserve_->ModelMetadata(&context, metadata_request, &metadata),
                           StatusCode::OK, ""));
  ASSERT_EQ(metadata.inputs(0).shape_size(), 4);
  EXPECT_EQ(metadata.inputs(0).shape(3), 64);

  v1::RotateRequest rotate;
  rotate.mutable_config()->set_hf_config_json(Fixture("DeepSeek-V3.json"));
  rotate.mutable_config()->set_max_len(163840);
  rotate.mutable_config()->set_layout(v1::INTERLEAVED);
  *rotate.mutable_q() = RandomTensor(DType::kBFloat16, {1, 4, 16, 64}, 71);
  *rotate.mutable_k() = RandomTensor(DType::kBFloat16, {1, 4, 1, 64}, 72);
  for (int64_t p : {0, 4095, 4096, 163839}) rotate.add_positions(p);
  ModelInferRequest request;
  request.set_model_name("deepseek-v3");
  AddInput("q", rotate.q(), &request);
  AddInput("k", rotate.k(), &request);
  auto* positions = request.add_inputs();
  positions->set_name("positions");
  positions->set_datatype("INT64");
  positions->add_shape(4);
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(rotate.positions().data()), 32));
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  const v1::RotateResponse want = Rotate(rotate);
  EXPECT_TRUE(OutputBytes(response, "q_out") == want.q().data());
  EXPECT_TRUE(OutputBytes(response, "k_out") == want.k().data());
  // Float8 outputs for an fp8 KV cache, as DeepSeek-V3 serves keep it.
  ModelInferRequest fp8 = request;
  (*fp8.mutable_parameters())["output_dtype"].set_string_param("FLOAT8_E4M3FN");
  (*fp8.mutable_parameters())["k_output_scale"].set_double_param(0.25);
  ASSERT_TRUE(GrpcStatusIs(Infer(fp8, &response), StatusCode::OK, ""));
  v1::RotateRequest rotate_fp8 = rotate;
  rotate_fp8.set_output_dtype(v1::FLOAT8_E4M3FN);
  rotate_fp8.set_k_output_scale(0.25);
  const v1::RotateResponse want_fp8 = Rotate(rotate_fp8);
  EXPECT_TRUE(OutputBytes(response, "q_out") == want_fp8.q().data());
  EXPECT_TRUE(OutputBytes(response, "k_out") == want_fp8.k().data());
  // The configuration is the folder's.
  (*fp8.mutable_parameters())["rotary_offset"].set_int64_param(128);
  EXPECT_TRUE(GrpcStatusIs(Infer(fp8, &response), StatusCode::INVALID_ARGUMENT,
                           "parameter 'rotary_offset' configures the built-in models"));

  rotate.mutable_config()->set_layout(v1::HALF);
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  EXPECT_FALSE(OutputBytes(response, "q_out") == Rotate(rotate).q().data())
      << "the model paired halves: DeepSeek-V3 pairs neighbours";

  // The whole MLA head is rope.v1's (hf_config_json) to rotate; the model
  // takes the rope part, and says so.
  ModelInferRequest whole;
  whole.set_model_name("deepseek-v3");
  AddInput("q", RandomTensor(DType::kBFloat16, {1, 4, 16, 192}, 73), &whole);
  EXPECT_TRUE(GrpcStatusIs(Infer(whole, &response), StatusCode::INVALID_ARGUMENT, "192"));
}

// A layer by number from ropeserve.json: Llama 4 Scout's layer 3 (NoPE) as
// an attention model applies the temperature tuning and no rotation, as
// rope.v1 with hf_layer_index 3 does.
TEST_F(KServeTest, RepositoryLayerIndexSelectsALlama4NopeLayer) {
  ServerOptions options = DefaultOptions();
  options.model_repository =
      WriteRepository(R"({"operation": "attention", "layer_index": 3, "max_len": 65536})",
                      "Llama-4-Scout-17B-16E-Instruct.json", "scout-layer-3");
  StartWith(options);
  v1::AttentionScoresRequest attention;
  attention.mutable_config()->set_hf_config_json(Fixture("Llama-4-Scout-17B-16E-Instruct.json"));
  attention.mutable_config()->set_hf_layer_index(3);
  attention.mutable_config()->set_max_len(65536);
  attention.mutable_config()->set_layout(v1::INTERLEAVED);
  *attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 4, 128}, 81);
  *attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 5, 1, 128}, 82);
  attention.set_q_start_pos(20000);
  attention.set_k_start_pos(19998);
  ModelInferRequest request;
  request.set_model_name("scout-layer-3");
  (*request.mutable_parameters())["q_start_pos"].set_int64_param(20000);
  (*request.mutable_parameters())["k_start_pos"].set_int64_param(19998);
  AddInput("q", attention.q(), &request);
  AddInput("k", attention.k(), &request);
  ModelInferResponse response;
  ASSERT_TRUE(GrpcStatusIs(Infer(request, &response), StatusCode::OK, ""));
  EXPECT_TRUE(OutputBytes(response, "scores") ==
              AttentionScores(kserve_.get(), stub_.get(), attention).scores().data());
  attention.mutable_config()->set_hf_layer_index(0);
  EXPECT_FALSE(OutputBytes(response, "scores") ==
               AttentionScores(kserve_.get(), stub_.get(), attention).scores().data());
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    inference::ModelConfigRequest config_request;
    config_request.set_name("scout-layer-3");
    inference::ModelConfigResponse config;
    ASSERT_TRUE(GrpcStatusIs(kserve_->ModelConfig(&context, config_request, &config),
                             StatusCode::OK, ""));
    const auto& parameters = config.config().parameters();
    EXPECT_EQ(parameters.at("hf_layer_index").string_value(), "3");
    EXPECT_EQ(parameters.at("no_rope").string_value(), "true");
    EXPECT_EQ(parameters.at("layout").string_value(), "interleaved");
  }

  ServerOptions bad = DefaultOptions();
  bad.model_repository =
      WriteRepository(R"({"operation": "rotate", "layer_index": 48, "max_len": 4096})",
                      "Llama-4-Scout-17B-16E-Instruct.json", "scout");
  absl::StatusOr<std::unique_ptr<RopeServer>> server =
      RopeServer::Start(std::make_unique<Engine>(*NewCpuBackend(1), EngineLimits()), bad);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
  EXPECT_NE(server.status().message().find("hf_layer_index is 48"), std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace test
}  // namespace rope
