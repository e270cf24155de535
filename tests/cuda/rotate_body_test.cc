// The rotate kernels' per-thread bodies, run on the host over their whole
// launch grid, against the CPU backend: bit-identical results over dtype x
// layout x rotary_dim x head grouping x position mode x direction, on the
// 16-byte path and the one-pair path, with full grids, grid-stride grids and
// token chunks as the backend launches them. Runs without a GPU.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/backends/cuda/kernel_common.h"
#include "core/backends/cuda/rotate_kernel_body.h"
#include "tests/cuda/backend_cases.h"
#include "tests/cuda/grid_emulation.h"

namespace rope {
namespace {

using kernels::RotateKernelParams;
using test::RotateCase;
using test::RotateData;

// Rotates data in place with the kernel body for `Tag`/`kInterleaved`,
// launching over token chunks of `chunk_tokens` with at most `max_blocks`
// blocks of `block_dim` threads, as the backend does.
template <typename Tag, bool kInterleaved, bool kVector>
void RunRotateBody(const RotateCase& c, const RopeTable& table, RotateData* d, int64_t chunk_tokens,
                   int block_dim, int64_t max_blocks) {
  const RotateArgs args = d->Args(c);
  const int64_t elem = static_cast<int64_t>(DTypeSize(c.dtype));
  const int64_t tokens = c.batch * c.seq;
  for (int64_t first = 0; first < tokens; first += chunk_tokens) {
    RotateKernelParams p;
    p.q = static_cast<char*>(args.q) + first * c.q_heads * c.head_dim * elem;
    p.q_heads = static_cast<int>(c.q_heads);
    if (args.k != nullptr) {
      p.k = static_cast<char*>(args.k) + first * c.k_heads * c.head_dim * elem;
      p.k_heads = static_cast<int>(c.k_heads);
    }
    p.tokens = std::min(chunk_tokens, tokens - first);
    p.first_token = first;
    p.head_dim = static_cast<int>(c.head_dim);
    p.rotary_dim = static_cast<int>(c.rotary_dim);
    p.rotary_offset = static_cast<int>(c.rotary_offset);
    p.table = table.rows();
    p.positions = args.positions;
    p.inverse = c.inverse;
    const int64_t items = kernels::RotateItems<Tag, kInterleaved, kVector>(p);
    const int64_t blocks = kernels::BlocksFor(items, block_dim, max_blocks);
    test::RunGridOnHost(blocks, block_dim, [&p](int64_t b, int t, int bd, int64_t gd) {
      kernels::RotateKernelBody<Tag, kInterleaved, kVector>(p, b, t, bd, gd);
    });
  }
}

// Dispatch on the case's dtype and layout, as the launcher does.
template <bool kVector>
void RunBody(const RotateCase& c, const RopeTable& table, RotateData* d, int64_t chunk_tokens,
             int block_dim, int64_t max_blocks) {
  const bool inter = c.layout == Layout::kInterleaved;
  switch (c.dtype) {
    case DType::kFloat32:
      return inter ? RunRotateBody<math::F32, true, kVector>(c, table, d, chunk_tokens, block_dim,
                                                             max_blocks)
                   : RunRotateBody<math::F32, false, kVector>(c, table, d, chunk_tokens, block_dim,
                                                              max_blocks);
    case DType::kFloat16:
      return inter ? RunRotateBody<math::F16, true, kVector>(c, table, d, chunk_tokens, block_dim,
                                                             max_blocks)
                   : RunRotateBody<math::F16, false, kVector>(c, table, d, chunk_tokens, block_dim,
                                                              max_blocks);
    case DType::kBFloat16:
      return inter ? RunRotateBody<math::BF16, true, kVector>(c, table, d, chunk_tokens, block_dim,
                                                              max_blocks)
                   : RunRotateBody<math::BF16, false, kVector>(c, table, d, chunk_tokens, block_dim,
                                                               max_blocks);
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return;  // not an input type
  }
}

bool ShapeAllowsVectors(const RotateCase& c) {
  const int hd = static_cast<int>(c.head_dim), r = static_cast<int>(c.rotary_dim);
  const int o = static_cast<int>(c.rotary_offset);
  const bool inter = c.layout == Layout::kInterleaved;
  switch (c.dtype) {
    case DType::kFloat32:
      return inter ? kernels::RotateShapeAllowsVectors<math::F32, true>(hd, r, o)
                   : kernels::RotateShapeAllowsVectors<math::F32, false>(hd, r, o);
    case DType::kFloat16:
      return inter ? kernels::RotateShapeAllowsVectors<math::F16, true>(hd, r, o)
                   : kernels::RotateShapeAllowsVectors<math::F16, false>(hd, r, o);
    case DType::kBFloat16:
      return inter ? kernels::RotateShapeAllowsVectors<math::BF16, true>(hd, r, o)
                   : kernels::RotateShapeAllowsVectors<math::BF16, false>(hd, r, o);
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      break;
  }
  return false;
}

// First differing byte offset, or -1.
int64_t FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

struct Launch {
  int64_t chunk_tokens;
  int block_dim;
  int64_t max_blocks;
};

class RotateBodyTest : public ::testing::TestWithParam<RotateCase> {};

TEST_P(RotateBodyTest, MatchesCpuBackendBitForBit) {
  // Whole grid in one chunk; a tiny grid that strides; odd token chunks.
  const Launch launches[] = {{1 << 20, 256, 1 << 20}, {1 << 20, 32, 3}, {3, 64, 2}};
  // A table of one block, and one of four (4096-row blocks): random
  // per-token positions then read rows through every block pointer.
  for (uint32_t max_len : {4096u, 3 * 4096u + 100}) {
    for (test::PositionMode mode :
         {test::PositionMode::kStart, test::PositionMode::kPerSeq, test::PositionMode::kPerToken}) {
      for (bool inverse : {false, true}) {
        RotateCase c = GetParam();
        c.positions = mode;
        c.inverse = inverse;
        c.max_len = max_len;
        SCOPED_TRACE(c.Name());
        SCOPED_TRACE(testing::Message() << "max_len " << max_len);
        const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
        RotateData want = test::MakeRotateData(c, 7);
        ASSERT_TRUE(test::CpuBackend().Rotate(*table, want.Args(c)).ok());
        for (bool vector : {false, true}) {
          if (vector && !ShapeAllowsVectors(c)) continue;
          for (const Launch& l : launches) {
            SCOPED_TRACE(testing::Message()
                         << (vector ? "16-byte" : "one-pair") << " path, chunk " << l.chunk_tokens
                         << ", block " << l.block_dim << ", max blocks " << l.max_blocks);
            RotateData got = test::MakeRotateData(c, 7);
            if (vector) {
              RunBody<true>(c, *table, &got, l.chunk_tokens, l.block_dim, l.max_blocks);
            } else {
              RunBody<false>(c, *table, &got, l.chunk_tokens, l.block_dim, l.max_blocks);
            }
            EXPECT_EQ(FirstDifference(got.q, want.q), -1) << "q differs";
            EXPECT_EQ(FirstDifference(got.k, want.k), -1) << "k differs";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, RotateBodyTest, ::testing::ValuesIn(test::RotateGrid()),
                         [](const ::testing::TestParamInfo<RotateCase>& info) {
                           return info.param.Name();
                         });

// The shapes of real models take the 16-byte path for every dtype and
// layout (so the tests above cover it), and odd shapes do not.
TEST(RotateBodyVectorTest, VectorPathCoversModelShapesOnly) {
  for (int head_dim : {64, 128, 256}) {
    EXPECT_TRUE((kernels::RotateShapeAllowsVectors<math::F32, true>(head_dim, head_dim, 0)));
    EXPECT_TRUE((kernels::RotateShapeAllowsVectors<math::F32, false>(head_dim, head_dim, 0)));
    EXPECT_TRUE((kernels::RotateShapeAllowsVectors<math::BF16, true>(head_dim, head_dim, 0)));
    EXPECT_TRUE((kernels::RotateShapeAllowsVectors<math::F16, false>(head_dim, head_dim, 0)));
  }
  // DeepSeek's MLA heads: 128 nope + 64 rope features.
  EXPECT_TRUE((kernels::RotateShapeAllowsVectors<math::BF16, true>(192, 64, 128)));
  EXPECT_FALSE((kernels::RotateShapeAllowsVectors<math::BF16, true>(192, 64, 100)));
  EXPECT_FALSE((kernels::RotateShapeAllowsVectors<math::BF16, true>(12, 8, 0)));
  EXPECT_FALSE((kernels::RotateShapeAllowsVectors<math::F32, false>(6, 2, 0)));
  // Half layout with rotary_dim/2 not a multiple of a vector: pairs would
  // straddle vectors.
  EXPECT_FALSE((kernels::RotateShapeAllowsVectors<math::BF16, false>(64, 24, 0)));

  kernels::RotateKernelParams p;
  p.head_dim = 64;
  p.rotary_dim = 64;
  alignas(16) uint16_t buffer[16] = {};
  p.q = buffer;
  EXPECT_TRUE((kernels::RotateUsesVectors<math::BF16, true>(p)));
  p.q = buffer + 1;  // 2-byte aligned only
  EXPECT_FALSE((kernels::RotateUsesVectors<math::BF16, true>(p)));
  p.q = buffer;
  p.k = buffer + 4;  // 8-byte aligned only
  EXPECT_FALSE((kernels::RotateUsesVectors<math::BF16, true>(p)));
}

// The float8 kernel's body over its grid against the CPU backend's float8
// outputs: bit for bit, every case of the grid, both formats, scales that
// reach saturation.
template <typename Tag, bool kInterleaved>
void RunFloat8Body(const RotateCase& c, const RopeTable& table, const RotateArgs& args,
                   int64_t chunk_tokens, int block_dim, int64_t max_blocks) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(c.dtype));
  const int64_t tokens = c.batch * c.seq;
  for (int64_t first = 0; first < tokens; first += chunk_tokens) {
    kernels::RotateFloat8Params p;
    p.q = static_cast<const char*>(args.q) + first * c.q_heads * c.head_dim * elem;
    p.q_out = static_cast<uint8_t*>(args.q_out) + first * c.q_heads * c.head_dim;
    p.q_heads = static_cast<int>(c.q_heads);
    p.q_scale = args.q_scale;
    if (args.k != nullptr) {
      p.k = static_cast<const char*>(args.k) + first * c.k_heads * c.head_dim * elem;
      p.k_out = static_cast<uint8_t*>(args.k_out) + first * c.k_heads * c.head_dim;
      p.k_heads = static_cast<int>(c.k_heads);
      p.k_scale = args.k_scale;
    }
    p.tokens = std::min(chunk_tokens, tokens - first);
    p.first_token = first;
    p.head_dim = static_cast<int>(c.head_dim);
    p.rotary_dim = static_cast<int>(args.rotary_dim);
    p.rotary_offset = static_cast<int>(c.rotary_offset);
    p.table = table.rows();
    p.positions = args.positions;
    p.inverse = c.inverse;
    p.e5m2 = args.output_dtype == DType::kFloat8E5M2;
    const int64_t blocks = kernels::BlocksFor(kernels::RotateFloat8Items(p), block_dim, max_blocks);
    test::RunGridOnHost(blocks, block_dim, [&p](int64_t b, int t, int bd, int64_t gd) {
      kernels::RotateFloat8KernelBody<Tag, kInterleaved>(p, b, t, bd, gd);
    });
  }
}

TEST(RotateFloat8BodyTest, MatchesCpuBackendBitForBit) {
  for (RotateCase c : test::RotateGrid()) {
    for (DType out : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
      for (int64_t rotary : {c.rotary_dim, int64_t{0}}) {  // 0: a NoPE layer, conversion only
        c.positions = test::PositionMode::kPerToken;
        c.inverse = rotary == 0;
        SCOPED_TRACE(c.Name());
        SCOPED_TRACE(testing::Message() << DTypeName(out) << " rotary_dim " << rotary);
        const std::shared_ptr<const RopeTable> table = test::PlainTable(c.rotary_dim, c.max_len);
        RotateData data = test::MakeRotateData(c, 9);
        std::vector<uint8_t> want_q(data.q.size() / DTypeSize(c.dtype));
        std::vector<uint8_t> want_k(data.k.size() / DTypeSize(c.dtype));
        std::vector<uint8_t> got_q(want_q.size(), 0xAA), got_k(want_k.size(), 0xAA);
        RotateArgs args = data.Args(c);
        args.rotary_dim = rotary;
        args.output_dtype = out;
        args.q_scale = 300.0f;  // past E4M3FN's 448 for some values
        args.k_scale = 0.75f;
        args.q_out = want_q.data();
        args.k_out = c.k_heads > 0 ? want_k.data() : nullptr;
        const std::vector<uint8_t> q_before = data.q;
        ASSERT_TRUE(test::CpuBackend().Rotate(*table, args).ok());
        ASSERT_EQ(data.q, q_before) << "the CPU backend wrote its input";
        args.q_out = got_q.data();
        args.k_out = c.k_heads > 0 ? got_k.data() : nullptr;
        const bool inter = c.layout == Layout::kInterleaved;
        for (const Launch& l : {Launch{1 << 20, 256, 1 << 20}, Launch{3, 32, 2}}) {
          std::fill(got_q.begin(), got_q.end(), 0xAA);
          std::fill(got_k.begin(), got_k.end(), 0xAA);
          switch (c.dtype) {
            case DType::kFloat32:
              inter ? RunFloat8Body<math::F32, true>(c, *table, args, l.chunk_tokens, l.block_dim,
                                                     l.max_blocks)
                    : RunFloat8Body<math::F32, false>(c, *table, args, l.chunk_tokens,
                                                      l.block_dim, l.max_blocks);
              break;
            case DType::kFloat16:
              inter ? RunFloat8Body<math::F16, true>(c, *table, args, l.chunk_tokens, l.block_dim,
                                                     l.max_blocks)
                    : RunFloat8Body<math::F16, false>(c, *table, args, l.chunk_tokens,
                                                      l.block_dim, l.max_blocks);
              break;
            default:
              inter ? RunFloat8Body<math::BF16, true>(c, *table, args, l.chunk_tokens,
                                                      l.block_dim, l.max_blocks)
                    : RunFloat8Body<math::BF16, false>(c, *table, args, l.chunk_tokens,
                                                       l.block_dim, l.max_blocks);
              break;
          }
          EXPECT_EQ(FirstDifference(got_q, want_q), -1) << "q differs";
          EXPECT_EQ(FirstDifference(got_k, want_k), -1) << "k differs";
        }
      }
    }
  }
}

TEST(RotateBodyLaunchTest, IndexDivIsDivisionOnBothSidesOfTheThirtyTwoBitPath) {
  const int64_t cases[][2] = {{0, 7},
                              {13, 5},
                              {0xffffffffll, 3},
                              {1ll << 32, 3},
                              {(1ll << 40) + 5, 1ll << 20},
                              {123456789, 1ll << 33}};
  for (const auto& c : cases) EXPECT_EQ(kernels::IndexDiv(c[0], c[1]), c[0] / c[1]) << c[0];
}

TEST(RotateBodyLaunchTest, BlocksForCapsAndNeverReturnsZero) {
  EXPECT_EQ(kernels::BlocksFor(0, 256, 100), 1);
  EXPECT_EQ(kernels::BlocksFor(1, 256, 100), 1);
  EXPECT_EQ(kernels::BlocksFor(256, 256, 100), 1);
  EXPECT_EQ(kernels::BlocksFor(257, 256, 100), 2);
  EXPECT_EQ(kernels::BlocksFor(1 << 30, 256, 100), 100);
}

}  // namespace
}  // namespace rope
