#include "server/service/bind_diagnosis.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rope {
namespace {

// The error of binding `address` the way gRPC's listener does
// (SO_REUSEADDR; SO_REUSEPORT with --reuse_port); 0 when it binds.
int ProbeBind(const addrinfo& address, bool reuse_port) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuse_port) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  const int error = bind(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  close(fd);
  return error;
}

}  // namespace

std::string DiagnoseTcpBind(const std::string& host_port, bool reuse_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  absl::string_view bare = host;
  if (absl::ConsumePrefix(&bare, "[") && absl::ConsumeSuffix(&bare, "]")) host = std::string(bare);
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::StrCat("the port \"", port, "\" is not a number in [0, 65535]");
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                                   &found);
  if (resolved != 0) {
    return absl::StrCat("the host \"", host, "\" does not resolve (", gai_strerror(resolved),
                        "): give an address of this host, e.g. 127.0.0.1 or 0.0.0.0");
  }
  std::string cause;
  for (const addrinfo* a = found; a != nullptr && cause.empty(); a = a->ai_next) {
    const int error = ProbeBind(*a, reuse_port);
    if (error == EADDRINUSE) {
      cause = absl::StrCat("port ", port, " is in use by another process (", std::strerror(error),
                           "; `ss -ltnp 'sport = :", port,
                           "'` names it): stop it, or choose another --listen port");
    } else if (error == EADDRNOTAVAIL) {
      cause = absl::StrCat(host, " is not an address of this host (", std::strerror(error),
                           "): listen on one of its addresses, or 0.0.0.0 for all");
    } else if (error == EACCES) {
      cause = absl::StrCat("port ", port, " is below 1024 and needs root or CAP_NET_BIND_SERVICE (",
                           std::strerror(error), "): choose a port of 1024 or more");
    } else if (error != 0) {
      cause = absl::StrCat("binding it fails: ", std::strerror(error));
    }
  }
  freeaddrinfo(found);
  return cause;
}

std::string DiagnoseUnixBind(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  struct stat info = {};
  if (stat(dir.c_str(), &info) != 0) {
    return absl::StrCat("the directory ", dir, " does not exist: create it (mode 0750 or "
                        "narrower: who can enter it can reach the socket) or choose another path");
  }
  if (!S_ISDIR(info.st_mode)) return absl::StrCat(dir, " is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::StrCat("the directory ", dir, " is not writable by this user (uid ", getuid(),
                        "): choose a directory it may create files in");
  }
  if (lstat(path.c_str(), &info) == 0 && !S_ISSOCK(info.st_mode)) {
    return absl::StrCat(path, " exists and is not a socket: ropeserve replaces only a stale "
                        "socket; remove the file or choose another path");
  }
  return "";
}

}  // namespace rope
