// Axial RoPE against a plain Rotate of the same bytes (CPU backend), the
// speed target of axial RoPE: a Flux latent (1024 x 1024 image, one frame:
// 64 x 64 = 4096 tokens, 24 heads, head 128, axes 16/56/56) and a Wan 2.1
// video latent (21 x 60 x 104 at patch 2: 21 x 30 x 52 = 32760 tokens,
// 12 heads, head 128, axes 44/42/42), bfloat16, interleaved.
//
// Each iteration rotates q with the plain config at start_pos 0 and then
// with the axial config at the latent's grid positions ([axis][s]), timed
// apart on the wall clock; the median of the per-iteration ratios
// (axial / plain) sets aside iterations another job interrupted. Tables are
// warm (built by a first call of each), as in serving.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"
#include "core/engine/rope_math.h"

namespace rope {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Latent {
  int64_t frames, rows, cols, heads;
  std::vector<AxialAxis> axes;
};

Latent LatentOf(int64_t model) {
  if (model == 0) return {1, 64, 64, 24, {{16, 0, 0, 0}, {56, 0, 0, 0}, {56, 0, 0, 0}}};
  return {21, 30, 52, 12, {{44, 0, 0, 0}, {42, 0, 0, 0}, {42, 0, 0, 0}}};
}

// Args: model (0 Flux, 1 Wan 2.1), threads (0 = all).
void BM_AxialVsPlain(benchmark::State& state) {
  const Latent latent = LatentOf(state.range(0));
  auto backend = NewCpuBackend(static_cast<int>(state.range(1)));
  if (!backend.ok()) {
    state.SkipWithError("no CPU backend (check ROPE_CPU_SIMD)");
    return;
  }
  EngineLimits limits;
  limits.max_elements_per_request = 1ll << 31;
  Engine engine(std::move(backend).value(), limits);
  const int64_t seq = latent.frames * latent.rows * latent.cols;
  constexpr int64_t kDim = 128;
  const int64_t elements = seq * latent.heads * kDim;
  // 64-byte aligned, as a server's large request buffers are (and as
  // engine_bench places them, 16 bytes past a line, would only add noise).
  std::vector<uint16_t> q(elements);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint16_t& v : q) v = math::FloatToBFloat16(normal(rng));

  RotateParams plain;
  plain.config.theta = 10000;
  plain.config.head_dim = kDim;
  plain.config.max_len = 65536;
  plain.config.layout = Layout::kInterleaved;
  plain.q = TensorView{DType::kBFloat16, {1, seq, latent.heads, kDim}, q.data(),
                       q.size() * sizeof(uint16_t)};
  RotateParams axial = plain;
  axial.config.axial.axes = latent.axes;
  axial.positions.resize(3 * seq);
  for (int64_t f = 0, s = 0; f < latent.frames; ++f) {
    for (int64_t h = 0; h < latent.rows; ++h) {
      for (int64_t w = 0; w < latent.cols; ++w, ++s) {
        axial.positions[s] = f;
        axial.positions[seq + s] = h;
        axial.positions[2 * seq + s] = w;
      }
    }
  }
  if (!engine.Rotate(plain).ok() || !engine.Rotate(axial).ok()) {  // warm the tables
    state.SkipWithError("rotate failed");
    return;
  }
  std::vector<double> ratios, plain_s, axial_s;
  for (auto _ : state) {
    const double t0 = Now();
    benchmark::DoNotOptimize(engine.Rotate(plain));
    benchmark::ClobberMemory();
    const double t1 = Now();
    benchmark::DoNotOptimize(engine.Rotate(axial));
    benchmark::ClobberMemory();
    const double t2 = Now();
    state.SetIterationTime(t2 - t1);
    ratios.push_back((t2 - t1) / (t1 - t0));
    plain_s.push_back(t1 - t0);
    axial_s.push_back(t2 - t1);
  }
  state.SetBytesProcessed(state.iterations() * elements * 2);
  state.counters["tokens"] = static_cast<double>(seq);
  state.counters["threads"] = engine.backend_info().threads;
  state.counters["plain_ms"] = 1e3 * Median(plain_s);
  state.counters["axial_ms"] = 1e3 * Median(axial_s);
  // Axial time over plain time, same bytes, same moments (median over
  // iterations). The target is <= 1.2.
  state.counters["axial_vs_plain"] = Median(ratios);
}

BENCHMARK(BM_AxialVsPlain)
    ->ArgNames({"model", "threads"})
    ->Args({0, 1})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

}  // namespace
}  // namespace rope

BENCHMARK_MAIN();
