#include "server/service/shm_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/service/one_value_metric.h"

namespace rope {
namespace {

prometheus::MetricFamily GaugeValue(std::string name, std::string help, double value) {
  return OneValue(std::move(name), std::move(help), prometheus::MetricType::Gauge, value);
}

class ShmStateCollector final : public prometheus::Collectable {
 public:
  explicit ShmStateCollector(const ShmRegistry* registry) : registry_(registry) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const ShmLimits& limits = registry_->limits();
    return {
        GaugeValue("rope_shm_regions", "Shared-memory regions registered now (all clients).",
                   static_cast<double>(registry_->regions())),
        GaugeValue("rope_shm_mapped_bytes", "Bytes of the pages registered shared-memory regions map.",
                   static_cast<double>(registry_->mapped_bytes())),
        GaugeValue("rope_shm_max_regions_per_client", "Limit on one client's regions.",
                   static_cast<double>(limits.max_regions_per_client)),
        GaugeValue("rope_shm_max_mapped_bytes",
                   "Limit on the bytes of pages regions map (0: shared memory off).",
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
