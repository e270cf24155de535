#include "client/cli/scaling_flags.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

const char* const kVariants[] = {"none", "linear", "dynamic", "yarn", "llama3", "longrope"};

// Which parameter flags each variant takes.
const std::vector<std::string>& ParamsOf(absl::string_view variant) {
  static const auto* const kNone = new std::vector<std::string>{};
  static const auto* const kLinear = new std::vector<std::string>{"factor"};
  static const auto* const kDynamic =
      new std::vector<std::string>{"factor", "original_max_position_embeddings"};
  static const auto* const kYarn = new std::vector<std::string>{
      "factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
      "mscale_all_dim", "attention_factor"};
  static const auto* const kLlama3 = new std::vector<std::string>{
      "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  static const auto* const kLongRope = new std::vector<std::string>{
      "short_factor", "long_factor", "original_max_position_embeddings", "attention_factor"};
  if (variant == "linear") return *kLinear;
  if (variant == "dynamic") return *kDynamic;
  if (variant == "yarn") return *kYarn;
  if (variant == "llama3") return *kLlama3;
  if (variant == "longrope") return *kLongRope;
  return *kNone;
}

// Every parameter flag of any variant, derived from ParamsOf.
const std::vector<std::string>& AllParams() {
  static const auto* const kAll = [] {
    auto* all = new std::vector<std::string>;
    for (const char* variant : kVariants) {
      for (const std::string& param : ParamsOf(variant)) {
        if (std::find(all->begin(), all->end(), param) == all->end()) all->push_back(param);
      }
    }
    return all;
  }();
  return *kAll;
}

absl::Status ValidateVariant(absl::string_view value) {
  for (const char* v : kVariants) {
    if (value == v) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", value, "' is not a scaling variant: none, linear, dynamic, yarn, llama3, longrope"));
}

absl::StatusOr<std::vector<double>> ParseList(absl::string_view name, absl::string_view text) {
  std::vector<double> out;
  text = absl::StripAsciiWhitespace(text);
  absl::ConsumePrefix(&text, "[");
  absl::ConsumeSuffix(&text, "]");
  if (text.empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double v;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &v)) {
      return UsageError(absl::StrCat("--", name, ": '", part, "' is not a number"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<uint32_t> OriginalLength(const FlagSet& flags) {
  const int64_t v = flags.Int("original_max_position_embeddings");
  if (v < 0 || v > 0xffffffffll) {
    return UsageError(absl::StrCat("--original_max_position_embeddings=", v,
                                   ": must be in [0, 4294967295]"));
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

void AddScalingFlags(FlagSet* flags) {
  flags->BeginGroup("RoPE scaling flags (Hugging Face rope_scaling; 0 = the variant's default)");
  flags->Add("rope_scaling", FlagSet::Kind::kString, "none",
             "none | linear | dynamic | yarn | llama3 | longrope.", ValidateVariant);
  flags->Add("factor", FlagSet::Kind::kDouble, "0",
             "Context extension factor (linear, dynamic, yarn: required; llama3: default 8).");
  flags->Add("original_max_position_embeddings", FlagSet::Kind::kInt, "0",
             "Pre-training context length (dynamic, yarn, longrope: required; llama3: 8192).");
  flags->Add("beta_fast", FlagSet::Kind::kDouble, "0", "yarn: default 32.");
  flags->Add("beta_slow", FlagSet::Kind::kDouble, "0", "yarn: default 1.");
  flags->Add("mscale", FlagSet::Kind::kDouble, "0", "yarn: unset by default.");
  flags->Add("mscale_all_dim", FlagSet::Kind::kDouble, "0", "yarn: unset by default.");
  flags->Add("attention_factor", FlagSet::Kind::kDouble, "0",
             "yarn, longrope: multiplies cos/sin; 0 derives it as Hugging Face does.");
  flags->Add("low_freq_factor", FlagSet::Kind::kDouble, "0", "llama3: default 1.");
  flags->Add("high_freq_factor", FlagSet::Kind::kDouble, "0", "llama3: default 4.");
  flags->Add("short_factor", FlagSet::Kind::kString, "",
             "longrope: rotary_dim/2 comma-separated factors (used when max_len <= "
             "original_max_position_embeddings).");
  flags->Add("long_factor", FlagSet::Kind::kString, "",
             "longrope: rotary_dim/2 comma-separated factors (used when max_len > "
             "original_max_position_embeddings).");
}

absl::Status ApplyScalingFlags(const FlagSet& flags, v1::RopeConfig* config) {
  const std::string& variant = flags.String("rope_scaling");
  const std::vector<std::string>& allowed = ParamsOf(variant);
  for (const std::string& param : AllParams()) {
    if (flags.IsSet(param) &&
        std::find(allowed.begin(), allowed.end(), param) == allowed.end()) {
      return UsageError(absl::StrCat("--", param, " does not apply to --rope_scaling=", variant,
                                     allowed.empty() ? std::string(" (no parameters)")
                                                     : absl::StrCat(" (it takes --",
                                                                    absl::StrJoin(allowed, ", --"),
                                                                    ")")));
    }
  }
  ROPE_ASSIGN_OR_RETURN(uint32_t original, OriginalLength(flags));
  if (variant == "linear") {
    config->mutable_linear()->set_factor(flags.Double("factor"));
  } else if (variant == "dynamic") {
    auto* d = config->mutable_dynamic_ntk();
    d->set_factor(flags.Double("factor"));
    d->set_original_max_position_embeddings(original);
  } else if (variant == "yarn") {
    auto* y = config->mutable_yarn();
    y->set_factor(flags.Double("factor"));
    y->set_original_max_position_embeddings(original);
    y->set_beta_fast(flags.Double("beta_fast"));
    y->set_beta_slow(flags.Double("beta_slow"));
    y->set_mscale(flags.Double("mscale"));
    y->set_mscale_all_dim(flags.Double("mscale_all_dim"));
    y->set_attention_factor(flags.Double("attention_factor"));
  } else if (variant == "llama3") {
    auto* l = config->mutable_llama3();
    l->set_factor(flags.Double("factor"));
    l->set_low_freq_factor(flags.Double("low_freq_factor"));
    l->set_high_freq_factor(flags.Double("high_freq_factor"));
    l->set_original_max_position_embeddings(original);
  } else if (variant == "longrope") {
    auto* l = config->mutable_longrope();
    for (const char* name : {"short_factor", "long_factor"}) {
      ROPE_ASSIGN_OR_RETURN(std::vector<double> list, ParseList(name, flags.String(name)));
      for (double v : list) {
        if (std::string(name) == "short_factor") {
          l->add_short_factor(v);
        } else {
          l->add_long_factor(v);
        }
      }
    }
    l->set_original_max_position_embeddings(original);
    l->set_attention_factor(flags.Double("attention_factor"));
  }
  return absl::OkStatus();
}

std::string DescribeScaling(const v1::RopeConfig& config) {
  switch (config.scaling_case()) {
    case v1::RopeConfig::kLinear:
      return absl::StrCat("linear(factor=", config.linear().factor(), ")");
    case v1::RopeConfig::kDynamicNtk:
      return absl::StrCat("dynamic(factor=", config.dynamic_ntk().factor(), " original=",
                          config.dynamic_ntk().original_max_position_embeddings(), ")");
    case v1::RopeConfig::kYarn: {
      const auto& y = config.yarn();
      return absl::StrCat("yarn(factor=", y.factor(), " original=",
                          y.original_max_position_embeddings(), " beta_fast=", y.beta_fast(),
                          " beta_slow=", y.beta_slow(), " mscale=", y.mscale(),
                          " mscale_all_dim=", y.mscale_all_dim(),
                          " attention_factor=", y.attention_factor(), ")");
    }
    case v1::RopeConfig::kLlama3: {
      const auto& l = config.llama3();
      return absl::StrCat("llama3(factor=", l.factor(), " low_freq_factor=", l.low_freq_factor(),
                          " high_freq_factor=", l.high_freq_factor(),
                          " original=", l.original_max_position_embeddings(), ")");
    }
    case v1::RopeConfig::kLongrope: {
      const auto& l = config.longrope();
      return absl::StrCat("longrope(", l.short_factor_size(), " short, ", l.long_factor_size(),
                          " long factors, original=", l.original_max_position_embeddings(),
                          " attention_factor=", l.attention_factor(), ")");
    }
    case v1::RopeConfig::SCALING_NOT_SET:
      break;
  }
  return "none";
}

}  // namespace client
}  // namespace rope
