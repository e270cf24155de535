// HealthPort: an optional second, plaintext gRPC port that serves only
// grpc.health.v1.Health, mirroring the main server's state.
//
// Kubernetes' native gRPC probes (and most load balancers' health checks)
// speak plaintext and send no credentials, so once the main port needs TLS,
// a client certificate or a token they cannot use it. This port gives them
// health and nothing else: every other method is UNIMPLEMENTED there, and
// server reflection is not registered on it.
//
// Thread-safe.
#ifndef ROPE_SERVICE_HEALTH_PORT_H_
#define ROPE_SERVICE_HEALTH_PORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"

namespace rope {

class HealthPort {
 public:
  // Listens on `address` (host:port; port 0 picks one). SERVING at start.
  // UNAVAILABLE naming the address when it cannot be bound. `reuse_port`:
  // SO_REUSEPORT (see ServerOptions::reuse_port).
  static absl::StatusOr<std::unique_ptr<HealthPort>> Start(const std::string& address,
                                                           bool reuse_port = false);

  ~HealthPort();
  HealthPort(const HealthPort&) = delete;
  HealthPort& operator=(const HealthPort&) = delete;

  int port() const { return port_; }

  // SERVING or NOT_SERVING, for "" (the whole server) and every service.
  void SetServing(bool serving);

  // Stops the port; calls still open are cancelled at `deadline`.
  void Shutdown(absl::Time deadline);

 private:
  HealthPort() = default;

  // Answers every method but health with UNIMPLEMENTED; its presence is also
  // what lets gRPC build a server that has no service of its own.
  grpc::CallbackGenericService unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace rope

#endif  // ROPE_SERVICE_HEALTH_PORT_H_
