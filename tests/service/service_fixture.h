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

  FaultBackend* backend_ = nullptr;  // owned by the server's engine
  std::unique_ptr<RopeServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RopeService::Stub> stub_;
};

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SERVICE_SERVICE_FIXTURE_H_
