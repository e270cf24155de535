// The server-side cost of the KServe front end, in process (no gRPC): a
// decode-size rotation (q [1,1,32,128], k [1,1,8,128], float32) answered as
// the rope.v1 Rotate (AnswerRotate) and as a ModelInfer to the built-in
// "rotate" model (PlanModelInfer + RunModelInfer: parameters, conversion,
// the same AnswerRotate, the response). Each iteration starts from a copy
// of the parsed request, as the service receives it; the difference between
// the two is what the protocol adds.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/proto_engine/rope_calls.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/byte_buffer.h"
#include "inference/grpc_service.pb.h"
#include "rope/v1/rope.pb.h"
#include "server/kserve/kserve_infer.h"
#include "server/kserve/kserve_models.h"
#include "server/kserve/kserve_reply_wire.h"

namespace {

rope::Engine& SharedEngine() {
  static rope::Engine* engine =
      new rope::Engine(*rope::NewCpuBackend(1), rope::EngineLimits());
  return *engine;
}

std::string RandomFloats(int64_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::string bytes(count * 4, '\0');
  for (int64_t i = 0; i < count; ++i) {
    const float v = u(rng);
    std::memcpy(&bytes[i * 4], &v, 4);
  }
  return bytes;
}

rope::v1::RotateRequest DecodeRotate() {
  rope::v1::RotateRequest r;
  r.mutable_config()->set_theta(500000);
  r.mutable_config()->set_head_dim(128);
  r.mutable_config()->set_max_len(8192);
  r.set_start_pos(100);
  for (auto [tensor, heads, seed] :
       {std::tuple{r.mutable_q(), 32, 7u}, std::tuple{r.mutable_k(), 8, 8u}}) {
    tensor->set_dtype(rope::v1::FLOAT32);
    for (int64_t d : {1, 1, heads, 128}) tensor->add_shape(d);
    tensor->set_data(RandomFloats(heads * 128, seed));
  }
  return r;
}

inference::ModelInferRequest DecodeInfer(const rope::v1::RotateRequest& rotate) {
  inference::ModelInferRequest r;
  r.set_model_name("rotate");
  auto& p = *r.mutable_parameters();
  p["theta"].set_string_param("500000");
  p["head_dim"].set_int64_param(128);
  p["max_len"].set_int64_param(8192);
  p["start_pos"].set_int64_param(100);
  for (const auto& [name, tensor] : {std::pair{"q", &rotate.q()}, std::pair{"k", &rotate.k()}}) {
    auto* input = r.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    *input->mutable_shape() = tensor->shape();
    r.add_raw_input_contents(tensor->data());
  }
  return r;
}

void BM_RopeV1Rotate(benchmark::State& state) {
  const rope::v1::RotateRequest base = DecodeRotate();
  for (auto _ : state) {
    auto request = std::make_unique<rope::v1::RotateRequest>(base);
    auto reply = std::make_unique<rope::v1::RotateResponse>();
    if (!rope::AnswerRotate(SharedEngine(), request.get(), reply.get()).ok()) {
      state.SkipWithError("AnswerRotate failed");
      break;
    }
    benchmark::DoNotOptimize(reply->q().data().data());
  }
}
BENCHMARK(BM_RopeV1Rotate);

// Llama 3.1's rope_scaling, as a config.json spells it.
constexpr char kLlama3Scaling[] =
    R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, )"
    R"("high_freq_factor": 4.0, "original_max_position_embeddings": 8192})";

// state.range(0) != 0: the request also sends parameter rope_scaling.
void BM_KServeModelInfer(benchmark::State& state) {
  static const rope::kserve::ModelRepository* models = new rope::kserve::ModelRepository();
  const rope::kserve::Model* model = *models->Find("rotate", "");
  inference::ModelInferRequest base = DecodeInfer(DecodeRotate());
  if (state.range(0) != 0) {
    (*base.mutable_parameters())["rope_scaling"].set_string_param(kLlama3Scaling);
  }
  for (auto _ : state) {
    auto request = std::make_unique<inference::ModelInferRequest>(base);
    auto response = std::make_unique<inference::ModelInferResponse>();
    absl::StatusOr<rope::kserve::InferPlan> plan =
        rope::kserve::PlanModelInfer(*model, request.get(), int64_t{1} << 28);
    if (!plan.ok() ||
        !rope::kserve::RunModelInfer(SharedEngine(), {}, &*plan, response.get()).ok()) {
      state.SkipWithError("ModelInfer failed");
      break;
    }
    benchmark::DoNotOptimize(response->raw_output_contents(0).data());
  }
}
BENCHMARK(BM_KServeModelInfer)->ArgName("rope_scaling")->Arg(0)->Arg(1);

// The protocol's own cost around the conversion, both messages' wire
// round trip as the server (parse the request, serialize the reply, free
// both) and the client (serialize the request, parse the reply) do it.
template <typename Request, typename Response>
void WireRoundTrip(benchmark::State& state, const Request& request, const Response& response) {
  const std::string request_wire = request.SerializeAsString();
  const std::string response_wire = response.SerializeAsString();
  for (auto _ : state) {
    std::string sent;
    request.SerializeToString(&sent);  // client
    auto parsed = std::make_unique<Request>();
    if (!parsed->ParseFromString(request_wire)) state.SkipWithError("parse failed");  // server
    std::string reply;
    response.SerializeToString(&reply);  // server
    auto received = std::make_unique<Response>();
    if (!received->ParseFromString(response_wire)) state.SkipWithError("parse failed");  // client
    benchmark::DoNotOptimize(sent.data());
    benchmark::DoNotOptimize(reply.data());
  }
}

void BM_RopeV1RotateWire(benchmark::State& state) {
  const rope::v1::RotateRequest request = DecodeRotate();
  rope::v1::RotateResponse response;
  *response.mutable_q() = request.q();
  *response.mutable_k() = request.k();
  WireRoundTrip(state, request, response);
}
BENCHMARK(BM_RopeV1RotateWire);

void BM_KServeModelInferWire(benchmark::State& state) {
  static const rope::kserve::ModelRepository* models = new rope::kserve::ModelRepository();
  const rope::kserve::Model* model = *models->Find("rotate", "");
  inference::ModelInferRequest request = DecodeInfer(DecodeRotate());
  inference::ModelInferResponse response;
  {
    inference::ModelInferRequest consumed = request;
    absl::StatusOr<rope::kserve::InferPlan> plan =
        rope::kserve::PlanModelInfer(*model, &consumed, int64_t{1} << 28);
    if (!plan.ok() || !rope::kserve::RunModelInfer(SharedEngine(), {}, &*plan, &response).ok()) {
      state.SkipWithError("ModelInfer failed");
      return;
    }
  }
  WireRoundTrip(state, request, response);
}
BENCHMARK(BM_KServeModelInferWire);

// Parsing alone (into a fresh heap message, then freed): what reading a
// ModelInferRequest from the wire without the generated parser could save
// at most, beside the Rotate it stands for.
void BM_RopeV1ParseRequest(benchmark::State& state) {
  const std::string wire = DecodeRotate().SerializeAsString();
  for (auto _ : state) {
    auto request = std::make_unique<rope::v1::RotateRequest>();
    if (!request->ParseFromString(wire)) state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(request.get());
  }
}
BENCHMARK(BM_RopeV1ParseRequest);

void BM_KServeParseRequest(benchmark::State& state) {
  const std::string wire = DecodeInfer(DecodeRotate()).SerializeAsString();
  for (auto _ : state) {
    auto request = std::make_unique<inference::ModelInferRequest>();
    if (!request->ParseFromString(wire)) state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(request.get());
  }
}
BENCHMARK(BM_KServeParseRequest);

// The server's whole in-process share of a decode-1 call: parse the wire
// request, answer it, serialize the reply, free both. state.range(0) != 0:
// the ModelInfer messages live on a per-call protobuf Arena (what a handler
// that parses its own request could do) instead of the heap.
void BM_RopeV1ServerSide(benchmark::State& state) {
  const std::string wire = DecodeRotate().SerializeAsString();
  for (auto _ : state) {
    auto request = std::make_unique<rope::v1::RotateRequest>();
    auto reply = std::make_unique<rope::v1::RotateResponse>();
    if (!request->ParseFromString(wire) ||
        !rope::AnswerRotate(SharedEngine(), request.get(), reply.get()).ok()) {
      state.SkipWithError("Rotate failed");
      break;
    }
    std::string sent = reply->SerializeAsString();
    benchmark::DoNotOptimize(sent.data());
  }
}
BENCHMARK(BM_RopeV1ServerSide);

void BM_KServeServerSide(benchmark::State& state) {
  static const rope::kserve::ModelRepository* models = new rope::kserve::ModelRepository();
  const rope::kserve::Model* model = *models->Find("rotate", "");
  const std::string wire = DecodeInfer(DecodeRotate()).SerializeAsString();
  const bool on_arena = state.range(0) != 0;
  for (auto _ : state) {
    std::optional<google::protobuf::Arena> arena;
    std::unique_ptr<inference::ModelInferRequest> heap_request;
    std::unique_ptr<inference::ModelInferResponse> heap_response;
    inference::ModelInferRequest* request;
    inference::ModelInferResponse* response;
    if (on_arena) {
      arena.emplace();
      request = google::protobuf::Arena::CreateMessage<inference::ModelInferRequest>(&*arena);
      response = google::protobuf::Arena::CreateMessage<inference::ModelInferResponse>(&*arena);
    } else {
      heap_request = std::make_unique<inference::ModelInferRequest>();
      heap_response = std::make_unique<inference::ModelInferResponse>();
      request = heap_request.get();
      response = heap_response.get();
    }
    if (!request->ParseFromString(wire)) {
      state.SkipWithError("parse failed");
      break;
    }
    absl::StatusOr<rope::kserve::InferPlan> plan =
        rope::kserve::PlanModelInfer(*model, request, int64_t{1} << 28);
    if (!plan.ok() || !rope::kserve::RunModelInfer(SharedEngine(), {}, &*plan, response).ok()) {
      state.SkipWithError("ModelInfer failed");
      break;
    }
    std::string sent = response->SerializeAsString();
    benchmark::DoNotOptimize(sent.data());
  }
}
BENCHMARK(BM_KServeServerSide)->ArgName("arena")->Arg(0)->Arg(1);

// BM_KServeServerSide as the service answers now: the reply written
// straight into gRPC's reply buffer (kserve_reply_wire.h, the output
// tensors' bytes moved, not copied) instead of built and serialized.
void BM_KServeServerSideWire(benchmark::State& state) {
  static const rope::kserve::ModelRepository* models = new rope::kserve::ModelRepository();
  const rope::kserve::Model* model = *models->Find("rotate", "");
  const std::string wire = DecodeInfer(DecodeRotate()).SerializeAsString();
  for (auto _ : state) {
    auto request = std::make_unique<inference::ModelInferRequest>();
    if (!request->ParseFromString(wire)) {
      state.SkipWithError("parse failed");
      break;
    }
    absl::StatusOr<rope::kserve::InferPlan> plan =
        rope::kserve::PlanModelInfer(*model, request.get(), int64_t{1} << 28);
    auto writer = std::make_unique<rope::kserve::InferReplyWriter>(
        rope::kserve::InferReplyWriter::Form::kModelInferResponse);
    if (!plan.ok() ||
        !rope::kserve::RunModelInfer(SharedEngine(), {}, &*plan, writer->reply()).ok()) {
      state.SkipWithError("ModelInfer failed");
      break;
    }
    grpc::ByteBuffer sent;
    benchmark::DoNotOptimize(writer->ReplyBytes());
    if (!writer->WriteReply(&sent).ok()) {
      state.SkipWithError("WriteReply failed");
      break;
    }
    benchmark::DoNotOptimize(sent.Length());
  }
}
BENCHMARK(BM_KServeServerSideWire);

}  // namespace

BENCHMARK_MAIN();
