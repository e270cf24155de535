#include "core/proto_engine/scaling_conversion.h"

#include <variant>

namespace rope {

ScalingConfig ScalingFromProto(const v1::RopeConfig& proto) {
  switch (proto.scaling_case()) {
    case v1::RopeConfig::SCALING_NOT_SET:
      return NoScaling{};
    case v1::RopeConfig::kLinear: {
      LinearScaling s;
      s.factor = proto.linear().factor();
      return s;
    }
    case v1::RopeConfig::kDynamicNtk: {
      DynamicNtkScaling s;
      s.factor = proto.dynamic_ntk().factor();
      s.original_max_position_embeddings = proto.dynamic_ntk().original_max_position_embeddings();
      return s;
    }
    case v1::RopeConfig::kYarn: {
      const v1::YarnScaling& p = proto.yarn();
      YarnScaling s;
      s.factor = p.factor();
      s.original_max_position_embeddings = p.original_max_position_embeddings();
      s.beta_fast = p.beta_fast();
      s.beta_slow = p.beta_slow();
      s.mscale = p.mscale();
      s.mscale_all_dim = p.mscale_all_dim();
      s.attention_factor = p.attention_factor();
      s.truncate = !p.has_truncate() || p.truncate();
      return s;
    }
    case v1::RopeConfig::kLlama3: {
      const v1::Llama3Scaling& p = proto.llama3();
      Llama3Scaling s;
      s.factor = p.factor();
      s.low_freq_factor = p.low_freq_factor();
      s.high_freq_factor = p.high_freq_factor();
      s.original_max_position_embeddings = p.original_max_position_embeddings();
      return s;
    }
    case v1::RopeConfig::kLongrope: {
      const v1::LongRopeScaling& p = proto.longrope();
      LongRopeScaling s;
      s.short_factor.assign(p.short_factor().begin(), p.short_factor().end());
      s.long_factor.assign(p.long_factor().begin(), p.long_factor().end());
      s.original_max_position_embeddings = p.original_max_position_embeddings();
      s.attention_factor = p.attention_factor();
      s.max_position_embeddings = p.max_position_embeddings();
      return s;
    }
    case v1::RopeConfig::kProportional: {
      ProportionalScaling s;
      s.factor = proto.proportional().factor();
      s.rotated_pairs = proto.proportional().rotated_pairs();
      return s;
    }
    case v1::RopeConfig::kDynamicNtkAlpha: {
      DynamicNtkAlphaScaling s;
      s.alpha = proto.dynamic_ntk_alpha().alpha();
      return s;
    }
    case v1::RopeConfig::kNtk: {
      NtkScaling s;
      s.factor = proto.ntk().factor();
      s.has_mixed_b = proto.ntk().has_mixed_b();
      s.mixed_b = proto.ntk().mixed_b();
      return s;
    }
    case v1::RopeConfig::kDeepseekYarn: {
      // Absent optional fields take vLLM's defaults (DeepseekYarnScaling).
      const v1::DeepseekYarnScaling& p = proto.deepseek_yarn();
      DeepseekYarnScaling s;
      s.factor = p.factor();
      s.original_max_position_embeddings = p.original_max_position_embeddings();
      s.beta_fast = p.beta_fast();
      s.beta_slow = p.beta_slow();
      if (p.has_mscale()) s.mscale = p.mscale();
      if (p.has_mscale_all_dim()) s.mscale_all_dim = p.mscale_all_dim();
      if (p.has_attn_factor()) s.attn_factor = p.attn_factor();
      if (p.has_extrapolation_factor()) s.extrapolation_factor = p.extrapolation_factor();
      return s;
    }
  }
  return NoScaling{};
}

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

void ScalingToProto(const ScalingConfig& scaling, v1::RopeConfig* proto) {
  proto->clear_scaling();
  std::visit(Overloaded{
                 [](const NoScaling&) {},
                 [proto](const LinearScaling& s) { proto->mutable_linear()->set_factor(s.factor); },
                 [proto](const DynamicNtkScaling& s) {
                   auto* p = proto->mutable_dynamic_ntk();
                   p->set_factor(s.factor);
                   p->set_original_max_position_embeddings(s.original_max_position_embeddings);
                 },
                 [proto](const YarnScaling& s) {
                   auto* p = proto->mutable_yarn();
                   p->set_factor(s.factor);
                   p->set_original_max_position_embeddings(s.original_max_position_embeddings);
                   p->set_beta_fast(s.beta_fast);
                   p->set_beta_slow(s.beta_slow);
                   p->set_mscale(s.mscale);
                   p->set_mscale_all_dim(s.mscale_all_dim);
                   p->set_attention_factor(s.attention_factor);
                   p->set_truncate(s.truncate);
                 },
                 [proto](const Llama3Scaling& s) {
                   auto* p = proto->mutable_llama3();
                   p->set_factor(s.factor);
                   p->set_low_freq_factor(s.low_freq_factor);
                   p->set_high_freq_factor(s.high_freq_factor);
                   p->set_original_max_position_embeddings(s.original_max_position_embeddings);
                 },
                 [proto](const LongRopeScaling& s) {
                   auto* p = proto->mutable_longrope();
                   p->mutable_short_factor()->Assign(s.short_factor.begin(), s.short_factor.end());
                   p->mutable_long_factor()->Assign(s.long_factor.begin(), s.long_factor.end());
                   p->set_original_max_position_embeddings(s.original_max_position_embeddings);
                   p->set_attention_factor(s.attention_factor);
                   p->set_max_position_embeddings(s.max_position_embeddings);
                 },
                 [proto](const ProportionalScaling& s) {
                   auto* p = proto->mutable_proportional();
                   p->set_factor(s.factor);
                   p->set_rotated_pairs(s.rotated_pairs);
                 },
                 [proto](const DynamicNtkAlphaScaling& s) {
                   proto->mutable_dynamic_ntk_alpha()->set_alpha(s.alpha);
                 },
                 [proto](const NtkScaling& s) {
                   auto* p = proto->mutable_ntk();
                   p->set_factor(s.factor);
                   if (s.has_mixed_b) p->set_mixed_b(s.mixed_b);
                 },
                 [proto](const DeepseekYarnScaling& s) {
                   auto* p = proto->mutable_deepseek_yarn();
                   p->set_factor(s.factor);
                   p->set_original_max_position_embeddings(s.original_max_position_embeddings);
                   p->set_beta_fast(s.beta_fast);
                   p->set_beta_slow(s.beta_slow);
                   p->set_mscale(s.mscale);
                   p->set_mscale_all_dim(s.mscale_all_dim);
                   p->set_attn_factor(s.attn_factor);
                   p->set_extrapolation_factor(s.extrapolation_factor);
                 },
             },
             scaling);
}

}  // namespace rope
