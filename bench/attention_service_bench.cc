// AttentionScores through a running ropeserve with every tensor by
// shared-memory reference: q, k and v in registered POSIX regions, OUTPUT
// and LSE written into registered regions (output_out, lse_out), so that
// the reply carries no tensor bytes. One case per run: a causal prefill
// (Sq = Sk = --len) or a decode (Sq = 1 at the last position, Sk = --len);
// Hq 32, Hkv 8, D = Dv = 128, bfloat16 inputs uniform in [-1, 1). Times
// --calls calls one at a time after --warmup_calls untimed ones (the
// server builds its table blocks in the first) and prints one JSON object
// with the best and the median call time.
//
// Usage: attention_service_bench --target=unix:///path/rope.sock
//          --case=prefill|decode --len=N [--calls=3]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/shared_region.h"
#include "rope/v1/rope.grpc.pb.h"

ABSL_FLAG(std::string, target, "", "ropeserve's address (a Unix socket: unix:///path)");
ABSL_FLAG(std::string, case_name, "decode", "prefill (causal Sq = Sk = len) or decode (Sq = 1)");
ABSL_FLAG(int64_t, len, 131072, "Sk (and Sq for prefill)");
ABSL_FLAG(int, calls, 3, "timed calls, after --warmup_calls untimed ones");
ABSL_FLAG(int, warmup_calls, 1, "untimed calls first (the server builds its table blocks)");
ABSL_FLAG(int, deadline_s, 600, "each call's deadline");

namespace {

using rope::client::SharedRegion;
namespace v1 = rope::v1;

constexpr int64_t kHq = 32, kHkv = 8, kD = 128;

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// A registered region of `bytes`; random bfloat16 values when `fill`.
std::unique_ptr<SharedRegion> Region(v1::RopeService::Stub* stub, const std::string& name,
                                     int64_t bytes, bool fill, std::mt19937* rng) {
  auto region = SharedRegion::Create(name, bytes);
  if (!region.ok()) {
    std::fprintf(stderr, "SharedRegion::Create(%s): %s\n", name.c_str(),
                 region.status().ToString().c_str());
    std::exit(1);
  }
  if (fill) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    uint16_t* p = reinterpret_cast<uint16_t*>((*region)->data());
    for (int64_t i = 0; i < bytes / 2; ++i) p[i] = ToBf16(u(*rng));
  }
  grpc::ClientContext context;
  v1::RegisterSharedMemoryResponse registered;
  const grpc::Status status =
      stub->RegisterSharedMemory(&context, (*region)->RegisterRequest(), &registered);
  if (!status.ok()) {
    std::fprintf(stderr, "RegisterSharedMemory(%s): %s\n", name.c_str(),
                 status.error_message().c_str());
    std::exit(1);
  }
  return *std::move(region);
}

void SetTensor(v1::Tensor* t, std::vector<int64_t> shape, const SharedRegion& region) {
  t->set_dtype(v1::BFLOAT16);
  for (int64_t d : shape) t->add_shape(d);
  *t->mutable_shm() = region.Ref(0, region.byte_size());
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string which = absl::GetFlag(FLAGS_case_name);
  const bool prefill = which == "prefill";
  if (!prefill && which != "decode") {
    std::fprintf(stderr, "--case_name must be prefill or decode\n");
    return 2;
  }
  const int64_t sk = absl::GetFlag(FLAGS_len), sq = prefill ? sk : 1;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto stub = v1::RopeService::NewStub(grpc::CreateCustomChannel(
      absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(), args));

  std::mt19937 rng(7);
  const std::string prefix = "attention_bench_" + which + "_";
  auto q = Region(stub.get(), prefix + "q", sq * kHq * kD * 2, true, &rng);
  auto k = Region(stub.get(), prefix + "k", sk * kHkv * kD * 2, true, &rng);
  auto v = Region(stub.get(), prefix + "v", sk * kHkv * kD * 2, true, &rng);
  auto out = Region(stub.get(), prefix + "output", sq * kHq * kD * 4, false, &rng);
  auto lse = Region(stub.get(), prefix + "lse", kHq * sq * 4, false, &rng);
  // Unregistered on every exit from here: the server keeps a region until
  // its client unregisters it.
  struct Unregister {
    v1::RopeService::Stub* stub;
    std::vector<std::string> names;
    ~Unregister() {
      for (const std::string& name : names) {
        grpc::ClientContext context;
        v1::UnregisterSharedMemoryRequest request;
        request.set_name(name);
        v1::UnregisterSharedMemoryResponse response;
        stub->UnregisterSharedMemory(&context, request, &response);
      }
    }
  } unregister{stub.get(), {q->name(), k->name(), v->name(), out->name(), lse->name()}};

  v1::AttentionScoresRequest request;
  request.mutable_config()->set_theta(500000);
  request.mutable_config()->set_head_dim(kD);
  request.mutable_config()->set_max_len(static_cast<uint32_t>(sk));
  SetTensor(request.mutable_q(), {sq, kHq, kD}, *q);
  SetTensor(request.mutable_k(), {sk, kHkv, kD}, *k);
  SetTensor(request.mutable_v(), {sk, kHkv, kD}, *v);
  request.set_q_start_pos(sk - sq);
  request.set_causal(true);
  request.add_results(v1::OUTPUT);
  request.add_results(v1::LSE);
  *request.mutable_output_out() = out->Ref(0, out->byte_size());
  *request.mutable_lse_out() = lse->Ref(0, lse->byte_size());

  std::vector<double> seconds;
  const int warmup = absl::GetFlag(FLAGS_warmup_calls);
  for (int call = 0; call < warmup + absl::GetFlag(FLAGS_calls); ++call) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(absl::GetFlag(FLAGS_deadline_s)));
    v1::AttentionScoresResponse reply;
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status status = stub->AttentionScores(&context, request, &reply);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!status.ok()) {
      std::fprintf(stderr, "AttentionScores: %d %s\n", status.error_code(),
                   status.error_message().c_str());
      return 1;
    }
    if (call >= warmup) seconds.push_back(s);
  }
  // The results are there: finite LSE values.
  const float* l = reinterpret_cast<const float*>(lse->data());
  for (int64_t i = 0; i < kHq * sq; ++i) {
    if (!std::isfinite(l[i])) {
      std::fprintf(stderr, "lse[%ld] = %f\n", static_cast<long>(i), l[i]);
      return 1;
    }
  }
  std::sort(seconds.begin(), seconds.end());
  const double kv_bytes = 2.0 * sk * kHkv * kD * 2;
  std::printf(
      "{\"case\": \"%s\", \"sq\": %ld, \"sk\": %ld, \"calls\": %zu, \"best_s\": %.4f, "
      "\"median_s\": %.4f, \"kv_gbps_best\": %.3f}\n",
      which.c_str(), static_cast<long>(sq), static_cast<long>(sk), seconds.size(), seconds[0],
      seconds[seconds.size() / 2], kv_bytes / seconds[0] / 1e9);
  return 0;
}
