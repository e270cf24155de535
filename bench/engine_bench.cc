// Engine benchmarks (CPU backend). Every speed is reported next to a
// baseline measured in the same run (memcpy of the same bytes, sgemm of the
// same shapes), because these machines are shared and noisy: compare ratios.
//
// Rotations are timed with the wall clock (steady_clock: a vDSO read, ~30
// ns), and the median of per-iteration ratios sets aside iterations another
// job interrupted. One-thread attention and sgemm cases (milliseconds each)
// use the thread's CPU clock, so that time descheduled does not count; it is
// a system call (1.4-1.6 us on a 2-vCPU EPYC VM), which added about
// 15% to a decode-size rotation's ~10 us and to its memcpy's ~5 us alike,
// and so raised their ratio (0.47 measured as 0.55): rotations do not use it.
// Cases on all threads use the wall clock. The SIMD path is the backend's
// default (the best this CPU runs) unless ROPE_CPU_SIMD names another.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/rope_math.h"
#include "core/engine/rope_table.h"

namespace rope {
namespace {

// Seconds on this thread's CPU clock (one-thread cases) or the wall clock.
double Now(bool cpu_clock) {
  if (cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Page-aligned bytes for the memcpy baselines. Buffers of the same
// alignment keep glibc's memcpy on its fast path: on some CPUs (AMD Zen 3,
// glibc 2.36) its `rep movsb` runs 15x slower when the destination sits 16
// bytes off the source's alignment, which would flatter every ratio here.
class CopyBuffer {
 public:
  CopyBuffer(size_t bytes, uint8_t fill)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))) {
    std::memset(data_.get(), fill, bytes);
  }
  uint8_t* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
};

// Rotated tensors sit this many bytes past a 64-byte line: 16 by default,
// where glibc's malloc puts blocks large enough to be mapped (a decode call's
// q of 256 KiB, a prefill's), and where a server's protobuf strings often
// start; any multiple of 16 once the heap serves them. The avx512_bf16 path
// is sensitive to it (a 512-bit access off a line touches two lines), so
// the placement is fixed rather than left to the heap's state, which made
// runs of one build differ by 15%. ROPE_BENCH_TENSOR_OFFSET=0|16|32|48
// picks another.
int64_t TensorOffset() {
  const char* v = std::getenv("ROPE_BENCH_TENSOR_OFFSET");
  return v == nullptr ? 16 : std::atoi(v) & 63;
}

// `bytes`, copied TensorOffset() bytes past a 64-byte boundary.
class PlacedBytes {
 public:
  explicit PlacedBytes(const std::vector<uint8_t>& bytes)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes.size() + 127) / 64 * 64))),
        size_(bytes.size()) {
    std::memcpy(data(), bytes.data(), size_);
  }
  uint8_t* data() { return data_.get() + TensorOffset(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_;
};

std::unique_ptr<Engine> MakeEngine(int threads) {
  auto backend = NewCpuBackend(threads);
  if (!backend.ok()) return nullptr;
  EngineLimits limits;
  limits.max_len_cap = 1 << 20;
  limits.table_cache_bytes = 1ll << 30;
  limits.max_elements_per_request = 1ll << 31;
  return std::make_unique<Engine>(std::move(backend).value(), limits);
}

int ThreadsOf(const Engine& engine) { return engine.backend_info().threads; }

std::vector<uint8_t> RandomBytes(DType dtype, int64_t elements, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> bytes(elements * DTypeSize(dtype));
  for (int64_t i = 0; i < elements; ++i) {
    const float v = normal(rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kFloat16 ? math::FloatToHalf(v) : math::FloatToBFloat16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

// Args: batch, seq, q_heads, k_heads, head_dim, rotary_dim (0 = head_dim),
// dtype, layout (1 interleaved, 2 half), positions (0 start_pos, 1 an
// explicit list of B*S), threads (0 = all).
void BM_Rotate(benchmark::State& state) {
  const int64_t b = state.range(0), s = state.range(1), hq = state.range(2), hk = state.range(3),
                d = state.range(4), r = state.range(5);
  const auto dtype = static_cast<DType>(state.range(6));
  const auto layout = static_cast<Layout>(state.range(7));
  const bool explicit_positions = state.range(8) != 0;
  const int threads = static_cast<int>(state.range(9));
  auto engine = MakeEngine(threads);
  if (engine == nullptr) {
    state.SkipWithError("no CPU backend (check ROPE_CPU_SIMD)");
    return;
  }
  PlacedBytes q(RandomBytes(dtype, b * s * hq * d, 1));
  PlacedBytes k(RandomBytes(dtype, b * s * hk * d, 2));
  RotateParams p;
  p.config.theta = 500000;
  p.config.head_dim = static_cast<uint32_t>(d);
  p.config.rotary_dim = static_cast<uint32_t>(r);
  p.config.max_len = 8192;
  p.config.layout = layout;
  p.q = TensorView{dtype, {b, s, hq, d}, q.data(), q.size()};
  p.k = TensorView{dtype, {b, s, hk, d}, k.data(), k.size()};
  if (explicit_positions) {
    for (int64_t t = 0; t < b * s; ++t) p.positions.push_back((4000 + 37 * t) % 8192);
  } else {
    p.start_pos = b * s > 1 ? 0 : 4000;
  }
  if (!engine->Rotate(p).ok()) {  // warms the table cache
    state.SkipWithError("rotate failed");
    return;
  }
  // Each iteration also copies the same number of bytes with memcpy, timed
  // apart: the ratio of the two, measured interleaved, survives the noise of
  // a shared machine far better than two separate benchmark rows.
  const size_t bytes = q.size() + k.size();
  CopyBuffer copy_src(bytes, 1), copy_dst(bytes, 2);
  std::vector<double> ratios;
  double best_rotate = 1e300, best_memcpy = 1e300;
  for (auto _ : state) {
    const double t0 = Now(false);
    benchmark::DoNotOptimize(engine->Rotate(p));
    benchmark::ClobberMemory();
    const double t1 = Now(false);
    std::memcpy(copy_dst.data(), copy_src.data(), bytes);
    benchmark::DoNotOptimize(copy_dst.data());
    benchmark::ClobberMemory();
    const double t2 = Now(false);
    state.SetIterationTime(t1 - t0);
    ratios.push_back((t2 - t1) / (t1 - t0));
    best_rotate = std::min(best_rotate, t1 - t0);
    best_memcpy = std::min(best_memcpy, t2 - t1);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["threads"] = ThreadsOf(*engine);
  state.counters["tensor_offset"] = static_cast<double>(TensorOffset());
  // Rotate throughput as a fraction of memcpy's, same bytes, same moments
  // (median over iterations).
  state.counters["vs_memcpy"] = Median(ratios);
  // The same ratio from each side's fastest iteration: what the code can do
  // when no other job interrupts it (for cases of tens of microseconds, where
  // one interruption changes a pair's ratio).
  state.counters["vs_memcpy_best"] = best_memcpy / best_rotate;
}

// Baseline: copy the same number of bytes as BM_Rotate's q + k.
void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  CopyBuffer src(bytes, 1), dst(bytes, 2);
  for (auto _ : state) {
    const double t0 = Now(false);
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    state.SetIterationTime(Now(false) - t0);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

constexpr int64_t kF32 = static_cast<int64_t>(DType::kFloat32);
constexpr int64_t kF16 = static_cast<int64_t>(DType::kFloat16);
constexpr int64_t kBF16 = static_cast<int64_t>(DType::kBFloat16);
constexpr int64_t kInter = static_cast<int64_t>(Layout::kInterleaved);
constexpr int64_t kHalf = static_cast<int64_t>(Layout::kHalf);

// Prefill: q [1,4096,32,128] + k [1,4096,8,128]; decode: [32,1,32,128] + [32,1,8,128].
BENCHMARK(BM_Rotate)
    ->ArgNames({"B", "S", "Hq", "Hkv", "D", "R", "dtype", "layout", "pos", "threads"})
    ->Args({1, 4096, 32, 8, 128, 0, kF32, kInter, 0, 1})
    ->Args({1, 4096, 32, 8, 128, 0, kF16, kInter, 0, 1})
    ->Args({1, 4096, 32, 8, 128, 0, kBF16, kInter, 0, 1})
    ->Args({1, 4096, 32, 8, 128, 0, kF16, kHalf, 0, 1})
    ->Args({1, 4096, 32, 8, 128, 0, kBF16, kHalf, 0, 1})
    ->Args({1, 4096, 32, 8, 128, 64, kBF16, kHalf, 0, 1})
    ->Args({32, 1, 32, 8, 128, 0, kF32, kInter, 0, 1})
    ->Args({32, 1, 32, 8, 128, 0, kF16, kInter, 0, 1})
    ->Args({32, 1, 32, 8, 128, 0, kBF16, kInter, 0, 1})
    ->Args({32, 1, 32, 8, 128, 0, kBF16, kHalf, 0, 1})
    ->Args({32, 1, 32, 8, 128, 0, kBF16, kHalf, 1, 1})
    ->Args({1, 4096, 32, 8, 128, 0, kF32, kInter, 0, 0})
    ->Args({1, 4096, 32, 8, 128, 0, kBF16, kInter, 0, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_Memcpy)
    ->ArgNames({"bytes"})
    ->Arg((4096ll * 32 * 128 + 4096ll * 8 * 128) * 4)   // f32 prefill q + k
    ->Arg((4096ll * 32 * 128 + 4096ll * 8 * 128) * 2)   // f16/bf16 prefill
    ->Arg((32ll * 32 * 128 + 32ll * 8 * 128) * 4)       // f32 decode
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

// Rotate with a float8 output (FlashInfer's rope_quantize_fp8: q and k read,
// rotated, scaled and rounded into one byte per element) against the same
// rotation in place, interleaved in each iteration so that the ratio
// survives a shared machine's noise. Args: batch, seq, q_heads, k_heads,
// head_dim, input dtype, output dtype (float8), threads (0 = all).
void BM_RotateToFloat8(benchmark::State& state) {
  const int64_t b = state.range(0), s = state.range(1), hq = state.range(2), hk = state.range(3),
                d = state.range(4);
  const auto dtype = static_cast<DType>(state.range(5));
  const auto out = static_cast<DType>(state.range(6));
  const int threads = static_cast<int>(state.range(7));
  auto engine = MakeEngine(threads);
  if (engine == nullptr) {
    state.SkipWithError("no CPU backend (check ROPE_CPU_SIMD)");
    return;
  }
  PlacedBytes q(RandomBytes(dtype, b * s * hq * d, 1));
  PlacedBytes k(RandomBytes(dtype, b * s * hk * d, 2));
  RotateParams in_place;
  in_place.config.theta = 500000;
  in_place.config.head_dim = static_cast<uint32_t>(d);
  in_place.config.max_len = 8192;
  in_place.config.layout = Layout::kHalf;
  in_place.q = TensorView{dtype, {b, s, hq, d}, q.data(), q.size()};
  in_place.k = TensorView{dtype, {b, s, hk, d}, k.data(), k.size()};
  in_place.start_pos = b * s > 1 ? 0 : 4000;
  std::string q_out, k_out;
  RotateParams to_float8 = in_place;
  to_float8.output_dtype = out;
  to_float8.q_output_scale = 0.5;
  to_float8.k_output_scale = 2;
  to_float8.q_float8_out = &q_out;
  to_float8.k_float8_out = &k_out;
  if (!engine->Rotate(in_place).ok() || !engine->Rotate(to_float8).ok()) {
    state.SkipWithError("rotate failed");
    return;
  }
  std::vector<double> ratios;
  double best_float8 = 1e300, best_in_place = 1e300;
  for (auto _ : state) {
    const double t0 = Now(false);
    benchmark::DoNotOptimize(engine->Rotate(to_float8));
    benchmark::ClobberMemory();
    const double t1 = Now(false);
    benchmark::DoNotOptimize(engine->Rotate(in_place));
    benchmark::ClobberMemory();
    const double t2 = Now(false);
    state.SetIterationTime(t1 - t0);
    ratios.push_back((t2 - t1) / (t1 - t0));
    best_float8 = std::min(best_float8, t1 - t0);
    best_in_place = std::min(best_in_place, t2 - t1);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(q.size() + k.size()));
  state.counters["threads"] = ThreadsOf(*engine);
  // Float8-output throughput as a fraction of the in-place rotation's (median
  // over iterations; > 1: the float8 call is faster), and from each side's
  // fastest iteration.
  state.counters["vs_in_place"] = Median(ratios);
  state.counters["vs_in_place_best"] = best_in_place / best_float8;
  state.counters["reply_bytes_vs_input"] =
      static_cast<double>(q_out.size() + k_out.size()) / static_cast<double>(q.size() + k.size());
}

constexpr int64_t kE4M3 = static_cast<int64_t>(DType::kFloat8E4M3);
constexpr int64_t kE5M2 = static_cast<int64_t>(DType::kFloat8E5M2);

// Prefill and decode shapes of BM_Rotate, bfloat16 and float32 in.
BENCHMARK(BM_RotateToFloat8)
    ->ArgNames({"B", "S", "Hq", "Hkv", "D", "dtype", "out", "threads"})
    ->Args({1, 4096, 32, 8, 128, kBF16, kE4M3, 1})
    ->Args({1, 4096, 32, 8, 128, kBF16, kE5M2, 1})
    ->Args({1, 4096, 32, 8, 128, kF32, kE4M3, 1})
    ->Args({32, 1, 32, 8, 128, kBF16, kE4M3, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

// Table build for (theta 500000, rotary_dim 128, max_len 131072).
void BM_TableBuild(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  auto backend = NewCpuBackend(threads).value();
  TableKey key;
  key.theta = 500000;
  key.rotary_dim = 128;
  key.max_len = 131072;
  for (auto _ : state) {
    auto table = RopeTable::Build(key, [&](int64_t rows, const auto& fill) {
      backend->ParallelRows(rows, fill);
    });
    benchmark::DoNotOptimize(table.get());
  }
  state.counters["threads"] = backend->info().threads;
}
BENCHMARK(BM_TableBuild)->ArgNames({"threads"})->Arg(1)->Arg(0)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Attention scores q [1,Sq,32,128], k [1,Sk,8,128], causal softmax.
void BM_AttentionScores(benchmark::State& state) {
  const int64_t sq = state.range(0), sk = state.range(0), hq = 32, hk = 8, d = 128;
  const int threads = static_cast<int>(state.range(1));
  auto engine = MakeEngine(threads);
  if (engine == nullptr) {
    state.SkipWithError("no CPU backend (check ROPE_CPU_SIMD)");
    return;
  }
  const bool cpu_clock = ThreadsOf(*engine) == 1;
  std::vector<uint8_t> q = RandomBytes(DType::kFloat32, sq * hq * d, 3);
  std::vector<uint8_t> k = RandomBytes(DType::kFloat32, sk * hk * d, 4);
  AttentionParams p;
  p.config.theta = 500000;
  p.config.head_dim = d;
  p.config.max_len = 8192;
  p.q = ConstTensorView(DType::kFloat32, {1, sq, hq, d}, q.data(), q.size());
  p.k = ConstTensorView(DType::kFloat32, {1, sk, hk, d}, k.data(), k.size());
  p.causal = true;
  p.softmax = true;
  std::string scores;
  AttentionOutputs out;
  out.scores.bytes = &scores;
  // One untimed call first, as the baseline's output is allocated before its
  // loop: it builds the table and sizes `scores` (128 MiB, zero-filled and
  // faulted in once), which every later call reuses. Without it, the first
  // iteration carried that cost into the mean of a run of a few iterations.
  if (!engine->AttentionScores(p, &out).ok()) {
    state.SkipWithError("attention failed");
    return;
  }
  for (auto _ : state) {
    const double t0 = Now(cpu_clock);
    if (!engine->AttentionScores(p, &out).ok()) {
      state.SkipWithError("attention failed");
      return;
    }
    benchmark::DoNotOptimize(scores.data());
    state.SetIterationTime(Now(cpu_clock) - t0);
  }
  state.counters["threads"] = ThreadsOf(*engine);
}
BENCHMARK(BM_AttentionScores)->ArgNames({"S", "threads"})->Args({1024, 1})->Args({1024, 2})
    ->Unit(benchmark::kMillisecond)->UseManualTime();

// Baseline: the same 32 full products (1024 x 1024 x 128) with OpenBLAS
// sgemm, using `threads` OpenBLAS threads.
void BM_Sgemm(benchmark::State& state) {
  const int64_t s = state.range(0), hq = 32, hk = 8, d = 128;
  const int threads = static_cast<int>(state.range(1));
  openblas_set_num_threads(threads);
  const bool cpu_clock = threads == 1;
  std::vector<float> q(s * hq * d, 0.5f), k(s * hk * d, 0.25f), out(hq * s * s);
  for (auto _ : state) {
    const double t0 = Now(cpu_clock);
    for (int64_t h = 0; h < hq; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, 1.0f, q.data() + h * d,
                  hq * d, k.data() + (h / 4) * d, hk * d, 0.0f, out.data() + h * s * s, s);
    }
    benchmark::DoNotOptimize(out.data());
    state.SetIterationTime(Now(cpu_clock) - t0);
  }
  openblas_set_num_threads(1);
  state.counters["threads"] = threads;
}
BENCHMARK(BM_Sgemm)->ArgNames({"S", "threads"})->Args({1024, 1})->Args({1024, 2})
    ->Unit(benchmark::kMillisecond)->UseManualTime();

}  // namespace
}  // namespace rope

// The SIMD path in the JSON's context (the version before this field's
// engine has no such API: the same source builds against both).
#if __has_include("core/backends/cpu/cpu_simd.h")
#include "core/backends/cpu/cpu_simd.h"
#define ROPE_BENCH_HAS_CPU_SIMD 1
#endif

int main(int argc, char** argv) {
#ifdef ROPE_BENCH_HAS_CPU_SIMD
  auto backend = rope::NewCpuBackend(1);
  benchmark::AddCustomContext("cpu_simd", backend.ok() ? (*backend)->info().cpu_simd : "none");
  std::string compiled;
  for (const rope::CpuSimdPath& p : rope::CompiledCpuSimdPaths()) {
    compiled += (compiled.empty() ? "" : " ") + p.name + (p.supported ? "" : "(not this CPU)");
  }
  benchmark::AddCustomContext("cpu_simd_compiled", compiled);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
