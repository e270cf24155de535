// ParsedSizeBound checked against what the parse really takes: protobuf's
// own SpaceUsedLong of the parsed message (capacities included) and, where
// glibc reports it, the heap bytes the parse left in use. Acceptance is
// checked against the parser on every truncation and on corrupted bytes.
#include "core/proto_engine/parsed_size.h"

#include <malloc.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace {

using google::protobuf::Message;

// Heap bytes in use now (glibc's allocator; 0 where it does not say, e.g.
// under a sanitizer's allocator).
int64_t HeapInUse() { return static_cast<int64_t>(mallinfo2().uordblks); }

struct Measured {
  bool parsed = false;
  int64_t space_used = 0;  // protobuf's SpaceUsedLong of the parsed message
  int64_t heap_grown = 0;  // heap in use after the parse minus before
};

Measured ParseAndMeasure(const Message& prototype, const std::string& wire) {
  // Once unmeasured: a first parse of a type initializes protobuf's and the
  // allocator's lazily built state, which no later parse repeats.
  std::unique_ptr<Message>(prototype.New())->ParseFromString(wire);
  Measured m;
  const int64_t before = HeapInUse();
  std::unique_ptr<Message> message(prototype.New());
  m.parsed = message->ParseFromString(wire);
  m.heap_grown = HeapInUse() - before;
  if (m.parsed) m.space_used = static_cast<int64_t>(message->SpaceUsedLong());
  return m;
}

int64_t Bound(const Message& prototype, const std::string& wire) {
  absl::StatusOr<int64_t> bound = ParsedSizeBound(*prototype.GetDescriptor(), wire);
  EXPECT_TRUE(bound.ok()) << bound.status();
  return bound.ok() ? *bound : -1;
}

// The bound is at least what the parse takes, and not so far above it that
// charging it would refuse honest requests (4x plus a few objects).
void ExpectBounds(const Message& message, const char* label) {
  const std::string wire = message.SerializeAsString();
  const Measured m = ParseAndMeasure(message, wire);
  ASSERT_TRUE(m.parsed) << label;
  const int64_t bound = Bound(message, wire);
  EXPECT_GE(bound, m.space_used) << label << ": wire " << wire.size();
  EXPECT_GE(bound, m.heap_grown) << label << ": wire " << wire.size();
  EXPECT_LE(bound, 4 * m.space_used + 16384) << label << ": wire " << wire.size();
}

v1::Tensor MakeTensor(int64_t seq, int64_t heads, int64_t dim) {
  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  for (int64_t d : {int64_t{1}, seq, heads, dim}) t.add_shape(d);
  t.set_data(std::string(static_cast<size_t>(seq * heads * dim * 4), '\x3f'));
  return t;
}

v1::RotateRequest MakeRotate(int64_t seq, bool positions) {
  v1::RotateRequest r;
  v1::RopeConfig* c = r.mutable_config();
  c->set_theta(500000);
  c->set_head_dim(128);
  c->set_max_len(8192);
  *r.mutable_q() = MakeTensor(seq, 32, 128);
  *r.mutable_k() = MakeTensor(seq, 8, 128);
  if (positions) {
    for (int64_t i = 0; i < seq; ++i) r.add_positions(i % 100);
  }
  return r;
}

TEST(ParsedSizeBound, EveryRequestKindIsBounded) {
  ExpectBounds(v1::RotateRequest(), "empty Rotate");
  ExpectBounds(MakeRotate(1, false), "decode Rotate");
  ExpectBounds(MakeRotate(64, true), "Rotate with positions");

  v1::RotateRequest longrope = MakeRotate(4, false);
  auto* lr = longrope.mutable_config()->mutable_longrope();
  for (int i = 0; i < 64; ++i) {
    lr->add_short_factor(1.0 + i);
    lr->add_long_factor(2.0 + i);
  }
  longrope.mutable_config()->set_hf_config_json(std::string(3000, ' ') + "{}");
  ExpectBounds(longrope, "LongRoPE Rotate with a config text");

  v1::AttentionScoresRequest scores;
  *scores.mutable_q() = MakeTensor(16, 4, 64);
  *scores.mutable_k() = MakeTensor(16, 4, 64);
  for (int i = 0; i < 16; ++i) scores.add_q_fractional_positions(i * 0.5);
  ExpectBounds(scores, "AttentionScores");

  v1::BuildPositionsRequest build;
  for (int i = 0; i < 5000; ++i) build.add_input_ids(i);
  for (int i = 0; i < 5000; ++i) build.add_attention_mask(1);
  for (int v : {1, 4, 6, 1, 8, 8}) build.add_image_grid_thw(v);
  ExpectBounds(build, "BuildPositions");

  inference::ModelInferRequest infer;
  infer.set_model_name("rotate");
  (*infer.mutable_parameters())["theta"].set_string_param("500000");
  (*infer.mutable_parameters())["head_dim"].set_int64_param(128);
  for (const char* name : {"q", "k", "positions"}) {
    auto* input = infer.add_inputs();
    input->set_name(name);
    input->set_datatype("FP32");
    for (int64_t d : {1, 16, 8, 128}) input->add_shape(d);
    (*input->mutable_parameters())["shared_memory_region"].set_string_param("region");
  }
  infer.add_raw_input_contents(std::string(16 * 8 * 128 * 4, '\1'));
  auto* typed = infer.mutable_inputs(2)->mutable_contents();
  for (int i = 0; i < 1000; ++i) typed->add_int64_contents(i);
  for (int i = 0; i < 1000; ++i) typed->add_fp32_contents(0.5f);
  for (int i = 0; i < 100; ++i) typed->add_bytes_contents("bytes");
  ExpectBounds(infer, "ModelInfer with parameters, raw and typed contents");
}

TEST(ParsedSizeBound, SmallVarintsAreChargedAtTheirParsedWidth) {
  // One wire byte per position, eight (sixteen while growing) once parsed:
  // the bound follows the parse, not the wire.
  v1::RotateRequest r;
  for (int i = 0; i < (1 << 20); ++i) r.add_positions(i % 128);
  const std::string wire = r.SerializeAsString();
  const int64_t bound = Bound(r, wire);
  EXPECT_GE(bound, 8 * static_cast<int64_t>(wire.size()) - 64);
  ExpectBounds(r, "a million one-byte positions");

  // The same field sent unpacked, one tag per value (the parser accepts both).
  std::string unpacked;
  {
    google::protobuf::io::StringOutputStream stream(&unpacked);
    google::protobuf::io::CodedOutputStream out(&stream);
    for (int i = 0; i < 100000; ++i) {
      out.WriteTag((5 << 3) | 0);  // positions = 5, varint
      out.WriteVarint64(i % 128);
    }
  }
  const Measured m = ParseAndMeasure(r, unpacked);
  ASSERT_TRUE(m.parsed);
  EXPECT_GE(Bound(r, unpacked), m.space_used);
}

TEST(ParsedSizeBound, UnknownFieldsAreCharged) {
  // Fields the type does not have are kept by the parser, each a record.
  std::string wire;
  {
    google::protobuf::io::StringOutputStream stream(&wire);
    google::protobuf::io::CodedOutputStream out(&stream);
    for (int i = 0; i < 100000; ++i) {
      out.WriteTag((1000 << 3) | 0);
      out.WriteVarint32(1);
    }
    for (int i = 0; i < 1000; ++i) {
      out.WriteTag((1001 << 3) | 2);
      out.WriteVarint32(20);
      out.WriteString(std::string(20, 'x'));
    }
    // A known number with the wrong wire type is kept as unknown too.
    out.WriteTag((5 << 3) | 5);
    out.WriteLittleEndian32(7);
  }
  v1::RotateRequest prototype;
  const Measured m = ParseAndMeasure(prototype, wire);
  ASSERT_TRUE(m.parsed);
  const int64_t bound = Bound(prototype, wire);
  EXPECT_GE(bound, m.space_used);
  EXPECT_GE(bound, m.heap_grown);
}

std::string NestedGroups(int levels) {
  std::string wire;
  google::protobuf::io::StringOutputStream stream(&wire);
  google::protobuf::io::CodedOutputStream out(&stream);
  for (int i = 0; i < levels; ++i) out.WriteTag((900 << 3) | 3);
  out.WriteTag((901 << 3) | 0);
  out.WriteVarint32(1);
  for (int i = 0; i < levels; ++i) out.WriteTag((900 << 3) | 4);
  return wire;
}

TEST(ParsedSizeBound, NestingIsLimitedLikeTheParser) {
  v1::RotateRequest prototype;
  for (int levels : {1, 50, 99, 100, 101, 150}) {
    const std::string wire = NestedGroups(levels);
    const Measured m = ParseAndMeasure(prototype, wire);
    absl::StatusOr<int64_t> bound = ParsedSizeBound(*prototype.GetDescriptor(), wire);
    EXPECT_EQ(bound.ok(), m.parsed) << levels << " levels: " << bound.status();
    if (m.parsed && bound.ok()) EXPECT_GE(*bound, m.space_used) << levels << " levels";
  }
}

TEST(ParsedSizeBound, EveryTruncationIsJudgedLikeTheParser) {
  v1::RotateRequest r = MakeRotate(2, true);
  r.mutable_config()->mutable_longrope()->add_short_factor(1.5);
  r.mutable_config()->set_hf_config_json("{\"rope_theta\": 10000}");
  r.mutable_q()->set_data("0123456789abcdef");
  const std::string wire = r.SerializeAsString();
  for (size_t n = 0; n <= wire.size(); ++n) {
    const std::string prefix = wire.substr(0, n);
    const Measured m = ParseAndMeasure(r, prefix);
    absl::StatusOr<int64_t> bound = ParsedSizeBound(*r.GetDescriptor(), prefix);
    ASSERT_EQ(bound.ok(), m.parsed) << "prefix of " << n << " bytes: " << bound.status();
    if (m.parsed) EXPECT_GE(*bound, m.space_used) << "prefix of " << n << " bytes";
  }
}

TEST(ParsedSizeBound, CorruptedBytesNeverUndercharge) {
  // Whatever the parser accepts is bounded; the bound may refuse more than
  // the parser only where the parser refuses too (the two agree on every
  // corrupted input here but for strings the parser checks as UTF-8).
  v1::RotateRequest r = MakeRotate(2, true);
  r.mutable_config()->mutable_mrope()->add_section(16);
  r.mutable_q()->set_data("0123456789abcdef");
  const std::string wire = r.SerializeAsString();
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string corrupted = wire;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      corrupted[rng() % corrupted.size()] = static_cast<char>(rng() & 0xff);
    }
    const Measured m = ParseAndMeasure(r, corrupted);
    absl::StatusOr<int64_t> bound = ParsedSizeBound(*r.GetDescriptor(), corrupted);
    if (m.parsed) {
      ASSERT_TRUE(bound.ok()) << "trial " << trial << ": " << bound.status();
      EXPECT_GE(*bound, m.space_used) << "trial " << trial;
    }
  }
}

TEST(ParsedSizeBound, MalformedInputNamesTheTypeAndTheByte) {
  v1::RotateRequest r = MakeRotate(1, false);
  const std::string wire = r.SerializeAsString();
  absl::StatusOr<int64_t> bound =
      ParsedSizeBound(*r.GetDescriptor(), wire.substr(0, wire.size() - 3));
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bound.status().message(),
              testing::HasSubstr("request is not a valid rope.v1.RotateRequest message"));
  EXPECT_THAT(bound.status().message(), testing::HasSubstr("at byte"));
}

}  // namespace
}  // namespace rope
