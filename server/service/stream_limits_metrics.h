// The Prometheus view of StreamLimits, read at scrape time:
//
//   rope_streams_open                  streams open now (RotateStream,
//                                      ModelStreamInfer)
//   rope_streams_idle_finished_total   streams finished by --stream_idle_timeout
//
// (Streams refused at open by --max_streams_per_client are counted in
// rope_requests_total with code RESOURCE_EXHAUSTED.) Thread-safe.
#ifndef ROPE_SERVICE_STREAM_LIMITS_METRICS_H_
#define ROPE_SERVICE_STREAM_LIMITS_METRICS_H_

#include <memory>

#include "server/service/stream_limits.h"

namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace rope {

// `limits` must outlive every scrape (unregister the collectable first).
std::shared_ptr<prometheus::Collectable> NewStreamLimitsCollector(const StreamLimits* limits);

}  // namespace rope

#endif  // ROPE_SERVICE_STREAM_LIMITS_METRICS_H_
