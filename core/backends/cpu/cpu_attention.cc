#include "core/backends/cpu/cpu_attention.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cpu/thread_scratch.h"

namespace rope {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Query rows per score GEMM: enough for OpenBLAS to run near its peak and to
// amortise packing the key panel, few enough that a causal block computes
// little above the diagonal (about rows / 2 keys per row).
constexpr int64_t kGemmRows = 256;
// Score rows of one GEMM stay in a per-thread buffer of at most this many
// floats (2 MiB: within L2 + L3 of one core), where the softmax reads them.
constexpr int64_t kBlockScoreFloats = int64_t{1} << 19;
// Scores above this size are written with streaming stores: they cannot stay
// in cache until the caller reads them, and bypassing it saves reading every
// line before it is overwritten. Smaller ones stay in cache for the reader.
constexpr int64_t kStreamScoresBytes = int64_t{16} << 20;

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

// How the work is cut: `heads` query heads of one key/value group times
// `rows` query tokens make one score GEMM of heads * rows rows.
struct Blocking {
  int64_t heads = 1;
  int64_t rows = 1;
};

Blocking ChooseBlocking(const AttentionArgs& args) {
  const int64_t group = args.q_heads / args.k_heads;
  const int64_t row_budget = std::max<int64_t>(1, kBlockScoreFloats / args.k_seq);
  Blocking b;
  b.heads = group;
  b.rows = std::clamp<int64_t>(kGemmRows / group, 1, 128);
  b.rows = std::min({b.rows, args.q_seq, std::max<int64_t>(1, row_budget / group)});
  if (group > row_budget) {  // very long keys: fewer heads per GEMM
    b.heads = 1;
    for (int64_t h = row_budget; h >= 1; --h) {
      if (group % h == 0) {
        b.heads = h;
        break;
      }
    }
  }
  return b;
}

absl::Status OutOfMemory(const char* what, int64_t floats) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "out of memory allocating the float32 ", what, " for attention (", floats, " elements)"));
}

}  // namespace

absl::Status CpuAttentionScores(const cpu::CpuKernels& kernels, const RopeTable& table,
                                const AttentionArgs& args, ThreadPool* pool) {
  const int64_t d = args.head_dim, dv = args.v_dim;
  const int64_t sq = args.q_seq, sk = args.k_seq, hq = args.q_heads, hk = args.k_heads;
  const int64_t group = hq / hk;
  const TableRows& rows = table.rows();

  // Rotated float32 keys, [Hkv][B][Sk][D]: each key head is one contiguous
  // panel for the GEMMs.
  // (Allocated per call: kept per calling thread, it would stay with every
  // gRPC work thread that ever served an attention call.)
  const int64_t k_floats = hk * args.batch * sk * d;
  const std::unique_ptr<float[]> k_panels(new (std::nothrow) float[k_floats]);
  if (k_panels == nullptr) return OutOfMemory("rotated keys", k_floats);
  float* const k_rot = k_panels.get();
  cpu::RotateCopyParams kp;
  kp.dtype = args.dtype;
  kp.interleaved = args.layout == Layout::kInterleaved;
  kp.src = args.k;
  kp.src_token_stride = hk * d;
  kp.dst = k_rot;
  kp.dst_token_stride = d;
  kp.dst_head_stride = args.batch * sk * d;
  kp.heads = hk;
  kp.head_dim = d;
  kp.rotary_dim = args.rotary_dim;
  kp.rotary_offset = args.rotary_offset;
  kp.seq = sk;
  kp.table = rows;
  kp.positions = args.k_positions;
  pool->ParallelFor(args.batch * sk, 8, [&](int64_t begin, int64_t end) {
    kernels.rotate_copy(kp, begin, end);
  });

  // v in float32, [B][Sk][Hkv][Dv] as given (float32 v is read in place).
  std::unique_ptr<float[]> v_wide;
  const float* v = static_cast<const float*>(args.v);
  if (args.v != nullptr && args.dtype != DType::kFloat32) {
    const int64_t v_floats = args.batch * sk * hk * dv;
    v_wide.reset(new (std::nothrow) float[v_floats]);
    if (v_wide == nullptr) return OutOfMemory("values", v_floats);
    const int64_t token = hk * dv;
    pool->ParallelFor(args.batch * sk, 64, [&](int64_t begin, int64_t end) {
      kernels.widen(args.dtype,
                    static_cast<const char*>(args.v) + begin * token * DTypeSize(args.dtype),
                    (end - begin) * token, v_wide.get() + begin * token);
    });
    v = v_wide.get();
  }

  // The first task that finds the call interrupted records why; the others
  // then skip their work, so the pool is free again within one block's time.
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

  // One task: `blk.heads` query heads of one key head, times `blk.rows`
  // query tokens. Its scores come from one GEMM over the keys visible to its
  // last row only: causally masked key blocks are never multiplied. The
  // softmax (or the mask) then runs on each row while it is in cache, and
  // writes the row's final values once.
  const Blocking blk = ChooseBlocking(args);
  const bool stream_scores =
      args.batch * hq * sq * sk * static_cast<int64_t>(sizeof(float)) > kStreamScoresBytes;
  const int64_t row_blocks = (sq + blk.rows - 1) / blk.rows;
  const int64_t head_groups = group / blk.heads;
  const int64_t per_block = args.batch * hk * head_groups;
  std::atomic<bool> out_of_memory{false};
  pool->ParallelFor(row_blocks * per_block, 1, [&](int64_t begin, int64_t end) {
    thread_local cpu::ThreadScratch<float> q_scratch, score_scratch;
    float* qbuf = q_scratch.Get(blk.heads * blk.rows * d);
    float* scores_buf = score_scratch.Get(blk.heads * blk.rows * sk);
    if (qbuf == nullptr || scores_buf == nullptr) {
      out_of_memory.store(true);
      return;
    }
    for (int64_t task = begin; task < end; ++task) {
      if (interrupted() || out_of_memory.load(std::memory_order_relaxed)) break;
      // Last row blocks first: under a causal mask they have the most keys.
      const int64_t block = row_blocks - 1 - task / per_block;
      int64_t rest = task % per_block;
      const int64_t b = rest / (hk * head_groups);
      rest %= hk * head_groups;
      const int64_t kh = rest / head_groups;
      const int64_t h0 = kh * group + (rest % head_groups) * blk.heads;
      const int64_t i0 = block * blk.rows;
      const int64_t n_rows = std::min(blk.rows, sq - i0);
      const int64_t m = blk.heads * n_rows;
      const int64_t keys = VisibleKeys(args, b, i0 + n_rows - 1);

      // Rotated query rows, [head][token][D]: one contiguous GEMM operand.
      cpu::RotateCopyParams qp;
      qp.dtype = args.dtype;
      qp.interleaved = args.layout == Layout::kInterleaved;
      qp.src = static_cast<const char*>(args.q) + h0 * d * DTypeSize(args.dtype);
      qp.src_token_stride = hq * d;
      qp.dst = qbuf;
      qp.dst_first_token = b * sq + i0;
      qp.dst_token_stride = d;
      qp.dst_head_stride = n_rows * d;
      qp.heads = blk.heads;
      qp.head_dim = d;
      qp.rotary_dim = args.rotary_dim;
      qp.rotary_offset = args.rotary_offset;
      qp.seq = sq;
      qp.table = rows;
      qp.positions = args.q_positions;
      kernels.rotate_copy(qp, b * sq + i0, b * sq + i0 + n_rows);

      const float* kpanel = k_rot + (kh * args.batch + b) * sk * d;
      if (keys > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                    static_cast<int>(keys), static_cast<int>(d), args.scale, qbuf,
                    static_cast<int>(d), kpanel, static_cast<int>(d), 0.0f, scores_buf,
                    static_cast<int>(keys));
      }
      for (int64_t j = 0; j < blk.heads; ++j) {
        for (int64_t i = 0; i < n_rows; ++i) {
          float* row = scores_buf + (j * n_rows + i) * keys;
          float* out = args.scores + ((b * hq + h0 + j) * sq + i0 + i) * sk;
          const int64_t visible = std::min(keys, VisibleKeys(args, b, i0 + i));
          // Masked keys: 0 after a softmax, else -inf. The block's row ends
          // with the probabilities when the output needs them.
          float inv_sum = 1.0f;
          if (args.softmax) inv_sum = kernels.exp_row(row, visible);
          kernels.store_row(row, visible, sk, inv_sum, args.softmax ? 0.0f : kNegInf,
                            stream_scores, out);
          if (args.v != nullptr) {
            if (!args.softmax) inv_sum = kernels.exp_row(row, visible);
            kernels.scale_row(row, visible, inv_sum);
            // Keys past `visible` within the block count as probability 0.
            std::fill(row + visible, row + keys, 0.0f);
          }
        }
      }
      if (args.v == nullptr) continue;
      for (int64_t j = 0; j < blk.heads; ++j) {
        float* out = args.output + ((b * sq + i0) * hq + h0 + j) * dv;
        if (keys == 0) {
          for (int64_t i = 0; i < n_rows; ++i) std::fill_n(out + i * hq * dv, dv, 0.0f);
          continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n_rows),
                    static_cast<int>(dv), static_cast<int>(keys), 1.0f,
                    scores_buf + j * n_rows * keys, static_cast<int>(keys),
                    v + (b * sk * hk + kh) * dv, static_cast<int>(hk * dv), 0.0f, out,
                    static_cast<int>(hq * dv));
      }
    }
    kernels.stream_fence();
    q_scratch.Trim();
    score_scratch.Trim();
  });
  if (out_of_memory.load()) {
    return OutOfMemory("score block", blk.heads * blk.rows * sk);
  }
  if (stop.load()) {
    absl::MutexLock lock(&stop_mu);
    return stop_status;
  }
  return absl::OkStatus();
}

}  // namespace rope
