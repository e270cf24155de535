// The uid of each Unix-socket client, for the calls of its connection.
//
// gRPC 1.51 gives a call no access to its connection's socket, so the
// server accepts on its Unix sockets itself (unix_peer_listener.h), reads
// the peer's credentials (SO_PEERCRED: the uid of the process that
// connected), notes them here under the socket's descriptor number and only
// then hands the socket to gRPC, whose calls on it name their peer
// "fd:<number>". A number names one connection while any call of it runs:
// the transport holds the socket open until its last call is gone, and a
// new connection can take the number only after that, noting its own uid
// first.
//
// Process-wide (descriptor numbers are), thread-safe.
#ifndef ROPE_SERVICE_UNIX_PEERS_H_
#define ROPE_SERVICE_UNIX_PEERS_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace rope {

// Notes that the connection on descriptor `fd` comes from `uid`.
void NoteUnixPeer(int fd, uint32_t uid);

// The uid behind a call's peer string "fd:<n>" (grpc::ServerContext::peer())
// of a connection noted above; nullopt for every other peer.
std::optional<uint32_t> UnixPeerUid(absl::string_view peer);

}  // namespace rope

#endif  // ROPE_SERVICE_UNIX_PEERS_H_
