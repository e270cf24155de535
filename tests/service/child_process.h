// ChildProcess: runs a binary (ropeserve) as a child for tests, with its
// stdout and stderr merged into one pipe the test reads. Every wait is bounded.
#ifndef ROPE_TESTS_SERVICE_CHILD_PROCESS_H_
#define ROPE_TESTS_SERVICE_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rope {
namespace test {

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& path,
                                                             const std::vector<std::string>& args);
  // Kills (SIGKILL) and reaps the child if it is still running.
  ~ChildProcess();

  // Reads output until a line containing `needle` is complete; returns that
  // line, or nullopt at end of output or after `timeout`.
  std::optional<std::string> WaitForLine(absl::string_view needle, absl::Duration timeout);
  // Everything read so far.
  const std::string& output() const { return output_; }

  void Signal(int signal);
  // The child's wait status (see WIFEXITED), or nullopt after `timeout`.
  // Reads (and keeps) its remaining output meanwhile.
  std::optional<int> WaitExit(absl::Duration timeout);

 private:
  ChildProcess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}
  // Appends what the pipe has within `timeout`; false at end of output.
  bool ReadSome(absl::Duration timeout);

  pid_t pid_;
  int output_fd_;
  bool reaped_ = false;
  bool eof_ = false;
  std::string output_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, close).
int PickFreePort();

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SERVICE_CHILD_PROCESS_H_
