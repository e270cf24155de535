#include "client/channel_security.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <grpcpp/security/credentials.h>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string where = absl::StrCat("--", flag, "=", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(where);
    if (error == EACCES) return absl::PermissionDeniedError(where);
    return absl::InvalidArgumentError(where);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": the file is empty"));
  }
  return contents.str();
}

// The first token of a token file in ropeserve's format (one per line, '#'
// comments): clients send one, servers may accept several.
absl::StatusOr<std::string> FirstToken(absl::string_view contents, absl::string_view origin) {
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    for (char c : line) {
      if (c <= 0x20 || c >= 0x7f) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": the token must be printable ASCII without spaces"));
      }
    }
    return std::string(line);
  }
  return absl::InvalidArgumentError(absl::StrCat(origin, ": holds no token"));
}

}  // namespace

absl::Status ApplyChannelSecurity(const ChannelSecurityFiles& files, ClientOptions* options) {
  if (files.tls_cert_file.empty() != files.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both or neither");
  }
  if (!files.UsesTls()) {
    if (!files.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--token_file needs TLS (gRPC sends tokens only over secure channels): add --tls or "
          "--tls_ca_file");
    }
    options->credentials = nullptr;
    options->tls_server_name.clear();
    return absl::OkStatus();
  }
  grpc::SslCredentialsOptions ssl;
  if (!files.tls_ca_file.empty()) {
    ROPE_ASSIGN_OR_RETURN(std::string ca, ReadFlagFile("tls_ca_file", files.tls_ca_file));
    ssl.pem_root_certs = std::move(ca);
  }
  if (!files.tls_cert_file.empty()) {
    ROPE_ASSIGN_OR_RETURN(std::string cert, ReadFlagFile("tls_cert_file", files.tls_cert_file));
    ROPE_ASSIGN_OR_RETURN(std::string key, ReadFlagFile("tls_key_file", files.tls_key_file));
    ssl.pem_cert_chain = std::move(cert);
    ssl.pem_private_key = std::move(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (!files.token_file.empty()) {
    ROPE_ASSIGN_OR_RETURN(std::string contents, ReadFlagFile("token_file", files.token_file));
    ROPE_ASSIGN_OR_RETURN(std::string token,
                          FirstToken(contents, absl::StrCat("--token_file=", files.token_file)));
    credentials =
        grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token));
  }
  options->credentials = std::move(credentials);
  options->tls_server_name = files.tls_server_name;
  return absl::OkStatus();
}

}  // namespace client
}  // namespace rope
