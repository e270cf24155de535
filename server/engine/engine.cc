#include "server/engine/engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/validation.h"

namespace rope {

Engine::Engine(std::unique_ptr<Backend> backend, EngineLimits limits)
    : backend_(std::move(backend)),
      limits_(limits),
      cache_(limits.table_cache_bytes, [b = backend_.get()](const TableKey& key) {
        return RopeTable::Build(key, [b](int64_t rows, const auto& fill) {
          b->ParallelRows(rows, fill);
        });
      }) {}

namespace {

// Largest position a validated PositionSpec produces.
int64_t MaxPosition(const math::PositionSpec& positions) {
  if (positions.count == 0) return positions.start_pos + positions.seq - 1;
  int64_t max_pos = 0;
  for (int64_t i = 0; i < positions.count; ++i) {
    max_pos = std::max(max_pos, positions.explicit_positions[i]);
  }
  return max_pos;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const RopeTable>> Engine::TableFor(const RopeConfig& config,
                                                                 int64_t max_position) {
  return cache_.Get(MakeTableKey(config, max_position));
}

absl::Status Engine::Rotate(const RotateParams& params) {
  ROPE_ASSIGN_OR_RETURN(const RotateArgs args, ResolveRotate(params, limits_));
  ROPE_ASSIGN_OR_RETURN(const std::shared_ptr<const RopeTable> table,
                        TableFor(params.config, MaxPosition(args.positions)));
  return backend_->Rotate(*table, args);
}

absl::Status Engine::AttentionScores(const AttentionParams& params, AttentionOutputs* outputs) {
  if (outputs == nullptr || outputs->scores == nullptr) {
    return absl::InvalidArgumentError("AttentionScores needs an outputs.scores buffer");
  }
  ROPE_ASSIGN_OR_RETURN(ResolvedAttention resolved, ResolveAttention(params, limits_));
  if (resolved.args.v != nullptr && outputs->output == nullptr) {
    return absl::InvalidArgumentError("v is given but outputs.output is null");
  }
  AttentionArgs& args = resolved.args;
  args.interrupt = params.interrupt;
  ROPE_ASSIGN_OR_RETURN(const std::shared_ptr<const RopeTable> table,
                        TableFor(params.config, std::max(MaxPosition(args.q_positions),
                                                         MaxPosition(args.k_positions))));

  int64_t score_elements = 1;
  for (int64_t d : resolved.scores_shape) score_elements *= d;
  outputs->scores->resize(score_elements * sizeof(float));
  args.scores = reinterpret_cast<float*>(outputs->scores->data());
  outputs->scores_shape = resolved.scores_shape;
  if (args.v != nullptr) {
    int64_t output_elements = 1;
    for (int64_t d : resolved.output_shape) output_elements *= d;
    outputs->output->resize(output_elements * sizeof(float));
    args.output = reinterpret_cast<float*>(outputs->output->data());
    outputs->output_shape = resolved.output_shape;
  }
  return backend_->AttentionScores(*table, args);
}

absl::StatusOr<TableSlice> Engine::GetTable(const RopeConfig& config, int64_t start,
                                           int64_t count) {
  ROPE_RETURN_IF_ERROR(ValidateConfig(config, limits_.max_len_cap));
  const int64_t max_len = config.max_len;
  if (start < 0) {
    return absl::InvalidArgumentError(absl::StrCat("start is ", start, ": must be >= 0"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count is ", count, ": must be >= 0 (0 means to the end of the table)"));
  }
  if (start >= max_len) {
    return absl::OutOfRangeError(
        absl::StrCat("start is ", start, ": must be < config.max_len ", max_len));
  }
  if (count == 0) count = max_len - start;
  if (count > max_len - start) {
    return absl::OutOfRangeError(absl::StrCat("start ", start, " + count ", count,
                                              " is past config.max_len ", max_len));
  }
  const int64_t half = config.EffectiveRotaryDim() / 2;
  if (count * half * 2 > limits_.max_elements_per_request) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table slice of ", count, " rows x ", half, " x 2 values: over the "
        "max_elements_per_request limit of ", limits_.max_elements_per_request));
  }
  ROPE_ASSIGN_OR_RETURN(std::shared_ptr<const RopeTable> table,
                        TableFor(config, start + count - 1));
  TableSlice slice;
  slice.table = std::move(table);
  slice.start = start;
  slice.count = count;
  return slice;
}

}  // namespace rope
