#include "tests/support/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace rope {
namespace test {
namespace {

// Closes the descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in Loopback(int port) {
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status WaitFor(int fd, short events, absl::Time deadline, absl::string_view what) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    pollfd pfd = {fd, events, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(ms));
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, what);
  }
}

}  // namespace

absl::StatusOr<std::string> HttpGetResponse(int port, absl::string_view path,
                                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string where = absl::StrCat("GET http://127.0.0.1:", port, path);
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_in address = Loopback(port);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno != EINPROGRESS) return absl::UnavailableError(absl::StrCat(where, ": connect"));
    absl::Status ready = WaitFor(fd.get(), POLLOUT, deadline, where);
    if (!ready.ok()) return ready;
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      return absl::UnavailableError(absl::StrCat(where, ": connect: errno ", error));
    }
  }

  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    absl::Status ready = WaitFor(fd.get(), POLLOUT, deadline, where);
    if (!ready.ok()) return ready;
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return absl::ErrnoToStatus(errno, where);
    if (n > 0) sent += static_cast<size_t>(n);
  }

  // Bounded by the deadline and by a size cap (a /metrics page is a few KiB).
  constexpr size_t kMaxResponse = 8 << 20;
  std::string response;
  char buffer[16384];
  while (true) {
    absl::Status ready = WaitFor(fd.get(), POLLIN, deadline, where);
    if (!ready.ok()) return ready;
    const ssize_t n = recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, where);
    }
    response.append(buffer, static_cast<size_t>(n));
    if (response.size() > kMaxResponse) {
      return absl::InternalError(absl::StrCat(where, ": response over ", kMaxResponse, " bytes"));
    }
  }
  return response;
}

absl::StatusOr<std::string> HttpGet(int port, absl::string_view path, absl::Duration timeout) {
  absl::StatusOr<std::string> response = HttpGetResponse(port, path, timeout);
  if (!response.ok()) return response.status();
  const size_t body = response->find("\r\n\r\n");
  const std::string status_line = response->substr(0, response->find("\r\n"));
  if (body == std::string::npos || !absl::StrContains(status_line, " 200")) {
    return absl::InternalError(absl::StrCat("GET http://127.0.0.1:", port, path,
                                            ": status line \"", status_line, "\""));
  }
  return response->substr(body + 4);
}

absl::StatusOr<double> SampleValue(absl::string_view exposition, absl::string_view name,
                                   const std::map<std::string, std::string>& labels) {
  const std::string prefix = absl::StrCat(name, "{");
  double value = 0;
  int found = 0;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    const size_t close = line.rfind('}');
    if (close == absl::string_view::npos) continue;
    // Label values here hold no commas or quotes: split on ',' then '='.
    std::map<std::string, std::string> present;
    for (absl::string_view pair :
         absl::StrSplit(line.substr(prefix.size(), close - prefix.size()), ',',
                        absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(pair, '=');
      present[std::string(kv.first)] = std::string(absl::StripPrefix(
          absl::StripSuffix(kv.second, "\""), "\""));
    }
    bool all = true;
    for (const auto& [key, wanted] : labels) {
      auto it = present.find(key);
      all = all && it != present.end() && it->second == wanted;
    }
    if (!all) continue;
    const absl::string_view number = absl::StripAsciiWhitespace(line.substr(close + 1));
    if (!absl::SimpleAtod(number, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", line, ": value \"", number, "\" is not a number"));
    }
    ++found;
  }
  if (found > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(found, " samples of ", name, " match the labels; expected one"));
  }
  return found == 1 ? value : 0.0;
}

}  // namespace test
}  // namespace rope
