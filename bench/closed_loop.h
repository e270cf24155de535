// Closed-loop load for the client-side service benchmarks (service_bench,
// kserve_bench): `concurrency` threads each make one call after another
// until `max_calls` calls in all have started or `seconds_cap` has passed,
// recording each call's latency. Bounded in count and in time. Also the
// random payloads and percentiles both benchmarks report.
#ifndef ROPE_BENCH_CLOSED_LOOP_H_
#define ROPE_BENCH_CLOSED_LOOP_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace rope_bench {

struct ClosedLoopRun {
  std::vector<double> latencies_us;  // one per call, failed calls included
  double seconds = 0;                // wall time of the whole run
  int64_t errors = 0;                // calls for which `call` returned false
};

// `call()` returns true on success. No warm-up: callers warm up first.
template <typename Call>
ClosedLoopRun RunClosedLoop(int concurrency, int64_t max_calls, double seconds_cap, Call call) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t> issued{0}, errors{0};
  std::vector<std::vector<double>> per_thread(concurrency);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds_cap);
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      while (issued.fetch_add(1) < max_calls && Clock::now() < deadline) {
        const auto t0 = Clock::now();
        if (!call()) errors.fetch_add(1);
        per_thread[t].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ClosedLoopRun run;
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& v : per_thread) run.latencies_us.insert(run.latencies_us.end(), v.begin(), v.end());
  run.errors = errors.load();
  return run;
}

// The p-quantile (0 <= p <= 1) by nearest rank; 0 for no samples.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// `count` float32 values uniform in [-1, 1), as raw little-endian bytes.
inline std::string RandomFloats(int64_t count, uint64_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::string bytes(count * 4, '\0');
  for (int64_t i = 0; i < count; ++i) {
    const float v = u(rng);
    std::memcpy(&bytes[i * 4], &v, 4);
  }
  return bytes;
}

}  // namespace rope_bench

#endif  // ROPE_BENCH_CLOSED_LOOP_H_
