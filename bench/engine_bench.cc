// Engine benchmarks (CPU backend). Every speed is reported next to a
// baseline measured in the same run (memcpy of the same bytes, sgemm of the
// same shapes), because these machines are shared and noisy: compare ratios.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "server/backends/cpu/cpu_backend.h"
#include "server/engine/engine.h"
#include "server/engine/rope_math.h"
#include "server/engine/rope_table.h"

namespace rope {
namespace {

std::unique_ptr<Engine> MakeEngine(int threads) {
  auto backend = NewCpuBackend(threads);
  if (!backend.ok()) return nullptr;
  EngineLimits limits;
  limits.max_len_cap = 1 << 20;
  limits.table_cache_bytes = 1ll << 30;
  limits.max_elements_per_request = 1ll << 31;
  return std::make_unique<Engine>(std::move(backend).value(), limits);
}

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

// Args: batch, seq, q_heads, k_heads, head_dim, dtype, threads (0 = all).
void BM_Rotate(benchmark::State& state) {
  const int64_t b = state.range(0), s = state.range(1), hq = state.range(2), hk = state.range(3),
                d = state.range(4);
  const auto dtype = static_cast<DType>(state.range(5));
  const int threads = static_cast<int>(state.range(6));
  auto engine = MakeEngine(threads);
  std::vector<uint8_t> q = RandomBytes(dtype, b * s * hq * d, 1);
  std::vector<uint8_t> k = RandomBytes(dtype, b * s * hk * d, 2);
  RotateParams p;
  p.config.theta = 500000;
  p.config.head_dim = static_cast<uint32_t>(d);
  p.config.max_len = 8192;
  p.q = TensorView{dtype, {b, s, hq, d}, q.data(), q.size()};
  p.k = TensorView{dtype, {b, s, hk, d}, k.data(), k.size()};
  p.start_pos = b * s > 1 ? 0 : 4000;
  if (!engine->Rotate(p).ok()) {  // warms the table cache
    state.SkipWithError("rotate failed");
    return;
  }
  // Each iteration also copies the same number of bytes with memcpy, timed
  // apart: the ratio of the two, measured interleaved, survives the noise of
  // a shared machine far better than two separate benchmark rows.
  const size_t bytes = q.size() + k.size();
  std::vector<uint8_t> copy_src(bytes, 1), copy_dst(bytes, 2);
  double rotate_seconds = 0, memcpy_seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(engine->Rotate(p));
    benchmark::ClobberMemory();
    const auto t1 = std::chrono::steady_clock::now();
    std::memcpy(copy_dst.data(), copy_src.data(), bytes);
    benchmark::DoNotOptimize(copy_dst.data());
    benchmark::ClobberMemory();
    const auto t2 = std::chrono::steady_clock::now();
    const double r = std::chrono::duration<double>(t1 - t0).count();
    rotate_seconds += r;
    memcpy_seconds += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(r);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["threads"] = engine->backend_info().threads;
  // Rotate throughput as a fraction of memcpy's, same bytes, same moments.
  state.counters["vs_memcpy"] = memcpy_seconds / rotate_seconds;
}

// Baseline: copy the same number of bytes as BM_Rotate's q + k.
void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

constexpr int64_t kF32 = static_cast<int64_t>(DType::kFloat32);
constexpr int64_t kF16 = static_cast<int64_t>(DType::kFloat16);
constexpr int64_t kBF16 = static_cast<int64_t>(DType::kBFloat16);

// Prefill: q [1,4096,32,128] + k [1,4096,8,128]; decode: [32,1,32,128] + [32,1,8,128].
BENCHMARK(BM_Rotate)
    ->ArgNames({"B", "S", "Hq", "Hkv", "D", "dtype", "threads"})
    ->Args({1, 4096, 32, 8, 128, kF32, 1})
    ->Args({1, 4096, 32, 8, 128, kF16, 1})
    ->Args({1, 4096, 32, 8, 128, kBF16, 1})
    ->Args({32, 1, 32, 8, 128, kF32, 1})
    ->Args({32, 1, 32, 8, 128, kBF16, 1})
    ->Args({1, 4096, 32, 8, 128, kF32, 0})
    ->Args({1, 4096, 32, 8, 128, kBF16, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_Memcpy)
    ->ArgNames({"bytes"})
    ->Arg((4096ll * 32 * 128 + 4096ll * 8 * 128) * 4)   // f32 prefill q + k
    ->Arg((4096ll * 32 * 128 + 4096ll * 8 * 128) * 2)   // f16/bf16 prefill
    ->Arg((32ll * 32 * 128 + 32ll * 8 * 128) * 4)       // f32 decode
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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
  out.scores = &scores;
  for (auto _ : state) {
    if (!engine->AttentionScores(p, &out).ok()) {
      state.SkipWithError("attention failed");
      return;
    }
    benchmark::DoNotOptimize(scores.data());
  }
  const double flops = 2.0 * hq * sq * sk * d;  // the QK^T product
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = engine->backend_info().threads;
}
BENCHMARK(BM_AttentionScores)->ArgNames({"S", "threads"})->Args({1024, 1})->Args({1024, 0})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Baseline: the same 32 sgemms (1024 x 1024 x 128) with OpenBLAS, one thread
// per call as the backend uses it, spread over `threads` like the backend.
void BM_Sgemm(benchmark::State& state) {
  const int64_t s = state.range(0), hq = 32, hk = 8, d = 128;
  const int threads = static_cast<int>(state.range(1));
  openblas_set_num_threads(threads == 0 ? 0 : threads);
  std::vector<float> q(s * hq * d, 0.5f), k(s * hk * d, 0.25f), out(hq * s * s);
  for (auto _ : state) {
    for (int64_t h = 0; h < hq; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, 1.0f, q.data() + h * d,
                  hq * d, k.data() + (h / 4) * d, hk * d, 0.0f, out.data() + h * s * s, s);
    }
    benchmark::DoNotOptimize(out.data());
  }
  openblas_set_num_threads(1);
  const double flops = 2.0 * hq * s * s * d;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)->ArgNames({"S", "threads"})->Args({1024, 1})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace rope

BENCHMARK_MAIN();
