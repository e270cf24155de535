// Bearer-token authentication of ropeserve's calls.
//
// BearerTokenProcessor is a grpc::AuthMetadataProcessor: gRPC runs it on a
// call's initial metadata, before any request message is read, so a caller
// without a valid token is refused (UNAUTHENTICATED) without the server
// parsing its tensors. gRPC only runs processors on secure (TLS) ports, which
// is also the only place a bearer token is not readable on the wire: token
// auth therefore requires TLS (ropeserve refuses --auth_token_file without
// --tls_cert_file).
//
// The grpc.health.v1.Health service stays open so that load balancers and
// Kubernetes probes need no token; every other method (rope.v1, reflection,
// the bench Echo) needs one.
#ifndef ROPE_SERVICE_TOKEN_AUTH_H_
#define ROPE_SERVICE_TOKEN_AUTH_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace rope {

// Equality of `presented` and `expected` in time that depends only on
// presented.size(), not on where (or whether) the two differ, so that timing
// does not reveal a token's prefix.
bool ConstantTimeEquals(absl::string_view presented, absl::string_view expected);

// The accepted tokens of a token file: one per line; blank lines and lines
// starting with '#' are skipped, surrounding whitespace is trimmed. Several
// tokens let clients move from an old token to a new one without downtime.
// INVALID_ARGUMENT naming `origin` and the line for a token containing
// whitespace or control characters (it could never be sent as metadata), or
// when the file holds no token.
absl::StatusOr<std::vector<std::string>> ParseTokenFile(absl::string_view contents,
                                                        absl::string_view origin);

// Why a call was refused.
enum class AuthFailure { kMissingToken, kInvalidToken };

// The accepted tokens, replaced as a whole when the token file is reloaded
// (credential_reloader.h): a call is checked against one complete set,
// never a mix of the old and the new. Thread-safe.
class TokenSet {
 public:
  explicit TokenSet(std::vector<std::string> tokens);
  std::shared_ptr<const std::vector<std::string>> Get() const;
  void Set(std::vector<std::string> tokens);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const std::vector<std::string>> tokens_ ABSL_GUARDED_BY(mu_);
};

class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `tokens` must not be empty. `on_failure` (may be empty) is called for
  // each refused call, from gRPC's threads; it must be thread-safe.
  BearerTokenProcessor(std::vector<std::string> tokens,
                       std::function<void(AuthFailure)> on_failure);
  // Checks against `tokens` as it is at each call (it may be replaced).
  BearerTokenProcessor(std::shared_ptr<TokenSet> tokens,
                       std::function<void(AuthFailure)> on_failure);

  // Non-blocking: the check is a few comparisons, run inline on gRPC's thread.
  bool IsBlocking() const override { return false; }

  // OK when the call is to grpc.health.v1.Health or carries
  // "authorization: Bearer <token>" with an accepted token (the header then
  // goes on to the service, which uses only the token's fingerprint, to name
  // the client: caller_identity.h). Otherwise UNAUTHENTICATED,
  // saying whether the token was missing or not accepted (never echoing it).
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  bool Accepts(absl::string_view token) const;

  const std::shared_ptr<TokenSet> tokens_;
  const std::function<void(AuthFailure)> on_failure_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_TOKEN_AUTH_H_
