#include "server/service/service_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/service/one_value_metric.h"

namespace rope {

absl::string_view RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kRotate:
      return "Rotate";
    case Rpc::kRotateStream:
      return "RotateStream";
    case Rpc::kAttentionScores:
      return "AttentionScores";
    case Rpc::kGetTable:
      return "GetTable";
    case Rpc::kGetServerInfo:
      return "GetServerInfo";
    case Rpc::kEcho:
      return "Echo";
    case Rpc::kResolveConfig:
      return "ResolveConfig";
    case Rpc::kRegisterSharedMemory:
      return "RegisterSharedMemory";
    case Rpc::kUnregisterSharedMemory:
      return "UnregisterSharedMemory";
    case Rpc::kSharedMemoryStatus:
      return "SharedMemoryStatus";
    case Rpc::kBuildPositions:
      return "BuildPositions";
    case Rpc::kServerLive:
      return "ServerLive";
    case Rpc::kServerReady:
      return "ServerReady";
    case Rpc::kModelReady:
      return "ModelReady";
    case Rpc::kServerMetadata:
      return "ServerMetadata";
    case Rpc::kModelMetadata:
      return "ModelMetadata";
    case Rpc::kModelInfer:
      return "ModelInfer";
    case Rpc::kModelStreamInfer:
      return "ModelStreamInfer";
    case Rpc::kModelConfig:
      return "ModelConfig";
    case Rpc::kModelStatistics:
      return "ModelStatistics";
    case Rpc::kRepositoryIndex:
      return "RepositoryIndex";
    case Rpc::kSystemSharedMemoryStatus:
      return "SystemSharedMemoryStatus";
    case Rpc::kSystemSharedMemoryRegister:
      return "SystemSharedMemoryRegister";
    case Rpc::kSystemSharedMemoryUnregister:
      return "SystemSharedMemoryUnregister";
    case Rpc::kCudaSharedMemoryStatus:
      return "CudaSharedMemoryStatus";
    case Rpc::kCudaSharedMemoryRegister:
      return "CudaSharedMemoryRegister";
    case Rpc::kCudaSharedMemoryUnregister:
      return "CudaSharedMemoryUnregister";
  }
  return "unknown";
}

absl::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

namespace {

constexpr Rpc kAllRpcs[kRpcCount] = {Rpc::kRotate,        Rpc::kRotateStream,
                                     Rpc::kAttentionScores, Rpc::kGetTable,
                                     Rpc::kGetServerInfo,   Rpc::kEcho,
                                     Rpc::kResolveConfig,        Rpc::kRegisterSharedMemory,
                                     Rpc::kUnregisterSharedMemory, Rpc::kSharedMemoryStatus,
                                     Rpc::kBuildPositions,
                                     Rpc::kServerLive,
                                     Rpc::kServerReady,
                                     Rpc::kModelReady,
                                     Rpc::kServerMetadata,
                                     Rpc::kModelMetadata,
                                     Rpc::kModelInfer,
                                     Rpc::kModelStreamInfer,
                                     Rpc::kModelConfig,
                                     Rpc::kModelStatistics,
                                     Rpc::kRepositoryIndex,
                                     Rpc::kSystemSharedMemoryStatus,
                                     Rpc::kSystemSharedMemoryRegister,
                                     Rpc::kSystemSharedMemoryUnregister,
                                     Rpc::kCudaSharedMemoryStatus,
                                     Rpc::kCudaSharedMemoryRegister,
                                     Rpc::kCudaSharedMemoryUnregister};

// Latency buckets from 50 us (a small Rotate on loopback) to 10 s (a large
// AttentionScores on a CPU).
const std::vector<double>& DurationBuckets() {
  static const auto* buckets =
      new std::vector<double>{5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
                              5e-2, 0.1,  0.25,   0.5,  1,    2.5,    5,    10};
  return *buckets;
}

// Reads values owned elsewhere (the gate's count, the engine's cache stats)
// when Prometheus scrapes, so they are never stale and cost nothing per call.
class StateCollector final : public prometheus::Collectable {
 public:
  StateCollector(const CallGate* gate, const Engine* engine) : gate_(gate), engine_(engine) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    const TableCacheStats cache = engine_->cache_stats();
    std::vector<prometheus::MetricFamily> out;
    out.push_back(OneValue("rope_calls_in_flight", "Calls admitted and not yet finished.",
                           MetricType::Gauge, static_cast<double>(gate_->in_flight())));
    out.push_back(OneValue("rope_max_concurrent_calls", "Limit on calls in flight (0: none).",
                           MetricType::Gauge, static_cast<double>(gate_->max_in_flight())));
    out.push_back(OneValue("rope_draining", "1 while the server drains before exiting.",
                           MetricType::Gauge, gate_->draining() ? 1.0 : 0.0));
    // Tables are paged: the cache's unit is a block of table rows.
    out.push_back(OneValue("rope_table_cache_hits_total",
                           "Table blocks calls needed that the cache held.", MetricType::Counter,
                           static_cast<double>(cache.hits)));
    out.push_back(OneValue("rope_table_cache_misses_total",
                           "Table blocks calls needed that the cache had to build.",
                           MetricType::Counter, static_cast<double>(cache.misses)));
    out.push_back(OneValue("rope_table_cache_evictions_total",
                           "Table blocks evicted to stay within the budget.", MetricType::Counter,
                           static_cast<double>(cache.evictions)));
    out.push_back(OneValue("rope_table_cache_entries", "Table blocks cached now.",
                           MetricType::Gauge, static_cast<double>(cache.entries)));
    out.push_back(OneValue("rope_table_cache_bytes", "Bytes of cached table blocks now.",
                           MetricType::Gauge, static_cast<double>(cache.bytes)));
    out.push_back(OneValue("rope_table_blocks_built_total", "Table blocks built so far.",
                           MetricType::Counter, static_cast<double>(cache.built)));
    out.push_back(OneValue("rope_table_blocks_resident", "Table blocks cached now.",
                           MetricType::Gauge, static_cast<double>(cache.entries)));
    out.push_back(OneValue("rope_table_blocks_evicted_total",
                           "Table blocks evicted so far.", MetricType::Counter,
                           static_cast<double>(cache.evictions)));
    out.push_back(OneValue("rope_table_cache_budget_bytes", "Byte budget of the table cache.",
                           MetricType::Gauge, static_cast<double>(cache.budget_bytes)));
    const BackendInfo backend = engine_->backend_info();
    out.push_back(OneValue("rope_backend_healthy",
                           "0 once the backend has failed for good (a sticky CUDA error); the "
                           "server then drains and exits to be restarted.",
                           MetricType::Gauge, backend.fault.empty() ? 1.0 : 0.0));
    // Device backends (CUDA) only.
    if (backend.device_table_cache.has_value()) {
      const TableCacheStats& device = *backend.device_table_cache;
      out.push_back(OneValue("rope_device_memory_total_bytes", "Memory of the device.",
                             MetricType::Gauge,
                             static_cast<double>(backend.device_memory_total_bytes)));
      out.push_back(OneValue("rope_device_memory_used_bytes",
                             "Memory in use on the device (every process).", MetricType::Gauge,
                             static_cast<double>(backend.device_memory_used_bytes)));
      out.push_back(OneValue("rope_device_table_cache_hits_total",
                             "Device table block lookups answered by the device cache.",
                             MetricType::Counter, static_cast<double>(device.hits)));
      out.push_back(OneValue("rope_device_table_cache_misses_total",
                             "Device table block lookups that uploaded a block.", MetricType::Counter,
                             static_cast<double>(device.misses)));
      out.push_back(OneValue("rope_device_table_cache_evictions_total",
                             "Table blocks evicted from device memory to stay within the budget.",
                             MetricType::Counter, static_cast<double>(device.evictions)));
      out.push_back(OneValue("rope_device_table_cache_entries",
                             "Table blocks resident on the device.", MetricType::Gauge,
                             static_cast<double>(device.entries)));
      out.push_back(OneValue("rope_device_table_blocks_built_total",
                             "Table blocks uploaded to the device so far.", MetricType::Counter,
                             static_cast<double>(device.built)));
      out.push_back(OneValue("rope_device_table_cache_bytes",
                             "Bytes of table blocks resident on the device.", MetricType::Gauge,
                             static_cast<double>(device.bytes)));
      out.push_back(OneValue("rope_device_table_cache_budget_bytes",
                             "Byte budget of the device table cache.", MetricType::Gauge,
                             static_cast<double>(device.budget_bytes)));
    }
    return out;
  }

 private:
  const CallGate* const gate_;
  const Engine* const engine_;
};

}  // namespace

ServiceMetrics::ServiceMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ =
      &prometheus::BuildCounter()
           .Name("rope_requests_total")
           .Help("Finished requests by method and grpc status code (RotateStream: per message).")
           .Register(*registry_);
  auto& durations = prometheus::BuildHistogram()
                        .Name("rope_request_duration_seconds")
                        .Help("Time from admission to reply, by method.")
                        .Register(*registry_);
  auto& bytes_in = prometheus::BuildCounter()
                       .Name("rope_received_bytes_total")
                       .Help("Serialized request bytes received, by method.")
                       .Register(*registry_);
  auto& bytes_out = prometheus::BuildCounter()
                        .Name("rope_sent_bytes_total")
                        .Help("Serialized reply bytes sent, by method.")
                        .Register(*registry_);
  auto& auth_failures = prometheus::BuildCounter()
                            .Name("rope_auth_failures_total")
                            .Help("Calls refused for a missing or unaccepted bearer token.")
                            .Register(*registry_);
  missing_token_ = &auth_failures.Add({{"reason", "missing_token"}});
  invalid_token_ = &auth_failures.Add({{"reason", "invalid_token"}});
  auto& reloads = prometheus::BuildCounter()
                      .Name("rope_credential_reloads_total")
                      .Help("Changed credential files taken into use (result ok) or refused, "
                            "keeping the current credentials (result refused), by part (tls: "
                            "certificate, key, client CA; tokens).")
                      .Register(*registry_);
  for (int tls = 0; tls < 2; ++tls) {
    for (int accepted = 0; accepted < 2; ++accepted) {
      credential_reloads_[tls][accepted] =
          &reloads.Add({{"part", tls ? "tls" : "tokens"}, {"result", accepted ? "ok" : "refused"}});
    }
  }
  for (Rpc rpc : kAllRpcs) {
    const int i = static_cast<int>(rpc);
    const prometheus::Labels labels = {{"rpc", std::string(RpcName(rpc))}};
    durations_[i] = &durations.Add(labels, DurationBuckets());
    bytes_in_[i] = &bytes_in.Add(labels);
    bytes_out_[i] = &bytes_out.Add(labels);
  }
}

ServiceMetrics::~ServiceMetrics() = default;

prometheus::Counter& ServiceMetrics::RequestCounter(Rpc rpc, grpc::StatusCode code) {
  int code_index = static_cast<int>(code);
  if (code_index < 0 || code_index >= kCodeCount) code_index = grpc::StatusCode::UNKNOWN;
  std::atomic<prometheus::Counter*>& slot =
      request_counters_[static_cast<int>(rpc) * kCodeCount + code_index];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the existing child for equal labels, so two threads
    // racing here store the same pointer.
    counter = &requests_->Add(
        {{"rpc", std::string(RpcName(rpc))},
         {"code", std::string(GrpcCodeName(static_cast<grpc::StatusCode>(code_index)))}});
    slot.store(counter, std::memory_order_release);
  }
  return *counter;
}

void ServiceMetrics::RecordRequest(Rpc rpc, grpc::StatusCode code, absl::Duration latency,
                                   int64_t bytes_in, int64_t bytes_out) {
  const int i = static_cast<int>(rpc);
  RequestCounter(rpc, code).Increment();
  durations_[i]->Observe(absl::ToDoubleSeconds(latency));
  if (bytes_in > 0) bytes_in_[i]->Increment(static_cast<double>(bytes_in));
  if (bytes_out > 0) bytes_out_[i]->Increment(static_cast<double>(bytes_out));
}

void ServiceMetrics::RecordAuthFailure(AuthFailure reason) {
  (reason == AuthFailure::kMissingToken ? missing_token_ : invalid_token_)->Increment();
}

void ServiceMetrics::RecordCredentialReload(bool tls, bool accepted) {
  credential_reloads_[tls ? 1 : 0][accepted ? 1 : 0]->Increment();
}

std::shared_ptr<prometheus::Collectable> ServiceMetrics::NewStateCollector(const CallGate* gate,
                                                                           const Engine* engine) {
  return std::make_shared<StateCollector>(gate, engine);
}

}  // namespace rope
