// Prometheus gauges of the shared-memory registry: regions, mapped bytes and
// the limits (--shm_max_regions_per_client, --shm_max_mapped_bytes).
#ifndef ROPE_SERVICE_SHM_METRICS_H_
#define ROPE_SERVICE_SHM_METRICS_H_

#include <memory>

#include "core/proto_engine/shm_registry.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace rope {

// `registry` must outlive the collector's registration.
std::shared_ptr<prometheus::Collectable> NewShmStateCollector(const ShmRegistry* registry);

}  // namespace rope

#endif  // ROPE_SERVICE_SHM_METRICS_H_
