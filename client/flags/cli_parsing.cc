#include "client/flags/cli_parsing.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

constexpr size_t kMaxRank = 8;

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseInt64List(absl::string_view text) {
  std::vector<int64_t> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", out.size(), " ('", item, "') is not an integer"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(absl::string_view text) {
  std::vector<double> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    double v;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(item), &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", out.size(), " ('", item, "') is not a finite number"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParseShape(absl::string_view text) {
  ROPE_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParseInt64List(text));
  if (dims.empty() || dims.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("shape has ", dims.size(), " dims: expected 1..",
                                                   kMaxRank, ", e.g. 1,16,8,64 for [B,S,H,D]"));
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("dim ", i, " is ", dims[i], ": must be >= 1"));
    }
  }
  return dims;
}

absl::Status ValidateOptionalShape(absl::string_view text) {
  if (text.empty()) return absl::OkStatus();
  return ParseShape(text).status();
}

absl::StatusOr<v1::Layout> ParseLayout(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "interleaved" || lower == "gptj" || lower == "llama") return v1::INTERLEAVED;
  if (lower == "half" || lower == "neox") return v1::HALF;
  return absl::InvalidArgumentError(
      absl::StrCat("layout '", text, "' is not one of interleaved, half"));
}

std::string LayoutName(v1::Layout layout) {
  switch (layout) {
    case v1::HALF: return "half";
    case v1::INTERLEAVED:
    case v1::LAYOUT_UNSPECIFIED: return "interleaved";
    default: return absl::StrCat("layout(", static_cast<int>(layout), ")");
  }
}

}  // namespace client
}  // namespace rope
