#include "server/kserve/kserve_statistics.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace rope {
namespace kserve {
namespace {

void SetDuration(uint64_t count, uint64_t ns, inference::StatisticDuration* out) {
  out->set_count(count);
  out->set_ns(ns);
}

}  // namespace

void ModelStatisticsTable::Durations::Add(absl::Duration d) {
  ++count;
  ns += static_cast<uint64_t>(std::max<int64_t>(absl::ToInt64Nanoseconds(d), 0));
}

void ModelStatisticsTable::Record(const Model& model, const InferenceRecord& record) {
  absl::MutexLock lock(&mu_);
  Counters& counters = by_model_[model.name];
  if (!record.ok) {
    counters.fail.Add(record.total);
    return;
  }
  counters.last_inference_ms = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  ++counters.inference_count;
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
  absl::MutexLock lock(&mu_);
  auto it = by_model_.find(model.name);
  const Counters counters = it == by_model_.end() ? Counters{} : it->second;
  out->set_last_inference(counters.last_inference_ms);
  out->set_inference_count(counters.inference_count);
  // One engine call per inference: ropeserve batches nothing.
  out->set_execution_count(counters.inference_count);
  SetDuration(counters.success.count, counters.success.ns, stats->mutable_success());
  SetDuration(counters.fail.count, counters.fail.ns, stats->mutable_fail());
  SetDuration(counters.queue.count, counters.queue.ns, stats->mutable_queue());
  SetDuration(counters.input.count, counters.input.ns, stats->mutable_compute_input());
  SetDuration(counters.infer.count, counters.infer.ns, stats->mutable_compute_infer());
  SetDuration(counters.output.count, counters.output.ns, stats->mutable_compute_output());
  stats->mutable_cache_hit();
  stats->mutable_cache_miss();
  if (counters.inference_count > 0) {
    // Every inference is one request of its own shapes: batch size 1.
    inference::InferBatchStatistics* batch = out->add_batch_stats();
    batch->set_batch_size(1);
    SetDuration(counters.input.count, counters.input.ns, batch->mutable_compute_input());
    SetDuration(counters.infer.count, counters.infer.ns, batch->mutable_compute_infer());
    SetDuration(counters.output.count, counters.output.ns, batch->mutable_compute_output());
  }
}

}  // namespace kserve
}  // namespace rope
