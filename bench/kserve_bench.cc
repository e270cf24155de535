// KServe benchmark: ModelInfer (inference.GRPCInferenceService, the built-in
// "rotate" model with its configuration as request parameters) against the
// rope.v1 Rotate it stands for, on the same server, with the same tensors,
// in interleaved rounds. Reports per case and RPC the median over rounds of
// p50 latency (1 call in flight) and calls/s (--concurrency in flight), and
// the median over rounds of each round's ModelInfer/Rotate ratios, as JSON
// (--out) and markdown on stdout.
//
// Both clients do per call what a real client does: build the request from
// the caller's tensors (a fresh message, the tensor bytes copied in; for
// ModelInfer also the model name, the parameters map and the input
// descriptions, as tritonclient's InferInput / infer() fill its
// ModelInferRequest on every call), send it, and parse the whole reply.
// Neither reuses a prebuilt request, so the comparison charges each
// protocol its own message-building cost and nothing more.
// Every loop is bounded in count and in time.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "bench/closed_loop.h"
#include "inference/grpc_service.grpc.pb.h"
#include "rope/v1/rope.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "ropeserve address");
ABSL_FLAG(std::string, out, "", "write results as JSON to this file");
ABSL_FLAG(double, seconds_per_case, 1.0, "time cap of each measured case (one round, one RPC)");
ABSL_FLAG(int, rounds, 5, "interleaved rounds (Rotate, ModelInfer, Rotate, ...)");
ABSL_FLAG(int, concurrency, 4, "calls in flight for the throughput cases");
ABSL_FLAG(std::vector<std::string>, shapes,
          std::vector<std::string>({"decode-1", "decode-32", "prefill-1024"}),
          "cases to measure (a subset of decode-1,decode-32,prefill-1024)");
ABSL_FLAG(int64_t, calls, 0,
          "> 0: each measured case makes exactly this many calls (no time cap), e.g. to divide a "
          "profiler's CPU time by them");
ABSL_FLAG(std::string, only, "",
          "measure only this RPC (Rotate or ModelInfer), e.g. under a profiler; no ratios");

namespace {

using rope_bench::ClosedLoopRun;
using rope_bench::Percentile;
using rope_bench::RandomFloats;
using rope_bench::RunClosedLoop;

struct Shape {
  const char* label;
  int64_t batch, seq, q_heads, k_heads, head_dim;
  int64_t max_calls;
};

// The caller's tensors: q [B,S,Hq,D] and k [B,S,Hk,D] float32, as raw
// little-endian bytes.
struct Tensors {
  std::vector<int64_t> q_shape, k_shape;
  std::string q, k;
};

Tensors MakeTensors(const Shape& s) {
  Tensors t;
  t.q_shape = {s.batch, s.seq, s.q_heads, s.head_dim};
  t.k_shape = {s.batch, s.seq, s.k_heads, s.head_dim};
  t.q = RandomFloats(s.batch * s.seq * s.q_heads * s.head_dim, 7);
  t.k = RandomFloats(s.batch * s.seq * s.k_heads * s.head_dim, 8);
  return t;
}

rope::v1::RotateRequest MakeRotate(const Tensors& t) {
  rope::v1::RotateRequest r;
  r.mutable_config()->set_theta(500000);
  r.mutable_config()->set_head_dim(static_cast<uint32_t>(t.q_shape.back()));
  r.mutable_config()->set_max_len(8192);
  r.set_start_pos(100);
  for (auto [tensor, shape, bytes] : {std::tuple{r.mutable_q(), &t.q_shape, &t.q},
                                      std::tuple{r.mutable_k(), &t.k_shape, &t.k}}) {
    tensor->set_dtype(rope::v1::FLOAT32);
    for (int64_t d : *shape) tensor->add_shape(d);
    tensor->set_data(*bytes);
  }
  return r;
}

inference::ModelInferRequest MakeInfer(const Tensors& t) {
  inference::ModelInferRequest r;
  r.set_model_name("rotate");
  auto& p = *r.mutable_parameters();
  p["theta"].set_string_param("500000");
  p["head_dim"].set_int64_param(t.q_shape.back());
  p["max_len"].set_int64_param(8192);
  p["start_pos"].set_int64_param(100);
  for (auto [name, shape, bytes] :
       {std::tuple{"q", &t.q_shape, &t.q}, std::tuple{"k", &t.k_shape, &t.k}}) {
    auto* input = r.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    for (int64_t d : *shape) input->add_shape(d);
    r.add_raw_input_contents(*bytes);
  }
  return r;
}

double Median(const std::vector<double>& v) { return Percentile(v, 0.5); }

struct Sample {
  double p50_us = 0;
  double calls_per_s = 0;
  int64_t errors = 0;
};

// `call` from `concurrency` threads until `max_calls` or the time cap.
template <typename Call>
Sample Measure(int concurrency, int64_t max_calls, Call call) {
  const int64_t fixed_calls = absl::GetFlag(FLAGS_calls);
  if (fixed_calls > 0) max_calls = fixed_calls;
  const double cap = fixed_calls > 0 ? 1e9 : absl::GetFlag(FLAGS_seconds_per_case);
  if (fixed_calls == 0) {
    for (int i = 0; i < 2; ++i) call();  // warm-up
  }
  const ClosedLoopRun run = RunClosedLoop(concurrency, max_calls, cap, call);
  Sample s;
  s.p50_us = Median(run.latencies_us);
  s.calls_per_s = static_cast<double>(run.latencies_us.size()) / run.seconds;
  s.errors = run.errors;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                           grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "kserve_bench: cannot connect to %s\n",
                 absl::GetFlag(FLAGS_target).c_str());
    return 1;
  }
  auto rope_stub = rope::v1::RopeService::NewStub(channel);
  auto kserve_stub = inference::GRPCInferenceService::NewStub(channel);
  const int conc = absl::GetFlag(FLAGS_concurrency);
  const int rounds = absl::GetFlag(FLAGS_rounds);

  // decode-1: one token (20 KiB, answered inline on the gRPC thread);
  // decode-32: 32 sequences' next token (640 KiB); prefill-1024: a 1024-token
  // prompt (20 MiB). Llama-3-8B's heads: q 32, k 8, head_dim 128, float32.
  const std::vector<Shape> shapes = {{"decode-1", 1, 1, 32, 8, 128, 200000},
                                     {"decode-32", 32, 1, 32, 8, 128, 50000},
                                     {"prefill-1024", 1, 1024, 32, 8, 128, 2000}};
  struct Row {
    std::string shape;
    int64_t bytes;
    std::vector<double> rotate_p50, infer_p50, rotate_tput, infer_tput;
    int64_t errors = 0;
  };
  std::vector<Row> rows;
  const std::vector<std::string> wanted = absl::GetFlag(FLAGS_shapes);
  const std::string only = absl::GetFlag(FLAGS_only);
  for (const Shape& shape : shapes) {
    if (std::find(wanted.begin(), wanted.end(), shape.label) == wanted.end()) continue;
    const Tensors tensors = MakeTensors(shape);
    const size_t q_bytes = tensors.q.size();
    auto do_rotate = [&] {
      grpc::ClientContext ctx;
      const rope::v1::RotateRequest request = MakeRotate(tensors);
      rope::v1::RotateResponse resp;
      return rope_stub->Rotate(&ctx, request, &resp).ok() && resp.q().data().size() == q_bytes;
    };
    auto do_infer = [&] {
      grpc::ClientContext ctx;
      const inference::ModelInferRequest request = MakeInfer(tensors);
      inference::ModelInferResponse resp;
      return kserve_stub->ModelInfer(&ctx, request, &resp).ok() &&
             resp.raw_output_contents_size() == 2 && resp.raw_output_contents(0).size() == q_bytes;
    };
    Row row;
    row.shape = shape.label;
    row.bytes = static_cast<int64_t>(q_bytes + tensors.k.size());
    for (int round = 0; round < rounds; ++round) {
      // Alternate which RPC goes first, so neither always follows the other.
      for (int i = 0; i < 2; ++i) {
        const bool rotate_now = (round + i) % 2 == 0;
        if (!only.empty() && only != (rotate_now ? "Rotate" : "ModelInfer")) continue;
        const Sample latency = rotate_now ? Measure(1, shape.max_calls, do_rotate)
                                          : Measure(1, shape.max_calls, do_infer);
        const Sample tput = rotate_now ? Measure(conc, shape.max_calls, do_rotate)
                                       : Measure(conc, shape.max_calls, do_infer);
        (rotate_now ? row.rotate_p50 : row.infer_p50).push_back(latency.p50_us);
        (rotate_now ? row.rotate_tput : row.infer_tput).push_back(tput.calls_per_s);
        row.errors += latency.errors + tput.errors;
      }
    }
    rows.push_back(row);
  }

  std::printf(
      "| shape | q+k bytes | Rotate p50 us | ModelInfer p50 us | latency ratio | "
      "Rotate calls/s (%d in flight) | ModelInfer calls/s | throughput ratio | "
      "within 1.1x | errors |\n",
      conc);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::string json = absl::StrFormat(
      "{\"target\": \"%s\", \"rounds\": %d, \"concurrency\": %d, "
      "\"cases\": [\n",
      absl::GetFlag(FLAGS_target), rounds, conc);
  int64_t errors = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double rp = Median(r.rotate_p50), ip = Median(r.infer_p50);
    const double rt = Median(r.rotate_tput), it = Median(r.infer_tput);
    // Each round's own ratio (its two RPCs ran back to back, under the same
    // load), then their median: a shared machine's drifting load cancels.
    std::vector<double> latency_ratios, throughput_ratios;
    for (size_t k = 0; k < std::min(r.rotate_p50.size(), r.infer_p50.size()); ++k) {
      if (r.rotate_p50[k] <= 0 || r.rotate_tput[k] <= 0) continue;  // a round with no calls
      latency_ratios.push_back(r.infer_p50[k] / r.rotate_p50[k]);
      throughput_ratios.push_back(r.infer_tput[k] / r.rotate_tput[k]);
    }
    const double latency_ratio = Median(latency_ratios);        // <= 1.1 is within
    const double throughput_ratio = Median(throughput_ratios);  // >= 1/1.1 is within
    const bool met = latency_ratio <= 1.1 && throughput_ratio >= 1 / 1.1;
    std::printf("| %s | %lld | %.0f | %.0f | %.3f | %.0f | %.0f | %.3f | %s | %lld |\n",
                r.shape.c_str(), static_cast<long long>(r.bytes), rp, ip, latency_ratio, rt, it,
                throughput_ratio, met ? "met" : "missed", static_cast<long long>(r.errors));
    json += absl::StrFormat(
        "  {\"shape\": \"%s\", \"bytes\": %d, \"rotate_p50_us\": %.1f, \"infer_p50_us\": %.1f, "
        "\"latency_ratio\": %.4f, \"rotate_calls_per_s\": %.1f, \"infer_calls_per_s\": %.1f, "
        "\"throughput_ratio\": %.4f, \"met\": %s, \"errors\": %d}%s\n",
        r.shape, r.bytes, rp, ip, latency_ratio, rt, it, throughput_ratio, met ? "true" : "false",
        r.errors, i + 1 < rows.size() ? "," : "");
    errors += r.errors;
  }
  json += "]}\n";
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) std::ofstream(out) << json;
  return errors == 0 ? 0 : 1;
}
