#include "server/kserve/kserve_statistics.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace rope {
namespace kserve {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

ModelStatisticsTable::ModelStatisticsTable(size_t models)
    : size_(models), counters_(new Counters[models]) {}

void ModelStatisticsTable::Durations::Add(absl::Duration d) {
  count.fetch_add(1, kRelaxed);
  ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(absl::ToInt64Nanoseconds(d), 0)), kRelaxed);
}

void ModelStatisticsTable::Record(const Model& model, const InferenceRecord& record) {
  if (model.index >= size_) return;
  Counters& counters = counters_[model.index];
  if (!record.ok) {
    counters.fail.Add(record.total);
    return;
  }
  counters.last_inference_ms.store(static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())),
                                   kRelaxed);
  counters.inference_count.fetch_add(1, kRelaxed);
  counters.success.Add(record.total);
  counters.queue.Add(record.queue);
  counters.input.Add(record.input);
  counters.infer.Add(record.infer);
  counters.output.Add(record.output);
}

void ModelStatisticsTable::Fill(const Model& model, inference::ModelStatistics* out) const {
  out->set_name(model.name);
  out->set_version(kModelVersion);
  inference::InferStatistics* stats = out->mutable_inference_stats();
  stats->mutable_cache_hit();
  stats->mutable_cache_miss();
  if (model.index >= size_) return;
  const Counters& counters = counters_[model.index];
  auto set = [](const Durations& from, inference::StatisticDuration* to) {
    to->set_count(from.count.load(kRelaxed));
    to->set_ns(from.ns.load(kRelaxed));
  };
  const uint64_t inferences = counters.inference_count.load(kRelaxed);
  out->set_last_inference(counters.last_inference_ms.load(kRelaxed));
  out->set_inference_count(inferences);
  // One engine call per inference: ropeserve batches nothing.
  out->set_execution_count(inferences);
  set(counters.success, stats->mutable_success());
  set(counters.fail, stats->mutable_fail());
  set(counters.queue, stats->mutable_queue());
  set(counters.input, stats->mutable_compute_input());
  set(counters.infer, stats->mutable_compute_infer());
  set(counters.output, stats->mutable_compute_output());
  if (inferences > 0) {
    // Every inference is one request of its own shapes: batch size 1.
    inference::InferBatchStatistics* batch = out->add_batch_stats();
    batch->set_batch_size(1);
    set(counters.input, batch->mutable_compute_input());
    set(counters.infer, batch->mutable_compute_infer());
    set(counters.output, batch->mutable_compute_output());
  }
}

}  // namespace kserve
}  // namespace rope
