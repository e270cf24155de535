#include "tests/unit/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace rope {
namespace reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

AttentionReference::AttentionReference(const Rope& rope, const MaskedAttention& spec,
                                       const std::vector<double>& q, const std::vector<double>& k,
                                       const std::vector<double>* v)
    : rope_(rope), spec_(spec), rq_(q), rk_(k), v_(v) {
  RotateTensor(rope_, spec_.batch, spec_.q_seq, spec_.q_heads, spec_.q_pos, /*inverse=*/false,
               &rq_);
  RotateTensor(rope_, spec_.batch, spec_.k_seq, spec_.k_heads, spec_.k_pos, /*inverse=*/false,
               &rk_);
}

bool AttentionReference::Visible(int64_t qp, int64_t kp) const {
  // Written out rule by rule from the design's definitions.
  if (spec_.causal && kp > qp) return false;
  if (spec_.window_left >= 0 && kp < qp - spec_.window_left) return false;
  if (spec_.window_right >= 0 && kp > qp + spec_.window_right) return false;
  if (spec_.chunk_size > 0 && qp / spec_.chunk_size != kp / spec_.chunk_size) return false;
  return true;
}

ReferenceRow AttentionReference::Row(int64_t b, int64_t h, int64_t i) const {
  const int64_t D = rope_.head_dim, Sk = spec_.k_seq, Dv = spec_.v_dim;
  const int64_t g = h / (spec_.q_heads / spec_.k_heads);
  const int64_t qp = spec_.q_pos[b * spec_.q_seq + i];
  const double* qv = rq_.data() + ((b * spec_.q_seq + i) * spec_.q_heads + h) * D;
  ReferenceRow row;
  row.logits.assign(Sk, kNegInf);
  row.probs.assign(Sk, 0.0);
  double max = kNegInf;
  for (int64_t j = 0; j < Sk; ++j) {
    const int64_t kp = spec_.k_pos[b * Sk + j];
    if (!Visible(qp, kp)) continue;
    const double* kv = rk_.data() + ((b * Sk + j) * spec_.k_heads + g) * D;
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += qv[d] * kv[d];
    s *= spec_.scale;
    if (spec_.softcap > 0) s = spec_.softcap * std::tanh(s / spec_.softcap);
    if (!spec_.alibi_slopes.empty()) {
      s -= spec_.alibi_slopes[h] * static_cast<double>(std::llabs(qp - kp));
    }
    row.logits[j] = s;
    max = std::max(max, s);
    ++row.visible;
  }
  const bool sink = !spec_.sinks.empty();
  if (sink) max = std::max(max, spec_.sinks[h]);
  if (max == kNegInf) {  // no key and no sink
    row.lse = kNegInf;
  } else {
    double sum = sink ? std::exp(spec_.sinks[h] - max) : 0.0;
    for (int64_t j = 0; j < Sk; ++j) {
      if (row.logits[j] != kNegInf) sum += std::exp(row.logits[j] - max);
    }
    row.lse = max + std::log(sum);
    for (int64_t j = 0; j < Sk; ++j) {
      if (row.logits[j] != kNegInf) row.probs[j] = std::exp(row.logits[j] - row.lse);
    }
  }
  if (v_ != nullptr) {
    row.output.assign(Dv, 0.0);
    for (int64_t j = 0; j < Sk; ++j) {
      if (row.probs[j] == 0) continue;
      const double* vv = v_->data() + ((b * Sk + j) * spec_.k_heads + g) * Dv;
      for (int64_t d = 0; d < Dv; ++d) row.output[d] += row.probs[j] * vv[d];
    }
  }
  return row;
}

std::vector<double> AttentionReference::KeyMass() const {
  const int64_t Sk = spec_.k_seq;
  std::vector<double> mass(spec_.batch * spec_.q_heads * Sk, 0.0);
  for (int64_t b = 0; b < spec_.batch; ++b) {
    for (int64_t h = 0; h < spec_.q_heads; ++h) {
      double* m = mass.data() + (b * spec_.q_heads + h) * Sk;
      for (int64_t i = 0; i < spec_.q_seq; ++i) {
        const ReferenceRow row = Row(b, h, i);
        for (int64_t j = 0; j < Sk; ++j) m[j] += row.probs[j];
      }
    }
  }
  return mass;
}

std::vector<std::pair<int64_t, double>> AttentionReference::TopK(const ReferenceRow& row,
                                                                 int64_t k) {
  std::vector<std::pair<int64_t, double>> candidates;
  for (int64_t j = 0; j < static_cast<int64_t>(row.logits.size()); ++j) {
    if (row.logits[j] != kNegInf) candidates.emplace_back(j, row.probs[j]);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int64_t>(candidates.size()) > k) candidates.resize(k);
  return candidates;
}

}  // namespace reference
}  // namespace rope
