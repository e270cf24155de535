#include "server/service/client_identity.h"

#include <openssl/sha.h>

#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_context.h"

namespace rope {
namespace {

std::string FirstProperty(const grpc::AuthContext& auth, const char* name) {
  std::vector<grpc::string_ref> values = auth.FindPropertyValues(name);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

}  // namespace

std::string TokenFingerprint(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::StrCat("token:", absl::BytesToHexString(absl::string_view(
                                    reinterpret_cast<const char*>(digest), 4)));
}

std::string ClientIdentity(const grpc::ServerContextBase& context, bool tokens_verified) {
  if (tokens_verified) {
    const auto& metadata = context.client_metadata();
    auto header = metadata.find("authorization");
    if (header != metadata.end()) {
      absl::string_view value(header->second.data(), header->second.size());
      const size_t space = value.find(' ');
      if (space != absl::string_view::npos) {
        return TokenFingerprint(absl::StripAsciiWhitespace(value.substr(space + 1)));
      }
    }
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::string subject = FirstProperty(*auth, "x509_subject");
    if (subject.empty()) subject = FirstProperty(*auth, "x509_common_name");
    if (!subject.empty()) return absl::StrCat("cert:", subject);
  }
  // "ipv4:127.0.0.1:54321", "ipv6:[::1]:54321", "unix:/path": drop the port.
  std::string peer = context.peer();
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    const size_t colon = peer.rfind(':');
    if (colon != std::string::npos && colon > 5) peer.resize(colon);
  }
  return absl::StrCat("peer:", peer);
}

}  // namespace rope
