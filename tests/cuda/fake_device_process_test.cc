// The built ropeserve with --backend=cuda on the fake CUDA runtime
// (tests/cuda/fake_runtime, first on LD_LIBRARY_PATH, so that the backend
// plugin loads it instead of libcudart; the plugin's kernels then run
// nothing). A sticky CUDA error met by a call must not leave a server that
// fails every call for the rest of its life: health turns NOT_SERVING,
// rope_backend_healthy turns 0, the server drains (calls in flight may
// finish) and exits 3, for the orchestrator to restart it.
//
// Also: CUDA shared memory over the wire. A child process (IpcExporter, on
// the fake runtime linked here) exports a cudaMalloc allocation; a client
// registers its handle with the server, whose plugin opens it (the fake maps
// the child's memfd). The plugin's kernels run nothing on the fake, so this
// checks the wire, the service and the plugin's entry points, not the
// arithmetic (tests/cuda/cuda_ipc_test.cc checks that, on emulated kernels
// and on a GPU).
#include <sys/wait.h>

#include <csignal>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.grpc.pb.h"
#include "tests/cuda/ipc_exporter.h"
#include "tests/support/grpc_test_util.h"
#include "tests/support/server_process.h"

#ifndef ROPESERVE_PATH
#error "ROPESERVE_PATH must name the ropeserve binary"
#endif
#ifndef ROPE_FAKE_CUDA_DIR
#error "ROPE_FAKE_CUDA_DIR must name the directory of the fake libcudart.so.13"
#endif

namespace rope {
namespace test {
namespace {

using grpc::health::v1::HealthCheckResponse;

constexpr char kListening[] = "ropeserve listening on 127.0.0.1:";

HealthCheckResponse::ServingStatus Health(grpc::health::v1::Health::Stub& health) {
  HealthCheckResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  const grpc::Status status =
      health.Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST(FakeDeviceProcessTest, StickyCudaErrorDrainsAndExitsForARestart) {
  const absl::StatusOr<int> free_port = PickFreePort();
  ASSERT_TRUE(free_port.ok()) << free_port.status();
  const int metrics_port = *free_port;
  // The first kernel (a RotateStream message's) runs; the second (a unary
  // Rotate's) faults, as an illegal address would on a device.
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(
      "/usr/bin/env",
      {absl::StrCat("LD_LIBRARY_PATH=", ROPE_FAKE_CUDA_DIR),
       "ROPE_FAKE_CUDA_FAULTS=kernel:2:cudaErrorIllegalAddress", ROPESERVE_PATH,
       "--listen=127.0.0.1:0", "--backend=cuda", absl::StrCat("--metrics_port=", metrics_port),
       "--metrics_host=127.0.0.1", "--shutdown_grace_period=60s"},
      absl::Seconds(60));
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& process = **started;
  const std::optional<std::string> line = process.WaitForLine(kListening, absl::Seconds(60));
  ASSERT_TRUE(line.has_value()) << process.Output();
  EXPECT_NE(line->find("backend cuda: ropeserve fake CUDA device"), std::string::npos) << *line;
  ASSERT_TRUE(process.WaitForLine("ropeserve metrics on", absl::Seconds(30)).has_value())
      << process.Output();
  const int port = process.port();

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto rope = v1::RopeService::NewStub(channel);
  EXPECT_EQ(Health(*health), HealthCheckResponse::SERVING);
  EXPECT_EQ(MetricValue(HttpGetMetrics(metrics_port), "rope_backend_healthy"), 1);

  // A stream holds one call in flight, so the drain waits and the server
  // stays up to be looked at.
  grpc::ClientContext stream_context;
  SetDeadline(&stream_context, absl::Seconds(90));
  auto stream = rope->RotateStream(&stream_context);
  ASSERT_TRUE(stream->Write(MakeRotateRequest(1, 2, 1, 8)));
  v1::RotateResponse reply;
  ASSERT_TRUE(stream->Read(&reply));

  {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RotateResponse response;
    EXPECT_TRUE(GrpcStatusIs(rope->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::INTERNAL, "cudaErrorIllegalAddress"));
  }
  ASSERT_TRUE(process.WaitForLine("ropeserve: backend failed", absl::Seconds(30)).has_value())
      << process.Output();
  EXPECT_NE(process.Output().find("then exiting 3"), std::string::npos) << process.Output();
  EXPECT_EQ(Health(*health), HealthCheckResponse::NOT_SERVING);
  const std::string metrics = HttpGetMetrics(metrics_port);
  EXPECT_EQ(MetricValue(metrics, "rope_backend_healthy"), 0) << metrics;
  EXPECT_EQ(MetricValue(metrics, "rope_draining"), 1) << metrics;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RotateResponse response;
    EXPECT_TRUE(GrpcStatusIs(rope->Rotate(&context, MakeRotateRequest(1, 2, 1, 8), &response),
                             grpc::StatusCode::UNAVAILABLE, ""));
  }
  EXPECT_FALSE(process.WaitExit(absl::Milliseconds(300)).has_value())
      << "exited with a call still in flight";

  stream->WritesDone();
  while (stream->Read(&reply)) {
  }
  (void)stream->Finish();
  stream.reset();
  rope.reset();
  health.reset();
  channel.reset();
  const std::optional<int> status = process.WaitExit(absl::Seconds(60));
  ASSERT_TRUE(status.has_value()) << process.Output();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3)
      << "wait status " << *status << "\n"
      << process.Output();
}

TEST(FakeDeviceProcessTest, CudaRegionRegisteredByHandleServesRotateByReference) {
  absl::StatusOr<std::unique_ptr<IpcExporter>> exporter =
      IpcExporter::Start(std::vector<uint8_t>(8192, 0x3c));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(
      "/usr/bin/env",
      {absl::StrCat("LD_LIBRARY_PATH=", ROPE_FAKE_CUDA_DIR), ROPESERVE_PATH,
       "--listen=127.0.0.1:0", "--backend=cuda"},
      absl::Seconds(60));
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& process = **started;
  ASSERT_TRUE(process.WaitForLine(kListening, absl::Seconds(60)).has_value()) << process.Output();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", process.port()),
                                     grpc::InsecureChannelCredentials());
  auto rope = v1::RopeService::NewStub(channel);
  auto call = [](auto method) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return method(&context);
  };

  v1::RegisterSharedMemoryRequest registration;
  registration.set_name("dev");
  registration.set_cuda_ipc_handle((*exporter)->handle());
  registration.set_byte_size(8192);
  v1::RegisterSharedMemoryResponse registered;
  ASSERT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->RegisterSharedMemory(c, registration, &registered);
                           }),
                           grpc::StatusCode::OK, ""));
  v1::SharedMemoryStatusResponse status;
  ASSERT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->SharedMemoryStatus(c, {}, &status);
                           }),
                           grpc::StatusCode::OK, ""));
  ASSERT_EQ(status.regions_size(), 1);
  EXPECT_TRUE(status.regions(0).cuda_ipc());
  EXPECT_EQ(status.regions(0).byte_size(), 8192u);

  // Past the allocation, and another device: refused by the plugin.
  registration.set_name("large");
  registration.set_byte_size(8193);
  EXPECT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->RegisterSharedMemory(c, registration, &registered);
                           }),
                           grpc::StatusCode::INVALID_ARGUMENT,
                           "the allocation cuda_ipc_handle names holds 8192 bytes"));
  registration.set_byte_size(16);
  registration.set_cuda_device(3);
  EXPECT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->RegisterSharedMemory(c, registration, &registered);
                           }),
                           grpc::StatusCode::INVALID_ARGUMENT,
                           "cuda_device is 3: this server computes on CUDA device 0"));

  // Rotate by reference: the reply carries the reference.
  v1::RotateRequest request = MakeRotateRequest(1, 2, 2, 8);
  const std::string q_bytes = request.q().data();
  request.mutable_q()->clear_data();
  request.mutable_q()->mutable_shm()->set_region("dev");
  request.mutable_q()->mutable_shm()->set_offset(256);
  request.mutable_q()->mutable_shm()->set_byte_size(q_bytes.size());
  request.clear_k();
  v1::RotateResponse reply;
  ASSERT_TRUE(GrpcStatusIs(
      call([&](grpc::ClientContext* c) { return rope->Rotate(c, request, &reply); }),
      grpc::StatusCode::OK, ""));
  EXPECT_EQ(reply.q().shm().region(), "dev");
  EXPECT_EQ(reply.q().shm().offset(), 256u);
  EXPECT_TRUE(reply.q().data().empty());

  // Refused: an output reference past the region; AttentionScores on a
  // CUDA region without a CUDA region for its scores.
  request.mutable_q_out()->set_region("dev");
  request.mutable_q_out()->set_offset(8192);
  request.mutable_q_out()->set_byte_size(q_bytes.size());
  EXPECT_TRUE(GrpcStatusIs(
      call([&](grpc::ClientContext* c) { return rope->Rotate(c, request, &reply); }),
      grpc::StatusCode::INVALID_ARGUMENT, "q_out: offset 8192"));
  v1::AttentionScoresRequest attention;
  *attention.mutable_config() = request.config();
  *attention.mutable_q() = request.q();
  *attention.mutable_k() = request.q();
  v1::AttentionScoresResponse scores;
  EXPECT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->AttentionScores(c, attention, &scores);
                           }),
                           grpc::StatusCode::INVALID_ARGUMENT, "scores_out is not set"));
  // With one: scores [1, 2 heads, 2, 2] float32 at 4096; the reply names it.
  attention.mutable_scores_out()->set_region("dev");
  attention.mutable_scores_out()->set_offset(4096);
  attention.mutable_scores_out()->set_byte_size(32);
  ASSERT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->AttentionScores(c, attention, &scores);
                           }),
                           grpc::StatusCode::OK, ""));
  EXPECT_EQ(scores.scores().shm().offset(), 4096u);
  EXPECT_TRUE(scores.scores().data().empty());

  v1::UnregisterSharedMemoryRequest unregister;
  v1::UnregisterSharedMemoryResponse unregistered;
  EXPECT_TRUE(GrpcStatusIs(call([&](grpc::ClientContext* c) {
                             return rope->UnregisterSharedMemory(c, unregister, &unregistered);
                           }),
                           grpc::StatusCode::OK, ""));
  EXPECT_TRUE((*exporter)->Stop().ok());
  rope.reset();
  channel.reset();
  process.Signal(SIGTERM);
  const std::optional<int> exited = process.WaitExit(absl::Seconds(60));
  ASSERT_TRUE(exited.has_value()) << process.Output();
  EXPECT_TRUE(WIFEXITED(*exited) && WEXITSTATUS(*exited) == 0) << process.Output();
}

}  // namespace
}  // namespace test
}  // namespace rope
