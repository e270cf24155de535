// Status assertions for tests: the exact code and a substring of the
// message, never just "not OK". Use as EXPECT_TRUE(StatusIs(...)); the
// failure message shows both. GrpcStatusIs (grpc_test_util.h) is the same
// check for a grpc::Status.
#ifndef ROPE_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define ROPE_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace rope {
namespace test {

// Passes when `status` has exactly `code` and its message contains `substr`.
::testing::AssertionResult StatusIs(const absl::Status& status, absl::StatusCode code,
                                    absl::string_view substr);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SUPPORT_STATUS_MATCHERS_H_
