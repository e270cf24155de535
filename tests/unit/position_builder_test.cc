// BuildPositions (core/engine/position_builder.h) on hand-worked cases of
// transformers' get_rope_index for Qwen2-VL, Qwen2.5-VL and Qwen3-VL (each
// value below worked out from the published algorithm by hand), the decode
// positions that follow it, and the axial grids; and every refusal. The
// random cases against a Python re-implementation of the published code
// are tests/e2e/positions_test.py.
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/engine/position_builder.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace {

using test::StatusIs;

constexpr int64_t kLimit = 1 << 20;
// Qwen2-VL-7B-Instruct's ids (its config.json).
constexpr int64_t kVisionStart = 151652, kVisionEnd = 151653, kImage = 151655, kVideo = 151656;
constexpr int64_t kText = 100;

std::string Fixture(const char* name) {
  std::ifstream in(std::string(ROPE_HF_CONFIGS_DIR) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A config.json of `model_type` with Qwen's token ids, merge size 2 and
// tokens_per_second 2 (Qwen2.5-VL-7B-Instruct's).
std::string QwenConfig(const std::string& model_type) {
  return "{\"model_type\": \"" + model_type +
         "\", \"image_token_id\": 151655, \"video_token_id\": 151656, "
         "\"vision_start_token_id\": 151652, \"vision_config\": {\"spatial_merge_size\": 2, "
         "\"tokens_per_second\": 2}}";
}

std::vector<int64_t> Axis(const BuiltPositions& built, int axis) {
  return std::vector<int64_t>(built.positions.begin() + axis * built.rows,
                              built.positions.begin() + (axis + 1) * built.rows);
}

using V = std::vector<int64_t>;

TEST(QwenRopeIndexTest, Qwen2VlImageBetweenText) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.input_ids = {kText, kText, kVisionStart, kImage, kImage, kImage, kImage, kVisionEnd, kText};
  r.image_grid_thw = {1, 4, 4};  // merged 2 x 2: four tokens
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->axes, 3);
  EXPECT_EQ(Axis(*built, 0), (V{0, 1, 2, 3, 3, 3, 3, 5, 6}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 1, 2, 3, 3, 4, 4, 5, 6}));
  EXPECT_EQ(Axis(*built, 2), (V{0, 1, 2, 3, 4, 3, 4, 5, 6}));
  EXPECT_EQ(built->rope_deltas, (V{6 + 1 - 9}));
}

TEST(QwenRopeIndexTest, Qwen25VlVideoTimeIndexFromSecondsPerGrid) {
  PositionsRequest r;
  r.hf_config_json = QwenConfig("qwen2_5_vl");
  r.input_ids = {kVisionStart};
  r.input_ids.insert(r.input_ids.end(), 8, kVideo);
  r.input_ids.push_back(kVisionEnd);
  r.video_grid_thw = {2, 4, 4};  // 2 frames of 2 x 2
  r.second_per_grid_ts = {1.0};  // t_index = k * 1.0 * 2
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(Axis(*built, 0), (V{0, 1, 1, 1, 1, 3, 3, 3, 3, 4}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 1, 1, 2, 2, 1, 1, 2, 2, 4}));
  EXPECT_EQ(Axis(*built, 2), (V{0, 1, 2, 1, 2, 1, 2, 1, 2, 4}));
  EXPECT_EQ(built->rope_deltas, (V{4 + 1 - 10}));
  // 0.3 s a grid: t_index = int(1 * 0.3 * 2) = 0, as transformers truncates.
  r.second_per_grid_ts = {0.3};
  const auto slow = BuildPositions(r, kLimit);
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(Axis(*slow, 0), (V{0, 1, 1, 1, 1, 1, 1, 1, 1, 3}));
}

TEST(QwenRopeIndexTest, Qwen3VlSplitsVideosIntoFrames) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen3-VL-8B-Instruct.json");
  r.input_ids = {kVisionStart, kVideo, kVideo, kVideo, kVideo, kVisionEnd,
                 kVisionStart, kVideo, kVideo, kVideo, kVideo, kVisionEnd};
  r.video_grid_thw = {2, 4, 4};
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(Axis(*built, 0), (V{0, 1, 1, 1, 1, 3, 4, 5, 5, 5, 5, 7}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 1, 1, 2, 2, 3, 4, 5, 5, 6, 6, 7}));
  EXPECT_EQ(Axis(*built, 2), (V{0, 1, 2, 1, 2, 3, 4, 5, 6, 5, 6, 7}));
  EXPECT_EQ(built->rope_deltas, (V{7 + 1 - 12}));
}

TEST(QwenRopeIndexTest, PaddingAndTextOnlyRows) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.batch = 2;
  // Row 0 left-padded by 2; row 1 unpadded. Grids are consumed across rows.
  r.input_ids = {0, 0, kText, kVisionStart, kImage, kImage, kImage, kImage,
                 kText, kVisionStart, kImage, kImage, kImage, kImage, kVisionEnd, kText};
  r.attention_mask = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  r.image_grid_thw = {1, 4, 4, 1, 4, 4};
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(Axis(*built, 0), (V{1, 1, 0, 1, 2, 2, 2, 2, /* row 1 */ 0, 1, 2, 2, 2, 2, 4, 5}));
  EXPECT_EQ(Axis(*built, 1), (V{1, 1, 0, 1, 2, 2, 3, 3, 0, 1, 2, 2, 3, 3, 4, 5}));
  EXPECT_EQ(built->rope_deltas, (V{3 + 1 - 8, 5 + 1 - 8}));

  PositionsRequest text;
  text.hf_config_json = r.hf_config_json;
  text.batch = 2;
  text.input_ids = {kText, kText, kText, kText, kText, kText};
  text.attention_mask = {0, 1, 1, 1, 1, 1};
  const auto counted = BuildPositions(text, kLimit);
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(Axis(*counted, 2), (V{1, 0, 1, 0, 1, 2}));
  EXPECT_EQ(counted->rope_deltas, (V{1 + 1 - 3, 2 + 1 - 3}));
  text.attention_mask.clear();
  const auto plain = BuildPositions(text, kLimit);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(Axis(*plain, 0), (V{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(plain->rope_deltas, (V{0, 0}));
}

TEST(QwenRopeIndexTest, DecodePositionsFollowTheDeltas) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.batch = 2;
  r.input_ids = {kText, kText, kText, kText};  // two new tokens per row
  r.rope_deltas = {-2, 3};
  r.cache_position = 9;
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  for (int a = 0; a < 3; ++a) EXPECT_EQ(Axis(*built, a), (V{7, 8, 12, 13}));
  r.rope_deltas = {1};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "rope_deltas has 1 values: must be one per batch row (2)"));
}

TEST(QwenRopeIndexTest, MismatchesAreRefusedWhereTransformersRaises) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.input_ids = {kVisionStart, kImage, kImage, kImage, kImage, kVisionStart, kImage};
  r.image_grid_thw = {1, 4, 4};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "input_ids has more images than image_grid_thw's 1 grids"));
  r.input_ids = {kVisionStart, kImage, kImage, kText};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "past the row's 4 tokens"));
  r.input_ids = {kText, kVisionStart};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "ends with vision_start_token_id"));
  r.input_ids = {kVisionStart, kImage, kImage, kImage, kImage};
  r.attention_mask = {1, 1, 2, 1, 1};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "attention_mask[2] is 2: must be 0 or 1"));
  r.attention_mask.clear();
  r.batch = 2;
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "input_ids has 5 values: must be batch (2) * S"));
  r.batch = 1;
  r.image_grid_thw = {1, 4};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "image_grid_thw has 2 values: must be 3 per grid"));
  r.image_grid_thw = {1, 4, 4};
  r.hf_config_json = "{\"model_type\": \"llama\"}";
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "hf_config_json: model_type is \"llama\""));
  r.hf_config_json = "{\"model_type\": \"qwen2_vl\", \"image_token_id\": \"x\"}";
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "hf_config_json: image_token_id is \"x\": must be an integer"));
  EXPECT_TRUE(StatusIs(BuildPositions(PositionsRequest{}, kLimit).status(),
                       absl::StatusCode::kInvalidArgument, "no positions to build"));
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  EXPECT_TRUE(StatusIs(BuildPositions(r, 9).status(), absl::StatusCode::kResourceExhausted,
                       "input_ids has 5 tokens"));
}

// transformers 5.x's get_rope_index (rope_index_layout TRANSFORMERS_5):
// each value worked out by hand from its published algorithm (runs of
// mm_token_type_ids, current += max(h, w) / m after a vision run, masked 0,
// rope_delta against the row's unmasked tokens).
PositionsRequest Transformers5(PositionsRequest r) {
  r.layout = PositionsRequest::Layout::kTransformers5;
  return r;
}

TEST(QwenRopeIndexTransformers5Test, Qwen2VlLongVideoTextStartsAfterTheSpatialExtent) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.input_ids = {kText, kVisionStart};
  r.input_ids.insert(r.input_ids.end(), 12, kVideo);  // 3 frames of 2 x 2
  r.input_ids.insert(r.input_ids.end(), {kVisionEnd, kText});
  r.video_grid_thw = {3, 4, 4};
  const auto v5 = BuildPositions(Transformers5(r), kLimit);
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(Axis(*v5, 0), (V{0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 5}));
  EXPECT_EQ(Axis(*v5, 1), (V{0, 1, 2, 2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3, 4, 5}));
  EXPECT_EQ(Axis(*v5, 2), (V{0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5}));
  EXPECT_EQ(v5->rope_deltas, (V{5 + 1 - 16}));
  // The 4.5x form starts the text after the largest position (4) instead.
  const auto v4 = BuildPositions(r, kLimit);
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(Axis(*v4, 0), (V{0, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 6}));
  EXPECT_EQ(v4->rope_deltas, (V{6 + 1 - 16}));
  r.layout = PositionsRequest::Layout::kTransformers4;
  const auto explicit4 = BuildPositions(r, kLimit);
  ASSERT_TRUE(explicit4.ok());
  EXPECT_EQ(explicit4->positions, v4->positions);
}

TEST(QwenRopeIndexTransformers5Test, Qwen25VlTimeIndexFromTheInterval) {
  PositionsRequest r;
  r.hf_config_json = QwenConfig("qwen2_5_vl");
  r.input_ids = {kVisionStart};
  r.input_ids.insert(r.input_ids.end(), 8, kVideo);
  r.input_ids.push_back(kVisionEnd);
  r.video_grid_thw = {2, 4, 4};
  r.second_per_grid_ts = {1.0};  // interval 2 * 1.0
  r = Transformers5(r);
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(Axis(*built, 0), (V{0, 1, 1, 1, 1, 3, 3, 3, 3, 3}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 1, 1, 2, 2, 1, 1, 2, 2, 3}));
  EXPECT_EQ(Axis(*built, 2), (V{0, 1, 2, 1, 2, 1, 2, 1, 2, 3}));
  EXPECT_EQ(built->rope_deltas, (V{3 + 1 - 10}));
  r.second_per_grid_ts = {0.3};  // int(1 * 0.6) = 0
  const auto slow = BuildPositions(r, kLimit);
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(Axis(*slow, 0), (V{0, 1, 1, 1, 1, 1, 1, 1, 1, 3}));
  r.second_per_grid_ts.clear();  // 1 s each
  const auto unset = BuildPositions(r, kLimit);
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->positions, built->positions);
}

TEST(QwenRopeIndexTransformers5Test, PaddingFillsZeroAndDeltasCountUnmaskedTokens) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.batch = 2;
  r.input_ids = {0, 0, kText, kVisionStart, kImage, kImage, kImage, kImage,
                 kText, kVisionStart, kImage, kImage, kImage, kImage, kVisionEnd, kText};
  r.attention_mask = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  r.image_grid_thw = {1, 4, 4, 1, 4, 4};
  const auto built = BuildPositions(Transformers5(r), kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(Axis(*built, 0), (V{0, 0, 0, 1, 2, 2, 2, 2, /* row 1 */ 0, 1, 2, 2, 2, 2, 4, 5}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 0, 0, 1, 2, 2, 3, 3, 0, 1, 2, 2, 3, 3, 4, 5}));
  EXPECT_EQ(Axis(*built, 2), (V{0, 0, 0, 1, 2, 3, 2, 3, 0, 1, 2, 3, 2, 3, 4, 5}));
  EXPECT_EQ(built->rope_deltas, (V{3 + 1 - 6, 5 + 1 - 8}));

  PositionsRequest text;
  text.hf_config_json = r.hf_config_json;
  text.batch = 2;
  text.input_ids = {kText, kText, kText, kText, kText, kText};
  text.attention_mask = {0, 1, 1, 1, 1, 1};
  const auto counted = BuildPositions(Transformers5(text), kLimit);
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(Axis(*counted, 2), (V{0, 0, 1, 0, 1, 2}));
  EXPECT_EQ(counted->rope_deltas, (V{0, 0}));
}

TEST(QwenRopeIndexTransformers5Test, Qwen3VlFramesAndImagesAgreeWithTheOlderForm) {
  PositionsRequest r;
  r.hf_config_json = Fixture("Qwen3-VL-8B-Instruct.json");
  r.input_ids = {kText, kVisionStart, kVideo, kVideo, kVideo, kVideo, kVisionEnd,
                 kText, kVisionStart, kVideo, kVideo, kVideo, kVideo, kVisionEnd,
                 kVisionStart, kImage, kImage, kImage, kImage, kImage, kImage, kVisionEnd};
  r.video_grid_thw = {2, 4, 4};
  r.image_grid_thw = {1, 4, 6};  // 2 x 3 tokens
  const auto v4 = BuildPositions(r, kLimit);
  const auto v5 = BuildPositions(Transformers5(r), kLimit);
  ASSERT_TRUE(v4.ok()) << v4.status();
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(Axis(*v5, 0), (V{0, 1, 2, 2, 2, 2, 4, 5, 6, 7, 7, 7, 7, 9, 10,
                             11, 11, 11, 11, 11, 11, 14}));
  EXPECT_EQ(Axis(*v5, 2), (V{0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 7, 8, 9, 10,
                             11, 12, 13, 11, 12, 13, 14}));
  EXPECT_EQ(v5->positions, v4->positions);
  EXPECT_EQ(v5->rope_deltas, v4->rope_deltas);
}

TEST(QwenRopeIndexTransformers5Test, RunsThatDoNotMatchTheirGridsAreRefused) {
  PositionsRequest r = Transformers5(PositionsRequest{});
  r.hf_config_json = Fixture("Qwen2-VL-7B-Instruct.json");
  r.input_ids = {kVisionStart, kImage, kImage, kImage, kVisionEnd};
  r.image_grid_thw = {1, 4, 4};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "the run of 3 image tokens at token 1 does not match its grid (1, 4, 4), "
                       "1 x 2 x 2 tokens"));
  r.input_ids = {kVisionStart, kImage, kImage, kImage, kImage, kVisionEnd,
                 kVisionStart, kImage, kImage, kImage, kImage, kVisionEnd};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "input_ids has more images than image_grid_thw's 1 grids (row 0, token 7)"));
  r.input_ids = {kVisionStart, kImage, kImage, kImage, kImage};
  r.attention_mask = {0, 0, 0, 0, 0};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "attention_mask row 0 masks every token"));
  r.attention_mask.clear();
  r.layout = static_cast<PositionsRequest::Layout>(7);
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "rope_index_layout is 7: must be 0 (ROPE_INDEX_LAYOUT_DEFAULT)"));
}

TEST(GridPositionsTest, FluxTextThenImage) {
  PositionsRequest r;
  PositionGrid text;
  text.size = {3, 1, 1};
  text.step = {0, 0, 0};  // txt_ids: all zero
  PositionGrid image;
  image.size = {1, 2, 3};  // img_ids[..., 1] = row, [..., 2] = column
  r.grids = {text, image};
  const auto built = BuildPositions(r, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->axes, 3);
  EXPECT_EQ(built->rows, 9);
  EXPECT_TRUE(built->fractional_positions.empty());
  EXPECT_EQ(Axis(*built, 0), (V{0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(Axis(*built, 2), (V{0, 0, 0, 0, 1, 2, 0, 1, 2}));
}

TEST(GridPositionsTest, RopeAxisAndFractionalSteps) {
  PositionsRequest sam;
  PositionGrid patches;
  patches.size = {2, 3};       // rows, columns
  patches.rope_axis = {1, 0};  // x (the column) is axis 0
  sam.grids = {patches};
  const auto built = BuildPositions(sam, kLimit);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(Axis(*built, 0), (V{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(Axis(*built, 1), (V{0, 0, 0, 1, 1, 1}));

  PositionsRequest hunyuan;  // linspace(0.5, 1.5, 4)[:4] on the second axis
  PositionGrid grid;
  grid.size = {2, 4};
  grid.start = {0, 0.5};
  grid.step = {1, 0.25};
  hunyuan.grids = {grid};
  const auto fractional = BuildPositions(hunyuan, kLimit);
  ASSERT_TRUE(fractional.ok()) << fractional.status();
  EXPECT_TRUE(fractional->positions.empty());
  EXPECT_EQ(fractional->fractional_positions,
            (std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 0.5, 0.75, 1, 1.25, 0.5, 0.75, 1, 1.25}));
}

TEST(GridPositionsTest, MalformedGridsAreRefused) {
  PositionsRequest r;
  PositionGrid g;
  g.size = {2, 0};
  r.grids = {g};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "grids[0].size[1] is 0: must be >= 1"));
  r.grids[0].size = {2, 2};
  r.grids[0].rope_axis = {0, 0};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "grids[0].rope_axis is [0,0]: must be empty or a permutation"));
  r.grids[0].rope_axis.clear();
  r.grids[0].step = {1, std::numeric_limits<double>::infinity()};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "grids[0].step[1] is inf: must be finite"));
  r.grids[0].step.clear();
  PositionGrid other;
  other.size = {4};
  r.grids.push_back(other);
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "grids[1].size has 1 dimensions: every grid must have as many as "
                       "grids[0] (2)"));
  r.grids.pop_back();
  r.grids[0].size = {1 << 20, 1 << 20};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kResourceExhausted,
                       "over the limit on the positions of one call"));
  r.input_ids = {1};
  EXPECT_TRUE(StatusIs(BuildPositions(r, kLimit).status(), absl::StatusCode::kInvalidArgument,
                       "grids and input_ids"));
}

}  // namespace
}  // namespace rope
