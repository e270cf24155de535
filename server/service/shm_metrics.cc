#include "server/service/shm_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace rope {
namespace {

prometheus::MetricFamily Gauge(std::string name, std::string help, double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric metric;
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
  return family;
}

class ShmStateCollector final : public prometheus::Collectable {
 public:
  explicit ShmStateCollector(const ShmRegistry* registry) : registry_(registry) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const ShmLimits& limits = registry_->limits();
    return {
        Gauge("rope_shm_regions", "Shared-memory regions registered now (all clients).",
              static_cast<double>(registry_->regions())),
        Gauge("rope_shm_mapped_bytes", "Bytes of registered shared-memory regions.",
              static_cast<double>(registry_->mapped_bytes())),
        Gauge("rope_shm_max_regions_per_client", "Limit on one client's regions.",
              static_cast<double>(limits.max_regions_per_client)),
        Gauge("rope_shm_max_mapped_bytes", "Limit on mapped region bytes (0: shared memory off).",
              static_cast<double>(limits.max_mapped_bytes)),
    };
  }

 private:
  const ShmRegistry* const registry_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> NewShmStateCollector(const ShmRegistry* registry) {
  return std::make_shared<ShmStateCollector>(registry);
}

}  // namespace rope
