// The tiled attention pass holds no q_seq x k_seq buffer: a causal prefill
// of 65536 queries over 65536 keys (one head, head_dim 64, OUTPUT and LSE)
// completes with the process's peak resident memory less than 256 MiB
// above what its inputs and outputs take (the scores alone would be 16 GiB).
//
// Its own binary: the peak (VmHWM) is the process's, so nothing else may
// run before it. The peak is reset after the inputs and outputs are
// written (/proc/self/clear_refs, "5"); where that is refused, the peak
// before the call stands in (the inputs are then the largest thing the
// process has touched).
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"

namespace rope {
namespace {

// A field of /proc/self/status in bytes (-1 when missing).
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream values(line.substr(field.size() + 1));
    int64_t kib = -1;
    values >> kib;
    return kib * 1024;
  }
  return -1;
}

bool ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

TEST(AttentionMemoryTest, CausalPrefillOf64KTokensNeedsNoScoresMemory) {
  constexpr int64_t S = 65536, D = 64;
  constexpr int64_t kMiB = int64_t{1} << 20;
  ASSERT_GT(StatusBytes("VmHWM"), 0) << "no /proc/self/status here";
  auto backend = NewCpuBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EngineLimits limits;
  limits.max_len_cap = 1u << 17;
  limits.max_elements_per_request = int64_t{1} << 26;
  Engine engine(std::move(backend).value(), limits);

  std::vector<float> q(S * D), k(S * D), v(S * D);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < S * D; ++i) q[i] = dist(rng), k[i] = dist(rng), v[i] = dist(rng);
  AttentionParams p;
  p.config.head_dim = D;
  p.config.max_len = S;
  p.q = ConstTensorView(DType::kFloat32, {S, 1, D}, q.data(), q.size() * sizeof(float));
  p.k = ConstTensorView(DType::kFloat32, {S, 1, D}, k.data(), k.size() * sizeof(float));
  p.v = ConstTensorView(DType::kFloat32, {S, 1, D}, v.data(), v.size() * sizeof(float));
  p.causal = true;
  p.results = {AttentionResult::kOutput, AttentionResult::kLse};
  // The outputs' memory, written before the measurement starts (the engine
  // resizes the strings to exactly these sizes).
  std::string output(S * D * sizeof(float), '\0'), lse(S * sizeof(float), '\0');
  std::memset(output.data(), 1, output.size());
  std::memset(lse.data(), 1, lse.size());
  AttentionOutputs out;
  out.output.bytes = &output;
  out.lse.bytes = &lse;

  const int64_t rss_before = StatusBytes("VmRSS");
  const bool reset = ResetPeak();
  const int64_t peak_before = StatusBytes("VmHWM");
  const absl::Status status = engine.AttentionScores(p, &out);
  ASSERT_TRUE(status.ok()) << status;
  const int64_t peak_after = StatusBytes("VmHWM");
  const int64_t growth = peak_after - (reset ? rss_before : peak_before);
  std::cout << "inputs and outputs " << (3 * q.size() * sizeof(float) + output.size()) / kMiB
            << " MiB; resident before " << rss_before / kMiB << " MiB, peak after "
            << peak_after / kMiB << " MiB; growth " << growth / kMiB << " MiB (peak "
            << (reset ? "reset" : "not resettable: the earlier peak stands in") << ")\n";
  EXPECT_LT(growth, 256 * kMiB);

  // The results are real: row 0 sees only key 0, so its output is v[0] and
  // its LSE the one logit.
  float o0[D], lse0;
  std::memcpy(o0, output.data(), sizeof(o0));
  std::memcpy(&lse0, lse.data(), sizeof(lse0));
  for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(o0[d], v[d], 1e-6);
  double dot = 0;
  for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
  EXPECT_NEAR(lse0, dot / 8.0, 1e-5);
}

}  // namespace
}  // namespace rope
