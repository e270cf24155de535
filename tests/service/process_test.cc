// The built ropeserve binary as a child process: SIGTERM drain, server
// reflection, and the command line. This binary does not link the server (nor
// grpc++_reflection), so it may carry its own reflection client stubs.
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.grpc.pb.h"
#include "tests/support/grpc_test_util.h"
#include "tests/support/server_process.h"
#include "tests/support/wait_until.h"

#ifndef ROPESERVE_PATH
#error "ROPESERVE_PATH must name the ropeserve binary"
#endif
#ifndef ROPE_HAVE_CUDA
#error "ROPE_HAVE_CUDA must say whether ropeserve was built with the CUDA backend (0 or 1)"
#endif

namespace rope {
namespace test {
namespace {

// A started ropeserve and a channel to it.
struct Server {
  std::unique_ptr<ServerProcess> process;
  int port = 0;
  std::shared_ptr<grpc::Channel> channel;
};

void StartServer(std::vector<std::string> args, Server* server) {
  args.insert(args.begin(), "--listen=127.0.0.1:0");
  absl::StatusOr<std::unique_ptr<ServerProcess>> process =
      ServerProcess::Start(ROPESERVE_PATH, args, absl::Seconds(30));
  ASSERT_TRUE(process.ok()) << process.status();
  server->process = *std::move(process);
  ASSERT_TRUE(absl::StartsWith(server->process->address(), "127.0.0.1:"))
      << server->process->Output();
  server->port = server->process->port();
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);
  server->channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server->port),
                                              grpc::InsecureChannelCredentials(), channel_args);
}

// A GetTable call that builds a 65536-row table (each theta is a new table)
// but sends back one row: ~0.1 s on one thread for a few bytes each way, so
// that calls queue up in flight behind one work thread.
v1::GetTableRequest SlowTableRequest(int i) {
  v1::GetTableRequest request;
  *request.mutable_config() = MakeConfig(128, 65536, v1::INTERLEAVED, 0, 10000 + i);
  request.set_count(1);
  return request;
}

struct AsyncTable {
  v1::GetTableRequest request;
  v1::GetTableResponse response;
  grpc::ClientContext context;
  grpc::Status status;
  absl::Notification done;
  bool started = false;

  // A test that fails early must not free a call gRPC still uses.
  ~AsyncTable() {
    if (started && !done.HasBeenNotified()) {
      context.TryCancel();
      done.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
  }
};

TEST(ProcessTest, SigtermDrainsCallsInFlightThenExitsZero) {
  const absl::StatusOr<int> free_port = PickFreePort();
  ASSERT_TRUE(free_port.ok()) << free_port.status();
  const int metrics_port = *free_port;
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer(
      {"--backend=cpu", "--cpu_threads=1", "--work_threads=1", "--shutdown_grace_period=60s",
       "--table_cache_bytes=100000000",
       absl::StrCat("--metrics_port=", metrics_port), "--metrics_host=127.0.0.1"},
      &server));
  auto stub = v1::RopeService::NewStub(server.channel);

  // A stream message whose 32 MiB reply the client does not read is a call
  // in flight for as long as the client wants: the server's write waits on
  // HTTP/2 flow control, so it holds the drain open deterministically.
  grpc::ClientContext stream_context;
  SetDeadline(&stream_context, absl::Seconds(90));
  auto stream = stub->RotateStream(&stream_context);
  ASSERT_TRUE(stream->Write(MakeRotateRequest(1, 4096, 32, 64, /*max_len=*/4096)));
  v1::RotateResponse reply;

  // Wait (bounded) until the stream's message is in flight (the only call
  // yet). The unary calls below (a block of table each: milliseconds) may
  // finish before the signal, still run, or arrive after it: each must end
  // OK or be refused, never be cut short.
  double in_flight = 0;
  WaitUntil([&] {
    in_flight = MetricValue(HttpGetMetrics(metrics_port), "rope_calls_in_flight");
    return in_flight >= 1;
  });
  ASSERT_GE(in_flight, 1);

  // Unary calls queue behind one work thread.
  constexpr int kCalls = 8;
  AsyncTable calls[kCalls];
  for (int i = 0; i < kCalls; ++i) {
    calls[i].request = SlowTableRequest(i);
    SetDeadline(&calls[i].context, absl::Seconds(90));
    stub->async()->GetTable(&calls[i].context, &calls[i].request, &calls[i].response,
                            [&call = calls[i]](grpc::Status status) {
                              call.status = std::move(status);
                              call.done.Notify();
                            });
    calls[i].started = true;
  }

  server.process->Signal(SIGTERM);
  ASSERT_TRUE(server.process->WaitForLine("draining", absl::Seconds(30)).has_value())
      << server.process->Output();

  // The stream keeps the server draining (not yet shut down): a new call is
  // refused by the server itself.
  {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::UNAVAILABLE, "server is draining"));
  }

  // Every unary call either ran (OK) or arrived after the signal and was
  // refused; nothing admitted was cut short.
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(calls[i].done.WaitForNotificationWithTimeout(absl::Seconds(90))) << i;
    if (calls[i].status.ok()) {
      EXPECT_EQ(calls[i].response.cos().data().size(), size_t{64} * 4) << i;
    } else {
      EXPECT_TRUE(GrpcStatusIs(calls[i].status, grpc::StatusCode::UNAVAILABLE,
                               "server is draining"))
          << "call " << i;
    }
  }
  // The admitted stream message gets its whole reply once the client reads,
  // and the stream ends cleanly when its client closes it; then the drain
  // completes and the process exits 0.
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.q().data().size(), size_t{4096} * 32 * 64 * 4);
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));
  // An idle connection whose client does not answer the shutdown GOAWAY's
  // ping holds the server's exit for ~5 s: close it.
  stub.reset();
  server.channel.reset();
  const std::optional<int> status = server.process->WaitExit(absl::Seconds(60));
  ASSERT_TRUE(status.has_value()) << "ropeserve did not exit within the grace period";
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0) << server.process->Output();
}

TEST(ProcessTest, HealthTurnsNotServingWhileDraining) {
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--shutdown_grace_period=30s"}, &server));
  auto health = grpc::health::v1::Health::NewStub(server.channel);
  auto stub = v1::RopeService::NewStub(server.channel);
  {
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(
        health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response),
        grpc::StatusCode::OK, ""));
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  // A stream holds one call in flight, so the drain waits and the server
  // stays up to answer.
  grpc::ClientContext stream_context;
  SetDeadline(&stream_context);
  auto stream = stub->RotateStream(&stream_context);
  ASSERT_TRUE(stream->Write(MakeRotateRequest(1, 2, 1, 8)));
  v1::RotateResponse reply;
  ASSERT_TRUE(stream->Read(&reply));

  server.process->Signal(SIGTERM);
  ASSERT_TRUE(server.process->WaitForLine("draining", absl::Seconds(30)).has_value());
  grpc::health::v1::HealthCheckResponse::ServingStatus seen =
      grpc::health::v1::HealthCheckResponse::SERVING;
  WaitUntil(
      [&] {
        grpc::health::v1::HealthCheckResponse response;
        grpc::ClientContext context;
        SetDeadline(&context);
        const grpc::Status status =
            health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
        EXPECT_TRUE(GrpcStatusIs(status, grpc::StatusCode::OK, ""));
        seen = response.status();
        return !status.ok() || seen != grpc::health::v1::HealthCheckResponse::SERVING;
      },
      kSettleTimeout, absl::Milliseconds(10));
  EXPECT_EQ(seen, grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  // The next message on the open stream is refused; the stream ends.
  stream->Write(MakeRotateRequest(1, 2, 1, 8));
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::UNAVAILABLE, "server is draining"));
  stream.reset();
  stub.reset();
  health.reset();
  server.channel.reset();

  const std::optional<int> status = server.process->WaitExit(absl::Seconds(40));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server.process->Output();
}

TEST(ProcessTest, ReflectionListsTheServices) {
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--enable_echo"}, &server));
  {
    auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(server.channel);
    grpc::ClientContext context;
    SetDeadline(&context);
    auto stream = reflection->ServerReflectionInfo(&context);
    grpc::reflection::v1alpha::ServerReflectionRequest request;
    request.set_list_services("");
    ASSERT_TRUE(stream->Write(request));
    grpc::reflection::v1alpha::ServerReflectionResponse response;
    ASSERT_TRUE(stream->Read(&response));
    std::set<std::string> names;
    for (const auto& service : response.list_services_response().service()) {
      names.insert(service.name());
    }
    EXPECT_EQ(names.count("rope.v1.RopeService"), 1u);
    EXPECT_EQ(names.count("rope.bench.v1.EchoService"), 1u);
    EXPECT_EQ(names.count("grpc.health.v1.Health"), 1u);

    // And it describes our messages: the file that defines rope.v1.RotateRequest.
    request.set_file_containing_symbol("rope.v1.RotateRequest");
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_GE(response.file_descriptor_response().file_descriptor_proto_size(), 1);
    stream->WritesDone();
    EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));
  }
  server.channel.reset();  // see SigtermDrainsCallsInFlightThenExitsZero

  server.process->Signal(SIGTERM);
  const std::optional<int> status = server.process->WaitExit(absl::Seconds(40));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

std::string RunToExit(const std::vector<std::string>& args, int* exit_code) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> process = ServerProcess::Spawn(ROPESERVE_PATH, args);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return "";
  const std::optional<int> status = (*process)->WaitExit(absl::Seconds(30));
  EXPECT_TRUE(status.has_value() && WIFEXITED(*status));
  *exit_code = status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  return (*process)->Output();
}

// CUDA_VISIBLE_DEVICES=-1 hides every GPU from the child, so that these
// behave the same on machines with and without one.
class HiddenGpus {
 public:
  HiddenGpus() { setenv("CUDA_VISIBLE_DEVICES", "-1", 1); }
  ~HiddenGpus() { unsetenv("CUDA_VISIBLE_DEVICES"); }
};

TEST(ProcessTest, CudaBackendWithoutADeviceIsRefused) {
  HiddenGpus hidden;
  int exit_code = 0;
  const std::string output = RunToExit({"--backend=cuda", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 1);
  // A CUDA build finds no device; a build without CUDA says how to get it.
  const char* const expected =
      ROPE_HAVE_CUDA ? "FAILED_PRECONDITION: --backend=cuda: no usable CUDA device"
                     : "UNIMPLEMENTED: --backend=cuda: this build has no CUDA backend: install "
                       "the CUDA toolkit (nvcc) and reconfigure with -DROPE_ENABLE_CUDA=ON";
  EXPECT_NE(output.find(expected), std::string::npos) << output;
}

TEST(ProcessTest, AutoBackendWithoutADeviceUsesTheCpuAndSaysWhy) {
  HiddenGpus hidden;
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=auto", "--cpu_threads=1"}, &server));
  const std::string& output = server.process->Output();
  // The reason after "no usable CUDA device: " depends on the machine (no
  // driver, or cudaGetDeviceCount's error), so only the prefix is fixed.
  EXPECT_NE(output.find(ROPE_HAVE_CUDA ? "--backend=auto: using the CPU backend (no usable CUDA "
                                         "device: "
                                       : "--backend=auto: using the CPU backend (this build has "
                                         "no CUDA backend"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("(backend cpu: "), std::string::npos) << output;
  server.process->Signal(SIGTERM);
  const std::optional<int> status = server.process->WaitExit(absl::Seconds(40));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

TEST(ProcessTest, BadFlagValuesExitWithAMessage) {
  int exit_code = 0;
  std::string output = RunToExit({"--backend=tpu", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("--backend is \"tpu\""), std::string::npos) << output;
  output = RunToExit({"--max_message_bytes=0", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("max_message_bytes is 0"), std::string::npos) << output;
}

// The CPU backend's SIMD path: the best this CPU runs unless --cpu_simd (or,
// without it, ROPE_CPU_SIMD) forces one; the startup line and GetServerInfo
// name it; a name the build lacks stops the server.
std::string ServerInfoCpuSimd(const Server& server) {
  auto stub = v1::RopeService::NewStub(server.channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ServerInfo info;
  const grpc::Status status = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return info.cpu_simd();
}

void StopServer(Server* server) {
  server->channel.reset();
  server->process->Signal(SIGTERM);
  const std::optional<int> status = server->process->WaitExit(absl::Seconds(40));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

#if defined(__x86_64__)
TEST(ProcessTest, CpuSimdFlagForcesTheBaselinePathAndServerInfoNamesIt) {
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=cpu", "--cpu_simd=sse2"}, &server));
  EXPECT_NE(server.process->Output().find("SIMD sse2"), std::string::npos)
      << server.process->Output();
  EXPECT_EQ(ServerInfoCpuSimd(server), "sse2");
  StopServer(&server);
}

TEST(ProcessTest, CpuSimdEnvironmentVariableAppliesWithoutTheFlag) {
  setenv("ROPE_CPU_SIMD", "sse2", 1);
  Server server;
  StartServer({"--backend=cpu"}, &server);
  unsetenv("ROPE_CPU_SIMD");
  ASSERT_NE(server.process, nullptr);
  EXPECT_EQ(ServerInfoCpuSimd(server), "sse2");
  StopServer(&server);
}
#endif

TEST(ProcessTest, DefaultCpuSimdIsNamedInTheLogAndServerInfo) {
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=cpu"}, &server));
  const std::string simd = ServerInfoCpuSimd(server);
  EXPECT_FALSE(simd.empty());
  EXPECT_NE(server.process->Output().find("SIMD " + simd), std::string::npos)
      << server.process->Output();
  StopServer(&server);
}

// --work_threads and --cpu_threads at 0 follow the CPUs the process may use
// (server/service/cpu_limit.h), here its affinity mask of one CPU, which the
// child inherits from this thread.
TEST(ProcessTest, DefaultThreadCountsFollowTheAffinityMask) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  Server server;
  StartServer({"--backend=cpu"}, &server);
  ASSERT_EQ(sched_setaffinity(0, sizeof(mine), &mine), 0);
  ASSERT_NE(server.process, nullptr);
  EXPECT_NE(server.process->Output().find("ropeserve: 1 CPUs to use (affinity mask)"),
            std::string::npos)
      << server.process->Output();
  auto stub = v1::RopeService::NewStub(server.channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.threads(), 1);
  StopServer(&server);
}

// server/service/malloc_settings.h: large buffers from the heap by default,
// glibc's environment variables left alone; the log says which.
TEST(ProcessTest, MallocSettingsAreLoggedAndTheEnvironmentsThresholdsWin) {
  {
    Server server;
    ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=cpu"}, &server));
    EXPECT_NE(server.process->Output().find("ropeserve: malloc: "), std::string::npos)
        << server.process->Output();
    EXPECT_NE(server.process->Output().find("bytes from the heap, 67108864 bytes kept free"),
              std::string::npos)
        << server.process->Output();
    StopServer(&server);
  }
  setenv("MALLOC_TRIM_THRESHOLD_", "1048576", 1);
  Server server;
  StartServer({"--backend=cpu"}, &server);
  unsetenv("MALLOC_TRIM_THRESHOLD_");
  ASSERT_NE(server.process, nullptr);
  EXPECT_NE(server.process->Output().find("mmap and trim thresholds as the environment sets them"),
            std::string::npos)
      << server.process->Output();
  StopServer(&server);
}

TEST(ProcessTest, UnknownCpuSimdPathExitsWithTheCompiledOnes) {
  int exit_code = 0;
  const std::string output =
      RunToExit({"--cpu_simd=avx1024", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("--cpu_simd is \"avx1024\": must be auto or a SIMD path this binary "
                        "was built with: "),
            std::string::npos)
      << output;
}

TEST(ProcessTest, NegativeMaxInflightBytesOtherThanMinusOneExitsWithAMessage) {
  int exit_code = 0;
  const std::string output =
      RunToExit({"--max_inflight_bytes=-2", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("--max_inflight_bytes is -2"), std::string::npos) << output;
}

TEST(ProcessTest, ListenTakesTcpAndUnixSocketsAndRefusesBadLists) {
  const std::string socket = absl::StrCat("/tmp/rope-process-test-", getpid(), ".sock");
  {
    absl::StatusOr<std::unique_ptr<ServerProcess>> process = ServerProcess::Start(
        ROPESERVE_PATH, {"--backend=cpu", absl::StrCat("--listen=127.0.0.1:0,unix://", socket),
                         "--unix_socket_mode=0640"},
        absl::Seconds(30));
    ASSERT_TRUE(process.ok()) << process.status();
    EXPECT_NE((*process)->address().find("127.0.0.1:"), std::string::npos);
    struct stat st = {};
    ASSERT_EQ(stat(socket.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
  }
  int exit_code = 0;
  std::string output = RunToExit({"--listen=127.0.0.1:0,127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("--listen names two host:port addresses"), std::string::npos) << output;
  output = RunToExit({"--listen=unix:relative.sock"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("write Unix sockets as unix:///absolute/path"), std::string::npos)
      << output;
  output = RunToExit({"--listen=unix://relative.sock"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("\"relative.sock\": expected an absolute path"), std::string::npos)
      << output;
  output = RunToExit({absl::StrCat("--listen=unix:///tmp/", std::string(120, 'x'), ".sock")},
                     &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("is 130 bytes: a Unix socket path holds at most 107"),
            std::string::npos)
      << output;
  output = RunToExit({"--listen=127.0.0.1:0", "--unix_socket_mode=0999"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("--unix_socket_mode is \"0999\""), std::string::npos) << output;
}

TEST(ProcessTest, HelpListsEveryFlagAndExitsZeroWithoutASourcePath) {
  for (const char* help : {"--help", "-h", "--helpfull"}) {
    int exit_code = -1;
    const std::string output = RunToExit({help}, &exit_code);
    EXPECT_EQ(exit_code, 0) << help;
    for (const char* flag :
         {"--listen", "--backend", "--cpu_threads", "--cpu_simd", "--inline_rotate_max_bytes",
          "--work_threads", "--max_message_bytes",
          "--table_cache_bytes", "--max_len_cap", "--max_elements_per_request",
          "--max_concurrent_calls", "--metrics_port", "--metrics_host", "--shutdown_grace_period",
          "--max_connection_age", "--enable_echo", "--reuse_port", "--teardown_timeout",
          "--security_reload_interval", "--max_calls_per_client", "--max_inflight_bytes",
          "--max_inflight_wait", "--max_connection_age_grace", "--reply_send_timeout",
          "--unix_socket_mode", "--shm_max_regions_per_client", "--shm_max_mapped_bytes",
          "--shm_max_mapped_bytes_per_client", "--shm_allowed_dir", "--max_streams_per_client",
          "--stream_idle_timeout", "--max_inflight_bytes_per_client"}) {
      EXPECT_NE(output.find(absl::StrCat(flag, " (")), std::string::npos)
          << flag << "\n" << output;
    }
    EXPECT_EQ(output.find(".cc"), std::string::npos) << output;  // no build path
    EXPECT_NE(output.find("Exit status: 0"), std::string::npos) << output;
  }
}

TEST(ProcessTest, VersionPrintsTheVersionAndExitsZero) {
  int exit_code = -1;
  const std::string output = RunToExit({"--version"}, &exit_code);
  EXPECT_EQ(exit_code, 0);
  EXPECT_TRUE(absl::StartsWith(output, "ropeserve 0.") || absl::StartsWith(output, "ropeserve 1."))
      << output;
}

TEST(ProcessTest, UnknownFlagsAreUsageErrorsExitingTwo) {
  int exit_code = -1;
  std::string output = RunToExit({"--no_such_flag=1", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("no_such_flag"), std::string::npos) << output;
  output = RunToExit({"--max_concurrent_calls=many", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("max_concurrent_calls"), std::string::npos) << output;
}

TEST(ProcessTest, DashedFlagNamesAreAcceptedLikeRopectlAndRopeload) {
  Server server;
  ASSERT_NO_FATAL_FAILURE(StartServer(
      {"--backend=cpu", "--cpu-threads=1", "--work-threads=1", "--shutdown-grace-period=1s",
       "--metrics-host=127.0.0.1", "--max-concurrent-calls=7"},
      &server));
  server.process->Signal(SIGTERM);
  const std::optional<int> status = server.process->WaitExit(absl::Seconds(40));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

TEST(ProcessTest, ASecondServerOnATakenPortExitsOneNamingTheAddress) {
  Server first;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=cpu", "--cpu_threads=1"}, &first));
  const std::string address = absl::StrCat("127.0.0.1:", first.port);
  int exit_code = -1;
  const std::string output =
      RunToExit({"--backend=cpu", "--cpu_threads=1", "--listen=" + address}, &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_NE(output.find(absl::StrCat("cannot listen on ", address)), std::string::npos)
      << output;
  // Deliberate sharing stays possible when both ask for it.
  Server shared;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=cpu", "--cpu_threads=1", "--reuse_port"},
                                      &shared));
  absl::StatusOr<std::unique_ptr<ServerProcess>> second = ServerProcess::Start(
      ROPESERVE_PATH,
      {absl::StrCat("--listen=127.0.0.1:", shared.port), "--backend=cpu", "--cpu_threads=1",
       "--reuse_port"},
      absl::Seconds(30));
  EXPECT_TRUE(second.ok()) << second.status();
}

TEST(ProcessTest, BindFailuresNameTheirCauseWithoutGrpcsOwnLogLine) {
  Server first;
  ASSERT_NO_FATAL_FAILURE(StartServer({"--backend=cpu", "--cpu_threads=1"}, &first));
  int exit_code = -1;
  std::string output = RunToExit(
      {"--backend=cpu", "--cpu_threads=1", absl::StrCat("--listen=127.0.0.1:", first.port)},
      &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_NE(output.find(absl::StrCat("port ", first.port, " is in use by another process")),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("chttp2_server"), std::string::npos) << output;
  output = RunToExit({"--backend=cpu", "--listen=unix:///missing/dir/x.sock"}, &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_NE(output.find("cannot listen on unix:///missing/dir/x.sock: the directory /missing/dir "
                        "does not exist"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("in use, not local, or malformed"), std::string::npos) << output;
  EXPECT_EQ(output.find("chttp2_server"), std::string::npos) << output;
  // Asked for, gRPC's own lines come back, prefixed.
  output = RunToExit({"--backend=cpu", "--cpu_threads=1", "--grpc_verbosity=error",
                      absl::StrCat("--listen=127.0.0.1:", first.port)},
                     &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_NE(output.find("ropeserve: grpc: E "), std::string::npos) << output;
  output = RunToExit({"--grpc_verbosity=loud", "--listen=127.0.0.1:0"}, &exit_code);
  EXPECT_EQ(exit_code, 2);
  EXPECT_NE(output.find("--grpc_verbosity is \"loud\": must be empty, debug, info or error"),
            std::string::npos)
      << output;
}

TEST(ProcessTest, TheLogIsOneOrderedStreamOnStderr) {
  const std::string out = ::testing::TempDir() + "/ropeserve-log-stdout";
  const std::string err = ::testing::TempDir() + "/ropeserve-log-stderr";
  // Fails at the bind, after the start-up lines: both streams redirected apart.
  const std::string command =
      absl::StrCat(ROPESERVE_PATH, " --backend=cpu --cpu_threads=1 --listen=unix:///missing/x.sock",
                   " >", out, " 2>", err);
  EXPECT_NE(std::system(command.c_str()), 0);
  std::ifstream out_file(out), err_file(err);
  const std::string out_text((std::istreambuf_iterator<char>(out_file)), {});
  const std::string err_text((std::istreambuf_iterator<char>(err_file)), {});
  EXPECT_EQ(out_text, "");
  const size_t malloc_line = err_text.find("ropeserve: malloc:");
  const size_t failure = err_text.find("cannot listen on");
  ASSERT_NE(malloc_line, std::string::npos) << err_text;
  ASSERT_NE(failure, std::string::npos) << err_text;
  EXPECT_LT(malloc_line, failure) << err_text;
}

TEST(ProcessTest, ConfigurationIsCheckedBeforeTheBackendIsCreated) {
  HiddenGpus hidden;
  // Every misconfiguration docs/operations.md's flag table allows for: exit
  // 2 naming the flag, before a backend exists. --backend=cuda would fail
  // too (exit 1, a line naming --backend=cuda), so its absence shows that
  // the backend was never created.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--backend=tpu"}, "--backend is \"tpu\""},
      {{"--cpu_simd=avx9000"}, "--cpu_simd"},
      {{"--table_cache_bytes=0"}, "--table_cache_bytes is 0"},
      {{"--max_len_cap=0"}, "--max_len_cap is 0"},
      {{"--max_table_blocks_per_call=0"}, "--max_table_blocks_per_call is 0"},
      {{"--max_elements_per_request=-1"}, "--max_elements_per_request is -1"},
      {{"--shutdown_grace_period=-1s"}, "--shutdown_grace_period is -1s"},
      {{"--teardown_timeout=-1s"}, "--teardown_timeout is -1s"},
      {{"--listener_stuck_after=-1s"}, "--listener_stuck_after is -1s"},
      {{"--listen=127.0.0.1:0,127.0.0.1:0"}, "--listen names two host:port addresses"},
      {{"--listen=unix:relative.sock"}, "write Unix sockets as unix:///absolute/path"},
      {{"--listen=unix://relative.sock"}, "--listen=unix://relative.sock: Unix socket path"},
      {{"--listen=localhost"}, "--listen=localhost: listen address is \"localhost\""},
      {{"--unix_socket_mode=0999"}, "--unix_socket_mode is \"0999\""},
      {{"--shm_max_regions_per_client=0"}, "--shm_max_regions_per_client is 0"},
      {{"--shm_max_mapped_bytes_per_client=0"}, "--shm_max_mapped_bytes_per_client is 0"},
      {{"--shm_owner_idle_lease=-1s"}, "--shm_owner_idle_lease is -1s"},
      {{"--max_message_bytes=0"}, "--max_message_bytes is 0"},
      {{"--max_message_bytes=4294967296"}, "--max_message_bytes is 4294967296"},
      {{"--metrics_port=70000"}, "--metrics_port is 70000"},
      {{"--metrics_client_timeout=0s"}, "--metrics_client_timeout is 0"},
      {{"--max_connection_age=0s"}, "--max_connection_age is 0"},
      {{"--max_connection_age_grace=-1s"}, "--max_connection_age_grace is -1s"},
      {{"--max_inflight_bytes=-2"}, "--max_inflight_bytes is -2"},
      {{"--max_inflight_wait=-1s"}, "--max_inflight_wait is -1s"},
      {{"--reply_send_timeout=0s"}, "--reply_send_timeout is 0"},
      {{"--stream_idle_timeout=0s"}, "--stream_idle_timeout is 0"},
      {{"--max_inflight_bytes_per_client=-2"}, "--max_inflight_bytes_per_client is -2"},
      {{"--max_inflight_bytes=0", "--max_inflight_bytes_per_client=1024"},
       "--max_inflight_bytes_per_client is 1024: a share of --max_inflight_bytes, which is 0"},
      {{"--security_reload_interval=-1s"}, "--security_reload_interval is -1s"},
      {{"--grpc_verbosity=loud"}, "--grpc_verbosity"},
      {{"--tls_cert_file=/nonexistent/c.pem", "--tls_key_file=/nonexistent/k.pem"},
       "--tls_cert_file=/nonexistent/c.pem"},
      {{"--auth_token_file=/nonexistent/tokens"}, "--auth_token_file"},
  };
  for (const auto& [flags, expected] : cases) {
    std::vector<std::string> args = {"--backend=cuda", "--listen=127.0.0.1:0"};
    if (flags[0] == "--backend=tpu") args = {"--listen=127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    int exit_code = -1;
    const std::string output = RunToExit(args, &exit_code);
    EXPECT_EQ(exit_code, 2) << flags[0] << ": " << output;
    EXPECT_NE(output.find(expected), std::string::npos) << flags[0] << ": " << output;
    EXPECT_EQ(output.find("--backend=cuda"), std::string::npos) << flags[0] << ": " << output;
    EXPECT_EQ(output.find("CPU backend"), std::string::npos) << flags[0] << ": " << output;
  }
}

}  // namespace
}  // namespace test
}  // namespace rope
