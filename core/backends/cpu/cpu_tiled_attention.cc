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
// Below this many rows a tile's products are skinny (decode): the pass is
// bound by reading k and v, so a task takes every key/value head of its
// keys, which lie together in memory (a task per head would read 1/Hkv of
// each token's bytes at a stride, which the prefetchers serve badly).
constexpr int64_t kSkinnyRows = 64;
// Keys in a skinny tile: a task's tile covers every key/value head, whose
// keys are rotated as they are read (RotatedLogits) and whose values are
// prefetched meanwhile and read where they lie (skinny_values): 64 keys x 8
// heads of bfloat16 values (128 KiB) stay in L2 until the products take
// them. 64 measured about 4% faster than 32 and than 128 (fewer tiles'
// bookkeeping; at 128 the values start to leave L2).
constexpr int64_t kSkinnyKeysPerTile = 64;
// The keys and values of one key tile (over the heads of a task) stay under
// this many floats (4 MiB).
constexpr int64_t kMaxKeyTileFloats = int64_t{1} << 20;
// Below this many rows a tile's products run on SIMD kernels rather than
// OpenBLAS, whose packing of the key and value tiles costs more than the
// few rows' arithmetic.
constexpr int64_t kGemmRows = 16;
// Query tiles one prefill task walks the keys for together: each key tile
// is rotated (and its values widened) once for all of them.
constexpr int64_t kQueryTilesPerTask = 4;
// Pass 1 wants at least this many tasks per thread (splitting key ranges
// when there are fewer), and keeps each split at least this many key tiles.
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kMinTilesPerSplit = 4;
// The split states of pass 1 stay under this many floats (16 MiB).
constexpr int64_t kMaxSplitStateFloats = int64_t{1} << 22;

// How a call is cut into tiles and tasks.
struct Plan {
  int64_t batch = 0, sq = 0, sk = 0, hq = 0, hk = 0, group = 1, d = 0, dv = 0;
  int64_t heads = 1;        // query heads of one key/value head in a tile
  int64_t tokens = 1;       // query tokens in a tile
  int64_t cols = 1;         // keys in a tile
  int64_t head_groups = 1;  // group / heads
  int64_t q_tiles = 1;      // of the whole query range
  int64_t k_tiles = 1;
  // A task of pass 1: `task_kv` key/value heads (each with all its head
  // groups) times `task_q_tiles` query tiles, over one batch row.
  int64_t task_kv = 1, task_q_tiles = 1;
  int64_t rows() const { return heads * tokens; }
  int64_t members() const { return task_kv * head_groups * task_q_tiles; }
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
  p.q_tiles = (p.sq + p.tokens - 1) / p.tokens;
  p.cols = std::min(p.rows() < kSkinnyRows ? kSkinnyKeysPerTile : kKeysPerTile, p.sk);
  p.k_tiles = (p.sk + p.cols - 1) / p.cols;
  if (p.rows() < kSkinnyRows) {
    // As many key/value heads as keep a key tile's keys and values within
    // kMaxKeyTileFloats, dividing hk.
    p.task_kv = 1;
    for (int64_t kv = p.hk; kv >= 1; --kv) {
      if (p.hk % kv == 0 && kv * p.cols * (p.d + p.dv) <= kMaxKeyTileFloats) {
        p.task_kv = kv;
        break;
      }
    }
    p.task_q_tiles = p.q_tiles;
  } else {
    p.task_kv = 1;
    p.task_q_tiles = std::min(kQueryTilesPerTask, p.q_tiles);
  }
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

// The query rows of one tile: `heads` query heads from h0 (of key/value
// head kh) times tokens [i0, i0 + tokens) of batch row b, with their
// rotated vectors ([head][token][d]), positions and running state.
struct QueryTile {
  int64_t b = 0, kh = 0, h0 = 0, i0 = 0, tokens = 0;
  int64_t lo = 0, hi = 0;   // the tokens' position range
  float* q = nullptr;       // heads * tokens * d
  int64_t* pos = nullptr;   // tokens
  float* pos_f = nullptr;   // tokens
  float* o = nullptr;       // heads * tokens * dv: the output accumulator (pass 1)
  float* m = nullptr;       // heads * tokens: running maxima (pass 1)
  float* l = nullptr;       // heads * tokens: running sums (pass 1)
};

// Keys [k0, k0 + n) of key/value heads [kh0, kh0 + kv) of batch row b:
// rotated vectors ([head][key][d]), values and positions.
struct KeyTile {
  int64_t b = 0, kh0 = 0, kv = 1, k0 = 0, n = 0;
  float* k = nullptr;        // kv * n * d
  // Float32 values (Values::kFloat32): head kh's row j at
  // v + (kh - kh0) * v_head + j * v_ld.
  const float* v = nullptr;
  int64_t v_head = 0, v_ld = 0;
  // The values as stored (Values::kStored): head kh's row j at element
  // (kh - kh0) * v_head + j * stored_ld of stored_v, of the call's dtype.
  const void* stored_v = nullptr;
  int64_t stored_ld = 0;
  int64_t* pos = nullptr;    // n
  float* pos_f = nullptr;    // n
  const float* KeysOf(int64_t kh, int64_t d) const { return k + (kh - kh0) * n * d; }
  const float* ValuesOf(int64_t kh) const { return v + (kh - kh0) * v_head; }
};

// What LoadKeys does with the values: nothing, float32 rows (widened when
// 16-bit, for a GEMM), or a pointer to them as stored (skinny_values widens
// in registers).
enum class Values { kNone, kFloat32, kStored };

// Per-thread memory of a task, carved from thread-local scratches.
struct Buffers {
  std::vector<QueryTile> members;  // pass 1's members (one elsewhere)
  std::vector<math::BlockVisibility> vis;  // per member, of the key tile at hand
  float* k = nullptr;       // task_kv * cols * d
  float* v = nullptr;       // cols * task_kv * dv: widened 16-bit values
  int64_t* k_pos = nullptr;
  float* k_pos_f = nullptr;
  float* s = nullptr;       // rows * cols: logits, then probabilities; members * rows *
                            // cols when the plan's products are skinny (RotatedLogits)
  std::vector<cpu::SkinnyQuerySet> sets;  // RotatedLogits' members
  float* p = nullptr;       // rows * cols: probabilities beside the logits (TOP_K)
  float* mass = nullptr;    // heads * cols (pass 3)
  double* mass_sum = nullptr;  // heads * cols (pass 3)
  int64_t* filled = nullptr;   // rows: top-k heap sizes
};

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

// Pieces of 64-byte multiples, so that each starts aligned.
int64_t Padded(int64_t n) { return (n + 15) / 16 * 16; }

// Whether a plan's logits are products of a few rows on SIMD kernels rather
// than OpenBLAS (whose packing would cost more than the rows' arithmetic).
bool SkinnyProducts(const Plan& plan) { return plan.rows() < kGemmRows; }

// Floats of a task's logits buffer: one tile's, or with skinny products
// every member's (pass 1 computes them for all members at once).
int64_t LogitFloats(const Plan& plan) {
  return (SkinnyProducts(plan) ? plan.members() : 1) * plan.rows() * plan.cols;
}

bool GetBuffers(const Plan& plan, Buffers* b) {
  Scratch& scratch = ThreadScratches();
  const int64_t rows = plan.rows(), cols = plan.cols, members = plan.members();
  const int64_t member_floats = Padded(rows * plan.d) + Padded(rows * plan.dv) + 2 * Padded(rows) +
                                Padded(plan.tokens);
  const int64_t floats = members * member_floats + Padded(plan.task_kv * cols * plan.d) +
                         Padded(cols * plan.task_kv * plan.dv) + Padded(cols) +
                         Padded(LogitFloats(plan)) + Padded(rows * cols) +
                         Padded(plan.heads * cols);
  float* f = scratch.floats.Get(floats);
  int64_t* i = scratch.ints.Get(members * plan.tokens + cols + rows);
  double* dd = scratch.doubles.Get(plan.heads * cols);
  if (f == nullptr || i == nullptr || dd == nullptr) return false;
  auto take = [&f](int64_t n) {
    float* at = f;
    f += Padded(n);
    return at;
  };
  b->members.resize(members);
  b->vis.resize(members);
  for (QueryTile& m : b->members) {
    m.q = take(rows * plan.d);
    m.o = take(rows * plan.dv);
    m.m = take(rows);
    m.l = take(rows);
    m.pos_f = take(plan.tokens);
    m.pos = i;
    i += plan.tokens;
  }
  b->k = take(plan.task_kv * cols * plan.d);
  b->v = take(cols * plan.task_kv * plan.dv);
  b->k_pos_f = take(cols);
  b->s = take(LogitFloats(plan));
  b->p = take(rows * cols);
  b->mass = take(plan.heads * cols);
  b->k_pos = i;
  b->filled = i + cols;
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

// What every pass shares: the call, its plan, and the per-tile steps.
class Tiles {
 public:
  Tiles(const cpu::CpuKernels& kernels, const RopeTable& table, const AttentionArgs& args,
        const Plan& plan)
      : kernels_(kernels), rows_(table.rows()), args_(args), plan_(plan) {}

  const Plan& plan() const { return plan_; }
  const AttentionArgs& args() const { return args_; }
  const cpu::CpuKernels& kernels() const { return kernels_; }

  // Rotates the tile's query rows into t.q and gathers their positions.
  void LoadQueries(QueryTile& t) const {
    cpu::RotateCopyParams qp;
    qp.dtype = args_.dtype;
    qp.interleaved = args_.layout == Layout::kInterleaved;
    qp.src = static_cast<const char*>(args_.q) + t.h0 * plan_.d * DTypeSize(args_.dtype);
    qp.src_token_stride = plan_.hq * plan_.d;
    qp.dst = t.q;
    qp.dst_first_token = t.b * plan_.sq + t.i0;
    qp.dst_token_stride = plan_.d;
    qp.dst_head_stride = t.tokens * plan_.d;
    qp.heads = plan_.heads;
    qp.head_dim = plan_.d;
    qp.rotary_dim = args_.rotary_dim;
    qp.rotary_offset = args_.rotary_offset;
    qp.seq = plan_.sq;
    qp.table = rows_;
    qp.positions = args_.q_positions;
    kernels_.rotate_copy(qp, t.b * plan_.sq + t.i0, t.b * plan_.sq + t.i0 + t.tokens);
    for (int64_t s = 0; s < t.tokens; ++s) {
      t.pos[s] = args_.q_positions.At(t.b, t.i0 + s);
      t.pos_f[s] = static_cast<float>(t.pos[s]);
    }
    PositionRange(args_.q_positions, t.b, t.i0, t.i0 + t.tokens, &t.lo, &t.hi);
  }

  // Rotates keys [k0, k0 + n) of heads [kh0, kh0 + kv) of batch row b into
  // buf.k (unless `rotate` is false: RotatedLogits reads them as stored),
  // and with `values` their values: in place for float32 v, else widened
  // into buf.v (each token's heads in one run).
  KeyTile LoadKeys(int64_t b, int64_t kh0, int64_t kv, int64_t k0, int64_t n, Values values,
                   Buffers& buf, bool rotate = true) const {
    KeyTile t;
    t.b = b;
    t.kh0 = kh0;
    t.kv = kv;
    t.k0 = k0;
    t.n = n;
    t.k = buf.k;
    t.pos = buf.k_pos;
    t.pos_f = buf.k_pos_f;
    cpu::RotateCopyParams kp;
    kp.dtype = args_.dtype;
    kp.interleaved = args_.layout == Layout::kInterleaved;
    kp.src = static_cast<const char*>(args_.k) + kh0 * plan_.d * DTypeSize(args_.dtype);
    kp.src_token_stride = plan_.hk * plan_.d;
    kp.dst = buf.k;
    kp.dst_first_token = b * plan_.sk + k0;
    kp.dst_token_stride = plan_.d;
    kp.dst_head_stride = n * plan_.d;
    kp.heads = kv;
    kp.head_dim = plan_.d;
    kp.rotary_dim = args_.rotary_dim;
    kp.rotary_offset = args_.rotary_offset;
    kp.seq = plan_.sk;
    kp.table = rows_;
    kp.positions = args_.k_positions;
    if (rotate) kernels_.rotate_copy(kp, b * plan_.sk + k0, b * plan_.sk + k0 + n);
    for (int64_t j = 0; j < n; ++j) {
      t.pos[j] = args_.k_positions.At(b, k0 + j);
      t.pos_f[j] = static_cast<float>(t.pos[j]);
    }
    const int64_t dv = plan_.dv;
    const int64_t first = (b * plan_.sk + k0) * plan_.hk + kh0;  // in rows of dv elements
    t.v_head = dv;
    if (values == Values::kStored) {
      t.stored_v = static_cast<const char*>(args_.v) + first * dv * DTypeSize(args_.dtype);
      t.stored_ld = plan_.hk * dv;
    } else if (values == Values::kFloat32) {
      if (args_.dtype == DType::kFloat32) {
        t.v = static_cast<const float*>(args_.v) + first * dv;
        t.v_ld = plan_.hk * dv;
      } else {
        const size_t elem = DTypeSize(args_.dtype);
        for (int64_t j = 0; j < n; ++j) {
          kernels_.widen(args_.dtype,
                         static_cast<const char*>(args_.v) + (first + j * plan_.hk) * dv * elem,
                         kv * dv, buf.v + j * kv * dv);
        }
        t.v = buf.v;
        t.v_ld = kv * dv;
      }
    }
    return t;
  }

  // The logits of a query tile against a key tile, into s [rows][n]: the
  // scaled product, soft-capping, ALiBi, and the mask where `vis` says some
  // pairs are hidden.
  void Logits(const QueryTile& qt, const KeyTile& kt, math::BlockVisibility vis, float* s) const {
    const int64_t m = plan_.heads * qt.tokens, n = kt.n;
    if (m < kGemmRows) {
      kernels_.skinny_logits(qt.q, m, kt.KeysOf(qt.kh, plan_.d), n, plan_.d, args_.scale, s);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                  static_cast<int>(n), static_cast<int>(plan_.d), args_.scale, qt.q,
                  static_cast<int>(plan_.d), kt.KeysOf(qt.kh, plan_.d),
                  static_cast<int>(plan_.d), 0.0f, s, static_cast<int>(n));
    }
    AdjustLogits(qt, kt, vis, s);
  }

  // Logits of several query tiles (members[i] into s + i * rows() * kt.n,
  // skipped where vis[i] is kNone) against a key tile loaded without
  // rotation: one pass over the stored keys, each key head rotated in
  // registers and L1 and dotted with every member of its head (skinny
  // products only). The same values as Logits member by member.
  void RotatedLogits(const QueryTile* members, const math::BlockVisibility* vis, int64_t count,
                     const KeyTile& kt, Buffers& buf) const {
    const int64_t n = kt.n;
    buf.sets.clear();
    for (int64_t i = 0; i < count; ++i) {
      if (vis[i] == math::BlockVisibility::kNone) continue;
      const QueryTile& qt = members[i];
      cpu::SkinnyQuerySet set;
      set.q = qt.q;
      set.m = plan_.heads * qt.tokens;
      set.head = qt.kh - kt.kh0;
      set.s = buf.s + i * plan_.rows() * n;
      buf.sets.push_back(set);
    }
    cpu::RotatedKeysParams kp;
    kp.dtype = args_.dtype;
    kp.interleaved = args_.layout == Layout::kInterleaved;
    kp.k = static_cast<const char*>(args_.k) +
           ((kt.b * plan_.sk + kt.k0) * plan_.hk + kt.kh0) * plan_.d * DTypeSize(args_.dtype);
    kp.k_token_stride = plan_.hk * plan_.d;
    kp.head_dim = plan_.d;
    kp.rotary_dim = args_.rotary_dim;
    kp.rotary_offset = args_.rotary_offset;
    kp.n = n;
    kp.positions = kt.pos;
    kp.table = rows_;
    kp.scale = args_.scale;
    kp.sets = buf.sets.data();
    kp.set_count = static_cast<int64_t>(buf.sets.size());
    if (kt.stored_v != nullptr) {
      const int64_t elem = static_cast<int64_t>(DTypeSize(args_.dtype));
      kp.prefetch = kt.stored_v;
      kp.prefetch_token_stride = kt.stored_ld * elem;
      kp.prefetch_bytes = kt.kv * plan_.dv * elem;
    }
    kernels_.skinny_rotated_logits(kp);
    for (int64_t i = 0; i < count; ++i) {
      if (vis[i] == math::BlockVisibility::kNone) continue;
      AdjustLogits(members[i], kt, vis[i], buf.s + i * plan_.rows() * n);
    }
  }

  // Soft-capping, ALiBi and the mask on a tile's scaled products s [rows][n].
  void AdjustLogits(const QueryTile& qt, const KeyTile& kt, math::BlockVisibility vis,
                    float* s) const {
    const int64_t m = plan_.heads * qt.tokens, n = kt.n;
    if (args_.softcap > 0) kernels_.softcap_row(s, m * n, args_.softcap);
    if (args_.alibi_slopes != nullptr) {
      for (int64_t j = 0; j < plan_.heads; ++j) {
        const float slope = args_.alibi_slopes[qt.h0 + j];
        for (int64_t t = 0; t < qt.tokens; ++t) {
          kernels_.alibi_row(s + (j * qt.tokens + t) * n, n, slope, qt.pos_f[t], kt.pos_f);
        }
      }
    }
    if (vis == math::BlockVisibility::kSome) {
      for (int64_t t = 0; t < qt.tokens; ++t) {
        const int64_t qp = qt.pos[t];
        for (int64_t c = 0; c < n; ++c) {
          if (args_.mask.Visible(qp, kt.pos[c])) continue;
          for (int64_t j = 0; j < plan_.heads; ++j) s[(j * qt.tokens + t) * n + c] = kNegInf;
        }
      }
    }
  }

 private:
  const cpu::CpuKernels& kernels_;
  const TableRows rows_;
  const AttentionArgs& args_;
  const Plan plan_;
};

// Key tiles' position ranges per batch row: [b * k_tiles + t].
struct KeyRanges {
  std::vector<int64_t> lo, hi;
  math::BlockVisibility Classify(const math::AttentionMask& mask, const QueryTile& q,
                                 int64_t k_tiles, int64_t kt) const {
    return math::ClassifyBlock(mask, q.lo, q.hi, lo[q.b * k_tiles + kt], hi[q.b * k_tiles + kt]);
  }
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
    q_groups_ = (p.q_tiles + p.task_q_tiles - 1) / p.task_q_tiles;
    kv_groups_ = p.hk / p.task_kv;
    tasks_ = p.batch * kv_groups_ * q_groups_;
    splits_ = 1;
    const int64_t want = kTasksPerThread * pool->threads();
    if (tasks_ < want && p.k_tiles >= 2 * kMinTilesPerSplit) {
      splits_ = std::min((want + tasks_ - 1) / tasks_, p.k_tiles / kMinTilesPerSplit);
      const int64_t state = p.members() * p.rows() * (p.dv + 2);
      splits_ = std::max<int64_t>(1, std::min(splits_, kMaxSplitStateFloats / (tasks_ * state)));
    }
    if (splits_ > 1) {
      const int64_t floats = tasks_ * splits_ * p.members() * p.rows() * (p.dv + 2);
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
  // Task index -> its members (their indices and extents, not their data);
  // the last query tiles first (under a causal mask they see the most keys).
  int64_t MembersOf(int64_t task, QueryTile* members) const {
    const Plan& p = tiles_.plan();
    const int64_t per_group = p.batch * kv_groups_;
    const int64_t qg = q_groups_ - 1 - task / per_group;
    const int64_t rest = task % per_group;
    const int64_t b = rest / kv_groups_;
    const int64_t kh0 = (rest % kv_groups_) * p.task_kv;
    int64_t n = 0;
    for (int64_t qt = qg * p.task_q_tiles; qt < std::min(p.q_tiles, (qg + 1) * p.task_q_tiles);
         ++qt) {
      for (int64_t kh = kh0; kh < kh0 + p.task_kv; ++kh) {
        for (int64_t hg = 0; hg < p.head_groups; ++hg) {
          QueryTile& t = members[n++];
          t.b = b;
          t.kh = kh;
          t.h0 = kh * p.group + hg * p.heads;
          t.i0 = qt * p.tokens;
          t.tokens = std::min(p.tokens, p.sq - t.i0);
        }
      }
    }
    return n;
  }

  void RunTask(int64_t index, Buffers& buf, Stopper* stop) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    const cpu::CpuKernels& kern = tiles_.kernels();
    const int64_t task = index / splits_, split = index % splits_;
    const int64_t count = MembersOf(task, buf.members.data());
    for (int64_t n = 0; n < count; ++n) {
      QueryTile& t = buf.members[n];
      tiles_.LoadQueries(t);
      const int64_t m = p.heads * t.tokens;
      std::fill(t.m, t.m + m, kNegInf);
      std::fill(t.l, t.l + m, 0.0f);
      if (output_) std::fill(t.o, t.o + m * p.dv, 0.0f);
    }
    const QueryTile& first = buf.members[0];
    const int64_t kh0 = first.kh;
    // Every member has the plan's rows, but the last query tile may be short.
    const bool skinny = SkinnyProducts(p);
    const int64_t t_begin = p.k_tiles * split / splits_;
    const int64_t t_end = p.k_tiles * (split + 1) / splits_;
    std::vector<math::BlockVisibility>& vis = buf.vis;
    for (int64_t kt = t_begin; kt < t_end; ++kt) {
      bool any = false;
      for (int64_t n = 0; n < count; ++n) {
        vis[n] = keys_.Classify(a.mask, buf.members[n], p.k_tiles, kt);
        any = any || vis[n] != math::BlockVisibility::kNone;
      }
      if (!any) continue;
      if (kt > t_begin && stop->Stopped()) return;
      const int64_t k0 = kt * p.cols, nk = std::min(p.cols, p.sk - k0);
      const Values values =
          !output_ ? Values::kNone : (skinny ? Values::kStored : Values::kFloat32);
      // Skinny products: every member's logits in one pass over the keys as
      // stored, rotated on the fly (no rotated key tile).
      const KeyTile keys =
          tiles_.LoadKeys(first.b, kh0, p.task_kv, k0, nk, values, buf, /*rotate=*/!skinny);
      if (skinny) tiles_.RotatedLogits(buf.members.data(), vis.data(), count, keys, buf);
      for (int64_t n = 0; n < count; ++n) {
        if (vis[n] == math::BlockVisibility::kNone) continue;
        QueryTile& t = buf.members[n];
        const int64_t m = p.heads * t.tokens;
        float* const logits = skinny ? buf.s + n * p.rows() * nk : buf.s;
        if (!skinny) tiles_.Logits(t, keys, vis[n], logits);
        // Online softmax, row by row: the tile's probabilities relative to
        // the new running maximum, and the rescaling of what came before.
        for (int64_t row = 0; row < m; ++row) {
          float* s = logits + row * nk;
          const float m_new = std::max(t.m[row], kern.row_max(s, nk));
          if (m_new == kNegInf) {  // nothing visible yet: probabilities 0
            std::fill(s, s + nk, 0.0f);
            continue;
          }
          const float alpha = t.m[row] == kNegInf ? 0.0f : std::exp(t.m[row] - m_new);
          t.l[row] = t.l[row] * alpha + kern.exp_sum_row(s, nk, m_new);
          t.m[row] = m_new;
          if (output_ && alpha != 1.0f) kern.scale_row(t.o + row * p.dv, p.dv, alpha);
        }
        if (output_ && skinny) {
          kern.skinny_values(
              logits, m, nk, a.dtype,
              static_cast<const char*>(keys.stored_v) +
                  (t.kh - keys.kh0) * keys.v_head * DTypeSize(a.dtype),
              keys.stored_ld, p.dv, t.o);
        } else if (output_) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                      static_cast<int>(p.dv), static_cast<int>(nk), 1.0f, logits,
                      static_cast<int>(nk), keys.ValuesOf(t.kh), static_cast<int>(keys.v_ld),
                      1.0f, t.o, static_cast<int>(p.dv));
        }
      }
    }
    if (splits_ > 1) {
      const int64_t stride = p.dv + 2;
      float* state = states_.get() + index * p.members() * p.rows() * stride;
      for (int64_t n = 0; n < count; ++n) {
        const QueryTile& t = buf.members[n];
        for (int64_t row = 0; row < p.heads * t.tokens; ++row) {
          float* st = state + (n * p.rows() + row) * stride;
          st[0] = t.m[row];
          st[1] = t.l[row];
          if (output_) std::memcpy(st + 2, t.o + row * p.dv, p.dv * sizeof(float));
        }
      }
      return;
    }
    for (int64_t n = 0; n < count; ++n) {
      const QueryTile& t = buf.members[n];
      Finish(t, t.m, t.l, t.o);
    }
  }

  // Combines the splits of one task (each a running maximum, sum and
  // unnormalised output over its keys), then finishes its rows.
  void MergeSplits(int64_t task) {
    const Plan& p = tiles_.plan();
    std::vector<QueryTile> members(p.members());
    const int64_t count = MembersOf(task, members.data());
    const int64_t stride = p.dv + 2;
    const int64_t per_split = p.members() * p.rows() * stride;
    std::vector<float> mm(p.rows()), ll(p.rows()), oo(output_ ? p.rows() * p.dv : 0);
    for (int64_t n = 0; n < count; ++n) {
      const QueryTile& t = members[n];
      for (int64_t row = 0; row < p.heads * t.tokens; ++row) {
        const float* first = states_.get() + task * splits_ * per_split + (n * p.rows() + row) * stride;
        float top = kNegInf;
        for (int64_t s = 0; s < splits_; ++s) top = std::max(top, first[s * per_split]);
        mm[row] = top;
        float* o = output_ ? oo.data() + row * p.dv : nullptr;
        if (o != nullptr) std::fill(o, o + p.dv, 0.0f);
        double sum = 0;
        if (top != kNegInf) {
          for (int64_t s = 0; s < splits_; ++s) {
            const float* st = first + s * per_split;
            if (st[0] == kNegInf) continue;
            const float w = std::exp(st[0] - top);
            sum += static_cast<double>(st[1]) * w;
            if (o != nullptr) {
              for (int64_t c = 0; c < p.dv; ++c) o[c] += w * st[2 + c];
            }
          }
        }
        ll[row] = static_cast<float>(sum);
      }
      Finish(t, mm.data(), ll.data(), output_ ? oo.data() : nullptr);
    }
  }

  // Writes the tile's rows' LSE and outputs.
  void Finish(const QueryTile& t, const float* m, const float* l, float* o) {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    for (int64_t j = 0; j < p.heads; ++j) {
      const int64_t h = t.h0 + j;
      for (int64_t s = 0; s < t.tokens; ++s) {
        const int64_t row = j * t.tokens + s;
        const int64_t i = t.i0 + s;
        float* orow = output_ ? o + row * p.dv : nullptr;
        const float lse = FinishRow(m[row], l[row], a.sinks != nullptr ? &a.sinks[h] : nullptr,
                                    orow, p.dv);
        if (lse_ != nullptr) lse_[(t.b * p.hq + h) * p.sq + i] = lse;
        if (orow != nullptr) {
          std::memcpy(a.output + ((t.b * p.sq + i) * p.hq + h) * p.dv, orow, p.dv * sizeof(float));
        }
      }
    }
  }

  const Tiles& tiles_;
  const KeyRanges& keys_;
  float* const lse_;
  const bool output_;
  int64_t q_groups_ = 0, kv_groups_ = 0, tasks_ = 0, splits_ = 1;
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
    QueryTile& t = buf.members[0];
    int64_t rest = task % per_tile;
    t.b = rest / (p.hk * p.head_groups);
    rest %= p.hk * p.head_groups;
    t.kh = rest / p.head_groups;
    t.h0 = t.kh * p.group + (rest % p.head_groups) * p.heads;
    t.i0 = first_ + (q_tiles_ - 1 - task / per_tile) * p.tokens;
    t.tokens = std::min(p.tokens, last_ - t.i0);
    const int64_t m = p.heads * t.tokens;
    tiles_.LoadQueries(t);
    const float fill = a.softmax ? 0.0f : kNegInf;
    const bool top_k = a.top_k_indices != nullptr;
    if (top_k) std::fill(buf.filled, buf.filled + m, int64_t{0});

    for (int64_t kt = 0; kt < p.k_tiles; ++kt) {
      if (kt > 0 && stop->Stopped()) return;
      const int64_t k0 = kt * p.cols, n = std::min(p.cols, p.sk - k0);
      const math::BlockVisibility vis = keys_.Classify(a.mask, t, p.k_tiles, kt);
      if (vis == math::BlockVisibility::kNone) {
        ForEachRow(t, [&](int64_t, float* dst) {
          if (dst != nullptr) std::fill(dst + k0, dst + k0 + n, fill);
        });
        continue;
      }
      const KeyTile keys = tiles_.LoadKeys(t.b, t.kh, 1, k0, n, Values::kNone, buf);
      tiles_.Logits(t, keys, vis, buf.s);
      if (!a.softmax) {
        ForEachRow(t, [&](int64_t row, float* dst) {
          if (dst != nullptr) std::memcpy(dst + k0, buf.s + row * n, n * sizeof(float));
        });
        if (!top_k) continue;
      }
      // Probabilities exp(logit - LSE), into buf.p (TOP_K needs the logits
      // beside them to tell hidden keys from visible ones of probability 0).
      float* probs = top_k ? buf.p : buf.s;
      for (int64_t row = 0; row < m; ++row) {
        const int64_t h = t.h0 + row / t.tokens, i = t.i0 + row % t.tokens;
        const float lse = lse_[(t.b * p.hq + h) * p.sq + i];
        float* dst = probs + row * n;
        if (top_k) std::memcpy(dst, buf.s + row * n, n * sizeof(float));
        if (lse == kNegInf) {
          std::fill(dst, dst + n, 0.0f);
        } else {
          kern.exp_sum_row(dst, n, lse);
        }
      }
      if (a.softmax) {
        ForEachRow(t, [&](int64_t row, float* dst) {
          if (dst != nullptr) std::memcpy(dst + k0, probs + row * n, n * sizeof(float));
        });
      }
      if (top_k) {
        for (int64_t row = 0; row < m; ++row) {
          TopKRow heap = HeapOf(t, row, buf);
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
      for (int64_t row = 0; row < m; ++row) HeapOf(t, row, buf).Finish();
    }
  }

  TopKRow HeapOf(const QueryTile& t, int64_t row, Buffers& buf) const {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    const int64_t h = t.h0 + row / t.tokens, i = t.i0 + row % t.tokens;
    const int64_t at = ((t.b * p.hq + h) * p.sq + i) * a.top_k;
    return TopKRow{a.top_k_indices + at, a.top_k_probs + at, a.top_k, buf.filled + row};
  }

  // f(row, dst) for each row of the tile and each of SCORES / SCORE_ROWS
  // that holds it: dst is the start of its k_seq floats.
  template <typename F>
  void ForEachRow(const QueryTile& t, F&& f) const {
    const Plan& p = tiles_.plan();
    const AttentionArgs& a = tiles_.args();
    for (int64_t j = 0; j < p.heads; ++j) {
      const int64_t h = t.h0 + j;
      for (int64_t s = 0; s < t.tokens; ++s) {
        const int64_t row = j * t.tokens + s, i = t.i0 + s;
        if (a.scores != nullptr) f(row, a.scores + ((t.b * p.hq + h) * p.sq + i) * p.sk);
        if (a.score_rows != nullptr && i >= a.score_rows_start &&
            i < a.score_rows_start + a.score_rows_count) {
          f(row, a.score_rows +
                     ((t.b * p.hq + h) * a.score_rows_count + i - a.score_rows_start) * p.sk);
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
    const KeyTile keys = tiles_.LoadKeys(b, kh, 1, k0, n, Values::kNone, buf);
    std::fill(buf.mass_sum, buf.mass_sum + p.heads * n, 0.0);

    QueryTile& t = buf.members[0];
    t.b = b;
    t.kh = kh;
    t.h0 = h0;
    for (int64_t qt = 0; qt < p.q_tiles; ++qt) {
      t.i0 = qt * p.tokens;
      t.tokens = std::min(p.tokens, p.sq - t.i0);
      PositionRange(a.q_positions, b, t.i0, t.i0 + t.tokens, &t.lo, &t.hi);
      const math::BlockVisibility vis = keys_.Classify(a.mask, t, p.k_tiles, kt);
      if (vis == math::BlockVisibility::kNone) continue;
      if (qt > 0 && stop->Stopped()) return;
      tiles_.LoadQueries(t);
      tiles_.Logits(t, keys, vis, buf.s);
      for (int64_t j = 0; j < p.heads; ++j) {
        const int64_t h = h0 + j;
        float* mass = buf.mass;
        std::fill(mass, mass + n, 0.0f);
        for (int64_t s = 0; s < t.tokens; ++s) {
          const float lse = lse_[(b * p.hq + h) * p.sq + t.i0 + s];
          if (lse == kNegInf) continue;  // sees no key: adds nothing
          float* row = buf.s + (j * t.tokens + s) * n;
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
