// Every serving-engine variant through RotateStream on a real server, each
// reply checked against the double-precision references the unary tests use
// (tests/unit/reference_scaling.* for the frequencies, reference_rope.* for
// the pairing and the float8 codes): dynamic NTK with alpha, fixed NTK and
// its mixed_b form, DeepSeek's YaRN, YaRN with beta_fast == beta_slow,
// Ernie 4.5-VL's 3-D layout, NoPE layers, rotary_offset (MLA heads), partial
// rotary, both pairings (GPT-NeoX halves, GPT-J neighbours), q and k of head
// counts that do not divide, float8 outputs; then published config.json
// files (HunYuan, Kimi K2, DeepSeek-V3's whole MLA head, DeepSeek-V4's
// compress group, Llama 4's NoPE layer by index). One stream carries every
// case in turn; each case's unary Rotate must give the same bytes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/hf_fixtures.h"
#include "tests/service/service_fixture.h"
#include "tests/support/grpc_test_util.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/reference_scaling.h"

namespace rope {
namespace test {
namespace {

constexpr uint32_t kMaxLen = 4096;
constexpr int64_t kSeq = 4;
constexpr int64_t kQHeads = 3, kKHeads = 2;  // 3 % 2 != 0: Rotate takes them
const std::vector<int64_t> kPositions = {3, 100, 2000, 4095};

// One message of the stream and what the references say of it.
struct StreamCase {
  std::string name;
  v1::RotateRequest request;
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;  // the effective width
  uint32_t rotary_offset = 0;
  bool interleaved = true;
  std::vector<double> inv_freq;  // rotary_dim / 2 values
  std::vector<int> axes;         // per pair, the position axis (3-D layouts); empty: one axis
  double attention_factor = 1;
  bool identity = false;  // a NoPE layer
  std::vector<int64_t> positions;  // per token, or [axis][token]
};

// The reference rotation of `tensor` ([1, kSeq, heads, head_dim], float32).
std::vector<double> ReferenceRotate(const StreamCase& c, const v1::Tensor& tensor) {
  std::vector<double> x = Decode(FromProto(tensor));
  if (c.identity) return x;
  reference::Rope rope;
  rope.head_dim = static_cast<int>(c.head_dim);
  rope.rotary_dim = static_cast<int>(c.rotary_dim);
  rope.rotary_offset = static_cast<int>(c.rotary_offset);
  rope.interleaved = c.interleaved;
  const int64_t heads = static_cast<int64_t>(x.size()) / (kSeq * c.head_dim);
  for (int64_t s = 0; s < kSeq; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      double* head = x.data() + (s * heads + h) * c.head_dim;
      for (uint32_t i = 0; i < c.rotary_dim / 2; ++i) {
        const int64_t pos = c.axes.empty() ? c.positions[s] : c.positions[c.axes[i] * kSeq + s];
        const double angle = static_cast<double>(pos) * c.inv_freq[i];
        const double cos = c.attention_factor * std::cos(angle);
        const double sin = c.attention_factor * std::sin(angle);
        int f0, f1;
        reference::Pair(rope, static_cast<int>(i), &f0, &f1);
        const double x0 = head[f0], x1 = head[f1];
        head[f0] = x0 * cos - x1 * sin;
        head[f1] = x0 * sin + x1 * cos;
      }
    }
  }
  return x;
}

// `got` (the reply's tensor) against the reference values `want`: float32
// within float32 rounding of the arithmetic; float8 codes between the codes
// of want * scale moved by that same tolerance (rounding is monotone, so a
// server one float32 rounding away from the double value may land on either
// neighbour, never further).
::testing::AssertionResult Matches(const v1::Tensor& got, const std::vector<double>& want,
                                   v1::DType output_dtype, double scale) {
  if (output_dtype != v1::FLOAT8_E4M3FN && output_dtype != v1::FLOAT8_E5M2) {
    const std::vector<double> values = Decode(FromProto(got));
    if (values.size() != want.size()) {
      return ::testing::AssertionFailure() << values.size() << " values, want " << want.size();
    }
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::abs(values[i] - want[i]) > 2e-6 * (1 + std::abs(want[i]))) {
        return ::testing::AssertionFailure()
               << "element " << i << " is " << values[i] << ", reference " << want[i];
      }
    }
    return ::testing::AssertionSuccess();
  }
  const bool e5m2 = output_dtype == v1::FLOAT8_E5M2;
  if (got.dtype() != output_dtype || got.data().size() != want.size()) {
    return ::testing::AssertionFailure() << "dtype " << got.dtype() << ", " << got.data().size()
                                         << " bytes, want " << want.size();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i] * scale;
    const double tolerance = 2e-6 * (1 + std::abs(w));
    const double low = reference::Float8ToDouble(reference::DoubleToFloat8(w - tolerance, e5m2), e5m2);
    const double high = reference::Float8ToDouble(reference::DoubleToFloat8(w + tolerance, e5m2), e5m2);
    const double value = reference::Float8ToDouble(static_cast<uint8_t>(got.data()[i]), e5m2);
    if (!(value >= low && value <= high)) {
      return ::testing::AssertionFailure() << "element " << i << " decodes to " << value
                                           << ", reference " << w << " rounds to [" << low << ", "
                                           << high << "]";
    }
  }
  return ::testing::AssertionSuccess();
}

// A case over explicit fields: q [1, 4, 3, D] and k [1, 4, 2, D] of seeded
// values at kPositions.
StreamCase Explicit(std::string name, v1::Layout layout, uint32_t head_dim, uint32_t rotary_dim,
                    double theta, unsigned seed) {
  StreamCase c;
  c.name = std::move(name);
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.interleaved = layout == v1::INTERLEAVED;
  c.positions = kPositions;
  c.request = MakeRotateRequest(1, kSeq, kQHeads, head_dim, kMaxLen, 0, seed);
  *c.request.mutable_k() = MakeRotateRequest(1, kSeq, kKHeads, head_dim, kMaxLen, 0, seed + 1).q();
  *c.request.mutable_config() =
      MakeConfig(head_dim, kMaxLen, layout, rotary_dim == head_dim ? 0 : rotary_dim, theta);
  for (int64_t p : kPositions) c.request.add_positions(p);
  c.inv_freq = reference::DefaultInvFreq(theta, static_cast<int>(rotary_dim));
  return c;
}

std::vector<StreamCase> ExplicitCases() {
  std::vector<StreamCase> out;
  for (const v1::Layout layout : {v1::INTERLEAVED, v1::HALF}) {
    const std::string style = layout == v1::INTERLEAVED ? " gptj" : " neox";
    {
      StreamCase c = Explicit("plain" + style, layout, 32, 32, 10000, 1);
      out.push_back(c);
    }
    {
      StreamCase c = Explicit("partial rotary 16 of 48" + style, layout, 48, 16, 10000, 3);
      out.push_back(c);
    }
    {
      // MLA's whole head in small: 32 nope features, then 16 rotating ones.
      StreamCase c = Explicit("rotary_offset 32" + style, layout, 48, 16, 10000, 5);
      c.rotary_offset = 32;
      c.request.mutable_config()->set_rotary_dim(0);
      c.request.mutable_config()->set_rotary_offset(32);
      out.push_back(c);
    }
    {
      StreamCase c = Explicit("dynamic_alpha" + style, layout, 32, 32, 10000, 7);
      c.request.mutable_config()->mutable_dynamic_ntk_alpha()->set_alpha(1000);
      c.inv_freq = reference::DynamicNtkAlphaInvFreq(10000, 32, 1000);
      out.push_back(c);
    }
    {
      StreamCase c = Explicit("ntk" + style, layout, 32, 32, 10000, 9);
      c.request.mutable_config()->mutable_ntk()->set_factor(4);
      c.inv_freq = reference::NtkInvFreq(10000, 32, 4, false, -1);
      out.push_back(c);
    }
    {
      StreamCase c = Explicit("ntk mixed_b" + style, layout, 32, 32, 10000, 11);
      c.request.mutable_config()->mutable_ntk()->set_factor(4);
      c.request.mutable_config()->mutable_ntk()->set_mixed_b(0.75);
      c.inv_freq = reference::NtkInvFreq(10000, 32, 4, true, 0.75);
      out.push_back(c);
    }
    {
      StreamCase c = Explicit("deepseek_yarn" + style, layout, 32, 32, 10000, 13);
      v1::DeepseekYarnScaling* y = c.request.mutable_config()->mutable_deepseek_yarn();
      y->set_factor(16);
      y->set_original_max_position_embeddings(256);
      y->set_mscale(0.707);
      y->set_mscale_all_dim(0.5);
      c.inv_freq = reference::DeepseekYarnInvFreq(10000, 32, 16, 256, 32, 1, 1);
      c.attention_factor = reference::DeepseekYarnMscale(16, 0.707, 0.5, 1);
      out.push_back(c);
    }
    {
      // Kimi K2's form: the correction range collapses to one point.
      StreamCase c = Explicit("yarn beta_fast == beta_slow" + style, layout, 32, 32, 50000, 15);
      v1::YarnScaling* y = c.request.mutable_config()->mutable_yarn();
      y->set_factor(32);
      y->set_original_max_position_embeddings(256);
      y->set_beta_fast(1);
      y->set_beta_slow(1);
      c.inv_freq = reference::YarnInvFreq(50000, 32, 32, 256, 1, 1);
      c.attention_factor = reference::YarnAttentionFactor(32, 0, 0, 0);
      out.push_back(c);
    }
    {
      // Ernie 4.5-VL: h = w = 4 frequencies, t = 8 (rotary_dim 32), three
      // different positions per token.
      StreamCase c = Explicit("ernie 3-D" + style, layout, 32, 32, 500000, 17);
      v1::Mrope* m = c.request.mutable_config()->mutable_mrope();
      for (uint32_t s : {8u, 4u, 4u}) m->add_section(s);
      c.request.mutable_config()->set_mrope_ernie_3d(true);
      c.request.clear_positions();
      c.positions.clear();
      for (int axis = 0; axis < 3; ++axis) {
        for (int64_t s = 0; s < kSeq; ++s) {
          c.positions.push_back(kPositions[s] / (axis + 1) + axis);
          c.request.add_positions(c.positions.back());
        }
      }
      const std::vector<double> inv = reference::DefaultInvFreq(500000, 32);
      c.inv_freq.clear();
      for (const reference::ErniePair& pair : reference::ErnieLayout(4, 4, 8)) {
        c.axes.push_back(pair.axis);
        c.inv_freq.push_back(inv[pair.frequency]);
      }
      out.push_back(c);
    }
    {
      StreamCase c = Explicit("no_rope" + style, layout, 32, 32, 10000, 19);
      c.request.mutable_config()->mutable_no_rope()->set_floor_scale(8192);
      c.request.mutable_config()->mutable_no_rope()->set_attn_scale(0.1);
      c.identity = true;
      out.push_back(c);
    }
    for (const v1::DType fp8 : {v1::FLOAT8_E4M3FN, v1::FLOAT8_E5M2}) {
      StreamCase c = Explicit(std::string(fp8 == v1::FLOAT8_E5M2 ? "float8_e5m2" : "float8_e4m3fn") +
                                  " with rotary_offset and yarn" + style,
                              layout, 48, 16, 10000, fp8 == v1::FLOAT8_E5M2 ? 21 : 23);
      c.rotary_offset = 32;
      c.request.mutable_config()->set_rotary_dim(0);
      c.request.mutable_config()->set_rotary_offset(32);
      c.request.mutable_config()->mutable_yarn()->set_factor(8);
      c.request.mutable_config()->mutable_yarn()->set_original_max_position_embeddings(512);
      c.inv_freq = reference::YarnInvFreq(10000, 16, 8, 512, 32, 1);
      c.attention_factor = reference::YarnAttentionFactor(8, 0, 0, 0);
      c.request.set_output_dtype(fp8);
      c.request.set_output_scale(20);
      c.request.set_k_output_scale(0.25);
      out.push_back(c);
    }
  }
  return out;
}

// A case over a published config.json (tests/fixtures/hf_configs), with the
// reference's parameters as that file states them.
StreamCase FromFixture(std::string name, const char* fixture, v1::Layout layout,
                       uint32_t head_dim, uint32_t rotary_dim, double theta, unsigned seed) {
  StreamCase c = Explicit(std::move(name), layout, head_dim, rotary_dim, theta, seed);
  v1::RopeConfig config;
  config.set_hf_config_json(HfConfigFixture(fixture));
  config.set_max_len(kMaxLen);
  config.set_layout(layout);
  *c.request.mutable_config() = config;
  return c;
}

std::vector<StreamCase> FixtureCases() {
  std::vector<StreamCase> out;
  {
    // "dynamic" with alpha 1000, rope_theta 10000, head_dim 128.
    StreamCase c = FromFixture("Hunyuan-7B-Instruct", "Hunyuan-7B-Instruct", v1::HALF, 128, 128,
                               10000, 31);
    c.inv_freq = reference::DynamicNtkAlphaInvFreq(10000, 128, 1000);
    out.push_back(c);
  }
  {
    // yarn factor 32 over 4096, beta_fast == beta_slow == 1, mscale ==
    // mscale_all_dim == 1; rope_theta 50000, qk_rope_head_dim 64.
    StreamCase c =
        FromFixture("Kimi-K2-Instruct", "Kimi-K2-Instruct", v1::INTERLEAVED, 64, 64, 50000, 33);
    c.inv_freq = reference::YarnInvFreq(50000, 64, 32, 4096, 1, 1);
    c.attention_factor = reference::YarnAttentionFactor(32, 1, 1, 0);
    out.push_back(c);
  }
  {
    // The whole MLA head: 128 nope features, then qk_rope_head_dim 64;
    // yarn factor 40 over 4096, mscale == mscale_all_dim == 1.
    StreamCase c =
        FromFixture("DeepSeek-V3 whole head", "DeepSeek-V3", v1::INTERLEAVED, 192, 64, 10000, 35);
    c.rotary_offset = 128;
    c.inv_freq = reference::YarnInvFreq(10000, 64, 40, 4096, 32, 1);
    c.attention_factor = reference::YarnAttentionFactor(40, 1, 1, 0);
    out.push_back(c);
  }
  {
    // The rope part of the same heads alone.
    StreamCase c =
        FromFixture("DeepSeek-V3 rope part", "DeepSeek-V3", v1::INTERLEAVED, 64, 64, 10000, 37);
    c.inv_freq = reference::YarnInvFreq(10000, 64, 40, 4096, 32, 1);
    c.attention_factor = reference::YarnAttentionFactor(40, 1, 1, 0);
    out.push_back(c);
  }
  {
    // DeepSeek-V4's layer 2 (compress_ratios[2] == 4: rope group compress):
    // compress_rope_theta 160000 with rope_scaling's yarn (factor 16 over
    // 65536), attention factor 1 (DeepseekV4Config); the whole 512-feature
    // head, its last qk_rope_head_dim 64 rotating.
    StreamCase c = FromFixture("DeepSeek-V4 compress layer 2", "DeepSeek-V4-Flash",
                               v1::INTERLEAVED, 512, 64, 160000, 41);
    c.request.mutable_config()->set_hf_layer_index(2);
    c.rotary_offset = 448;
    c.inv_freq = reference::YarnInvFreq(160000, 64, 16, 65536, 32, 1);
    out.push_back(c);
  }
  {
    // Llama 4 Scout's layer 3 (no_rope_layers[3] == 0): the identity.
    StreamCase c = FromFixture("Llama 4 NoPE layer 3", "Llama-4-Scout-17B-16E-Instruct",
                               v1::INTERLEAVED, 128, 128, 500000, 39);
    c.request.mutable_config()->set_hf_layer_index(3);
    c.identity = true;
    out.push_back(c);
  }
  return out;
}

using VariantsStreamTest = ServiceTest;

TEST_F(VariantsStreamTest, EveryVariantThroughRotateStreamMatchesTheReference) {
  std::vector<StreamCase> cases = ExplicitCases();
  for (StreamCase& c : FixtureCases()) cases.push_back(std::move(c));

  grpc::ClientContext stream_context;
  SetDeadline(&stream_context);
  auto stream = stub_->RotateStream(&stream_context);
  for (const StreamCase& c : cases) {
    const std::vector<double> q_want = ReferenceRotate(c, c.request.q());
    const std::vector<double> k_want = ReferenceRotate(c, c.request.k());
    const double q_scale = c.request.output_scale() != 0 ? c.request.output_scale() : 1;
    const double k_scale = c.request.k_output_scale() != 0 ? c.request.k_output_scale() : q_scale;

    ASSERT_TRUE(stream->Write(c.request)) << c.name;
    v1::RotateResponse streamed;
    ASSERT_TRUE(stream->Read(&streamed)) << c.name;
    EXPECT_TRUE(Matches(streamed.q(), q_want, c.request.output_dtype(), q_scale)) << c.name << " q";
    EXPECT_TRUE(Matches(streamed.k(), k_want, c.request.output_dtype(), k_scale)) << c.name << " k";
    if (c.identity && c.request.output_dtype() == v1::DTYPE_UNSPECIFIED) {
      EXPECT_EQ(streamed.q().data(), c.request.q().data()) << c.name;
      EXPECT_EQ(streamed.k().data(), c.request.k().data()) << c.name;
    }

    v1::RotateResponse unary;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, c.request, &unary), grpc::StatusCode::OK, ""))
        << c.name;
    EXPECT_EQ(unary.SerializeAsString(), streamed.SerializeAsString()) << c.name;
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));
}

}  // namespace
}  // namespace test
}  // namespace rope
