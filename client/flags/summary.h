// One-line, human-readable descriptions of tensors for ropectl's and ropeload's
// output.
#ifndef ROPE_CLIENT_FLAGS_SUMMARY_H_
#define ROPE_CLIENT_FLAGS_SUMMARY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// "float32 [1,16,8,64]".
std::string ShapeAndDType(const v1::Tensor& tensor);

// "float32 [1,16,8,64]  min=-3.91 max=4.02 mean=0.00121  first=[0.1, -0.2, ...]"
// (non-finite values are counted, e.g. the -inf of a causal mask).
// INVALID_ARGUMENT naming `what` when the tensor's bytes do not match it.
absl::StatusOr<std::string> SummarizeTensor(const v1::Tensor& tensor, absl::string_view what,
                                            int first_n = 6);

// "12.345 ms".
std::string FormatMillis(absl::Duration d);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_FLAGS_SUMMARY_H_
