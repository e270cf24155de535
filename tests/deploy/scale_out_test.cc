// Scale-out as deployed: three ropeserve processes behind one client channel
// whose target lists all of them ("ipv4:a,b,c", as DNS on a Kubernetes
// headless Service would), balanced by gRPC's round_robin. Each server's
// share is read from its own Prometheus counter (rope_requests_total), the
// way an operator would see it. Then one server gets SIGTERM in the middle of
// a concurrent run: its drain (UNAVAILABLE for new calls, calls in flight
// finish) plus the client's retry policy for UNAVAILABLE must leave no call
// failed.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/rope_client.h"
#include "client/tensor_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/server_process.h"
#include "tests/support/metrics_scrape.h"

namespace rope {
namespace test {
namespace {

using ::rope::client::ClientOptions;
using ::rope::client::RopeClient;
using ::testing::HasSubstr;

constexpr int kServers = 3;
constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kStopTimeout = absl::Seconds(30);
constexpr absl::Duration kScrapeTimeout = absl::Seconds(10);

struct Replica {
  std::unique_ptr<ServerProcess> process;
  int metrics_port = 0;
};

// A replica on 127.0.0.2 with its gRPC port chosen by the kernel and its
// metrics on a port picked just before; a start that loses the metrics port
// to another process is retried with a new one (at most 3 tries). Its own
// loopback address, not 127.0.0.1: the client keeps reconnecting to the port
// of a replica a test stops, and a server of another test given that port by
// the kernel would answer it (and count calls that are not its own).
absl::StatusOr<Replica> StartReplica() {
  absl::Status last = absl::UnknownError("no attempt");
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<int> port = PickFreePort();
    if (!port.ok()) return port.status();
    absl::StatusOr<std::unique_ptr<ServerProcess>> process = ServerProcess::Start(
        ROPESERVE_PATH,
        {"--listen=127.0.0.2:0", "--backend=cpu", "--cpu_threads=1", "--work_threads=2",
         "--metrics_host=127.0.0.1", absl::StrCat("--metrics_port=", *port),
         "--shutdown_grace_period=10s"},
        kStartTimeout);
    if (process.ok()) return Replica{*std::move(process), *port};
    last = process.status();
  }
  return last;
}

// Rotate calls this server answered with OK, from its /metrics.
absl::StatusOr<int64_t> OkRotates(const Replica& replica) {
  absl::StatusOr<std::string> page = HttpGet(replica.metrics_port, "/metrics", kScrapeTimeout);
  if (!page.ok()) return page.status();
  absl::StatusOr<double> value =
      SampleValue(*page, "rope_requests_total", {{"rpc", "Rotate"}, {"code", "OK"}});
  if (!value.ok()) return value.status();
  return static_cast<int64_t>(*value);
}

v1::RotateRequest SmallRotate() {
  v1::RotateRequest request;
  request.mutable_config()->set_head_dim(16);
  request.mutable_config()->set_max_len(256);
  absl::StatusOr<v1::Tensor> q =
      client::RandomTensor({1, 8, 2, 16}, v1::FLOAT32, /*seed=*/7, client::Distribution::kNormal);
  EXPECT_TRUE(q.ok()) << q.status();
  if (q.ok()) *request.mutable_q() = *std::move(q);
  request.set_start_pos(3);
  return request;
}

class ScaleOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (int i = 0; i < kServers; ++i) {
      absl::StatusOr<Replica> replica = StartReplica();
      ASSERT_TRUE(replica.ok()) << replica.status();
      replicas_[i] = *std::move(replica);
      addresses.push_back(replicas_[i].process->address());
    }
    ClientOptions options;  // round_robin, 5 attempts on UNAVAILABLE
    options.deadline = absl::Seconds(20);
    absl::StatusOr<std::unique_ptr<RopeClient>> client =
        RopeClient::Create(absl::StrCat("ipv4:", absl::StrJoin(addresses, ",")), options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    request_ = SmallRotate();
  }

  // OK Rotate counts of every replica still running (-1 for a stopped one).
  std::vector<int64_t> Counts() {
    std::vector<int64_t> counts;
    for (const Replica& replica : replicas_) {
      if (replica.process == nullptr) {
        counts.push_back(-1);
        continue;
      }
      absl::StatusOr<int64_t> n = OkRotates(replica);
      EXPECT_TRUE(n.ok()) << n.status();
      counts.push_back(n.ok() ? *n : -1);
    }
    return counts;
  }

  absl::Status Call() {
    absl::StatusOr<v1::RotateResponse> reply = client_->Rotate(request_);
    if (!reply.ok()) return reply.status();
    if (reply->q().data().size() != request_.q().data().size()) {
      return absl::InternalError(absl::StrCat("reply q has ", reply->q().data().size(),
                                              " bytes, want ", request_.q().data().size()));
    }
    return absl::OkStatus();
  }

  // round_robin only picks READY subchannels, and the channel connects to
  // the three servers in parallel on the first call. Call (bounded) until
  // every server has answered at least once, so measurement starts with all
  // three in the rotation.
  void WarmUp() {
    for (int round = 0; round < 30; ++round) {
      for (int i = 0; i < 10; ++i) ASSERT_TRUE(Call().ok());
      const std::vector<int64_t> counts = Counts();
      bool all = true;
      for (int64_t n : counts) all = all && n > 0;
      if (all) return;
    }
    FAIL() << "not every server got a call in 300 warm-up calls: "
           << absl::StrJoin(Counts(), ",");
  }

  Replica replicas_[kServers];
  std::unique_ptr<RopeClient> client_;
  v1::RotateRequest request_;
};

TEST_F(ScaleOutTest, RoundRobinGivesEveryServerAFairShare) {
  WarmUp();
  if (HasFatalFailure()) return;
  const std::vector<int64_t> before = Counts();

  // Four threads on the one channel, as a serving frontend would call.
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 75;
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        if (!Call().ok()) failed.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(failed.load(), 0);

  const std::vector<int64_t> after = Counts();
  constexpr int kCalls = kThreads * kCallsPerThread;
  int64_t total = 0;
  for (int i = 0; i < kServers; ++i) {
    const int64_t share = after[i] - before[i];
    total += share;
    // An even split is 100 each; round_robin over READY servers stays close
    // to it, pick_first would give 300/0/0.
    EXPECT_GE(share, kCalls / kServers / 2)
        << "server " << i << " served " << share << " of " << kCalls << " (before "
        << absl::StrJoin(before, ",") << ", after " << absl::StrJoin(after, ",") << ")";
  }
  EXPECT_EQ(total, kCalls) << "each call is counted once, by the server that answered it";
  std::printf("shares of %d calls: %lld, %lld, %lld\n", kCalls,
              static_cast<long long>(after[0] - before[0]),
              static_cast<long long>(after[1] - before[1]),
              static_cast<long long>(after[2] - before[2]));
}

TEST_F(ScaleOutTest, SigtermMidRunFailsNoCall) {
  WarmUp();
  if (HasFatalFailure()) return;

  // Workers call until the run has both reached kMinCalls and gone on for
  // kCallsAfterStop calls after server 0 exited; bounded by kMaxCalls and a
  // deadline either way.
  constexpr int kThreads = 4;
  constexpr int kMinCalls = 600;
  constexpr int kCallsAfterStop = 200;
  constexpr int kMaxCalls = 20000;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::atomic<int> started{0}, done{0}, after_stop{0};
  std::atomic<bool> stopped{false};
  absl::Mutex mu;
  std::vector<std::string> failures;  // first few, for the message
  int failed = 0;

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (absl::Now() < deadline) {
        const bool enough = done.load() >= kMinCalls && after_stop.load() >= kCallsAfterStop;
        if (enough || started.fetch_add(1) >= kMaxCalls) break;
        const bool was_stopped = stopped.load();
        absl::Status status = Call();
        done.fetch_add(1);
        if (was_stopped) after_stop.fetch_add(1);
        if (!status.ok()) {
          absl::MutexLock lock(&mu);
          if (++failed <= 5) failures.push_back(status.ToString());
        }
        // Paced (at most ~1000 calls/s per thread), so that however fast the
        // machine, kMaxCalls outlasts the seconds a drain takes.
        absl::SleepFor(absl::Milliseconds(1));
      }
    });
  }

  // SIGTERM server 0 a third of the way in, while the workers keep calling.
  const absl::Time wait_until = absl::Now() + absl::Seconds(30);
  while (done.load() < kMinCalls / 3 && absl::Now() < wait_until) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const int done_at_signal = done.load();
  absl::StatusOr<int> code = replicas_[0].process->Stop(kStopTimeout);
  const std::string output = replicas_[0].process->Output();
  replicas_[0].process.reset();  // Counts() skips it from now on
  // Scraped before `stopped` is set: every call counted in after_stop starts
  // after this snapshot.
  const std::vector<int64_t> at_stop = Counts();
  stopped.store(true);

  for (std::thread& thread : threads) thread.join();
  const std::vector<int64_t> at_end = Counts();

  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << output;
  EXPECT_THAT(output, HasSubstr("draining"));
  EXPECT_GT(done_at_signal, 0) << "the signal came before the run started";
  EXPECT_GE(after_stop.load(), kCallsAfterStop) << "the run did not go on after the stop";
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(failed, 0) << "of " << done.load() << " calls; first: "
                         << absl::StrJoin(failures, " | ");
  }
  // Every call started after server 0 exited was answered by 1 or 2.
  EXPECT_GE((at_end[1] - at_stop[1]) + (at_end[2] - at_stop[2]), after_stop.load());
}

}  // namespace
}  // namespace test
}  // namespace rope
