#include "core/backends/cpu/cpu_tiled_attention.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/backends/cpu/thread_scratch.h"
#include "core/engine/attention_math.h"

namespace rope {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows of one tile product (query heads x query tokens): enough for
// OpenBLAS to run near its peak on a head_dim-deep product, few enough that
// the tile of logits (rows x kKeysPerTile floats, 256 KiB) stays in L2.
constexpr int64_t kTileRows = 256;
constexpr int64_t kMaxTokensPerTile = 256;
constexpr int64_t kKeysPerTile = 256;
// Pass 1 splits key ranges when its tasks are fewer than this many per
// thread, and keeps each split at least this many key tiles long.
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kMinTilesPerSplit = 4;
// The split states of pass 1 stay under this many floats (16 MiB).
constexpr int64_t kMaxSplitStateFloats = int64_t{1} << 22;

// How a call is cut into tiles.
struct Plan {
  int64_t batch = 0, sq = 0, sk = 0, hq = 0, hk = 0, group = 1, d = 0, dv = 0;
  int64_t heads = 1;        // query heads of one key/value head in a tile
  int64_t tokens = 1;       // query tokens in a tile
  int64_t cols = 1;         // keys in a tile
  int64_t head_groups = 1;  // group / heads
  int64_t k_tiles = 1;
  int64_t rows() const { return heads * tokens; }
};

Plan MakePlan(const AttentionArgs& a) {
  Plan p;
  p.batch = a.batch;
  p.sq = a.q_seq;
  p.sk = a.k_seq;
  p.hq = a.q_heads;
  p.hk = a.k_heads;
  p.group = a.q_heads / a.k_heads;
  p.d = a.head_dim;
  p.dv = a.v != nullptr ? a.v_dim : 0;
  // Every head of a group in one tile when they fit (they share the key
  // tile: one product instead of `group`), else the largest divisor that
  // does.
  p.heads = 1;
  for (int64_t h = std::min(p.group, kTileRows); h >= 1; --h) {
    if (p.group % h == 0) {
      p.heads = h;
      break;
    }
  }
  p.head_groups = p.group / p.heads;
  p.tokens = std::clamp<int64_t>(kTileRows / p.heads, 1, kMaxTokensPerTile);
  p.tokens = std::min(p.tokens, p.sq);
  p.cols = std::min(kKeysPerTile, p.sk);
  p.k_tiles = (p.sk + p.cols - 1) / p.cols;
  return p;
}

// The smallest and largest position of tokens [begin, end) of batch row b.
void PositionRange(const math::PositionSpec& spec, int64_t b, int64_t begin, int64_t end,
                   int64_t* lo, int64_t* hi) {
  if (spec.count == 0) {
    *lo = spec.start_pos + begin;
    *hi = spec.start_pos + end - 1;
    return;
  }
  int64_t mn = spec.At(b, begin), mx = mn;
  for (int64_t s = begin + 1; s < end; ++s) {
    const int64_t p = spec.At(b, s);
    mn = std::min(mn, p);
    mx = std::max(mx, p);
  }
  *lo = mn;
  *hi = mx;
}

absl::Status OutOfMemory(const char* what, int64_t floats) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "out of memory allocating the ", what, " for attention (", floats, " floats)"));
}

// The first task that finds the call interrupted records why; the others
// then skip their work, so the pool is free again within one tile's time.
class Stopper {
 public:
  explicit Stopper(const Interrupt* interrupt) : interrupt_(interrupt) {}
  bool Stopped() {
    if (stop_.load(std::memory_order_relaxed)) return true;
    if (interrupt_ == nullptr) return false;
    absl::Status status = interrupt_->Check("AttentionScores");
    if (status.ok()) return false;
    Fail(std::move(status));
    return true;
  }
  // Whether a task has stopped the call (without polling the interrupt).
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = std::move(status);
    stop_.store(true, std::memory_order_relaxed);
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  const Interrupt* const interrupt_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Per-thread buffers of one task, carved from two thread-local scratches.
struct Buffers {
  float* q = nullptr;       // rows x d: the rotated query rows, [head][token][d]
  float* k = nullptr;       // cols x d: one rotated key tile
  float* v = nullptr;       // cols x dv: one widened value tile (16-bit v)
  float* s = nullptr;       // rows x cols: logits, then probabilities
  float* p = nullptr;       // rows x cols: probabilities beside the logits (TOP_K)
  float* o = nullptr;       // rows x dv: the output accumulator
  float* m = nullptr;       // rows: running maxima
  float* l = nullptr;       // rows: running sums
  float* q_pos_f = nullptr;  // tokens
  float* k_pos_f = nullptr;  // cols
  float* mass = nullptr;     // heads x cols (pass 3)
  double* mass_sum = nullptr;  // heads x cols (pass 3)
  int64_t* q_pos = nullptr;  // tokens
  int64_t* k_pos = nullptr;  // cols
  int64_t* filled = nullptr;  // rows: top-k heap sizes
};

// The thread-local scratches Buffers are carved from.
struct Scratch {
  cpu::ThreadScratch<float> floats;
  cpu::ThreadScratch<int64_t> ints;
  cpu::ThreadScratch<double> doubles;
  void Trim() {
    floats.Trim();
    ints.Trim();
    doubles.Trim();
  }
};

Scratch& ThreadScratches() {
  thread_local Scratch scratch;
  return scratch;
}

bool GetBuffers(const Plan& plan, Buffers* b) {
  Scratch& scratch = ThreadScratches();
  const int64_t rows = plan.rows(), cols = plan.cols;
  const int64_t sizes[] = {rows * plan.d, cols * plan.d, cols * plan.dv, rows * cols,
                           rows * cols,   rows * plan.dv, rows,         rows,
                           plan.tokens,   cols,           plan.heads * cols};
  int64_t total = 0;
  for (int64_t n : sizes) total += (n + 15) / 16 * 16;  // 64-byte aligned pieces
  float* f = scratch.floats.Get(total);
  int64_t* i = scratch.ints.Get(plan.tokens + cols + rows);
  double* dd = scratch.doubles.Get(plan.heads * cols);
  if (f == nullptr || i == nullptr || dd == nullptr) return false;
  float** pieces[] = {&b->q, &b->k, &b->v, &b->s, &b->p, &b->o,
                      &b->m, &b->l, &b->q_pos_f, &b->k_pos_f, &b->mass};
  for (size_t n = 0; n < sizeof(sizes) / sizeof(sizes[0]); ++n) {
    *pieces[n] = f;
    f += (sizes[n] + 15) / 16 * 16;
  }
  b->q_pos = i;
  b->k_pos = i + plan.tokens;
  b->filled = i + plan.tokens + cols;
  b->mass_sum = dd;
  return true;
}

// Runs task(index, buffers) for every index of [0, n) over the pool, with
// each thread's buffers; stops early when `stop` says so. False when the
// buffers could not be allocated.
template <typename Task>
bool RunTasks(ThreadPool* pool, const Plan& plan, int64_t n, Stopper* stop, Task&& task) {
  std::atomic<bool> no_memory{false};
  pool->ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    Buffers buf;
    if (!GetBuffers(plan, &buf)) {
      no_memory.store(true);
      return;
    }
    for (int64_t index = begin; index < end; ++index) {
      if (no_memory.load(std::memory_order_relaxed) || stop->Stopped()) break;
      task(index, buf);
    }
    ThreadScratches().Trim();
  });
  return !no_memory.load();
}

// The query rows of one tile: `heads` query heads from h0 (of key/value
// head kh) times tokens [i0, i0 + tokens) of batch row b.
struct RowBlock {
  int64_t b = 0, kh = 0, h0 = 0, i0 = 0, tokens = 0;
};

// What every pass shares: the call, its plan, and the per-tile steps.
class Tiles {
 public:
  Tiles(const cpu::CpuKernels& kernels, const RopeTable& table, const AttentionArgs& args,
        const Plan& plan)
      : kernels_(kernels), rows_(table.rows()), args_(args), plan_(plan) {}

  const Plan& plan() const { return plan_; }
  const AttentionArgs& args() const { return args_; }

  // Rotates the block's query rows into buf.q ([head][token][d]) and
  // gathers their positions.
  void LoadQueries(const RowBlock& r, Buffers& buf, int64_t* q_min, int64_t* q_max) const {
    cpu::RotateCopyParams qp;
    qp.dtype = args_.dtype;
    qp.interleaved = args_.layout == Layout::kInterleaved;
    qp.src = static_cast<const char*>(args_.q) + r.h0 * plan_.d * DTypeSize(args_.dtype);
    qp.src_token_stride = plan_.hq * plan_.d;
    qp.dst = buf.q;
    qp.dst_first_token = r.b * plan_.sq + r.i0;
    qp.dst_token_stride = plan_.d;
    qp.dst_head_stride = r.tokens * plan_.d;
    qp.heads = plan_.heads;
    qp.head_dim = plan_.d;
    qp.rotary_dim = args_.rotary_dim;
    qp.seq = plan_.sq;
    qp.table = rows_;
    qp.positions = args_.q_positions;
    kernels_.rotate_copy(qp, r.b * plan_.sq + r.i0, r.b * plan_.sq + r.i0 + r.tokens);
    for (int64_t t = 0; t < r.tokens; ++t) {
      buf.q_pos[t] = args_.q_positions.At(r.b, r.i0 + t);
      buf.q_pos_f[t] = static_cast<float>(buf.q_pos[t]);
    }
    PositionRange(args_.q_positions, r.b, r.i0, r.i0 + r.tokens, q_min, q_max);
  }

  // Rotates keys [k0, k0 + n) of key head kh, batch row b, into buf.k
  // ([key][d]) and gathers their positions.
  void LoadKeys(int64_t b, int64_t kh, int64_t k0, int64_t n, Buffers& buf) const {
    cpu::RotateCopyParams kp;
    kp.dtype = args_.dtype;
    kp.interleaved = args_.layout == Layout::kInterleaved;
    kp.src = static_cast<const char*>(args_.k) + kh * plan_.d * DTypeSize(args_.dtype);
    kp.src_token_stride = plan_.hk * plan_.d;
    kp.dst = buf.k;
    kp.dst_first_token = b * plan_.sk + k0;
    kp.dst_token_stride = plan_.d;
    kp.dst_head_stride = 0;
    kp.heads = 1;
    kp.head_dim = plan_.d;
    kp.rotary_dim = args_.rotary_dim;
    kp.seq = plan_.sk;
    kp.table = rows_;
    kp.positions = args_.k_positions;
    kernels_.rotate_copy(kp, b * plan_.sk + k0, b * plan_.sk + k0 + n);
    for (int64_t j = 0; j < n; ++j) {
      buf.k_pos[j] = args_.k_positions.At(b, k0 + j);
      buf.k_pos_f[j] = static_cast<float>(buf.k_pos[j]);
    }
  }

  // The value rows of keys [k0, k0 + n) of key head kh as float32, and
  // their row stride: in place for float32 v, else widened into buf.v.
  const float* LoadValues(int64_t b, int64_t kh, int64_t k0, int64_t n, Buffers& buf,
                          int64_t* ld) const {
    const int64_t dv = plan_.dv;
    const int64_t first = (b * plan_.sk + k0) * plan_.hk + kh;  // in rows of dv elements
    if (args_.dtype == DType::kFloat32) {
      *ld = plan_.hk * dv;
      return static_cast<const float*>(args_.v) + first * dv;
    }
    const size_t elem = DTypeSize(args_.dtype);
    for (int64_t j = 0; j < n; ++j) {
      kernels_.widen(args_.dtype,
                     static_cast<const char*>(args_.v) + (first + j * plan_.hk) * dv * elem, dv,
                     buf.v + j * dv);
    }
    *ld = dv;
    return buf.v;
  }

  // The logits of the block's rows (loaded queries) against the loaded key
  // tile of n keys, into buf.s [rows][n]: the scaled product, soft-capping,
  // ALiBi, and the mask where `vis` says some pairs are hidden.
  void Logits(const RowBlock& r, int64_t n, math::BlockVisibility vis, Buffers& buf) const {
    const int64_t m = plan_.heads * r.tokens;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(plan_.d), args_.scale, buf.q,
                static_cast<int>(plan_.d), buf.k, static_cast<int>(plan_.d), 0.0f, buf.s,
                static_cast<int>(n));
    if (args_.softcap > 0) kernels_.softcap_row(buf.s, m * n, args_.softcap);
    if (args_.alibi_slopes != nullptr) {
      for (int64_t j = 0; j < plan_.heads; ++j) {
        const float slope = args_.alibi_slopes[r.h0 + j];
        for (int64_t t = 0; t < r.tokens; ++t) {
          kernels_.alibi_row(buf.s + (j * r.tokens + t) * n, n, slope, buf.q_pos_f[t],
                             buf.k_pos_f);
        }
      }
    }
    if (vis == math::BlockVisibility::kSome) {
      for (int64_t t = 0; t < r.tokens; ++t) {
        const int64_t qp = buf.q_pos[t];
        for (int64_t c = 0; c < n; ++c) {
          if (args_.mask.Visible(qp, buf.k_pos[c])) continue;
          for (int64_t j = 0; j < plan_.heads; ++j) buf.s[(j * r.tokens + t) * n + c] = kNegInf;
        }
      }
    }
  }

  const cpu::CpuKernels& kernels() const { return kernels_; }

 private:
  const cpu::CpuKernels& kernels_;
  const TableRows rows_;
  const AttentionArgs& args_;
  const Plan plan_;
};

// Key tiles' position ranges per batch row: [b * k_tiles + t].
struct KeyRanges {
  std::vector<int64_t> lo, hi;
};

KeyRanges KeyTileRanges(const AttentionArgs& a, const Plan& p) {
  KeyRanges r;
  r.lo.resize(p.batch * p.k_tiles);
  r.hi.resize(p.batch * p.k_tiles);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.k_tiles; ++t) {
      const int64_t k0 = t * p.cols;
      PositionRange(a.k_positions, b, k0, std::min(k0 + p.cols, p.sk), &r.lo[b * p.k_tiles + t],
                    &r.hi[b * p.k_tiles + t]);
    }
  }
  return r;
}

// The final values of one row from its running maximum m, sum l and
// unnormalised output o (dv floats, may be null): the output scaled by 1 /
// denominator in place, and the LSE returned. The sink joins the
// denominator here; a row that saw no key has LSE = its sink (or -inf) and
// output 0.
float FinishRow(float m, float l, const float* sink, float* o, int64_t dv) {
  if (m == kNegInf) {
    if (o != nullptr) std::fill(o, o + dv, 0.0f);
    return sink != nullptr ? *sink : kNegInf;
  }
  double denom = l;
  double lse;
  if (sink != nullptr) {
    // log(l e^m + e^sink), from the larger exponent so that neither overflows.
    const double top = std::max<double>(m, *sink);
    lse = top + std::log(static_cast<double>(l) * std::exp(static_cast<double>(m) - top) +
                         std::exp(static_cast<double>(*sink) - top));
    denom = static_cast<double>(l) + std::exp(static_cast<double>(*sink) - m);
  } else {
    lse = static_cast<double>(m) + std::log(static_cast<double>(l));
  }
  if (o != nullptr) {
    const float inv = static_cast<float>(1.0 / denom);
    for (int64_t c = 0; c < dv; ++c) o[c] *= inv;
  }
  return static_cast<float>(lse);
}

// ---- Pass 1: OUTPUT and LSE ---------------------------------------------------

class ForwardPass {
 public:
  ForwardPass(const Tiles& tiles, const KeyRanges& keys, float* lse, bool output)
      : tiles_(tiles), keys_(keys), lse_(lse), output_(output) {}

  // Runs the pass over `pool`; split states (when the tasks are few) are
  // merged before the rows are finished.
  absl::Status Run(ThreadPool* pool, Stopper* stop) {
    const Plan& p = tiles_.plan();
    q_tiles_ = (p.sq + p.tokens - 1) / p.tokens;
    tasks_ = p.batch * p.hk * p.head_groups * q_tiles_;
    splits_ = 1;
    const int64_t want = kTasksPerThread * pool->threads();
    if (tasks_ < want && p.k_tiles >= 2 * kMinTilesPerSplit) {
      splits_ = std::min((want + tasks_ - 1) / tasks_, p.k_tiles / kMinTilesPerSplit);
      const int64_t state = p.rows() * (p.dv + 2);
      splits_ = std::max<int64_t>(1, std::min(splits_, kMaxSplitStateFloats / (tasks_ * state)));
    }
    if (splits_ > 1) {
      const int64_t floats = tasks_ * splits_ * p.rows() * (p.dv + 2);
      states_.reset(new (std::nothrow) float[floats]);
      if (states_ == nullptr) return OutOfMemory("split states", floats);
    }
    if (!RunTasks(pool, p, tasks_ * splits_, stop,
                  [&](int64_t index, Buffers& buf) { RunTask(index, buf, stop); })) {
      return OutOfMemory("tile buffers", p.rows() * p.cols * 2);
    }
    if (splits_ > 1 && !stop->stopped()) {
      pool->ParallelFor(tasks_, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          if (stop->Stopped()) break;
          MergeSplits(task);
        }
      });
    }
    return absl::OkStatus();
  }

 private:
  // Task index -> row block; the last query tiles first (under a causal
  // mask they see the most keys).
  RowBlock BlockOf(int64_t task) const {
    const Plan& p = tiles_.plan();
    const int64_t per_tile = p.batch * p.hk * p.head_groups;
    const int64_t qt = q_tiles_ - 1 - task / per_tile;
    int64_t rest = task % per_tile;
    RowBlock r;
    r.b = rest / (p.hk * p.head_groups);
    rest %= p.hk * p.head_groups;
    r.kh = rest / p.head_groups;
    r.h0 = r.kh * p.group + (rest % p.head_groups) * p.heads;
    r.i0 = qt * p.tokens;
    r.tokens = std::min(p.tokens, p.sq - r.i0);
    return r;
  }

  void RunTask(int64_t index, Buffers& buf, Stopper* stop) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    const cpu::CpuKernels& kern = tiles_.kernels();
    const int64_t task = index / splits_, split = index % splits_;
    const RowBlock r = BlockOf(task);
    const int64_t m = p.heads * r.tokens;
    int64_t q_min, q_max;
    tiles_.LoadQueries(r, buf, &q_min, &q_max);
    std::fill(buf.m, buf.m + m, kNegInf);
    std::fill(buf.l, buf.l + m, 0.0f);
    if (output_) std::fill(buf.o, buf.o + m * p.dv, 0.0f);
    const int64_t t_begin = p.k_tiles * split / splits_;
    const int64_t t_end = p.k_tiles * (split + 1) / splits_;
    for (int64_t kt = t_begin; kt < t_end; ++kt) {
      const math::BlockVisibility vis =
          math::ClassifyBlock(a.mask, q_min, q_max, keys_.lo[r.b * p.k_tiles + kt],
                              keys_.hi[r.b * p.k_tiles + kt]);
      if (vis == math::BlockVisibility::kNone) continue;
      if (kt > t_begin && stop->Stopped()) return;
      const int64_t k0 = kt * p.cols, n = std::min(p.cols, p.sk - k0);
      tiles_.LoadKeys(r.b, r.kh, k0, n, buf);
      tiles_.Logits(r, n, vis, buf);
      // Online softmax, row by row: the tile's probabilities relative to
      // the new running maximum, and the rescaling of what came before.
      for (int64_t row = 0; row < m; ++row) {
        float* s = buf.s + row * n;
        const float m_new = std::max(buf.m[row], kern.row_max(s, n));
        if (m_new == kNegInf) {  // nothing visible yet: probabilities 0
          std::fill(s, s + n, 0.0f);
          continue;
        }
        const float alpha = buf.m[row] == kNegInf ? 0.0f : std::exp(buf.m[row] - m_new);
        buf.l[row] = buf.l[row] * alpha + kern.exp_sum_row(s, n, m_new);
        buf.m[row] = m_new;
        if (output_ && alpha != 1.0f) kern.scale_row(buf.o + row * p.dv, p.dv, alpha);
      }
      if (output_) {
        int64_t ld = 0;
        const float* v = tiles_.LoadValues(r.b, r.kh, k0, n, buf, &ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(p.dv), static_cast<int>(n), 1.0f, buf.s,
                    static_cast<int>(n), v, static_cast<int>(ld), 1.0f, buf.o,
                    static_cast<int>(p.dv));
      }
    }
    if (splits_ > 1) {
      float* state = states_.get() + index * p.rows() * (p.dv + 2);
      for (int64_t row = 0; row < m; ++row) {
        float* st = state + row * (p.dv + 2);
        st[0] = buf.m[row];
        st[1] = buf.l[row];
        if (output_) std::memcpy(st + 2, buf.o + row * p.dv, p.dv * sizeof(float));
      }
      return;
    }
    Finish(r, buf.m, buf.l, buf.o, p.dv);
  }

  // Combines the splits of one task (each a running maximum, sum and
  // unnormalised output over its keys), then finishes its rows.
  void MergeSplits(int64_t task) {
    const Plan& p = tiles_.plan();
    const RowBlock r = BlockOf(task);
    const int64_t m = p.heads * r.tokens;
    const int64_t stride = p.dv + 2;
    std::vector<float> mm(m), ll(m), oo(output_ ? m * p.dv : 0);
    for (int64_t row = 0; row < m; ++row) {
      const float* first = states_.get() + (task * splits_) * p.rows() * stride + row * stride;
      float top = kNegInf;
      for (int64_t s = 0; s < splits_; ++s) top = std::max(top, first[s * p.rows() * stride]);
      mm[row] = top;
      double sum = 0;
      float* o = output_ ? oo.data() + row * p.dv : nullptr;
      if (o != nullptr) std::fill(o, o + p.dv, 0.0f);
      if (top == kNegInf) {
        ll[row] = 0.0f;
        continue;
      }
      for (int64_t s = 0; s < splits_; ++s) {
        const float* st = first + s * p.rows() * stride;
        if (st[0] == kNegInf) continue;
        const float w = std::exp(st[0] - top);
        sum += static_cast<double>(st[1]) * w;
        if (o != nullptr) {
          for (int64_t c = 0; c < p.dv; ++c) o[c] += w * st[2 + c];
        }
      }
      ll[row] = static_cast<float>(sum);
    }
    Finish(r, mm.data(), ll.data(), output_ ? oo.data() : nullptr, p.dv);
  }

  // Writes the rows' LSE and outputs.
  void Finish(const RowBlock& r, const float* m, const float* l, float* o, int64_t dv) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    for (int64_t j = 0; j < p.heads; ++j) {
      const int64_t h = r.h0 + j;
      for (int64_t t = 0; t < r.tokens; ++t) {
        const int64_t row = j * r.tokens + t;
        const int64_t i = r.i0 + t;
        float* orow = output_ ? o + row * dv : nullptr;
        const float lse = FinishRow(m[row], l[row], a.sinks != nullptr ? &a.sinks[h] : nullptr,
                                    orow, dv);
        if (lse_ != nullptr) lse_[(r.b * p.hq + h) * p.sq + i] = lse;
        if (orow != nullptr) {
          std::memcpy(a.output + ((r.b * p.sq + i) * p.hq + h) * dv, orow, dv * sizeof(float));
        }
      }
    }
  }

  const Tiles& tiles_;
  const KeyRanges& keys_;
  float* const lse_;
  const bool output_;
  int64_t q_tiles_ = 0, tasks_ = 0, splits_ = 1;
  std::unique_ptr<float[]> states_;
};

// ---- Pass 2: SCORES, SCORE_ROWS, TOP_K -------------------------------------------

// Top-k of one row kept as a min-heap in the row's own output: the root is
// the worst entry (smallest probability; of equal ones, the larger index).
struct TopKRow {
  int32_t* index;
  float* prob;
  int64_t k;
  int64_t* filled;

  // NaN sorts below every probability, so that the order stays total.
  static float Key(float p) { return std::isnan(p) ? -1.0f : p; }
  bool Worse(int64_t a, int64_t b) const {  // entry a ranks below entry b
    const float pa = Key(prob[a]), pb = Key(prob[b]);
    return pa < pb || (pa == pb && index[a] > index[b]);
  }
  void Swap(int64_t a, int64_t b) {
    std::swap(index[a], index[b]);
    std::swap(prob[a], prob[b]);
  }
  void SiftDown(int64_t at, int64_t size) {
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
  // Keys arrive in increasing index order, so a newcomer beats the root
  // only with a strictly larger probability.
  void Offer(int32_t key, float p) {
    int64_t& n = *filled;
    if (n < k) {
      index[n] = key;
      prob[n] = p;
      for (int64_t at = n++; at > 0;) {
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
    SiftDown(0, n);
  }
  // Sorted best first; -1 / 0 past the keys the row saw.
  void Finish() {
    const int64_t n = *filled;
    for (int64_t size = n; size > 1; --size) {  // heap sort: worst to the back
      Swap(0, size - 1);
      SiftDown(0, size - 1);
    }
    for (int64_t i = n; i < k; ++i) {
      index[i] = -1;
      prob[i] = 0.0f;
    }
  }
};

class RowsPass {
 public:
  RowsPass(const Tiles& tiles, const KeyRanges& keys, const float* lse)
      : tiles_(tiles), keys_(keys), lse_(lse) {}

  absl::Status Run(ThreadPool* pool, Stopper* stop) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    // SCORES and TOP_K need every row; SCORE_ROWS alone only its range.
    first_ = 0;
    last_ = p.sq;
    if (a.scores == nullptr && a.top_k_indices == nullptr) {
      first_ = a.score_rows_start;
      last_ = a.score_rows_start + a.score_rows_count;
    }
    q_tiles_ = (last_ - first_ + p.tokens - 1) / p.tokens;
    const int64_t tasks = p.batch * p.hk * p.head_groups * q_tiles_;
    if (!RunTasks(pool, p, tasks, stop,
                  [&](int64_t index, Buffers& buf) { RunTask(index, buf, stop); })) {
      return OutOfMemory("tile buffers", p.rows() * p.cols * 2);
    }
    return absl::OkStatus();
  }

 private:
  void RunTask(int64_t task, Buffers& buf, Stopper* stop) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    const cpu::CpuKernels& kern = tiles_.kernels();
    const int64_t per_tile = p.batch * p.hk * p.head_groups;
    RowBlock r;
    int64_t rest = task % per_tile;
    r.b = rest / (p.hk * p.head_groups);
    rest %= p.hk * p.head_groups;
    r.kh = rest / p.head_groups;
    r.h0 = r.kh * p.group + (rest % p.head_groups) * p.heads;
    r.i0 = first_ + (q_tiles_ - 1 - task / per_tile) * p.tokens;
    r.tokens = std::min(p.tokens, last_ - r.i0);
    const int64_t m = p.heads * r.tokens;
    int64_t q_min, q_max;
    tiles_.LoadQueries(r, buf, &q_min, &q_max);
    const float fill = a.softmax ? 0.0f : kNegInf;
    const bool top_k = a.top_k_indices != nullptr;
    if (top_k) std::fill(buf.filled, buf.filled + m, int64_t{0});

    for (int64_t kt = 0; kt < p.k_tiles; ++kt) {
      if (kt > 0 && stop->Stopped()) return;
      const int64_t k0 = kt * p.cols, n = std::min(p.cols, p.sk - k0);
      const math::BlockVisibility vis =
          math::ClassifyBlock(a.mask, q_min, q_max, keys_.lo[r.b * p.k_tiles + kt],
                              keys_.hi[r.b * p.k_tiles + kt]);
      if (vis == math::BlockVisibility::kNone) {
        ForEachRow(r, [&](int64_t, float* dst) {
          if (dst != nullptr) std::fill(dst + k0, dst + k0 + n, fill);
        });
        continue;
      }
      tiles_.LoadKeys(r.b, r.kh, k0, n, buf);
      tiles_.Logits(r, n, vis, buf);
      if (!a.softmax) {
        ForEachRow(r, [&](int64_t row, float* dst) {
          if (dst != nullptr) std::memcpy(dst + k0, buf.s + row * n, n * sizeof(float));
        });
        if (!top_k) continue;
      }
      // Probabilities exp(logit - LSE), into buf.p (TOP_K needs the logits
      // beside them to tell hidden keys from visible ones of probability 0).
      float* probs = top_k ? buf.p : buf.s;
      for (int64_t row = 0; row < m; ++row) {
        const int64_t h = r.h0 + row / r.tokens, i = r.i0 + row % r.tokens;
        const float lse = lse_[(r.b * p.hq + h) * p.sq + i];
        float* dst = probs + row * n;
        if (top_k) std::memcpy(dst, buf.s + row * n, n * sizeof(float));
        if (lse == kNegInf) {
          std::fill(dst, dst + n, 0.0f);
        } else {
          kern.exp_sum_row(dst, n, lse);
        }
      }
      if (a.softmax) {
        ForEachRow(r, [&](int64_t row, float* dst) {
          if (dst != nullptr) std::memcpy(dst + k0, probs + row * n, n * sizeof(float));
        });
      }
      if (top_k) {
        for (int64_t row = 0; row < m; ++row) {
          TopKRow heap = HeapOf(r, row, buf);
          const float* logits = buf.s + row * n;
          const float* pr = probs + row * n;
          for (int64_t c = 0; c < n; ++c) {
            if (logits[c] == kNegInf) continue;  // hidden
            heap.Offer(static_cast<int32_t>(k0 + c), pr[c]);
          }
        }
      }
    }
    if (top_k) {
      for (int64_t row = 0; row < m; ++row) HeapOf(r, row, buf).Finish();
    }
  }

  TopKRow HeapOf(const RowBlock& r, int64_t row, Buffers& buf) const {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    const int64_t h = r.h0 + row / r.tokens, i = r.i0 + row % r.tokens;
    const int64_t at = ((r.b * p.hq + h) * p.sq + i) * a.top_k;
    return TopKRow{a.top_k_indices + at, a.top_k_probs + at, a.top_k, buf.filled + row};
  }

  // f(row, dst) for each row of the block and each of SCORES / SCORE_ROWS
  // that holds it: dst is the start of its k_seq floats.
  template <typename F>
  void ForEachRow(const RowBlock& r, F&& f) const {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    for (int64_t j = 0; j < p.heads; ++j) {
      const int64_t h = r.h0 + j;
      for (int64_t t = 0; t < r.tokens; ++t) {
        const int64_t row = j * r.tokens + t, i = r.i0 + t;
        if (a.scores != nullptr) f(row, a.scores + ((r.b * p.hq + h) * p.sq + i) * p.sk);
        if (a.score_rows != nullptr && i >= a.score_rows_start &&
            i < a.score_rows_start + a.score_rows_count) {
          f(row, a.score_rows +
                     ((r.b * p.hq + h) * a.score_rows_count + i - a.score_rows_start) * p.sk);
        }
      }
    }
  }

  const Tiles& tiles_;
  const KeyRanges& keys_;
  const float* const lse_;
  int64_t first_ = 0, last_ = 0, q_tiles_ = 0;
};

// ---- Pass 3: KEY_MASS ----------------------------------------------------------

class KeyMassPass {
 public:
  KeyMassPass(const Tiles& tiles, const KeyRanges& keys, const float* lse)
      : tiles_(tiles), keys_(keys), lse_(lse) {}

  absl::Status Run(ThreadPool* pool, Stopper* stop) {
    const Plan& p = tiles_.plan();
    const int64_t tasks = p.batch * p.hk * p.head_groups * p.k_tiles;
    if (!RunTasks(pool, p, tasks, stop,
                  [&](int64_t index, Buffers& buf) { RunTask(index, buf, stop); })) {
      return OutOfMemory("tile buffers", p.rows() * p.cols * 2);
    }
    return absl::OkStatus();
  }

 private:
  void RunTask(int64_t task, Buffers& buf, Stopper* stop) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    const cpu::CpuKernels& kern = tiles_.kernels();
    const int64_t kt = task % p.k_tiles;
    int64_t rest = task / p.k_tiles;
    const int64_t b = rest / (p.hk * p.head_groups);
    rest %= p.hk * p.head_groups;
    const int64_t kh = rest / p.head_groups;
    const int64_t h0 = kh * p.group + (rest % p.head_groups) * p.heads;
    const int64_t k0 = kt * p.cols, n = std::min(p.cols, p.sk - k0);
    const int64_t k_lo = keys_.lo[b * p.k_tiles + kt], k_hi = keys_.hi[b * p.k_tiles + kt];
    tiles_.LoadKeys(b, kh, k0, n, buf);
    std::fill(buf.mass_sum, buf.mass_sum + p.heads * n, 0.0);

    const int64_t q_tiles = (p.sq + p.tokens - 1) / p.tokens;
    for (int64_t qt = 0; qt < q_tiles; ++qt) {
      RowBlock r;
      r.b = b;
      r.kh = kh;
      r.h0 = h0;
      r.i0 = qt * p.tokens;
      r.tokens = std::min(p.tokens, p.sq - r.i0);
      int64_t q_lo, q_hi;
      PositionRange(a.q_positions, b, r.i0, r.i0 + r.tokens, &q_lo, &q_hi);
      const math::BlockVisibility vis = math::ClassifyBlock(a.mask, q_lo, q_hi, k_lo, k_hi);
      if (vis == math::BlockVisibility::kNone) continue;
      if (qt > 0 && stop->Stopped()) return;
      int64_t unused_lo, unused_hi;
      tiles_.LoadQueries(r, buf, &unused_lo, &unused_hi);
      tiles_.Logits(r, n, vis, buf);
      for (int64_t j = 0; j < p.heads; ++j) {
        const int64_t h = h0 + j;
        float* mass = buf.mass;
        std::fill(mass, mass + n, 0.0f);
        for (int64_t t = 0; t < r.tokens; ++t) {
          const float lse = lse_[(b * p.hq + h) * p.sq + r.i0 + t];
          if (lse == kNegInf) continue;  // sees no key: adds nothing
          float* row = buf.s + (j * r.tokens + t) * n;
          kern.exp_sum_row(row, n, lse);
          kern.add_row(mass, row, n);
        }
        double* sum = buf.mass_sum + j * n;
        for (int64_t c = 0; c < n; ++c) sum[c] += mass[c];
      }
    }
    for (int64_t j = 0; j < p.heads; ++j) {
      float* out = a.key_mass + (b * p.hq + h0 + j) * p.sk + k0;
      for (int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(buf.mass_sum[j * n + c]);
    }
  }

  const Tiles& tiles_;
  const KeyRanges& keys_;
  const float* const lse_;
};

}  // namespace

absl::Status CpuTiledAttention(const cpu::CpuKernels& kernels, const RopeTable& table,
                               const AttentionArgs& args, ThreadPool* pool) {
  const Plan plan = MakePlan(args);
  const Tiles tiles(kernels, table, args, plan);
  const KeyRanges keys = KeyTileRanges(args, plan);
  Stopper stop(args.interrupt);

  const bool rows_pass =
      args.scores != nullptr || args.score_rows != nullptr || args.top_k_indices != nullptr;
  const bool needs_lse = args.top_k_indices != nullptr || args.key_mass != nullptr ||
                         (args.softmax && (args.scores != nullptr || args.score_rows != nullptr));
  const bool output = args.output != nullptr && args.v != nullptr;
  float* lse = args.lse;
  std::unique_ptr<float[]> lse_buffer;
  if (needs_lse && lse == nullptr) {
    const int64_t floats = plan.batch * plan.hq * plan.sq;
    lse_buffer.reset(new (std::nothrow) float[floats]);
    if (lse_buffer == nullptr) return OutOfMemory("log-sum-exp of every row", floats);
    lse = lse_buffer.get();
  }
  if (output || lse != nullptr) {
    ForwardPass forward(tiles, keys, lse, output);
    const absl::Status status = forward.Run(pool, &stop);
    if (!status.ok()) return status;
    if (stop.stopped()) return stop.status();
  }
  if (rows_pass) {
    RowsPass rows(tiles, keys, lse);
    const absl::Status status = rows.Run(pool, &stop);
    if (!status.ok()) return status;
    if (stop.stopped()) return stop.status();
  }
  if (args.key_mass != nullptr) {
    KeyMassPass mass(tiles, keys, lse);
    const absl::Status status = mass.Run(pool, &stop);
    if (!status.ok()) return status;
    if (stop.stopped()) return stop.status();
  }
  return absl::OkStatus();
}

}  // namespace rope
