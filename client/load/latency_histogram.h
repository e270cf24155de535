// LatencyHistogram: a high-dynamic-range histogram of durations in
// nanoseconds, in the manner of HdrHistogram: values below 128 ns have a
// bucket each; above, every power of two [2^e, 2^(e+1)) is split into 128
// equal buckets. A bucket is at most 1/128 of its lower bound wide, so a
// reported quantile (the bucket's midpoint, clamped to [min, max]) is within
// kMaxRelativeError of a value that was recorded at that rank. Record is O(1)
// and nothing is ever sorted; memory grows with the largest value seen
// (at most kMaxBuckets counters, about 35 KB).
//
// Values above kMaxTrackable (about 18 minutes) land in the top bucket; min,
// max, mean and stddev stay exact for every value.
//
// Thread-compatible: callers serialise access (see Recorder).
#ifndef ROPE_CLIENT_LOAD_LATENCY_HISTOGRAM_H_
#define ROPE_CLIENT_LOAD_LATENCY_HISTOGRAM_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace rope {
namespace load {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr int64_t kSubBuckets = int64_t{1} << kSubBucketBits;  // 128
  static constexpr int kMaxExponent = 40;                               // 2^40 ns
  static constexpr int64_t kMaxTrackable = (int64_t{1} << kMaxExponent) - 1;
  static constexpr int64_t kMaxBuckets = kSubBuckets * (kMaxExponent - kSubBucketBits + 1);
  // Half a bucket's width over its lower bound.
  static constexpr double kMaxRelativeError = 1.0 / (2 * kSubBuckets);

  // Records one value; negative values count as 0.
  void Record(int64_t nanos);
  // Adds every value of `other`.
  void Merge(const LatencyHistogram& other);

  int64_t count() const { return count_; }
  int64_t min() const { return count_ == 0 ? 0 : min_; }
  int64_t max() const { return count_ == 0 ? 0 : max_; }
  double mean() const { return mean_; }
  // Population standard deviation (0 for fewer than 2 values).
  double stddev() const;

  // The value at quantile q in [0, 1] (q = 0.99 for p99): the midpoint of
  // the bucket holding the ceil(q * count)-th smallest value (at least the
  // first), clamped to [min, max]. Non-decreasing in q. 0 when empty.
  int64_t ValueAtQuantile(double q) const;

  // Calls fn(lower, upper, count) for each non-empty bucket in increasing
  // order; the bucket holds values in [lower, upper).
  void ForEachBucket(const std::function<void(int64_t, int64_t, int64_t)>& fn) const;

  // Bucket index of a value and the bounds of a bucket (exposed for tests).
  static int64_t BucketIndex(int64_t nanos);
  static int64_t BucketLower(int64_t index);
  static int64_t BucketUpper(int64_t index);

 private:
  std::vector<int64_t> counts_;  // grown on demand up to kMaxBuckets
  int64_t count_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
  double mean_ = 0;  // Welford's running mean and sum of squared deviations
  double m2_ = 0;
};

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_LATENCY_HISTOGRAM_H_
