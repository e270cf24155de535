#include "client/load/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace rope {
namespace load {

std::string ProgressBar(double fraction, int width) {
  fraction = std::min(1.0, std::max(0.0, fraction));
  const int filled = static_cast<int>(fraction * width + 0.5);
  return absl::StrFormat("[%s%s] %3d%%", std::string(filled, '#'),
                         std::string(width - filled, '.'), static_cast<int>(fraction * 100));
}

Progress::Progress(std::FILE* stream, bool enabled)
    : stream_(stream), active_(enabled && isatty(fileno(stream)) != 0) {}

void Progress::Update(double fraction, absl::string_view label, absl::string_view status) {
  if (!active_) return;
  const absl::Time now = absl::Now();
  if (now - last_draw_ < absl::Milliseconds(100)) return;
  last_draw_ = now;
  // \r and clear-to-end-of-line redraw in place.
  const std::string line = absl::StrCat("\r", label, " ", ProgressBar(fraction, 30), "  ", status,
                                        "\x1b[K");
  std::fputs(line.c_str(), stream_);
  std::fflush(stream_);
  drawn_ = true;
}

void Progress::Clear() {
  if (!drawn_) return;
  std::fputs("\r\x1b[K", stream_);
  std::fflush(stream_);
  drawn_ = false;
}

}  // namespace load
}  // namespace rope
