#include "server/backends/cpu/cpu_attention.h"

#include <cblas.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/backends/cpu/cpu_rotate.h"
#include "server/backends/cpu/fast_exp.h"
#include "server/engine/rope_math.h"

namespace rope {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kRowBlock = 64;  // query rows per sgemm under a causal mask

// Widens `count` elements of `dtype` to float32.
void ToFloat(DType dtype, const void* src, int64_t count, float* dst) {
  switch (dtype) {
    case DType::kFloat32:
      std::copy_n(static_cast<const float*>(src), count, dst);
      return;
    case DType::kFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = math::HalfToFloat(s[i]);
      return;
    }
    case DType::kBFloat16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = math::BFloat16ToFloat(s[i]);
      return;
    }
  }
}

// Float32 copy of a [B, S, H, D] tensor, rotated by its positions.
void RotatedCopy(const RopeTable& table, const AttentionArgs& args, const void* src,
                 int64_t seq, int64_t heads, const math::PositionSpec& positions, float* dst,
                 ThreadPool* pool) {
  const int64_t token_elems = heads * args.head_dim;
  const int64_t elem_bytes = static_cast<int64_t>(DTypeSize(args.dtype));
  pool->ParallelFor(args.batch * seq, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* out = dst + t * token_elems;
      ToFloat(args.dtype, static_cast<const char*>(src) + t * token_elems * elem_bytes,
              token_elems, out);
      const int64_t pos = positions.At(t / seq, t % seq);
      CpuRotateToken(DType::kFloat32, args.layout, out, heads, args.head_dim,
                     static_cast<int>(args.rotary_dim), table.cos_row(pos), table.sin_row(pos),
                     1.0f);
    }
  });
}

// Number of leading keys of query row i that are visible (not causally
// masked): keys j with k_pos(j) <= q_pos(i).
int64_t VisibleKeys(const AttentionArgs& args, int64_t b, int64_t i) {
  if (!args.causal) return args.k_seq;
  // k positions are k_start + j, increasing in j.
  const int64_t q_pos = args.q_positions.At(b, i);
  const int64_t last = q_pos - args.k_positions.At(b, 0);  // last visible j
  if (last < 0) return 0;
  return std::min<int64_t>(args.k_seq, last + 1);
}

// In-place softmax of row[0, visible) with row[visible, n) = 0. A fully
// masked row (visible == 0) becomes all zeros.
void SoftmaxRow(float* row, int64_t visible, int64_t n) {
  // Row maximum in 8 independent lanes: without -ffast-math the compiler
  // will not reorder a float max reduction itself.
  float lane_max[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  int64_t j = 0;
  for (; j + 8 <= visible; j += 8) {
    for (int l = 0; l < 8; ++l) lane_max[l] = row[j + l] > lane_max[l] ? row[j + l] : lane_max[l];
  }
  float max_v = kNegInf;
  for (; j < visible; ++j) max_v = std::max(max_v, row[j]);
  for (int l = 0; l < 8; ++l) max_v = std::max(max_v, lane_max[l]);
  // Two loops: the exp loop vectorises; the float sum (kept in order, no
  // -ffast-math) does not.
  for (j = 0; j < visible; ++j) row[j] = ExpNonPositive(row[j] - max_v);
  float sum = 0.0f;
  for (j = 0; j < visible; ++j) sum += row[j];
  const float inv = visible > 0 ? 1.0f / sum : 0.0f;
  for (j = 0; j < visible; ++j) row[j] *= inv;
  for (j = visible; j < n; ++j) row[j] = 0.0f;
}

}  // namespace

absl::Status CpuAttentionScores(const RopeTable& table, const AttentionArgs& args,
                                ThreadPool* pool) {
  const int64_t d = args.head_dim;
  const int64_t group = args.q_heads / args.k_heads;
  std::vector<float> q, k, v;
  try {
    q.resize(args.batch * args.q_seq * args.q_heads * d);
    k.resize(args.batch * args.k_seq * args.k_heads * d);
    if (args.v != nullptr) v.resize(args.batch * args.k_seq * args.k_heads * args.v_dim);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory allocating float32 workspaces for attention: q ",
                     args.batch * args.q_seq * args.q_heads * d, " + k ",
                     args.batch * args.k_seq * args.k_heads * d, " elements"));
  }
  RotatedCopy(table, args, args.q, args.q_seq, args.q_heads, args.q_positions, q.data(), pool);
  RotatedCopy(table, args, args.k, args.k_seq, args.k_heads, args.k_positions, k.data(), pool);
  if (args.v != nullptr) ToFloat(args.dtype, args.v, static_cast<int64_t>(v.size()), v.data());

  const int64_t sq = args.q_seq, sk = args.k_seq;
  // One task per (batch, query head): S = scale * Q_h K_{h/group}^T, read in
  // place with leading dimensions heads * d.
  // The first task that finds the call interrupted records why; the others
  // then skip their work, so the pool is free again within one head's time.
  std::atomic<bool> stop{false};
  absl::Mutex stop_mu;
  absl::Status stop_status;
  auto interrupted = [&]() {
    if (stop.load(std::memory_order_relaxed)) return true;
    if (args.interrupt == nullptr) return false;
    absl::Status status = args.interrupt->Check("AttentionScores");
    if (status.ok()) return false;
    absl::MutexLock lock(&stop_mu);
    if (stop_status.ok()) stop_status = std::move(status);
    stop.store(true, std::memory_order_relaxed);
    return true;
  };
  pool->ParallelFor(args.batch * args.q_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> probs;  // softmax of S for the output when scores stay raw
    for (int64_t task = begin; task < end; ++task) {
      if (interrupted()) return;
      const int64_t b = task / args.q_heads, h = task % args.q_heads, kh = h / group;
      const float* qh = q.data() + (b * sq * args.q_heads + h) * d;
      const float* kb = k.data() + (b * sk * args.k_heads + kh) * d;
      float* s = args.scores + task * sq * sk;
      // Row blocks: under a causal mask a block only needs the keys visible
      // to its last row, which skips about half the products at prefill.
      const int64_t block = args.causal ? kRowBlock : sq;
      for (int64_t i0 = 0; i0 < sq; i0 += block) {
        const int64_t rows = std::min(block, sq - i0);
        const int64_t keys = VisibleKeys(args, b, i0 + rows - 1);
        float* sb = s + i0 * sk;
        if (keys > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                      static_cast<int>(keys), static_cast<int>(d), args.scale,
                      qh + i0 * args.q_heads * d, static_cast<int>(args.q_heads * d), kb,
                      static_cast<int>(args.k_heads * d), 0.0f, sb, static_cast<int>(sk));
        }
        for (int64_t i = 0; i < rows; ++i) {
          float* row = sb + i * sk;
          const int64_t visible = VisibleKeys(args, b, i0 + i);
          if (args.softmax) {
            SoftmaxRow(row, visible, sk);
          } else {
            std::fill(row + visible, row + sk, kNegInf);
          }
        }
        if (args.v == nullptr) continue;
        const float* p = sb;
        if (!args.softmax) {  // the output always uses probabilities
          probs.assign(sb, sb + rows * sk);
          for (int64_t i = 0; i < rows; ++i) {
            SoftmaxRow(probs.data() + i * sk, VisibleKeys(args, b, i0 + i), sk);
          }
          p = probs.data();
        }
        const int64_t dv = args.v_dim;
        const float* vb = v.data() + (b * sk * args.k_heads + kh) * dv;
        float* out = args.output + ((b * sq + i0) * args.q_heads + h) * dv;
        if (keys == 0) {
          for (int64_t i = 0; i < rows; ++i) std::fill_n(out + i * args.q_heads * dv, dv, 0.0f);
          continue;
        }
        // Probabilities past `keys` are 0 in every row of the block.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(dv), static_cast<int>(keys), 1.0f, p, static_cast<int>(sk),
                    vb, static_cast<int>(args.k_heads * dv), 0.0f, out,
                    static_cast<int>(args.q_heads * dv));
      }
    }
  });
  if (stop.load()) {
    absl::MutexLock lock(&stop_mu);
    return stop_status;
  }
  return absl::OkStatus();
}

}  // namespace rope
