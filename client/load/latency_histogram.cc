#include "client/load/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace rope {
namespace load {
namespace {

int FloorLog2(uint64_t v) { return 63 - __builtin_clzll(v); }

}  // namespace

int64_t LatencyHistogram::BucketIndex(int64_t nanos) {
  if (nanos < 0) nanos = 0;
  if (nanos > kMaxTrackable) nanos = kMaxTrackable;
  if (nanos < kSubBuckets) return nanos;
  const int e = FloorLog2(static_cast<uint64_t>(nanos));  // >= kSubBucketBits
  const int64_t sub = (nanos >> (e - kSubBucketBits)) - kSubBuckets;
  return kSubBuckets + (e - kSubBucketBits) * kSubBuckets + sub;
}

int64_t LatencyHistogram::BucketLower(int64_t index) {
  if (index < kSubBuckets) return index;
  const int64_t group = (index - kSubBuckets) / kSubBuckets;  // e - kSubBucketBits
  const int64_t sub = (index - kSubBuckets) % kSubBuckets;
  return (kSubBuckets + sub) << group;
}

int64_t LatencyHistogram::BucketUpper(int64_t index) {
  if (index < kSubBuckets) return index + 1;
  const int64_t group = (index - kSubBuckets) / kSubBuckets;
  return BucketLower(index) + (int64_t{1} << group);
}

void LatencyHistogram::Record(int64_t nanos) {
  if (nanos < 0) nanos = 0;
  const int64_t index = BucketIndex(nanos);
  if (index >= static_cast<int64_t>(counts_.size())) counts_.resize(index + 1, 0);
  ++counts_[index];
  if (count_ == 0 || nanos < min_) min_ = nanos;
  if (count_ == 0 || nanos > max_) max_ = nanos;
  ++count_;
  const double x = static_cast<double>(nanos);
  const double delta = x - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (x - mean_);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  if (other.counts_.size() > counts_.size()) counts_.resize(other.counts_.size(), 0);
  for (size_t i = 0; i < other.counts_.size(); ++i) counts_[i] += other.counts_[i];
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  // Chan et al.'s pairwise update of mean and M2.
  const double n_a = static_cast<double>(count_);
  const double n_b = static_cast<double>(other.count_);
  const double n = n_a + n_b;
  const double delta = other.mean_ - mean_;
  mean_ += delta * n_b / n;
  m2_ += other.m2_ + delta * delta * n_a * n_b / n;
  count_ += other.count_;
}

double LatencyHistogram::stddev() const {
  if (count_ < 2) return 0;
  return std::sqrt(std::max(0.0, m2_ / static_cast<double>(count_)));
}

int64_t LatencyHistogram::ValueAtQuantile(double q) const {
  if (count_ == 0) return 0;
  q = std::min(1.0, std::max(0.0, q));
  int64_t rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::max<int64_t>(1, std::min(rank, count_));
  int64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const int64_t lower = BucketLower(static_cast<int64_t>(i));
      const int64_t upper = BucketUpper(static_cast<int64_t>(i));
      const int64_t mid = lower + (upper - 1 - lower) / 2;
      return std::min(max_, std::max(min_, mid));
    }
  }
  return max_;
}

void LatencyHistogram::ForEachBucket(
    const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] == 0) continue;
    fn(BucketLower(static_cast<int64_t>(i)), BucketUpper(static_cast<int64_t>(i)), counts_[i]);
  }
}

}  // namespace load
}  // namespace rope
