#include "client/load/load_spec.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rope {
namespace load {
namespace {

absl::Status RangeError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("range '", text, "': ", why,
                                                 " (expected a:b:step, a:b:xN, a:b or a)"));
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseRange(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.empty() || parts.size() > 3) return RangeError(text, "wrong number of ':' parts");
  double start = 0;
  if (!absl::SimpleAtod(parts[0], &start) || !(start > 0)) {
    return RangeError(text, "start must be a number > 0");
  }
  double end = start;
  if (parts.size() >= 2 && (!absl::SimpleAtod(parts[1], &end) || !(end >= start))) {
    return RangeError(text, "end must be a number >= start");
  }
  bool multiply = false;
  double step = 1;
  if (parts.size() == 3) {
    absl::string_view s = parts[2];
    multiply = absl::ConsumePrefix(&s, "x");
    if (!absl::SimpleAtod(s, &step) || !std::isfinite(step) ||
        !(multiply ? step > 1 : step > 0)) {
      return RangeError(text, multiply ? "factor N of xN must be > 1" : "step must be > 0");
    }
  }
  std::vector<double> values;
  // A relative slack so that 0.1:0.3:0.1 includes 0.3 despite rounding.
  const double limit = end * (1 + 1e-9);
  for (double v = start; v <= limit; v = multiply ? v * step : v + step) {
    if (static_cast<int>(values.size()) == kMaxSweepSteps) {
      return RangeError(text, absl::StrCat("more than ", kMaxSweepSteps, " steps"));
    }
    values.push_back(v);
  }
  return values;
}

}  // namespace load
}  // namespace rope
