// A slow, obviously-correct reference for RoPE, written from the formulas in
// docs/design.md and sharing no code with core/engine: its own float16/bfloat16
// conversions (double arithmetic on values, not bit tricks), its own
// inv_freq/cos/sin (double or long double, no table), its own pairing,
// masking and softmax. Unit tests compare the engine against it.
//
// Tensors here are std::vector<double> in C order with the shapes of the wire
// contract: q [B,S,Hq,D], k [B,S,Hkv,D], v [B,Sk,Hkv,Dv], scores [B,Hq,Sq,Sk].
#ifndef ROPE_TESTS_UNIT_REFERENCE_ROPE_H_
#define ROPE_TESTS_UNIT_REFERENCE_ROPE_H_

#include <cstdint>
#include <vector>

namespace rope {
namespace reference {

// ---- Storage conversions ----------------------------------------------------
// Narrowing rounds to nearest, ties to even, overflows to +-inf and maps NaN
// to a NaN of the same sign. Widening is exact.

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Distance between `value` and the next representable value of larger
// magnitude in the storage type (float16 / bfloat16), for finite values.
double HalfUlp(double value);
double BFloat16Ulp(double value);

// Float8 (OCP E4M3FN, E5M2) by value: every code decoded from its fields
// (sign, exponent, mantissa) in double, and the float8 of a value found by
// searching all codes for the nearest (ties: the even code), a magnitude
// past the largest finite value (or E5M2's halfway point to infinity)
// saturating to it, NaN to 0x7f: FlashInfer's satfinite conversion.
double Float8ToDouble(uint8_t code, bool e5m2);
uint8_t DoubleToFloat8(double value, bool e5m2);

// ---- Frequencies --------------------------------------------------------------

// inv_freq[i] = theta^(-2i/rotary_dim), i < rotary_dim/2.
std::vector<double> InvFreq(double theta, int rotary_dim);
std::vector<long double> InvFreqLong(long double theta, int rotary_dim);

// ---- Tables ---------------------------------------------------------------------

// Largest |table - exact| (long double) over rows [first_pos, first_pos +
// count) of a float32 cos/sin table (values times `factor`), where row r of
// cos/sin holds rotary_dim/2 values: the value, and where it is.
struct MaxError {
  double value = 0;
  int64_t pos = -1;
  int index = -1;
};
MaxError CompareRows(long double theta, int rotary_dim, long double factor, int64_t first_pos,
                     int64_t count, const float* cos, const float* sin);

// ---- Rotation -------------------------------------------------------------------

struct Rope {
  double theta = 10000.0;
  int head_dim = 0;
  int rotary_dim = 0;  // the effective value (never 0 here)
  bool interleaved = true;
  int rotary_offset = 0;  // the first rotated feature
};

// Feature indices of pair i: interleaved (2i, 2i+1); half (i, i + r/2);
// both after rotary_offset.
void Pair(const Rope& rope, int i, int* f0, int* f1);

// Rotates one head vector (head_dim values) in place by position `pos`
// (by -pos when `inverse`). Features rotary_dim.. are left as they are.
void RotateHead(const Rope& rope, int64_t pos, bool inverse, double* x);

// Rotates x [batch, seq, heads, head_dim] in place; positions holds
// batch*seq values, positions[b*seq + s] for token (b, s).
void RotateTensor(const Rope& rope, int64_t batch, int64_t seq, int64_t heads,
                  const std::vector<int64_t>& positions, bool inverse, std::vector<double>* x);

// ---- Attention ------------------------------------------------------------------

struct AttentionShape {
  int64_t batch = 1, q_seq = 1, k_seq = 1, q_heads = 1, k_heads = 1;
  int64_t v_dim = 0;  // 0: no v
};

struct AttentionResult {
  std::vector<double> scores;  // [B,Hq,Sq,Sk]: raw masked scores, or probabilities with softmax
  std::vector<double> output;  // [B,Sq,Hq,Dv] when v_dim > 0
};

// S = (R_m q).(R_n k) * scale, -inf where causal and n > m. `scores` holds S,
// or softmax(S) over keys when `softmax`. output = softmax(S) V whatever
// `softmax` says. A row with every key masked has all-zero probabilities and
// a zero output. Positions are q_start + s and k_start + s.
AttentionResult Attention(const Rope& rope, const AttentionShape& shape,
                          const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>* v, int64_t q_start, int64_t k_start,
                          bool causal, bool softmax, double scale);

}  // namespace reference
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_REFERENCE_ROPE_H_
