// TLS, mutual TLS and bearer tokens for RopeClient channels: turns the
// files named by ropectl's and ropeload's security flags into
// ClientOptions::credentials (and tls_server_name).
//
// A bearer token rides on gRPC call credentials, which gRPC only sends over
// a secure channel; so a token requires TLS, as on the server.
#ifndef ROPE_CLIENT_CHANNEL_SECURITY_H_
#define ROPE_CLIENT_CHANNEL_SECURITY_H_

#include <string>

#include "absl/status/status.h"
#include "client/client_options.h"

namespace rope {
namespace client {

// Paths and names as given to the flags of the same names; empty: not set.
struct ChannelSecurityFiles {
  // Use TLS, trusting the system's CA store unless tls_ca_file is set.
  // Implied by any tls_* field.
  bool tls = false;
  std::string tls_ca_file;      // PEM CA bundle the server's certificate must chain to
  std::string tls_cert_file;    // PEM client certificate (mutual TLS), with tls_key_file
  std::string tls_key_file;     // its PEM private key
  std::string tls_server_name;  // name to verify instead of the target's host
  std::string token_file;       // first token of the file is sent as "Bearer <token>"

  bool UsesTls() const {
    return tls || !tls_ca_file.empty() || !tls_cert_file.empty() || !tls_key_file.empty() ||
           !tls_server_name.empty();
  }
};

// Reads the files and sets options->credentials (nullptr, i.e. plaintext,
// when nothing is set) and options->tls_server_name. NOT_FOUND /
// PERMISSION_DENIED naming the flag and path for unreadable files;
// INVALID_ARGUMENT naming the flag for a cert without a key (or the reverse),
// a token without TLS, or an empty or unusable token file.
absl::Status ApplyChannelSecurity(const ChannelSecurityFiles& files, ClientOptions* options);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_CHANNEL_SECURITY_H_
