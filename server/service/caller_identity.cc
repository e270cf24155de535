#include "server/service/caller_identity.h"

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

// "ipv4:127.0.0.1:54321" -> "ipv4:127.0.0.1", "ipv6:[::1]:54321" ->
// "ipv6:[::1]"; "unix:/path" as it is.
std::string WithoutPort(std::string peer) {
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    const size_t colon = peer.rfind(':');
    if (colon != std::string::npos && colon > 5) peer.resize(colon);
  }
  return peer;
}

}  // namespace

std::string TokenIdentity(absl::string_view token, IdentityUse use) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  const size_t bytes = use == IdentityUse::kShare ? 4 : SHA256_DIGEST_LENGTH;
  return absl::StrCat("token:", absl::BytesToHexString(absl::string_view(
                                    reinterpret_cast<const char*>(digest), bytes)));
}

std::string TokenFingerprint(absl::string_view token) {
  return TokenIdentity(token, IdentityUse::kShare);
}

std::string CallerIdentity(const grpc::ServerContextBase& context, bool tokens_verified,
                           IdentityUse use) {
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
        return TokenIdentity(absl::StripAsciiWhitespace(value.substr(space + 1)), use);
      }
    }
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::string subject = FirstProperty(*auth, "x509_subject");
    if (subject.empty()) subject = FirstProperty(*auth, "x509_common_name");
    if (!subject.empty()) return absl::StrCat("cert:", subject);
  }
  return absl::StrCat("peer:", WithoutPort(context.peer()));
}

bool IsLocalPeer(const std::string& peer) {
  return absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]") || absl::StartsWith(peer, "ipv6:%5B::1%5D");
}

}  // namespace rope
