// What ropeserve's gRPC port speaks: plaintext, TLS, or mutual TLS, and
// whether calls need a bearer token (token_auth.h).
//
// LoadServerSecurity reads the PEM and token files named by ropeserve's
// flags and checks them before the server starts, so that a wrong path, a
// key that does not belong to the certificate or an expired certificate is
// a startup error naming the flag, not a handshake failure every client
// sees later. ropeserve reloads them while running (credential_reloader.h).
#ifndef ROPE_SERVICE_SERVER_SECURITY_H_
#define ROPE_SERVICE_SERVER_SECURITY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/service/token_auth.h"

namespace rope {

struct ServerSecurity {
  // PEM certificate chain (leaf first) and its private key. Empty: plaintext.
  std::string cert_chain_pem;
  std::string private_key_pem;
  // PEM CA bundle. Non-empty: mutual TLS; clients must present a certificate
  // that chains to it, or the handshake fails.
  std::string client_ca_pem;
  // Accepted bearer tokens. Non-empty: every call except health needs one;
  // requires TLS.
  std::vector<std::string> bearer_tokens;

  bool tls() const { return !cert_chain_pem.empty(); }
};

// Paths as given to ropeserve's flags of the same names; empty: not set.
struct ServerSecurityFiles {
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string auth_token_file;
};

// The contents of one of the files, read as LoadServerSecurity does:
// NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT naming `flag` and `path`.
absl::StatusOr<std::string> ReadSecurityFile(absl::string_view flag, const std::string& path);

// Reads the files and checks the result with ValidateServerSecurity.
// NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT naming the flag and path.
absl::StatusOr<ServerSecurity> LoadServerSecurity(const ServerSecurityFiles& files);

// INVALID_ARGUMENT (naming the flag) for a certificate without a key or the
// reverse, a client CA or tokens without TLS, PEM that does not parse, or a
// key that is not the certificate's; FAILED_PRECONDITION for a certificate
// outside its validity period.
absl::Status ValidateServerSecurity(const ServerSecurity& security);

// Credentials for the gRPC port. Precondition: `security` validated.
// `on_auth_failure` is passed to the BearerTokenProcessor when there are tokens.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerSecurity& security, std::function<void(AuthFailure)> on_auth_failure);

}  // namespace rope

#endif  // ROPE_SERVICE_SERVER_SECURITY_H_
