// A slow, obviously-correct float64 reference for attention with masks,
// logit transforms and the results beyond scores (output, log-sum-exp,
// top-k, key mass), written from the formulas of docs/design.md section 1
// and sharing no code with core/: its own mask rules, soft-capping, ALiBi,
// sinks and softmax, on q and k rotated by reference_rope.h.
//
// Tensors are std::vector<double> in C order: q [B,Sq,Hq,D], k [B,Sk,Hkv,D],
// v [B,Sk,Hkv,Dv]. Positions are given per token (B*Sq and B*Sk values).
#ifndef ROPE_TESTS_UNIT_REFERENCE_ATTENTION_H_
#define ROPE_TESTS_UNIT_REFERENCE_ATTENTION_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "tests/unit/reference_rope.h"

namespace rope {
namespace reference {

struct MaskedAttention {
  int64_t batch = 1, q_seq = 1, k_seq = 1, q_heads = 1, k_heads = 1, v_dim = 0;
  std::vector<int64_t> q_pos;  // B*Sq: position of query (b, i) at b*Sq + i
  std::vector<int64_t> k_pos;  // B*Sk
  bool causal = false;
  int64_t window_left = -1;    // -1: no limit
  int64_t window_right = -1;   // -1: no limit
  int64_t chunk_size = 0;      // 0: none
  double scale = 1;
  double softcap = 0;          // 0: none
  std::vector<double> sinks;         // empty or Hq
  std::vector<double> alibi_slopes;  // empty or Hq
};

// One query row of one head.
struct ReferenceRow {
  std::vector<double> logits;  // Sk: -inf where the key is hidden
  std::vector<double> probs;   // Sk: exp(logit) / denominator (0 where hidden)
  double lse = 0;              // log(denominator); -inf when no key and no sink
  std::vector<double> output;  // Dv: sum_j probs[j] v[j] (when v is given)
  int64_t visible = 0;         // keys the row sees
};

class AttentionReference {
 public:
  // Rotates q and k by their positions (in double) once; `v` may be null.
  AttentionReference(const Rope& rope, const MaskedAttention& spec, const std::vector<double>& q,
                     const std::vector<double>& k, const std::vector<double>* v);

  // Whether query position qp sees key position kp.
  bool Visible(int64_t qp, int64_t kp) const;

  ReferenceRow Row(int64_t b, int64_t h, int64_t i) const;

  // [B, Hq, Sk]: each key's probability summed over the queries.
  std::vector<double> KeyMass() const;

  // The k largest probabilities of a row among the visible keys, largest
  // first, ties to the smaller index: (index, probability) pairs.
  static std::vector<std::pair<int64_t, double>> TopK(const ReferenceRow& row, int64_t k);

  const MaskedAttention& spec() const { return spec_; }

 private:
  Rope rope_;
  MaskedAttention spec_;
  std::vector<double> rq_, rk_;
  const std::vector<double>* v_;
};

}  // namespace reference
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_REFERENCE_ATTENTION_H_
