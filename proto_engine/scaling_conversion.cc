#include "proto_engine/scaling_conversion.h"

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
      return s;
    }
  }
  return NoScaling{};
}

}  // namespace rope
