#include "tests/service/service_fixture.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "core/backends/cpu/cpu_backend.h"

namespace rope {
namespace test {

ServerOptions ServiceTest::DefaultOptions() {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_concurrent_calls = 64;
  options.work_threads = 4;
  options.enable_echo = true;
  return options;
}

void ServiceTest::StartServer(const ServerOptions& options, const EngineLimits& limits) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = NewCpuBackend(2);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto fault = std::make_unique<FaultBackend>(*std::move(cpu));
  backend_ = fault.get();
  absl::StatusOr<std::unique_ptr<RopeServer>> server =
      RopeServer::Start(std::make_unique<Engine>(std::move(fault), limits), options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  channel_ = NewChannel();
  stub_ = v1::RopeService::NewStub(channel_);
}

void ServiceTest::SetUp() { StartServer(DefaultOptions()); }

void ServiceTest::TearDown() {
  if (backend_ != nullptr) backend_->Release();
  stub_.reset();
  channel_.reset();
  server_.reset();
}

std::shared_ptr<grpc::Channel> ServiceTest::NewChannel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A fresh connection per channel, so tests do not share one by accident.
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials(), args);
}

}  // namespace test
}  // namespace rope
