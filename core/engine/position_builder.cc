#include "core/engine/position_builder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/engine/axial.h"
#include "core/engine/qwen_rope_index.h"

namespace rope {
namespace {

// Integers up to 2^53 are exact in a double; positions beyond are refused
// by every config (max_len <= 2^32) anyway.
constexpr double kExactIntegerLimit = 9007199254740992.0;

std::string GridField(size_t g, const char* field) {
  return absl::StrCat("grids[", g, "].", field);
}

// A grid's parameters with defaults filled in, checked.
struct CheckedGrid {
  std::vector<int64_t> size;
  std::vector<double> start, step;
  std::vector<uint32_t> rope_axis;
  int64_t tokens = 1;
};

absl::StatusOr<CheckedGrid> CheckGrid(const PositionGrid& grid, size_t g, int64_t max_tokens) {
  CheckedGrid out;
  const size_t rank = grid.size.size();
  if (rank == 0 || rank > static_cast<size_t>(kMaxAxialAxes)) {
    return absl::InvalidArgumentError(absl::StrCat(GridField(g, "size"), " has ", rank,
                                                   " dimensions: must have 1 to ",
                                                   kMaxAxialAxes));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (grid.size[d] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(GridField(g, "size"), "[", d, "] is ",
                                                     grid.size[d], ": must be >= 1"));
    }
    if (grid.size[d] > max_tokens || out.tokens > max_tokens / grid.size[d]) {
      return absl::ResourceExhaustedError(absl::StrCat(
          GridField(g, "size"), " [", absl::StrJoin(grid.size, ","), "] has more than ",
          max_tokens, " tokens: over the limit on the positions of one call"));
    }
    out.tokens *= grid.size[d];
  }
  out.size = grid.size;
  for (const auto& [name, given, fill, target] :
       {std::tuple<const char*, const std::vector<double>*, double, std::vector<double>*>{
            "start", &grid.start, 0.0, &out.start},
        std::tuple<const char*, const std::vector<double>*, double, std::vector<double>*>{
            "step", &grid.step, 1.0, &out.step}}) {
    if (given->empty()) {
      target->assign(rank, fill);
      continue;
    }
    if (given->size() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(GridField(g, name), " has ", given->size(),
                                                     " values: must be empty or one per "
                                                     "dimension of size (", rank, ")"));
    }
    for (size_t d = 0; d < rank; ++d) {
      if (!std::isfinite((*given)[d])) {
        return absl::InvalidArgumentError(absl::StrCat(GridField(g, name), "[", d, "] is ",
                                                       (*given)[d], ": must be finite"));
      }
    }
    *target = *given;
  }
  if (grid.rope_axis.empty()) {
    for (size_t d = 0; d < rank; ++d) out.rope_axis.push_back(static_cast<uint32_t>(d));
  } else {
    std::vector<bool> seen(rank, false);
    bool permutation = grid.rope_axis.size() == rank;
    for (uint32_t a : grid.rope_axis) {
      if (!permutation || a >= rank || seen[a]) {
        permutation = false;
        break;
      }
      seen[a] = true;
    }
    if (!permutation) {
      return absl::InvalidArgumentError(absl::StrCat(
          GridField(g, "rope_axis"), " is [", absl::StrJoin(grid.rope_axis, ","),
          "]: must be empty or a permutation of 0 .. ", rank - 1,
          " (the RoPE axis of each dimension of size)"));
    }
    out.rope_axis = grid.rope_axis;
  }
  return out;
}

absl::StatusOr<BuiltPositions> GridPositions(const std::vector<PositionGrid>& grids,
                                             int64_t max_values) {
  std::vector<CheckedGrid> checked;
  int64_t tokens = 0;
  const size_t rank = grids.front().size.size();
  const int64_t max_tokens = rank == 0 ? max_values : max_values / static_cast<int64_t>(rank);
  for (size_t g = 0; g < grids.size(); ++g) {
    if (grids[g].size.size() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          GridField(g, "size"), " has ", grids[g].size.size(), " dimensions: every grid must "
          "have as many as grids[0] (", rank, "), one per RoPE axis"));
    }
    ROPE_ASSIGN_OR_RETURN(CheckedGrid grid, CheckGrid(grids[g], g, max_tokens));
    if (grid.tokens > max_tokens - tokens) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "grids hold more than ", max_tokens, " tokens (", max_values,
          " position values): over the limit on the positions of one call"));
    }
    tokens += grid.tokens;
    checked.push_back(std::move(grid));
  }
  BuiltPositions out;
  out.axes = static_cast<int>(rank);
  out.rows = tokens;
  std::vector<double> values(rank * tokens);
  bool integral = true;
  int64_t row = 0;
  std::vector<int64_t> index(rank);
  for (const CheckedGrid& grid : checked) {
    std::fill(index.begin(), index.end(), 0);
    for (int64_t t = 0; t < grid.tokens; ++t, ++row) {
      for (size_t d = 0; d < rank; ++d) {
        const double p = grid.start[d] + static_cast<double>(index[d]) * grid.step[d];
        values[grid.rope_axis[d] * tokens + row] = p;
        integral = integral && std::isfinite(p) && std::floor(p) == p &&
                   std::fabs(p) < kExactIntegerLimit;
      }
      // Row-major: the last dimension fastest.
      for (size_t d = rank; d-- > 0;) {
        if (++index[d] < grid.size[d]) break;
        index[d] = 0;
      }
    }
  }
  for (double p : values) {
    if (!std::isfinite(p)) {
      return absl::InvalidArgumentError(
          "grids: start + k * step overflows a double for some token: send smaller values");
    }
  }
  if (integral) {
    out.positions.assign(values.begin(), values.end());
  } else {
    out.fractional_positions = std::move(values);
  }
  return out;
}

}  // namespace

absl::StatusOr<BuiltPositions> BuildPositions(const PositionsRequest& request,
                                              int64_t max_values, const Interrupt* interrupt) {
  const bool qwen_form = !request.input_ids.empty() || !request.image_grid_thw.empty() ||
                         !request.video_grid_thw.empty() || !request.rope_deltas.empty();
  if (!request.grids.empty()) {
    if (qwen_form) {
      return absl::InvalidArgumentError(
          "grids and input_ids (or image_grid_thw, video_grid_thw, rope_deltas) are both set: "
          "give the grids of an axial model or the token sequence of a Qwen2-VL-family model");
    }
    return GridPositions(request.grids, max_values);
  }
  if (!qwen_form) {
    return absl::InvalidArgumentError(
        "no positions to build: give input_ids (and the image and video grids) of a "
        "Qwen2-VL-family model, or grids of an axial model");
  }
  return QwenRopeIndex(request, max_values, interrupt);
}

}  // namespace rope
