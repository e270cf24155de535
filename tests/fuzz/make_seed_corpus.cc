// Writes the fuzzer's seed corpus: small valid requests of each RPC, dtype,
// layout and scaling variant, in the input format of request_fuzz_target.h.
// scripts/fuzz.sh runs it into tests/fuzz/corpus; the output is deterministic,
// so the committed files change only when this program does.
//
// Usage: rope_fuzz_seed_corpus OUT_DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "rope/v1/rope.pb.h"
#include "tests/fuzz/request_fuzz_target.h"

namespace rope {
namespace fuzz {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Deterministic values in about [-1, 1): float32 as is, bfloat16 as the
// upper half of the float32, float16 from a few exact binary16 patterns.
v1::Tensor MakeTensor(v1::DType dtype, const std::vector<int64_t>& shape, int salt) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  std::string* data = t.mutable_data();
  for (int64_t i = 0; i < Elements(shape); ++i) {
    const float value = static_cast<float>(((i * 7 + salt * 13) % 41) - 20) / 20.0f;
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if (dtype == v1::FLOAT32) {
      data->append(reinterpret_cast<const char*>(&bits), 4);
    } else {
      const uint16_t half = dtype == v1::BFLOAT16
                                ? static_cast<uint16_t>(bits >> 16)
                                : static_cast<uint16_t>(0x3800 + ((i + salt) % 64) * 16 +
                                                        (value < 0 ? 0x8000 : 0));
      data->append(reinterpret_cast<const char*>(&half), 2);
    }
  }
  return t;
}

v1::RopeConfig Config(uint32_t head_dim, uint32_t max_len, v1::Layout layout = v1::INTERLEAVED,
                      uint32_t rotary_dim = 0, double theta = 0) {
  v1::RopeConfig c;
  c.set_head_dim(head_dim);
  c.set_max_len(max_len);
  c.set_layout(layout);
  c.set_rotary_dim(rotary_dim);
  c.set_theta(theta);
  return c;
}

bool Write(const std::string& dir, const std::string& name, RequestKind kind,
           const google::protobuf::Message& message) {
  std::string bytes(1, static_cast<char>(kind));
  if (!message.AppendToString(&bytes)) return false;
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

std::vector<std::pair<std::string, v1::RotateRequest>> RotateSeeds() {
  std::vector<std::pair<std::string, v1::RotateRequest>> seeds;
  v1::RotateRequest r;
  *r.mutable_config() = Config(8, 16);
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 1);
  r.set_start_pos(3);
  seeds.emplace_back("rotate_f32_start_pos", r);

  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 32, v1::HALF, 4);
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {2, 2, 4, 8}, 2);
  *r.mutable_k() = MakeTensor(v1::FLOAT32, {2, 2, 2, 8}, 3);
  for (int64_t p : {5, 0, 31, 7}) r.add_positions(p);
  seeds.emplace_back("rotate_f32_gqa_positions_half_partial", r);

  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 16, v1::HALF);
  *r.mutable_q() = MakeTensor(v1::FLOAT16, {3, 1, 8}, 4);
  *r.mutable_k() = MakeTensor(v1::FLOAT16, {3, 1, 8}, 5);
  r.set_inverse(true);
  seeds.emplace_back("rotate_f16_rank3_inverse", r);

  r = v1::RotateRequest();
  *r.mutable_config() = Config(16, 64, v1::INTERLEAVED, 0, 500000);
  *r.mutable_q() = MakeTensor(v1::BFLOAT16, {1, 3, 1, 16}, 6);
  for (int64_t p : {60, 1, 2}) r.add_positions(p);
  seeds.emplace_back("rotate_bf16_theta", r);

  v1::RotateRequest scaled;
  *scaled.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 7);
  scaled.set_start_pos(40);

  r = scaled;
  *r.mutable_config() = Config(8, 64);
  r.mutable_config()->mutable_linear()->set_factor(4);
  seeds.emplace_back("rotate_linear", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64);
  r.mutable_config()->mutable_dynamic_ntk()->set_factor(2);
  r.mutable_config()->mutable_dynamic_ntk()->set_original_max_position_embeddings(16);
  seeds.emplace_back("rotate_dynamic_ntk", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64);
  r.mutable_config()->mutable_yarn()->set_factor(4);
  r.mutable_config()->mutable_yarn()->set_original_max_position_embeddings(16);
  r.mutable_config()->mutable_yarn()->set_mscale(1);
  r.mutable_config()->mutable_yarn()->set_mscale_all_dim(0.5);
  seeds.emplace_back("rotate_yarn", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64, v1::HALF, 0, 500000);
  r.mutable_config()->mutable_llama3()->set_original_max_position_embeddings(16);
  seeds.emplace_back("rotate_llama3", r);
  r.mutable_config()->set_angle_precision(v1::ANGLE_FLOAT32);
  seeds.emplace_back("rotate_llama3_float32_angles", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64);
  v1::LongRopeScaling* longrope = r.mutable_config()->mutable_longrope();
  longrope->set_original_max_position_embeddings(16);
  for (double f : {1.0, 1.5, 2.0, 4.0}) longrope->add_short_factor(f);
  for (double f : {1.0, 2.0, 8.0, 16.0}) longrope->add_long_factor(f);
  seeds.emplace_back("rotate_longrope", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64);
  r.mutable_config()->mutable_yarn()->set_factor(32);
  r.mutable_config()->mutable_yarn()->set_original_max_position_embeddings(16);
  r.mutable_config()->mutable_yarn()->set_truncate(false);
  seeds.emplace_back("rotate_yarn_no_truncate", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64, v1::HALF);
  r.mutable_config()->mutable_proportional()->set_rotated_pairs(1);
  seeds.emplace_back("rotate_proportional", r);

  // M-RoPE: 3*B*S positions, [axis][b][s].
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 64, v1::HALF);
  for (uint32_t s : {2, 1, 1}) r.mutable_config()->mutable_mrope()->add_section(s);
  r.mutable_config()->mutable_mrope()->set_interleaved(true);
  *r.mutable_q() = MakeTensor(v1::BFLOAT16, {2, 2, 1, 8}, 18);
  for (int64_t p : {1, 2, 1, 2, 1, 3, 1, 4, 1, 5, 1, 6}) r.add_positions(p);
  seeds.emplace_back("rotate_mrope_interleaved", r);

  // A model's config.json instead of the fields.
  r = scaled;
  *r.mutable_config() = Config(0, 64);
  r.mutable_config()->set_hf_config_json(
      R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,)"
      R"( "max_position_embeddings": 64, "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0,)"
      R"( "low_freq_factor": 1.0, "high_freq_factor": 4.0,)"
      R"( "original_max_position_embeddings": 16, "rope_type": "llama3"}})");
  seeds.emplace_back("rotate_hf_config_llama3", r);

  r = v1::RotateRequest();
  *r.mutable_config() = Config(0, 64, v1::HALF);
  r.mutable_config()->set_hf_config_json(
      R"({"model_type": "qwen3_vl", "text_config": {"head_dim": 8, "rope_theta": 5000000,)"
      R"( "rope_scaling": {"mrope_interleaved": true, "mrope_section": [2, 1, 1],)"
      R"( "rope_type": "default"}}})");
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 19);
  for (int64_t p : {3, 4, 3, 5, 3, 6}) r.add_positions(p);
  seeds.emplace_back("rotate_hf_config_mrope", r);

  // The serving engines' variants.
  r = scaled;
  *r.mutable_config() = Config(8, 64);
  r.mutable_config()->mutable_dynamic_ntk_alpha()->set_alpha(1000);
  seeds.emplace_back("rotate_dynamic_alpha", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64, v1::HALF);
  r.mutable_config()->mutable_ntk()->set_factor(4);
  r.mutable_config()->mutable_ntk()->set_mixed_b(0.5);
  seeds.emplace_back("rotate_ntk_mixed_b", r);

  r = scaled;
  *r.mutable_config() = Config(8, 64);
  v1::DeepseekYarnScaling* deepseek = r.mutable_config()->mutable_deepseek_yarn();
  deepseek->set_factor(40);
  deepseek->set_original_max_position_embeddings(16);
  deepseek->set_mscale(0.707);
  deepseek->set_mscale_all_dim(0.707);
  seeds.emplace_back("rotate_deepseek_yarn", r);

  // MLA's whole head: 4 features that pass through, then 4 that rotate; q
  // and k with head counts that do not divide.
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 16, v1::INTERLEAVED, 4);
  r.mutable_config()->set_rotary_offset(4);
  *r.mutable_q() = MakeTensor(v1::BFLOAT16, {1, 2, 3, 8}, 22);
  *r.mutable_k() = MakeTensor(v1::BFLOAT16, {1, 2, 2, 8}, 23);
  r.set_start_pos(5);
  seeds.emplace_back("rotate_rotary_offset_q3_k2", r);

  // Float8 outputs with their scales.
  r = scaled;
  *r.mutable_config() = Config(8, 64, v1::HALF);
  *r.mutable_k() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 24);
  r.set_output_dtype(v1::FLOAT8_E4M3FN);
  r.set_output_scale(64);
  r.set_k_output_scale(0.5);
  seeds.emplace_back("rotate_float8_e4m3_scales", r);

  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 16);
  *r.mutable_q() = MakeTensor(v1::FLOAT16, {2, 1, 8}, 25);
  r.set_output_dtype(v1::FLOAT8_E5M2);
  seeds.emplace_back("rotate_float8_e5m2", r);

  // A NoPE layer, explicit and from a config.json's layer index.
  r = scaled;
  *r.mutable_config() = Config(8, 64);
  r.mutable_config()->mutable_no_rope();
  seeds.emplace_back("rotate_no_rope", r);

  r = scaled;
  *r.mutable_config() = Config(0, 64);
  r.mutable_config()->set_hf_config_json(
      R"({"model_type": "llama4_text", "head_dim": 8, "num_hidden_layers": 4,)"
      R"( "no_rope_layers": [1, 1, 1, 0], "rope_theta": 500000.0, "floor_scale": 8,)"
      R"( "attn_scale": 0.1})");
  r.mutable_config()->set_hf_layer_index(3);
  seeds.emplace_back("rotate_hf_config_nope_layer", r);

  // Ernie 4.5-VL's 3-D positions: sections (t, h, w) = (2, 1, 1).
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 64);
  for (uint32_t s : {2, 1, 1}) r.mutable_config()->mutable_mrope()->add_section(s);
  r.mutable_config()->set_mrope_ernie_3d(true);
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 26);
  for (int64_t p : {4, 5, 6, 7, 8, 9}) r.add_positions(p);
  seeds.emplace_back("rotate_mrope_ernie_3d", r);

  // DeepSeek's MLA config.json with a whole-head tensor.
  r = v1::RotateRequest();
  *r.mutable_config() = Config(0, 64);
  r.mutable_config()->set_hf_config_json(
      R"({"model_type": "deepseek_v3", "qk_rope_head_dim": 4, "qk_nope_head_dim": 4,)"
      R"( "max_position_embeddings": 64, "rope_theta": 10000, "rope_scaling": {"type": "yarn",)"
      R"( "factor": 4, "original_max_position_embeddings": 16, "beta_fast": 1, "beta_slow": 1,)"
      R"( "mscale": 0.707, "mscale_all_dim": 0.707}})");
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 27);
  r.set_start_pos(7);
  seeds.emplace_back("rotate_hf_config_mla_whole_head", r);

  // Axial RoPE (two axes of 4 features), per-axis positions [axis][s].
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 32);
  for (uint32_t dim : {4, 4}) r.mutable_config()->mutable_axial()->add_axes()->set_dim(dim);
  r.mutable_config()->mutable_axial()->mutable_axes(1)->set_theta_rescale(2);
  r.mutable_config()->mutable_axial()->mutable_axes(1)->set_interpolation(0.5);
  *r.mutable_q() = MakeTensor(v1::BFLOAT16, {1, 3, 2, 8}, 20);
  for (int64_t p : {0, 1, 2, 5, 6, 7}) r.add_positions(p);
  seeds.emplace_back("rotate_axial", r);

  // Fractional positions, and positions built from a grid.
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 32, v1::HALF);
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 3, 1, 8}, 21);
  for (double p : {0.5, 1.25, 30.75}) r.add_fractional_positions(p);
  seeds.emplace_back("rotate_fractional", r);

  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 32);
  for (uint32_t dim : {2, 2, 4}) r.mutable_config()->mutable_axial()->add_axes()->set_dim(dim);
  *r.mutable_q() = MakeTensor(v1::FLOAT16, {1, 4, 1, 8}, 22);
  v1::PositionGrid* text = r.mutable_build_positions()->add_grids();
  for (int64_t d : {1, 1, 1}) text->add_size(d);
  v1::PositionGrid* image = r.mutable_build_positions()->add_grids();
  for (int64_t d : {1, 1, 3}) image->add_size(d);
  for (double start : {1.0, 0.0, 0.5}) image->add_start(start);
  seeds.emplace_back("rotate_build_grid", r);

  // By reference, in the fuzz target's 64 KiB region "fuzz": q in place, k
  // into k_out.
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 16);
  r.mutable_q()->set_dtype(v1::FLOAT32);
  for (int64_t d : {1, 2, 2, 8}) r.mutable_q()->add_shape(d);
  r.mutable_q()->mutable_shm()->set_region("fuzz");
  r.mutable_q()->mutable_shm()->set_offset(64);
  r.mutable_q()->mutable_shm()->set_byte_size(128);
  *r.mutable_k() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 20);
  r.mutable_k_out()->set_region("fuzz");
  r.mutable_k_out()->set_offset(4096);
  r.mutable_k_out()->set_byte_size(64);
  r.set_start_pos(2);
  seeds.emplace_back("rotate_shm_in_place_and_out", r);

  // Varint-heavy: many packed positions, each 1 byte on the wire and 8
  // parsed (one per token of q's sequence).
  r = v1::RotateRequest();
  *r.mutable_config() = Config(8, 4096);
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 512, 1, 8}, 21);
  for (int64_t p = 0; p < 512; ++p) r.add_positions(p % 100);
  seeds.emplace_back("rotate_varint_heavy_positions", r);

  // JSON-heavy: a config.json nested exactly 64 levels (the limit) and one
  // with many empty objects (linear-time parsing).
  r = v1::RotateRequest();
  *r.mutable_config() = Config(0, 16);
  std::string nested = R"({"rope_theta": 10000, "head_dim": 8, "x": )";
  for (int i = 0; i < 62; ++i) nested += R"({"a":)";
  nested += "{}" + std::string(62, '}') + "}";
  r.mutable_config()->set_hf_config_json(nested);
  *r.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 22);
  seeds.emplace_back("rotate_hf_config_64_levels", r);

  std::string objects = R"({"rope_theta": 10000, "head_dim": 8, "x": [)";
  for (int i = 0; i < 2000; ++i) objects += "{},";
  objects += "{}]}";
  r.mutable_config()->set_hf_config_json(objects);
  seeds.emplace_back("rotate_hf_config_many_empty_objects", r);
  return seeds;
}

std::vector<std::pair<std::string, v1::AttentionScoresRequest>> AttentionSeeds() {
  std::vector<std::pair<std::string, v1::AttentionScoresRequest>> seeds;
  v1::AttentionScoresRequest a;
  *a.mutable_config() = Config(8, 16);
  *a.mutable_q() = MakeTensor(v1::FLOAT32, {1, 3, 2, 8}, 8);
  *a.mutable_k() = MakeTensor(v1::FLOAT32, {1, 4, 1, 8}, 9);
  *a.mutable_v() = MakeTensor(v1::FLOAT32, {1, 4, 1, 3}, 10);
  a.set_q_start_pos(1);
  a.set_causal(true);
  a.set_softmax(true);
  seeds.emplace_back("attention_f32_causal_softmax_v", a);

  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 16, v1::HALF, 4);
  *a.mutable_q() = MakeTensor(v1::FLOAT32, {2, 2, 8}, 11);
  *a.mutable_k() = MakeTensor(v1::FLOAT32, {3, 2, 8}, 12);
  a.set_scale(0.5);
  a.set_q_start_pos(2);
  seeds.emplace_back("attention_f32_rank3_scale", a);

  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 32);
  a.mutable_config()->mutable_yarn()->set_factor(2);
  a.mutable_config()->mutable_yarn()->set_original_max_position_embeddings(8);
  *a.mutable_q() = MakeTensor(v1::BFLOAT16, {1, 2, 2, 8}, 13);
  *a.mutable_k() = MakeTensor(v1::BFLOAT16, {1, 5, 2, 8}, 14);
  *a.mutable_v() = MakeTensor(v1::BFLOAT16, {1, 5, 2, 2}, 15);
  a.set_k_start_pos(20);
  a.set_softmax(true);
  seeds.emplace_back("attention_bf16_yarn_v", a);

  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 16);
  *a.mutable_q() = MakeTensor(v1::FLOAT16, {1, 2, 1, 8}, 16);
  *a.mutable_k() = MakeTensor(v1::FLOAT16, {1, 2, 1, 8}, 17);
  a.set_causal(true);
  a.set_q_start_pos(0);
  a.set_k_start_pos(5);  // every key after every query: fully masked rows
  a.set_softmax(true);
  seeds.emplace_back("attention_f16_fully_masked", a);

  // By reference: k from the fuzz target's region "fuzz", scores into it.
  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 16);
  *a.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 21);
  a.mutable_k()->set_dtype(v1::FLOAT32);
  for (int64_t d : {1, 3, 1, 8}) a.mutable_k()->add_shape(d);
  a.mutable_k()->mutable_shm()->set_region("fuzz");
  a.mutable_k()->mutable_shm()->set_byte_size(96);
  a.mutable_scores_out()->set_region("fuzz");
  a.mutable_scores_out()->set_offset(1024);
  a.mutable_scores_out()->set_byte_size(24);
  seeds.emplace_back("attention_shm_k_scores_out", a);

  // The results beyond scores and output, with every mask and transform:
  // GQA 4/2, a window, chunks, explicit positions, softcap, sinks, ALiBi.
  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 32);
  *a.mutable_q() = MakeTensor(v1::FLOAT32, {1, 3, 4, 8}, 23);
  *a.mutable_k() = MakeTensor(v1::FLOAT32, {1, 5, 2, 8}, 24);
  *a.mutable_v() = MakeTensor(v1::FLOAT32, {1, 5, 2, 4}, 25);
  for (auto result : {v1::OUTPUT, v1::LSE, v1::TOP_K, v1::KEY_MASS, v1::SCORE_ROWS}) {
    a.add_results(result);
  }
  a.set_causal(true);
  a.set_window_left(3);
  a.set_window_right(0);
  a.set_chunk_size(4);
  for (int64_t p : {2, 3, 6}) a.add_q_positions(p);
  for (int64_t p : {0, 1, 2, 5, 6}) a.add_k_positions(p);
  a.set_softcap(30);
  for (int h = 0; h < 4; ++h) {
    a.add_sinks(0.5f * h);
    a.add_alibi_slopes(0.125f * (h + 1));
  }
  a.set_top_k(2);
  a.set_score_rows_start(1);
  a.set_score_rows_count(2);
  seeds.emplace_back("attention_results_masks_transforms", a);

  // LSE and top-k by reference into the region "fuzz", no v.
  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 16);
  *a.mutable_q() = MakeTensor(v1::BFLOAT16, {1, 2, 1, 8}, 26);
  *a.mutable_k() = MakeTensor(v1::BFLOAT16, {1, 3, 1, 8}, 27);
  a.add_results(v1::LSE);
  a.add_results(v1::TOP_K);
  a.set_top_k(3);
  a.mutable_lse_out()->set_region("fuzz");
  a.mutable_lse_out()->set_offset(2048);
  a.mutable_lse_out()->set_byte_size(8);
  a.mutable_top_k_indices_out()->set_region("fuzz");
  a.mutable_top_k_indices_out()->set_offset(2112);
  a.mutable_top_k_indices_out()->set_byte_size(24);
  a.mutable_top_k_probs_out()->set_region("fuzz");
  a.mutable_top_k_probs_out()->set_offset(2176);
  a.mutable_top_k_probs_out()->set_byte_size(24);
  seeds.emplace_back("attention_shm_lse_top_k_out", a);
  // A NoPE layer's temperature tuning, and MLA's rotary_offset.
  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 64);
  a.mutable_config()->mutable_no_rope()->set_floor_scale(8);
  a.mutable_config()->mutable_no_rope()->set_attn_scale(0.1);
  *a.mutable_q() = MakeTensor(v1::BFLOAT16, {1, 2, 2, 8}, 28);
  *a.mutable_k() = MakeTensor(v1::BFLOAT16, {1, 3, 1, 8}, 29);
  a.set_q_start_pos(30);
  a.set_causal(true);
  seeds.emplace_back("attention_no_rope_temperature", a);

  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 16, v1::HALF, 2);
  a.mutable_config()->set_rotary_offset(6);
  *a.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 30);
  *a.mutable_k() = MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 31);
  seeds.emplace_back("attention_rotary_offset", a);

  a = v1::AttentionScoresRequest();
  *a.mutable_config() = Config(8, 32);
  for (uint32_t dim : {4, 4}) a.mutable_config()->mutable_axial()->add_axes()->set_dim(dim);
  *a.mutable_q() = MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 23);
  *a.mutable_k() = MakeTensor(v1::FLOAT32, {1, 3, 1, 8}, 24);
  for (double p : {0.5, 1.5, 2.25, 3.0}) a.add_q_fractional_positions(p);
  a.set_k_start_pos(4);
  seeds.emplace_back("attention_axial_fractional", a);
  return seeds;
}

std::vector<std::pair<std::string, v1::GetTableRequest>> TableSeeds() {
  std::vector<std::pair<std::string, v1::GetTableRequest>> seeds;
  v1::GetTableRequest t;
  *t.mutable_config() = Config(8, 32);
  t.set_start(4);
  t.set_count(8);
  seeds.emplace_back("table_plain", t);

  t = v1::GetTableRequest();
  *t.mutable_config() = Config(16, 128, v1::INTERLEAVED, 8);
  t.mutable_config()->mutable_dynamic_ntk()->set_factor(3);
  t.mutable_config()->mutable_dynamic_ntk()->set_original_max_position_embeddings(32);
  seeds.emplace_back("table_dynamic_ntk_to_end", t);

  t = v1::GetTableRequest();
  *t.mutable_config() = Config(8, 64);
  t.mutable_config()->mutable_llama3()->set_factor(8);
  t.set_start(60);
  t.set_count(4);
  seeds.emplace_back("table_llama3_last_rows", t);

  t = v1::GetTableRequest();
  *t.mutable_config() = Config(0, 64);
  t.mutable_config()->set_hf_config_json(
      R"({"head_dim": 16, "partial_rotary_factor": 0.5, "max_position_embeddings": 64,)"
      R"( "original_max_position_embeddings": 16, "rope_theta": 10000.0, "rope_scaling":)"
      R"( {"long_factor": [1, 2, 4, 8], "short_factor": [1, 1, 1, 1], "type": "longrope"}})");
  t.set_start(10);
  t.set_count(12);
  seeds.emplace_back("table_hf_config_longrope", t);

  t = v1::GetTableRequest();
  *t.mutable_config() = Config(8, 4096);
  for (uint32_t dim : {2, 6}) t.mutable_config()->mutable_axial()->add_axes()->set_dim(dim);
  t.set_start(4090);
  t.set_count(6);
  seeds.emplace_back("table_axial_last_rows", t);
  return seeds;
}

std::vector<std::pair<std::string, v1::RopeConfig>> ResolveSeeds() {
  std::vector<std::pair<std::string, v1::RopeConfig>> seeds;
  v1::RopeConfig c = Config(0, 64);
  c.set_hf_config_json(
      R"({"layer_types": ["sliding_attention", "full_attention"], "head_dim": 8,)"
      R"( "max_position_embeddings": 64, "rope_theta": 150000, "rope_scaling": {"beta_fast": 32.0,)"
      R"( "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 16,)"
      R"( "rope_type": "yarn", "truncate": false}})");
  c.set_hf_layer_type("sliding_attention");
  seeds.emplace_back("resolve_hf_config_yarn", c);

  c = Config(0, 64);
  c.set_hf_config_json(
      R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",)"
      R"( "hidden_size": 64, "num_attention_heads": 4, "head_dim": 8,)"
      R"( "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})");
  c.set_hf_layer_type("sliding_attention");
  seeds.emplace_back("resolve_hf_config_gemma_sliding", c);

  c = Config(0, 64);
  c.set_hf_config_json(
      R"({"model_type": "gemma4", "text_config": {"model_type": "gemma4_text", "head_dim": 8,)"
      R"( "global_head_dim": 16, "layer_types": ["sliding_attention", "full_attention"],)"
      R"( "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25,)"
      R"( "rope_theta": 1000000.0, "rope_type": "proportional"}, "sliding_attention":)"
      R"( {"rope_theta": 10000.0, "rope_type": "default"}}}})");
  seeds.emplace_back("resolve_hf_config_proportional", c);

  c = Config(8, 64, v1::HALF, 0, 10000);
  c.mutable_dynamic_ntk()->set_factor(2);
  c.mutable_dynamic_ntk()->set_original_max_position_embeddings(16);
  seeds.emplace_back("resolve_explicit_dynamic", c);

  // DeepSeek-V4's two rope groups, chosen by layer index.
  c = Config(0, 64);
  c.set_hf_config_json(
      R"({"model_type": "deepseek_v4", "head_dim": 16, "qk_rope_head_dim": 8,)"
      R"( "num_hidden_layers": 3, "compress_ratios": [0, 4, 128], "rope_theta": 10000,)"
      R"( "compress_rope_theta": 160000, "rope_scaling": {"type": "yarn", "factor": 4,)"
      R"( "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1}})");
  c.set_hf_layer_index(1);
  seeds.emplace_back("resolve_hf_config_rope_group", c);

  c = Config(0, 64);
  c.set_hf_config_json(
      R"({"model_type": "ernie4_5_moe_vl", "hidden_size": 64, "num_attention_heads": 4,)"
      R"( "rope_theta": 500000, "freq_allocation": 2})");
  seeds.emplace_back("resolve_hf_config_ernie_freq_allocation", c);

  c = Config(0, 64);
  c.set_hf_config_json(
      R"({"model_type": "hunyuan_v1_dense", "head_dim": 8, "rope_theta": 10000,)"
      R"( "rope_scaling": {"type": "dynamic", "alpha": 1000, "factor": 1}})");
  seeds.emplace_back("resolve_hf_config_dynamic_alpha", c);

  c = Config(8, 64);
  for (uint32_t dim : {2, 2, 4}) c.mutable_axial()->add_axes()->set_dim(dim);
  c.mutable_axial()->mutable_axes(2)->set_theta(256);
  seeds.emplace_back("resolve_axial", c);
  return seeds;
}

// Registrations: a POSIX object that does not exist, and a CUDA IPC handle
// (refused by the CPU engine after the request's checks).
std::vector<std::pair<std::string, v1::RegisterSharedMemoryRequest>> RegisterSeeds() {
  std::vector<std::pair<std::string, v1::RegisterSharedMemoryRequest>> seeds;
  v1::RegisterSharedMemoryRequest r;
  r.set_name("seed");
  r.set_key("/rope-fuzz-seed-absent");
  r.set_offset(4096);
  r.set_byte_size(4096);
  seeds.emplace_back("register_host_region", r);

  r = v1::RegisterSharedMemoryRequest();
  r.set_name("seed.cuda");
  std::string handle(64, '\0');
  for (size_t i = 0; i < handle.size(); ++i) handle[i] = static_cast<char>(i * 37 + 11);
  r.set_cuda_ipc_handle(handle);
  r.set_cuda_device(0);
  r.set_byte_size(1 << 20);
  seeds.emplace_back("register_cuda_ipc_region", r);
  return seeds;
}

std::vector<std::pair<std::string, v1::BuildPositionsRequest>> PositionsSeeds() {
  std::vector<std::pair<std::string, v1::BuildPositionsRequest>> seeds;
  constexpr char kQwen25Vl[] =
      R"({"model_type": "qwen2_5_vl", "image_token_id": 151655, "video_token_id": 151656,)"
      R"( "vision_start_token_id": 151652, "vision_config": {"spatial_merge_size": 2,)"
      R"( "tokens_per_second": 2}})";
  v1::BuildPositionsRequest r;
  r.set_hf_config_json(kQwen25Vl);
  r.set_batch(2);
  // Row 0: text, an image of 2 x 2 merged patches, text; row 1: left
  // padding, a video of 2 frames, text.
  for (int64_t id : {1, 151652, 151655, 151655, 151655, 151655, 151653, 2, 3, 4, 5,
                     0, 0, 151652, 151656, 151656, 151656, 151656, 151656, 151656, 151656, 151656,
                     151653, 2}) {
    r.add_input_ids(id);
  }
  for (int64_t m : {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
    r.add_attention_mask(m);
  }
  for (int64_t g : {1, 4, 4}) r.add_image_grid_thw(g);
  for (int64_t g : {2, 4, 4}) r.add_video_grid_thw(g);
  r.add_second_per_grid_ts(0.5);
  seeds.emplace_back("positions_qwen25_image_video_padding", r);
  r.set_rope_index_layout(v1::ROPE_INDEX_LAYOUT_TRANSFORMERS_5);
  seeds.emplace_back("positions_qwen25_transformers5", r);

  r = v1::BuildPositionsRequest();
  r.set_hf_config_json(kQwen25Vl);
  r.set_batch(2);
  for (int64_t id : {7, 8}) r.add_input_ids(id);
  for (int64_t d : {-3, 5}) r.add_rope_deltas(d);
  r.set_cache_position(12);
  seeds.emplace_back("positions_decode", r);

  r = v1::BuildPositionsRequest();
  v1::PositionGrid* grid = r.add_grids();
  for (int64_t d : {2, 3, 4}) grid->add_size(d);
  for (double x : {0.0, 0.5, 1.0}) grid->add_start(x);
  for (double x : {1.0, 0.25, 2.0}) grid->add_step(x);
  for (uint32_t a : {0, 2, 1}) grid->add_rope_axis(a);
  seeds.emplace_back("positions_grid_fractional", r);
  return seeds;
}

// KServe v2 ModelInfer requests to the built-in models: raw bytes, typed
// contents, INT32 positions, a config.json and a rope_scaling parameter, and
// tensors in the fuzz target's 64 KiB region "fuzz".
void AddInput(const std::string& name, const v1::Tensor& tensor,
              inference::ModelInferRequest* request) {
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(tensor.dtype() == v1::FLOAT32   ? "FP32"
                      : tensor.dtype() == v1::FLOAT16 ? "FP16"
                                                      : "BF16");
  *input->mutable_shape() = tensor.shape();
  request->add_raw_input_contents(tensor.data());
}

void SetParameter(inference::ModelInferRequest* r, const std::string& name, int64_t value) {
  (*r->mutable_parameters())[name].set_int64_param(value);
}

std::vector<std::pair<std::string, inference::ModelInferRequest>> ModelInferSeeds() {
  std::vector<std::pair<std::string, inference::ModelInferRequest>> seeds;
  inference::ModelInferRequest r;
  r.set_model_name("rotate");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 32);
  SetParameter(&r, "start_pos", 3);
  (*r.mutable_parameters())["theta"].set_string_param("500000");
  AddInput("q", MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 1), &r);
  AddInput("k", MakeTensor(v1::FLOAT32, {1, 2, 1, 8}, 2), &r);
  seeds.emplace_back("kserve_rotate_f32_q_k", r);

  r = inference::ModelInferRequest();
  r.set_model_name("rotate");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 64);
  (*r.mutable_parameters())["layout"].set_string_param("half");
  (*r.mutable_parameters())["rope_scaling"].set_string_param(
      R"({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 16})");
  (*r.mutable_parameters())["inverse"].set_bool_param(true);
  AddInput("q", MakeTensor(v1::BFLOAT16, {2, 2, 8}, 3), &r);
  auto* positions = r.add_inputs();
  positions->set_name("positions");
  positions->set_datatype("INT32");
  positions->add_shape(2);
  // Raw, as q is: a request gives every input raw or every input typed.
  const int32_t int32_positions[2] = {5, 63};
  r.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(int32_positions), sizeof(int32_positions)));
  seeds.emplace_back("kserve_rotate_bf16_yarn_int32_positions", r);

  r = inference::ModelInferRequest();
  r.set_model_name("rotate");
  SetParameter(&r, "max_len", 64);
  (*r.mutable_parameters())["hf_config_json"].set_string_param(
      R"({"rope_theta": 10000, "head_dim": 8, "partial_rotary_factor": 0.5})");
  auto* q = r.add_inputs();
  q->set_name("q");
  q->set_datatype("FP32");
  q->add_shape(1);
  q->add_shape(2);
  q->add_shape(8);
  for (int i = 0; i < 16; ++i) q->mutable_contents()->add_fp32_contents(0.125f * i);
  seeds.emplace_back("kserve_rotate_hf_config_typed_contents", r);

  r = inference::ModelInferRequest();
  r.set_model_name("rotate");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 32);
  q = r.add_inputs();
  q->set_name("q");
  q->set_datatype("FP32");
  for (int64_t d : {1, 2, 2, 8}) q->add_shape(d);
  (*q->mutable_parameters())["shared_memory_region"].set_string_param("fuzz");
  (*q->mutable_parameters())["shared_memory_byte_size"].set_int64_param(128);
  auto* out = r.add_outputs();
  out->set_name("q_out");
  (*out->mutable_parameters())["shared_memory_region"].set_string_param("fuzz");
  (*out->mutable_parameters())["shared_memory_offset"].set_int64_param(4096);
  (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(1024);
  seeds.emplace_back("kserve_rotate_shm_in_out", r);

  r = inference::ModelInferRequest();
  r.set_model_name("attention");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 32);
  (*r.mutable_parameters())["causal"].set_bool_param(true);
  (*r.mutable_parameters())["softmax"].set_bool_param(true);
  (*r.mutable_parameters())["scale"].set_double_param(0.25);
  AddInput("q", MakeTensor(v1::FLOAT16, {1, 3, 2, 8}, 4), &r);
  AddInput("k", MakeTensor(v1::FLOAT16, {1, 4, 1, 8}, 5), &r);
  AddInput("v", MakeTensor(v1::FLOAT16, {1, 4, 1, 4}, 6), &r);
  r.add_outputs()->set_name("output");
  seeds.emplace_back("kserve_attention_f16_v_output", r);

  // Every AttentionScores option an attention model takes: masks, softcap,
  // top_k and a row range as parameters, sinks / ALiBi slopes / positions
  // as tensors, all seven outputs asked for.
  r = inference::ModelInferRequest();
  r.set_model_name("attention");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 64);
  (*r.mutable_parameters())["causal"].set_bool_param(true);
  SetParameter(&r, "window_left", 2);
  SetParameter(&r, "window_right", 1);
  SetParameter(&r, "chunk_size", 4);
  SetParameter(&r, "top_k", 2);
  SetParameter(&r, "score_rows_start", 1);
  SetParameter(&r, "score_rows_count", 2);
  (*r.mutable_parameters())["softcap"].set_double_param(30);
  AddInput("q", MakeTensor(v1::FLOAT32, {1, 3, 2, 8}, 13), &r);
  AddInput("k", MakeTensor(v1::FLOAT32, {1, 4, 1, 8}, 14), &r);
  AddInput("v", MakeTensor(v1::FLOAT32, {1, 4, 1, 4}, 15), &r);
  {
    const float per_head[2] = {0.5f, -1.0f};
    for (const char* name : {"sinks", "alibi_slopes"}) {
      auto* input = r.add_inputs();
      input->set_name(name);
      input->set_datatype("FP32");
      input->add_shape(2);
      r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(per_head), 8));
    }
    const int64_t q_positions[3] = {0, 1, 5};
    const int64_t k_positions[4] = {0, 1, 4, 5};
    auto* input = r.add_inputs();
    input->set_name("q_positions");
    input->set_datatype("INT64");
    input->add_shape(3);
    r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(q_positions), 24));
    input = r.add_inputs();
    input->set_name("k_positions");
    input->set_datatype("INT64");
    input->add_shape(4);
    r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(k_positions), 32));
  }
  for (const char* name : {"scores", "output", "lse", "top_k_indices", "top_k_probs", "key_mass",
                           "score_rows"}) {
    r.add_outputs()->set_name(name);
  }
  seeds.emplace_back("kserve_attention_options_all_outputs", r);

  // Sinks read from the region, lse written to it.
  r = inference::ModelInferRequest();
  r.set_model_name("attention");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 32);
  AddInput("q", MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 16), &r);
  AddInput("k", MakeTensor(v1::FLOAT32, {1, 3, 2, 8}, 17), &r);
  {
    auto* sinks = r.add_inputs();
    sinks->set_name("sinks");
    sinks->set_datatype("FP32");
    sinks->add_shape(2);
    (*sinks->mutable_parameters())["shared_memory_region"].set_string_param("fuzz");
    (*sinks->mutable_parameters())["shared_memory_byte_size"].set_int64_param(8);
    auto* lse = r.add_outputs();
    lse->set_name("lse");
    (*lse->mutable_parameters())["shared_memory_region"].set_string_param("fuzz");
    (*lse->mutable_parameters())["shared_memory_offset"].set_int64_param(8192);
    (*lse->mutable_parameters())["shared_memory_byte_size"].set_int64_param(64);
  }
  seeds.emplace_back("kserve_attention_shm_sinks_lse_out", r);

  // The serving engines' variants as parameters: an MLA-like rotary_offset,
  // HunYuan's alpha, float8 outputs with their scales, q and k heads 3 and 2.
  r = inference::ModelInferRequest();
  r.set_model_name("rotate");
  SetParameter(&r, "head_dim", 16);
  SetParameter(&r, "max_len", 64);
  SetParameter(&r, "rotary_offset", 8);
  (*r.mutable_parameters())["rope_scaling"].set_string_param(R"({"type": "dynamic", "alpha": 1000})");
  (*r.mutable_parameters())["output_dtype"].set_string_param("FLOAT8_E4M3FN");
  (*r.mutable_parameters())["output_scale"].set_double_param(16);
  (*r.mutable_parameters())["k_output_scale"].set_string_param("0.5");
  AddInput("q", MakeTensor(v1::BFLOAT16, {1, 2, 3, 16}, 7), &r);
  AddInput("k", MakeTensor(v1::BFLOAT16, {1, 2, 2, 16}, 8), &r);
  seeds.emplace_back("kserve_rotate_rotary_offset_alpha_float8", r);

  // A decoder layer by index of a config.json: Llama 4's NoPE pattern
  // (no_rope_layers), layer 3 of 4 a NoPE layer.
  r = inference::ModelInferRequest();
  r.set_model_name("rotate");
  SetParameter(&r, "max_len", 64);
  SetParameter(&r, "hf_layer_index", 3);
  (*r.mutable_parameters())["hf_config_json"].set_string_param(
      R"({"model_type": "llama4_text", "rope_theta": 500000, "head_dim": 8,
          "num_hidden_layers": 4, "no_rope_layers": [1, 1, 1, 0],
          "attn_temperature_tuning": true, "floor_scale": 16, "attn_scale": 0.1})");
  AddInput("q", MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 9), &r);
  seeds.emplace_back("kserve_rotate_hf_layer_index_nope", r);

  // An explicit NoPE layer with Llama 4's temperature tuning, and Ernie's
  // 3-D layout through rope_scaling on a rotate model.
  r = inference::ModelInferRequest();
  r.set_model_name("attention");
  SetParameter(&r, "head_dim", 8);
  SetParameter(&r, "max_len", 64);
  SetParameter(&r, "q_start_pos", 40);
  (*r.mutable_parameters())["no_rope"].set_bool_param(true);
  (*r.mutable_parameters())["floor_scale"].set_double_param(4);
  (*r.mutable_parameters())["attn_scale"].set_string_param("0.1");
  AddInput("q", MakeTensor(v1::FLOAT32, {1, 2, 2, 8}, 10), &r);
  AddInput("k", MakeTensor(v1::FLOAT32, {1, 3, 1, 8}, 11), &r);
  seeds.emplace_back("kserve_attention_no_rope_temperature", r);

  r = inference::ModelInferRequest();
  r.set_model_name("rotate");
  SetParameter(&r, "head_dim", 16);
  SetParameter(&r, "max_len", 64);
  (*r.mutable_parameters())["rope_scaling"].set_string_param(
      R"({"rope_type": "ernie_3d", "freq_allocation": 4})");
  AddInput("q", MakeTensor(v1::FLOAT32, {1, 2, 1, 16}, 12), &r);
  positions = r.add_inputs();
  positions->set_name("positions");
  positions->set_datatype("INT64");
  positions->add_shape(3);
  positions->add_shape(2);
  const int64_t axes[6] = {1, 2, 3, 4, 5, 6};  // [t, h, w] x 2 tokens
  r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(axes), sizeof(axes)));
  seeds.emplace_back("kserve_rotate_ernie_rope_scaling", r);
  return seeds;
}

}  // namespace
}  // namespace fuzz
}  // namespace rope

int main(int argc, char** argv) {
  using namespace rope::fuzz;  // NOLINT(build/namespaces)
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int written = 0;
  bool ok = true;
  for (const auto& [name, m] : RotateSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kRotate, m);
    ++written;
  }
  for (const auto& [name, m] : AttentionSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kAttention, m);
    ++written;
  }
  for (const auto& [name, m] : TableSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kGetTable, m);
    ++written;
  }
  for (const auto& [name, m] : ResolveSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kResolveConfig, m);
    ++written;
  }
  for (const auto& [name, m] : RegisterSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kRegisterSharedMemory, m);
    ++written;
  }
  for (const auto& [name, m] : PositionsSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kBuildPositions, m);
    ++written;
  }
  for (const auto& [name, m] : ModelInferSeeds()) {
    ok = ok && Write(dir, name, RequestKind::kModelInfer, m);
    ++written;
  }
  if (!ok) {
    std::fprintf(stderr, "cannot write the corpus into %s\n", dir.c_str());
    return 1;
  }
  std::printf("wrote %d seed inputs into %s\n", written, dir.c_str());
  return 0;
}
