// One Prometheus metric family holding a single unlabelled counter or gauge
// sample: what the scrape-time collectors (service_metrics.cc,
// byte_budget_metrics.cc, shm_metrics.cc) report for values owned elsewhere.
#ifndef ROPE_SERVICE_ONE_VALUE_METRIC_H_
#define ROPE_SERVICE_ONE_VALUE_METRIC_H_

#include <string>

#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace rope {

// `type` is Counter or Gauge.
prometheus::MetricFamily OneValue(std::string name, std::string help, prometheus::MetricType type,
                                  double value);

}  // namespace rope

#endif  // ROPE_SERVICE_ONE_VALUE_METRIC_H_
