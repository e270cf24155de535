// core/engine/rope_math.h (and the common/half_float.h conversions it includes):
// storage conversions, positions and the pair
// rotation, against the reference (tests/unit/reference_rope.h) and against
// hand-computed bit patterns.
#include "core/engine/rope_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "tests/unit/reference_rope.h"

namespace rope {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

bool IsHalfNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool IsBFloat16NaN(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// Same bits, or both NaN with the same sign (the payload is not specified).
::testing::AssertionResult SameHalf(uint16_t got, uint16_t want, float input) {
  if (got == want) return ::testing::AssertionSuccess();
  if (IsHalfNaN(got) && IsHalfNaN(want) && (got & 0x8000u) == (want & 0x8000u)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << std::hex << "FloatToHalf(" << input << " = 0x"
                                       << math::FloatBits(input) << ") is 0x" << got
                                       << ", want 0x" << want;
}

::testing::AssertionResult SameBFloat16(uint16_t got, uint16_t want, float input) {
  if (got == want) return ::testing::AssertionSuccess();
  if (IsBFloat16NaN(got) && IsBFloat16NaN(want) && (got & 0x8000u) == (want & 0x8000u)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << std::hex << "FloatToBFloat16(" << input << " = 0x"
                                       << math::FloatBits(input) << ") is 0x" << got
                                       << ", want 0x" << want;
}

// Same float bits, or both NaN with the same sign.
bool SameFloat(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return std::signbit(a) == std::signbit(b);
  return math::FloatBits(a) == math::FloatBits(b);
}

// ---- float16 -------------------------------------------------------------------

TEST(HalfConversionTest, WideningMatchesReferenceForEveryBitPattern) {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float got = math::HalfToFloat(static_cast<uint16_t>(h));
    const float want = reference::HalfToFloat(static_cast<uint16_t>(h));
    if (!SameFloat(got, want) && ++mismatches <= 10) {
      ADD_FAILURE() << std::hex << "HalfToFloat(0x" << h << ") is " << got << ", want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(HalfConversionTest, RoundTripKeepsEveryBitPatternAndNaNStaysNaN) {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const uint16_t back = math::FloatToHalf(math::HalfToFloat(bits));
    const bool ok = IsHalfNaN(bits) ? IsHalfNaN(back) && (back & 0x8000u) == (bits & 0x8000u)
                                    : back == bits;
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << std::hex << "0x" << h << " -> float -> 0x" << back;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

struct HalfCase {
  float input;
  uint16_t want;
};

TEST(HalfConversionTest, NarrowingEdgeCases) {
  const float kInf = std::numeric_limits<float>::infinity();
  const HalfCase cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},                   // largest finite half
      {65519.996f, 0x7bff},                 // just below the overflow midpoint
      {65520.0f, 0x7c00},                   // midpoint 65504|65536: ties to even = inf
      {-65520.0f, 0xfc00},
      {1e6f, 0x7c00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {kInf, 0x7c00},
      {-kInf, 0xfc00},
      {std::ldexp(1.0f, -24), 0x0001},      // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},      // tie 0|1 -> 0 (even)
      {std::ldexp(1.0f, -25) * 1.0000001f, 0x0001},
      {std::ldexp(3.0f, -25), 0x0002},      // tie 1|2 -> 2
      {std::ldexp(5.0f, -25), 0x0002},      // tie 2|3 -> 2
      {std::ldexp(1.0f, -14), 0x0400},      // smallest normal
      {std::ldexp(2047.0f, -25), 0x0400},   // tie 0x3ff|0x400 -> 0x400
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -24), 0x03ff},  // largest subnormal
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},                   // tie 1|1+2^-10 -> 1
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},                   // tie -> even mantissa 2
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23), 0x3c01},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {-std::numeric_limits<float>::denorm_min(), 0x8000},
  };
  for (const HalfCase& c : cases) {
    EXPECT_TRUE(SameHalf(math::FloatToHalf(c.input), c.want, c.input));
    EXPECT_TRUE(SameHalf(reference::FloatToHalf(c.input), c.want, c.input)) << "reference";
  }
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                           0x7f802000u};
  for (uint32_t u : nans) {
    const uint16_t got = math::FloatToHalf(FromBits(u));
    EXPECT_TRUE(IsHalfNaN(got)) << std::hex << u << " -> " << got;
    EXPECT_EQ(got & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u;
  }
}

TEST(HalfConversionTest, NarrowingMatchesReferenceOnEveryMidpointAndNeighbours) {
  // For each pair of adjacent finite halves, the exact midpoint (a tie) and
  // the floats just either side of it.
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const double lo = reference::HalfToFloat(static_cast<uint16_t>(h));
    const double hi = reference::HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      for (float s : {f, -f}) {
        if (!SameHalf(math::FloatToHalf(s), reference::FloatToHalf(s), s) && ++mismatches <= 10) {
          ADD_FAILURE() << SameHalf(math::FloatToHalf(s), reference::FloatToHalf(s), s).message();
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(HalfConversionTest, NarrowingMatchesReferenceOnRandomFloats) {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Exponents from 2^-27 to 2^17: subnormal, normal and overflowing halves.
  std::uniform_int_distribution<uint32_t> exponent(127 - 27, 127 + 17);
  int mismatches = 0;
  for (int i = 0; i < (1 << 19); ++i) {
    uint32_t u = any_bits(rng);
    if (i % 2 == 1) u = (u & 0x807fffffu) | (exponent(rng) << 23);
    const float f = FromBits(u);
    if (!SameHalf(math::FloatToHalf(f), reference::FloatToHalf(f), f) && ++mismatches <= 10) {
      ADD_FAILURE() << SameHalf(math::FloatToHalf(f), reference::FloatToHalf(f), f).message();
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// ---- bfloat16 ---------------------------------------------------------------

TEST(BFloat16ConversionTest, WideningMatchesReferenceForEveryBitPattern) {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float got = math::BFloat16ToFloat(static_cast<uint16_t>(h));
    const float want = reference::BFloat16ToFloat(static_cast<uint16_t>(h));
    if (!SameFloat(got, want) && ++mismatches <= 10) {
      ADD_FAILURE() << std::hex << "BFloat16ToFloat(0x" << h << ") is " << got << ", want "
                    << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(BFloat16ConversionTest, RoundTripKeepsEveryBitPatternAndNaNStaysNaN) {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const uint16_t back = math::FloatToBFloat16(math::BFloat16ToFloat(bits));
    const bool ok = IsBFloat16NaN(bits)
                        ? IsBFloat16NaN(back) && (back & 0x8000u) == (bits & 0x8000u)
                        : back == bits;
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << std::hex << "0x" << h << " -> float -> 0x" << back;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

struct BitsCase {
  uint32_t input;
  uint16_t want;
};

TEST(BFloat16ConversionTest, NarrowingEdgeCases) {
  const BitsCase cases[] = {
      {0x00000000u, 0x0000},  // +0
      {0x80000000u, 0x8000},  // -0
      {0x3f800000u, 0x3f80},  // 1
      {0x3f808000u, 0x3f80},  // tie 1|1+2^-7 -> 1 (even)
      {0x3f818000u, 0x3f82},  // tie -> even mantissa 2
      {0x3f808001u, 0x3f81},  // just above the tie
      {0x3f807fffu, 0x3f80},  // just below the tie
      {0x7f7f0000u, 0x7f7f},  // largest finite bfloat16
      {0x7f7f7fffu, 0x7f7f},  // below the overflow midpoint
      {0x7f7f8000u, 0x7f80},  // tie 0x7f7f|inf -> inf (even)
      {0x7f7fffffu, 0x7f80},  // float max overflows
      {0xff7fffffu, 0xff80},
      {0x7f800000u, 0x7f80},  // inf
      {0xff800000u, 0xff80},  // -inf
      {0x00000001u, 0x0000},  // float denormal min -> 0
      {0x00008000u, 0x0000},  // tie 0|1 -> 0
      {0x00018000u, 0x0002},  // tie 1|2 -> 2
      {0x00010000u, 0x0001},  // smallest bfloat16 subnormal
      {0x007f8000u, 0x0080},  // tie into the smallest normal
  };
  for (const BitsCase& c : cases) {
    const float f = FromBits(c.input);
    EXPECT_TRUE(SameBFloat16(math::FloatToBFloat16(f), c.want, f));
    EXPECT_TRUE(SameBFloat16(reference::FloatToBFloat16(f), c.want, f)) << "reference";
  }
  // Truncating a NaN with only low payload bits would make it infinity.
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                           0x7f80ffffu};
  for (uint32_t u : nans) {
    const uint16_t got = math::FloatToBFloat16(FromBits(u));
    EXPECT_TRUE(IsBFloat16NaN(got)) << std::hex << u << " -> " << got;
    EXPECT_EQ(got & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u;
  }
}

TEST(BFloat16ConversionTest, NarrowingMatchesReferenceOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> low_bits(0, 0xffffu);
  int mismatches = 0;
  for (int i = 0; i < (1 << 19); ++i) {
    uint32_t u = any_bits(rng);
    // Every other value sits on or next to a rounding midpoint.
    if (i % 2 == 1) u = (u & 0xffff0000u) | (0x8000u + low_bits(rng) % 3 - 1);
    const float f = FromBits(u);
    const uint16_t got = math::FloatToBFloat16(f);
    const uint16_t want = reference::FloatToBFloat16(f);
    if (!SameBFloat16(got, want, f) && ++mismatches <= 10) {
      ADD_FAILURE() << SameBFloat16(got, want, f).message();
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// ---- Load / Store tags ---------------------------------------------------------

TEST(StorageTagTest, StoreThenLoadRoundsLikeTheConversions) {
  const float values[] = {0.1f, -3.14159f, 65519.0f, 1e-6f, 123456.0f};
  for (float v : values) {
    uint16_t h = 0;
    math::Store<math::F16>(&h, v);
    EXPECT_EQ(h, reference::FloatToHalf(v)) << v;
    EXPECT_EQ(math::Load<math::F16>(&h), reference::HalfToFloat(h)) << v;
    uint16_t b = 0;
    math::Store<math::BF16>(&b, v);
    EXPECT_EQ(b, reference::FloatToBFloat16(v)) << v;
    EXPECT_EQ(math::Load<math::BF16>(&b), reference::BFloat16ToFloat(b)) << v;
    float f = 0;
    math::Store<math::F32>(&f, v);
    EXPECT_EQ(math::Load<math::F32>(&f), v);
  }
}

// ---- Positions and pairs --------------------------------------------------------

TEST(PositionSpecTest, StartPosModeAddsTheSequenceIndex) {
  math::PositionSpec spec;
  spec.start_pos = 100;
  spec.seq = 4;
  EXPECT_EQ(spec.At(0, 0), 100);
  EXPECT_EQ(spec.At(3, 2), 102);
}

TEST(PositionSpecTest, SeqListIsSharedByEveryBatchRow) {
  const int64_t list[] = {9, 4, 7};
  math::PositionSpec spec;
  spec.explicit_positions = list;
  spec.count = 3;
  spec.seq = 3;
  EXPECT_EQ(spec.At(0, 1), 4);
  EXPECT_EQ(spec.At(5, 2), 7);
}

TEST(PositionSpecTest, BatchTimesSeqListIsPerRow) {
  const int64_t list[] = {1, 2, 30, 40};
  math::PositionSpec spec;
  spec.explicit_positions = list;
  spec.count = 4;
  spec.seq = 2;
  EXPECT_EQ(spec.At(0, 1), 2);
  EXPECT_EQ(spec.At(1, 0), 30);
  EXPECT_EQ(spec.At(1, 1), 40);
}

TEST(PairTest, PairFeaturesFollowTheLayout) {
  int f0 = -1, f1 = -1;
  math::PairFeatures(/*interleaved=*/true, 8, 3, &f0, &f1);
  EXPECT_EQ(f0, 6);
  EXPECT_EQ(f1, 7);
  math::PairFeatures(/*interleaved=*/false, 8, 3, &f0, &f1);
  EXPECT_EQ(f0, 3);
  EXPECT_EQ(f1, 7);
}

TEST(PairTest, RotatePairByQuarterTurnAndBack) {
  float y0, y1;
  math::RotatePair(1.0f, 2.0f, 0.0f, 1.0f, &y0, &y1);  // +90 degrees
  EXPECT_EQ(y0, -2.0f);
  EXPECT_EQ(y1, 1.0f);
  math::RotatePair(y0, y1, 0.0f, -1.0f, &y0, &y1);  // inverse: -sin
  EXPECT_EQ(y0, 1.0f);
  EXPECT_EQ(y1, 2.0f);
}

TEST(PairTest, RotateHeadLeavesFeaturesPastRotaryDimUntouched) {
  float x[6] = {1, 0, 0, 1, 5, 6};
  const float cos_row[2] = {0.0f, 1.0f};
  const float sin_row[2] = {1.0f, 0.0f};
  math::RotateHead<math::F32, /*kInterleaved=*/true>(x, cos_row, sin_row, 4, 1.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], 1.0f);
  EXPECT_EQ(x[4], 5.0f);
  EXPECT_EQ(x[5], 6.0f);
}

}  // namespace
}  // namespace rope
