// Who a call comes from, for the per-client share of calls in flight
// (client_share.h): the bearer token it presented (as a fingerprint, never
// the token; only where tokens are verified, or a client could pick any
// name), else the subject of its mTLS client certificate, else its peer
// address without the port (one host, one client).
#ifndef ROPE_SERVICE_CLIENT_IDENTITY_H_
#define ROPE_SERVICE_CLIENT_IDENTITY_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace rope {

// "token:1a2b3c4d" (the first 8 hex digits of the token's SHA-256), so that
// logs and errors can name a client without revealing its token.
std::string TokenFingerprint(absl::string_view token);

// "token:...", "cert:<subject>" or "peer:<address>" for the call of
// `context`. `tokens_verified`: the token auth processor accepted the
// call's "authorization: Bearer" header (token_auth.h).
std::string ClientIdentity(const grpc::ServerContextBase& context, bool tokens_verified);

}  // namespace rope

#endif  // ROPE_SERVICE_CLIENT_IDENTITY_H_
