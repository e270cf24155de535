// Axial RoPE, fractional positions and server-built positions through a
// real server on 127.0.0.1: an axial Rotate against the long double
// reference, ResolveConfig's per-axis table keys, BuildPositions on the
// published Qwen2-VL config.json, and Rotate with build_positions giving
// exactly the reply of the same Rotate with the positions BuildPositions
// returned (Qwen form and grids).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/hf_fixtures.h"
#include "tests/service/service_fixture.h"
#include "tests/unit/reference_axial.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

using grpc::StatusCode;

// Flux.1's split at head 128: axes 16, 56, 56, theta 10000.
v1::RopeConfig FluxConfig() {
  v1::RopeConfig config = MakeConfig(128, 4096);
  config.set_theta(10000);
  for (uint32_t dim : {16, 56, 56}) config.mutable_axial()->add_axes()->set_dim(dim);
  return config;
}

class AxialServiceTest : public ServiceTest {
 protected:
  v1::RotateResponse Rotate(const v1::RotateRequest& request) {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    const grpc::Status status = stub_->Rotate(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
  v1::BuildPositionsResponse Build(const v1::BuildPositionsRequest& request) {
    v1::BuildPositionsResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    const grpc::Status status = stub_->BuildPositions(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
};

TEST_F(AxialServiceTest, FluxLatentRotatesAsTheReferenceSays) {
  std::mt19937 rng(3);
  // Two text tokens at (0, 0, 0), then a 2 x 3 image at frame 0.
  const std::vector<int64_t> positions = {0, 0, 0, 0, 0, 0, 0, 0,   // axis 0
                                          0, 0, 0, 0, 0, 1, 1, 1,   // rows
                                          0, 0, 0, 1, 2, 0, 1, 2};  // columns
  const std::vector<double> q = RandomValues(DType::kBFloat16, 8 * 3 * 128, &rng);
  v1::RotateRequest request;
  *request.mutable_config() = FluxConfig();
  *request.mutable_q() = ToProto(Encode(DType::kBFloat16, {1, 8, 3, 128}, q));
  for (int64_t p : positions) request.add_positions(p);
  const v1::RotateResponse response = Rotate(request);
  const std::vector<double> got = Decode(FromProto(response.q()));

  const reference::AxialLadder ladder =
      reference::AxialFrequencies({{16, 10000, 1, 1}, {56, 10000, 1, 1}, {56, 10000, 1, 1}});
  std::vector<double> want = q;
  reference::RotateAxial(ladder, /*interleaved=*/true, 1, 1, 8, 3, 128,
                         std::vector<long double>(positions.begin(), positions.end()), &want);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], StorageUlp(DType::kBFloat16, want[i]) + 1e-6) << i;
  }
}

TEST_F(AxialServiceTest, ResolveConfigNamesEachAxisTable) {
  v1::ResolvedConfig resolved;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(stub_->ResolveConfig(&context, FluxConfig(), &resolved).ok());
  ASSERT_EQ(resolved.axis_table_keys_size(), 3);
  EXPECT_EQ(resolved.axis_table_keys(1), resolved.axis_table_keys(2));
  EXPECT_NE(resolved.axis_table_keys(0), resolved.axis_table_keys(1));
  EXPECT_NE(resolved.axis_table_keys(0).find("rotary_dim=16"), std::string::npos);
  EXPECT_EQ(resolved.table_key(), resolved.axis_table_keys(0));
  ASSERT_EQ(resolved.inv_freq_size(), 64);
  EXPECT_EQ(resolved.inv_freq(8), 1.0);  // the first pair of the second axis
  ASSERT_EQ(resolved.config().axial().axes_size(), 3);
  EXPECT_EQ(resolved.config().axial().axes(0).theta(), 10000);
}

// Qwen2-VL-7B-Instruct: text, an image of 4 x 4 patches (2 x 2 tokens
// after merging), text.
v1::BuildPositionsRequest QwenPrefill() {
  v1::BuildPositionsRequest request;
  request.set_hf_config_json(HfConfigFixture("Qwen2-VL-7B-Instruct"));
  for (int64_t id : {100, 151652, 151655, 151655, 151655, 151655, 151653, 101}) {
    request.add_input_ids(id);
  }
  for (int64_t g : {1, 4, 4}) request.add_image_grid_thw(g);
  return request;
}

TEST_F(AxialServiceTest, BuildPositionsGivesTransformersPositionIds) {
  const v1::BuildPositionsResponse built = Build(QwenPrefill());
  EXPECT_EQ(built.axes(), 3u);
  const std::vector<int64_t> positions(built.positions().begin(), built.positions().end());
  EXPECT_EQ(positions, (std::vector<int64_t>{0, 1, 2, 2, 2, 2, 4, 5,     // t
                                             0, 1, 2, 2, 3, 3, 4, 5,     // h
                                             0, 1, 2, 3, 2, 3, 4, 5}));  // w
  ASSERT_EQ(built.rope_deltas_size(), 1);
  EXPECT_EQ(built.rope_deltas(0), 5 + 1 - 8);
  EXPECT_TRUE(built.fractional_positions().empty());
}

TEST_F(AxialServiceTest, RotateWithBuildPositionsEqualsTheBuiltPositions) {
  std::mt19937 rng(5);
  const std::string json = HfConfigFixture("Qwen2-VL-7B-Instruct");
  v1::RotateRequest explicit_request;
  explicit_request.mutable_config()->set_hf_config_json(json);
  explicit_request.mutable_config()->set_max_len(1024);
  explicit_request.mutable_config()->set_layout(v1::HALF);
  *explicit_request.mutable_q() = ToProto(
      Encode(DType::kBFloat16, {1, 8, 2, 128}, RandomValues(DType::kBFloat16, 2048, &rng)));
  v1::RotateRequest built_request = explicit_request;
  const v1::BuildPositionsResponse prefill = Build(QwenPrefill());
  *explicit_request.mutable_positions() = prefill.positions();
  *built_request.mutable_build_positions() = QwenPrefill();
  built_request.mutable_build_positions()->clear_hf_config_json();  // the config's is used
  // Bytes compared with == (a failure would print them all).
  EXPECT_TRUE(Rotate(built_request).q().data() == Rotate(explicit_request).q().data());

  // Decode: the two tokens after the prefill, at cache position 8.
  v1::BuildPositionsRequest decode;
  decode.set_hf_config_json(json);
  decode.add_input_ids(7);
  decode.add_rope_deltas(-2);
  decode.set_cache_position(8);
  const v1::BuildPositionsResponse next = Build(decode);
  EXPECT_EQ(std::vector<int64_t>(next.positions().begin(), next.positions().end()),
            (std::vector<int64_t>{6, 6, 6}));

  // Grids, fractional: HunyuanVideo-style linspace steps on an axial config.
  v1::RotateRequest grid_request;
  *grid_request.mutable_config() = FluxConfig();
  *grid_request.mutable_q() = ToProto(
      Encode(DType::kFloat32, {1, 6, 1, 128}, RandomValues(DType::kFloat32, 768, &rng)));
  v1::RotateRequest fractional_request = grid_request;
  v1::PositionGrid* grid = grid_request.mutable_build_positions()->add_grids();
  for (int64_t d : {1, 2, 3}) grid->add_size(d);
  for (double x : {0.0, 0.5, 0.0}) grid->add_start(x);
  for (double x : {1.0, 1.5, 0.75}) grid->add_step(x);
  v1::BuildPositionsRequest grid_only;
  *grid_only.add_grids() = *grid;
  const v1::BuildPositionsResponse fractional = Build(grid_only);
  ASSERT_EQ(fractional.fractional_positions_size(), 18);
  EXPECT_EQ(fractional.fractional_positions(6 + 3), 2.0);  // row 1 of axis 1: 0.5 + 1.5
  *fractional_request.mutable_fractional_positions() = fractional.fractional_positions();
  EXPECT_TRUE(Rotate(grid_request).q().data() == Rotate(fractional_request).q().data());
}

TEST_F(AxialServiceTest, BuildPositionsRefusalsNameTheField) {
  v1::BuildPositionsRequest request = QwenPrefill();
  request.add_attention_mask(1);
  v1::BuildPositionsResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(stub_->BuildPositions(&context, request, &response),
                           StatusCode::INVALID_ARGUMENT,
                           "attention_mask has 1 values: must be empty or one per input_ids "
                           "value (8)"));
}

}  // namespace
}  // namespace test
}  // namespace rope
