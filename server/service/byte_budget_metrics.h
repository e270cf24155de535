// The Prometheus view of the ByteBudget, read at scrape time:
//
//   rope_inflight_budget_bytes        the budget (--max_inflight_bytes; 0: none)
//   rope_inflight_bytes               request and reply bytes charged now
//   rope_inflight_waiters             calls waiting for room now
//   rope_inflight_refusals_total      calls refused RESOURCE_EXHAUSTED by it
//
// Thread-safe.
#ifndef ROPE_SERVICE_BYTE_BUDGET_METRICS_H_
#define ROPE_SERVICE_BYTE_BUDGET_METRICS_H_

#include <memory>

#include "server/service/byte_budget.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace rope {

// `budget` must outlive every scrape (unregister the collectable first).
std::shared_ptr<prometheus::Collectable> NewByteBudgetCollector(const ByteBudget* budget);

}  // namespace rope

#endif  // ROPE_SERVICE_BYTE_BUDGET_METRICS_H_
