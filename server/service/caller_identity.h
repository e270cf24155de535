// Who a call comes from: the bearer token it was admitted with (only where
// tokens are verified, or a client could pick any name), else the subject of
// its mTLS client certificate, else its peer address. Two uses read it
// differently:
//   - ownership of server-side state (shared-memory regions): the token's
//     whole SHA-256 digest, the certificate's subject, or the peer's address
//     without its port ("peer:ipv4:127.0.0.1"), so that a client that
//     reconnects (--max_connection_age, a restart of its channel) keeps what
//     it registered. Every client of a Unix socket is "peer:unix:<path>": the
//     socket file's mode is the boundary (gRPC 1.51 gives a call no access to
//     its connection's socket, so the peer's uid cannot be read);
//   - the per-client share of calls in flight and the work queue's turns
//     (client_share.h, work_queue.h): a short fingerprint that logs and
//     errors may show ("token:1a2b3c4d", never the token), and the peer's
//     host without the port (one host, one client).
// Never the token itself.
#ifndef ROPE_SERVICE_CALLER_IDENTITY_H_
#define ROPE_SERVICE_CALLER_IDENTITY_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace rope {

enum class IdentityUse {
  kOwnership,  // "token:<64 hex>", "cert:<subject>", "peer:<address>"
  kShare,      // "token:<8 hex>", "cert:<subject>", "peer:<address>"
};

// "token:" and the hex SHA-256 of `token`: all 32 bytes, or the first 4
// (kShare: a fingerprint to name a client by).
std::string TokenIdentity(absl::string_view token, IdentityUse use);
std::string TokenFingerprint(absl::string_view token);  // TokenIdentity(token, kShare)

// `tokens_verified`: the token auth processor checked every call's
// "authorization: Bearer" header (token_auth.h), so the token may name the
// caller.
std::string CallerIdentity(const grpc::ServerContextBase& context, bool tokens_verified,
                           IdentityUse use);

// Whether the call's peer is on this host (a Unix socket or a loopback
// address): the only peers that may register shared memory.
bool IsLocalPeer(const std::string& peer);

}  // namespace rope

#endif  // ROPE_SERVICE_CALLER_IDENTITY_H_
