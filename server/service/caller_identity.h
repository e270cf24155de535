// Who a call comes from, for state a client owns on the server (its
// shared-memory regions): the bearer token it was admitted with (a SHA-256
// digest of its "authorization" header's token, when tokens are verified), else the subject of its
// mTLS certificate, else its peer address ("ipv4:127.0.0.1:40312", or
// "unix:" for every client of a Unix socket: there the socket file's mode is
// the boundary).
#ifndef ROPE_SERVICE_CALLER_IDENTITY_H_
#define ROPE_SERVICE_CALLER_IDENTITY_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"

namespace rope {

// "token:<hex sha-256 of token>".
std::string TokenIdentity(absl::string_view token);

// `tokens_verified`: the token processor checked every call's "authorization:
// Bearer" header (token_auth.h), so the token may name the caller.
std::string CallerIdentity(const grpc::ServerContextBase& context, bool tokens_verified);

// Whether the call's peer is on this host (a Unix socket or a loopback
// address): the only peers that may register shared memory.
bool IsLocalPeer(const std::string& peer);

}  // namespace rope

#endif  // ROPE_SERVICE_CALLER_IDENTITY_H_
