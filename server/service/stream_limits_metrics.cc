#include "server/service/stream_limits_metrics.h"

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "server/service/one_value_metric.h"

namespace rope {

namespace {

class StreamLimitsCollector final : public prometheus::Collectable {
 public:
  explicit StreamLimitsCollector(const StreamLimits* limits) : limits_(limits) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> out;
    out.push_back(OneValue("rope_streams_open",
                           "Streams (RotateStream, ModelStreamInfer) open now.",
                           MetricType::Gauge, static_cast<double>(limits_->open_total())));
    out.push_back(OneValue("rope_streams_idle_finished_total",
                           "Streams finished UNAVAILABLE by the idle timeout.",
                           MetricType::Counter, static_cast<double>(limits_->idled_out())));
    return out;
  }

 private:
  const StreamLimits* const limits_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> NewStreamLimitsCollector(const StreamLimits* limits) {
  return std::make_shared<StreamLimitsCollector>(limits);
}

}  // namespace rope
