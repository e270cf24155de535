// Reference inverse frequencies and attention factors of the RoPE scaling
// variants, written in the tests from the published formulas (Hugging Face
// modeling_rope_utils.py, Meta's Llama 3.1 apply_scaling), step by step as
// those sources state them, and sharing no code with core/engine.
#ifndef ROPE_TESTS_UNIT_REFERENCE_SCALING_H_
#define ROPE_TESTS_UNIT_REFERENCE_SCALING_H_

#include <cstdint>
#include <vector>

namespace rope {
namespace reference {

// Plain: theta^(-2i/dim).
std::vector<double> DefaultInvFreq(double theta, int dim);

// Linear: plain / factor.
std::vector<double> LinearInvFreq(double theta, int dim, double factor);

// Dynamic NTK: base' = theta * ((factor * seq_len / original) - (factor - 1))^(dim/(dim-2))
// when seq_len > original, else theta; then plain with base'.
double DynamicNtkBase(double theta, int dim, double factor, double original, double seq_len);

// YaRN with HF's defaults spelled out by the caller (beta_fast, beta_slow).
// `truncate` (HF's default true) floors/ceils the correction range.
std::vector<double> YarnInvFreq(double theta, int dim, double factor, double original,
                                double beta_fast, double beta_slow, bool truncate = true);
double YarnAttentionFactor(double factor, double mscale, double mscale_all_dim,
                           double attention_factor);
// HF find_correction_range: (low, high).
void YarnCorrectionRange(double theta, int dim, double original, double beta_fast,
                         double beta_slow, double* low, double* high, bool truncate = true);

// Llama 3.1 apply_scaling (Meta's loop form).
std::vector<double> Llama3InvFreq(double theta, int dim, double factor, double low_freq_factor,
                                  double high_freq_factor, double original);
// transformers' _compute_llama3_parameters (its torch.where form), which
// also takes low_freq_factor == high_freq_factor (Llama 4 Scout).
std::vector<double> Llama3InvFreqTransformers(double theta, int dim, double factor,
                                              double low_freq_factor, double high_freq_factor,
                                              double original);

// LongRoPE: 1 / (ext[i] * theta^(2i/dim)).
std::vector<double> LongRopeInvFreq(double theta, int dim, const std::vector<double>& ext);
double LongRopeAttentionFactor(double max_len, double original, double attention_factor);

// M-RoPE: the position axis (0 t, 1 h, 2 w) of each of `half` frequencies.
// Chunked as transformers' apply_multimodal_rotary_pos_emb splits the
// duplicated [cos, cos] row into chunks section * 2 and takes chunk j from
// axis j % 3; interleaved as vLLM's apply_interleaved_rope overwrites
// slices [1 : 3*section[1] : 3] and [2 : 3*section[2] : 3].
std::vector<int> MropeAxes(const std::vector<int>& section, bool interleaved, int half);

// LongRoPE's attention factor when max_position_embeddings and original are
// known (transformers: factor = max_position_embeddings / original).
double LongRopeAttentionFactorFromConfig(double max_position_embeddings, double original);

// ---- The serving engines' variants (vLLM's rotary_embedding/, and the
// transformers model classes that define them), step by step as written
// there, in double.

// HunYuan's DynamicNTKAlphaRotaryEmbedding: base = theta * alpha **
// (dim / (dim - 2)), then plain frequencies of that base.
std::vector<double> DynamicNtkAlphaInvFreq(double theta, int dim, double alpha);

// vLLM's NTKScalingRotaryEmbedding._compute_inv_freq; `mixed_b` < 0 (NaN)
// for the fixed form.
std::vector<double> NtkInvFreq(double theta, int dim, double factor, bool mixed, double mixed_b);

// vLLM's DeepseekScalingRotaryEmbedding: _compute_inv_freq and its mscale.
std::vector<double> DeepseekYarnInvFreq(double theta, int dim, double factor, double original,
                                        double beta_fast, double beta_slow,
                                        double extrapolation_factor);
double DeepseekYarnMscale(double factor, double mscale, double mscale_all_dim,
                          double attn_factor);

// Ernie 4.5-VL's 3-D layout (transformers' Ernie4_5_VLMoeTextRotaryEmbedding:
// the pre-rotated inv_freq, split [h, w, t], chunk j taking position axis
// (j + 1) % 3 of (t, h, w), h and w stacked and flattened): the axis (0 t,
// 1 h, 2 w) and the frequency index of output pair i.
struct ErniePair {
  int axis;
  int frequency;
};
std::vector<ErniePair> ErnieLayout(int h, int w, int t);

// Llama 4's attention temperature of a NoPE layer's query at `position`:
// log(floor((position + 1) / floor_scale) + 1) * attn_scale + 1.
double Llama4Temperature(int64_t position, double floor_scale, double attn_scale);

}  // namespace reference
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_REFERENCE_SCALING_H_
