// ServerProcess: the one C++ way for a test to run the built ropeserve (or any
// binary) as a child process. Start() binds 127.0.0.1:0 by the arguments the
// test gives and reads the chosen address from the server's
// "ropeserve listening on HOST:PORT" line; Spawn() runs a command the test
// expects to exit on its own (--help, bad flags). The child's stdout and
// stderr are merged into one pipe the test reads. Every wait is bounded, and
// the child dies with the test process (PR_SET_PDEATHSIG), so a crashed test
// leaves no server behind. The Python twin is
// tests/support/python/ropeserve_process.py.
//
// Not thread-safe; one owner. The destructor stops a still-running child
// (SIGTERM, then SIGKILL after a bounded wait).
#ifndef ROPE_TESTS_SUPPORT_SERVER_PROCESS_H_
#define ROPE_TESTS_SUPPORT_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rope {
namespace test {

class ServerProcess {
 public:
  // Runs `binary` with `args` (which should include --listen=127.0.0.1:0)
  // and waits up to `timeout` for the listening line. DEADLINE_EXCEEDED if
  // it does not come in time, INTERNAL if the process exits first (with its
  // exit status and output in the message).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      absl::Duration timeout = absl::Seconds(30));

  // Runs `binary` with `args` and returns at once; address() stays empty.
  // INTERNAL when the pipe or the fork fails.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Spawn(const std::string& binary,
                                                              const std::vector<std::string>& args);

  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // "127.0.0.1:PORT" as printed by the server, and its port (Start only).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Reads output until a line containing `needle` is complete; returns that
  // line, or nullopt at the end of the output or after `timeout`.
  std::optional<std::string> WaitForLine(absl::string_view needle, absl::Duration timeout);

  // Sends `signal` unless the child has been reaped.
  void Signal(int signal);

  // Waits up to `timeout` for the child to exit and returns its wait status
  // (see WIFEXITED), or nullopt. Reads (and keeps) its output meanwhile.
  std::optional<int> WaitExit(absl::Duration timeout);

  // Sends SIGTERM and waits up to `timeout` for the exit. Returns the exit
  // code (128 + N when killed by signal N); DEADLINE_EXCEEDED (after a
  // SIGKILL) when it did not exit in time. Calling it again returns the
  // same result.
  absl::StatusOr<int> Stop(absl::Duration timeout);

  // Everything the child has written so far (reads what is pending first).
  const std::string& Output();

 private:
  ServerProcess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}
  enum class ReadResult { kData, kNothing, kEof };
  // Appends to output_ what the pipe has within `timeout`.
  ReadResult ReadSome(absl::Duration timeout);
  // Records the exit of the child from its wait status.
  void Reaped(int wait_status);

  const pid_t pid_;
  int output_fd_;
  std::string output_;
  std::string address_;
  int port_ = 0;
  bool reaped_ = false;
  int wait_status_ = 0;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read
// back, closed), for a server's metrics or health listener. Another process
// may take it before the server binds it: callers retry a failed start.
absl::StatusOr<int> PickFreePort();

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SUPPORT_SERVER_PROCESS_H_
