// Per-model inference statistics (ModelStatistics), kept by the KServe
// service for every ModelInfer and every message of ModelStreamInfer.
//
// Thread-safe and lock-free: relaxed atomic counters per model (Model::index),
// so recording costs every call a handful of additions. A reader may see
// one call's counters half added; each counter is exact once calls stop.
#ifndef ROPE_SERVER_KSERVE_KSERVE_STATISTICS_H_
#define ROPE_SERVER_KSERVE_KSERVE_STATISTICS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve/kserve_models.h"

namespace rope {
namespace kserve {

// Where one inference's time went.
struct InferenceRecord {
  bool ok = false;
  absl::Duration total;   // admission to answer
  absl::Duration queue;   // waiting for bytes in flight and a work thread
  absl::Duration input;   // the ModelInfer -> rope.v1 conversion
  absl::Duration infer;   // the rope.v1 entry (engine)
  absl::Duration output;  // the response's tensors
};

class ModelStatisticsTable {
 public:
  // For models with Model::index < `models`.
  explicit ModelStatisticsTable(size_t models);

  void Record(const Model& model, const InferenceRecord& record);

  // `model`'s statistics so far (zeros before its first inference).
  void Fill(const Model& model, inference::ModelStatistics* out) const;

 private:
  struct Durations {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> ns{0};
    void Add(absl::Duration d);
  };
  struct Counters {
    std::atomic<uint64_t> last_inference_ms{0};
    std::atomic<uint64_t> inference_count{0};
    Durations success, fail, queue, input, infer, output;
  };

  const size_t size_;
  const std::unique_ptr<Counters[]> counters_;
};

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_STATISTICS_H_
