// Attention at long context through Engine::AttentionScores on the CPU
// backend, against baselines measured in the same run (these machines are
// shared and noisy: compare ratios):
//
//   prefill  causal Sq = Sk = --prefill_len, Hq 32, Hkv 8, D 128, OUTPUT +
//            LSE, float32 and bfloat16; its FLOP rate (2 (D + Dv) per
//            unmasked (query, key) pair) against OpenBLAS sgemm's on a
//            2048^3 product, on one thread and on all;
//   decode   Sq 1, Sk = --decode_len, Hq 32, Hkv 8, bfloat16, OUTPUT + LSE;
//            its time against memcpy of the bytes of K and V, on one thread
//            and on all.
//
// Prints one JSON object (torch's figures on the same inputs are not part
// of this binary). One-thread cases (and
// their baselines) are timed on the process's CPU clock, so that time the
// shared machine gives to other jobs does not count (with one thread the
// backend runs no pool workers); cases on all threads on the wall clock.
// The best of --repeats runs.
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"

ABSL_FLAG(int64_t, prefill_len, 8192, "Sq = Sk of the causal prefill");
ABSL_FLAG(int64_t, decode_len, 131072, "Sk of the decode");
ABSL_FLAG(int, repeats, 1, "runs of each case; the best counts");
ABSL_FLAG(std::string, cases, "prefill,decode", "which cases to run");

namespace rope {
namespace {

// The clock of the case at hand: the process's CPU time on one thread, the
// wall clock on more.
bool g_cpu_clock = false;

double Now() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename F>
double Best(int repeats, F&& f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = Now();
    f();
    best = std::min(best, Now() - t0);
  }
  return best;
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// Random tensor bytes of `dtype` (float32 or bfloat16) in [-1, 1).
std::vector<uint8_t> RandomBytes(DType dtype, int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> out(n * DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float x = dist(*rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      const uint16_t b = ToBf16(x);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

std::unique_ptr<Engine> MakeEngine(int threads) {
  auto backend = NewCpuBackend(threads);
  if (!backend.ok()) {
    std::fprintf(stderr, "NewCpuBackend: %s\n", backend.status().ToString().c_str());
    std::exit(1);
  }
  EngineLimits limits;
  limits.max_len_cap = 1u << 20;
  limits.max_elements_per_request = int64_t{1} << 34;
  limits.table_cache_bytes = int64_t{1} << 30;
  return std::make_unique<Engine>(std::move(backend).value(), limits);
}

struct Attention {
  std::vector<uint8_t> q, k, v;
  AttentionParams params;
};

Attention MakeAttention(DType dtype, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                        bool causal) {
  std::mt19937 rng(7);
  Attention a;
  a.q = RandomBytes(dtype, sq * hq * d, &rng);
  a.k = RandomBytes(dtype, sk * hkv * d, &rng);
  a.v = RandomBytes(dtype, sk * hkv * d, &rng);
  AttentionParams& p = a.params;
  p.config.head_dim = static_cast<uint32_t>(d);
  p.config.max_len = static_cast<uint32_t>(std::max(sq, sk));
  p.q = ConstTensorView(dtype, {sq, hq, d}, a.q.data(), a.q.size());
  p.k = ConstTensorView(dtype, {sk, hkv, d}, a.k.data(), a.k.size());
  p.v = ConstTensorView(dtype, {sk, hkv, d}, a.v.data(), a.v.size());
  p.q_start_pos = sk - sq;
  p.causal = causal;
  p.results = {AttentionResult::kOutput, AttentionResult::kLse};
  return a;
}

double RunAttention(Engine& engine, const Attention& a, int repeats) {
  std::string output, lse;
  AttentionOutputs out;
  out.output.bytes = &output;
  out.lse.bytes = &lse;
  // One untimed call builds the table blocks (a cache miss, not attention).
  if (!engine.AttentionScores(a.params, &out).ok()) std::exit(1);
  return Best(repeats, [&] {
    const absl::Status status = engine.AttentionScores(a.params, &out);
    if (!status.ok()) {
      std::fprintf(stderr, "AttentionScores: %s\n", status.ToString().c_str());
      std::exit(1);
    }
  });
}

// OpenBLAS sgemm's FLOP rate on an n^3 product with `threads` threads.
double SgemmRate(int threads, int64_t n, int repeats) {
  openblas_set_num_threads(threads);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const int ni = static_cast<int>(n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni,
              b.data(), ni, 0.0f, c.data(), ni);
  const double t = Best(repeats + 1, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data(), ni,
                b.data(), ni, 0.0f, c.data(), ni);
  });
  openblas_set_num_threads(1);  // as the backend runs it
  return 2.0 * n * n * n / t;
}

// memcpy of `bytes` split over `threads` threads, in GB/s.
double MemcpyRate(int64_t bytes, int threads, int repeats) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 2);
  auto copy = [&] {
    if (threads == 1) {
      std::memcpy(dst.data(), src.data(), bytes);
      return;
    }
    std::vector<std::thread> pool;
    const int64_t per = (bytes + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = t * per, end = std::min(bytes, begin + per);
      pool.emplace_back([&, begin, end] { std::memcpy(dst.data() + begin, src.data() + begin, end - begin); });
    }
    for (std::thread& th : pool) th.join();
  };
  copy();
  return bytes / Best(repeats + 1, copy) / 1e9;
}

}  // namespace
}  // namespace rope

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace rope;
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const std::string cases = absl::GetFlag(FLAGS_cases);
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> rows;
  for (int threads : {1, all}) {
    g_cpu_clock = threads == 1;
    auto engine = MakeEngine(threads);
    if (cases.find("prefill") != std::string::npos) {
      const int64_t s = absl::GetFlag(FLAGS_prefill_len);
      const double sgemm = SgemmRate(threads, 2048, repeats);
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        const Attention a = MakeAttention(dtype, s, s, 32, 8, 128, /*causal=*/true);
        const double t = RunAttention(*engine, a, repeats);
        const double pairs = static_cast<double>(s) * (s + 1) / 2 * 32;
        const double rate = pairs * 2 * (128 + 128) / t;
        rows.push_back(absl::StrCat(
            "{\"case\": \"prefill\", \"dtype\": \"", DTypeName(dtype), "\", \"threads\": ",
            threads, ", \"clock\": \"", g_cpu_clock ? "cpu" : "wall", "\"", ", \"len\": ", s, ", \"seconds\": ", t, ", \"gflops\": ", rate / 1e9,
            ", \"sgemm_gflops\": ", sgemm / 1e9, ", \"ratio\": ", rate / sgemm, "}"));
        std::fprintf(stderr, "prefill %s threads %d: %.3f s, %.1f GFLOP/s, sgemm %.1f (%.2f)\n",
                     std::string(DTypeName(dtype)).c_str(), threads, t, rate / 1e9, sgemm / 1e9,
                     rate / sgemm);
      }
    }
    if (cases.find("decode") != std::string::npos) {
      const int64_t sk = absl::GetFlag(FLAGS_decode_len);
      const Attention a = MakeAttention(DType::kBFloat16, 1, sk, 32, 8, 128, /*causal=*/true);
      const double t = RunAttention(*engine, a, repeats + 2);
      const double bytes = static_cast<double>(a.k.size() + a.v.size());
      const double memcpy_rate = MemcpyRate(static_cast<int64_t>(bytes), threads, repeats + 2);
      const double rate = bytes / t / 1e9;
      rows.push_back(absl::StrCat("{\"case\": \"decode\", \"dtype\": \"bfloat16\", \"threads\": ",
                                  threads, ", \"clock\": \"", g_cpu_clock ? "cpu" : "wall", "\"", ", \"len\": ", sk, ", \"seconds\": ", t,
                                  ", \"kv_gbps\": ", rate, ", \"memcpy_gbps\": ", memcpy_rate,
                                  ", \"ratio\": ", rate / memcpy_rate, "}"));
      std::fprintf(stderr, "decode threads %d: %.4f s, %.2f GB/s of K+V, memcpy %.2f (%.2f)\n",
                   threads, t, rate, memcpy_rate, rate / memcpy_rate);
    }
  }
  std::printf("{\"cpu_threads\": %d, \"rows\": [%s]}\n", all, absl::StrJoin(rows, ",\n").c_str());
  return 0;
}
