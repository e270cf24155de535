#include "tests/support/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rope {
namespace test {
namespace {

constexpr char kListeningPrefix[] = "ropeserve listening on ";
constexpr absl::Duration kDestructorStopTimeout = absl::Seconds(10);

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Spawn(
    const std::string& binary, const std::vector<std::string>& args) {
  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed (the parent has threads).
  std::vector<std::string> words = {binary};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 for the output of ", binary, ": errno ", errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork for ", binary, ": errno ", error));
  }
  if (pid == 0) {
    // Dies with the test process, even if the test crashes: no stray servers.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copies
    dup2(fds[1], STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  return std::unique_ptr<ServerProcess>(new ServerProcess(pid, fds[0]));
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args, absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> spawned = Spawn(binary, args);
  if (!spawned.ok()) return spawned.status();
  std::unique_ptr<ServerProcess> server = *std::move(spawned);

  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const size_t at = server->output_.find(kListeningPrefix);
    if (at != std::string::npos) {
      const size_t begin = at + sizeof(kListeningPrefix) - 1;
      const size_t end = server->output_.find_first_of(" \n", begin);
      if (end != std::string::npos) {
        server->address_ = server->output_.substr(begin, end - begin);
        const size_t colon = server->address_.rfind(':');
        if (colon == std::string::npos ||
            !absl::SimpleAtoi(server->address_.substr(colon + 1), &server->port_)) {
          return absl::InternalError(absl::StrCat(binary, " printed a listening address \"",
                                                  server->address_, "\" without a port"));
        }
        return server;
      }
    }
    if (server->ReadSome(deadline - absl::Now()) == ReadResult::kEof) {
      // Output closed: the server is exiting (Stop reaps it, bounded).
      absl::StatusOr<int> code = server->Stop(absl::Seconds(10));
      return absl::InternalError(absl::StrCat(
          binary, " exited before listening (",
          code.ok() ? absl::StrCat("exit code ", *code) : code.status().ToString(),
          "); output: ", server->output_));
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(binary, " printed no '", kListeningPrefix,
                                                  "' line within ", absl::FormatDuration(timeout),
                                                  "; output: ", server->output_));
}

ServerProcess::ReadResult ServerProcess::ReadSome(absl::Duration timeout) {
  if (output_fd_ < 0) return ReadResult::kEof;
  pollfd pfd = {output_fd_, POLLIN, 0};
  const int64_t ms = absl::ToInt64Milliseconds(timeout);
  const int ready = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(ms, 0)));
  if (ready <= 0) return ReadResult::kNothing;  // or EINTR: callers check their deadline
  char buffer[4096];
  const ssize_t n = read(output_fd_, buffer, sizeof(buffer));
  if (n <= 0) {
    close(output_fd_);
    output_fd_ = -1;
    return ReadResult::kEof;
  }
  output_.append(buffer, static_cast<size_t>(n));
  return ReadResult::kData;
}

std::optional<std::string> ServerProcess::WaitForLine(absl::string_view needle,
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
    if (ReadSome(std::min(left, absl::Milliseconds(100))) == ReadResult::kEof) {
      return std::nullopt;
    }
  }
}

const std::string& ServerProcess::Output() {
  // Bounded: the pipe holds at most 64 KiB, read 4 KiB at a time.
  for (int i = 0; i < 64 && ReadSome(absl::ZeroDuration()) == ReadResult::kData; ++i) {
  }
  return output_;
}

void ServerProcess::Signal(int signal) {
  if (!reaped_) kill(pid_, signal);
}

void ServerProcess::Reaped(int wait_status) {
  reaped_ = true;
  wait_status_ = wait_status;
  // The rest of the output, up to the end (bounded: the child is gone).
  for (int i = 0; i < 1024 && ReadSome(absl::Milliseconds(100)) == ReadResult::kData; ++i) {
  }
}

std::optional<int> ServerProcess::WaitExit(absl::Duration timeout) {
  if (reaped_) return wait_status_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int wait_status = 0;
    if (waitpid(pid_, &wait_status, WNOHANG) == pid_) {
      Reaped(wait_status);
      return wait_status;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    // Keep the pipe drained so the child never blocks on a full pipe.
    if (ReadSome(absl::Milliseconds(20)) == ReadResult::kEof) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
}

absl::StatusOr<int> ServerProcess::Stop(absl::Duration timeout) {
  if (reaped_) return ExitCode(wait_status_);
  kill(pid_, SIGTERM);
  const std::optional<int> wait_status = WaitExit(timeout);
  if (wait_status.has_value()) return ExitCode(*wait_status);
  kill(pid_, SIGKILL);
  int killed_status = 0;
  waitpid(pid_, &killed_status, 0);
  Reaped(killed_status);
  return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " did not exit within ",
                                                  absl::FormatDuration(timeout),
                                                  " of SIGTERM; killed"));
}

ServerProcess::~ServerProcess() {
  if (!reaped_) (void)Stop(kDestructorStopTimeout);
  if (output_fd_ >= 0) close(output_fd_);
}

absl::StatusOr<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  absl::Status status;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    status = absl::ErrnoToStatus(errno, "bind 127.0.0.1:0");
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    status = absl::ErrnoToStatus(errno, "getsockname");
  }
  close(fd);
  if (!status.ok()) return status;
  return static_cast<int>(ntohs(address.sin_port));
}

}  // namespace test
}  // namespace rope
