#include "server/kserve/kserve_parameters.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rope {
namespace kserve {
namespace {

using Choice = inference::InferParameter::ParameterChoiceCase;

const inference::InferParameter* Lookup(const ParameterMap& map, const std::string& name) {
  auto it = map.find(name);
  return it == map.end() ? nullptr : &it->second;
}

absl::Status WrongKind(absl::string_view where, const inference::InferParameter& parameter,
                       absl::string_view wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, " is a ", ParameterKind(parameter), ": it must be ", wanted));
}

}  // namespace

absl::string_view ParameterKind(const inference::InferParameter& parameter) {
  switch (parameter.parameter_choice_case()) {
    case Choice::kBoolParam:
      return "bool_param";
    case Choice::kInt64Param:
      return "int64_param";
    case Choice::kStringParam:
      return "string_param";
    case Choice::kDoubleParam:
      return "double_param";
    case Choice::kUint64Param:
      return "uint64_param";
    case Choice::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "parameter with no value";
}

absl::StatusOr<std::optional<int64_t>> Int64Value(const inference::InferParameter* parameter,
                                                  absl::string_view where) {
  if (parameter == nullptr) return std::optional<int64_t>();
  if (parameter->has_int64_param()) return std::optional<int64_t>(parameter->int64_param());
  if (parameter->has_uint64_param()) {
    if (parameter->uint64_param() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is ", parameter->uint64_param(), ": over the int64 range"));
    }
    return std::optional<int64_t>(static_cast<int64_t>(parameter->uint64_param()));
  }
  return WrongKind(where, *parameter, "an int64 (int64_param)");
}

absl::StatusOr<std::optional<bool>> BoolValue(const inference::InferParameter* parameter,
                                              absl::string_view where) {
  if (parameter == nullptr) return std::optional<bool>();
  if (parameter->has_bool_param()) return std::optional<bool>(parameter->bool_param());
  return WrongKind(where, *parameter, "a bool (bool_param)");
}

absl::StatusOr<std::optional<std::string>> StringValue(const inference::InferParameter* parameter,
                                                       absl::string_view where) {
  if (parameter == nullptr) return std::optional<std::string>();
  if (parameter->has_string_param()) {
    return std::optional<std::string>(parameter->string_param());
  }
  return WrongKind(where, *parameter, "a string (string_param)");
}

absl::StatusOr<std::optional<double>> DoubleValue(const inference::InferParameter* parameter,
                                                  absl::string_view where) {
  if (parameter == nullptr) return std::optional<double>();
  if (parameter->has_double_param()) return std::optional<double>(parameter->double_param());
  if (parameter->has_int64_param()) {
    return std::optional<double>(static_cast<double>(parameter->int64_param()));
  }
  if (parameter->has_string_param()) {
    double value = 0;
    if (!absl::SimpleAtod(parameter->string_param(), &value) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is \"", parameter->string_param(),
                                                     "\": not a finite decimal number"));
    }
    return std::optional<double>(value);
  }
  return WrongKind(where, *parameter,
                   "a number (double_param, int64_param, or a string_param such as \"500000\")");
}

absl::StatusOr<std::optional<int64_t>> GetInt64(const ParameterMap& map, const std::string& name,
                                                absl::string_view where) {
  return Int64Value(Lookup(map, name), where);
}

absl::StatusOr<std::optional<bool>> GetBool(const ParameterMap& map, const std::string& name,
                                            absl::string_view where) {
  return BoolValue(Lookup(map, name), where);
}

absl::StatusOr<std::optional<std::string>> GetString(const ParameterMap& map,
                                                     const std::string& name,
                                                     absl::string_view where) {
  return StringValue(Lookup(map, name), where);
}

absl::StatusOr<std::optional<double>> GetDouble(const ParameterMap& map, const std::string& name,
                                                absl::string_view where) {
  return DoubleValue(Lookup(map, name), where);
}

}  // namespace kserve
}  // namespace rope
