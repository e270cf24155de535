#include "server/service/health_port.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace rope {
namespace {

// Drops the process-wide builder plugins (server reflection) from this one
// builder: the health port exposes health only.
class WithoutPlugins final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<HealthPort>> HealthPort::Start(const std::string& address,
                                                             bool reuse_port) {
  if (address.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("health listen address is \"", address, "\": expected host:port"));
  }
  std::unique_ptr<HealthPort> health(new HealthPort());
  grpc::ServerBuilder builder;
  // The default health service is added because grpc::EnableDefaultHealthCheckService
  // is on process-wide (RopeServer turns it on before any builder).
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &health->port_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, reuse_port ? 1 : 0);
  builder.RegisterCallbackGenericService(&health->unimplemented_);
  builder.SetOption(std::make_unique<WithoutPlugins>());
  health->server_ = builder.BuildAndStart();
  if (health->server_ == nullptr || health->port_ == 0) {
    if (health->server_ != nullptr) health->server_->Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address,
                                               " for health: the address is in use, not local, "
                                               "or malformed"));
  }
  return health;
}

HealthPort::~HealthPort() { Shutdown(absl::Now()); }

void HealthPort::SetServing(bool serving) {
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
}

void HealthPort::Shutdown(absl::Time deadline) {
  // Shutdown() is idempotent in gRPC; Wait() returns at once the second time.
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
}

}  // namespace rope
