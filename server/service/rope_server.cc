#include "server/service/rope_server.h"

#include <algorithm>
#include <climits>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace rope {

namespace {

// How long a draining server stays reachable, refusing calls, before its
// transport shuts down (capped by the grace period).
constexpr absl::Duration kHealthPropagationTime = absl::Milliseconds(500);

// Both are process-wide switches read by every ServerBuilder made later.
void EnableHealthAndReflection() {
  static std::once_flag once;
  std::call_once(once, [] {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
}

absl::Status CheckOptions(const ServerOptions& options) {
  if (options.max_message_bytes <= 0 || options.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes is ", options.max_message_bytes, ": must be in [1, ", INT_MAX, "]"));
  }
  if (options.listen_address.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address is \"", options.listen_address, "\": expected host:port"));
  }
  if (options.max_connection_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("max_connection_age is ",
                                                   absl::FormatDuration(options.max_connection_age),
                                                   ": must be > 0 (inf: never)"));
  }
  return ValidateServerSecurity(options.security);
}

std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

}  // namespace

RopeServer::RopeServer(std::unique_ptr<Engine> engine, const ServerOptions& options)
    : options_(options),
      engine_(std::move(engine)),
      gate_(options.max_concurrent_calls),
      work_(options.work_threads),
      service_(*engine_, gate_, metrics_, work_, ServiceOptions{options.max_message_bytes, options.inline_rotate_max_bytes}) {}

absl::StatusOr<std::unique_ptr<RopeServer>> RopeServer::Start(std::unique_ptr<Engine> engine,
                                                              const ServerOptions& options) {
  absl::Status valid = CheckOptions(options);
  if (!valid.ok()) return valid;
  EnableHealthAndReflection();
  std::unique_ptr<RopeServer> server(new RopeServer(std::move(engine), options));

  if (!options.metrics_address.empty()) {
    server->state_collector_ =
        ServiceMetrics::NewStateCollector(&server->gate_, server->engine_.get());
    // prometheus-cpp reports a failed bind by throwing; nothing else here does.
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", options.metrics_address, ": ", e.what()));
    }
    server->exposer_->RegisterCollectable(server->metrics_.registry());
    server->exposer_->RegisterCollectable(server->state_collector_);
    std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_port_ = ports.empty() ? 0 : ports.front();
  }

  grpc::ServerBuilder builder;
  ServiceMetrics* const metrics = &server->metrics_;
  builder.AddListeningPort(
      options.listen_address,
      MakeServerCredentials(options.security,
                            [metrics](AuthFailure reason) { metrics->RecordAuthFailure(reason); }),
      &server->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  if (options.max_connection_age != absl::InfiniteDuration()) {
    const int64_t ms = absl::ToInt64Milliseconds(options.max_connection_age);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
  }
  builder.RegisterService(&server->service_);
  if (options.enable_echo) {
    server->echo_ = std::make_unique<EchoServiceImpl>(server->gate_, server->metrics_,
                                                      options.max_message_bytes);
    builder.RegisterService(server->echo_.get());
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    if (server->server_ != nullptr) server->server_->Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address,
                                               ": the address is in use, not local, or malformed"));
  }
  if (grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService()) {
    // "" (the whole server) is SERVING by default; name the service too, for
    // probes that ask about it.
    health->SetServingStatus(v1::RopeService::service_full_name(), true);
  }
  if (!options.health_listen_address.empty()) {
    absl::StatusOr<std::unique_ptr<HealthPort>> health =
        HealthPort::Start(options.health_listen_address);
    if (!health.ok()) return health.status();
    server->health_ = *std::move(health);
  }
  server->bound_address_ = WithPort(options.listen_address, server->port_);
  return server;
}

RopeServer::~RopeServer() {
  Drain(absl::ZeroDuration());
  if (exposer_ != nullptr) {
    exposer_->RemoveCollectable(state_collector_);
    exposer_->RemoveCollectable(metrics_.registry());
  }
}

void RopeServer::StartDraining() {
  if (server_ == nullptr) return;
  gate_.BeginDrain();
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  if (health_ != nullptr) health_->SetServing(false);
}

void RopeServer::Drain(absl::Duration grace) {
  const absl::Time deadline = absl::Now() + grace;
  absl::MutexLock lock(&drain_mu_);
  if (drained_ || server_ == nullptr) return;
  drained_ = true;
  StartDraining();
  // Keep the transport open a moment after health turns NOT_SERVING: clients
  // that watch health (RopeClient's service config has healthCheckConfig)
  // take this replica out of their round_robin first, and the calls they
  // still send get UNAVAILABLE from the gate, which they retry elsewhere.
  // Shutdown() sooner would race calls already on the wire, which gRPC
  // fails with CANCELLED (not retried): tests/deploy/scale_out_test.cc.
  absl::SleepFor(std::min(grace, kHealthPropagationTime));
  gate_.WaitForIdle(deadline);
  // Cancels whatever is still running at the deadline, and waits for it.
  server_->Shutdown(absl::ToChronoTime(deadline));
  if (health_ != nullptr) health_->Shutdown(deadline);
}

void RopeServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace rope
