#include "client/flags/cli_parsing.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

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

absl::StatusOr<std::vector<v1::AttentionResult>> ParseAttentionResults(absl::string_view text) {
  static constexpr std::pair<const char*, v1::AttentionResult> kNames[] = {
      {"scores", v1::SCORES},   {"output", v1::OUTPUT},     {"lse", v1::LSE},
      {"top_k", v1::TOP_K},     {"key_mass", v1::KEY_MASS}, {"score_rows", v1::SCORE_ROWS}};
  std::vector<v1::AttentionResult> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(item));
    std::optional<v1::AttentionResult> found;
    for (const auto& [known, result] : kNames) {
      if (name == known) found = result;
    }
    if (!found.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", item, "' is not a result: expected some of scores, output, lse, top_k, key_mass, "
          "score_rows"));
    }
    if (std::find(out.begin(), out.end(), *found) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is listed twice"));
    }
    out.push_back(*found);
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
