// LatencyHistogram: bucket geometry, quantile error bound against exact
// order statistics, merging, and moments.
#include "client/load/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace rope {
namespace load {
namespace {

using H = LatencyHistogram;

TEST(LatencyHistogramTest, SmallValuesHaveExactBuckets) {
  for (int64_t v = 0; v < H::kSubBuckets; ++v) {
    EXPECT_EQ(H::BucketLower(H::BucketIndex(v)), v);
    EXPECT_EQ(H::BucketUpper(H::BucketIndex(v)), v + 1);
  }
}

TEST(LatencyHistogramTest, EveryValueLiesInItsBucketAndBucketsAreNarrow) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100000; ++i) {
    const int64_t v = static_cast<int64_t>(rng() >> (24 + rng() % 40)) % H::kMaxTrackable;
    const int64_t index = H::BucketIndex(v);
    ASSERT_LT(index, H::kMaxBuckets);
    const int64_t lower = H::BucketLower(index), upper = H::BucketUpper(index);
    ASSERT_LE(lower, v);
    ASSERT_LT(v, upper);
    ASSERT_LE(static_cast<double>(upper - lower),
              std::max(1.0, static_cast<double>(lower) / H::kSubBuckets))
        << "value " << v;
  }
}

TEST(LatencyHistogramTest, BucketsTileTheRangeWithoutGaps) {
  for (int64_t index = 0; index + 1 < H::kMaxBuckets; ++index) {
    ASSERT_EQ(H::BucketUpper(index), H::BucketLower(index + 1)) << "bucket " << index;
  }
  EXPECT_EQ(H::BucketIndex(H::kMaxTrackable), H::kMaxBuckets - 1);
}

TEST(LatencyHistogramTest, QuantilesAreWithinTheRelativeErrorOfExactRanks) {
  // Log-normal latencies around 1 ms with a heavy tail up to seconds.
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(std::log(1e6), 1.2);
  std::vector<int64_t> values;
  H h;
  for (int i = 0; i < 200000; ++i) {
    const int64_t v = static_cast<int64_t>(dist(rng));
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0}) {
    const int64_t rank = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(q * static_cast<double>(values.size()))));
    const double exact = static_cast<double>(values[rank - 1]);
    const double got = static_cast<double>(h.ValueAtQuantile(q));
    EXPECT_LE(std::fabs(got - exact), exact * H::kMaxRelativeError + 1) << "q=" << q;
  }
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
}

TEST(LatencyHistogramTest, QuantilesAreOrdered) {
  std::mt19937_64 rng(3);
  H h;
  for (int i = 0; i < 5000; ++i) h.Record(static_cast<int64_t>(rng() % 50000000));
  int64_t previous = 0;
  for (int i = 0; i <= 1000; ++i) {
    const int64_t v = h.ValueAtQuantile(i / 1000.0);
    ASSERT_GE(v, previous) << "q=" << i / 1000.0;
    previous = v;
  }
  EXPECT_GE(h.ValueAtQuantile(0), h.min());
  EXPECT_LE(h.ValueAtQuantile(1), h.max());
}

TEST(LatencyHistogramTest, MeanAndStddevAreExact) {
  H h;
  const int64_t values[] = {1000, 2000, 3000, 4000, 1000000};
  double sum = 0;
  for (int64_t v : values) {
    h.Record(v);
    sum += static_cast<double>(v);
  }
  const double mean = sum / 5;
  double ss = 0;
  for (int64_t v : values) ss += (v - mean) * (v - mean);
  EXPECT_DOUBLE_EQ(h.mean(), mean);
  EXPECT_NEAR(h.stddev(), std::sqrt(ss / 5), 1e-6 * std::sqrt(ss / 5));
  EXPECT_EQ(h.count(), 5);
}

TEST(LatencyHistogramTest, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(11);
  H a, b, all;
  for (int i = 0; i < 3000; ++i) {
    const int64_t v = static_cast<int64_t>(rng() % 10000000);
    (i % 3 == 0 ? a : b).Record(v);
    all.Record(v);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_NEAR(a.mean(), all.mean(), 1e-9 * all.mean());
  EXPECT_NEAR(a.stddev(), all.stddev(), 1e-9 * all.stddev());
  for (double q : {0.5, 0.9, 0.99}) EXPECT_EQ(a.ValueAtQuantile(q), all.ValueAtQuantile(q));
}

TEST(LatencyHistogramTest, EmptyHistogramReportsZeros) {
  H h;
  EXPECT_EQ(h.count(), 0);
  EXPECT_EQ(h.ValueAtQuantile(0.99), 0);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 0);
  EXPECT_EQ(h.stddev(), 0);
}

TEST(LatencyHistogramTest, HugeValuesLandInTheTopBucketButKeepExactMax) {
  H h;
  h.Record(int64_t{1} << 50);
  h.Record(-5);  // counts as 0
  EXPECT_EQ(h.max(), int64_t{1} << 50);
  EXPECT_EQ(h.min(), 0);
  int64_t buckets = 0;
  h.ForEachBucket([&](int64_t, int64_t upper, int64_t) {
    ++buckets;
    EXPECT_LE(upper, H::kMaxTrackable + 1);
  });
  EXPECT_EQ(buckets, 2);
}

}  // namespace
}  // namespace load
}  // namespace rope
