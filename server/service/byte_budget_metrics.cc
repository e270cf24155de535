#include "server/service/byte_budget_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "server/service/one_value_metric.h"

namespace rope {

namespace {

class ByteBudgetCollector final : public prometheus::Collectable {
 public:
  explicit ByteBudgetCollector(const ByteBudget* budget) : budget_(budget) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> out;
    out.push_back(OneValue("rope_inflight_budget_bytes",
                           "Budget of request and reply bytes in flight (0: none).",
                           MetricType::Gauge, static_cast<double>(budget_->budget_bytes())));
    out.push_back(OneValue("rope_inflight_bytes", "Request and reply bytes charged to calls now.",
                           MetricType::Gauge, static_cast<double>(budget_->in_use_bytes())));
    out.push_back(OneValue("rope_inflight_waiters", "Calls waiting for room in the budget now.",
                           MetricType::Gauge, static_cast<double>(budget_->waiters())));
    out.push_back(OneValue("rope_inflight_refusals_total",
                           "Calls refused RESOURCE_EXHAUSTED for lack of room in the budget.",
                           MetricType::Counter, static_cast<double>(budget_->refusals())));
    return out;
  }

 private:
  const ByteBudget* const budget_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> NewByteBudgetCollector(const ByteBudget* budget) {
  return std::make_shared<ByteBudgetCollector>(budget);
}

}  // namespace rope
