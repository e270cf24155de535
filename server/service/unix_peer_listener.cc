#include "server/service/unix_peer_listener.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_posix.h"
#include "server/service/bind_diagnosis.h"
#include "server/service/unix_peers.h"

namespace rope {
namespace {

// How long the loop waits before accepting again when the process or the
// system is out of descriptors; the connections wait in the listen queue.
constexpr int kOutOfDescriptorsWaitMs = 100;
constexpr int kBacklog = 128;

absl::Status ListenError(const std::string& path, const std::string& what) {
  const std::string cause = DiagnoseUnixBind(path);
  return absl::UnavailableError(
      absl::StrCat("cannot listen on unix://", path, ": ", cause.empty() ? what : cause));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixPeerListener>> UnixPeerListener::Start(
    const std::string& path, mode_t mode, grpc::Server* server) {
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Unix socket path \"", path, "\" is ", path.size(), " bytes: too long"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  struct stat st = {};
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ListenError(path, absl::StrCat("socket: ", strerror(errno)));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    return ListenError(path, absl::StrCat("bind: ", error));
  }
  if (chmod(path.c_str(), mode) != 0 || listen(fd, kBacklog) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    unlink(path.c_str());
    return ListenError(path, absl::StrCat("its mode cannot be set or it cannot listen: ", error));
  }
  const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    close(fd);
    unlink(path.c_str());
    return ListenError(path, absl::StrCat("eventfd: ", strerror(errno)));
  }
  std::unique_ptr<UnixPeerListener> listener(new UnixPeerListener(path, fd, stop_fd, server));
  listener->thread_ = std::thread([raw = listener.get()] { raw->Run(); });
  return listener;
}

UnixPeerListener::UnixPeerListener(std::string path, int listen_fd, int stop_fd,
                                   grpc::Server* server)
    : path_(std::move(path)), listen_fd_(listen_fd), stop_fd_(stop_fd), server_(server) {}

UnixPeerListener::~UnixPeerListener() {
  Stop();
  close(listen_fd_);
  close(stop_fd_);
}

void UnixPeerListener::Stop() {
  if (stopped_.exchange(true)) return;
  const uint64_t one = 1;
  while (write(stop_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  struct stat on_disk = {};
  if (lstat(path_.c_str(), &on_disk) == 0 && S_ISSOCK(on_disk.st_mode)) unlink(path_.c_str());
}

void UnixPeerListener::Run() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  int wait_ms = -1;
  while (true) {
    fds[0].revents = fds[1].revents = 0;
    const int ready = poll(fds, 2, wait_ms);
    if (ready < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    wait_ms = -1;
    // Every connection waiting, then poll again.
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          wait_ms = kOutOfDescriptorsWaitMs;  // poll returns at once: wait, then retry
          fds[0].events = 0;
        } else {
          fds[0].events = POLLIN;
        }
        break;
      }
      fds[0].events = POLLIN;
      ucred credentials = {};
      socklen_t length = sizeof(credentials);
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
        close(fd);  // no uid, no client: it never reaches gRPC
        continue;
      }
      NoteUnixPeer(fd, credentials.uid);
      ++accepted_;
      grpc::AddInsecureChannelFromFd(server_, fd);
    }
  }
}

}  // namespace rope
