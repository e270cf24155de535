// Rotates one random query tensor through a running ropeserve with the C++
// client library, built against the installed CMake package (see
// CMakeLists.txt here).
//
//   rotate_example [TARGET]    TARGET: any gRPC target, default localhost:50051
//
// Prints the reply's shape and first values; on error prints the status
// (the server's code and message) and exits 1.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/rope_client.h"
#include "client/tensor_util.h"
#include "common/defaults.h"
#include "common/status_macros.h"

namespace {

absl::Status RotateOnce(const std::string& target) {
  rope::client::ClientOptions options;
  options.deadline = absl::Seconds(10);
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<rope::client::RopeClient> client,
                        rope::client::RopeClient::Create(target, options));

  // Llama-3-like: theta 500000, head_dim 64, q of [batch 1, seq 16, 8 heads, 64].
  rope::v1::RotateRequest request;
  request.mutable_config()->set_theta(500000);
  request.mutable_config()->set_head_dim(64);
  request.mutable_config()->set_max_len(4096);
  request.set_start_pos(100);
  ROPE_ASSIGN_OR_RETURN(*request.mutable_q(),
                        rope::client::RandomTensor({1, 16, 8, 64}, rope::v1::FLOAT32,
                                                   /*seed=*/0, rope::client::Distribution::kNormal));

  ROPE_ASSIGN_OR_RETURN(rope::v1::RotateResponse reply, client->Rotate(request));
  ROPE_ASSIGN_OR_RETURN(std::vector<float> q, rope::client::TensorToFloats(reply.q(), "reply q"));
  std::printf("rotated q [%s] %s: first values %.6f %.6f %.6f %.6f\n",
              absl::StrJoin(reply.q().shape(), ",").c_str(),
              rope::client::DTypeName(reply.q().dtype()).c_str(), q[0], q[1], q[2], q[3]);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string target =
      argc > 1 ? argv[1] : absl::StrCat("localhost:", rope::kDefaultPort);
  const absl::Status status = RotateOnce(target);
  if (!status.ok()) {
    std::fprintf(stderr, "rotate_example: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
