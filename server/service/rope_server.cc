#include "server/service/rope_server.h"

#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/service/shm_metrics.h"
#include "absl/time/clock.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server_builder.h"
#include "prometheus/registry.h"
#include "server/service/bind_diagnosis.h"
#include "server/service/byte_budget_metrics.h"
#include "server/service/metrics_http_server.h"
#include "server/service/stream_limits_metrics.h"

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

// Reloads are logged on stderr (one line each: they are rare) and counted.
CredentialReloader::Callbacks ReloadCallbacks(ServiceMetrics* metrics,
                                              std::function<void(AuthFailure)> on_auth_failure) {
  CredentialReloader::Callbacks callbacks;
  callbacks.on_reload = [metrics](ReloadedPart part) {
    metrics->RecordCredentialReload(part == ReloadedPart::kTls, true);
    std::fprintf(stderr, "ropeserve: reloaded the %s files\n", ReloadedPartName(part).c_str());
  };
  callbacks.on_failure = [metrics](ReloadedPart part, const absl::Status& status) {
    metrics->RecordCredentialReload(part == ReloadedPart::kTls, false);
    std::fprintf(stderr, "ropeserve: refused the changed %s files, keeping the current ones: %s\n",
                 ReloadedPartName(part).c_str(), status.ToString().c_str());
  };
  callbacks.on_auth_failure = std::move(on_auth_failure);
  return callbacks;
}

std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

}  // namespace

absl::Status ValidateServerOptions(const ServerOptions& options) {
  if (options.max_message_bytes <= 0 || options.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes is ", options.max_message_bytes, ": must be in [1, ", INT_MAX, "]"));
  }
  if (options.listen_address.empty() && options.unix_socket_paths.empty()) {
    return absl::InvalidArgumentError("no listen address: give a host:port or a Unix socket");
  }
  // The kernel keeps a socket's path in sockaddr_un::sun_path (108 bytes with its NUL); gRPC
  // refuses a longer one only at bind time, with a message that names no address.
  constexpr size_t kMaxUnixPathBytes = sizeof(sockaddr_un{}.sun_path) - 1;
  for (const std::string& path : options.unix_socket_paths) {
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("Unix socket path is \"", path, "\": expected an absolute path"));
    }
    if (path.size() > kMaxUnixPathBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("Unix socket path \"", path, "\" is ", path.size(),
                       " bytes: a Unix socket path holds at most ", kMaxUnixPathBytes));
    }
  }
  if (!options.listen_address.empty() && options.listen_address.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address is \"", options.listen_address, "\": expected host:port"));
  }
  if (options.max_inflight_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_inflight_wait is ", absl::FormatDuration(options.max_inflight_wait),
        ": must be >= 0"));
  }
  if (options.reply_send_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("reply_send_timeout is ",
                                                   absl::FormatDuration(options.reply_send_timeout),
                                                   ": must be > 0 (inf: no deadline)"));
  }
  if (options.stream_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream_idle_timeout is ", absl::FormatDuration(options.stream_idle_timeout),
        ": must be > 0 (inf: none)"));
  }
  if (options.max_inflight_bytes_per_client < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_inflight_bytes_per_client is ", options.max_inflight_bytes_per_client,
                     ": must be >= 0 (0: none), or -1 (half of the admitted calls' budget)"));
  }
  if (options.max_connection_age_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connection_age_grace is ",
                     absl::FormatDuration(options.max_connection_age_grace),
                     ": must be >= 0 (inf: no bound)"));
  }
  if (options.max_connection_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("max_connection_age is ",
                                                   absl::FormatDuration(options.max_connection_age),
                                                   ": must be > 0 (inf: never)"));
  }
  return ValidateServerSecurity(options.security);
}

InflightShares SplitInflightBytes(int64_t max_inflight_bytes) {
  if (max_inflight_bytes <= 0) return InflightShares{};
  const int64_t calls = std::max<int64_t>(max_inflight_bytes / 2, 1);
  return InflightShares{std::max<int64_t>(max_inflight_bytes - calls, 1), calls};
}

int64_t ClientInflightShare(const ServerOptions& options) {
  const int64_t calls = SplitInflightBytes(options.max_inflight_bytes).calls;
  if (calls <= 0 || options.max_inflight_bytes_per_client == 0) return 0;
  if (options.max_inflight_bytes_per_client < 0) return std::max<int64_t>(calls / 2, 1);
  return options.max_inflight_bytes_per_client;
}

int64_t InlineRotateMaxBytes(const ServerOptions& options) {
  return options.max_calls_per_client > 0 ? 0 : options.inline_rotate_max_bytes;
}

RopeServer::RopeServer(std::unique_ptr<Engine> engine, const ServerOptions& options)
    : options_(options),
      engine_(std::move(engine)),
      shm_(options.shm),
      gate_(options.max_concurrent_calls, options.max_calls_per_client),
      budget_(SplitInflightBytes(options.max_inflight_bytes).calls, options.max_inflight_wait,
              absl::StrCat("max_inflight_bytes ", options.max_inflight_bytes, " (",
                           SplitInflightBytes(options.max_inflight_bytes).calls,
                           " for admitted calls)"),
              ClientInflightShare(options)),
      send_watch_(options.reply_send_timeout),
      stream_limits_(options.max_streams_per_client, options.stream_idle_timeout,
                     /*tokens_verified=*/!options.security.bearer_tokens.empty()),
      work_(options.work_threads),
      service_(*engine_, gate_, budget_, metrics_, work_,
               ServiceOptions{options.max_message_bytes, options.max_inflight_bytes,
                              /*tokens_verified=*/!options.security.bearer_tokens.empty(), &shm_,
                              InlineRotateMaxBytes(options), &send_watch_,
                              &stream_limits_}) {}

absl::StatusOr<std::unique_ptr<RopeServer>> RopeServer::Start(std::unique_ptr<Engine> engine,
                                                              const ServerOptions& options) {
  absl::Status valid = ValidateServerOptions(options);
  if (!valid.ok()) return valid;
  EnableHealthAndReflection();
  std::unique_ptr<RopeServer> server(new RopeServer(std::move(engine), options));

  if (!options.metrics_address.empty()) {
    server->state_collector_ =
        ServiceMetrics::NewStateCollector(&server->gate_, server->engine_.get());
    server->budget_collector_ = NewByteBudgetCollector(&server->budget_);
    server->shm_collector_ = NewShmStateCollector(&server->shm_);
    server->streams_collector_ = NewStreamLimitsCollector(&server->stream_limits_);
    MetricsHttpOptions metrics_options;
    metrics_options.address = options.metrics_address;
    metrics_options.client_timeout = options.metrics_client_timeout;
    metrics_options.max_connections = options.metrics_max_connections;
    metrics_options.max_connections_per_address = options.metrics_max_connections_per_address;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics_http = MetricsHttpServer::Start(
        metrics_options, {server->metrics_.registry(), server->state_collector_,
                          server->budget_collector_, server->shm_collector_,
                          server->streams_collector_});
    if (!metrics_http.ok()) return metrics_http.status();
    server->metrics_http_ = *std::move(metrics_http);
    server->metrics_port_ = server->metrics_http_->port();
  }

  grpc::ServerBuilder builder;
  ServiceMetrics* const metrics = &server->metrics_;
  RefusalLog* const auth_refusals = &server->auth_refusals_;
  auto on_auth_failure = [metrics, auth_refusals](AuthFailure reason) {
    metrics->RecordAuthFailure(reason);
    auth_refusals->Note("UNAUTHENTICATED", reason == AuthFailure::kMissingToken
                                               ? "missing bearer token"
                                               : "bearer token not accepted");
  };
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (options.security.tls() && options.security_reload_interval > absl::ZeroDuration()) {
    absl::StatusOr<std::unique_ptr<CredentialReloader>> reloader = CredentialReloader::Start(
        options.security_files, options.security, options.security_reload_interval,
        options.security_staging_dir, ReloadCallbacks(metrics, on_auth_failure));
    if (!reloader.ok()) return reloader.status();
    server->reloader_ = *std::move(reloader);
    credentials = server->reloader_->credentials();
  } else {
    credentials = MakeServerCredentials(options.security, on_auth_failure);
  }
  if (!options.listen_address.empty()) {
    builder.AddListeningPort(options.listen_address, credentials, &server->port_);
  }
  // Without TLS the server accepts on its Unix sockets itself, to learn each
  // client's uid (unix_peer_listener.h); with TLS gRPC does, through the
  // handshake, and its clients are told apart by token or certificate.
  const bool unix_by_uid =
      !options.security.tls() && options.security.bearer_tokens.empty();
  std::vector<int> unix_bound(options.unix_socket_paths.size(), unix_by_uid ? 1 : 0);
  for (size_t i = 0; i < options.unix_socket_paths.size() && !unix_by_uid; ++i) {
    builder.AddListeningPort(absl::StrCat("unix:", options.unix_socket_paths[i]), credentials,
                             &unix_bound[i]);
  }
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, options.reuse_port ? 1 : 0);
  if (options.max_streams_per_connection > 0) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONCURRENT_STREAMS,
        static_cast<int>(std::min<int64_t>(options.max_streams_per_connection, INT32_MAX)));
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  if (options.max_inflight_bytes > 0) {
    // The transport's buffers of messages still arriving count against this
    // quota; past it gRPC cancels streams (RST_STREAM ENHANCE_YOUR_CALM: the
    // client sees RESOURCE_EXHAUSTED) instead of buffering without bound. A
    // message larger than the quota can never arrive, hence half, not less.
    grpc::ResourceQuota quota("ropeserve");
    quota.Resize(static_cast<size_t>(SplitInflightBytes(options.max_inflight_bytes).transport));
    builder.SetResourceQuota(quota);
  }
  if (options.max_connection_age_grace != absl::InfiniteDuration()) {
    const int64_t ms = absl::ToInt64Milliseconds(options.max_connection_age_grace);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
  }
  if (options.max_connection_age != absl::InfiniteDuration()) {
    const int64_t ms = absl::ToInt64Milliseconds(options.max_connection_age);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
  }
  builder.RegisterService(&server->service_);
  if (!options.model_repository.empty()) {
    absl::StatusOr<kserve::ModelRepository> models =
        kserve::ModelRepository::Load(options.model_repository, *server->engine_);
    if (!models.ok()) return models.status();
    server->models_ = *std::move(models);
  }
  server->kserve_ = std::make_unique<kserve::KServeServiceImpl>(
      *server->engine_, server->gate_, server->budget_, server->metrics_, server->work_,
      server->models_,
      ServiceOptions{options.max_message_bytes, options.max_inflight_bytes,
                     /*tokens_verified=*/!options.security.bearer_tokens.empty(), &server->shm_,
                     InlineRotateMaxBytes(options), &server->send_watch_,
                     &server->stream_limits_});
  builder.RegisterService(server->kserve_.get());
  if (options.enable_echo) {
    server->echo_ = std::make_unique<EchoServiceImpl>(server->gate_, server->metrics_,
                                                      options.max_message_bytes);
    builder.RegisterService(server->echo_.get());
  }
  server->server_ = builder.BuildAndStart();
  const bool tcp_failed = !options.listen_address.empty() && server->port_ == 0;
  if (server->server_ == nullptr || tcp_failed) {
    if (server->server_ != nullptr) server->server_->Shutdown();
    // Name the address that failed and why (gRPC's builder says neither).
    std::string address, cause;
    if (tcp_failed) {
      address = options.listen_address;
      cause = DiagnoseTcpBind(address, options.reuse_port);
    }
    for (size_t i = 0; i < options.unix_socket_paths.size() && cause.empty(); ++i) {
      if (unix_bound[i] != 0) continue;
      address = absl::StrCat("unix://", options.unix_socket_paths[i]);
      cause = DiagnoseUnixBind(options.unix_socket_paths[i]);
    }
    if (address.empty()) address = options.listen_address;
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, ": ",
        cause.empty() ? "the address is in use, not local, or malformed" : cause));
  }
  for (size_t i = 0; i < options.unix_socket_paths.size() && unix_by_uid; ++i) {
    absl::StatusOr<std::unique_ptr<UnixPeerListener>> listener = UnixPeerListener::Start(
        options.unix_socket_paths[i], options.unix_socket_mode, server->server_.get());
    if (!listener.ok()) {
      server->unix_listeners_.clear();
      server->server_->Shutdown();
      return listener.status();
    }
    server->unix_listeners_.push_back(*std::move(listener));
  }
  for (size_t i = 0; i < options.unix_socket_paths.size() && !unix_by_uid; ++i) {
    const std::string& path = options.unix_socket_paths[i];
    if (unix_bound[i] == 0 || chmod(path.c_str(), options.unix_socket_mode) != 0) {
      server->server_->Shutdown();
      const std::string cause = DiagnoseUnixBind(path);
      return absl::UnavailableError(absl::StrCat(
          "cannot serve the Unix socket ", path, ": ",
          cause.empty() ? "its mode cannot be set (--unix_socket_mode)" : cause));
    }
  }
  if (grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService()) {
    // "" (the whole server) is SERVING by default; name the service too, for
    // probes that ask about it.
    health->SetServingStatus(v1::RopeService::service_full_name(), true);
    health->SetServingStatus(inference::GRPCInferenceService::service_full_name(), true);
  }
  if (!options.health_listen_address.empty()) {
    absl::StatusOr<std::unique_ptr<HealthPort>> health =
        HealthPort::Start(options.health_listen_address, options.reuse_port);
    if (!health.ok()) return health.status();
    server->health_ = *std::move(health);
  }
  server->bound_address_ = options.listen_address.empty()
                               ? absl::StrCat("unix://", options.unix_socket_paths.front())
                               : WithPort(options.listen_address, server->port_);
  return server;
}

RopeServer::~RopeServer() {
  Drain(absl::ZeroDuration());
  // The endpoint's thread reads the collectors' subjects: stop it first.
  metrics_http_.reset();
}

void RopeServer::StartDraining() {
  if (server_ == nullptr) return;
  gate_.BeginDrain();
  // Calls still waiting for room in the byte budget would hold the drain up
  // to their wait limit: they retry on another replica instead.
  budget_.RefuseWaiting(DrainingError());
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
  // The Unix listeners first: they hand connections to the server.
  for (auto& listener : unix_listeners_) listener->Stop();
  server_->Shutdown(absl::ToChronoTime(deadline));
  if (health_ != nullptr) health_->Shutdown(deadline);
  // Regions end with the server (a call still holding one has finished).
  shm_.Clear();
}

void RopeServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace rope
