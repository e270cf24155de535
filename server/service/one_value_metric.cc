#include "server/service/one_value_metric.h"

#include <utility>

#include "prometheus/client_metric.h"

namespace rope {

prometheus::MetricFamily OneValue(std::string name, std::string help, prometheus::MetricType type,
                                  double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace rope
