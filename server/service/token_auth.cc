#include "server/service/token_auth.h"

#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rope {
namespace {

constexpr absl::string_view kHealthPathPrefix = "/grpc.health.v1.Health/";
constexpr absl::string_view kBearerScheme = "bearer ";

absl::string_view ToView(const grpc::string_ref& ref) {
  return absl::string_view(ref.data(), ref.size());
}

// Metadata values are visible ASCII; a token with anything else cannot be sent.
bool IsTokenChar(char c) { return c > 0x20 && c < 0x7f; }

}  // namespace

bool ConstantTimeEquals(absl::string_view presented, absl::string_view expected) {
  // Walk the presented bytes whatever happens, folding every difference (and
  // the length difference) into one accumulator; index `expected` modulo its
  // size so that the loop never leaves it or ends early.
  uint64_t difference = presented.size() ^ expected.size();
  if (expected.empty()) return presented.empty();
  for (size_t i = 0; i < presented.size(); ++i) {
    difference |= static_cast<uint8_t>(presented[i] ^ expected[i % expected.size()]);
  }
  // `volatile` stops the compiler from turning the fold into an early exit.
  volatile uint64_t result = difference;
  return result == 0;
}

absl::StatusOr<std::vector<std::string>> ParseTokenFile(absl::string_view contents,
                                                        absl::string_view origin) {
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    for (char c : line) {
      if (!IsTokenChar(c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, " line ", line_number,
            ": a token must be printable ASCII without spaces (one token per line)"));
      }
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, " holds no token (one per line; '#' starts a comment)"));
  }
  return tokens;
}

TokenSet::TokenSet(std::vector<std::string> tokens)
    : tokens_(std::make_shared<const std::vector<std::string>>(std::move(tokens))) {}

std::shared_ptr<const std::vector<std::string>> TokenSet::Get() const {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

void TokenSet::Set(std::vector<std::string> tokens) {
  auto next = std::make_shared<const std::vector<std::string>>(std::move(tokens));
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(next);
}

BearerTokenProcessor::BearerTokenProcessor(std::vector<std::string> tokens,
                                           std::function<void(AuthFailure)> on_failure)
    : BearerTokenProcessor(std::make_shared<TokenSet>(std::move(tokens)),
                           std::move(on_failure)) {}

BearerTokenProcessor::BearerTokenProcessor(std::shared_ptr<TokenSet> tokens,
                                           std::function<void(AuthFailure)> on_failure)
    : tokens_(std::move(tokens)), on_failure_(std::move(on_failure)) {}

bool BearerTokenProcessor::Accepts(absl::string_view token) const {
  // Compare against every token (no early exit) so that timing does not tell
  // which one matched either.
  const std::shared_ptr<const std::vector<std::string>> tokens = tokens_->Get();
  bool accepted = false;
  for (const std::string& expected : *tokens) {
    accepted |= ConstantTimeEquals(token, expected);
  }
  return accepted;
}

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata,
                                           grpc::AuthContext* /*context*/,
                                           OutputMetadata* /*consumed_auth_metadata*/,
                                           OutputMetadata* /*response_metadata*/) {
  auto path = auth_metadata.find(":path");
  if (path != auth_metadata.end() && absl::StartsWith(ToView(path->second), kHealthPathPrefix)) {
    return grpc::Status::OK;
  }
  auto header = auth_metadata.find("authorization");
  if (header == auth_metadata.end()) {
    if (on_failure_) on_failure_(AuthFailure::kMissingToken);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing bearer token: send metadata \"authorization: Bearer <token>\"");
  }
  const absl::string_view value = ToView(header->second);
  if (value.size() <= kBearerScheme.size() ||
      !absl::StartsWithIgnoreCase(value, kBearerScheme)) {
    if (on_failure_) on_failure_(AuthFailure::kMissingToken);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization metadata is not \"Bearer <token>\"");
  }
  const absl::string_view token =
      absl::StripAsciiWhitespace(value.substr(kBearerScheme.size()));
  if (!Accepts(token)) {
    if (on_failure_) on_failure_(AuthFailure::kInvalidToken);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bearer token not accepted");
  }
  // The header is passed on (not consumed): the service names the client
  // by the token's fingerprint for the per-client share (caller_identity.h).
  // Nothing per call may be stored in `context`: gRPC shares it between
  // the calls of a connection.
  return grpc::Status::OK;
}

}  // namespace rope
