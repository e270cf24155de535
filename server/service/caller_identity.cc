#include "server/service/caller_identity.h"

#include <openssl/evp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rope {

std::string TokenIdentity(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest, &length, EVP_sha256(), nullptr);
  return absl::StrCat(
      "token:", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), length)));
}

std::string CallerIdentity(const grpc::ServerContextBase& context, bool tokens_verified) {
  // The token comes from the call's own "authorization" header, which the
  // token processor checked and passed on (token_auth.cc): nothing per call
  // may be stored in the auth context, which gRPC shares between the calls
  // of a connection.
  if (tokens_verified) {
    const auto& metadata = context.client_metadata();
    auto header = metadata.find("authorization");
    if (header != metadata.end()) {
      absl::string_view value(header->second.data(), header->second.size());
      const size_t space = value.find(' ');
      if (space != absl::string_view::npos) {
        return TokenIdentity(absl::StripAsciiWhitespace(value.substr(space + 1)));
      }
    }
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& value : auth->FindPropertyValues("x509_subject")) {
      return absl::StrCat("x509:", absl::string_view(value.data(), value.size()));
    }
  }
  return absl::StrCat("peer:", context.peer());
}

bool IsLocalPeer(const std::string& peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]") || absl::StartsWith(peer, "ipv6:%5B::1%5D");
}

}  // namespace rope
