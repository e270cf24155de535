// Typed reads of the InferParameter maps of a ModelInferRequest (request,
// input and output parameters), with the errors Triton gives: the gRPC
// status INVALID_ARGUMENT and a message naming the parameter, the type it
// has and the type it needs.
#ifndef ROPE_SERVER_KSERVE_KSERVE_PARAMETERS_H_
#define ROPE_SERVER_KSERVE_KSERVE_PARAMETERS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/map.h"
#include "inference/grpc_service.pb.h"

namespace rope {
namespace kserve {

using ParameterMap = google::protobuf::Map<std::string, inference::InferParameter>;

// Each returns nullopt when `map` has no `name`, the value when it has the
// type asked for, INVALID_ARGUMENT naming `where` (e.g. "parameter
// 'start_pos'") otherwise.
//   Int64: int64_param, or a uint64_param up to INT64_MAX.
//   Bool: bool_param.
//   String: string_param.
//   Double: double_param, int64_param, or a string_param holding a decimal
//     number (parsed exactly as strtod does: "500000", "1e4").
absl::StatusOr<std::optional<int64_t>> GetInt64(const ParameterMap& map, const std::string& name,
                                                absl::string_view where);
absl::StatusOr<std::optional<bool>> GetBool(const ParameterMap& map, const std::string& name,
                                            absl::string_view where);
absl::StatusOr<std::optional<std::string>> GetString(const ParameterMap& map,
                                                     const std::string& name,
                                                     absl::string_view where);
absl::StatusOr<std::optional<double>> GetDouble(const ParameterMap& map, const std::string& name,
                                                absl::string_view where);

// The same reads of one parameter already looked up: `parameter` null means
// not given (nullopt).
absl::StatusOr<std::optional<int64_t>> Int64Value(const inference::InferParameter* parameter,
                                                  absl::string_view where);
absl::StatusOr<std::optional<bool>> BoolValue(const inference::InferParameter* parameter,
                                              absl::string_view where);
absl::StatusOr<std::optional<std::string>> StringValue(const inference::InferParameter* parameter,
                                                       absl::string_view where);
absl::StatusOr<std::optional<double>> DoubleValue(const inference::InferParameter* parameter,
                                                  absl::string_view where);

// The value's type as the proto names it ("int64_param", ...; "no value").
absl::string_view ParameterKind(const inference::InferParameter& parameter);

}  // namespace kserve
}  // namespace rope

#endif  // ROPE_SERVER_KSERVE_KSERVE_PARAMETERS_H_
