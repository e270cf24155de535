#include "core/engine/mrope.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rope {

const char* MropeAxisName(int axis) {
  static const char* const kNames[kMropeAxes] = {"t", "h", "w"};
  return axis >= 0 && axis < kMropeAxes ? kNames[axis] : "?";
}

std::vector<uint8_t> MropeFrequencyAxes(const MropeConfig& mrope, int half) {
  std::vector<uint8_t> axes(half, 0);
  if (!mrope.enabled()) return axes;
  for (int i = 0; i < half; ++i) {
    const int64_t index = i;
    if (mrope.ernie_3d) {
      const int64_t hw = static_cast<int64_t>(mrope.section[1]) + mrope.section[2];
      if (index < hw) axes[i] = i % 2 == 0 ? 1 : 2;
    } else if (mrope.interleaved) {
      if (i % 3 == 1 && index < 3 * static_cast<int64_t>(mrope.section[1])) {
        axes[i] = 1;
      } else if (i % 3 == 2 && index < 3 * static_cast<int64_t>(mrope.section[2])) {
        axes[i] = 2;
      }
    } else if (index >= static_cast<int64_t>(mrope.section[0]) + mrope.section[1]) {
      axes[i] = 2;
    } else if (index >= static_cast<int64_t>(mrope.section[0])) {
      axes[i] = 1;
    }
  }
  return axes;
}

absl::Status ValidateMrope(const MropeConfig& mrope, uint32_t rotary_dim) {
  if (!mrope.enabled()) return absl::OkStatus();
  const std::string values = absl::StrCat("[", absl::StrJoin(mrope.section, ","), "]");
  if (mrope.section.size() != kMropeAxes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.mrope.section is ", values, " (", mrope.section.size(),
        " values): must have 3, the frequencies of axes t, h and w"));
  }
  uint64_t sum = 0;
  for (uint32_t s : mrope.section) sum += s;
  if (sum != rotary_dim / 2) {
    return absl::InvalidArgumentError(absl::StrCat("config.mrope.section is ", values, " (sum ",
                                                   sum, "): must sum to rotary_dim/2 = ",
                                                   rotary_dim / 2));
  }
  if (mrope.ernie_3d) {
    if (mrope.interleaved) {
      return absl::InvalidArgumentError(
          "config.mrope.interleaved is true with Ernie's 3-D layout: the two layouts exclude "
          "each other");
    }
    if (mrope.section[1] != mrope.section[2]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.mrope.section is ", values,
          ": Ernie's 3-D layout alternates h and w frequencies, so the h and w sections must be "
          "equal"));
    }
  }
  return absl::OkStatus();
}

std::string DescribeMrope(const MropeConfig& mrope) {
  if (!mrope.enabled()) return "none";
  return absl::StrCat(mrope.ernie_3d      ? "ernie_3d"
                      : mrope.interleaved ? "interleaved"
                                          : "chunked",
                      "[",
                      absl::StrJoin(mrope.section, ","), "]");
}

}  // namespace rope
