#include "core/proto_engine/positions_conversion.h"

#include <limits>

namespace rope {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > kInt64Max / b ? kInt64Max : a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) { return a > kInt64Max - b ? kInt64Max : a + b; }

}  // namespace

PositionsRequest PositionsRequestFromProto(const v1::BuildPositionsRequest& request) {
  PositionsRequest out;
  out.hf_config_json = request.hf_config_json();
  out.input_ids.assign(request.input_ids().begin(), request.input_ids().end());
  out.attention_mask.assign(request.attention_mask().begin(), request.attention_mask().end());
  out.image_grid_thw.assign(request.image_grid_thw().begin(), request.image_grid_thw().end());
  out.video_grid_thw.assign(request.video_grid_thw().begin(), request.video_grid_thw().end());
  out.second_per_grid_ts.assign(request.second_per_grid_ts().begin(),
                                request.second_per_grid_ts().end());
  out.batch = request.batch();
  out.rope_deltas.assign(request.rope_deltas().begin(), request.rope_deltas().end());
  out.cache_position = request.cache_position();
  // Same numbering; the engine refuses values outside it.
  out.layout = static_cast<PositionsRequest::Layout>(request.rope_index_layout());
  for (const v1::PositionGrid& grid : request.grids()) {
    PositionGrid g;
    g.size.assign(grid.size().begin(), grid.size().end());
    g.start.assign(grid.start().begin(), grid.start().end());
    g.step.assign(grid.step().begin(), grid.step().end());
    g.rope_axis.assign(grid.rope_axis().begin(), grid.rope_axis().end());
    out.grids.push_back(std::move(g));
  }
  return out;
}

void BuiltPositionsToProto(const BuiltPositions& built, v1::BuildPositionsResponse* reply) {
  reply->mutable_positions()->Assign(built.positions.begin(), built.positions.end());
  reply->mutable_fractional_positions()->Assign(built.fractional_positions.begin(),
                                                built.fractional_positions.end());
  reply->mutable_rope_deltas()->Assign(built.rope_deltas.begin(), built.rope_deltas.end());
  reply->set_axes(static_cast<uint32_t>(built.axes));
}

int64_t RequestedPositionValues(const v1::BuildPositionsRequest& request) {
  int64_t values = SaturatingMul(request.input_ids_size(), 3);
  for (const v1::PositionGrid& grid : request.grids()) {
    int64_t tokens = 1;
    for (int64_t d : grid.size()) tokens = SaturatingMul(tokens, d);
    values = SaturatingAdd(values, SaturatingMul(tokens, grid.size_size()));
  }
  return values;
}

int64_t BuildPositionsReplyBytes(const v1::BuildPositionsRequest& request) {
  // rope_deltas: one per batch row, at most one per token.
  return SaturatingAdd(SaturatingMul(RequestedPositionValues(request), 10),
                       SaturatingMul(request.input_ids_size(), 10));
}

}  // namespace rope
