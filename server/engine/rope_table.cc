#include "server/engine/rope_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>

namespace rope {
namespace {

// Rows between exact re-evaluations of cos/sin. In between, rows advance by
// the angle-addition recurrence in double, whose error grows by a few
// ulp(double) per step: after kResyncRows steps it is ~1e-12, five orders of
// magnitude below float32 rounding (6e-8), while the exact sin/cos calls
// (slow for large angles: glibc reduces them exactly) drop to 1/kResyncRows.
constexpr int64_t kResyncRows = 1024;

constexpr size_t kHugePage = size_t{2} << 20;

// Uninitialised float storage for `count` values. Large tables sit on 2 MiB
// transparent huge pages where the kernel allows it: first-touch page faults
// on 4 KiB pages otherwise cost three times the arithmetic of a build.
std::unique_ptr<float[], void (*)(float*)> AllocateTableStorage(size_t count) {
  const size_t bytes = std::max<size_t>(count * sizeof(float), sizeof(float));
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (rounded >= kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // a hint; failure is harmless
  return {static_cast<float*>(p), [](float* f) { std::free(f); }};
}

}  // namespace

std::vector<double> ComputeInvFreq(const TableKey& key) {
  return ScaledInvFreq(key.scaling, key.theta, key.rotary_dim, key.max_len);
}

double ComputeAttentionFactor(const TableKey& key) {
  return ScaledAttentionFactor(key.scaling, key.max_len);
}

void FillTableRows(const std::vector<double>& inv_freq, double factor, int64_t first_pos,
                   int64_t count, float* cos_out, float* sin_out) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  if (half == 0 || count <= 0) return;
  // One-step rotation per frequency, and the running cos/sin of the current row.
  std::vector<double> step_cos(half), step_sin(half), c(half), s(half);
  for (int64_t i = 0; i < half; ++i) {
    step_cos[i] = std::cos(inv_freq[i]);
    step_sin[i] = std::sin(inv_freq[i]);
  }
  for (int64_t row = 0; row < count; ++row) {
    float* cos_row = cos_out + row * half;
    float* sin_row = sin_out + row * half;
    if (row % kResyncRows == 0) {
      const double pos = static_cast<double>(first_pos + row);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        c[i] = std::cos(angle);
        s[i] = std::sin(angle);
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const double next_c = c[i] * step_cos[i] - s[i] * step_sin[i];
        const double next_s = s[i] * step_cos[i] + c[i] * step_sin[i];
        c[i] = next_c;
        s[i] = next_s;
      }
    }
    for (int64_t i = 0; i < half; ++i) {
      cos_row[i] = static_cast<float>(factor * c[i]);
      sin_row[i] = static_cast<float>(factor * s[i]);
    }
  }
}

std::shared_ptr<const RopeTable> RopeTable::Build(const TableKey& key,
                                                  const ParallelFill& parallel_fill) {
  std::shared_ptr<RopeTable> table(new RopeTable(key));
  table->inv_freq_ = ComputeInvFreq(key);
  table->attention_factor_ = ComputeAttentionFactor(key);
  const int64_t rows = key.max_len;
  const int64_t half = key.rotary_dim / 2;
  // Uninitialised: every element is written by the fill below.
  table->cos_ = AllocateTableStorage(rows * half);
  table->sin_ = AllocateTableStorage(rows * half);
  RopeTable* t = table.get();
  auto fill = [t, half](int64_t begin, int64_t end) {
    FillTableRows(t->inv_freq_, t->attention_factor_, begin, end - begin,
                  t->cos_.get() + begin * half, t->sin_.get() + begin * half);
  };
  if (parallel_fill) {
    parallel_fill(rows, fill);
  } else {
    fill(0, rows);
  }
  return table;
}

}  // namespace rope
