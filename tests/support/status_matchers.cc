#include "tests/support/status_matchers.h"

#include "absl/strings/match.h"

namespace rope {
namespace test {

::testing::AssertionResult StatusIs(const absl::Status& status, absl::StatusCode code,
                                    absl::string_view substr) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "code is " << absl::StatusCodeToString(status.code()) << ", want "
           << absl::StatusCodeToString(code) << "; status: " << status.ToString();
  }
  if (!absl::StrContains(status.message(), substr)) {
    return ::testing::AssertionFailure()
           << "message \"" << status.message() << "\" lacks \"" << substr << "\"";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace test
}  // namespace rope
