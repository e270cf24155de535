#include "client/flags/summary.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/tensor_util.h"
#include "common/status_macros.h"

namespace rope {
namespace client {

std::string ShapeAndDType(const v1::Tensor& tensor) {
  return absl::StrCat(DTypeName(tensor.dtype()), " [", absl::StrJoin(tensor.shape(), ","), "]");
}

absl::StatusOr<std::string> SummarizeTensor(const v1::Tensor& tensor, absl::string_view what,
                                            int first_n) {
  ROPE_ASSIGN_OR_RETURN(std::vector<float> values, TensorToFloats(tensor, what));
  const TensorStats stats = ComputeStats(values);
  std::string out = absl::StrFormat("%s  min=%.6g max=%.6g mean=%.6g", ShapeAndDType(tensor),
                                    stats.min, stats.max, stats.mean);
  if (stats.non_finite > 0) absl::StrAppend(&out, " non_finite=", stats.non_finite);
  const size_t shown = std::min(values.size(), static_cast<size_t>(std::max(first_n, 0)));
  std::vector<std::string> items;
  for (size_t i = 0; i < shown; ++i) items.push_back(absl::StrFormat("%.6g", values[i]));
  if (shown < values.size()) items.push_back("...");
  absl::StrAppend(&out, "  first=[", absl::StrJoin(items, ", "), "]");
  return out;
}

std::string FormatMillis(absl::Duration d) {
  return absl::StrFormat("%.3f ms", absl::ToDoubleMilliseconds(d));
}

}  // namespace client
}  // namespace rope
