// Shared-memory benchmark: Rotate of one float32 tensor of
// 16 KiB, 4 MiB and 64 MiB by reference (the tensor in a registered region,
// rotated in place) against Rotate with the bytes over TCP and over the
// Unix socket, and against a single-thread memcpy of the same bytes; all in
// one run, so the ratios hold on a shared machine. One call at a time
// (latency, and bandwidth = bytes / p50), the four cases interleaved call
// by call. Bounded: at most --max_calls
// rounds (at least 3) and 3 x --seconds_per_case seconds per size.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/shared_region.h"
#include "rope/v1/rope.grpc.pb.h"

ABSL_FLAG(std::string, tcp_target, "127.0.0.1:50051", "ropeserve's TCP address");
ABSL_FLAG(std::string, unix_target, "", "ropeserve's Unix socket, unix:///path");
ABSL_FLAG(std::string, out, "", "write the markdown table to this file too");
ABSL_FLAG(double, seconds_per_case, 2.0, "a third of the time cap of each tensor size");
ABSL_FLAG(int, max_calls, 2000, "most rounds (one call of each case) per tensor size");

namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  double p50_us = 0;
  double p99_us = 0;
  int calls = 0;
  int errors = 0;
};

Sample Summarize(std::vector<double> us, int errors) {
  std::sort(us.begin(), us.end());
  Sample s;
  s.calls = static_cast<int>(us.size());
  s.errors = errors;
  s.p50_us = us[us.size() / 2];
  s.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return s;
}

// memcpy and the three transports interleaved, call by call (rotating which goes
// first), so that the machine's load drifts over all of them alike. At least
// 3 rounds, else up to --max_calls rounds within 3 x --seconds_per_case.
template <typename Fn>
std::vector<Sample> MeasureInterleaved(const std::vector<Fn>& fns) {
  std::vector<std::vector<double>> us(fns.size());
  std::vector<int> errors(fns.size(), 0);
  for (const Fn& fn : fns) fn();  // warm-up
  const auto until = Clock::now() + std::chrono::duration<double>(
                                        3 * absl::GetFlag(FLAGS_seconds_per_case));
  for (int round = 0; round < absl::GetFlag(FLAGS_max_calls); ++round) {
    if (round >= 3 && Clock::now() >= until) break;
    for (size_t j = 0; j < fns.size(); ++j) {
      const size_t i = (j + round) % fns.size();
      const auto t0 = Clock::now();
      if (!fns[i]()) ++errors[i];
      us[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  std::vector<Sample> out;
  for (size_t i = 0; i < fns.size(); ++i) out.push_back(Summarize(us[i], errors[i]));
  return out;
}

std::unique_ptr<rope::v1::RopeService::Stub> Stub(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return rope::v1::RopeService::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

rope::v1::RotateRequest Request(int64_t seq) {
  rope::v1::RotateRequest r;
  r.mutable_config()->set_theta(500000);
  r.mutable_config()->set_head_dim(128);
  r.mutable_config()->set_max_len(8192);
  r.mutable_q()->set_dtype(rope::v1::FLOAT32);
  for (int64_t d : {int64_t{1}, seq, int64_t{32}, int64_t{128}}) r.mutable_q()->add_shape(d);
  return r;
}

bool Call(rope::v1::RopeService::Stub* stub, const rope::v1::RotateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  rope::v1::RotateResponse reply;
  const grpc::Status status = stub->Rotate(&context, request, &reply);
  if (!status.ok()) std::fprintf(stderr, "Rotate: %s\n", status.error_message().c_str());
  return status.ok();
}

double GBps(int64_t bytes, double us) { return bytes / us / 1e3; }

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto tcp = Stub(absl::GetFlag(FLAGS_tcp_target));
  auto unix_stub = Stub(absl::GetFlag(FLAGS_unix_target));
  std::string table =
      "| tensor | memcpy p50 | shm p50 | unix bytes p50 | tcp bytes p50 | shm GB/s | "
      "shm / memcpy bw | shm speed-up vs tcp | vs unix | unix p50 / tcp p50 |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  std::mt19937 rng(16);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t seq : {int64_t{1}, int64_t{256}, int64_t{4096}}) {
    const int64_t bytes = seq * 32 * 128 * 4;
    std::vector<float> values(bytes / 4);
    for (float& v : values) v = u(rng);
    std::vector<char> src(bytes), dst(bytes);
    std::memcpy(src.data(), values.data(), bytes);


    rope::v1::RotateRequest by_bytes = Request(seq);
    by_bytes.mutable_q()->set_data(src.data(), bytes);

    auto region = rope::client::SharedRegion::Create("bench", bytes);
    if (!region.ok()) {
      std::fprintf(stderr, "%s\n", region.status().ToString().c_str());
      return 1;
    }
    std::memcpy((*region)->data(), src.data(), bytes);
    {
      grpc::ClientContext context;
      rope::v1::RegisterSharedMemoryResponse registered;
      const grpc::Status status =
          unix_stub->RegisterSharedMemory(&context, (*region)->RegisterRequest(), &registered);
      if (!status.ok()) {
        std::fprintf(stderr, "RegisterSharedMemory: %s\n", status.error_message().c_str());
        return 1;
      }
    }
    rope::v1::RotateRequest by_reference = Request(seq);
    *by_reference.mutable_q()->mutable_shm() = (*region)->Ref(0, bytes);
    const std::vector<std::function<bool()>> calls = {
        [&] {
          std::memcpy(dst.data(), src.data(), bytes);
          asm volatile("" : : "r"(dst.data()) : "memory");
          return true;
        },
        [&] { return Call(unix_stub.get(), by_reference); },
        [&] { return Call(unix_stub.get(), by_bytes); },
        [&] { return Call(tcp.get(), by_bytes); }};
    const std::vector<Sample> measured = MeasureInterleaved(calls);
    const Sample& copy = measured[0];
    const Sample& shm = measured[1];
    const Sample& unix_bytes = measured[2];
    const Sample& tcp_bytes = measured[3];
    {
      grpc::ClientContext context;
      rope::v1::UnregisterSharedMemoryRequest request;
      request.set_name("bench");
      rope::v1::UnregisterSharedMemoryResponse reply;
      unix_stub->UnregisterSharedMemory(&context, request, &reply);
    }
    const std::string size = bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB")
                                                : absl::StrCat(bytes >> 10, " KiB");
    absl::StrAppendFormat(
        &table,
        "| %s | %.1f us | %.1f us | %.1f us | %.1f us | %.2f | %.0f%% | %.1fx | %.1fx | %.2f |\n",
        size, copy.p50_us, shm.p50_us, unix_bytes.p50_us, tcp_bytes.p50_us,
        GBps(bytes, shm.p50_us), 100.0 * copy.p50_us / shm.p50_us,
        tcp_bytes.p50_us / shm.p50_us, unix_bytes.p50_us / shm.p50_us,
        unix_bytes.p50_us / tcp_bytes.p50_us);
    std::fprintf(stderr, "%s: calls memcpy %d shm %d unix %d tcp %d, errors %d\n", size.c_str(),
                 copy.calls, shm.calls, unix_bytes.calls, tcp_bytes.calls,
                 shm.errors + unix_bytes.errors + tcp_bytes.errors);
    if (shm.errors + unix_bytes.errors + tcp_bytes.errors > 0) return 1;
  }
  std::fputs(table.c_str(), stdout);
  if (!absl::GetFlag(FLAGS_out).empty()) std::ofstream(absl::GetFlag(FLAGS_out)) << table;
  return 0;
}
