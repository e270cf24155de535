// inflight_flood: many large Rotate calls at once against one ropeserve, with
// small Rotate calls sent throughout, and the server's resident memory
// sampled. Measures what --max_inflight_bytes promises (docs/operations.md
// "Memory"): every large call OK or RESOURCE_EXHAUSTED, small calls still
// answered (their latency recorded; a small call the transport's quota
// resets is retried by its caller, as docs/operations.md says, and counted),
// and the server's peak RSS.
//
// The large request is serialized once and its bytes shared by every call
// (a generic stub over one static slice), so the client's own memory stays
// near one request however many calls fly. Each large call has its own
// channel (its own connection), like separate clients, with RopeClient's
// default retry policy (UNAVAILABLE). The small calls come from a RopeClient
// with its defaults on a connection of its own, except client-side health
// checking (see FloodClientOptions).
//
// Prints one JSON object on stdout. Exit status 0 when it ran (the caller
// judges the figures: tests/load/inflight_budget_test.py,
// bench/inflight_budget.sh), 2 for bad flags.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client_options.h"
#include "client/rope_client.h"
#include "rope/v1/rope.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "ropeserve address");
ABSL_FLAG(int, calls, 24, "large Rotate calls sent at once");
ABSL_FLAG(int64_t, request_mib, 256, "q bytes of each large call, in MiB");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(120), "deadline of each large call");
ABSL_FLAG(absl::Duration, small_interval, absl::Milliseconds(20),
          "pause between the small calls (64 KiB of q each, one at a time)");
ABSL_FLAG(int, server_pid, 0, "pid of the server, to sample its VmRSS; 0: none");

namespace {

constexpr int kSeq = 256;
constexpr int kHeads = 8;
constexpr int kHeadDim = 128;
constexpr char kRotate[] = "/rope.v1.RopeService/Rotate";

rope::v1::RotateRequest MakeRequest(int64_t batch) {
  rope::v1::RotateRequest request;
  rope::v1::RopeConfig* config = request.mutable_config();
  config->set_head_dim(kHeadDim);
  config->set_max_len(kSeq);
  rope::v1::Tensor* q = request.mutable_q();
  q->set_dtype(rope::v1::FLOAT32);
  for (int64_t dim : {batch, int64_t{kSeq}, int64_t{kHeads}, int64_t{kHeadDim}}) q->add_shape(dim);
  const std::vector<float> values(batch * kSeq * kHeads * kHeadDim, 0.5f);
  q->set_data(values.data(), values.size() * sizeof(float));
  return request;
}

// VmRSS or VmHWM of `pid` in bytes; -1 when unreadable.
int64_t ReadStatusBytes(int pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kib = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    if (absl::SimpleAtoi(digits, &kib)) return kib * 1024;
  }
  return -1;
}

// RopeClient's defaults without client-side health checking, as most gRPC
// clients run (grpcio's, ghz, perf_analyzer). Between calls such a
// connection is idle, and when the flood fills the server's memory quota
// gRPC sends it GOAWAY, which fails a call racing it with UNAVAILABLE: what
// the retry policy is for. A health-checked connection instead holds a Watch
// stream, and the quota may reset a call on it (docs/operations.md
// "Memory").
// A small call's attempts when the transport's quota resets it.
constexpr int kSmallAttempts = 5;

// The transport's memory quota reset the call (HTTP/2 RST_STREAM
// ENHANCE_YOUR_CALM), as opposed to a refusal by the server's admission.
bool IsTransportReset(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         absl::StrContains(status.message(), "RST_STREAM with error code 11");
}

rope::client::ClientOptions FloodClientOptions() {
  rope::client::ClientOptions options;
  options.health_check = false;
  options.own_connections = true;
  return options;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt("rope.inflight_flood.channel", index);  // a connection of its own
  // RopeClient's service config: UNAVAILABLE is retried, as when the
  // server's memory quota sends GOAWAY to an idle connection. The retry
  // buffer holds the whole request (its bytes are the shared static slice).
  args.SetServiceConfigJSON(rope::client::ServiceConfigJson(FloodClientOptions()));
  args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, 1 << 30);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string target = absl::GetFlag(FLAGS_target);
  const int calls = absl::GetFlag(FLAGS_calls);
  const int64_t request_bytes = absl::GetFlag(FLAGS_request_mib) << 20;
  const int64_t batch = request_bytes / (int64_t{kSeq} * kHeads * kHeadDim * 4);
  if (calls <= 0 || batch <= 0) {
    std::fprintf(stderr, "inflight_flood: --calls and --request_mib must be > 0\n");
    return 2;
  }
  const int pid = absl::GetFlag(FLAGS_server_pid);

  std::string wire;
  MakeRequest(batch).SerializeToString(&wire);
  grpc::Slice slice(wire.data(), wire.size(), grpc::Slice::STATIC_SLICE);
  const grpc::ByteBuffer request(&slice, 1);

  // Sample the server's RSS until the flood ends.
  std::atomic<bool> flooding{true};
  std::atomic<int64_t> peak_rss{-1};
  const int64_t rss_before = pid > 0 ? ReadStatusBytes(pid, "VmRSS") : -1;
  std::thread sampler([&] {
    while (pid > 0 && flooding.load()) {
      const int64_t rss = ReadStatusBytes(pid, "VmRSS");
      peak_rss.store(std::max(peak_rss.load(), rss));
      absl::SleepFor(absl::Milliseconds(5));
    }
  });

  // Small calls, one at a time, from a RopeClient on a connection of its own.
  absl::StatusOr<std::unique_ptr<rope::client::RopeClient>> small_client =
      rope::client::RopeClient::Create(target, FloodClientOptions());
  if (!small_client.ok()) {
    std::fprintf(stderr, "inflight_flood: %s\n", small_client.status().ToString().c_str());
    return 2;
  }
  std::vector<double> small_ms;
  std::map<std::string, int> small_codes;
  int small_transport_resets = 0;
  std::thread small([&] {
    rope::v1::RotateRequest tiny = MakeRequest(1);
    tiny.mutable_q()->set_shape(0, 1);
    tiny.mutable_q()->set_shape(1, 16);  // 16 x 8 x 128 floats: 64 KiB
    tiny.mutable_q()->mutable_data()->resize(16 * kHeads * kHeadDim * 4);
    while (flooding.load()) {
      const absl::Time start = absl::Now();
      absl::StatusOr<rope::v1::RotateResponse> reply = (*small_client)->Rotate(tiny);
      // While the flood fills the transport's quota, gRPC may reset a call
      // in flight on any connection, small ones too (RESOURCE_EXHAUSTED
      // "RST_STREAM with error code 11"); no retry policy covers it, and
      // docs/operations.md ("Memory") tells callers to retry it after a
      // backoff, which this caller does: as RopeClient's policy would, 5
      // attempts, 0.1 s doubling to 1 s. Each reset is counted.
      absl::Duration backoff = absl::Milliseconds(100);
      for (int attempt = 1; attempt < kSmallAttempts && IsTransportReset(reply.status());
           ++attempt) {
        ++small_transport_resets;
        absl::SleepFor(backoff);
        backoff = std::min(2 * backoff, absl::Seconds(1));
        reply = (*small_client)->Rotate(tiny);
      }
      small_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
      ++small_codes[reply.ok() ? "OK"
                               : absl::StrCat(static_cast<int>(reply.status().code()), " ",
                                              reply.status().message())];
      absl::SleepFor(absl::GetFlag(FLAGS_small_interval));
    }
  });
  absl::SleepFor(absl::Milliseconds(200));  // a few small calls before the flood

  struct Large {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::GenericStub> stub;
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
    grpc::Status status;
    absl::Notification done;
    double ms = 0;
  };
  std::vector<std::unique_ptr<Large>> large(calls);
  const absl::Time flood_start = absl::Now();
  for (int i = 0; i < calls; ++i) {
    large[i] = std::make_unique<Large>();
    Large& call = *large[i];
    call.channel = NewChannel(target, i);
    call.stub = std::make_unique<grpc::GenericStub>(call.channel);
    call.request = request;  // shares the slice
    call.context.set_deadline(absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_deadline)));
    call.stub->UnaryCall(&call.context, kRotate, grpc::StubOptions(), &call.request,
                         &call.response, [&call, flood_start](grpc::Status status) {
                           call.status = std::move(status);
                           call.ms = absl::ToDoubleMilliseconds(absl::Now() - flood_start);
                           call.done.Notify();
                         });
  }
  std::map<std::string, int> codes;
  std::map<std::string, std::string> first_message;
  std::map<std::string, int> refused_by;
  int64_t ok_reply_bytes_min = -1;
  double last_ms = 0;
  for (auto& call : large) {
    call->done.WaitForNotification();
    const std::string code = call->status.ok() ? "OK" : absl::StrCat(call->status.error_code());
    ++codes[code];
    first_message.emplace(code, call->status.error_message());
    if (call->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // Who refused: the admission budget names itself; the transport's
      // memory quota resets the stream (HTTP/2 ENHANCE_YOUR_CALM, code 11).
      const std::string& message = call->status.error_message();
      if (message.find("max_inflight_bytes") != std::string::npos) {
        ++refused_by["budget"];
      } else if (message.find("RST_STREAM with error code 11") != std::string::npos) {
        ++refused_by["transport"];
      } else {
        ++refused_by["other"];
        first_message.emplace("8/other", message);
      }
    }
    last_ms = std::max(last_ms, call->ms);
    if (call->status.ok()) {
      const int64_t bytes = static_cast<int64_t>(call->response.Length());
      ok_reply_bytes_min = ok_reply_bytes_min < 0 ? bytes : std::min(ok_reply_bytes_min, bytes);
    }
    call->response.Clear();
  }
  absl::SleepFor(absl::Milliseconds(200));  // a few small calls after it
  flooding.store(false);
  small.join();
  sampler.join();
  const int64_t hwm = pid > 0 ? ReadStatusBytes(pid, "VmHWM") : -1;

  auto json_map = [](const std::map<std::string, int>& m) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : m) parts.push_back(absl::StrFormat("\"%s\": %d", k, v));
    return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  };
  std::vector<std::string> messages;
  for (const auto& [code, message] : first_message) {
    std::string escaped;
    for (char c : message) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      if (c >= 32) escaped.push_back(c);
    }
    messages.push_back(absl::StrFormat("\"%s\": \"%s\"", code, escaped));
  }
  std::printf(
      "{\"calls\": %d, \"request_bytes\": %lld, \"wire_bytes\": %zu, \"codes\": %s, "
      "\"first_message\": {%s}, \"refused_by\": %s, \"ok_reply_bytes_min\": %lld, \"flood_seconds\": %.3f, "
      "\"small\": {\"count\": %zu, \"codes\": %s, \"transport_resets\": %d, \"p50_ms\": %.3f, "
      "\"p99_ms\": %.3f, \"max_ms\": %.3f}, \"server_rss_before_bytes\": %lld, "
      "\"server_peak_rss_bytes\": %lld, "
      "\"server_vmhwm_bytes\": %lld}\n",
      calls, static_cast<long long>(batch * kSeq * kHeads * kHeadDim * 4), wire.size(),
      json_map(codes).c_str(), absl::StrJoin(messages, ", ").c_str(), json_map(refused_by).c_str(),
      static_cast<long long>(ok_reply_bytes_min), last_ms / 1000, small_ms.size(),
      json_map(small_codes).c_str(), small_transport_resets, Percentile(small_ms, 0.5),
      Percentile(small_ms, 0.99), Percentile(small_ms, 1.0), static_cast<long long>(rss_before),
      static_cast<long long>(peak_rss.load()), static_cast<long long>(hwm));
  return 0;
}
