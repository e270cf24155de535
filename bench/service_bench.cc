// Service benchmark: Rotate against an Echo RPC carrying the same bytes on the
// same server (ropeserve --enable_echo), one client process, one server
// process. Reports throughput and p50/p99 latency per payload size, and
// RotateStream against unary Rotate, as JSON (--out) and a markdown table on
// stdout. Every loop is bounded in count and in time.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/closed_loop.h"
#include "rope/bench/v1/echo.grpc.pb.h"
#include "rope/v1/rope.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "ropeserve address (started with --enable_echo)");
ABSL_FLAG(std::string, out, "", "write results as JSON to this file");
ABSL_FLAG(double, seconds_per_case, 3.0, "time cap of each measured case");
ABSL_FLAG(int, concurrency, 4, "calls in flight for the throughput cases");
ABSL_FLAG(std::vector<std::string>, sizes, std::vector<std::string>({"16KiB", "4MiB", "64MiB"}),
          "payload sizes to measure (a subset of 16KiB,4MiB,64MiB); RotateStream runs with 16KiB");
ABSL_FLAG(std::vector<std::string>, rpcs, std::vector<std::string>({"Echo", "Rotate"}),
          "unary RPCs to measure (a subset of Echo,Rotate), e.g. one at a time under a profiler");
ABSL_FLAG(bool, sequential, true,
          "measure each unary case with 1 call in flight too, besides --concurrency");

namespace {

using rope_bench::ClosedLoopRun;
using rope_bench::Percentile;
using rope_bench::RandomFloats;
using rope_bench::RunClosedLoop;

struct CaseResult {
  std::string name;
  int64_t payload_bytes = 0;
  int concurrency = 1;
  int64_t calls = 0;
  double seconds = 0;
  double p50_us = 0, p99_us = 0;
  int64_t errors = 0;
  double calls_per_s() const { return calls / seconds; }
  double mb_per_s() const { return calls * static_cast<double>(payload_bytes) / seconds / 1e6; }
};

rope::v1::RotateRequest MakeRotate(int64_t seq) {
  rope::v1::RotateRequest r;
  auto* c = r.mutable_config();
  c->set_theta(500000);
  c->set_head_dim(128);
  c->set_max_len(8192);
  auto* q = r.mutable_q();
  q->set_dtype(rope::v1::FLOAT32);
  for (int64_t d : {int64_t{1}, seq, int64_t{32}, int64_t{128}}) q->add_shape(d);
  q->set_data(RandomFloats(seq * 32 * 128, 7));
  return r;
}

rope::bench::v1::EchoRequest MakeEcho(const rope::v1::RotateRequest& rotate) {
  rope::bench::v1::EchoRequest e;
  e.set_dtype(rotate.q().dtype());
  *e.mutable_shape() = rotate.q().shape();
  e.set_data(rotate.q().data());
  return e;
}

// Runs `call` from `concurrency` threads until `max_calls` or the time cap.
template <typename Call>
CaseResult Measure(const std::string& name, int64_t payload, int concurrency, int64_t max_calls,
                   Call call) {
  // Warm-up (not measured): connections, table cache, allocator.
  for (int i = 0; i < 2; ++i) call();
  const ClosedLoopRun run =
      RunClosedLoop(concurrency, max_calls, absl::GetFlag(FLAGS_seconds_per_case), call);
  CaseResult r;
  r.name = name;
  r.payload_bytes = payload;
  r.concurrency = concurrency;
  r.seconds = run.seconds;
  r.calls = static_cast<int64_t>(run.latencies_us.size());
  r.p50_us = Percentile(run.latencies_us, 0.50);
  r.p99_us = Percentile(run.latencies_us, 0.99);
  r.errors = run.errors;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  // Separate channels per stub so Echo and Rotate do not share a connection's
  // flow-control window in the same case.
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                           grpc::InsecureChannelCredentials(), args);
  auto rope_stub = rope::v1::RopeService::NewStub(channel);
  auto echo_stub = rope::bench::v1::EchoService::NewStub(channel);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "service_bench: cannot connect to %s\n",
                 absl::GetFlag(FLAGS_target).c_str());
    return 1;
  }

  std::vector<CaseResult> results;
  const int conc = absl::GetFlag(FLAGS_concurrency);
  struct Size {
    const char* label;
    int64_t seq;
    int64_t max_calls;
  };
  // 16 KiB, 4 MiB, 64 MiB of float32 q [1, seq, 32, 128].
  const std::vector<std::string> sizes = absl::GetFlag(FLAGS_sizes);
  const std::vector<std::string> rpcs = absl::GetFlag(FLAGS_rpcs);
  auto wanted = [](const std::vector<std::string>& list, const std::string& name) {
    return absl::c_linear_search(list, name);
  };
  std::vector<int> in_flight = {conc};
  if (absl::GetFlag(FLAGS_sequential) && conc != 1) in_flight.insert(in_flight.begin(), 1);
  for (const Size& size : {Size{"16KiB", 1, 20000}, Size{"4MiB", 256, 2000}, Size{"64MiB", 4096, 60}}) {
    if (!wanted(sizes, size.label)) continue;
    const rope::v1::RotateRequest rotate = MakeRotate(size.seq);
    const rope::bench::v1::EchoRequest echo = MakeEcho(rotate);
    const int64_t payload = static_cast<int64_t>(rotate.q().data().size());
    auto do_echo = [&] {
      grpc::ClientContext ctx;
      rope::bench::v1::EchoResponse resp;
      return echo_stub->Echo(&ctx, echo, &resp).ok() && resp.data().size() == echo.data().size();
    };
    auto do_rotate = [&] {
      grpc::ClientContext ctx;
      rope::v1::RotateResponse resp;
      return rope_stub->Rotate(&ctx, rotate, &resp).ok() &&
             resp.q().data().size() == rotate.q().data().size();
    };
    for (int c : in_flight) {
      if (wanted(rpcs, "Echo")) {
        results.push_back(Measure(absl::StrCat("Echo/", size.label), payload, c, size.max_calls, do_echo));
      }
      if (wanted(rpcs, "Rotate")) {
        results.push_back(Measure(absl::StrCat("Rotate/", size.label), payload, c, size.max_calls, do_rotate));
      }
    }
  }

  // RotateStream vs unary at the small size: N requests on one stream, each
  // reply read before the next write (so latency per message is comparable),
  // then the same N as unary calls.
  if (wanted(sizes, "16KiB") && wanted(rpcs, "Rotate")) {
    const rope::v1::RotateRequest rotate = MakeRotate(1);
    const int64_t payload = static_cast<int64_t>(rotate.q().data().size());
    const int64_t n = 5000;
    grpc::ClientContext ctx;
    auto stream = rope_stub->RotateStream(&ctx);
    int64_t stream_calls = 0;
    auto do_stream = [&] {
      rope::v1::RotateResponse resp;
      if (!stream->Write(rotate) || !stream->Read(&resp)) return false;
      ++stream_calls;
      return true;
    };
    results.push_back(Measure("RotateStream/16KiB", payload, 1, n, do_stream));
    stream->WritesDone();
    rope::v1::RotateResponse drain;
    while (stream->Read(&drain)) {
    }
    stream->Finish();
  }

  std::printf("| case | payload | in flight | calls | calls/s | MB/s | p50 us | p99 us | errors |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : results) {
    std::printf("| %s | %lld | %d | %lld | %.0f | %.1f | %.0f | %.0f | %lld |\n", r.name.c_str(),
                static_cast<long long>(r.payload_bytes), r.concurrency,
                static_cast<long long>(r.calls), r.calls_per_s(), r.mb_per_s(), r.p50_us, r.p99_us,
                static_cast<long long>(r.errors));
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    std::ofstream f(out);
    f << "{\"target\": \"" << absl::GetFlag(FLAGS_target) << "\", \"cases\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      f << absl::StrFormat(
          "  {\"name\": \"%s\", \"payload_bytes\": %d, \"concurrency\": %d, \"calls\": %d, "
          "\"seconds\": %.4f, \"calls_per_s\": %.2f, \"mb_per_s\": %.2f, \"p50_us\": %.1f, "
          "\"p99_us\": %.1f, \"errors\": %d}%s\n",
          r.name, r.payload_bytes, r.concurrency, r.calls, r.seconds, r.calls_per_s(),
          r.mb_per_s(), r.p50_us, r.p99_us, r.errors, i + 1 < results.size() ? "," : "");
    }
    f << "]}\n";
  }
  int64_t errors = 0;
  for (const auto& r : results) errors += r.errors;
  return errors == 0 ? 0 : 1;
}
