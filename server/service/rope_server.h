// RopeServer: one running ropeserve instance. Assembles the gRPC server
// (RopeService, the KServe v2 GRPCInferenceService, health, reflection,
// optional Echo), the call gate, the work queue and the metrics endpoint
// around an Engine, and drains it on request.
//
// main.cc and the service tests start servers through this class, so the
// tests exercise the same wiring as production.
//
// Thread-safe: Drain() and Wait() may be called from different threads.
#ifndef ROPE_SERVICE_ROPE_SERVER_H_
#define ROPE_SERVICE_ROPE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "grpcpp/server.h"
#include "core/proto_engine/shm_registry.h"
#include "core/engine/engine.h"
#include "server/service/byte_budget.h"
#include "server/service/call_gate.h"
#include "server/service/credential_reloader.h"
#include "server/service/echo_service.h"
#include "server/kserve/kserve_models.h"
#include "server/kserve/kserve_service.h"
#include "server/service/health_port.h"
#include "server/service/metrics_http_server.h"
#include "server/service/refusal_log.h"
#include "server/service/rope_service.h"
#include "server/service/send_watch.h"
#include "server/service/server_security.h"
#include "server/service/service_metrics.h"
#include "server/service/stream_limits.h"
#include "server/service/unix_peer_listener.h"
#include "server/service/work_queue.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace rope {

struct ServerOptions {
  // host:port for gRPC; port 0 picks a free port (see RopeServer::port()).
  // Empty: no TCP port (then unix_socket_paths must name one).
  std::string listen_address = "0.0.0.0:" + std::to_string(kDefaultPort);
  // Unix-domain sockets served beside (or instead of) TCP, as file paths;
  // the same services and credentials as the TCP port. A stale socket file
  // at a path is replaced. Each socket file gets unix_socket_mode (chmod
  // after bind: the directory's permissions guard the moment between).
  std::vector<std::string> unix_socket_paths;
  uint32_t unix_socket_mode = 0660;
  // Shared-memory regions (RegisterSharedMemory): limits and the allowed
  // directory of file keys.
  ShmLimits shm;
  // Largest message accepted or sent, each way (at most INT32_MAX: gRPC's
  // limit is an int).
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
  // Calls in flight across all methods (a stream is one call while a message
  // of it is served); <= 0: no limit.
  int64_t max_concurrent_calls = 64;
  // Request and reply bytes in flight; <= 0: no limit. Split in two halves
  // that together bound the process: the transport's gRPC ResourceQuota
  // (messages still arriving) and the ByteBudget of admitted calls (their
  // parsed requests and their replies). See InflightShares.
  int64_t max_inflight_bytes = 0;
  // Longest a call waits for room in max_inflight_bytes when its deadline is
  // later (or it has none); then RESOURCE_EXHAUSTED.
  absl::Duration max_inflight_wait = absl::Seconds(10);
  // Longest a reply may take to be sent once it is ready (of a stream: each
  // message's reply); a reply not written by then (a client that does not
  // read) cancels its call, which returns its bytes and slot (send_watch.h).
  // InfiniteDuration(): no deadline.
  absl::Duration reply_send_timeout = absl::Minutes(2);
  // Calls in flight per client (caller_identity.h) ; <= 0: no per-client
  // share.
  int64_t max_calls_per_client = 0;
  // Bytes one client's admitted calls may hold in the ByteBudget (byte_budget.h);
  // 0: no per-client share; -1: half of the admitted calls' budget
  // (ClientInflightShare), so that two clients can always make progress.
  int64_t max_inflight_bytes_per_client = -1;
  // Streams one client may have open across all its connections, and how
  // long a stream may wait for its next message before the server finishes
  // it (stream_limits.h); <= 0 / InfiniteDuration(): none.
  int64_t max_streams_per_client = 64;
  absl::Duration stream_idle_timeout = absl::Minutes(2);
  // Streams (calls) one HTTP/2 connection may have open at once, announced
  // in SETTINGS_MAX_CONCURRENT_STREAMS: a client past it queues its calls
  // itself, costing the server nothing; <= 0: gRPC's default (no limit).
  int64_t max_streams_per_connection = 0;
  // Threads running the calls' work; <= 0: one per hardware thread.
  int work_threads = 0;
  // Rotate requests up to this size are answered on the gRPC thread instead
  // of the work queue (ServiceOptions::inline_rotate_max_bytes); <= 0: none.
  // Ignored while max_calls_per_client is set (InlineRotateMaxBytes).
  int64_t inline_rotate_max_bytes = 64 << 10;
  // host:port of the Prometheus /metrics endpoint; empty: none. Port 0 picks
  // a free port (see RopeServer::metrics_port()). The endpoint's limits
  // (metrics_http_server.h): a connection idle this long is closed; at most
  // this many connections in all and from one IP address.
  std::string metrics_address;
  absl::Duration metrics_client_timeout = absl::Seconds(10);
  int metrics_max_connections = 256;
  int metrics_max_connections_per_address = 16;
  // Connections are closed (gracefully) after this age so that clients
  // re-resolve and spread over new replicas. InfiniteDuration(): never.
  absl::Duration max_connection_age = absl::InfiniteDuration();
  // After max_connection_age, how long the calls still on a connection may
  // run before it is closed (they are cancelled). Bounds how long any
  // connection, such as one trickling a large message (slowloris), holds
  // transport memory: max_connection_age + this. InfiniteDuration(): no
  // bound.
  absl::Duration max_connection_age_grace = absl::InfiniteDuration();
  // Registers the bench-only rope.bench.v1.EchoService.
  bool enable_echo = false;
  // inference.GRPCInferenceService (KServe v2 / Triton) serves the built-in
  // models and, when set, one model per folder of this directory
  // (server/kserve/kserve_models.h); a folder that does not load stops
  // Start with INVALID_ARGUMENT.
  std::string model_repository;
  // host:port of a plaintext port serving only grpc.health.v1 (for probes
  // that cannot do TLS or send tokens); empty: none. Port 0 picks a free
  // port (see RopeServer::health_port()).
  std::string health_listen_address;
  // Whether another process may bind the same port (SO_REUSEPORT). Off: a
  // second server on a taken port fails to start instead of silently taking
  // part of the traffic.
  bool reuse_port = false;
  // The files `security` was read from and how often to look for changes
  // (credential_reloader.h). Zero, or no TLS: the credentials are fixed.
  // The private copies gRPC watches go under `security_staging_dir` (empty:
  // $TMPDIR, else /tmp).
  ServerSecurityFiles security_files;
  absl::Duration security_reload_interval = absl::ZeroDuration();
  std::string security_staging_dir;
  // Plaintext by default; TLS, mutual TLS and bearer tokens otherwise. The
  // metrics endpoint stays plaintext (it is scraped inside the cluster).
  ServerSecurity security;
};

// INVALID_ARGUMENT for options RopeServer::Start refuses: a message size
// outside [1, INT_MAX], no listen address, a relative or too long Unix socket
// path, a TCP address without a port, negative waits or ages, inconsistent
// security. Start checks them too; a caller configuring from flags checks
// them before it creates a backend.
absl::Status ValidateServerOptions(const ServerOptions& options);

// How max_inflight_bytes is split: `transport` sizes the ResourceQuota, so a
// message up to that size can arrive; `calls` is the ByteBudget of admitted
// calls. Both 0 (no limit) when max_inflight_bytes <= 0.
struct InflightShares {
  int64_t transport = 0;
  int64_t calls = 0;
};
InflightShares SplitInflightBytes(int64_t max_inflight_bytes);

// The share of the admitted calls' budget one client may hold:
// options.max_inflight_bytes_per_client, -1 resolved to half of
// SplitInflightBytes(options.max_inflight_bytes).calls; 0 without a budget.
int64_t ClientInflightShare(const ServerOptions& options);

// The inline Rotate limit the service gets: 0 (every call through the work
// queue) when per-client shares are on. gRPC's threads read and would answer
// inline calls first come, first served, so a client flooding small calls
// would be served in arrival order however the queue takes turns, and its
// share would never bind (bench/results/fairness.md); otherwise
// options.inline_rotate_max_bytes.
int64_t InlineRotateMaxBytes(const ServerOptions& options);

class RopeServer {
 public:
  // Starts serving. INVALID_ARGUMENT for bad options (including an invalid
  // `security`: ValidateServerSecurity); UNAVAILABLE naming the
  // address when a port cannot be bound. The engine is owned by the server.
  static absl::StatusOr<std::unique_ptr<RopeServer>> Start(std::unique_ptr<Engine> engine,
                                                           const ServerOptions& options);

  // Drains with no grace period (cancelling calls in flight) if Drain() was
  // not called, then stops everything.
  ~RopeServer();
  RopeServer(const RopeServer&) = delete;
  RopeServer& operator=(const RopeServer&) = delete;

  int port() const { return port_; }
  // "host:port" with the port actually bound, host as given in the options.
  const std::string& bound_address() const { return bound_address_; }
  // 0 when metrics are off.
  int metrics_port() const { return metrics_port_; }
  // 0 when there is no separate health port.
  int health_port() const { return health_ != nullptr ? health_->port() : 0; }
  Engine& engine() { return *engine_; }
  ShmRegistry& shm() { return shm_; }
  CallGate& gate() { return gate_; }
  ByteBudget& byte_budget() { return budget_; }
  StreamLimits& stream_limits() { return stream_limits_; }

  // First half of a graceful stop, returning at once: health turns
  // NOT_SERVING and new calls are refused with UNAVAILABLE. Idempotent.
  void StartDraining();

  // Graceful stop: StartDraining(), then calls in flight may finish until
  // `grace` has passed (then they are cancelled), and the gRPC server shuts
  // down. Returns when it has. Later calls return at once.
  void Drain(absl::Duration grace);

  // Blocks until the gRPC server has shut down (after Drain()).
  void Wait();

 private:
  RopeServer(std::unique_ptr<Engine> engine, const ServerOptions& options);

  const ServerOptions options_;
  // Declared in dependency order: destroyed in reverse, the server first.
  std::unique_ptr<Engine> engine_;
  ServiceMetrics metrics_;
  RefusalLog auth_refusals_;
  ShmRegistry shm_;
  CallGate gate_;
  ByteBudget budget_;
  SendWatch send_watch_;
  StreamLimits stream_limits_;
  WorkQueue work_;
  RopeServiceImpl service_;
  std::unique_ptr<EchoServiceImpl> echo_;
  kserve::ModelRepository models_;
  std::unique_ptr<kserve::KServeServiceImpl> kserve_;
  std::shared_ptr<prometheus::Collectable> state_collector_;
  std::shared_ptr<prometheus::Collectable> budget_collector_;
  std::shared_ptr<prometheus::Collectable> shm_collector_;
  std::shared_ptr<prometheus::Collectable> streams_collector_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  std::unique_ptr<CredentialReloader> reloader_;  // null: fixed credentials
  std::unique_ptr<grpc::Server> server_;
  // Stopped (Drain) before server_ shuts down.
  std::vector<std::unique_ptr<UnixPeerListener>> unix_listeners_;
  std::unique_ptr<HealthPort> health_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string bound_address_;

  absl::Mutex drain_mu_;
  bool drained_ ABSL_GUARDED_BY(drain_mu_) = false;
};

}  // namespace rope

#endif  // ROPE_SERVICE_ROPE_SERVER_H_
