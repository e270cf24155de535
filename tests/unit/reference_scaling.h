// Reference inverse frequencies and attention factors of the RoPE scaling
// variants, written in the tests from the published formulas (Hugging Face
// modeling_rope_utils.py, Meta's Llama 3.1 apply_scaling), step by step as
// those sources state them, and sharing no code with server/engine.
#ifndef ROPE_TESTS_UNIT_REFERENCE_SCALING_H_
#define ROPE_TESTS_UNIT_REFERENCE_SCALING_H_

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

// YaRN with HF's defaults spelled out by the caller (beta_fast, beta_slow)
// and truncate = true. Returns inv_freq; *attention_factor receives HF's
// attention factor (given > 0, else from mscale / mscale_all_dim / factor).
std::vector<double> YarnInvFreq(double theta, int dim, double factor, double original,
                                double beta_fast, double beta_slow);
double YarnAttentionFactor(double factor, double mscale, double mscale_all_dim,
                           double attention_factor);
// HF find_correction_range with truncate = true: (low, high).
void YarnCorrectionRange(double theta, int dim, double original, double beta_fast,
                         double beta_slow, double* low, double* high);

// Llama 3.1 apply_scaling (Meta's loop form).
std::vector<double> Llama3InvFreq(double theta, int dim, double factor, double low_freq_factor,
                                  double high_freq_factor, double original);

// LongRoPE: 1 / (ext[i] * theta^(2i/dim)).
std::vector<double> LongRopeInvFreq(double theta, int dim, const std::vector<double>& ext);
double LongRopeAttentionFactor(double max_len, double original, double attention_factor);

}  // namespace reference
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_REFERENCE_SCALING_H_
