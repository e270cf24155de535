#include "tests/support/grpc_test_util.h"

#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/support/metrics_scrape.h"

namespace rope {
namespace test {

::testing::AssertionResult GrpcStatusIs(const grpc::Status& status, grpc::StatusCode code,
                                        absl::string_view substr) {
  if (status.error_code() == code && absl::StrContains(status.error_message(), substr)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "status is code " << status.error_code() << " \"" << status.error_message()
         << "\"; expected code " << code << " with \"" << substr << "\"";
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

v1::Tensor ToProto(const HostTensor& tensor) {
  v1::Tensor out;
  out.set_dtype(static_cast<v1::DType>(static_cast<int>(tensor.dtype)));
  for (int64_t d : tensor.shape) out.add_shape(d);
  out.set_data(tensor.bytes.data(), tensor.bytes.size());
  return out;
}

HostTensor FromProto(const v1::Tensor& tensor) {
  HostTensor out;
  out.dtype = static_cast<DType>(static_cast<int>(tensor.dtype()));
  out.shape.assign(tensor.shape().begin(), tensor.shape().end());
  out.bytes.assign(tensor.data().begin(), tensor.data().end());
  return out;
}

v1::RopeConfig MakeConfig(uint32_t head_dim, uint32_t max_len, v1::Layout layout,
                          uint32_t rotary_dim, double theta) {
  v1::RopeConfig config;
  config.set_head_dim(head_dim);
  config.set_max_len(max_len);
  config.set_layout(layout);
  config.set_rotary_dim(rotary_dim);
  config.set_theta(theta);
  return config;
}

v1::RotateRequest MakeRotateRequest(int64_t batch, int64_t seq, int64_t heads, uint32_t head_dim,
                                    uint32_t max_len, int64_t start_pos, unsigned seed) {
  std::mt19937 rng(seed);
  v1::RotateRequest request;
  *request.mutable_config() = MakeConfig(head_dim, max_len);
  const std::vector<int64_t> shape = {batch, seq, heads, head_dim};
  *request.mutable_q() = ToProto(Encode(
      DType::kFloat32, shape, RandomValues(DType::kFloat32, batch * seq * heads * head_dim, &rng)));
  request.set_start_pos(start_pos);
  return request;
}

std::string HttpGetMetrics(int port) {
  // Bounded: a stuck endpoint fails the test.
  return HttpGetResponse(port, "/metrics", absl::Seconds(10)).value_or("");
}

double MetricValue(const std::string& exposition, absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::StartsWith(line, series)) continue;
    absl::string_view rest = line.substr(series.size());
    if (rest.empty() || rest[0] != ' ') continue;
    double value = 0;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(rest), &value)) return value;
  }
  return -1;
}

}  // namespace test
}  // namespace rope
