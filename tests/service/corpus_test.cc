// Malformed-request corpus: one table of bad (and borderline) requests sent
// through a real server on 127.0.0.1. Each case changes one thing in an
// otherwise valid request and names the exact grpc code and a message
// substring it must get back. After each one, the same server must still
// rotate a valid request correctly (checked against the reference), so a
// case that corrupts shared state (table cache, work queue, call gate) fails.
//
// Also here: the documented behaviour for non-finite tensor data (accepted,
// not scanned; IEEE-754 propagation), see Tensor.data in rope.proto.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Valid requests of each RPC; a case mutates one of them.
//   rotate:    q [2,3,4,8] and k [2,3,2,8] float32, head_dim 8, max_len 64, start_pos 5
//   attention: q [1,4,4,8], k [1,6,2,8], v [1,6,2,3] float32, head_dim 8, max_len 64
//   table:     head_dim 8, max_len 64, rows [0, 4)
//   region:    RegisterSharedMemory of a 4 KiB POSIX shared-memory object
//   positions: BuildPositions of one grid [2, 3]
struct Requests {
  v1::RotateRequest rotate;
  v1::AttentionScoresRequest attention;
  v1::GetTableRequest table;
  v1::RegisterSharedMemoryRequest region;
  v1::BuildPositionsRequest positions;
};

// A 4 KiB POSIX shared-memory object for the region case, made once for the
// process and unlinked when it exits.
const std::string& CorpusShmKey() {
  struct Object {
    std::string key = absl::StrCat("/rope-corpus-", getpid());
    Object() {
      const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
      if (fd < 0 || posix_fallocate(fd, 0, 4096) != 0) std::abort();
      close(fd);
    }
    ~Object() { shm_unlink(key.c_str()); }
  };
  static const Object object;
  return object.key;
}

v1::Tensor RandomTensor(DType dtype, std::vector<int64_t> shape, unsigned seed) {
  std::mt19937 rng(seed);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return ToProto(Encode(dtype, std::move(shape), RandomValues(dtype, n, &rng)));
}

Requests ValidRequests() {
  Requests r;
  *r.rotate.mutable_config() = MakeConfig(8, 64);
  *r.rotate.mutable_q() = RandomTensor(DType::kFloat32, {2, 3, 4, 8}, 1);
  *r.rotate.mutable_k() = RandomTensor(DType::kFloat32, {2, 3, 2, 8}, 2);
  r.rotate.set_start_pos(5);

  *r.attention.mutable_config() = MakeConfig(8, 64);
  *r.attention.mutable_q() = RandomTensor(DType::kFloat32, {1, 4, 4, 8}, 3);
  *r.attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 6, 2, 8}, 4);
  *r.attention.mutable_v() = RandomTensor(DType::kFloat32, {1, 6, 2, 3}, 5);
  r.attention.set_causal(true);
  r.attention.set_softmax(true);

  *r.table.mutable_config() = MakeConfig(8, 64);
  r.table.set_count(4);

  r.region.set_name("corpus");
  r.region.set_key(CorpusShmKey());
  r.region.set_byte_size(4096);

  v1::PositionGrid* grid = r.positions.add_grids();
  grid->add_size(2);
  grid->add_size(3);
  return r;
}

enum class Rpc { kRotate, kAttention, kGetTable, kRegister, kBuildPositions };

struct MalformedCase {
  std::string name;  // test name suffix: letters and digits only
  Rpc rpc;
  std::function<void(Requests*)> mutate;
  grpc::StatusCode code;
  std::string message;  // substring of the error message ("" for OK)
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

grpc::Status Call(v1::RopeService::Stub* stub, Rpc rpc, const Requests& r) {
  grpc::ClientContext context;
  SetDeadline(&context);
  switch (rpc) {
    case Rpc::kRotate: {
      v1::RotateResponse response;
      return stub->Rotate(&context, r.rotate, &response);
    }
    case Rpc::kAttention: {
      v1::AttentionScoresResponse response;
      return stub->AttentionScores(&context, r.attention, &response);
    }
    case Rpc::kGetTable: {
      v1::GetTableResponse response;
      return stub->GetTable(&context, r.table, &response);
    }
    case Rpc::kRegister: {
      // Registered, then unregistered at once: every case starts clean.
      v1::RegisterSharedMemoryResponse response;
      const grpc::Status status = stub->RegisterSharedMemory(&context, r.region, &response);
      if (status.ok()) {
        grpc::ClientContext unregister_context;
        SetDeadline(&unregister_context);
        v1::UnregisterSharedMemoryRequest unregister;
        unregister.set_name(r.region.name());
        v1::UnregisterSharedMemoryResponse unregistered;
        const grpc::Status gone =
            stub->UnregisterSharedMemory(&unregister_context, unregister, &unregistered);
        if (!gone.ok()) return gone;
      }
      return status;
    }
    case Rpc::kBuildPositions: {
      v1::BuildPositionsResponse response;
      return stub->BuildPositions(&context, r.positions, &response);
    }
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, "unknown rpc");
}

// Shorthands for the mutations.
v1::Tensor* Q(Requests* r) { return r->rotate.mutable_q(); }
v1::Tensor* K(Requests* r) { return r->rotate.mutable_k(); }
v1::RopeConfig* RotateConfig(Requests* r) { return r->rotate.mutable_config(); }
void SetShape(v1::Tensor* t, std::vector<int64_t> shape) {
  t->clear_shape();
  for (int64_t d : shape) t->add_shape(d);
}
void SetPositions(Requests* r, std::vector<int64_t> positions) {
  r->rotate.set_start_pos(0);
  r->rotate.clear_positions();
  for (int64_t p : positions) r->rotate.add_positions(p);
}
// The rotate request's config as a config.json (theta and the rest unset).
void SetJson(Requests* r, std::string json) {
  RotateConfig(r)->set_theta(0);
  RotateConfig(r)->set_hf_config_json(std::move(json));
}
// A valid config.json for the corpus' head_dim 8, around `rope_scaling`.
std::string JsonWith(const std::string& rope_scaling) {
  return R"({"rope_theta": 10000, "head_dim": 8, "max_position_embeddings": 64, "rope_scaling": )" +
         rope_scaling + "}";
}
void SetMrope(Requests* r, std::vector<uint32_t> section, bool interleaved) {
  v1::Mrope* mrope = RotateConfig(r)->mutable_mrope();
  mrope->clear_section();
  for (uint32_t s : section) mrope->add_section(s);
  mrope->set_interleaved(interleaved);
}

// Axial RoPE over the corpus' head_dim 8: two axes of 4 features.
void SetAxial(Requests* r, std::vector<uint32_t> dims) {
  v1::AxialRope* axial = RotateConfig(r)->mutable_axial();
  axial->clear_axes();
  for (uint32_t d : dims) axial->add_axes()->set_dim(d);
}
void SetFractional(Requests* r, std::vector<double> positions) {
  r->rotate.set_start_pos(0);
  r->rotate.clear_fractional_positions();
  for (double p : positions) r->rotate.add_fractional_positions(p);
}
// A Qwen2-VL config.json's token ids (the published ones).
constexpr char kQwen2VlJson[] =
    R"({"model_type": "qwen2_vl", "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652, "vision_config": {"spatial_merge_size": 2}})";
void SetQwenPositions(Requests* r, std::vector<int64_t> ids, std::vector<int64_t> image_grid) {
  r->positions.Clear();
  r->positions.set_hf_config_json(kQwen2VlJson);
  for (int64_t id : ids) r->positions.add_input_ids(id);
  for (int64_t g : image_grid) r->positions.add_image_grid_thw(g);
}

using grpc::StatusCode;

std::vector<MalformedCase> Cases() {
  const StatusCode kInvalid = StatusCode::INVALID_ARGUMENT;
  const Rpc kRegister = Rpc::kRegister;
  const StatusCode kOutOfRange = StatusCode::OUT_OF_RANGE;
  const StatusCode kExhausted = StatusCode::RESOURCE_EXHAUSTED;
  const StatusCode kOk = StatusCode::OK;
  const Rpc kRotate = Rpc::kRotate, kAttention = Rpc::kAttention, kTable = Rpc::kGetTable;
  const Rpc kPositions = Rpc::kBuildPositions;
  return {
      // ---- Axial RoPE, fractional positions, built positions ----
      {"AxialAccepted", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         SetPositions(r, {0, 1, 2, 63, 62, 61});
       },
       kOk, ""},
      {"AxialNoAxes", kRotate, [](Requests* r) { RotateConfig(r)->mutable_axial(); }, kInvalid,
       "config.axial is set with no axes"},
      {"AxialDimsWrongSum", kRotate, [](Requests* r) { SetAxial(r, {4, 2}); }, kInvalid,
       "config.axial.axes dims [4,2] sum to 6: must sum to rotary_dim 8"},
      {"AxialOddDim", kRotate, [](Requests* r) { SetAxial(r, {3, 5}); }, kInvalid,
       "config.axial.axes[0].dim is 3: must be even and > 0"},
      {"AxialNineAxes", kRotate,
       [](Requests* r) {
         SetAxial(r, {2, 2, 2, 2, 2, 2, 2, 2, 2});
         RotateConfig(r)->set_head_dim(18);
       },
       kInvalid, "config.axial.axes has 9 axes: at most 8"},
      {"AxialNaNTheta", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->mutable_axial()->mutable_axes(1)->set_theta(kNaN);
       },
       kInvalid, "config.axial.axes[1].theta is nan"},
      {"AxialInfiniteInterpolation", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->mutable_axial()->mutable_axes(0)->set_interpolation(kInf);
       },
       kInvalid, "config.axial.axes[0].interpolation is inf"},
      {"AxialDenormalInterpolation", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->mutable_axial()->mutable_axes(0)->set_interpolation(1e-320);
       },
       kInvalid, "config.axial.axes[0].interpolation is"},
      {"AxialRescaleOnDimTwo", kRotate,
       [](Requests* r) {
         SetAxial(r, {2, 6});
         RotateConfig(r)->mutable_axial()->mutable_axes(0)->set_theta_rescale(2);
       },
       kInvalid, "on an axis of dim 2"},
      {"AxialHugeRescale", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->mutable_axial()->mutable_axes(0)->set_theta_rescale(1e300);
       },
       kInvalid, "the rescaled base"},
      {"AxialWithMrope", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         SetMrope(r, {2, 1, 1}, false);
       },
       kInvalid, "config.mrope (chunked[2,1,1]) are both set"},
      {"AxialWithScaling", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->mutable_linear()->set_factor(2);
       },
       kInvalid, "config.axial is set with scaling linear"},
      {"AxialWithNoRope", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->mutable_no_rope();
       },
       kInvalid, "config.axial (axial[4,4]) and config.no_rope are both set"},
      {"AxialWithRotaryOffset", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->set_rotary_offset(2);
       },
       kInvalid, "config.axial (axial[4,4]) is set with config.rotary_offset 2"},
      {"AxialWithFloat32Angles", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         RotateConfig(r)->set_angle_precision(v1::ANGLE_FLOAT32);
       },
       kInvalid, "ANGLE_FLOAT32 with config.axial set"},
      {"AxialWithHfJson", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         SetJson(r, JsonWith("null"));
       },
       kInvalid, "is set with config.hf_config_json"},
      {"AxialPositionsWrongCount", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         SetPositions(r, {0, 1, 2});
       },
       kInvalid, "positions has 3 values: with config.axial (2 axes) it must be 2*S (6) or 2*B*S (12)"},
      {"AxialPositionPastMaxLen", kRotate,
       [](Requests* r) {
         SetAxial(r, {4, 4});
         SetPositions(r, {0, 1, 2, 3, 64, 5});
       },
       kOutOfRange, "positions[4] (axis 1, s 1) is 64: must be < config.max_len 64"},
      {"AxialTableAccepted", kTable,
       [](Requests* r) {
         r->table.mutable_config()->mutable_axial()->add_axes()->set_dim(2);
         r->table.mutable_config()->mutable_axial()->add_axes()->set_dim(6);
       },
       kOk, ""},
      {"AxialAttentionAccepted", kAttention,
       [](Requests* r) {
         r->attention.mutable_config()->mutable_axial()->add_axes()->set_dim(6);
         r->attention.mutable_config()->mutable_axial()->add_axes()->set_dim(2);
       },
       kOk, ""},
      {"FractionalAccepted", kRotate, [](Requests* r) { SetFractional(r, {0.5, 1.25, 63.75}); },
       kOk, ""},
      {"FractionalNaN", kRotate, [](Requests* r) { SetFractional(r, {0.5, kNaN, 2}); }, kInvalid,
       "fractional_positions[1] is nan: must be finite and >= 0"},
      {"FractionalNegative", kRotate, [](Requests* r) { SetFractional(r, {0.5, 1, -0.25}); },
       kInvalid, "fractional_positions[2] is -0.25"},
      {"FractionalPastMaxLen", kRotate, [](Requests* r) { SetFractional(r, {0.5, 1, 64}); },
       kOutOfRange, "fractional_positions[2] is 64: must be < config.max_len 64"},
      {"FractionalWrongCount", kRotate, [](Requests* r) { SetFractional(r, {0.5, 1}); }, kInvalid,
       "fractional_positions has 2 values: must be S (3) or B*S (6)"},
      {"FractionalWithStartPos", kRotate,
       [](Requests* r) {
         SetFractional(r, {0.5, 1, 2});
         r->rotate.set_start_pos(5);
       },
       kInvalid, "fractional_positions (3 values) and start_pos 5 are both set"},
      {"FractionalWithPositions", kRotate,
       [](Requests* r) {
         SetFractional(r, {0.5, 1, 2});
         r->rotate.add_positions(1);
       },
       kInvalid, "fractional_positions (3 values) and positions (1 values) are both set"},
      {"AttentionFractionalCausal", kAttention,
       [](Requests* r) {
         for (double p : {0.5, 1.5, 2.5, 3.5}) r->attention.add_q_fractional_positions(p);
       },
       kOk, ""},
      {"AttentionFractionalWithStartWithoutCausal", kAttention,
       [](Requests* r) {
         r->attention.set_causal(false);
         r->attention.set_q_start_pos(2);
         for (double p : {0.5, 1.5, 2.5, 3.5}) r->attention.add_q_fractional_positions(p);
       },
       kInvalid, "q_fractional_positions and its start position (2) are both set without causal"},
      {"AttentionFractionalAccepted", kAttention,
       [](Requests* r) {
         r->attention.set_causal(false);
         for (double p : {0.5, 1.5, 2.5, 3.5, 4.5, 5.5}) r->attention.add_k_fractional_positions(p);
       },
       kOk, ""},
      {"AttentionFractionalWrongCount", kAttention,
       [](Requests* r) {
         r->attention.set_causal(false);
         r->attention.add_k_fractional_positions(1);
       },
       kInvalid, "k_fractional_positions has 1 values: must be S (6) or B*S (6) for k.shape"},
      {"AttentionFractionalWithStart", kAttention,
       [](Requests* r) {
         r->attention.set_causal(false);
         r->attention.set_q_start_pos(3);
         for (double p : {0.5, 1.5, 2.5, 3.5}) r->attention.add_q_fractional_positions(p);
       },
       kInvalid, "q_fractional_positions and its start position (3) are both set"},
      {"PositionsGridAccepted", kPositions, [](Requests* r) {}, kOk, ""},
      {"PositionsGridZeroSize", kPositions,
       [](Requests* r) { r->positions.mutable_grids(0)->set_size(1, 0); }, kInvalid,
       "grids[0].size[1] is 0: must be >= 1"},
      {"PositionsGridNoDimensions", kPositions,
       [](Requests* r) { r->positions.mutable_grids(0)->clear_size(); }, kInvalid,
       "grids[0].size has 0 dimensions"},
      {"PositionsGridHuge", kPositions,
       [](Requests* r) {
         r->positions.mutable_grids(0)->set_size(0, kInt64Max);
         r->positions.mutable_grids(0)->set_size(1, kInt64Max);
       },
       kExhausted, "position values: over the server's limit"},
      {"PositionsGridNegativeSize", kPositions,
       [](Requests* r) { r->positions.mutable_grids(0)->set_size(0, kInt64Min); }, kInvalid,
       "grids[0].size[0] is -9223372036854775808"},
      {"PositionsGridNaNStart", kPositions,
       [](Requests* r) {
         r->positions.mutable_grids(0)->add_start(0);
         r->positions.mutable_grids(0)->add_start(kNaN);
       },
       kInvalid, "grids[0].start[1] is nan: must be finite"},
      {"PositionsGridStepCount", kPositions,
       [](Requests* r) { r->positions.mutable_grids(0)->add_step(1); }, kInvalid,
       "grids[0].step has 1 values: must be empty or one per dimension of size (2)"},
      {"PositionsGridOverflowingStep", kPositions,
       [](Requests* r) {
         r->positions.mutable_grids(0)->add_step(1e308);
         r->positions.mutable_grids(0)->add_step(1e308);
         r->positions.mutable_grids(0)->add_start(1e308);
         r->positions.mutable_grids(0)->add_start(1e308);
       },
       kInvalid, "overflows a double"},
      {"PositionsGridBadRopeAxis", kPositions,
       [](Requests* r) {
         r->positions.mutable_grids(0)->add_rope_axis(1);
         r->positions.mutable_grids(0)->add_rope_axis(7);
       },
       kInvalid, "grids[0].rope_axis is [1,7]: must be empty or a permutation of 0 .. 1"},
      {"PositionsNothing", kPositions, [](Requests* r) { r->positions.Clear(); }, kInvalid,
       "no positions to build"},
      {"PositionsBothForms", kPositions, [](Requests* r) { r->positions.add_input_ids(1); },
       kInvalid, "grids and input_ids"},
      {"PositionsQwenAccepted", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 151652, 151655, 151655, 151655, 151655, 2}, {1, 4, 4});
       },
       kOk, ""},
      {"PositionsQwenNoConfig", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.clear_hf_config_json();
       },
       kInvalid, "hf_config_json is empty"},
      {"PositionsQwenNotJson", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.set_hf_config_json("{\"model_type\": ");
       },
       kInvalid, "hf_config_json is not valid JSON"},
      {"PositionsQwenDeepJson", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.set_hf_config_json(std::string(100, '[') + std::string(100, ']'));
       },
       kInvalid, "hf_config_json nests objects and arrays deeper than 64 levels"},
      {"PositionsQwenOtherModel", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.set_hf_config_json(R"({"model_type": "llama"})");
       },
       kInvalid, "hf_config_json: model_type is \"llama\""},
      {"PositionsQwenMoreImagesThanGrids", kPositions,
       [](Requests* r) { SetQwenPositions(r, {151652, 151655, 151652, 151655}, {1, 2, 2}); },
       kInvalid, "input_ids has more images than image_grid_thw's 1 grids"},
      {"PositionsQwenGridTooLarge", kPositions,
       [](Requests* r) { SetQwenPositions(r, {151652, 151655, 3}, {kInt64Max, kInt64Max, 4}); },
       kInvalid, "past the row's 3 tokens"},
      {"PositionsQwenTransformers5Accepted", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 151652, 151655, 151655, 151655, 151655, 2}, {1, 4, 4});
         r->positions.set_rope_index_layout(v1::ROPE_INDEX_LAYOUT_TRANSFORMERS_5);
       },
       kOk, ""},
      {"PositionsQwenUnknownLayout", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.set_rope_index_layout(static_cast<v1::RopeIndexLayout>(7));
       },
       kInvalid, "rope_index_layout is 7: must be 0 (ROPE_INDEX_LAYOUT_DEFAULT)"},
      {"PositionsQwenTransformers5RunMismatch", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {151652, 151655, 151655, 151655, 151653}, {1, 4, 4});
         r->positions.set_rope_index_layout(v1::ROPE_INDEX_LAYOUT_TRANSFORMERS_5);
       },
       kInvalid, "the run of 3 image tokens at token 1 does not match its grid"},
      {"PositionsQwenTransformers5GridTooLarge", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {151652, 151655, 3}, {kInt64Max, kInt64Max, 4});
         r->positions.set_rope_index_layout(v1::ROPE_INDEX_LAYOUT_TRANSFORMERS_5);
       },
       kInvalid, "does not match its grid"},
      {"PositionsQwenMaskValue", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.add_attention_mask(1);
         r->positions.add_attention_mask(-1);
       },
       kInvalid, "attention_mask[1] is -1: must be 0 or 1"},
      {"PositionsQwenNegativeBatch", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.set_batch(-2);
       },
       kInvalid, "batch is -2"},
      {"PositionsQwenSecondsNaN", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.add_video_grid_thw(1);
         r->positions.add_video_grid_thw(2);
         r->positions.add_video_grid_thw(2);
         r->positions.add_second_per_grid_ts(kNaN);
       },
       kInvalid, "second_per_grid_ts[0] is nan"},
      {"PositionsDecodeDeltasCount", kPositions,
       [](Requests* r) {
         SetQwenPositions(r, {1, 2}, {});
         r->positions.add_rope_deltas(1);
         r->positions.add_rope_deltas(2);
       },
       kInvalid, "rope_deltas has 2 values: must be one per batch row (1)"},
      {"RotateBuildGridAccepted", kRotate,
       [](Requests* r) {
         r->rotate.set_start_pos(0);
         r->rotate.mutable_build_positions()->add_grids()->add_size(3);
       },
       kOk, ""},
      {"RotateBuildGridWrongTokens", kRotate,
       [](Requests* r) {
         r->rotate.set_start_pos(0);
         r->rotate.mutable_build_positions()->add_grids()->add_size(4);
       },
       kInvalid, "build_positions built positions has 4 values: must be S (3) or B*S (6)"},
      {"RotateBuildGridPastMaxLen", kRotate,
       [](Requests* r) {
         r->rotate.set_start_pos(0);
         v1::PositionGrid* grid = r->rotate.mutable_build_positions()->add_grids();
         grid->add_size(3);
         grid->add_start(62);
       },
       kOutOfRange, "positions[2] is 64: must be < config.max_len 64"},
      {"RotateBuildGridTooManyForQ", kRotate,
       [](Requests* r) {
         r->rotate.set_start_pos(0);
         r->rotate.mutable_build_positions()->add_grids()->add_size(1 << 20);
       },
       kExhausted, "over the limit on the positions of one call"},
      {"RotateBuildWithStartPos", kRotate,
       [](Requests* r) { r->rotate.mutable_build_positions()->add_grids()->add_size(3); },
       kInvalid, "build_positions is set with start_pos"},
      {"RotateBuildQwenWithoutConfig", kRotate,
       [](Requests* r) {
         r->rotate.set_start_pos(0);
         r->rotate.mutable_build_positions()->add_input_ids(1);
       },
       kInvalid, "hf_config_json is empty"},

      // ---- Byte lengths (q is 2*3*4*8 = 192 float32 = 768 bytes) ----
      {"QDataOneByteShort", kRotate, [](Requests* r) { Q(r)->mutable_data()->pop_back(); },
       kInvalid, "q.data has 767 bytes: shape [2,3,4,8] of float32 needs 768"},
      {"QDataOneByteLong", kRotate, [](Requests* r) { Q(r)->mutable_data()->push_back('x'); },
       kInvalid, "q.data has 769 bytes"},
      {"QDataMissing", kRotate, [](Requests* r) { Q(r)->clear_data(); }, kInvalid,
       "q.data has 0 bytes: shape [2,3,4,8] of float32 needs 768"},
      {"QFloat16DTypeOverFloat32Bytes", kRotate,
       [](Requests* r) {
         Q(r)->set_dtype(v1::FLOAT16);
         K(r)->set_dtype(v1::FLOAT16);
       },
       kInvalid, "q.data has 768 bytes: shape [2,3,4,8] of float16 needs 384"},
      {"KDataHalfLength", kRotate, [](Requests* r) { K(r)->mutable_data()->resize(192); },
       kInvalid, "k.data has 192 bytes: shape [2,3,2,8] of float32 needs 384"},
      {"AttentionVDataShort", kAttention,
       [](Requests* r) { r->attention.mutable_v()->mutable_data()->resize(4); }, kInvalid,
       "v.data has 4 bytes: shape [1,6,2,3] of float32 needs 144"},

      // ---- Shapes ----
      {"QZeroDim", kRotate, [](Requests* r) { Q(r)->set_shape(1, 0); }, kInvalid,
       "q.shape[1] is 0: every dimension must be > 0"},
      {"QNegativeDim", kRotate, [](Requests* r) { Q(r)->set_shape(2, -4); }, kInvalid,
       "q.shape[2] is -4"},
      {"KNegativeDimsWithPositiveProduct", kRotate,
       [](Requests* r) { SetShape(K(r), {-2, -3, 2, 8}); }, kInvalid, "k.shape[0] is -2"},
      {"QInt64MinDim", kRotate, [](Requests* r) { Q(r)->set_shape(0, kInt64Min); }, kInvalid,
       "q.shape[0] is -9223372036854775808"},
      {"QHugeDimOverByteLength", kRotate, [](Requests* r) { Q(r)->set_shape(1, int64_t{1} << 40); },
       kInvalid, "q.data has 768 bytes: shape [2,1099511627776,4,8] of float32 needs"},
      {"QElementCountOverflowsInt64", kRotate,
       [](Requests* r) { SetShape(Q(r), {int64_t{1} << 32, int64_t{1} << 32, 4, 8}); }, kInvalid,
       "q.shape [4294967296,4294967296,4,8]: element count overflows int64"},
      {"QByteCountOverflowsInt64", kRotate,
       [](Requests* r) { SetShape(Q(r), {int64_t{1} << 30, int64_t{1} << 30, 1, 8}); }, kInvalid,
       "element count overflows int64"},
      {"QInt64MaxDims", kRotate, [](Requests* r) { SetShape(Q(r), {kInt64Max, kInt64Max, 4, 8}); },
       kInvalid, "element count overflows int64"},
      {"QRank2", kRotate, [](Requests* r) { SetShape(Q(r), {24, 8}); }, kInvalid,
       "q.shape is [24,8] (rank 2): must be rank 4 [B,S,H,D] or rank 3 [S,H,D]"},
      {"QRank5", kRotate, [](Requests* r) { SetShape(Q(r), {1, 2, 3, 4, 8}); }, kInvalid,
       "q.shape is [1,2,3,4,8] (rank 5)"},
      {"QEmptyShapeWithData", kRotate, [](Requests* r) { Q(r)->clear_shape(); }, kInvalid,
       "q.shape is [] (rank 0)"},
      {"QEmptyTensor", kRotate, [](Requests* r) { *Q(r) = v1::Tensor(); }, kInvalid,
       "q.dtype is DTYPE_UNSPECIFIED (0)"},
      {"KEmptyTensorWithDType", kRotate,
       [](Requests* r) {
         *K(r) = v1::Tensor();
         K(r)->set_dtype(v1::FLOAT32);
       },
       kInvalid, "k.shape is [] (rank 0)"},
      {"KRankDiffersFromQ", kRotate, [](Requests* r) { SetShape(K(r), {6, 2, 8}); }, kInvalid,
       "k.shape [6,2,8] has rank 3: must equal q's rank 4"},
      {"KBatchDiffersFromQ", kRotate, [](Requests* r) { SetShape(K(r), {3, 2, 2, 8}); }, kInvalid,
       "k.shape[0] (batch) is 3: must equal q's batch 2"},
      {"KSequenceDiffersFromQ", kRotate, [](Requests* r) { SetShape(K(r), {2, 6, 1, 8}); },
       kInvalid, "k sequence length is 6: must equal q's 3"},
      {"TensorHeadDimDiffersFromConfig", kRotate,
       [](Requests* r) { RotateConfig(r)->set_head_dim(16); }, kInvalid,
       "q.shape[-1] (head_dim) is 8: must equal config.head_dim 16"},
      {"QMissing", kRotate, [](Requests* r) { r->rotate.clear_q(); }, kInvalid,
       "q is missing: it is required"},
      {"ConfigMissing", kRotate, [](Requests* r) { r->rotate.clear_config(); }, kInvalid,
       "config is missing"},
      {"AttentionKMissing", kAttention, [](Requests* r) { r->attention.clear_k(); }, kInvalid,
       "k is missing"},
      {"GetTableConfigMissing", kTable, [](Requests* r) { r->table.clear_config(); }, kInvalid,
       "config is missing"},

      // ---- Dims in the config ----
      {"OddHeadDim", kRotate,
       [](Requests* r) {
         RotateConfig(r)->set_head_dim(7);
         Q(r)->set_shape(3, 7);
       },
       kInvalid, "config.head_dim is 7: must be even and > 0"},
      {"ZeroHeadDim", kRotate, [](Requests* r) { RotateConfig(r)->set_head_dim(0); }, kInvalid,
       "config.head_dim is 0"},
      {"OddRotaryDim", kRotate, [](Requests* r) { RotateConfig(r)->set_rotary_dim(5); }, kInvalid,
       "config.rotary_dim is 5: must be even and <= head_dim 8"},
      {"RotaryDimAboveHeadDim", kRotate, [](Requests* r) { RotateConfig(r)->set_rotary_dim(10); },
       kInvalid, "config.rotary_dim is 10"},
      {"GetTableHugeOddHeadDim", kTable,
       [](Requests* r) { r->table.mutable_config()->set_head_dim(0xFFFFFFFFu); }, kInvalid,
       "config.head_dim is 4294967295"},
      {"GetTableHugeEvenHeadDim", kTable,
       // 4 rows x 2^31 x 2 values: refused by the head_dim cap, before any allocation.
       [](Requests* r) { r->table.mutable_config()->set_head_dim(0xFFFFFFFEu); }, kInvalid,
       "config.head_dim is 4294967294: at most 8192"},
      {"MaxLenZero", kRotate, [](Requests* r) { RotateConfig(r)->set_max_len(0); }, kInvalid,
       "config.max_len is 0: must be > 0"},
      {"MaxLenOverCap", kTable, [](Requests* r) { r->table.mutable_config()->set_max_len(~0u); },
       kExhausted, "config.max_len is 4294967295: over the server's max_len cap"},
      {"GetTableSliceOverElementLimit", kTable,
       [](Requests* r) {
         // 2^20 rows x 256 x 2 = 2^29 values > the 2^28 default, refused
         // before any table is built.
         *r->table.mutable_config() = MakeConfig(512, 1u << 20);
         r->table.set_count(0);
       },
       kExhausted, "over the max_elements_per_request limit"},

      // ---- Enum values outside the enums (proto3 keeps unknown numbers) ----
      {"QDTypeUnspecified", kRotate, [](Requests* r) { Q(r)->set_dtype(v1::DTYPE_UNSPECIFIED); },
       kInvalid, "q.dtype is DTYPE_UNSPECIFIED (0)"},
      {"QDTypeUnknown", kRotate, [](Requests* r) { Q(r)->set_dtype(static_cast<v1::DType>(42)); },
       kInvalid, "q.dtype is 42: not a rope.v1.DType"},
      {"QDTypeInt32", kRotate, [](Requests* r) { Q(r)->set_dtype(v1::INT32); }, kInvalid,
       "q.dtype is INT32 (4): a reply-only type (top_k_indices)"},
      {"AttentionKDTypeInt32", kAttention,
       [](Requests* r) { r->attention.mutable_k()->set_dtype(v1::INT32); }, kInvalid,
       "k.dtype is INT32 (4): a reply-only type"},
      {"KDTypeNegative", kRotate, [](Requests* r) { K(r)->set_dtype(static_cast<v1::DType>(-1)); },
       kInvalid, "k.dtype is -1"},
      {"AttentionVDTypeUnknown", kAttention,
       [](Requests* r) { r->attention.mutable_v()->set_dtype(static_cast<v1::DType>(99)); },
       kInvalid, "v.dtype is 99"},
      {"KDTypeDiffersFromQ", kRotate,
       [](Requests* r) {
         *K(r) = RandomTensor(DType::kFloat16, {2, 3, 2, 8}, 9);
       },
       kInvalid, "k.dtype is float16: must equal q.dtype float32"},
      {"LayoutUnknown", kRotate,
       [](Requests* r) { RotateConfig(r)->set_layout(static_cast<v1::Layout>(3)); }, kInvalid,
       "config.layout is 3: not a rope.v1.Layout"},
      {"LayoutNegative", kTable,
       [](Requests* r) { r->table.mutable_config()->set_layout(static_cast<v1::Layout>(-7)); },
       kInvalid, "config.layout is -7"},
      {"AnglePrecisionUnknown", kRotate,
       [](Requests* r) {
         RotateConfig(r)->set_angle_precision(static_cast<v1::AnglePrecision>(2));
       },
       kInvalid, "config.angle_precision is 2: not a rope.v1.AnglePrecision"},
      {"AnglePrecisionFloat32WithYarn", kTable,
       [](Requests* r) {
         r->table.mutable_config()->set_angle_precision(v1::ANGLE_FLOAT32);
         r->table.mutable_config()->mutable_yarn()->set_factor(4);
         r->table.mutable_config()->mutable_yarn()->set_original_max_position_embeddings(16);
       },
       kInvalid, "config.angle_precision is ANGLE_FLOAT32 with scaling yarn"},

      // ---- Positions ----
      {"NegativeStartPos", kRotate, [](Requests* r) { r->rotate.set_start_pos(-1); }, kInvalid,
       "start_pos is -1: must be >= 0"},
      {"Int64MinStartPos", kRotate, [](Requests* r) { r->rotate.set_start_pos(kInt64Min); },
       kInvalid, "start_pos is -9223372036854775808"},
      {"StartPosPastTable", kRotate, [](Requests* r) { r->rotate.set_start_pos(62); }, kOutOfRange,
       "start_pos is 62 with sequence length 3: positions start_pos + s must be < config.max_len "
       "64"},
      {"Int64MaxStartPos", kRotate, [](Requests* r) { r->rotate.set_start_pos(kInt64Max); },
       kOutOfRange, "start_pos is 9223372036854775807"},
      {"LastPositionOfTableIsAccepted", kRotate, [](Requests* r) { r->rotate.set_start_pos(61); },
       kOk, ""},
      {"NegativeExplicitPosition", kRotate, [](Requests* r) { SetPositions(r, {0, -1, 2}); },
       kInvalid, "positions[1] is -1: must be >= 0"},
      {"ExplicitPositionAtMaxLen", kRotate, [](Requests* r) { SetPositions(r, {0, 1, 64}); },
       kOutOfRange, "positions[2] is 64: must be < config.max_len 64"},
      // Varint-heavy: each position costs 1 byte on the wire and 8 parsed.
      {"ManyOneBytePositionsOfTheWrongCount", kRotate,
       [](Requests* r) { SetPositions(r, std::vector<int64_t>(1 << 20, 1)); }, kInvalid,
       "positions has 1048576 values: must be S"},
      {"ManyTenBytePositions", kRotate,
       [](Requests* r) { SetPositions(r, std::vector<int64_t>(1 << 16, -1)); }, kInvalid,
       "positions has 65536 values: must be S"},
      {"ExplicitPositionInt64Max", kRotate,
       [](Requests* r) { SetPositions(r, {0, 1, 2, 3, 4, kInt64Max}); }, kOutOfRange,
       "positions[5] is 9223372036854775807"},
      {"PositionsCountNeitherSNorBS", kRotate, [](Requests* r) { SetPositions(r, {0, 1, 2, 3}); },
       kInvalid, "positions has 4 values: must be S (3) or B*S (6)"},
      {"StartPosAndPositionsBothSet", kRotate,
       [](Requests* r) {
         SetPositions(r, {0, 1, 2});
         r->rotate.set_start_pos(5);
       },
       kInvalid, "start_pos and positions are both set (start_pos is 5, positions has 3 values)"},
      {"PositionsWithZeroStartPosAreAccepted", kRotate,
       [](Requests* r) { SetPositions(r, {63, 0, 7}); }, kOk, ""},
      {"AttentionNegativeQStartPos", kAttention,
       [](Requests* r) { r->attention.set_q_start_pos(-3); }, kInvalid,
       "q_start_pos is -3: must be >= 0"},
      {"AttentionKStartPosPastTable", kAttention,
       [](Requests* r) { r->attention.set_k_start_pos(59); }, kOutOfRange,
       "k_start_pos is 59 with sequence length 6"},
      {"GetTableNegativeStart", kTable, [](Requests* r) { r->table.set_start(-1); }, kInvalid,
       "start is -1: must be >= 0"},
      {"GetTableStartAtMaxLen", kTable, [](Requests* r) { r->table.set_start(64); }, kOutOfRange,
       "start is 64: must be < config.max_len 64"},
      {"GetTableNegativeCount", kTable, [](Requests* r) { r->table.set_count(-2); }, kInvalid,
       "count is -2"},
      {"GetTableCountPastTable", kTable,
       [](Requests* r) {
         r->table.set_start(10);
         r->table.set_count(55);
       },
       kOutOfRange, "start 10 + count 55 is past config.max_len 64"},
      {"GetTableInt64MaxCount", kTable, [](Requests* r) { r->table.set_count(kInt64Max); },
       kOutOfRange, "count 9223372036854775807 is past config.max_len 64"},

      // ---- GQA ----
      // (Rotate takes any head counts: only attention groups heads.)
      {"AttentionKHeadsAboveQHeads", kAttention,
       [](Requests* r) {
         *r->attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 6, 8, 8}, 7);
         *r->attention.mutable_v() = RandomTensor(DType::kFloat32, {1, 6, 8, 3}, 8);
       },
       kInvalid, "q heads (4) % k heads (8) != 0"},
      {"AttentionQHeadsNotMultipleOfKHeads", kAttention,
       [](Requests* r) {
         *r->attention.mutable_k() = RandomTensor(DType::kFloat32, {1, 6, 3, 8}, 7);
         *r->attention.mutable_v() = RandomTensor(DType::kFloat32, {1, 6, 3, 3}, 8);
       },
       kInvalid, "q heads (4) % k heads (3) != 0"},
      {"AttentionVHeadsDifferFromK", kAttention,
       [](Requests* r) {
         *r->attention.mutable_v() = RandomTensor(DType::kFloat32, {1, 6, 1, 3}, 8);
       },
       kInvalid, "v heads (1) must equal k heads (2)"},

      // ---- theta: 0 means 10000; otherwise finite and > 1 ----
      {"ThetaZeroMeansDefault", kRotate, [](Requests* r) { RotateConfig(r)->set_theta(0); }, kOk,
       ""},
      {"ThetaNegative", kRotate, [](Requests* r) { RotateConfig(r)->set_theta(-10000); }, kInvalid,
       "config.theta is -10000: must be finite and > 1"},
      {"ThetaNaN", kRotate, [](Requests* r) { RotateConfig(r)->set_theta(kNaN); }, kInvalid,
       "config.theta is nan"},
      {"ThetaInf", kRotate, [](Requests* r) { RotateConfig(r)->set_theta(kInf); }, kInvalid,
       "config.theta is inf"},
      {"ThetaMinusInf", kTable, [](Requests* r) { r->table.mutable_config()->set_theta(-kInf); },
       kInvalid, "config.theta is -inf"},
      {"ThetaOne", kRotate, [](Requests* r) { RotateConfig(r)->set_theta(1); }, kInvalid,
       "config.theta is 1: must be finite and > 1"},
      {"ThetaDenormal", kAttention,
       [](Requests* r) { r->attention.mutable_config()->set_theta(5e-324); }, kInvalid,
       "config.theta is 4.94066e-324"},
      // Finite and > 1: every frequency but the first underflows to 0. Valid,
      // if useless.
      {"Theta1e308IsAccepted", kRotate, [](Requests* r) { RotateConfig(r)->set_theta(1e308); },
       kOk, ""},

      // ---- Scaling parameters ----
      {"LinearFactorZero", kRotate, [](Requests* r) { RotateConfig(r)->mutable_linear(); },
       kInvalid, "config.linear.factor is 0: must be finite and > 0"},
      {"LinearFactorNegative", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_linear()->set_factor(-2); }, kInvalid,
       "config.linear.factor is -2"},
      {"LinearFactorNaN", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_linear()->set_factor(kNaN); }, kInvalid,
       "config.linear.factor is nan"},
      // Finite, in-range parameters whose derived values are not finite.
      {"LinearFactorDenormalGivesInfiniteInvFreq", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_linear()->set_factor(1e-310); }, kInvalid,
       "give inv_freq[0] = inf: not finite"},
      {"LinearFactorDenormalGivesInfiniteInvFreqInTable", kTable,
       [](Requests* r) { r->table.mutable_config()->mutable_linear()->set_factor(1e-310); },
       kInvalid, "give inv_freq[0] = inf: not finite"},
      {"LinearFactorInf", kTable,
       [](Requests* r) { r->table.mutable_config()->mutable_linear()->set_factor(kInf); },
       kInvalid, "config.linear.factor is inf"},
      {"DynamicNtkWithoutOriginalLength", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_dynamic_ntk()->set_factor(2); }, kInvalid,
       "config.dynamic_ntk.original_max_position_embeddings is 0: must be > 0 (required)"},
      {"DynamicNtkRotaryDimTwo", kRotate,
       [](Requests* r) {
         RotateConfig(r)->set_rotary_dim(2);
         RotateConfig(r)->mutable_dynamic_ntk()->set_factor(2);
         RotateConfig(r)->mutable_dynamic_ntk()->set_original_max_position_embeddings(16);
       },
       kInvalid, "config.rotary_dim is 2: dynamic NTK scaling needs rotary_dim >= 4"},
      // transformers accepts beta_fast <= beta_slow (Kimi K2 ships 1 and 1).
      {"YarnBetaFastNotAboveBetaSlowIsAccepted", kRotate,
       [](Requests* r) {
         v1::YarnScaling* yarn = RotateConfig(r)->mutable_yarn();
         yarn->set_factor(4);
         yarn->set_original_max_position_embeddings(16);
         yarn->set_beta_fast(1);
         yarn->set_beta_slow(2);
       },
       kOk, ""},
      {"YarnBetaSlowNegative", kRotate,
       [](Requests* r) {
         v1::YarnScaling* yarn = RotateConfig(r)->mutable_yarn();
         yarn->set_factor(4);
         yarn->set_original_max_position_embeddings(16);
         yarn->set_beta_slow(-1);
       },
       kInvalid, "config.yarn.beta_slow is -1"},

      // ---- The serving engines' variants (RopeConfig 20-29) ----
      {"DynamicNtkAlphaZero", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_dynamic_ntk_alpha(); }, kInvalid,
       "config.dynamic_ntk_alpha.alpha is 0: must be finite and > 0"},
      {"DynamicNtkAlphaIsAccepted", kAttention,
       [](Requests* r) { r->attention.mutable_config()->mutable_dynamic_ntk_alpha()->set_alpha(1000); },
       kOk, ""},
      {"NtkMixedBNaN", kRotate,
       [](Requests* r) {
         RotateConfig(r)->mutable_ntk()->set_factor(4);
         RotateConfig(r)->mutable_ntk()->set_mixed_b(kNaN);
       },
       kInvalid, "config.ntk.mixed_b is nan: must be finite"},
      {"NtkIsAccepted", kTable,
       [](Requests* r) { r->table.mutable_config()->mutable_ntk()->set_factor(4); }, kOk, ""},
      {"DeepseekYarnWithoutOriginal", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_deepseek_yarn()->set_factor(40); }, kInvalid,
       "config.deepseek_yarn.original_max_position_embeddings is 0"},
      {"DeepseekYarnAttnFactorZero", kRotate,
       [](Requests* r) {
         v1::DeepseekYarnScaling* d = RotateConfig(r)->mutable_deepseek_yarn();
         d->set_factor(40);
         d->set_original_max_position_embeddings(16);
         d->set_attn_factor(0);
       },
       kInvalid, "config.deepseek_yarn.attn_factor is 0"},
      {"DeepseekYarnIsAccepted", kRotate,
       [](Requests* r) {
         v1::DeepseekYarnScaling* d = RotateConfig(r)->mutable_deepseek_yarn();
         d->set_factor(40);
         d->set_original_max_position_embeddings(16);
         d->set_mscale(0.707);
       },
       kOk, ""},
      {"RotaryOffsetPastHeadDim", kRotate, [](Requests* r) { RotateConfig(r)->set_rotary_offset(8); },
       kInvalid, "config.rotary_offset is 8: must be < head_dim 8"},
      {"RotaryOffsetWithRotaryDimPastHead", kRotate,
       [](Requests* r) {
         RotateConfig(r)->set_rotary_offset(4);
         RotateConfig(r)->set_rotary_dim(6);
       },
       kInvalid, "config.rotary_dim is 6: must be even and <= head_dim 8 - rotary_offset 4"},
      {"RotaryOffsetHuge", kAttention,
       [](Requests* r) { r->attention.mutable_config()->set_rotary_offset(~0u); }, kInvalid,
       "config.rotary_offset is 4294967295"},
      {"RotaryOffsetIsAccepted", kRotate, [](Requests* r) { RotateConfig(r)->set_rotary_offset(4); },
       kOk, ""},
      {"HfLayerIndexWithoutJson", kRotate,
       [](Requests* r) { RotateConfig(r)->set_hf_layer_index(3); }, kInvalid,
       "config.hf_layer_index is 3 but config.hf_config_json is empty"},
      {"HfLayerIndexPastTheLayers", kRotate,
       [](Requests* r) {
         SetJson(r, R"({"rope_theta": 10000, "head_dim": 8, "num_hidden_layers": 4})");
         RotateConfig(r)->set_hf_layer_index(4);
       },
       kInvalid, "hf_layer_index is 4: hf_config_json has 4 decoder layers"},
      {"HfLayerIndexOfANoPeLayerIsAccepted", kAttention,
       [](Requests* r) {
         r->attention.mutable_config()->set_hf_config_json(
             R"({"model_type": "llama4_text", "rope_theta": 500000, "head_dim": 8,
                 "no_rope_layers": [1, 0], "floor_scale": 2, "attn_scale": 0.5})");
         r->attention.mutable_config()->set_hf_layer_index(1);
       },
       kOk, ""},
      {"NoRopeFloorScaleNegative", kAttention,
       [](Requests* r) { r->attention.mutable_config()->mutable_no_rope()->set_floor_scale(-1); },
       kInvalid, "config.no_rope.floor_scale is -1"},
      {"NoRopeAttnScaleNaN", kAttention,
       [](Requests* r) {
         r->attention.mutable_config()->mutable_no_rope()->set_floor_scale(8192);
         r->attention.mutable_config()->mutable_no_rope()->set_attn_scale(kNaN);
       },
       kInvalid, "config.no_rope.attn_scale is nan"},
      {"NoRopeWithJson", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith("null"));
         RotateConfig(r)->mutable_no_rope();
       },
       kInvalid, "config.no_rope is set: must be unset"},
      {"NoRopeTableIsRefused", kTable, [](Requests* r) { r->table.mutable_config()->mutable_no_rope(); },
       kInvalid, "config.no_rope is set (a layer without rotary embedding): it has no cos/sin table"},
      {"ErnieWithoutMrope", kRotate, [](Requests* r) { RotateConfig(r)->set_mrope_ernie_3d(true); },
       kInvalid, "config.mrope_ernie_3d is true without config.mrope"},
      {"ErnieUnequalHAndW", kRotate,
       [](Requests* r) {
         SetMrope(r, {2, 2, 0}, false);
         RotateConfig(r)->set_mrope_ernie_3d(true);
       },
       kInvalid, "the h and w sections must be equal"},
      {"HfJsonYarnWithoutFactor", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith(R"({"rope_type": "yarn", "original_max_position_embeddings": 16})"));
       },
       kInvalid, "hf_config_json: rope_scaling.factor is missing: rope_type yarn needs it"},
      {"HfJsonRefusedKey", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": 10000, "head_dim": 8, "rope_ratio": 2})"); },
       kInvalid, "hf_config_json: rope_ratio is 2: changes RoPE"},

      // ---- Float8 outputs (RotateRequest 20-22) ----
      {"OutputDTypeUnknown", kRotate, [](Requests* r) { r->rotate.set_output_dtype(v1::DType(9)); },
       kInvalid, "output_dtype is 9: not a rope.v1.DType"},
      {"OutputDTypeOtherStorageType", kRotate,
       [](Requests* r) { r->rotate.set_output_dtype(v1::BFLOAT16); }, kInvalid,
       "output_dtype is bfloat16: must be q's dtype float32 (in place) or FLOAT8_E4M3FN"},
      {"OutputDTypeFloat8IsAccepted", kRotate,
       [](Requests* r) { r->rotate.set_output_dtype(v1::FLOAT8_E5M2); }, kOk, ""},
      {"OutputScaleNaN", kRotate,
       [](Requests* r) {
         r->rotate.set_output_dtype(v1::FLOAT8_E4M3FN);
         r->rotate.set_output_scale(kNaN);
       },
       kInvalid, "output_scale is nan: must be finite as float32 and > 0"},
      {"KOutputScaleNegative", kRotate,
       [](Requests* r) {
         r->rotate.set_output_dtype(v1::FLOAT8_E4M3FN);
         r->rotate.set_k_output_scale(-2);
       },
       kInvalid, "k_output_scale is -2"},
      {"OutputScaleWithoutFloat8", kRotate, [](Requests* r) { r->rotate.set_output_scale(2); },
       kInvalid, "output_scale is 2: only a float8 output_dtype takes a scale"},
      {"Float8OutputIntoSharedMemory", kRotate,
       [](Requests* r) {
         r->rotate.set_output_dtype(v1::FLOAT8_E4M3FN);
         r->rotate.mutable_q_out()->set_region("nowhere");
       },
       kInvalid, "output_dtype is FLOAT8_E4M3FN with q_out: float8 outputs go into the reply's "
                 "bytes, not into shared memory"},
      {"QDTypeFloat8", kRotate,
       [](Requests* r) {
         Q(r)->set_dtype(v1::FLOAT8_E4M3FN);
         K(r)->set_dtype(v1::FLOAT8_E4M3FN);
       },
       kInvalid, "q.dtype is float8_e4m3fn: float8 is an output type only"},
      {"AttentionQDTypeFloat8", kAttention,
       [](Requests* r) { r->attention.mutable_q()->set_dtype(v1::FLOAT8_E5M2); }, kInvalid,
       "q.dtype is float8_e5m2: float8 is an output type only"},
      {"KHeadsNotDividingQHeadsRotate", kRotate,
       [](Requests* r) {
         // k [2,3,3,8]: 3 key heads for 4 query heads; rotation pairs none.
         K(r)->mutable_data()->resize(2 * 3 * 3 * 8 * 4, '\0');
         SetShape(K(r), {2, 3, 3, 8});
       },
       kOk, ""},
      {"YarnMscaleNaN", kAttention,
       [](Requests* r) {
         v1::YarnScaling* yarn = r->attention.mutable_config()->mutable_yarn();
         yarn->set_factor(4);
         yarn->set_original_max_position_embeddings(16);
         yarn->set_mscale(kNaN);
       },
       kInvalid, "config.yarn.mscale is nan: must be finite"},
      {"Llama3LowFactorAboveHigh", kRotate,
       [](Requests* r) {
         RotateConfig(r)->mutable_llama3()->set_low_freq_factor(5);
         RotateConfig(r)->mutable_llama3()->set_high_freq_factor(4);
       },
       kInvalid, "config.llama3.low_freq_factor is 5: must be <= high_freq_factor 4"},
      {"Llama3EqualBandFactorsAreAccepted", kRotate,
       [](Requests* r) {
         RotateConfig(r)->mutable_llama3()->set_factor(16);
         RotateConfig(r)->mutable_llama3()->set_low_freq_factor(1);
         RotateConfig(r)->mutable_llama3()->set_high_freq_factor(1);
       },
       kOk, ""},
      {"YarnTruncateFalseIsAccepted", kRotate,
       [](Requests* r) {
         v1::YarnScaling* yarn = RotateConfig(r)->mutable_yarn();
         yarn->set_factor(32);
         yarn->set_original_max_position_embeddings(16);
         yarn->set_truncate(false);
       },
       kOk, ""},
      {"LongRopeMaxPositionEmbeddingsIsAccepted", kTable,
       [](Requests* r) {
         v1::LongRopeScaling* longrope = r->table.mutable_config()->mutable_longrope();
         longrope->set_original_max_position_embeddings(16);
         longrope->set_max_position_embeddings(64);
         for (int i = 0; i < 4; ++i) longrope->add_short_factor(1);
         for (int i = 0; i < 4; ++i) longrope->add_long_factor(2 + i);
       },
       kOk, ""},
      {"YarnMscalesGiveANegativeAttentionFactor", kRotate,
       [](Requests* r) {
         v1::YarnScaling* yarn = RotateConfig(r)->mutable_yarn();
         yarn->set_factor(4);
         yarn->set_original_max_position_embeddings(16);
         yarn->set_mscale(-100);
         yarn->set_mscale_all_dim(1);
       },
       kInvalid,
       "config.yarn.mscale is -100 and mscale_all_dim 1: the attention factor they give "
       "(-11.2969) must be finite and > 0"},
      {"Llama3NegativeFactor", kTable,
       [](Requests* r) { r->table.mutable_config()->mutable_llama3()->set_factor(-8); }, kInvalid,
       "config.llama3.factor is -8"},
      {"LongRopeWrongFactorCount", kRotate,
       [](Requests* r) {
         v1::LongRopeScaling* longrope = RotateConfig(r)->mutable_longrope();
         longrope->set_original_max_position_embeddings(16);
         for (int i = 0; i < 3; ++i) longrope->add_short_factor(1);
       },
       kInvalid, "config.longrope.short_factor has 3 values: must have rotary_dim/2 = 4"},
      {"LongRopeNonPositiveFactor", kRotate,
       [](Requests* r) {
         v1::LongRopeScaling* longrope = RotateConfig(r)->mutable_longrope();
         longrope->set_original_max_position_embeddings(16);
         for (double f : {1.0, 1.0, 0.0, 1.0}) longrope->add_short_factor(f);
         for (double f : {1.0, 1.0, 1.0, kInf}) longrope->add_long_factor(f);
       },
       kInvalid, "config.longrope.short_factor[2] is 0: must be finite and > 0"},

      {"ProportionalIsAccepted", kRotate,
       [](Requests* r) {
         RotateConfig(r)->mutable_proportional()->set_rotated_pairs(2);
         RotateConfig(r)->mutable_proportional()->set_factor(8);
       },
       kOk, ""},
      {"ProportionalRotatedPairsMissing", kRotate,
       [](Requests* r) { RotateConfig(r)->mutable_proportional()->set_factor(2); }, kInvalid,
       "config.proportional.rotated_pairs is 0: must be in 1 .. rotary_dim/2 = 4"},
      {"ProportionalRotatedPairsOverHalf", kTable,
       [](Requests* r) { r->table.mutable_config()->mutable_proportional()->set_rotated_pairs(5); },
       kInvalid, "config.proportional.rotated_pairs is 5: must be in 1 .. rotary_dim/2 = 4"},
      {"ProportionalNaNFactor", kRotate,
       [](Requests* r) {
         RotateConfig(r)->mutable_proportional()->set_rotated_pairs(1);
         RotateConfig(r)->mutable_proportional()->set_factor(kNaN);
       },
       kInvalid, "config.proportional.factor is nan"},

      // ---- hf_config_json: a model's config.json ----
      {"HfJsonIsAccepted", kRotate, [](Requests* r) { SetJson(r, JsonWith("null")); }, kOk, ""},
      {"HfJsonOnGetTable", kTable,
       [](Requests* r) {
         r->table.mutable_config()->set_hf_config_json(R"({"rope_theta": 10000, "head_dim": 8})");
       },
       kOk, ""},
      {"HfJsonTruncated", kRotate, [](Requests* r) { SetJson(r, R"({"rope_theta": 1)"); },
       kInvalid, "hf_config_json is not valid JSON"},
      {"HfJsonEmptyObjectHasNoTheta", kRotate, [](Requests* r) { SetJson(r, "{}"); }, kInvalid,
       "hf_config_json: rope_theta is missing"},
      {"HfJsonNotAnObject", kRotate, [](Requests* r) { SetJson(r, R"(["rope_theta", 1])"); },
       kInvalid, "must be a JSON object"},
      {"HfJsonNaN", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": NaN, "head_dim": 8})"); }, kInvalid,
       "hf_config_json is not valid JSON"},
      {"HfJsonInfinity", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": Infinity, "head_dim": 8})"); }, kInvalid,
       "hf_config_json is not valid JSON"},
      {"HfJsonNumberOverflow", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": 1e400, "head_dim": 8})"); }, kInvalid,
       "number overflow"},
      {"HfJsonHugeInteger", kRotate,
       [](Requests* r) {
         SetJson(r, R"({"rope_theta": 10000, "head_dim": 123456789012345678901234567890})");
       },
       kInvalid, "hf_config_json: head_dim is 1.2345678901234568e+29"},
      {"HfJsonNegativeHeadDim", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": 10000, "head_dim": -8})"); }, kInvalid,
       "hf_config_json: head_dim is -8: must be a whole number in [1, 4294967295]"},
      {"HfJsonThetaOne", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": 1, "head_dim": 8})"); }, kInvalid,
       "hf_config_json: rope_theta is 1: must be > 1"},
      {"HfJsonDeepNesting", kRotate,
       [](Requests* r) {
         SetJson(r, R"({"rope_theta": 10000, "head_dim": 8, "x": )" + std::string(200000, '[') +
                        std::string(200000, ']') + "}");
       },
       kInvalid, "nests objects and arrays deeper than 64 levels"},
      {"HfJsonUnclosedDeepNesting", kRotate,
       [](Requests* r) { SetJson(r, std::string(1 << 20, '{')); }, kInvalid,
       "hf_config_json is not valid JSON"},
      {"HfJsonFactorAsString", kRotate,
       [](Requests* r) { SetJson(r, JsonWith(R"({"rope_type": "linear", "factor": "4"})")); },
       kInvalid, "hf_config_json: rope_scaling.factor is \"4\": must be a number (it is string)"},
      {"HfJsonFactorAsBoolean", kRotate,
       [](Requests* r) { SetJson(r, JsonWith(R"({"rope_type": "linear", "factor": true})")); },
       kInvalid, "rope_scaling.factor is true: must be a number (it is a boolean)"},
      {"HfJsonFactorNegative", kRotate,
       [](Requests* r) { SetJson(r, JsonWith(R"({"rope_type": "linear", "factor": -4})")); },
       kInvalid, "hf_config_json: rope_scaling.factor is -4: must be > 0"},
      {"HfJsonRopeScalingAsList", kRotate, [](Requests* r) { SetJson(r, JsonWith("[8]")); },
       kInvalid, "hf_config_json: rope_scaling is [8]: must be an object (it is array)"},
      {"HfJsonUnknownRopeType", kRotate,
       [](Requests* r) { SetJson(r, JsonWith(R"({"rope_type": "ntk-by-parts", "factor": 4})")); },
       kInvalid, "hf_config_json: rope_scaling.rope_type is \"ntk-by-parts\": not supported"},
      {"HfJsonMissingYarnOriginal", kRotate,
       [](Requests* r) {
         SetJson(r, R"({"rope_theta": 10000, "head_dim": 8,
                        "rope_scaling": {"rope_type": "yarn", "factor": 4}})");
       },
       kInvalid, "hf_config_json: rope_scaling.original_max_position_embeddings is missing"},
      {"HfJsonTruncateAsString", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith(R"({"rope_type": "yarn", "factor": 4, "truncate": "false"})"));
       },
       kInvalid, "rope_scaling.truncate is \"false\": must be true or false (it is string)"},
      {"HfJsonOneMiBRopeType", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith(R"({"rope_type": ")" + std::string(1 << 20, 'y') + "\"}"));
       },
       kInvalid, "(1048576 bytes)\": not supported"},
      {"HfJsonOneMiBUnreadKey", kRotate,
       [](Requests* r) {
         SetJson(r, R"({"rope_theta": 10000, "head_dim": 8, "description": ")" +
                        std::string(1 << 20, 'z') + "\"}");
       },
       kOk, ""},
      {"HfJsonMropeSectionWrongSum", kRotate,
       [](Requests* r) { SetJson(r, JsonWith(R"({"type": "mrope", "mrope_section": [1, 1, 1]})")); },
       kInvalid, "hf_config_json gives an unusable config: config.mrope.section is [1,1,1] (sum 3)"},
      {"HfJsonWithTheta", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith("null"));
         RotateConfig(r)->set_theta(500000);
       },
       kInvalid, "config.theta is 500000: must be unset (0) when config.hf_config_json is set"},
      {"HfJsonWithScaling", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith("null"));
         RotateConfig(r)->mutable_linear()->set_factor(2);
       },
       kInvalid, "config.linear is set: the scaling must be unset"},
      {"HfJsonHeadDimDiffersFromRequest", kRotate,
       [](Requests* r) { SetJson(r, R"({"rope_theta": 10000, "head_dim": 16})"); }, kInvalid,
       "config.head_dim is 8 but hf_config_json gives head_dim 16"},
      {"HfJsonOverSizeLimit", kRotate,
       [](Requests* r) { SetJson(r, JsonWith("null") + std::string(5 << 20, ' ')); }, kExhausted,
       "bytes: over the server's limit of 4194304 bytes"},
      {"HfLayerTypeWithoutJson", kRotate,
       [](Requests* r) { RotateConfig(r)->set_hf_layer_type("sliding_attention"); }, kInvalid,
       "config.hf_layer_type is set but config.hf_config_json is empty"},
      {"HfLayerTypeUnknown", kRotate,
       [](Requests* r) {
         SetJson(r, JsonWith("null"));
         RotateConfig(r)->set_hf_layer_type("cross_attention");
       },
       kInvalid, "hf_layer_type is 'cross_attention': must be full_attention or sliding_attention"},

      // ---- M-RoPE (rotate: B 2, S 3, head_dim 8 -> sections sum to 4) ----
      {"MropeEqualRowsAreAccepted", kRotate,
       [](Requests* r) {
         SetMrope(r, {2, 1, 1}, false);
         SetPositions(r, {1, 2, 3, 1, 2, 3, 1, 2, 3});
       },
       kOk, ""},
      {"MropeSectionWrongSum", kRotate, [](Requests* r) { SetMrope(r, {2, 2, 2}, true); },
       kInvalid, "config.mrope.section is [2,2,2] (sum 6): must sum to rotary_dim/2 = 4"},
      {"MropeTwoSections", kRotate, [](Requests* r) { SetMrope(r, {2, 2}, false); }, kInvalid,
       "config.mrope.section is [2,2] (2 values): must have 3"},
      {"MropeWithoutSections", kTable,
       [](Requests* r) { r->table.mutable_config()->mutable_mrope()->set_interleaved(true); },
       kInvalid, "config.mrope is set with no section"},
      {"MropePositionsNotThreeRows", kRotate,
       [](Requests* r) {
         SetMrope(r, {2, 1, 1}, false);
         SetPositions(r, {1, 2, 3});
       },
       kInvalid, "positions has 3 values: with config.mrope it must be 3*S (9) or 3*B*S (18)"},
      {"MropeImagePositionPastTable", kRotate,
       [](Requests* r) {
         SetMrope(r, {2, 1, 1}, true);
         std::vector<int64_t> positions(18, 4);
         positions[14] = 64;  // axis w, b 0, s 2
         SetPositions(r, positions);
       },
       kOutOfRange, "positions[14] (axis w, b 0, s 2) is 64: must be < config.max_len 64"},
      {"MropeNegativePosition", kRotate,
       [](Requests* r) {
         SetMrope(r, {2, 1, 1}, true);
         std::vector<int64_t> positions(9, 4);
         positions[4] = kInt64Min;  // axis h, s 1
         SetPositions(r, positions);
       },
       kInvalid, "positions[4] (axis h, s 1) is -9223372036854775808: must be >= 0"},

      // ---- Attention scale: 0 means 1/sqrt(D); float32 is what the backends use ----
      {"AttentionScaleNegative", kAttention, [](Requests* r) { r->attention.set_scale(-0.5); },
       kInvalid, "scale is -0.5"},
      {"AttentionScaleNaN", kAttention, [](Requests* r) { r->attention.set_scale(kNaN); },
       kInvalid, "scale is nan"},
      {"AttentionScaleOverFloat32", kAttention, [](Requests* r) { r->attention.set_scale(1e39); },
       kInvalid, "must be finite as float32"},

      // ---- Attention results, masks and transforms (Sq 4, Hq 4, Sk 6) ----
      {"AttentionResultUnknown", kAttention,
       [](Requests* r) {
         r->attention.add_results(v1::OUTPUT);
         r->attention.add_results(static_cast<v1::AttentionResult>(99));
       },
       kInvalid, "results[1] is 99: must be SCORES, OUTPUT, LSE, TOP_K, KEY_MASS or SCORE_ROWS"},
      {"AttentionResultUnspecified", kAttention,
       [](Requests* r) { r->attention.add_results(v1::ATTENTION_RESULT_UNSPECIFIED); }, kInvalid,
       "results[0] is 0"},
      {"AttentionResultTwice", kAttention,
       [](Requests* r) {
         r->attention.add_results(v1::LSE);
         r->attention.add_results(v1::LSE);
       },
       kInvalid, "listed more than once"},
      {"AttentionOutputWithoutV", kAttention,
       [](Requests* r) {
         r->attention.clear_v();
         r->attention.add_results(v1::OUTPUT);
       },
       kInvalid, "results asks for OUTPUT but v is absent"},
      {"AttentionNegativeWindowLeft", kAttention,
       [](Requests* r) { r->attention.set_window_left(-1); }, kInvalid,
       "window_left is -1: must be >= 0"},
      {"AttentionInt64MinWindowRight", kAttention,
       [](Requests* r) { r->attention.set_window_right(kInt64Min); }, kInvalid,
       "window_right is -9223372036854775808: must be >= 0"},
      {"AttentionNegativeChunkSize", kAttention,
       [](Requests* r) { r->attention.set_chunk_size(-4); }, kInvalid,
       "chunk_size is -4: must be >= 0"},
      {"AttentionSoftcapNaN", kAttention, [](Requests* r) { r->attention.set_softcap(kNaN); },
       kInvalid, "softcap is nan"},
      {"AttentionSoftcapInfinite", kAttention,
       [](Requests* r) { r->attention.set_softcap(std::numeric_limits<double>::infinity()); },
       kInvalid, "softcap is inf"},
      {"AttentionSoftcapNegative", kAttention, [](Requests* r) { r->attention.set_softcap(-30); },
       kInvalid, "softcap is -30"},
      {"AttentionSinksWrongLength", kAttention,
       [](Requests* r) {
         for (int h = 0; h < 3; ++h) r->attention.add_sinks(0.5f);
       },
       kInvalid, "sinks has 3 values: must be empty or one per query head (Hq = 4)"},
      {"AttentionSinkNaN", kAttention,
       [](Requests* r) {
         for (int h = 0; h < 4; ++h) r->attention.add_sinks(h == 2 ? std::nanf("") : 0.5f);
       },
       kInvalid, "sinks[2] is nan: must be finite"},
      {"AttentionAlibiSlopesWrongLength", kAttention,
       [](Requests* r) { r->attention.add_alibi_slopes(0.25f); }, kInvalid,
       "alibi_slopes has 1 values: must be empty or one per query head (Hq = 4)"},
      {"AttentionTopKOverSk", kAttention,
       [](Requests* r) {
         r->attention.add_results(v1::TOP_K);
         r->attention.set_top_k(7);
       },
       kInvalid, "top_k is 7: must be in [1, Sk] (Sk = 6 keys)"},
      {"AttentionTopKZeroWithTopK", kAttention,
       [](Requests* r) { r->attention.add_results(v1::TOP_K); }, kInvalid,
       "top_k is 0: results asks for TOP_K"},
      {"AttentionScoreRowsStartPastSq", kAttention,
       [](Requests* r) {
         r->attention.add_results(v1::SCORE_ROWS);
         r->attention.set_score_rows_start(4);
       },
       kInvalid, "score_rows_start is 4: must be in [0, Sq) (Sq = 4)"},
      {"AttentionScoreRowsCountPastSq", kAttention,
       [](Requests* r) {
         r->attention.add_results(v1::SCORE_ROWS);
         r->attention.set_score_rows_start(2);
         r->attention.set_score_rows_count(3);
       },
       kInvalid, "score_rows_count is 3: rows [2, 2 + 3) must lie within Sq = 4"},
      {"AttentionQPositionsWrongCount", kAttention,
       [](Requests* r) {
         for (int i = 0; i < 3; ++i) r->attention.add_q_positions(i);
       },
       kInvalid, "q_positions has 3 values"},
      {"AttentionKPositionsNegative", kAttention,
       [](Requests* r) {
         for (int j = 0; j < 6; ++j) r->attention.add_k_positions(j == 5 ? -1 : j);
       },
       kInvalid, "k_positions[5] is -1"},
      {"AttentionQPositionsAndStartPos", kAttention,
       [](Requests* r) {
         r->attention.set_q_start_pos(2);
         for (int i = 0; i < 4; ++i) r->attention.add_q_positions(i);
       },
       kInvalid, "q_start_pos and q_positions are both set"},
      {"AttentionLseOutWithoutLse", kAttention,
       [](Requests* r) {
         r->attention.mutable_lse_out()->set_region("nowhere");
         r->attention.mutable_lse_out()->set_byte_size(64);
       },
       kInvalid, "lse_out is set but results does not ask for LSE"},
      {"AttentionKeyMassOutUnregistered", kAttention,
       [](Requests* r) {
         r->attention.add_results(v1::KEY_MASS);
         r->attention.mutable_key_mass_out()->set_region("nowhere");
         r->attention.mutable_key_mass_out()->set_byte_size(96);
       },
       StatusCode::NOT_FOUND, "key_mass_out.region \"nowhere\" is not registered"},

      // ---- Shared-memory references (no region is registered here) ----
      {"QShmUnregisteredRegion", kRotate,
       [](Requests* r) {
         Q(r)->clear_data();
         Q(r)->mutable_shm()->set_region("nowhere");
         Q(r)->mutable_shm()->set_byte_size(768);
       },
       StatusCode::NOT_FOUND, "q.shm.region \"nowhere\" is not registered by this client"},
      {"QShmAndDataBothSet", kRotate,
       [](Requests* r) { Q(r)->mutable_shm()->set_region("nowhere"); }, kInvalid,
       "q has both data (768 bytes) and shm"},
      {"KShmOverflowingOffset", kRotate,
       [](Requests* r) {
         K(r)->clear_data();
         K(r)->mutable_shm()->set_region("nowhere");
         K(r)->mutable_shm()->set_offset(~uint64_t{0});
         K(r)->mutable_shm()->set_byte_size(~uint64_t{0});
       },
       StatusCode::NOT_FOUND, "k.shm.region \"nowhere\""},
      {"QOutUnregisteredRegion", kRotate,
       [](Requests* r) {
         r->rotate.mutable_q_out()->set_region("nowhere");
         r->rotate.mutable_q_out()->set_byte_size(768);
       },
       StatusCode::NOT_FOUND, "q_out.region \"nowhere\""},
      {"QOutByteSizeDiffers", kRotate,
       [](Requests* r) { r->rotate.mutable_q_out()->set_region("nowhere"); }, kInvalid,
       "q_out.byte_size is 0: q is 768 bytes"},
      {"KOutWithoutK", kRotate,
       [](Requests* r) {
         r->rotate.clear_k();
         r->rotate.mutable_k_out()->set_region("nowhere");
       },
       kInvalid, "k_out is set but k is missing"},
      {"AttentionScoresOutUnregistered", kAttention,
       [](Requests* r) { r->attention.mutable_scores_out()->set_region("nowhere"); },
       StatusCode::NOT_FOUND, "scores_out.region \"nowhere\""},
      {"AttentionOutputOutWithoutV", kAttention,
       [](Requests* r) {
         r->attention.clear_v();
         r->attention.mutable_output_out()->set_region("nowhere");
       },
       kInvalid, "output_out is set but v is missing"},
      {"AttentionVShmAndData", kAttention,
       [](Requests* r) { r->attention.mutable_v()->mutable_shm()->set_region("x"); }, kInvalid,
       "v has both data"},
      // RegisterSharedMemory, host regions and CUDA IPC handles (this server's
      // backend is the CPU's: a well-formed CUDA region is refused for it).
      {"RegionZeroByteSize", kRegister, [](Requests* r) { r->region.set_byte_size(0); }, kInvalid,
       "byte_size is 0 (region \"corpus\")"},
      {"RegionPastTheObjectsEnd", kRegister, [](Requests* r) { r->region.set_offset(8); },
       kInvalid, "offset 8 + byte_size 4096 is past the end"},
      {"RegionOverflowingOffset", kRegister,
       [](Requests* r) { r->region.set_offset(~uint64_t{0}); }, kInvalid, "overflows"},
      // Charged by pages: under 4 GiB of bytes, over 4 GiB of pages.
      {"RegionPagesOverThePerClientBound", kRegister,
       [](Requests* r) {
         r->region.set_offset(4095);
         r->region.set_byte_size((uint64_t{4} << 30) - 4094);
       },
       StatusCode::RESOURCE_EXHAUSTED,
       "byte_size 4294963202 of region \"corpus\" (4294971392 bytes of pages) is over the "
       "server's --shm_max_mapped_bytes_per_client 4294967296"},
      {"RegionBadName", kRegister, [](Requests* r) { r->region.set_name("a/b"); }, kInvalid,
       "name is \"a/b\""},
      {"RegionRelativeKey", kRegister, [](Requests* r) { r->region.set_key("relative"); },
       kInvalid, "key is \"relative\""},
      {"RegionFileKeyWithoutAllowedDir", kRegister,
       [](Requests* r) { r->region.set_key("/etc/passwd"); }, StatusCode::PERMISSION_DENIED,
       "the server allows none (--shm_allowed_dir unset)"},
      {"CudaRegionOnTheCpuBackend", kRegister,
       [](Requests* r) {
         r->region.clear_key();
         r->region.set_cuda_ipc_handle(std::string(64, 'h'));
       },
       StatusCode::FAILED_PRECONDITION, "cuda_ipc_handle: this server's backend is cpu"},
      {"CudaHandleOf63Bytes", kRegister,
       [](Requests* r) {
         r->region.clear_key();
         r->region.set_cuda_ipc_handle(std::string(63, 'h'));
       },
       kInvalid, "cuda_ipc_handle is 63 bytes: a cudaIpcMemHandle_t is 64"},
      {"CudaHandleAndKey", kRegister,
       [](Requests* r) { r->region.set_cuda_ipc_handle(std::string(64, 'h')); }, kInvalid,
       "and cuda_ipc_handle is set: a region is a shared-memory object or CUDA memory"},
      {"CudaHandleAndOffset", kRegister,
       [](Requests* r) {
         r->region.clear_key();
         r->region.set_offset(256);
         r->region.set_cuda_ipc_handle(std::string(64, 'h'));
       },
       kInvalid, "offset is 256 and cuda_ipc_handle is set"},
      {"CudaNegativeDevice", kRegister,
       [](Requests* r) {
         r->region.clear_key();
         r->region.set_cuda_device(-1);
         r->region.set_cuda_ipc_handle(std::string(64, 'h'));
       },
       kInvalid, "cuda_device is -1: must be >= 0"},
      {"CudaDeviceWithoutHandle", kRegister, [](Requests* r) { r->region.set_cuda_device(2); },
       kInvalid, "cuda_device is 2 but cuda_ipc_handle is empty"},
  };
}

class MalformedRequestTest : public ServiceTest,
                             public ::testing::WithParamInterface<MalformedCase> {
 protected:
  // A valid rotate on the same config as the corpus (head_dim 8, max_len 64,
  // so its table is the one the bad requests would have touched), compared
  // with the double-precision reference.
  void ExpectServesAValidRotate() {
    constexpr int64_t kBatch = 1, kSeq = 4, kHeads = 2, kDim = 8, kStart = 50;
    std::mt19937 rng(77);
    const std::vector<double> q = RandomValues(DType::kFloat32, kBatch * kSeq * kHeads * kDim, &rng);
    v1::RotateRequest request;
    *request.mutable_config() = MakeConfig(kDim, 64);
    *request.mutable_q() = ToProto(Encode(DType::kFloat32, {kBatch, kSeq, kHeads, kDim}, q));
    request.set_start_pos(kStart);
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response), StatusCode::OK, ""))
        << "the server stopped answering valid requests";

    reference::Rope rope;
    rope.head_dim = kDim;
    rope.rotary_dim = kDim;
    std::vector<int64_t> positions;
    for (int64_t s = 0; s < kSeq; ++s) positions.push_back(kStart + s);
    std::vector<double> want = q;
    reference::RotateTensor(rope, kBatch, kSeq, kHeads, positions, /*inverse=*/false, &want);
    const std::vector<double> got = Decode(FromProto(response.q()));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 4e-6 * (1 + std::abs(want[i]))) << "element " << i;
    }
  }
};

TEST_P(MalformedRequestTest, GetsItsStatusAndTheServerKeepsServing) {
  const MalformedCase& c = GetParam();
  Requests requests = ValidRequests();
  ASSERT_TRUE(GrpcStatusIs(Call(stub_.get(), c.rpc, requests), StatusCode::OK, ""))
      << "the unmutated request must be valid";
  c.mutate(&requests);
  EXPECT_TRUE(GrpcStatusIs(Call(stub_.get(), c.rpc, requests), c.code, c.message));
  ExpectServesAValidRotate();
  // The same bad request again (now with a warm table cache) gets the same answer.
  EXPECT_TRUE(GrpcStatusIs(Call(stub_.get(), c.rpc, requests), c.code, c.message));
  ExpectServesAValidRotate();
}

INSTANTIATE_TEST_SUITE_P(Corpus, MalformedRequestTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<MalformedCase>& info) {
                           return info.param.name;
                         });

// ---- Non-finite tensor data -------------------------------------------------------
// Documented choice (rope.proto, Tensor.data): the server does not scan tensor
// data for NaN/Inf (a scan is a second pass over every byte on the hot path);
// it computes with them as IEEE-754 does, like torch or flashinfer would, and
// answers OK. Only the outputs that depend on a non-finite input change.

float FloatAt(const std::string& bytes, size_t i) {
  float f;
  std::memcpy(&f, bytes.data() + i * sizeof(float), sizeof(f));
  return f;
}

void SetFloatAt(std::string* bytes, size_t i, float value) {
  std::memcpy(bytes->data() + i * sizeof(float), &value, sizeof(value));
}

class NonFiniteDataTest : public ServiceTest, public ::testing::WithParamInterface<float> {};

TEST_P(NonFiniteDataTest, RotateAcceptsItAndOnlyItsPairChanges) {
  // q [1, 2, 1, 8] interleaved at positions 3, 4: element 10 is feature 2 of
  // token 1, in the pair (10, 11).
  constexpr size_t kPoisoned = 10;
  const v1::RotateRequest clean = MakeRotateRequest(1, 2, 1, 8, 64, /*start_pos=*/3);
  v1::RotateRequest poisoned = clean;
  SetFloatAt(poisoned.mutable_q()->mutable_data(), kPoisoned, GetParam());
  v1::RotateRequest zeroed = clean;
  SetFloatAt(zeroed.mutable_q()->mutable_data(), kPoisoned, 0.0f);

  v1::RotateResponse poisoned_reply, zeroed_reply;
  for (auto [request, reply] : {std::pair{&poisoned, &poisoned_reply}, {&zeroed, &zeroed_reply}}) {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, *request, reply), StatusCode::OK, ""));
  }
  const std::string& got = poisoned_reply.q().data();
  const std::string& ref = zeroed_reply.q().data();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size() / sizeof(float); ++i) {
    if (i == kPoisoned || i == kPoisoned + 1) {
      // x0' = x0 cos - x1 sin and x1' = x0 sin + x1 cos both read x0 (sin and
      // cos of 4 * inv_freq[1] are non-zero).
      EXPECT_FALSE(std::isfinite(FloatAt(got, i))) << "element " << i;
    } else {
      EXPECT_EQ(FloatAt(got, i), FloatAt(ref, i)) << "element " << i;
    }
  }
}

TEST_P(NonFiniteDataTest, AttentionAcceptsItAndOnlyItsQueryRowChanges) {
  // q [1, 3, 2, 8], k [1, 4, 1, 8]: a non-finite q[0, 1, 1, 0] reaches only
  // scores[0, 1, 1, :] (head 1, query 1). Raw scores there are non-finite;
  // its softmax row is NaN, or 0 where every score came out -inf (the rule
  // for a fully masked row).
  v1::AttentionScoresRequest clean;
  *clean.mutable_config() = MakeConfig(8, 64);
  *clean.mutable_q() = RandomTensor(DType::kFloat32, {1, 3, 2, 8}, 11);
  *clean.mutable_k() = RandomTensor(DType::kFloat32, {1, 4, 1, 8}, 12);
  constexpr size_t kPoisoned = (1 * 2 + 1) * 8;  // token 1, head 1, feature 0
  v1::AttentionScoresRequest poisoned = clean;
  SetFloatAt(poisoned.mutable_q()->mutable_data(), kPoisoned, GetParam());

  for (bool softmax : {false, true}) {
    SCOPED_TRACE(softmax ? "softmax" : "raw scores");
    poisoned.set_softmax(softmax);
    clean.set_softmax(softmax);
    v1::AttentionScoresResponse poisoned_reply, clean_reply;
    for (auto [request, reply] : {std::pair{&poisoned, &poisoned_reply}, {&clean, &clean_reply}}) {
      grpc::ClientContext context;
      SetDeadline(&context);
      ASSERT_TRUE(
          GrpcStatusIs(stub_->AttentionScores(&context, *request, reply), StatusCode::OK, ""));
    }
    // scores [1, Hq=2, Sq=3, Sk=4]: row (h=1, i=1) starts at (1 * 3 + 1) * 4.
    constexpr size_t kRowBegin = (1 * 3 + 1) * 4, kRowEnd = kRowBegin + 4;
    const std::string& got = poisoned_reply.scores().data();
    const std::string& ref = clean_reply.scores().data();
    ASSERT_EQ(got.size(), 2u * 3 * 4 * sizeof(float));
    for (size_t i = 0; i < got.size() / sizeof(float); ++i) {
      if (i >= kRowBegin && i < kRowEnd) {
        EXPECT_NE(FloatAt(got, i), FloatAt(ref, i)) << "score " << i;
        if (!softmax) {
          EXPECT_FALSE(std::isfinite(FloatAt(got, i))) << "score " << i;
        }
      } else {
        EXPECT_EQ(FloatAt(got, i), FloatAt(ref, i)) << "score " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Values, NonFiniteDataTest,
                         ::testing::Values(std::numeric_limits<float>::quiet_NaN(),
                                           std::numeric_limits<float>::infinity(),
                                           -std::numeric_limits<float>::infinity()),
                         [](const ::testing::TestParamInfo<float>& info) -> std::string {
                           if (std::isnan(info.param)) return "NaN";
                           return info.param > 0 ? "PlusInf" : "MinusInf";
                         });

}  // namespace
}  // namespace test
}  // namespace rope
