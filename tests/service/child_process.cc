#include "tests/service/child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rope {
namespace test {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& path, const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed (the parent has threads).
  std::vector<std::string> storage = {path};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork failed: errno ", errno));
  }
  if (pid == 0) {
    // Dies with the test process, even if the test crashes: no stray servers.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, fds[0]));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  close(output_fd_);
}

bool ChildProcess::ReadSome(absl::Duration timeout) {
  if (eof_) return false;
  pollfd pfd = {output_fd_, POLLIN, 0};
  const int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (ready <= 0) return true;  // nothing yet (or EINTR): not the end
  char buffer[4096];
  const ssize_t n = read(output_fd_, buffer, sizeof(buffer));
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  output_.append(buffer, n);
  return true;
}

std::optional<std::string> ChildProcess::WaitForLine(absl::string_view needle,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const size_t at = output_.find(needle.data(), 0, needle.size());
    if (at != std::string::npos) {
      const size_t end = output_.find('\n', at);
      if (end != std::string::npos) {
        const size_t begin = output_.rfind('\n', at);
        const size_t from = begin == std::string::npos ? 0 : begin + 1;
        return output_.substr(from, end - from);
      }
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    if (!ReadSome(std::min(left, absl::Milliseconds(100)))) return std::nullopt;
  }
}

void ChildProcess::Signal(int signal) {
  if (!reaped_) kill(pid_, signal);
}

std::optional<int> ChildProcess::WaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      while (ReadSome(absl::Milliseconds(100))) {
      }
      return status;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    ReadSome(absl::Milliseconds(10));
    if (eof_) absl::SleepFor(absl::Milliseconds(10));
  }
}

int PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace test
}  // namespace rope
