#include "client/cli/scaling_flags.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

const char* const kVariants[] = {"none",     "linear",       "dynamic",       "yarn",
                                 "llama3",   "longrope",     "proportional",  "dynamic_alpha",
                                 "ntk",      "deepseek_yarn"};

// Which parameter flags each variant takes.
const std::vector<std::string>& ParamsOf(absl::string_view variant) {
  static const auto* const kNone = new std::vector<std::string>{};
  static const auto* const kLinear = new std::vector<std::string>{"factor"};
  static const auto* const kDynamic =
      new std::vector<std::string>{"factor", "original_max_position_embeddings"};
  static const auto* const kYarn = new std::vector<std::string>{
      "factor",         "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
      "mscale_all_dim", "attention_factor",                 "truncate"};
  static const auto* const kLlama3 = new std::vector<std::string>{
      "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  static const auto* const kLongRope = new std::vector<std::string>{
      "short_factor", "long_factor", "original_max_position_embeddings", "attention_factor",
      "max_position_embeddings"};
  static const auto* const kProportional = new std::vector<std::string>{"factor", "rotated_pairs"};
  static const auto* const kDynamicAlpha = new std::vector<std::string>{"alpha"};
  static const auto* const kNtk = new std::vector<std::string>{"factor", "mixed_b"};
  static const auto* const kDeepseekYarn = new std::vector<std::string>{
      "factor",         "original_max_position_embeddings", "beta_fast",  "beta_slow", "mscale",
      "mscale_all_dim", "attn_factor",                      "extrapolation_factor"};
  if (variant == "linear") return *kLinear;
  if (variant == "dynamic") return *kDynamic;
  if (variant == "yarn") return *kYarn;
  if (variant == "llama3") return *kLlama3;
  if (variant == "longrope") return *kLongRope;
  if (variant == "proportional") return *kProportional;
  if (variant == "dynamic_alpha") return *kDynamicAlpha;
  if (variant == "ntk") return *kNtk;
  if (variant == "deepseek_yarn") return *kDeepseekYarn;
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
      "'", value,
      "' is not a scaling variant: none, linear, dynamic, yarn, llama3, longrope, proportional, "
      "dynamic_alpha, ntk, deepseek_yarn"));
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
             "none | linear | dynamic | yarn | llama3 | longrope | proportional | dynamic_alpha "
             "(HunYuan) | ntk | deepseek_yarn.",
             ValidateVariant);
  flags->Add("factor", FlagSet::Kind::kDouble, "0",
             "Context extension factor (linear, dynamic, yarn: required; llama3: default 8; "
             "proportional: default 1).");
  flags->Add("original_max_position_embeddings", FlagSet::Kind::kInt, "0",
             "Pre-training context length (dynamic, yarn, longrope: required; llama3: 8192).");
  flags->Add("beta_fast", FlagSet::Kind::kDouble, "0", "yarn: default 32.");
  flags->Add("beta_slow", FlagSet::Kind::kDouble, "0", "yarn: default 1.");
  flags->Add("mscale", FlagSet::Kind::kDouble, "0",
             "yarn: unset by default; deepseek_yarn: default 1 when not given.");
  flags->Add("mscale_all_dim", FlagSet::Kind::kDouble, "0",
             "yarn: unset by default; deepseek_yarn: default 0.");
  flags->Add("attention_factor", FlagSet::Kind::kDouble, "0",
             "yarn, longrope: multiplies cos/sin; 0 derives it as Hugging Face does.");
  flags->Add("truncate", FlagSet::Kind::kBool, "true",
             "yarn: floor/ceil the correction range (transformers' default); false keeps it "
             "fractional, as gpt-oss does.");
  flags->Add("low_freq_factor", FlagSet::Kind::kDouble, "0", "llama3: default 1.");
  flags->Add("high_freq_factor", FlagSet::Kind::kDouble, "0", "llama3: default 4.");
  flags->Add("short_factor", FlagSet::Kind::kString, "",
             "longrope: rotary_dim/2 comma-separated factors (for requests within "
             "original_max_position_embeddings; see --max_position_embeddings).");
  flags->Add("long_factor", FlagSet::Kind::kString, "",
             "longrope: rotary_dim/2 comma-separated factors (for longer requests).");
  flags->Add("rotated_pairs", FlagSet::Kind::kInt, "0",
             "proportional (Gemma 4's full-attention layers): how many of the rotary_dim/2 "
             "frequencies are nonzero (transformers: int(partial_rotary_factor * head_dim // 2), "
             "with --rotary_dim = --head_dim).");
  flags->Add("alpha", FlagSet::Kind::kDouble, "0",
             "dynamic_alpha (HunYuan): base = theta * alpha^(r/(r-2)); required.");
  flags->Add("mixed_b", FlagSet::Kind::kDouble, "0",
             "ntk: vLLM's mixed_b form when set (any finite value, 0 included).");
  flags->Add("attn_factor", FlagSet::Kind::kDouble, "1",
             "deepseek_yarn: multiplies cos/sin with the mscale ratio; default 1.");
  flags->Add("extrapolation_factor", FlagSet::Kind::kDouble, "1",
             "deepseek_yarn: scales YaRN's extrapolation mask; default 1.");
  flags->Add("max_position_embeddings", FlagSet::Kind::kInt, "0",
             "longrope: the model's max_position_embeddings. Set: transformers' rule (attention "
             "factor from it, long_factor iff the request's largest position + 1 > "
             "original_max_position_embeddings). 0: attention factor from --max_len, "
             "long_factor iff --max_len > original_max_position_embeddings.");
}

std::vector<std::string> ScalingFlagNames() {
  std::vector<std::string> names = {"rope_scaling"};
  for (const std::string& param : AllParams()) names.push_back(param);
  return names;
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
    if (flags.IsSet("truncate")) y->set_truncate(flags.Bool("truncate"));
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
    const int64_t expanded = flags.Int("max_position_embeddings");
    if (expanded < 0 || expanded > 0xffffffffll) {
      return UsageError(absl::StrCat("--max_position_embeddings=", expanded,
                                     ": must be in [0, 4294967295]"));
    }
    l->set_max_position_embeddings(static_cast<uint32_t>(expanded));
  } else if (variant == "dynamic_alpha") {
    config->mutable_dynamic_ntk_alpha()->set_alpha(flags.Double("alpha"));
  } else if (variant == "ntk") {
    auto* n = config->mutable_ntk();
    n->set_factor(flags.Double("factor"));
    if (flags.IsSet("mixed_b")) n->set_mixed_b(flags.Double("mixed_b"));
  } else if (variant == "deepseek_yarn") {
    auto* d = config->mutable_deepseek_yarn();
    d->set_factor(flags.Double("factor"));
    d->set_original_max_position_embeddings(original);
    d->set_beta_fast(flags.Double("beta_fast"));
    d->set_beta_slow(flags.Double("beta_slow"));
    if (flags.IsSet("mscale")) d->set_mscale(flags.Double("mscale"));
    if (flags.IsSet("mscale_all_dim")) d->set_mscale_all_dim(flags.Double("mscale_all_dim"));
    if (flags.IsSet("attn_factor")) d->set_attn_factor(flags.Double("attn_factor"));
    if (flags.IsSet("extrapolation_factor")) {
      d->set_extrapolation_factor(flags.Double("extrapolation_factor"));
    }
  } else if (variant == "proportional") {
    const int64_t pairs = flags.Int("rotated_pairs");
    if (pairs < 0 || pairs > 0xffffffffll) {
      return UsageError(
          absl::StrCat("--rotated_pairs=", pairs, ": must be in [0, 4294967295]"));
    }
    auto* p = config->mutable_proportional();
    p->set_factor(flags.Double("factor"));
    p->set_rotated_pairs(static_cast<uint32_t>(pairs));
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
                          " attention_factor=", y.attention_factor(),
                          y.has_truncate() && !y.truncate() ? " truncate=false" : "", ")");
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
                          " attention_factor=", l.attention_factor(),
                          " max_position_embeddings=", l.max_position_embeddings(), ")");
    }
    case v1::RopeConfig::kProportional:
      return absl::StrCat("proportional(factor=", config.proportional().factor(),
                          " rotated_pairs=", config.proportional().rotated_pairs(), ")");
    case v1::RopeConfig::kDynamicNtkAlpha:
      return absl::StrCat("dynamic_alpha(alpha=", config.dynamic_ntk_alpha().alpha(), ")");
    case v1::RopeConfig::kNtk:
      return absl::StrCat("ntk(factor=", config.ntk().factor(),
                          config.ntk().has_mixed_b()
                              ? absl::StrCat(" mixed_b=", config.ntk().mixed_b())
                              : std::string(),
                          ")");
    case v1::RopeConfig::kDeepseekYarn: {
      const auto& d = config.deepseek_yarn();
      return absl::StrCat("deepseek_yarn(factor=", d.factor(),
                          " original=", d.original_max_position_embeddings(),
                          " beta_fast=", d.beta_fast(), " beta_slow=", d.beta_slow(),
                          " mscale=", d.has_mscale() ? d.mscale() : 1.0,
                          " mscale_all_dim=", d.mscale_all_dim(),
                          " attn_factor=", d.has_attn_factor() ? d.attn_factor() : 1.0,
                          " extrapolation_factor=",
                          d.has_extrapolation_factor() ? d.extrapolation_factor() : 1.0, ")");
    }
    case v1::RopeConfig::SCALING_NOT_SET:
      break;
  }
  return "none";
}

namespace {

}  // namespace

std::string ExactDecimal(double v) {
  for (int digits = 15; digits < 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(text.c_str(), nullptr) == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

namespace {

std::string Exact(double v) { return ExactDecimal(v); }

std::string ExactList(const google::protobuf::RepeatedField<double>& values) {
  return absl::StrJoin(values, ",", [](std::string* out, double v) { out->append(Exact(v)); });
}

}  // namespace

std::string ScalingAsFlags(const v1::RopeConfig& config) {
  switch (config.scaling_case()) {
    case v1::RopeConfig::kLinear:
      return absl::StrCat("--rope_scaling=linear --factor=", Exact(config.linear().factor()));
    case v1::RopeConfig::kDynamicNtk:
      return absl::StrCat("--rope_scaling=dynamic --factor=", Exact(config.dynamic_ntk().factor()),
                          " --original_max_position_embeddings=",
                          config.dynamic_ntk().original_max_position_embeddings());
    case v1::RopeConfig::kYarn: {
      const auto& y = config.yarn();
      std::string out = absl::StrCat(
          "--rope_scaling=yarn --factor=", Exact(y.factor()),
          " --original_max_position_embeddings=", y.original_max_position_embeddings(),
          " --beta_fast=", Exact(y.beta_fast()), " --beta_slow=", Exact(y.beta_slow()));
      if (y.mscale() != 0) absl::StrAppend(&out, " --mscale=", Exact(y.mscale()));
      if (y.mscale_all_dim() != 0) {
        absl::StrAppend(&out, " --mscale_all_dim=", Exact(y.mscale_all_dim()));
      }
      if (y.attention_factor() != 0) {
        absl::StrAppend(&out, " --attention_factor=", Exact(y.attention_factor()));
      }
      if (y.has_truncate() && !y.truncate()) absl::StrAppend(&out, " --truncate=false");
      return out;
    }
    case v1::RopeConfig::kLlama3: {
      const auto& l = config.llama3();
      return absl::StrCat("--rope_scaling=llama3 --factor=", Exact(l.factor()),
                          " --low_freq_factor=", Exact(l.low_freq_factor()),
                          " --high_freq_factor=", Exact(l.high_freq_factor()),
                          " --original_max_position_embeddings=",
                          l.original_max_position_embeddings());
    }
    case v1::RopeConfig::kLongrope: {
      const auto& l = config.longrope();
      std::string out = absl::StrCat(
          "--rope_scaling=longrope --short_factor=", ExactList(l.short_factor()),
          " --long_factor=", ExactList(l.long_factor()),
          " --original_max_position_embeddings=", l.original_max_position_embeddings());
      if (l.attention_factor() != 0) {
        absl::StrAppend(&out, " --attention_factor=", Exact(l.attention_factor()));
      }
      if (l.max_position_embeddings() != 0) {
        absl::StrAppend(&out, " --max_position_embeddings=", l.max_position_embeddings());
      }
      return out;
    }
    case v1::RopeConfig::kProportional:
      return absl::StrCat("--rope_scaling=proportional --factor=",
                          Exact(config.proportional().factor()),
                          " --rotated_pairs=", config.proportional().rotated_pairs());
    case v1::RopeConfig::kDynamicNtkAlpha:
      return absl::StrCat("--rope_scaling=dynamic_alpha --alpha=",
                          Exact(config.dynamic_ntk_alpha().alpha()));
    case v1::RopeConfig::kNtk: {
      std::string out = absl::StrCat("--rope_scaling=ntk --factor=", Exact(config.ntk().factor()));
      if (config.ntk().has_mixed_b()) {
        absl::StrAppend(&out, " --mixed_b=", Exact(config.ntk().mixed_b()));
      }
      return out;
    }
    case v1::RopeConfig::kDeepseekYarn: {
      const auto& d = config.deepseek_yarn();
      std::string out = absl::StrCat(
          "--rope_scaling=deepseek_yarn --factor=", Exact(d.factor()),
          " --original_max_position_embeddings=", d.original_max_position_embeddings(),
          " --beta_fast=", Exact(d.beta_fast()), " --beta_slow=", Exact(d.beta_slow()));
      if (d.has_mscale()) absl::StrAppend(&out, " --mscale=", Exact(d.mscale()));
      if (d.has_mscale_all_dim()) {
        absl::StrAppend(&out, " --mscale_all_dim=", Exact(d.mscale_all_dim()));
      }
      if (d.has_attn_factor()) absl::StrAppend(&out, " --attn_factor=", Exact(d.attn_factor()));
      if (d.has_extrapolation_factor()) {
        absl::StrAppend(&out, " --extrapolation_factor=", Exact(d.extrapolation_factor()));
      }
      return out;
    }
    case v1::RopeConfig::SCALING_NOT_SET:
      break;
  }
  return "";
}

}  // namespace client
}  // namespace rope
