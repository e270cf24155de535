// A ropeserve child process for tests: started on 127.0.0.1:0, with the
// chosen port read from its "ropeserve listening on HOST:PORT" line.
//
// Not thread-safe; one owner. The destructor stops a still-running server
// (SIGTERM, then SIGKILL after a bounded wait) so a failing test leaves no
// process behind.
#ifndef ROPE_TESTS_CLIENT_SERVER_PROCESS_H_
#define ROPE_TESTS_CLIENT_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rope {
namespace testing {

class ServerProcess {
 public:
  // Runs `binary` with `args` (which should include --listen=127.0.0.1:0)
  // and waits up to `timeout` for the listening line. DEADLINE_EXCEEDED if
  // it does not come in time, INTERNAL if the process exits first (with its
  // exit status and output in the message).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args, absl::Duration timeout);

  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // "127.0.0.1:PORT", as printed by the server.
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // Sends SIGTERM and waits up to `timeout` for the exit. Returns the exit
  // code (128 + N when killed by signal N); DEADLINE_EXCEEDED (after a
  // SIGKILL) when it did not exit in time. Calling it again returns the
  // same result.
  absl::StatusOr<int> Stop(absl::Duration timeout);

  // Everything the server has written to stdout so far.
  std::string Output();

 private:
  ServerProcess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  enum class ReadResult { kData, kNothing, kEof };
  // Appends to output_ what stdout has within `timeout`.
  ReadResult ReadSome(absl::Duration timeout);

  pid_t pid_;
  int stdout_fd_;
  std::string output_;
  std::string address_;
  bool exited_ = false;
  int exit_code_ = -1;
};

}  // namespace testing
}  // namespace rope

#endif  // ROPE_TESTS_CLIENT_SERVER_PROCESS_H_
