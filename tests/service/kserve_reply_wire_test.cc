// The ModelInfer reply written straight to the wire (kserve_reply_wire.h)
// against the published messages: the bytes InferReplyWriter hands gRPC,
// parsed with the generated classes, equal field for field the
// ModelInferResponse built as a message from a second run of the same
// request (and are byte for byte its generated serialization where no
// map's order is in play); as a ModelStreamInferResponse they carry it as
// infer_response with no error_message. Rotate and attention models, with
// and without k / v, outputs asked by name (in either order, up to all
// seven of an attention model) or not,
// float16 and float8 outputs, and outputs written to shared memory (the
// region parameters, the empty raw entry). The tensors' bytes reach gRPC
// in slices of their own, the very buffers the kernel wrote.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve/kserve_infer.h"
#include "server/kserve/kserve_models.h"
#include "server/kserve/kserve_reply.h"
#include "server/kserve/kserve_reply_wire.h"
#include "tests/support/grpc_test_util.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using inference::ModelStreamInferResponse;
using kserve::InferReply;
using kserve::InferReplyWriter;

Engine& SharedEngine() {
  static Engine* engine = new Engine(*NewCpuBackend(1), EngineLimits());
  return *engine;
}

const kserve::Model& BuiltinModel(const std::string& name) {
  static const kserve::ModelRepository* models = new kserve::ModelRepository();
  return **models->Find(name, "");
}

void AddInput(const std::string& name, DType dtype, std::vector<int64_t> shape, unsigned seed,
              ModelInferRequest* request) {
  std::mt19937 rng(seed);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  const v1::Tensor tensor = ToProto(Encode(dtype, shape, RandomValues(dtype, count, &rng)));
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(dtype == DType::kFloat32   ? "FP32"
                      : dtype == DType::kFloat16 ? "FP16"
                                                 : "BF16");
  *input->mutable_shape() = tensor.shape();
  request->add_raw_input_contents(tensor.data());
}

void SetConfig(ModelInferRequest* request) {
  auto& p = *request->mutable_parameters();
  p["theta"].set_string_param("500000");
  p["head_dim"].set_int64_param(64);
  p["max_len"].set_int64_param(4096);
}

struct Case {
  std::string label;
  ModelInferRequest request;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto rotate = [](const std::string& id, DType dtype, bool with_k) {
    ModelInferRequest request;
    request.set_model_name("rotate");
    request.set_id(id);
    SetConfig(&request);
    (*request.mutable_parameters())["start_pos"].set_int64_param(100);
    AddInput("q", dtype, {1, 3, 4, 64}, 1, &request);
    if (with_k) AddInput("k", dtype, {1, 3, 2, 64}, 2, &request);
    return request;
  };
  cases.push_back({"rotate q, outputs not named", rotate("a", DType::kFloat32, false)});
  cases.push_back({"rotate q and k, outputs not named", rotate("req-2", DType::kFloat32, true)});
  cases.push_back({"rotate q and k, no id", rotate("", DType::kFloat32, true)});
  cases.push_back({"rotate float16 q and k", rotate("f16", DType::kFloat16, true)});
  {
    ModelInferRequest request = rotate("k only", DType::kFloat32, true);
    request.add_outputs()->set_name("k_out");
    cases.push_back({"rotate q and k, k_out asked", std::move(request)});
  }
  {
    ModelInferRequest request = rotate("both, reversed", DType::kBFloat16, true);
    request.add_outputs()->set_name("k_out");
    request.add_outputs()->set_name("q_out");
    cases.push_back({"rotate q and k, k_out and q_out asked", std::move(request)});
  }
  {
    ModelInferRequest request = rotate("fp8", DType::kFloat32, true);
    (*request.mutable_parameters())["output_dtype"].set_string_param("FLOAT8_E4M3FN");
    cases.push_back({"rotate to float8", std::move(request)});
  }
  auto attention = [](bool with_v) {
    ModelInferRequest request;
    request.set_model_name("attention");
    request.set_id("att");
    SetConfig(&request);
    (*request.mutable_parameters())["q_start_pos"].set_int64_param(5);
    (*request.mutable_parameters())["causal"].set_bool_param(true);
    AddInput("q", DType::kFloat32, {1, 2, 4, 64}, 3, &request);
    AddInput("k", DType::kFloat32, {1, 7, 2, 64}, 4, &request);
    if (with_v) AddInput("v", DType::kFloat32, {1, 7, 2, 64}, 5, &request);
    return request;
  };
  cases.push_back({"attention q and k, scores", attention(false)});
  cases.push_back({"attention q, k and v, both outputs", attention(true)});
  {
    ModelInferRequest request = attention(true);
    request.add_outputs()->set_name("output");
    cases.push_back({"attention q, k and v, output asked", std::move(request)});
  }
  {
    // Every output an attention model has, in an order of their own: the
    // reply's per-output arrays filled to the last place.
    ModelInferRequest request = attention(true);
    auto& p = *request.mutable_parameters();
    p["top_k"].set_int64_param(3);
    p["window_left"].set_int64_param(4);
    p["score_rows_start"].set_int64_param(1);
    AddInput("sinks", DType::kFloat32, {4}, 6, &request);
    for (const char* name : {"score_rows", "lse", "top_k_indices", "output", "key_mass",
                             "top_k_probs", "scores"}) {
      request.add_outputs()->set_name(name);
    }
    cases.push_back({"attention, all seven outputs", std::move(request)});
  }
  return cases;
}

// The ModelInfer reply of `request` as a message (the generated classes).
ModelInferResponse MessageReply(ModelInferRequest request) {
  absl::StatusOr<kserve::InferPlan> plan =
      kserve::PlanModelInfer(BuiltinModel(request.model_name()), &request, 1 << 24);
  EXPECT_TRUE(plan.ok()) << plan.status();
  ModelInferResponse response;
  if (plan.ok()) {
    const absl::Status run = kserve::RunModelInfer(SharedEngine(), {}, &*plan, &response);
    EXPECT_TRUE(run.ok()) << run;
  }
  return response;
}

// What InferReplyWriter writes for `request`: the bytes, and whether each
// output tensor's bytes went to gRPC as the very buffer the kernel wrote.
struct Written {
  std::string bytes;
  int64_t announced_bytes = -1;
  bool tensors_in_place = false;
};

Written WriterReply(ModelInferRequest request, InferReplyWriter::Form form) {
  Written written;
  absl::StatusOr<kserve::InferPlan> plan =
      kserve::PlanModelInfer(BuiltinModel(request.model_name()), &request, 1 << 24);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return written;
  InferReplyWriter writer(form);
  const absl::Status run = kserve::RunModelInfer(SharedEngine(), {}, &*plan, writer.reply());
  EXPECT_TRUE(run.ok()) << run;
  std::vector<const char*> tensor_buffers;
  for (int i = 0; i < writer.reply()->output_count; ++i) {
    if (!writer.reply()->raw[i].empty()) tensor_buffers.push_back(writer.reply()->raw[i].data());
  }
  written.announced_bytes = writer.ReplyBytes();
  grpc::ByteBuffer wire;
  EXPECT_TRUE(writer.WriteReply(&wire).ok());
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(wire.Dump(&slices).ok());
  size_t found = 0;
  for (const grpc::Slice& slice : slices) {
    written.bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    for (const char* buffer : tensor_buffers) {
      if (reinterpret_cast<const char*>(slice.begin()) == buffer) ++found;
    }
  }
  written.tensors_in_place = found == tensor_buffers.size() && !tensor_buffers.empty();
  return written;
}

bool HasMapWithSeveralEntries(const ModelInferResponse& response) {
  for (const auto& output : response.outputs()) {
    if (output.parameters_size() > 1) return true;
  }
  return response.parameters_size() > 1;
}

TEST(KServeReplyWireTest, ParsesToTheMessageBuiltReply) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    const ModelInferResponse expected = MessageReply(c.request);
    ASSERT_GT(expected.outputs_size(), 0);
    const Written written = WriterReply(c.request, InferReplyWriter::Form::kModelInferResponse);
    EXPECT_EQ(written.announced_bytes, static_cast<int64_t>(written.bytes.size()));
    EXPECT_TRUE(written.tensors_in_place);
    ModelInferResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(written.bytes));
    std::string differences;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&differences);
    EXPECT_TRUE(differencer.Compare(parsed, expected)) << differences;
    EXPECT_EQ(written.bytes, expected.SerializeAsString());
  }
}

TEST(KServeReplyWireTest, StreamFormCarriesTheReplyAsInferResponse) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.label);
    const ModelInferResponse expected = MessageReply(c.request);
    const Written written =
        WriterReply(c.request, InferReplyWriter::Form::kModelStreamInferResponse);
    EXPECT_EQ(written.announced_bytes, static_cast<int64_t>(written.bytes.size()));
    ModelStreamInferResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(written.bytes));
    EXPECT_EQ(parsed.error_message(), "");
    ASSERT_TRUE(parsed.has_infer_response());
    std::string differences;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&differences);
    EXPECT_TRUE(differencer.Compare(parsed.infer_response(), expected)) << differences;
    ModelStreamInferResponse message;
    *message.mutable_infer_response() = expected;
    EXPECT_EQ(written.bytes, message.SerializeAsString());
  }
}

// Outputs written to shared memory carry three parameters and an empty raw
// entry (as RunModelInfer leaves them; regions need a registry, so the
// reply is made here): map entries in any number, empty strings and
// negative dims all parse back.
TEST(KServeReplyWireTest, RegionOutputsAndTheirParametersParseBack) {
  InferReplyWriter writer(InferReplyWriter::Form::kModelInferResponse);
  InferReply& reply = *writer.reply();
  reply.model_name = "rotate";
  reply.model_version = "1";
  reply.id = "shm";
  reply.output_count = 2;
  reply.outputs[0].name = "q_out";
  reply.outputs[0].datatype = "FP32";
  for (int64_t d : {1, 300, 32, 128}) reply.outputs[0].shape.Add(d);
  inference::InferParameter region, offset, size, empty_key;
  region.set_string_param("region-a");
  offset.set_int64_param(4096);
  size.set_int64_param(int64_t{1} << 40);
  empty_key.set_bool_param(false);  // a value that is its default: an empty message
  reply.outputs[0].parameters.emplace_back("shared_memory_region", region);
  reply.outputs[0].parameters.emplace_back("shared_memory_offset", offset);
  reply.outputs[0].parameters.emplace_back("shared_memory_byte_size", size);
  reply.outputs[0].parameters.emplace_back("", empty_key);
  reply.outputs[1].name = "k_out";
  reply.outputs[1].datatype = "FP16";
  for (int64_t d : {-1, 0, 3}) reply.outputs[1].shape.Add(d);
  reply.raw[1] = std::string(1000, '\x7f');

  ModelInferResponse expected;
  expected.set_model_name("rotate");
  expected.set_model_version("1");
  expected.set_id("shm");
  auto* q = expected.add_outputs();
  q->set_name("q_out");
  q->set_datatype("FP32");
  for (int64_t d : {1, 300, 32, 128}) q->add_shape(d);
  (*q->mutable_parameters())["shared_memory_region"] = region;
  (*q->mutable_parameters())["shared_memory_offset"] = offset;
  (*q->mutable_parameters())["shared_memory_byte_size"] = size;
  (*q->mutable_parameters())[""] = empty_key;
  auto* k = expected.add_outputs();
  k->set_name("k_out");
  k->set_datatype("FP16");
  for (int64_t d : {-1, 0, 3}) k->add_shape(d);
  expected.add_raw_output_contents("");
  expected.add_raw_output_contents(std::string(1000, '\x7f'));
  ASSERT_TRUE(HasMapWithSeveralEntries(expected));

  const int64_t announced = writer.ReplyBytes();
  EXPECT_EQ(announced, static_cast<int64_t>(expected.ByteSizeLong()));
  grpc::ByteBuffer wire;
  ASSERT_TRUE(writer.WriteReply(&wire).ok());
  EXPECT_EQ(static_cast<int64_t>(wire.Length()), announced);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(wire.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  ModelInferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  std::string differences;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differencer.Compare(parsed, expected)) << differences;
  // The writer gave its tensor bytes away.
  EXPECT_TRUE(writer.reply()->raw[1].empty());
}

// ToResponse (the message form the fuzz target and benchmarks use) moves
// the reply's parts: the same message as the writer's bytes parse to.
// The per-head lists and positions an attention plan decodes out of raw
// bytes are charged beside the rope.v1 request's estimate.
TEST(KServeReplyWireTest, PlanEstimateChargesDecodedListsAndPositions) {
  auto plan_of = [](bool with_lists) {
    ModelInferRequest request;
    request.set_model_name("attention");
    SetConfig(&request);
    AddInput("q", DType::kFloat32, {1, 2, 4, 64}, 3, &request);
    AddInput("k", DType::kFloat32, {1, 7, 2, 64}, 4, &request);
    if (with_lists) {
      AddInput("sinks", DType::kFloat32, {4}, 6, &request);
      auto* positions = request.add_inputs();
      positions->set_name("q_positions");
      positions->set_datatype("INT32");
      positions->add_shape(2);
      const int32_t values[2] = {3, 9};
      request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(values), 8));
    }
    absl::StatusOr<kserve::InferPlan> plan =
        kserve::PlanModelInfer(BuiltinModel("attention"), &request, 1 << 24);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return kserve::PlanEstimate(*plan).more_bytes;
  };
  // 4 sinks as float, 2 positions as int64.
  EXPECT_EQ(plan_of(true) - plan_of(false), 4 * 4 + 2 * 8);
}

TEST(KServeReplyWireTest, ToResponseBuildsWhatTheBytesSay) {
  ModelInferRequest request = Cases()[1].request;
  absl::StatusOr<kserve::InferPlan> plan =
      kserve::PlanModelInfer(BuiltinModel("rotate"), &request, 1 << 24);
  ASSERT_TRUE(plan.ok());
  InferReply reply;
  ASSERT_TRUE(kserve::RunModelInfer(SharedEngine(), {}, &*plan, &reply).ok());
  ASSERT_EQ(reply.output_count, 2);
  const std::string q_bytes = reply.raw[0];
  ModelInferResponse response;
  kserve::ToResponse(&reply, &response);
  EXPECT_EQ(response.model_name(), "rotate");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(response.id(), "req-2");
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "q_out");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(response.outputs(0).shape().begin(),
                                 response.outputs(0).shape().end()),
            (std::vector<int64_t>{1, 3, 4, 64}));
  EXPECT_EQ(response.outputs(1).name(), "k_out");
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(response.raw_output_contents(0), q_bytes);
  EXPECT_EQ(response.raw_output_contents(1).size(), 3u * 2 * 64 * 4);
}

}  // namespace
}  // namespace test
}  // namespace rope
