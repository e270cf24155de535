// ServiceMetrics: the Prometheus metrics of the RPC layer.
//
//   rope_requests_total{rpc,code}        finished requests (one per stream message)
//   rope_request_duration_seconds{rpc}   handling time, admission to reply
//   rope_received_bytes_total{rpc}       serialized request bytes
//   rope_sent_bytes_total{rpc}           serialized reply bytes
//   rope_auth_failures_total{reason}     calls refused for their bearer token
//                                        (missing_token, invalid_token)
//   rope_credential_reloads_total{part,result}  changed certificate/key/CA
//                                        (part="tls") or token files
//                                        (part="tokens") taken (result="ok")
//                                        or refused, keeping the old ones
//                                        (result="refused")
// and, read at scrape time by the state collector:
//   rope_calls_in_flight, rope_max_concurrent_calls, rope_draining, rope_backend_healthy
//   rope_table_cache_{hits,misses,evictions}_total, rope_table_cache_{entries,bytes,budget_bytes}
//
// Thread-safe.
#ifndef ROPE_SERVICE_SERVICE_METRICS_H_
#define ROPE_SERVICE_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "core/engine/engine.h"
#include "server/service/call_gate.h"
#include "server/service/token_auth.h"

namespace prometheus {
class Collectable;
class Counter;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace rope {

enum class Rpc : int {
  kRotate,
  kRotateStream,
  kAttentionScores,
  kGetTable,
  kGetServerInfo,
  kEcho,
  kResolveConfig,
  kRegisterSharedMemory,
  kUnregisterSharedMemory,
  kSharedMemoryStatus,
  kBuildPositions,
  // inference.GRPCInferenceService (the KServe v2 / Triton protocol)
  kServerLive,
  kServerReady,
  kModelReady,
  kServerMetadata,
  kModelMetadata,
  kModelInfer,
  kModelStreamInfer,
  kModelConfig,
  kModelStatistics,
  kRepositoryIndex,
  kSystemSharedMemoryStatus,
  kSystemSharedMemoryRegister,
  kSystemSharedMemoryUnregister,
  kCudaSharedMemoryStatus,
  kCudaSharedMemoryRegister,
  kCudaSharedMemoryUnregister
};
inline constexpr int kRpcCount = 27;
absl::string_view RpcName(Rpc rpc);          // "Rotate", ...
absl::string_view GrpcCodeName(grpc::StatusCode code);  // "OK", "INVALID_ARGUMENT", ...

class ServiceMetrics {
 public:
  ServiceMetrics();
  ~ServiceMetrics();
  ServiceMetrics(const ServiceMetrics&) = delete;
  ServiceMetrics& operator=(const ServiceMetrics&) = delete;

  // Records one finished request (for RotateStream: one message, or the
  // refusal of the stream).
  void RecordRequest(Rpc rpc, grpc::StatusCode code, absl::Duration latency, int64_t bytes_in,
                     int64_t bytes_out);

  // Counts a call refused by the BearerTokenProcessor (such calls never
  // reach the services, so rope_requests_total does not see them).
  void RecordAuthFailure(AuthFailure reason);

  // Counts a reload of changed credential files: `tls` (else the tokens),
  // `accepted` (else refused, the old credentials kept).
  void RecordCredentialReload(bool tls, bool accepted);

  // Holds the metrics above; register it with an Exposer.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // A collectable reporting the gate's and the engine's state at scrape time.
  // `gate` and `engine` must outlive every scrape (unregister it first).
  static std::shared_ptr<prometheus::Collectable> NewStateCollector(const CallGate* gate,
                                                                    const Engine* engine);

 private:
  static constexpr int kCodeCount = 17;  // grpc::StatusCode 0 .. 16

  prometheus::Counter& RequestCounter(Rpc rpc, grpc::StatusCode code);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  // Children of requests_, made on first use so that /metrics lists only the
  // (rpc, code) pairs that happened.
  std::array<std::atomic<prometheus::Counter*>, kRpcCount * kCodeCount> request_counters_{};
  std::array<prometheus::Histogram*, kRpcCount> durations_{};
  std::array<prometheus::Counter*, kRpcCount> bytes_in_{};
  std::array<prometheus::Counter*, kRpcCount> bytes_out_{};
  prometheus::Counter* missing_token_ = nullptr;
  prometheus::Counter* invalid_token_ = nullptr;
  // [tls ? 1 : 0][accepted ? 1 : 0]
  prometheus::Counter* credential_reloads_[2][2] = {};
};

}  // namespace rope

#endif  // ROPE_SERVICE_SERVICE_METRICS_H_
