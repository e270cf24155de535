// Every SIMD path the CPU backend was compiled with (core/backends/cpu/
// cpu_kernels.h), each against the scalar arithmetic of rope_math.h bit for
// bit, against the independent reference, and against the other paths; and
// how a path is chosen (cpu_simd.h). A path this CPU cannot run is skipped
// with a message naming it, never passed.
//
// Compiled with -ffp-contract=off (tests/unit/CMakeLists.txt), like the
// kernels, so the scalar oracle below rounds exactly as math::RotatePair.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "common/float8.h"
#include "core/backends/cpu/cpu_backend.h"
#include "core/backends/cpu/cpu_kernels.h"
#include "core/backends/cpu/cpu_simd.h"
#include "core/engine/engine.h"
#include "core/engine/rope_math.h"
#include "core/engine/rope_table.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace {

using test::Encode;
using test::HostTensor;
using test::RandomValues;

uint32_t Bits(float f) { return math::FloatBits(f); }
float FromBits(uint32_t u) { return math::BitsToFloat(u); }

const cpu::CompiledKernels* FindPath(const std::string& name) {
  for (const cpu::CompiledKernels& c : cpu::AllCompiledKernels()) {
    if (name == c.kernels->name) return &c;
  }
  return nullptr;
}

std::vector<std::string> CompiledPathNames() {
  std::vector<std::string> names;
  for (const cpu::CompiledKernels& c : cpu::AllCompiledKernels()) names.push_back(c.kernels->name);
  return names;
}

// The first (best) path this CPU runs: the others are compared with it.
const cpu::CpuKernels& BestSupported() {
  for (const cpu::CompiledKernels& c : cpu::AllCompiledKernels()) {
    if (c.supported) return *c.kernels;
  }
  return cpu::BestCpuKernels();
}

std::unique_ptr<Engine> EngineOn(const std::string& path) {
  CpuBackendOptions options;
  options.threads = 2;
  options.simd = path;
  auto backend = NewCpuBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  EngineLimits limits;
  limits.max_len_cap = 1u << 16;
  limits.table_cache_bytes = 64ll << 20;
  return std::make_unique<Engine>(std::move(backend).value(), limits);
}

// ---- Scalar oracles: the arithmetic every path must reproduce -------------------

// Widening as the kernels document it: exact, a float16 NaN made quiet.
float WidenScalar(DType dtype, const void* src, int64_t i) {
  if (dtype == DType::kFloat32) return static_cast<const float*>(src)[i];
  const uint16_t h = static_cast<const uint16_t*>(src)[i];
  if (dtype == DType::kBFloat16) return math::BFloat16ToFloat(h);
  float f = math::HalfToFloat(h);
  if (std::isnan(f)) f = FromBits(Bits(f) | 0x00400000u);
  return f;
}

void StoreScalar(DType dtype, void* dst, int64_t i, float v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(dst)[i] = v; return;
    case DType::kFloat16: static_cast<uint16_t*>(dst)[i] = math::FloatToHalf(v); return;
    case DType::kBFloat16: static_cast<uint16_t*>(dst)[i] = math::FloatToBFloat16(v); return;
    case DType::kFloat8E4M3: static_cast<uint8_t*>(dst)[i] = math::FloatToFloat8E4M3(v); return;
    case DType::kFloat8E5M2: static_cast<uint8_t*>(dst)[i] = math::FloatToFloat8E5M2(v); return;
  }
}

float LoadScalar(DType dtype, const void* src, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(src)[i];
    case DType::kFloat16: return math::HalfToFloat(static_cast<const uint16_t*>(src)[i]);
    case DType::kBFloat16: return math::BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    case DType::kFloat8E4M3: return math::Float8E4M3ToFloat(static_cast<const uint8_t*>(src)[i]);
    case DType::kFloat8E5M2: return math::Float8E5M2ToFloat(static_cast<const uint8_t*>(src)[i]);
  }
  return 0;
}

// Element i of two buffers of `dtype`: identical bits, or both NaN (a NaN's
// sign and payload after arithmetic are not specified).
bool SameElement(DType dtype, const void* a, const void* b, int64_t i) {
  if (dtype == DType::kFloat32) {
    const float x = static_cast<const float*>(a)[i], y = static_cast<const float*>(b)[i];
    return Bits(x) == Bits(y) || (std::isnan(x) && std::isnan(y));
  }
  const uint16_t x = static_cast<const uint16_t*>(a)[i], y = static_cast<const uint16_t*>(b)[i];
  if (x == y) return true;
  const uint16_t exp = dtype == DType::kFloat16 ? 0x7c00 : 0x7f80;
  auto is_nan = [&](uint16_t h) { return (h & exp) == exp && (h & ~exp & 0x7fff) != 0; };
  return is_nan(x) && is_nan(y);
}

::testing::AssertionResult SameBuffers(DType dtype, const std::vector<uint8_t>& got,
                                       const std::vector<uint8_t>& want) {
  const int64_t n = static_cast<int64_t>(got.size() / DTypeSize(dtype));
  int bad = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (int64_t i = 0; i < n; ++i) {
    if (!SameElement(dtype, got.data(), want.data(), i) && ++bad <= 5) {
      result = ::testing::AssertionFailure();
      result << "element " << i << ": got " << LoadScalar(dtype, got.data(), i) << ", want "
             << LoadScalar(dtype, want.data(), i) << "\n";
    }
  }
  if (bad > 0) result << bad << " of " << n << " elements differ";
  return result;
}

// Random storage values with a sprinkling of zeros, subnormals, infinities,
// NaNs and huge values, so that the special cases meet every lane position.
std::vector<uint8_t> RandomStorage(DType dtype, int64_t n, std::mt19937* rng) {
  std::vector<uint8_t> bytes(n * DTypeSize(dtype));
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  const float specials[] = {0.0f,
                            -0.0f,
                            1e-40f,
                            -3e-39f,
                            6.0e-8f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            FromBits(0xff800001u),  // a signalling NaN
                            60000.0f,
                            3.0e38f};
  for (int64_t i = 0; i < n; ++i) {
    const int r = pick(*rng);
    const float v = r < static_cast<int>(std::size(specials)) ? specials[r] : uniform(*rng);
    StoreScalar(dtype, bytes.data(), i, v);
  }
  return bytes;
}

// Rotation of q/k exactly as math::RotatePair on widened values; with a
// float8 output_dtype, every feature (rotated or not) times the scale,
// rounded by common/float8.h, into q_out / k_out.
void RotateScalar(const RotateArgs& p, const TableRows& table, int64_t tokens) {
  const int64_t half = p.rotary_dim / 2;
  const bool interleaved = p.layout == Layout::kInterleaved;
  const bool to_float8 = IsFloat8(p.output_dtype);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = p.positions.At(t / p.seq, t % p.seq);
    const float* c = p.rotary_dim > 0 ? table.Cos(pos) : nullptr;
    const float* s = p.rotary_dim > 0 ? table.Sin(pos) : nullptr;
    for (int tensor = 0; tensor < 2; ++tensor) {
      void* base = tensor == 0 ? p.q : p.k;
      const int64_t heads = tensor == 0 ? p.q_heads : p.k_heads;
      if (base == nullptr) continue;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t head = (t * heads + h) * p.head_dim;
        if (to_float8) {
          std::vector<float> x(p.head_dim);
          for (int64_t f = 0; f < p.head_dim; ++f) x[f] = LoadScalar(p.dtype, base, head + f);
          for (int64_t i = 0; i < half; ++i) {
            const int64_t f0 = p.rotary_offset + (interleaved ? 2 * i : i);
            const int64_t f1 = p.rotary_offset + (interleaved ? 2 * i + 1 : i + half);
            math::RotatePair(x[f0], x[f1], c[i], p.inverse ? -s[i] : s[i], &x[f0], &x[f1]);
          }
          uint8_t* out = static_cast<uint8_t*>(tensor == 0 ? p.q_out : p.k_out) + head;
          const float scale = tensor == 0 ? p.q_scale : p.k_scale;
          for (int64_t f = 0; f < p.head_dim; ++f) StoreScalar(p.output_dtype, out, f, x[f] * scale);
          continue;
        }
        const int64_t v = head + p.rotary_offset;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t f0 = interleaved ? v + 2 * i : v + i;
          const int64_t f1 = interleaved ? v + 2 * i + 1 : v + i + half;
          float y0, y1;
          math::RotatePair(LoadScalar(p.dtype, base, f0), LoadScalar(p.dtype, base, f1), c[i],
                           p.inverse ? -s[i] : s[i], &y0, &y1);
          StoreScalar(p.dtype, base, f0, y0);
          StoreScalar(p.dtype, base, f1, y1);
        }
      }
    }
  }
}

std::string DTypeTag(DType d) {
  return d == DType::kFloat32 ? "F32" : d == DType::kFloat16 ? "F16" : "BF16";
}

// ---- Per path --------------------------------------------------------------------

class SimdPathTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const cpu::CompiledKernels* path = FindPath(GetParam());
    ASSERT_NE(path, nullptr);
    if (!path->supported) {
      GTEST_SKIP() << "this CPU cannot run the " << GetParam()
                   << " SIMD path: compiled in, but not tested on this machine";
    }
    kernels_ = path->kernels;
  }
  const cpu::CpuKernels* kernels_ = nullptr;
};

TEST_P(SimdPathTest, WidensEveryFloat16AndBFloat16Exactly) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    // Odd lengths and offsets reach every remainder of the vector loops.
    for (int64_t offset : {0, 1, 7}) {
      const int64_t n = 65536 - offset;
      std::vector<float> out(n);
      kernels_->widen(dtype, all.data() + offset, n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const float want = WidenScalar(dtype, all.data() + offset, i);
        ASSERT_EQ(Bits(out[i]), Bits(want))
            << DTypeTag(dtype) << " bits 0x" << std::hex << all[offset + i];
      }
    }
  }
}

TEST_P(SimdPathTest, NarrowsLikeTheScalarConversions) {
  // Every float16 and bfloat16 value, the midpoints between neighbours (the
  // ties) and one float ulp either side, around zero, subnormals, the top of
  // the range and overflow; NaNs of both signs and several payloads.
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float a = math::HalfToFloat(static_cast<uint16_t>(h));
    const float b = math::HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      in.push_back(v);
      in.push_back(-v);
    }
  }
  for (uint32_t top = 0; top < 0x10000; ++top) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      in.push_back(FromBits(top << 16 | low));
    }
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) in.push_back(FromBits(any(rng)));
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int64_t offset : {0, 3}) {
      const int64_t n = static_cast<int64_t>(in.size()) - offset;
      std::vector<uint16_t> got(n), want(n);
      kernels_->narrow(dtype, in.data() + offset, n, got.data());
      for (int64_t i = 0; i < n; ++i) StoreScalar(dtype, want.data(), i, in[offset + i]);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], want[i]) << DTypeTag(dtype) << " of float bits 0x" << std::hex
                                   << Bits(in[offset + i]);
      }
    }
  }
}

// dtype x layout x rotary_dim x (head_dim - rotary_dim) x heads x inverse x
// explicit positions: every vector block, remainder and tail.
TEST_P(SimdPathTest, RotatesBitForBitLikeScalarMath) {
  std::mt19937 rng(7);
  int cases = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool interleaved : {true, false}) {
      for (int64_t rotary : {2, 6, 8, 12, 16, 18, 30, 32, 34, 64, 96, 128, 130, 256}) {
        for (int64_t tail : {0, 6}) {
          for (int64_t heads : {1, 3}) {
            for (bool inverse : {false, true}) {
              for (bool explicit_positions : {false, true}) {
                const int64_t head_dim = rotary + tail, batch = 2, seq = 3;
                TableKey key;
                key.theta = 10000;
                key.rotary_dim = static_cast<uint32_t>(rotary);
                key.max_len = 512;
                auto table = RopeTable::Build(key);
                const int64_t q_elems = batch * seq * heads * head_dim;
                const int64_t k_elems = batch * seq * 2 * head_dim;
                std::vector<uint8_t> q = RandomStorage(dtype, q_elems, &rng);
                std::vector<uint8_t> k = RandomStorage(dtype, k_elems, &rng);
                std::vector<uint8_t> q_want = q, k_want = k;
                std::vector<int64_t> positions = {0, 511, 17, 300, 1, 255};
                RotateArgs p;
                p.dtype = dtype;
                p.layout = interleaved ? Layout::kInterleaved : Layout::kHalf;
                p.inverse = inverse;
                p.q_heads = heads;
                p.k_heads = 2;
                p.head_dim = head_dim;
                p.rotary_dim = rotary;
                p.batch = batch;
                p.seq = seq;
                const TableRows rows = table->rows();
                p.positions.seq = seq;
                if (explicit_positions) {
                  p.positions.explicit_positions = positions.data();
                  p.positions.count = batch * seq;
                } else {
                  p.positions.start_pos = 100;
                }
                p.q = q_want.data();
                p.k = k_want.data();
                RotateScalar(p, rows, batch * seq);
                p.q = q.data();
                p.k = k.data();
                // Two calls over token ranges, as the thread pool splits them.
                kernels_->rotate(p, rows, 0, 1);
                kernels_->rotate(p, rows, 1, batch * seq);
                const std::string what = DTypeTag(dtype) + (interleaved ? " interleaved" : " half") +
                                         " rotary_dim " + std::to_string(rotary) + " head_dim " +
                                         std::to_string(head_dim) + " heads " +
                                         std::to_string(heads) + (inverse ? " inverse" : "");
                EXPECT_TRUE(SameBuffers(dtype, q, q_want)) << "q: " << what;
                EXPECT_TRUE(SameBuffers(dtype, k, k_want)) << "k: " << what;
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 14 * 2 * 2 * 2 * 2);
}

// rotary_offset (MLA heads rotate their last features) and float8 outputs:
// dtype x output x layout x rotary window x inverse, bit for bit against
// the scalar arithmetic, with values that reach saturation, NaN and
// infinities.
TEST_P(SimdPathTest, OffsetsAndFloat8OutputsAreBitForBitScalarMath) {
  std::mt19937 rng(21);
  int cases = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (DType out : {dtype, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (bool interleaved : {true, false}) {
        // (head_dim, rotary_dim, offset): MLA's 192/64/128, an odd offset,
        // a window of every remainder, a NoPE layer's conversion only.
        for (const auto& [head_dim, rotary, offset] :
             std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                 {192, 64, 128}, {45, 34, 3}, {70, 30, 36}, {33, 0, 0}}) {
          if (rotary == 0 && !IsFloat8(out)) continue;
          for (bool inverse : {false, true}) {
            const int64_t batch = 2, seq = 3, heads = 3;
            TableKey key;
            key.theta = 10000;
            key.rotary_dim = static_cast<uint32_t>(std::max<int64_t>(rotary, 2));
            key.max_len = 512;
            auto table = RopeTable::Build(key);
            std::vector<uint8_t> q = RandomStorage(dtype, batch * seq * heads * head_dim, &rng);
            std::vector<uint8_t> k = RandomStorage(dtype, batch * seq * 2 * head_dim, &rng);
            std::vector<uint8_t> q_want = q, k_want = k;
            const size_t out_size = IsFloat8(out) ? 1 : 0;
            std::vector<uint8_t> q_out(q.size() / DTypeSize(dtype) * out_size, 0xAA);
            std::vector<uint8_t> k_out(k.size() / DTypeSize(dtype) * out_size, 0xAA);
            std::vector<uint8_t> q_out_want = q_out, k_out_want = k_out;
            std::vector<int64_t> positions = {0, 511, 17, 300, 1, 255};
            RotateArgs p;
            p.dtype = dtype;
            p.layout = interleaved ? Layout::kInterleaved : Layout::kHalf;
            p.inverse = inverse;
            p.q_heads = heads;
            p.k_heads = 2;
            p.head_dim = head_dim;
            p.rotary_dim = rotary;
            p.rotary_offset = offset;
            p.batch = batch;
            p.seq = seq;
            const TableRows rows = table->rows();
            p.positions.seq = seq;
            p.positions.explicit_positions = positions.data();
            p.positions.count = batch * seq;
            p.output_dtype = out;
            p.q_scale = 300.0f;  // past E4M3FN's 448 for some values
            p.k_scale = 0.125f;
            p.q = q_want.data();
            p.k = k_want.data();
            p.q_out = q_out_want.data();
            p.k_out = k_out_want.data();
            RotateScalar(p, rows, batch * seq);
            p.q = q.data();
            p.k = k.data();
            p.q_out = q_out.data();
            p.k_out = k_out.data();
            kernels_->rotate(p, rows, 0, 1);
            kernels_->rotate(p, rows, 1, batch * seq);
            const std::string what = DTypeTag(dtype) + " -> " + std::string(DTypeName(out)) +
                                     (interleaved ? " interleaved" : " half") + " head_dim " +
                                     std::to_string(head_dim) + " rotary " +
                                     std::to_string(rotary) + " offset " + std::to_string(offset) +
                                     (inverse ? " inverse" : "");
            if (IsFloat8(out)) {
              EXPECT_EQ(q_out, q_out_want) << "q: " << what;
              EXPECT_EQ(k_out, k_out_want) << "k: " << what;
            } else {
              EXPECT_TRUE(SameBuffers(dtype, q, q_want)) << "q: " << what;
              EXPECT_TRUE(SameBuffers(dtype, k, k_want)) << "k: " << what;
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * (3 + 4 + 4) * 2);
}

TEST_P(SimdPathTest, NarrowsToFloat8LikeTheScalarConversion) {
  // Every float8 value, the midpoints between neighbours and one float ulp
  // either side, both signs; saturation, infinities, NaNs, subnormals.
  std::vector<float> in;
  for (bool e5m2 : {false, true}) {
    for (int code = 0; code < 0x7f; ++code) {
      const float a = e5m2 ? math::Float8E5M2ToFloat(code) : math::Float8E4M3ToFloat(code);
      const float b = e5m2 ? math::Float8E5M2ToFloat(code + 1) : math::Float8E4M3ToFloat(code + 1);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
      for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
        in.push_back(v);
        in.push_back(-v);
      }
    }
  }
  for (float v : {448.0f, 464.0f, 464.0001f, 480.0f, 57344.0f, 61439.99f, 61440.0f, 1e30f,
                  std::numeric_limits<float>::infinity(), 1e-40f, 9.765625e-4f}) {
    in.push_back(v);
    in.push_back(-v);
  }
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  in.push_back(FromBits(0xffc00001u));
  std::mt19937 rng(23);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 100000; ++i) in.push_back(FromBits(any(rng)));
  for (DType dtype : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    for (int64_t offset : {0, 5}) {
      const int64_t n = static_cast<int64_t>(in.size()) - offset;
      std::vector<uint8_t> got(n), want(n);
      kernels_->narrow(dtype, in.data() + offset, n, got.data());
      for (int64_t i = 0; i < n; ++i) StoreScalar(dtype, want.data(), i, in[offset + i]);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], want[i]) << DTypeName(dtype) << " of float bits 0x" << std::hex
                                   << Bits(in[offset + i]);
      }
    }
  }
}

// Calls over more than 1 MiB rotate head by head (rotate_simd-inl.h's
// kCachedCallBytes) rather than block by block: the same bits.
TEST_P(SimdPathTest, LargeCallsRotateBitForBitLikeScalarMath) {
  std::mt19937 rng(12);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool interleaved : {true, false}) {
      for (int64_t rotary : {30, 64}) {
        const int64_t head_dim = 70, seq = 1024, q_heads = 8, k_heads = 2;
        ASSERT_GT(seq * (q_heads + k_heads) * head_dim * static_cast<int64_t>(DTypeSize(dtype)),
                  int64_t{1} << 20);
        TableKey key;
        key.theta = 10000;
        key.rotary_dim = static_cast<uint32_t>(rotary);
        key.max_len = 2048;
        auto table = RopeTable::Build(key);
        std::vector<uint8_t> q = RandomStorage(dtype, seq * q_heads * head_dim, &rng);
        std::vector<uint8_t> k = RandomStorage(dtype, seq * k_heads * head_dim, &rng);
        std::vector<uint8_t> q_want = q, k_want = k;
        RotateArgs p;
        p.dtype = dtype;
        p.layout = interleaved ? Layout::kInterleaved : Layout::kHalf;
        p.q_heads = q_heads;
        p.k_heads = k_heads;
        p.head_dim = head_dim;
        p.rotary_dim = rotary;
        p.batch = 1;
        p.seq = seq;
        const TableRows rows = table->rows();
        p.positions.seq = seq;
        p.positions.start_pos = 1000;
        p.q = q_want.data();
        p.k = k_want.data();
        RotateScalar(p, rows, seq);
        p.q = q.data();
        p.k = k.data();
        kernels_->rotate(p, rows, 0, seq);
        const std::string what = DTypeTag(dtype) + (interleaved ? " interleaved" : " half") +
                                 " rotary_dim " + std::to_string(rotary);
        EXPECT_TRUE(SameBuffers(dtype, q, q_want)) << "q: " << what;
        EXPECT_TRUE(SameBuffers(dtype, k, k_want)) << "k: " << what;
      }
    }
  }
}

TEST_P(SimdPathTest, RotatedCopiesAreBitForBitScalarMath) {
  std::mt19937 rng(8);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool interleaved : {true, false}) {
      for (int64_t rotary : {2, 10, 32, 64, 128}) {
        const int64_t head_dim = rotary + 4, heads = 3, seq = 5;
        TableKey key;
        key.theta = 500000;
        key.rotary_dim = static_cast<uint32_t>(rotary);
        key.max_len = 64;
        auto table = RopeTable::Build(key);
        const std::vector<uint8_t> src = RandomStorage(dtype, seq * heads * head_dim, &rng);
        // Into [head][token][D], the attention's layout.
        std::vector<float> got(heads * seq * head_dim, -1.0f), want(got.size());
        cpu::RotateCopyParams p;
        p.dtype = dtype;
        p.interleaved = interleaved;
        p.src = src.data();
        p.src_token_stride = heads * head_dim;
        p.dst = got.data();
        p.dst_first_token = 0;
        p.dst_token_stride = head_dim;
        p.dst_head_stride = seq * head_dim;
        p.heads = heads;
        p.head_dim = head_dim;
        p.rotary_dim = rotary;
        p.seq = seq;
        p.table = table->rows();
        p.positions.seq = seq;
        p.positions.start_pos = 40;
        kernels_->rotate_copy(p, 0, seq);
        const int64_t half = rotary / 2;
        for (int64_t t = 0; t < seq; ++t) {
          const float* c = table->cos_row(40 + t);
          const float* s = table->sin_row(40 + t);
          for (int64_t h = 0; h < heads; ++h) {
            float* out = want.data() + (h * seq + t) * head_dim;
            for (int64_t f = 0; f < head_dim; ++f) {
              out[f] = WidenScalar(dtype, src.data(), (t * heads + h) * head_dim + f);
            }
            for (int64_t i = 0; i < half; ++i) {
              const int64_t f0 = interleaved ? 2 * i : i, f1 = interleaved ? 2 * i + 1 : i + half;
              math::RotatePair(out[f0], out[f1], c[i], s[i], &out[f0], &out[f1]);
            }
          }
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(Bits(got[i]) == Bits(want[i]) || (std::isnan(got[i]) && std::isnan(want[i])))
              << DTypeTag(dtype) << (interleaved ? " interleaved" : " half") << " rotary_dim "
              << rotary << " element " << i << ": got " << got[i] << ", want " << want[i];
        }
      }
    }
  }
}

// The decode's fused logits (keys widened and rotated as they are read)
// against rotate_copy then skinny_logits on the same path, and against the
// best path: the same bits, for every storage type, layout, partial rotary
// dims with an offset, head dims off the 16-lane grid, 1 to 5 query rows,
// and query sets that come back to a head already left.
TEST_P(SimdPathTest, RotatedLogitsAreBitForBitRotateCopyThenSkinnyLogits) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const cpu::CpuKernels& best = BestSupported();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (bool interleaved : {true, false}) {
      for (const auto& [head_dim, rotary, offset] :
           {std::tuple<int64_t, int64_t, int64_t>{128, 128, 0}, {48, 48, 0}, {36, 36, 0},
            {64, 32, 16}, {20, 10, 6}, {16, 0, 0}}) {
        const int64_t heads = 3, n = 7, token_stride = heads * head_dim + 5;
        TableKey key;
        key.theta = 10000;
        key.rotary_dim = static_cast<uint32_t>(std::max<int64_t>(rotary, 2));
        key.max_len = 128;
        auto table = RopeTable::Build(key);
        // Finite keys (specials would make nearly every logit NaN or inf).
        std::vector<uint8_t> k(n * token_stride * DTypeSize(dtype));
        for (int64_t i = 0; i < n * token_stride; ++i) {
          StoreScalar(dtype, k.data(), i, 4.0f * normal(rng));
        }
        std::vector<int64_t> positions(n);
        for (int64_t j = 0; j < n; ++j) positions[j] = (37 * j + 5) % 128;
        // Rotated copies of every head, as the unfused pass makes them.
        std::vector<float> rotated(heads * n * head_dim);
        for (int64_t j = 0; j < n; ++j) {
          cpu::RotateCopyParams rp;
          rp.dtype = dtype;
          rp.interleaved = interleaved;
          rp.src = k.data() + j * token_stride * static_cast<int64_t>(DTypeSize(dtype));
          rp.src_token_stride = token_stride;
          rp.dst = rotated.data() + j * head_dim;
          rp.dst_first_token = 0;
          rp.dst_token_stride = head_dim;
          rp.dst_head_stride = n * head_dim;
          rp.heads = heads;
          rp.head_dim = head_dim;
          rp.rotary_dim = rotary;
          rp.rotary_offset = offset;
          rp.seq = 1;
          rp.table = table->rows();
          rp.positions.seq = 1;
          rp.positions.start_pos = positions[j];
          kernels_->rotate_copy(rp, 0, 1);
        }
        const std::vector<std::pair<int64_t, int64_t>> shapes = {{2, 4}, {2, 1}, {0, 5},
                                                                 {1, 3}, {0, 2}};  // head, m
        std::vector<std::vector<float>> q(shapes.size());
        std::vector<std::vector<float>> got(shapes.size()), ref(shapes.size());
        std::vector<cpu::SkinnyQuerySet> sets(shapes.size()), best_sets(shapes.size());
        for (size_t i = 0; i < shapes.size(); ++i) {
          const auto [head, m] = shapes[i];
          q[i].resize(m * head_dim);
          for (float& x : q[i]) x = normal(rng);
          got[i].assign(m * n, -1.0f);
          ref[i].assign(m * n, -2.0f);
          sets[i] = {q[i].data(), m, head, got[i].data()};
          best_sets[i] = {q[i].data(), m, head, ref[i].data()};
        }
        cpu::RotatedKeysParams p;
        p.dtype = dtype;
        p.interleaved = interleaved;
        p.k = k.data();
        p.k_token_stride = token_stride;
        p.head_dim = head_dim;
        p.rotary_dim = rotary;
        p.rotary_offset = offset;
        p.n = n;
        p.positions = positions.data();
        p.table = table->rows();
        p.scale = 0.125f;
        p.sets = sets.data();
        p.set_count = static_cast<int64_t>(sets.size());
        p.prefetch = k.data();
        p.prefetch_token_stride = 64;
        p.prefetch_bytes = 128;
        kernels_->skinny_rotated_logits(p);
        cpu::RotatedKeysParams best_p = p;
        best_p.sets = best_sets.data();
        best_p.prefetch = nullptr;
        best.skinny_rotated_logits(best_p);
        const std::string what = std::string(DTypeTag(dtype)) +
                                 (interleaved ? " interleaved" : " half") + " head_dim " +
                                 std::to_string(head_dim) + " rotary " + std::to_string(rotary) +
                                 " offset " + std::to_string(offset);
        for (size_t i = 0; i < shapes.size(); ++i) {
          const auto [head, m] = shapes[i];
          std::vector<float> want(m * n, -3.0f);
          kernels_->skinny_logits(q[i].data(), m, rotated.data() + head * n * head_dim, n,
                                  head_dim, 0.125f, want.data());
          for (int64_t e = 0; e < m * n; ++e) {
            ASSERT_EQ(Bits(got[i][e]), Bits(want[e]))
                << what << " set " << i << " element " << e << ": got " << got[i][e]
                << ", rotate_copy + skinny_logits " << want[e];
            ASSERT_EQ(Bits(got[i][e]), Bits(ref[i][e]))
                << what << " set " << i << " element " << e << ": best path " << best.name;
          }
        }
      }
    }
  }
}

TEST_P(SimdPathTest, SoftmaxRowsMatchTheBestPathAndDoublePrecision) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const cpu::CpuKernels& best = BestSupported();
  for (int64_t n : {1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1000, 1024}) {
    for (int64_t visible : {int64_t{0}, int64_t{1}, n / 2, n - 1, n}) {
      if (visible < 0 || visible > n) continue;
      std::vector<float> in(n);
      for (float& x : in) x = normal(rng);
      if (n > 5) in[3] = -100.0f;  // below exp's -87 cut-off once the max is taken off
      std::vector<float> got = in, ref = in;
      kernels_->scale_row(got.data(), visible, kernels_->exp_row(got.data(), visible));
      best.scale_row(ref.data(), visible, best.exp_row(ref.data(), visible));
      double max_v = -INFINITY, sum = 0;
      for (int64_t j = 0; j < visible; ++j) max_v = std::max<double>(max_v, in[j]);
      for (int64_t j = 0; j < visible; ++j) sum += std::exp(in[j] - max_v);
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(Bits(got[j]), Bits(ref[j])) << "n " << n << " visible " << visible << " j " << j;
        if (j >= visible) {
          EXPECT_EQ(Bits(got[j]), Bits(in[j])) << "past `visible` must stay as it was";
          continue;
        }
        const double want = std::exp(in[j] - max_v) / sum;
        // Float32 rounds x - max to within 2^-24 |x - max|, which exp turns
        // into that much relative error; exp and the sum add a few 1e-7.
        // Below exp(-87) the kernels give 0.
        const double relative = 5e-7 + 1.2e-7 * std::fabs(in[j] - max_v);
        EXPECT_NEAR(got[j], want, relative * want + 1e-37) << "n " << n << " visible " << visible;
      }
    }
  }
}

// The tiled attention pass's row kernels: the best path's bits, and double
// precision.
TEST_P(SimdPathTest, TileRowKernelsMatchTheBestPathAndDoublePrecision) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const cpu::CpuKernels& best = BestSupported();
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t n : {0, 1, 3, 7, 15, 16, 17, 33, 100, 256, 1000}) {
    std::vector<float> in(n), k_pos(n);
    for (float& x : in) x = normal(rng);
    for (int64_t j = 0; j < n; ++j) k_pos[j] = static_cast<float>(3 * j + 1);
    if (n > 5) in[2] = kNegInf;  // a masked key
    // row_max
    const float max_got = kernels_->row_max(in.data(), n);
    ASSERT_EQ(Bits(max_got), Bits(best.row_max(in.data(), n))) << "n " << n;
    float want_max = kNegInf;
    for (float x : in) want_max = std::max(want_max, x);
    EXPECT_EQ(max_got, want_max) << "n " << n;
    // exp_sum_row
    std::vector<float> got = in, ref = in;
    const float shift = n == 0 ? 0.0f : want_max;
    const float sum = kernels_->exp_sum_row(got.data(), n, shift);
    ASSERT_EQ(Bits(sum), Bits(best.exp_sum_row(ref.data(), n, shift))) << "n " << n;
    double want_sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(Bits(got[j]), Bits(ref[j])) << "n " << n << " j " << j;
      const double want = in[j] == kNegInf ? 0.0 : std::exp(static_cast<double>(in[j]) - shift);
      want_sum += want;
      if (in[j] == kNegInf) {
        EXPECT_EQ(got[j], 0.0f) << "a masked key";
        continue;
      }
      EXPECT_NEAR(got[j], want, (5e-7 + 1.2e-7 * std::fabs(in[j] - shift)) * want + 1e-37);
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
    // softcap_row, around and far from the polynomial's 0.625 edge
    for (float cap : {0.5f, 2.5f, 50.0f}) {
      got = in;
      ref = in;
      kernels_->softcap_row(got.data(), n, cap);
      best.softcap_row(ref.data(), n, cap);
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(Bits(got[j]), Bits(ref[j])) << "cap " << cap << " j " << j;
        const double want = cap * std::tanh(static_cast<double>(in[j]) / cap);
        EXPECT_NEAR(got[j], want, 4e-7 * std::fabs(want) + 1e-30) << "cap " << cap << " x " << in[j];
      }
    }
    // alibi_row
    got = in;
    ref = in;
    kernels_->alibi_row(got.data(), n, 0.125f, 40.0f, k_pos.data());
    best.alibi_row(ref.data(), n, 0.125f, 40.0f, k_pos.data());
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(Bits(got[j]), Bits(ref[j])) << "alibi j " << j;
      EXPECT_EQ(got[j], in[j] - 0.125f * std::fabs(40.0f - k_pos[j]));
    }
    // add_row
    got = in;
    kernels_->add_row(got.data(), k_pos.data(), n);
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(got[j], in[j] + k_pos[j]);
  }
}

TEST_P(SimdPathTest, StoreRowScalesThenFillsAtAnyAlignment) {
  std::vector<float> src(300);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  // 64-byte aligned base, then every float offset within a cache line.
  std::vector<float> buffer(300 + 64);
  float* base = buffer.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  for (int64_t offset = 0; offset < 16; ++offset) {
    for (int64_t n : {0, 1, 5, 16, 17, 63, 64, 65, 200}) {
      for (int64_t visible : {int64_t{0}, int64_t{1}, n / 3, n - 1, n}) {
        if (visible < 0 || visible > n) continue;
        for (float fill : {0.0f, -std::numeric_limits<float>::infinity()}) {
          for (bool stream : {false, true}) {
            std::fill(buffer.begin(), buffer.end(), 7.0f);
            float* out = base + offset;
            kernels_->store_row(src.data(), visible, n, 0.25f, fill, stream, out);
            kernels_->stream_fence();
            for (int64_t j = 0; j < n; ++j) {
              ASSERT_EQ(Bits(out[j]), Bits(j < visible ? src[j] * 0.25f : fill))
                  << "offset " << offset << " n " << n << " visible " << visible << " j " << j
                  << (stream ? " streaming" : "");
            }
            ASSERT_EQ(out[n], 7.0f) << "wrote past n " << n << " at offset " << offset;
            if (offset > 0) {
              ASSERT_EQ(out[-1], 7.0f) << "wrote before the row";
            }
          }
        }
      }
    }
  }
}

// Through the engine: rotation against the independent reference, and
// attention scores/outputs against the best path bit for bit.
TEST_P(SimdPathTest, EngineRotationMatchesTheReference) {
  auto engine = EngineOn(GetParam());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->backend_info().cpu_simd, GetParam());
  std::mt19937 rng(10);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Layout layout : {Layout::kInterleaved, Layout::kHalf}) {
      for (uint32_t rotary : {0u, 24u}) {
        constexpr int64_t B = 2, S = 9, H = 5, D = 64;
        RopeConfig config;
        config.theta = 10000;
        config.head_dim = D;
        config.rotary_dim = rotary;
        config.max_len = 4096;
        config.layout = layout;
        const std::vector<double> x = RandomValues(dtype, B * S * H * D, &rng);
        HostTensor q = Encode(dtype, {B, S, H, D}, x);
        RotateParams params;
        params.config = config;
        params.q = q.view();
        params.start_pos = 4000;
        ASSERT_TRUE(engine->Rotate(params).ok());
        reference::Rope rope;
        rope.theta = 10000;
        rope.head_dim = D;
        rope.rotary_dim = rotary == 0 ? D : static_cast<int>(rotary);
        rope.interleaved = layout == Layout::kInterleaved;
        std::vector<int64_t> positions(B * S);
        for (int64_t t = 0; t < B * S; ++t) positions[t] = 4000 + t % S;
        std::vector<double> want = x;
        reference::RotateTensor(rope, B, S, H, positions, false, &want);
        const std::vector<double> got = test::Decode(q);
        for (size_t i = 0; i < got.size(); ++i) {
          const double w = test::Quantize(dtype, want[i]);
          // One storage ulp, plus float32 arithmetic on values below 2.
          ASSERT_NEAR(got[i], w, test::StorageUlp(dtype, w) + 1e-5)
              << DTypeTag(dtype) << " element " << i;
        }
      }
    }
  }
}

TEST_P(SimdPathTest, EngineAttentionIsBitForBitTheBestPaths) {
  auto engine = EngineOn(GetParam());
  auto best = EngineOn(BestSupported().name);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(best, nullptr);
  std::mt19937 rng(11);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (bool softmax : {false, true}) {
      constexpr int64_t B = 2, Sq = 37, Sk = 41, Hq = 8, Hkv = 2, D = 32, Dv = 12;
      HostTensor q = Encode(dtype, {B, Sq, Hq, D}, RandomValues(dtype, B * Sq * Hq * D, &rng));
      HostTensor k = Encode(dtype, {B, Sk, Hkv, D}, RandomValues(dtype, B * Sk * Hkv * D, &rng));
      HostTensor v = Encode(dtype, {B, Sk, Hkv, Dv}, RandomValues(dtype, B * Sk * Hkv * Dv, &rng));
      AttentionParams params;
      params.config.theta = 10000;
      params.config.head_dim = D;
      params.config.rotary_dim = 20;
      params.config.layout = Layout::kHalf;
      params.config.max_len = 256;
      params.q = q.const_view();
      params.k = k.const_view();
      params.v = v.const_view();
      params.q_start_pos = 10;
      params.k_start_pos = 6;
      params.causal = true;
      params.softmax = softmax;
      std::string scores, output, best_scores, best_output;
      AttentionOutputs out, best_out;
      out.scores.bytes = &scores;
      out.output.bytes = &output;
      best_out.scores.bytes = &best_scores;
      best_out.output.bytes = &best_output;
      ASSERT_TRUE(engine->AttentionScores(params, &out).ok());
      ASSERT_TRUE(best->AttentionScores(params, &best_out).ok());
      EXPECT_EQ(scores, best_scores) << DTypeTag(dtype) << (softmax ? " softmax" : " raw");
      EXPECT_EQ(output, best_output) << DTypeTag(dtype) << (softmax ? " softmax" : " raw");
    }
  }
}

// The tiled pass (masks, transforms, every result) gives the best path's
// bits on every path.
// Prefill (GEMM products) and decode (Sq = 1: skinny products, keys
// rotated on the fly, values read as stored), with every result.
TEST_P(SimdPathTest, EngineTiledAttentionIsBitForBitTheBestPaths) {
  auto engine = EngineOn(GetParam());
  auto best = EngineOn(BestSupported().name);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(best, nullptr);
  std::mt19937 rng(15);
  for (const int64_t Sq : {70, 1}) {
    constexpr int64_t B = 2, Sk = 300, Hq = 8, Hkv = 2, D = 32, Dv = 12;
    const DType dtype = DType::kBFloat16;
    HostTensor q = Encode(dtype, {B, Sq, Hq, D}, RandomValues(dtype, B * Sq * Hq * D, &rng));
    HostTensor k = Encode(dtype, {B, Sk, Hkv, D}, RandomValues(dtype, B * Sk * Hkv * D, &rng));
    HostTensor v = Encode(dtype, {B, Sk, Hkv, Dv}, RandomValues(dtype, B * Sk * Hkv * Dv, &rng));
    AttentionParams params;
    params.config.head_dim = D;
    params.config.max_len = 512;
    params.q = q.const_view();
    params.k = k.const_view();
    params.v = v.const_view();
    params.q_start_pos = 200;
    params.causal = true;
    params.window_left = 120;
    params.softcap = 1.5;
    params.sinks = std::vector<float>(Hq, 0.5f);
    params.alibi_slopes = std::vector<float>(Hq, 0.01f);
    params.results = {AttentionResult::kOutput, AttentionResult::kLse, AttentionResult::kTopK,
                      AttentionResult::kKeyMass, AttentionResult::kScoreRows};
    params.top_k = 6;
    params.score_rows_start = Sq > 1 ? 30 : 0;
    params.score_rows_count = Sq > 1 ? 5 : 1;
    std::string got[6], want[6];
    auto run = [&](Engine* e, std::string* r) {
      AttentionOutputs out;
      out.output.bytes = &r[0];
      out.lse.bytes = &r[1];
      out.top_k_indices.bytes = &r[2];
      out.top_k_probs.bytes = &r[3];
      out.key_mass.bytes = &r[4];
      out.score_rows.bytes = &r[5];
      const absl::Status status = e->AttentionScores(params, &out);
      EXPECT_TRUE(status.ok()) << status;
    };
    run(engine.get(), got);
    run(best.get(), want);
    for (int i = 0; i < 6; ++i) {
      EXPECT_FALSE(got[i].empty()) << "Sq " << Sq << " result " << i;
      EXPECT_EQ(got[i], want[i]) << "Sq " << Sq << " result " << i;
    }
  }
}

// Scores over 16 MiB are written with streaming stores (cpu_attention.cc):
// the same values as the reference.
TEST_P(SimdPathTest, EngineAttentionWithStreamedScoresMatchesTheReference) {
  auto engine = EngineOn(GetParam());
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(13);
  constexpr int64_t S = 1100, Hq = 4, Hkv = 1, D = 16;
  ASSERT_GT(Hq * S * S * 4, int64_t{16} << 20);
  const std::vector<double> qv = RandomValues(DType::kBFloat16, S * Hq * D, &rng);
  const std::vector<double> kv = RandomValues(DType::kBFloat16, S * Hkv * D, &rng);
  HostTensor q = Encode(DType::kBFloat16, {1, S, Hq, D}, qv);
  HostTensor k = Encode(DType::kBFloat16, {1, S, Hkv, D}, kv);
  for (bool softmax : {false, true}) {
    AttentionParams params;
    params.config.theta = 10000;
    params.config.head_dim = D;
    params.config.max_len = 2048;
    params.q = q.const_view();
    params.k = k.const_view();
    params.causal = true;
    params.softmax = softmax;
    std::string scores;
    AttentionOutputs out;
    out.scores.bytes = &scores;
    ASSERT_TRUE(engine->AttentionScores(params, &out).ok());
    reference::Rope rope;
    rope.theta = 10000;
    rope.head_dim = D;
    rope.rotary_dim = D;
    reference::AttentionShape shape;
    shape.q_seq = S;
    shape.k_seq = S;
    shape.q_heads = Hq;
    shape.k_heads = Hkv;
    const reference::AttentionResult want = reference::Attention(
        rope, shape, qv, kv, nullptr, 0, 0, true, softmax, 1.0 / std::sqrt(double{D}));
    std::vector<float> got(scores.size() / sizeof(float));
    std::memcpy(got.data(), scores.data(), scores.size());
    ASSERT_EQ(got.size(), want.scores.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double w = want.scores[i];
      const bool ok = std::isinf(w) ? got[i] == w : std::fabs(got[i] - w) <= 2e-5 * (1 + std::fabs(w));
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << (softmax ? "probability " : "score ") << i << ": got " << got[i]
                      << ", want " << w;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Compiled, SimdPathTest, ::testing::ValuesIn(CompiledPathNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// ---- Choosing a path ------------------------------------------------------------

TEST(CpuSimdTest, EveryBuildHasTheBaselinePathAndAutoTakesTheBestSupported) {
  const std::vector<CpuSimdPath> paths = CompiledCpuSimdPaths();
  ASSERT_FALSE(paths.empty());
  EXPECT_TRUE(paths.back().supported) << paths.back().name << " is the baseline";
#if defined(__x86_64__)
  EXPECT_EQ(paths.back().name, "sse2");
  bool has_avx2 = false;
  for (const CpuSimdPath& p : paths) has_avx2 |= p.name == "avx2";
  EXPECT_TRUE(has_avx2);
#endif
  absl::StatusOr<const cpu::CpuKernels*> chosen = SelectCpuKernels("auto", "test");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_STREQ((*chosen)->name, BestSupported().name);
  absl::StatusOr<const cpu::CpuKernels*> empty = SelectCpuKernels("", "test");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, *chosen);
}

TEST(CpuSimdTest, UnknownPathIsInvalidArgumentListingTheCompiledOnes) {
  const absl::StatusOr<const cpu::CpuKernels*> k = SelectCpuKernels("avx1024", "--cpu_simd");
  EXPECT_TRUE(test::StatusIs(k.status(), absl::StatusCode::kInvalidArgument,
                             "--cpu_simd is \"avx1024\": must be auto or a SIMD path this binary "
                             "was built with: "));
  EXPECT_TRUE(test::StatusIs(k.status(), absl::StatusCode::kInvalidArgument,
                             CompiledCpuSimdPaths().back().name));
}

TEST(CpuSimdTest, PathTheCpuLacksIsFailedPrecondition) {
  for (const CpuSimdPath& p : CompiledCpuSimdPaths()) {
    if (p.supported) continue;
    const absl::StatusOr<const cpu::CpuKernels*> k = SelectCpuKernels(p.name, "ROPE_CPU_SIMD");
    EXPECT_TRUE(test::StatusIs(k.status(), absl::StatusCode::kFailedPrecondition,
                               "ROPE_CPU_SIMD is \"" + p.name +
                                   "\": this CPU cannot run that SIMD path; it can run "));
    CpuBackendOptions options;
    options.simd = p.name;
    options.simd_origin = "--cpu_simd";
    EXPECT_TRUE(test::StatusIs(NewCpuBackend(options).status(),
                               absl::StatusCode::kFailedPrecondition, "--cpu_simd is"));
    return;
  }
  GTEST_SKIP() << "this CPU runs every compiled SIMD path: no unsupported one to ask for";
}

TEST(CpuSimdTest, EnvironmentVariableForcesALowerPath) {
  const std::string lowest = CompiledCpuSimdPaths().back().name;
  const char* before = std::getenv(kCpuSimdEnv);
  const std::string saved = before == nullptr ? "" : before;
  ASSERT_EQ(setenv(kCpuSimdEnv, lowest.c_str(), 1), 0);
  auto backend = NewCpuBackend(1);
  ASSERT_EQ(setenv(kCpuSimdEnv, "no-such-path", 1), 0);
  auto bad = NewCpuBackend(1);
  if (before == nullptr) {
    unsetenv(kCpuSimdEnv);
  } else {
    setenv(kCpuSimdEnv, saved.c_str(), 1);
  }
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->info().cpu_simd, lowest);
  EXPECT_NE((*backend)->info().device.find("SIMD " + lowest), std::string::npos)
      << (*backend)->info().device;
  EXPECT_TRUE(test::StatusIs(bad.status(), absl::StatusCode::kInvalidArgument,
                             "ROPE_CPU_SIMD is \"no-such-path\""));
}

}  // namespace
}  // namespace rope
