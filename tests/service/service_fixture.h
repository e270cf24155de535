// A real ropeserve (RopeServer, the same wiring as main.cc) on 127.0.0.1:0
// in this process, over the CPU backend wrapped in a FaultBackend, with a real
// channel to it.
#ifndef ROPE_TESTS_SERVICE_SERVICE_FIXTURE_H_
#define ROPE_TESTS_SERVICE_SERVICE_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.grpc.pb.h"
#include "core/engine/engine.h"
#include "server/service/rope_server.h"
#include "tests/service/fault_backend.h"
#include "tests/support/grpc_test_util.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {

class ServiceTest : public ::testing::Test {
 protected:
  // 127.0.0.1:0, Echo on, metrics off (the exposer takes ~2 s to stop;
  // tests of /metrics turn it on).
  static ServerOptions DefaultOptions();

  // Starts the server and a channel to it. SetUp() does so with
  // DefaultOptions(); fixtures that need other options override SetUp().
  void StartServer(const ServerOptions& options, const EngineLimits& limits = EngineLimits());
  void SetUp() override;
  void TearDown() override;

  std::shared_ptr<grpc::Channel> NewChannel() const;

  // One call each on stub_ under the test deadline.
  grpc::Status Resolve(const v1::RopeConfig& config, v1::ResolvedConfig* out) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return stub_->ResolveConfig(&context, config, out);
  }
  grpc::Status Rotate(const v1::RotateRequest& request, v1::RotateResponse* out) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return stub_->Rotate(&context, request, out);
  }
  grpc::Status Table(const v1::GetTableRequest& request, v1::GetTableResponse* out) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return stub_->GetTable(&context, request, out);
  }
  grpc::Status Scores(const v1::AttentionScoresRequest& request,
                      v1::AttentionScoresResponse* out) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return stub_->AttentionScores(&context, request, out);
  }

  FaultBackend* backend_ = nullptr;  // owned by the server's engine
  std::unique_ptr<RopeServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RopeService::Stub> stub_;
};

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SERVICE_SERVICE_FIXTURE_H_
