// BearerTokenProcessor, the token file format and the constant-time compare,
// without a server (security_test.cc has them through real channels).
#include "server/service/token_auth.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rope {
namespace {

TEST(ConstantTimeEqualsTest, IsEquality) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("Secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("secret2", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", ""));
  // A presented value that repeats the expected one is still different.
  EXPECT_FALSE(ConstantTimeEquals("abcabc", "abc"));
}

TEST(ParseTokenFileTest, TakesOneTokenPerLineSkippingCommentsAndBlanks) {
  absl::StatusOr<std::vector<std::string>> tokens =
      ParseTokenFile("# old\nfirst\n\n\t second \r\n#next\n", "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<std::string>{"first", "second"}));
}

TEST(ParseTokenFileTest, RefusesAFileWithoutTokens) {
  const absl::Status status = ParseTokenFile("# nothing\n\n", "--auth_token_file=t").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "--auth_token_file=t holds no token")) << status;
}

TEST(ParseTokenFileTest, RefusesATokenWithInnerSpacesNamingTheLine) {
  const absl::Status status = ParseTokenFile("ok\ntwo words\n", "t").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "t line 2")) << status;
}

class ProcessorTest : public ::testing::Test {
 protected:
  grpc::Status Process(const std::string& path, const std::string* authorization) {
    grpc::AuthMetadataProcessor::InputMetadata input;
    input.emplace(":path", path);
    if (authorization != nullptr) input.emplace("authorization", *authorization);
    consumed_.clear();
    return processor_.Process(input, nullptr, &consumed_, &response_);
  }

  std::vector<AuthFailure> failures_;
  BearerTokenProcessor processor_{{"alpha", "beta"},
                                  [this](AuthFailure f) { failures_.push_back(f); }};
  grpc::AuthMetadataProcessor::OutputMetadata consumed_;
  grpc::AuthMetadataProcessor::OutputMetadata response_;
};

TEST_F(ProcessorTest, AcceptsEachTokenAndPassesTheHeaderOn) {
  // Passed on: the service names the client by the token's fingerprint.
  for (std::string header : {"Bearer alpha", "bearer beta", "BEARER  alpha "}) {
    EXPECT_TRUE(Process("/rope.v1.RopeService/Rotate", &header).ok()) << header;
    EXPECT_EQ(consumed_.count("authorization"), 0u) << header;
  }
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ProcessorTest, RefusesMissingMalformedAndWrongTokens) {
  const std::string basic = "Basic YWxwaGE6";
  const std::string bare = "alpha";
  const std::string empty_bearer = "Bearer ";
  const std::string wrong = "Bearer alph";
  EXPECT_EQ(Process("/rope.v1.RopeService/Rotate", nullptr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Process("/rope.v1.RopeService/Rotate", &basic).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Process("/rope.v1.RopeService/Rotate", &bare).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Process("/rope.v1.RopeService/Rotate", &empty_bearer).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status refused = Process("/rope.v1.RopeService/GetTable", &wrong);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(absl::StrContains(refused.error_message(), "alph")) << refused.error_message();
  EXPECT_EQ(failures_, (std::vector<AuthFailure>{AuthFailure::kMissingToken,
                                                 AuthFailure::kMissingToken,
                                                 AuthFailure::kMissingToken,
                                                 AuthFailure::kMissingToken,
                                                 AuthFailure::kInvalidToken}));
}

TEST_F(ProcessorTest, LetsHealthThroughWithoutAToken) {
  EXPECT_TRUE(Process("/grpc.health.v1.Health/Check", nullptr).ok());
  EXPECT_TRUE(Process("/grpc.health.v1.Health/Watch", nullptr).ok());
  // Only the health service: reflection and look-alike paths need a token.
  EXPECT_FALSE(
      Process("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", nullptr).ok());
  EXPECT_FALSE(Process("/grpc.health.v1.HealthX/Check", nullptr).ok());
  EXPECT_FALSE(Process("/x/grpc.health.v1.Health/Check", nullptr).ok());
}

}  // namespace
}  // namespace rope
