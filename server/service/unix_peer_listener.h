// A Unix-socket listener that knows who connected: it binds the socket
// (mode `mode`), accepts each connection itself, notes the peer's uid
// (SO_PEERCRED; unix_peers.h) and hands the connection to the gRPC server
// (grpc::AddInsecureChannelFromFd), whose calls on it are then told apart
// by uid (caller_identity.h). Only for servers without TLS: a connection
// handed over this way skips gRPC's handshake and its credentials.
//
// The accept loop survives EMFILE/ENFILE (it waits and accepts again,
// unlike gRPC 1.51's own listener, listener_watch.h).
//
// Thread-safe; Stop() (or the destructor) before the gRPC server goes.
#ifndef ROPE_SERVICE_UNIX_PEER_LISTENER_H_
#define ROPE_SERVICE_UNIX_PEER_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace rope {

class UnixPeerListener {
 public:
  // Binds `path` (an existing socket file there is replaced: a server that
  // died left it), sets its mode, listens and starts accepting for `server`
  // (started). UNAVAILABLE naming the path and the cause when it cannot.
  static absl::StatusOr<std::unique_ptr<UnixPeerListener>> Start(const std::string& path,
                                                                 mode_t mode,
                                                                 grpc::Server* server);
  ~UnixPeerListener();
  UnixPeerListener(const UnixPeerListener&) = delete;
  UnixPeerListener& operator=(const UnixPeerListener&) = delete;

  // Stops accepting and removes the socket file; connections already handed
  // over stay the gRPC server's. Idempotent.
  void Stop();

  // Connections accepted so far.
  int64_t accepted() const { return accepted_.load(); }

 private:
  UnixPeerListener(std::string path, int listen_fd, int stop_fd, grpc::Server* server);
  void Run();

  const std::string path_;
  const int listen_fd_;
  const int stop_fd_;  // an eventfd: written once to stop Run()
  grpc::Server* const server_;
  std::atomic<int64_t> accepted_{0};
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_UNIX_PEER_LISTENER_H_
