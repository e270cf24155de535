#include "server/service/refusal_log.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rope {

RefusalLog::RefusalLog(absl::Duration interval)
    : RefusalLog(
          interval,
          [](const std::string& line) { std::fprintf(stderr, "ropeserve: %s\n", line.c_str()); },
          [] { return absl::Now(); }) {}

RefusalLog::RefusalLog(absl::Duration interval, Sink sink, Clock clock)
    : interval_(interval), sink_(std::move(sink)), clock_(std::move(clock)) {}

void RefusalLog::Note(absl::string_view kind, absl::string_view reason) {
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    auto it = kinds_.find(kind);
    if (it == kinds_.end()) it = kinds_.emplace(std::string(kind), Kind{}).first;
    Kind& k = it->second;
    const absl::Time now = clock_();
    if (now - k.last_written < interval_) {
      ++k.left_out;
      return;
    }
    line = absl::StrCat("refused a call: ", kind, ": ", reason);
    if (k.left_out > 0) {
      absl::StrAppend(&line, " (and ", k.left_out, " more of this kind since ",
                      absl::FormatDuration(absl::Trunc(now - k.last_written, absl::Seconds(1))),
                      " ago, not logged)");
    }
    k.last_written = now;
    k.left_out = 0;
  }
  sink_(line);  // outside the lock: stderr may block
}

}  // namespace rope
