// A one-line progress bar on stderr, drawn only when stderr is a terminal
// (or when forced, for tests), redrawn at most every 100 ms.
//
// Thread-compatible: one owner (the runner's main thread).
#ifndef ROPE_CLIENT_LOAD_PROGRESS_H_
#define ROPE_CLIENT_LOAD_PROGRESS_H_

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rope {
namespace load {

class Progress {
 public:
  // Draws on `stream` when `enabled` and the stream is a terminal.
  Progress(std::FILE* stream, bool enabled);
  ~Progress() { Clear(); }

  bool active() const { return active_; }
  // fraction in [0, 1]; `label` says what is running, `status` the counts.
  void Update(double fraction, absl::string_view label, absl::string_view status);
  // Erases the bar (before other output).
  void Clear();

 private:
  std::FILE* stream_;
  bool active_;
  bool drawn_ = false;
  absl::Time last_draw_ = absl::InfinitePast();
};

// "[##########..........]  50%" of width `width` (tests use it directly).
std::string ProgressBar(double fraction, int width);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_PROGRESS_H_
