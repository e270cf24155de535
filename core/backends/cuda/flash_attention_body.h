// The CUDA backend's tiled attention (every call that is not legacy,
// backend.h): per-thread phases of three kernels, as functions of (row or
// key block, thread, block_dim), so that the host tests run exactly the
// indexing and reduction order the GPU runs (tests/cuda). Framework-free;
// compiles as plain C++ (ROPE_HOST_DEVICE = inline).
//
// The inputs are the rotated float32 copies of q and k (and the float32
// copy of v) that the rotated-copy kernel writes. No q_seq x k_seq buffer:
//
// Forward (OUTPUT, LSE): one block per row (b, h, i), rows numbered
// (b * q_heads + h) * q_seq + i; the block walks the keys in tiles of
// block_dim (only the tiles that can hold a visible key, KeyTileRange) with
// an online softmax:
//   ForwardBegin                      (zero the output row; state m = -inf, l = 0)
//   per tile: s[t] = TileLogit(...)   ; barrier
//             partial[t] = s[t]       ; tree max ; barrier
//             UpdateState (every thread, from partial[0]) -> alpha
//             s[t] = TileExp(...) ; partial[t] = s[t] ; barrier ; tree sum ; barrier
//             l += partial[0] ; OutputPhase (o = alpha o + sum_j s[j] v[j]) ; barrier
//   ForwardFinish (normalise the output row; thread 0 writes the LSE)
// The running state (m, l) is the same in every thread: each computes it
// from the same shared values.
//
// Rows (SCORES, SCORE_ROWS, TOP_K): one block per row; per tile of keys
// every thread writes its key's logit or probability (exp(logit - LSE)) to
// the rows asked for, and thread 0 offers the tile's keys to the row's
// top-k heap, kept in the output row itself (RowsTopKPhase).
//
// KeyMass: one thread per (b, h, key); each walks the queries in order and
// sums the probabilities in double. No barriers.
#ifndef ROPE_BACKENDS_CUDA_FLASH_ATTENTION_BODY_H_
#define ROPE_BACKENDS_CUDA_FLASH_ATTENTION_BODY_H_

#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "core/backends/cuda/kernel_common.h"
#include "core/backends/cuda/softmax_kernel_body.h"  // NegativeInfinity, DeviceExp
#include "core/engine/attention_math.h"
#include "core/engine/rope_math.h"

namespace rope {
namespace kernels {

struct FlashAttentionParams {
  const float* q = nullptr;  // rotated, [batch, q_seq, q_heads, head_dim]
  const float* k = nullptr;  // rotated, [batch, k_seq, k_heads, head_dim]
  const float* v = nullptr;  // [batch, k_seq, k_heads, v_dim]; null: no output
  float* output = nullptr;   // [batch, q_seq, q_heads, v_dim] (forward, with v)
  float* lse = nullptr;      // [batch, q_heads, q_seq]: written by forward, read by the others
  float* scores = nullptr;      // [batch, q_heads, q_seq, k_seq] or null (rows)
  float* score_rows = nullptr;  // [batch, q_heads, score_rows_count, k_seq] or null (rows)
  int64_t score_rows_start = 0, score_rows_count = 0;
  int32_t* top_k_indices = nullptr;  // [batch, q_heads, q_seq, top_k] or null (rows)
  float* top_k_probs = nullptr;
  int64_t top_k = 0;
  float* key_mass = nullptr;  // [batch, q_heads, k_seq] (key mass)
  bool softmax = false;       // scores / score_rows hold probabilities, else logits
  int64_t batch = 0, q_seq = 0, k_seq = 0, q_heads = 0, k_heads = 0;
  int64_t head_dim = 0, v_dim = 0;
  math::PositionSpec q_positions, k_positions;
  math::AttentionMask mask;
  float scale = 1.0f;
  float softcap = 0.0f;
  const float* sinks = nullptr;         // [q_heads] or null
  const float* alibi_slopes = nullptr;  // [q_heads] or null
  // Rows [row_begin, row_end) of the forward and rows kernels (row_end -1:
  // every row); blocks stride over them.
  int64_t row_begin = 0, row_end = -1;
};

ROPE_HOST_DEVICE int64_t FlashRowEnd(const FlashAttentionParams& p) {
  return p.row_end < 0 ? p.batch * p.q_heads * p.q_seq : p.row_end;
}

ROPE_HOST_DEVICE float DeviceLog(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}

// Where row `row` is: batch b, query head h, query i.
struct FlashRow {
  int64_t b, h, i, q_pos;
  const float* q;  // its rotated query vector
};

ROPE_HOST_DEVICE FlashRow RowOf(const FlashAttentionParams& p, int64_t row) {
  FlashRow r;
  const int64_t bh = IndexDiv(row, p.q_seq);
  r.i = row - bh * p.q_seq;
  r.b = IndexDiv(bh, p.q_heads);
  r.h = bh - r.b * p.q_heads;
  r.q_pos = p.q_positions.At(r.b, r.i);
  r.q = p.q + ((r.b * p.q_seq + r.i) * p.q_heads + r.h) * p.head_dim;
  return r;
}

// The keys [*first, *last) a row can see, in key indices: for start-based
// key positions, what the causal mask, the window and the chunk allow;
// every key for explicit ones (checked pair by pair).
ROPE_HOST_DEVICE void KeyRange(const FlashAttentionParams& p, const FlashRow& r, int64_t* first,
                               int64_t* last) {
  *first = 0;
  *last = p.k_seq;
  if (p.k_positions.count != 0) return;
  const int64_t start = p.k_positions.start_pos;
  int64_t lo = 0, hi = p.k_seq - 1;  // key indices, inclusive
  const math::AttentionMask& m = p.mask;
  if (m.causal) hi = hi < r.q_pos - start ? hi : r.q_pos - start;
  if (m.window_right >= 0) {
    const int64_t right = r.q_pos - start + m.window_right;
    hi = hi < right ? hi : right;
  }
  if (m.window_left >= 0) {
    const int64_t left = r.q_pos - m.window_left - start;
    lo = lo > left ? lo : left;
  }
  if (m.chunk_size > 0) {
    const int64_t chunk = r.q_pos / m.chunk_size;
    const int64_t c_lo = chunk * m.chunk_size - start, c_hi = c_lo + m.chunk_size - 1;
    lo = lo > c_lo ? lo : c_lo;
    hi = hi < c_hi ? hi : c_hi;
  }
  if (hi < lo) {
    *first = *last = 0;
    return;
  }
  *first = lo;
  *last = hi + 1;
}

// The logit of key j for row r, -inf where hidden or j >= k_seq (attention_math.h's order).
ROPE_HOST_DEVICE float Logit(const FlashAttentionParams& p, const FlashRow& r, const float* q,
                             int64_t j) {
  if (j >= p.k_seq) return NegativeInfinity();
  const int64_t k_pos = p.k_positions.At(r.b, j);
  if (!p.mask.Visible(r.q_pos, k_pos)) return NegativeInfinity();
  const int64_t kh = IndexDiv(r.h, p.q_heads / p.k_heads);
  const float* k = p.k + ((r.b * p.k_seq + j) * p.k_heads + kh) * p.head_dim;
  float dot = 0.0f;
  for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * k[d];
  float s = dot * p.scale;
  if (p.softcap > 0.0f) s = math::SoftCap(s, p.softcap);
  if (p.alibi_slopes != nullptr) s += math::AlibiBias(p.alibi_slopes[r.h], r.q_pos, k_pos);
  return s;
}

// ---- Forward ----------------------------------------------------------------------

// Threads per block, a power of two in [32, 128]; a tile of keys is as
// many keys.
inline int FlashBlockDim(int64_t k_seq) {
  int threads = 32;
  while (threads < 128 && threads < k_seq) threads *= 2;
  return threads;
}

// Shared floats a block needs: the query vector, the tile's logits and the
// reduction array.
inline int64_t FlashSharedFloats(int64_t head_dim, int block_dim) {
  return head_dim + 2 * static_cast<int64_t>(block_dim);
}

// The running state of a row, the same in every thread of the block.
struct RowState {
  float m;  // running maximum (-inf: no visible key yet)
  float l;  // running sum of exp(logit - m)
};

// Copies the row's query vector to shared memory.
ROPE_HOST_DEVICE void LoadQueryPhase(const FlashAttentionParams& p, int64_t row, int thread,
                                     int block_dim, float* q_shared) {
  const FlashRow r = RowOf(p, row);
  for (int64_t d = thread; d < p.head_dim; d += block_dim) q_shared[d] = r.q[d];
}

// LoadQueryPhase, and the output row zeroed (each thread its features, the
// ones it accumulates in OutputPhase).
ROPE_HOST_DEVICE void ForwardBegin(const FlashAttentionParams& p, int64_t row, int thread,
                                   int block_dim, float* q_shared) {
  LoadQueryPhase(p, row, thread, block_dim, q_shared);
  const FlashRow r = RowOf(p, row);
  if (p.output != nullptr && p.v != nullptr) {
    float* o = p.output + ((r.b * p.q_seq + r.i) * p.q_heads + r.h) * p.v_dim;
    for (int64_t d = thread; d < p.v_dim; d += block_dim) o[d] = 0.0f;
  }
}

// The logit of this thread's key of the tile starting at key k0.
ROPE_HOST_DEVICE float TileLogit(const FlashAttentionParams& p, int64_t row, int64_t k0,
                                 int64_t k_end, int thread, const float* q_shared) {
  const FlashRow r = RowOf(p, row);
  const int64_t j = k0 + thread;
  if (j >= k_end) return NegativeInfinity();
  return Logit(p, r, q_shared, j);
}

// From the tile's maximum: the new running maximum, and the factor alpha
// that rescales what came before (0 when nothing did). Returns false when
// the row has still seen nothing visible (the tile adds nothing).
ROPE_HOST_DEVICE bool UpdateMax(RowState* state, float tile_max, float* alpha) {
  const float m_new = tile_max > state->m ? tile_max : state->m;
  if (m_new == NegativeInfinity()) return false;
  *alpha = state->m == NegativeInfinity() ? 0.0f : DeviceExp(state->m - m_new);
  state->l *= *alpha;
  state->m = m_new;
  return true;
}

// This thread's probability relative to the running maximum.
ROPE_HOST_DEVICE float TileExp(float logit, const RowState& state) {
  return logit == NegativeInfinity() ? 0.0f : DeviceExp(logit - state.m);
}

// o = alpha o + sum over the tile of p[j] v[k0 + j], for this thread's
// output features.
ROPE_HOST_DEVICE void OutputPhase(const FlashAttentionParams& p, int64_t row, int64_t k0,
                                  int64_t n, int thread, int block_dim, float alpha,
                                  const float* probs) {
  if (p.output == nullptr || p.v == nullptr) return;
  const FlashRow r = RowOf(p, row);
  const int64_t kh = IndexDiv(r.h, p.q_heads / p.k_heads);
  float* o = p.output + ((r.b * p.q_seq + r.i) * p.q_heads + r.h) * p.v_dim;
  const float* v = p.v + ((r.b * p.k_seq + k0) * p.k_heads + kh) * p.v_dim;
  const int64_t v_stride = p.k_heads * p.v_dim;
  for (int64_t d = thread; d < p.v_dim; d += block_dim) {
    float acc = o[d] * alpha;
    for (int64_t j = 0; j < n; ++j) acc += probs[j] * v[j * v_stride + d];
    o[d] = acc;
  }
}

// The row's final values: the output normalised by the denominator (with
// its sink), and the LSE (thread 0). A row that saw nothing: LSE = sink or
// -inf, output 0 (already).
ROPE_HOST_DEVICE void ForwardFinish(const FlashAttentionParams& p, int64_t row, int thread,
                                    int block_dim, const RowState& state) {
  const FlashRow r = RowOf(p, row);
  const bool sink = p.sinks != nullptr;
  const float sink_value = sink ? p.sinks[r.h] : NegativeInfinity();
  float lse, inv = 0.0f;
  if (state.m == NegativeInfinity()) {
    lse = sink_value;
  } else if (sink) {
    const float top = state.m > sink_value ? state.m : sink_value;
    lse = top + DeviceLog(state.l * DeviceExp(state.m - top) + DeviceExp(sink_value - top));
    inv = 1.0f / (state.l + DeviceExp(sink_value - state.m));
  } else {
    lse = state.m + DeviceLog(state.l);
    inv = 1.0f / state.l;
  }
  if (thread == 0) p.lse[(r.b * p.q_heads + r.h) * p.q_seq + r.i] = lse;
  if (p.output != nullptr && p.v != nullptr && state.m != NegativeInfinity()) {
    float* o = p.output + ((r.b * p.q_seq + r.i) * p.q_heads + r.h) * p.v_dim;
    for (int64_t d = thread; d < p.v_dim; d += block_dim) o[d] *= inv;
  }
}

// ---- Rows: SCORES, SCORE_ROWS, TOP_K ------------------------------------------------

// The probability of a logit given the row's LSE.
ROPE_HOST_DEVICE float Probability(float logit, float lse) {
  if (logit == NegativeInfinity() || lse == NegativeInfinity()) return 0.0f;
  return DeviceExp(logit - lse);
}

// Writes this thread's key of the tile to SCORES / SCORE_ROWS (logit or
// probability as `softmax` says) and leaves its logit and probability in
// the shared arrays for the top-k phase.
ROPE_HOST_DEVICE void RowsWritePhase(const FlashAttentionParams& p, int64_t row, int64_t k0,
                                     int thread, const float* q_shared, float* logits,
                                     float* probs) {
  const FlashRow r = RowOf(p, row);
  const int64_t j = k0 + thread;
  const float logit = TileLogit(p, row, k0, p.k_seq, thread, q_shared);
  const float lse = p.lse != nullptr ? p.lse[(r.b * p.q_heads + r.h) * p.q_seq + r.i] : 0.0f;
  const float prob = p.lse != nullptr ? Probability(logit, lse) : 0.0f;
  logits[thread] = logit;
  probs[thread] = prob;
  if (j >= p.k_seq) return;
  const float value = p.softmax ? prob : logit;
  if (p.scores != nullptr) p.scores[((r.b * p.q_heads + r.h) * p.q_seq + r.i) * p.k_seq + j] = value;
  if (p.score_rows != nullptr && r.i >= p.score_rows_start &&
      r.i < p.score_rows_start + p.score_rows_count) {
    p.score_rows[((r.b * p.q_heads + r.h) * p.score_rows_count + r.i - p.score_rows_start) *
                     p.k_seq +
                 j] = value;
  }
}

// The row's top-k heap in its output row: the root is the worst entry
// (smallest probability; of equal ones, the larger index). NaN ranks below
// everything.
struct TopKHeap {
  int32_t* index;
  float* prob;
  int64_t k;

  ROPE_HOST_DEVICE static float Key(float x) { return x != x ? -1.0f : x; }
  ROPE_HOST_DEVICE bool Worse(int64_t a, int64_t b) const {
    const float pa = Key(prob[a]), pb = Key(prob[b]);
    return pa < pb || (pa == pb && index[a] > index[b]);
  }
  ROPE_HOST_DEVICE void Swap(int64_t a, int64_t b) {
    const int32_t i = index[a];
    index[a] = index[b];
    index[b] = i;
    const float f = prob[a];
    prob[a] = prob[b];
    prob[b] = f;
  }
  ROPE_HOST_DEVICE void SiftDown(int64_t at, int64_t size) {
    for (;;) {
      int64_t worst = at;
      const int64_t left = 2 * at + 1, right = left + 1;
      if (left < size && Worse(left, worst)) worst = left;
      if (right < size && Worse(right, worst)) worst = right;
      if (worst == at) return;
      Swap(at, worst);
      at = worst;
    }
  }
  // Keys come in increasing order: a newcomer beats the root only with a
  // strictly larger probability. `filled` is the heap's size.
  ROPE_HOST_DEVICE void Offer(int32_t key, float p, int64_t* filled) {
    if (*filled < k) {
      int64_t at = (*filled)++;
      index[at] = key;
      prob[at] = p;
      while (at > 0) {
        const int64_t parent = (at - 1) / 2;
        if (!Worse(at, parent)) break;
        Swap(at, parent);
        at = parent;
      }
      return;
    }
    if (!(Key(p) > Key(prob[0]))) return;
    index[0] = key;
    prob[0] = p;
    SiftDown(0, *filled);
  }
  // Sorted best first, padded with -1 / 0.
  ROPE_HOST_DEVICE void Finish(int64_t filled) {
    for (int64_t size = filled; size > 1; --size) {
      Swap(0, size - 1);
      SiftDown(0, size - 1);
    }
    for (int64_t i = filled; i < k; ++i) {
      index[i] = -1;
      prob[i] = 0.0f;
    }
  }
};

ROPE_HOST_DEVICE TopKHeap HeapOfRow(const FlashAttentionParams& p, int64_t row) {
  const FlashRow r = RowOf(p, row);
  const int64_t at = ((r.b * p.q_heads + r.h) * p.q_seq + r.i) * p.top_k;
  return TopKHeap{p.top_k_indices + at, p.top_k_probs + at, p.top_k};
}

// Thread 0: offers the tile's visible keys to the heap, in key order.
ROPE_HOST_DEVICE void RowsTopKPhase(const FlashAttentionParams& p, int64_t row, int64_t k0,
                                    int thread, int block_dim, const float* logits,
                                    const float* probs, int64_t* filled) {
  if (thread != 0 || p.top_k_indices == nullptr) return;
  TopKHeap heap = HeapOfRow(p, row);
  for (int j = 0; j < block_dim && k0 + j < p.k_seq; ++j) {
    if (logits[j] == NegativeInfinity()) continue;
    heap.Offer(static_cast<int32_t>(k0 + j), probs[j], filled);
  }
}

ROPE_HOST_DEVICE void RowsTopKFinish(const FlashAttentionParams& p, int64_t row, int thread,
                                     int64_t filled) {
  if (thread != 0 || p.top_k_indices == nullptr) return;
  HeapOfRow(p, row).Finish(filled);
}

// ---- Key mass -------------------------------------------------------------------------

// Items of the key-mass kernel: one per (b, h, key).
ROPE_HOST_DEVICE int64_t KeyMassItems(const FlashAttentionParams& p) {
  return p.batch * p.q_heads * p.k_seq;
}

// key_mass[b, h, j]: the probabilities of key j summed over the queries in
// order, in double.
ROPE_HOST_DEVICE void KeyMassItem(const FlashAttentionParams& p, int64_t item) {
  const int64_t bh = IndexDiv(item, p.k_seq);
  const int64_t j = item - bh * p.k_seq;
  double sum = 0.0;
  for (int64_t i = 0; i < p.q_seq; ++i) {
    const FlashRow r = RowOf(p, bh * p.q_seq + i);
    const float lse = p.lse[bh * p.q_seq + i];
    sum += static_cast<double>(Probability(Logit(p, r, r.q, j), lse));
  }
  p.key_mass[item] = static_cast<float>(sum);
}

ROPE_HOST_DEVICE void KeyMassKernelBody(const FlashAttentionParams& p, int64_t block, int thread,
                                        int block_dim, int64_t grid_dim) {
  GridStride(KeyMassItems(p), block, thread, block_dim, grid_dim,
             [&p](int64_t item) { KeyMassItem(p, item); });
}

}  // namespace kernels
}  // namespace rope

#endif  // ROPE_BACKENDS_CUDA_FLASH_ATTENTION_BODY_H_
