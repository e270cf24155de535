// Helpers for tests that talk to ropeserve over gRPC (in-process or a child
// process): the grpc::Status assertion (the twin of status_matchers.h's
// StatusIs), tensors <-> proto, request builders, and the /metrics page. No
// dependency on the server code.
#ifndef ROPE_TESTS_SUPPORT_GRPC_TEST_UTIL_H_
#define ROPE_TESTS_SUPPORT_GRPC_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.pb.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {

// Passes when `status` has exactly `code` and its message contains `substr`.
::testing::AssertionResult GrpcStatusIs(const grpc::Status& status, grpc::StatusCode code,
                                        absl::string_view substr);

// Every call in these tests carries a deadline, so a bug fails, not hangs.
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout = absl::Seconds(30));

v1::Tensor ToProto(const HostTensor& tensor);
HostTensor FromProto(const v1::Tensor& tensor);

v1::RopeConfig MakeConfig(uint32_t head_dim, uint32_t max_len, v1::Layout layout = v1::INTERLEAVED,
                          uint32_t rotary_dim = 0, double theta = 0);

// A valid float32 RotateRequest: q [batch, seq, heads, head_dim] of seeded
// random values, positions start_pos + s.
v1::RotateRequest MakeRotateRequest(int64_t batch, int64_t seq, int64_t heads, uint32_t head_dim,
                                    uint32_t max_len = 64, int64_t start_pos = 0,
                                    unsigned seed = 1);

// The whole response (status line, headers and page) to GET
// http://127.0.0.1:port/metrics (metrics_scrape.h, 10 s at most); empty on
// error.
std::string HttpGetMetrics(int port);

// The value of the sample line that starts with `series` (name plus labels,
// as exposed), or -1 when absent.
double MetricValue(const std::string& exposition, absl::string_view series);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SUPPORT_GRPC_TEST_UTIL_H_
