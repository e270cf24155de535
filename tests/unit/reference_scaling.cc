#include "tests/unit/reference_scaling.h"

#include <algorithm>
#include <cmath>

namespace rope {
namespace reference {
namespace {

const double kPi = std::acos(-1.0);

double GetMscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double FindCorrectionDim(double num_rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2 * kPi))) / (2 * std::log(base));
}

}  // namespace

std::vector<double> DefaultInvFreq(double theta, int dim) {
  std::vector<double> out;
  for (int j = 0; j < dim; j += 2) out.push_back(1.0 / std::pow(theta, static_cast<double>(j) / dim));
  return out;
}

std::vector<double> LinearInvFreq(double theta, int dim, double factor) {
  std::vector<double> out = DefaultInvFreq(theta, dim);
  for (double& f : out) f = f / factor;
  return out;
}

double DynamicNtkBase(double theta, int dim, double factor, double original, double seq_len) {
  if (seq_len <= original) return theta;
  return theta * std::pow((factor * seq_len / original) - (factor - 1), dim / (dim - 2.0));
}

void YarnCorrectionRange(double theta, int dim, double original, double beta_fast,
                         double beta_slow, double* low, double* high, bool truncate) {
  *low = FindCorrectionDim(beta_fast, dim, theta, original);
  *high = FindCorrectionDim(beta_slow, dim, theta, original);
  if (truncate) {
    *low = std::floor(*low);
    *high = std::ceil(*high);
  }
  *low = std::max(*low, 0.0);
  *high = std::min(*high, dim - 1.0);
}

std::vector<double> YarnInvFreq(double theta, int dim, double factor, double original,
                                double beta_fast, double beta_slow, bool truncate) {
  std::vector<double> pos_freqs;
  for (int j = 0; j < dim; j += 2) pos_freqs.push_back(std::pow(theta, static_cast<double>(j) / dim));
  double low, high;
  YarnCorrectionRange(theta, dim, original, beta_fast, beta_slow, &low, &high, truncate);
  if (low == high) high += 0.001;
  std::vector<double> out;
  for (int i = 0; i < dim / 2; ++i) {
    const double extrapolation = 1.0 / pos_freqs[i];
    const double interpolation = 1.0 / (factor * pos_freqs[i]);
    const double linear = (i - low) / (high - low);
    const double ramp = std::min(1.0, std::max(0.0, linear));
    const double extrapolation_factor = 1 - ramp;
    out.push_back(interpolation * (1 - extrapolation_factor) +
                  extrapolation * extrapolation_factor);
  }
  return out;
}

double YarnAttentionFactor(double factor, double mscale, double mscale_all_dim,
                           double attention_factor) {
  if (attention_factor > 0) return attention_factor;
  if (mscale != 0 && mscale_all_dim != 0) {
    return GetMscale(factor, mscale) / GetMscale(factor, mscale_all_dim);
  }
  return GetMscale(factor, 1.0);
}

std::vector<double> Llama3InvFreq(double theta, int dim, double factor, double low_freq_factor,
                                  double high_freq_factor, double original) {
  const double low_freq_wavelen = original / low_freq_factor;
  const double high_freq_wavelen = original / high_freq_factor;
  std::vector<double> out;
  for (double freq : DefaultInvFreq(theta, dim)) {
    const double wavelen = 2 * kPi / freq;
    if (wavelen < high_freq_wavelen) {
      out.push_back(freq);
    } else if (wavelen > low_freq_wavelen) {
      out.push_back(freq / factor);
    } else {
      const double smooth =
          (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out.push_back((1 - smooth) * freq / factor + smooth * freq);
    }
  }
  return out;
}

std::vector<double> Llama3InvFreqTransformers(double theta, int dim, double factor,
                                              double low_freq_factor, double high_freq_factor,
                                              double original) {
  const double low_freq_wavelen = original / low_freq_factor;
  const double high_freq_wavelen = original / high_freq_factor;
  std::vector<double> out;
  for (double inv : DefaultInvFreq(theta, dim)) {
    const double wavelen = 2 * kPi / inv;
    // inv_freq_llama = where(wavelen > low_freq_wavelen, inv / factor, inv)
    const double llama = wavelen > low_freq_wavelen ? inv / factor : inv;
    // smoothed only where ~(wavelen < high) * ~(wavelen > low)
    const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (is_medium) {
      const double smooth =
          (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out.push_back((1 - smooth) * llama / factor + smooth * llama);
    } else {
      out.push_back(llama);
    }
  }
  return out;
}

std::vector<double> LongRopeInvFreq(double theta, int dim, const std::vector<double>& ext) {
  std::vector<double> out;
  for (int j = 0; j < dim; j += 2) {
    out.push_back(1.0 / (ext[j / 2] * std::pow(theta, static_cast<double>(j) / dim)));
  }
  return out;
}

double LongRopeAttentionFactor(double max_len, double original, double attention_factor) {
  if (attention_factor > 0) return attention_factor;
  const double factor = max_len / original;
  if (factor <= 1.0) return 1.0;
  return std::sqrt(1 + std::log(factor) / std::log(original));
}

std::vector<int> MropeAxes(const std::vector<int>& section, bool interleaved, int half) {
  std::vector<int> axes(half, 0);
  if (interleaved) {
    for (int i = 1; i < std::min(half, section[1] * 3); i += 3) axes[i] = 1;
    for (int i = 2; i < std::min(half, section[2] * 3); i += 3) axes[i] = 2;
    return axes;
  }
  // The row is [freqs, freqs] (2 * half); chunks of sizes section + section.
  std::vector<int> chunks = section;
  chunks.insert(chunks.end(), section.begin(), section.end());
  std::vector<int> full;
  for (size_t j = 0; j < chunks.size(); ++j) {
    for (int k = 0; k < chunks[j]; ++k) full.push_back(static_cast<int>(j % 3));
  }
  for (int i = 0; i < half; ++i) axes[i] = full[i];
  return axes;
}

std::vector<double> DynamicNtkAlphaInvFreq(double theta, int dim, double alpha) {
  const double base = theta * std::pow(alpha, static_cast<double>(dim) / (dim - 2));
  return DefaultInvFreq(base, dim);
}

std::vector<double> NtkInvFreq(double theta, int dim, double factor, bool mixed, double mixed_b) {
  // base = self.base * (scaling_factor if mixed_b is None else 1)
  const double base = theta * (mixed ? 1.0 : factor);
  std::vector<double> inv = DefaultInvFreq(base, dim);
  if (!mixed) {
    for (double& f : inv) f = f / std::pow(factor, 2.0 / dim);
    return inv;
  }
  // a = log(factor) / (dim / 2) ** mixed_b; lambda = exp(a * arange(1, dim//2 + 1) ** mixed_b)
  const double a = std::log(factor) / std::pow(dim / 2.0, mixed_b);
  for (int m = 1; m <= dim / 2; ++m) inv[m - 1] = inv[m - 1] / std::exp(a * std::pow(m, mixed_b));
  return inv;
}

std::vector<double> DeepseekYarnInvFreq(double theta, int dim, double factor, double original,
                                        double beta_fast, double beta_slow,
                                        double extrapolation_factor) {
  std::vector<double> pos_freqs;
  for (int j = 0; j < dim; j += 2) pos_freqs.push_back(std::pow(theta, static_cast<double>(j) / dim));
  double low, high;
  YarnCorrectionRange(theta, dim, original, beta_fast, beta_slow, &low, &high, true);
  if (low == high) high += 0.001;  // yarn_linear_ramp_mask
  std::vector<double> out;
  for (int i = 0; i < dim / 2; ++i) {
    const double ramp = std::min(1.0, std::max(0.0, (i - low) / (high - low)));
    const double mask = (1 - ramp) * extrapolation_factor;
    const double extrapolation = 1.0 / pos_freqs[i];
    const double interpolation = 1.0 / (factor * pos_freqs[i]);
    out.push_back(interpolation * (1 - mask) + extrapolation * mask);
  }
  return out;
}

double DeepseekYarnMscale(double factor, double mscale, double mscale_all_dim,
                          double attn_factor) {
  return GetMscale(factor, mscale) / GetMscale(factor, mscale_all_dim) * attn_factor;
}

std::vector<ErniePair> ErnieLayout(int h, int w, int t) {
  const int half = h + w + t;
  // inv_freq_3d[:hw] = cat(inv[:-t][0::2], inv[:-t][1::2]); inv_freq_3d[-t:] = inv[-t:]
  std::vector<int> pre;  // frequency index at each position of inv_freq_3d
  for (int i = 0; i < h + w; i += 2) pre.push_back(i);
  for (int i = 1; i < h + w; i += 2) pre.push_back(i);
  for (int i = h + w; i < half; ++i) pre.push_back(i);
  // split [h, w, t]: chunk 0 (h) from axis 1, chunk 1 (w) from axis 2, chunk 2 (t) from axis 0;
  // then stack(h, w).flatten(): h0, w0, h1, w1, ..., then t.
  std::vector<ErniePair> out;
  for (int j = 0; j < h; ++j) {
    out.push_back({1, pre[j]});
    out.push_back({2, pre[h + j]});
  }
  for (int j = 0; j < t; ++j) out.push_back({0, pre[h + w + j]});
  return out;
}

double Llama4Temperature(int64_t position, double floor_scale, double attn_scale) {
  return std::log(std::floor((static_cast<double>(position) + 1.0) / floor_scale) + 1.0) *
             attn_scale +
         1.0;
}

double LongRopeAttentionFactorFromConfig(double max_position_embeddings, double original) {
  const double factor = max_position_embeddings / original;
  if (factor <= 1.0) return 1.0;
  return std::sqrt(1 + std::log(factor) / std::log(original));
}

}  // namespace reference
}  // namespace rope
