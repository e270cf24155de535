#include "tests/client/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rope {
namespace testing {
namespace {

constexpr char kListeningPrefix[] = "ropeserve listening on ";

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args, absl::Duration timeout) {
  // argv is built before fork: the child may only exec.
  std::vector<std::string> words = {binary};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(&w[0]);
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "pipe2 for the server's stdout");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::ErrnoToStatus(errno, "fork");
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<ServerProcess> server(new ServerProcess(pid, fds[0]));

  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const size_t at = server->output_.find(kListeningPrefix);
    if (at != std::string::npos) {
      const size_t begin = at + sizeof(kListeningPrefix) - 1;
      const size_t end = server->output_.find_first_of(" \n", begin);
      if (end != std::string::npos) {
        server->address_ = server->output_.substr(begin, end - begin);
        return server;
      }
    }
    if (server->ReadSome(deadline - absl::Now()) == ReadResult::kEof) {
      // stdout closed: the server is exiting (Stop reaps it, bounded).
      absl::StatusOr<int> code = server->Stop(absl::Seconds(10));
      return absl::InternalError(absl::StrCat(
          binary, " exited before listening (",
          code.ok() ? absl::StrCat("exit code ", *code) : code.status().ToString(),
          "); stdout: ", server->output_));
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(
      binary, " printed no '", kListeningPrefix, "' line within ",
      absl::FormatDuration(timeout), "; stdout: ", server->output_));
}

ServerProcess::ReadResult ServerProcess::ReadSome(absl::Duration timeout) {
  if (stdout_fd_ < 0) return ReadResult::kEof;
  pollfd pfd = {stdout_fd_, POLLIN, 0};
  const int64_t ms = absl::ToInt64Milliseconds(timeout);
  const int ready = poll(&pfd, 1, static_cast<int>(ms < 0 ? 0 : ms));
  if (ready <= 0) return ReadResult::kNothing;  // or EINTR: callers check their deadline
  char buffer[4096];
  const ssize_t n = read(stdout_fd_, buffer, sizeof(buffer));
  if (n <= 0) return ReadResult::kEof;
  output_.append(buffer, static_cast<size_t>(n));
  return ReadResult::kData;
}

std::string ServerProcess::Output() {
  // Bounded: the pipe holds at most 64 KiB, read 4 KiB at a time.
  for (int i = 0; i < 64 && ReadSome(absl::ZeroDuration()) == ReadResult::kData; ++i) {
  }
  return output_;
}

absl::StatusOr<int> ServerProcess::Stop(absl::Duration timeout) {
  if (exited_) return exit_code_;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int wait_status = 0;
    const pid_t done = waitpid(pid_, &wait_status, WNOHANG);
    if (done == pid_) {
      exited_ = true;
      exit_code_ = ExitCode(wait_status);
      Output();  // collect the last lines
      return exit_code_;
    }
    if (absl::Now() >= deadline) break;
    // Keep the pipe drained so the server never blocks on a full stdout.
    if (ReadSome(absl::Milliseconds(20)) == ReadResult::kEof) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  kill(pid_, SIGKILL);
  int wait_status = 0;
  waitpid(pid_, &wait_status, 0);
  exited_ = true;
  exit_code_ = ExitCode(wait_status);
  return absl::DeadlineExceededError(absl::StrCat("server pid ", pid_, " did not exit within ",
                                                  absl::FormatDuration(timeout),
                                                  " of SIGTERM; killed"));
}

ServerProcess::~ServerProcess() {
  if (!exited_) (void)Stop(absl::Seconds(30));
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

}  // namespace testing
}  // namespace rope
