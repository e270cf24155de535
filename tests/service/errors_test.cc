// Every error path of docs/design.md through the wire: the exact grpc code and a
// substring naming the field and value. Also backend faults (FaultBackend)
// and their mapping, message truncation, and isolation of a bad request.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace rope {
namespace test {
namespace {

grpc::Status CallRotate(v1::RopeService::Stub* stub, const v1::RotateRequest& request,
                        v1::RotateResponse* response = nullptr) {
  v1::RotateResponse ignored;
  grpc::ClientContext context;
  SetDeadline(&context);
  return stub->Rotate(&context, request, response != nullptr ? response : &ignored);
}

v1::AttentionScoresRequest MakeAttentionRequest() {
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(8, 64);
  const v1::RotateRequest q = MakeRotateRequest(1, 4, 4, 8);
  *request.mutable_q() = q.q();
  *request.mutable_k() = MakeRotateRequest(1, 6, 2, 8).q();
  return request;
}

grpc::Status CallAttention(v1::RopeService::Stub* stub, const v1::AttentionScoresRequest& request) {
  v1::AttentionScoresResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  return stub->AttentionScores(&context, request, &response);
}

TEST_F(ServiceTest, RejectsBadRank) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_q()->clear_shape();
  request.mutable_q()->add_shape(2);
  request.mutable_q()->add_shape(8);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.shape is [2,8] (rank 2)"));
}

TEST_F(ServiceTest, RejectsNonPositiveDim) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_q()->set_shape(1, -2);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.shape[1] is -2"));
}

TEST_F(ServiceTest, RejectsUnspecifiedDType) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_q()->set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.dtype is DTYPE_UNSPECIFIED"));
}

TEST_F(ServiceTest, RejectsUnknownDTypeValue) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  *request.mutable_k() = request.q();
  // proto3 keeps unknown enum numbers: a newer client could send one.
  request.mutable_k()->set_dtype(static_cast<v1::DType>(7));
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "k.dtype is 7"));
}

TEST_F(ServiceTest, RejectsUnknownLayoutValue) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_config()->set_layout(static_cast<v1::Layout>(9));
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "config.layout is 9"));
}

TEST_F(ServiceTest, RejectsWrongByteLength) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_q()->mutable_data()->resize(63);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.data has 63 bytes"));
}

TEST_F(ServiceTest, RejectsOddHeadDim) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_config()->set_head_dim(7);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "config.head_dim is 7"));
}

TEST_F(ServiceTest, RejectsOddRotaryDim) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_config()->set_rotary_dim(5);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "config.rotary_dim is 5"));
}

TEST_F(ServiceTest, RejectsHeadDimMismatch) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 2, 8);
  request.mutable_config()->set_head_dim(4);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.shape[-1] (head_dim) is 8: must equal config.head_dim 4"));
}

// Rotation takes any head counts (FlashInfer and vLLM rotate such q and k
// in one call); attention, which pairs query heads with key heads, does not.
TEST_F(ServiceTest, OnlyAttentionNeedsQueryHeadsAMultipleOfKeyHeads) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 3, 8);
  *request.mutable_k() = MakeRotateRequest(1, 2, 2, 8).q();
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::OK, ""));
  v1::AttentionScoresRequest attention = MakeAttentionRequest();
  *attention.mutable_k() = MakeRotateRequest(1, 6, 3, 8).q();
  EXPECT_TRUE(GrpcStatusIs(CallAttention(stub_.get(), attention),
                           grpc::StatusCode::INVALID_ARGUMENT, "q heads (4) % k heads (3)"));
}

TEST_F(ServiceTest, MissingTensorsAndConfigAreInvalid) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.clear_config();
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "config is missing"));
  request = MakeRotateRequest(1, 2, 1, 8);
  request.clear_q();
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::INVALID_ARGUMENT,
                           "q is missing"));
  v1::AttentionScoresRequest attention = MakeAttentionRequest();
  attention.clear_k();
  EXPECT_TRUE(GrpcStatusIs(CallAttention(stub_.get(), attention),
                           grpc::StatusCode::INVALID_ARGUMENT, "k is missing"));
}

TEST_F(ServiceTest, PositionPastTableIsOutOfRange) {
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(1, 4, 1, 8, 64, 61)),
                           grpc::StatusCode::OUT_OF_RANGE, "start_pos is 61"));
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8, 64);
  request.add_positions(3);
  request.add_positions(64);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::OUT_OF_RANGE,
                           "positions[1] is 64"));
  v1::AttentionScoresRequest attention = MakeAttentionRequest();
  attention.set_k_start_pos(60);
  EXPECT_TRUE(GrpcStatusIs(CallAttention(stub_.get(), attention), grpc::StatusCode::OUT_OF_RANGE,
                           "k_start_pos is 60"));
  v1::GetTableRequest table;
  *table.mutable_config() = MakeConfig(8, 64);
  table.set_start(64);
  v1::GetTableResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(stub_->GetTable(&context, table, &response),
                           grpc::StatusCode::OUT_OF_RANGE, "start is 64"));
}

TEST_F(ServiceTest, NegativeStartPosIsInvalid) {
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(1, 2, 1, 8, 64, -1)),
                           grpc::StatusCode::INVALID_ARGUMENT, "start_pos is -1"));
}

TEST_F(ServiceTest, MaxLenOverCapIsResourceExhausted) {
  v1::RotateRequest request = MakeRotateRequest(1, 2, 1, 8);
  request.mutable_config()->set_max_len(EngineLimits().max_len_cap + 1);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "max_len cap"));
}

TEST_F(ServiceTest, NegativeAttentionScaleIsInvalid) {
  v1::AttentionScoresRequest attention = MakeAttentionRequest();
  attention.set_scale(-1);
  EXPECT_TRUE(GrpcStatusIs(CallAttention(stub_.get(), attention),
                           grpc::StatusCode::INVALID_ARGUMENT, "scale is -1"));
}

// ---- Limits configured on the server ------------------------------------------------

class SmallLimitsTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.max_message_bytes = 64 << 10;
    EngineLimits limits;
    limits.max_elements_per_request = 1000;
    limits.table_cache_bytes = 64 << 10;
    StartServer(options, limits);
  }
};

TEST_F(SmallLimitsTest, ElementsOverLimitAreResourceExhausted) {
  // 2 x 4 x 4 x 32 = 1024 elements > 1000.
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(2, 4, 4, 32)),
                           grpc::StatusCode::RESOURCE_EXHAUSTED, "max_elements_per_request"));
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(1, 4, 4, 32)),
                           grpc::StatusCode::OK, ""));
}

TEST_F(SmallLimitsTest, MessageOverMaxIsResourceExhausted) {
  v1::RotateRequest request = MakeRotateRequest(1, 1, 1, 8);
  request.mutable_q()->mutable_data()->resize(128 << 10);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), request), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "larger than max"));
}

TEST_F(SmallLimitsTest, TableOverCacheBudgetIsResourceExhausted) {
  // 4096 rows x 4 x 2 x 4 bytes = 128 KiB > 64 KiB.
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(1, 1, 1, 8, 4096)),
                           grpc::StatusCode::RESOURCE_EXHAUSTED, "table-cache budget"));
}

// ---- Backend faults ------------------------------------------------------------------

class BackendFaultTest : public ServiceTest,
                         public ::testing::WithParamInterface<absl::StatusCode> {};

TEST_P(BackendFaultTest, MapsToTheSameGrpcCodeAndMessage) {
  const absl::StatusCode code = GetParam();
  backend_->InjectStatus(absl::Status(code, "injected by FaultBackend"));
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(1, 2, 1, 8)),
                           static_cast<grpc::StatusCode>(code), "injected by FaultBackend"));
  EXPECT_TRUE(GrpcStatusIs(CallAttention(stub_.get(), MakeAttentionRequest()),
                           static_cast<grpc::StatusCode>(code), "injected by FaultBackend"));
  backend_->InjectStatus(absl::OkStatus());
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), MakeRotateRequest(1, 2, 1, 8)),
                           grpc::StatusCode::OK, ""));
}

INSTANTIATE_TEST_SUITE_P(
    Codes, BackendFaultTest,
    ::testing::Values(absl::StatusCode::kInternal, absl::StatusCode::kResourceExhausted,
                      absl::StatusCode::kFailedPrecondition, absl::StatusCode::kUnavailable,
                      absl::StatusCode::kDataLoss, absl::StatusCode::kUnimplemented),
    [](const ::testing::TestParamInfo<absl::StatusCode>& info) {
      std::string name = absl::StatusCodeToString(info.param);
      std::string out;
      for (char c : name) {
        if (c != '_') out.push_back(c);
      }
      return out;
    });

TEST_F(ServiceTest, LongErrorMessagesAreTruncated) {
  backend_->InjectStatus(absl::InternalError(std::string(100000, 'x')));
  const grpc::Status status = CallRotate(stub_.get(), MakeRotateRequest(1, 2, 1, 8));
  EXPECT_TRUE(GrpcStatusIs(status, grpc::StatusCode::INTERNAL, "xxx... (truncated)"));
  EXPECT_LE(status.error_message().size(), 1024u);
}

// A bad request fails on its own; calls in flight next to it are untouched.
TEST_F(ServiceTest, BadRequestDoesNotDisturbCallsInFlight) {
  struct GoodCall {
    v1::RotateRequest request;
    v1::RotateResponse reply;
    grpc::ClientContext context;
    grpc::Status status;
    absl::Notification done;
    // A test that fails early must not free a call gRPC still uses.
    ~GoodCall() {
      if (!done.HasBeenNotified()) {
        context.TryCancel();
        done.WaitForNotificationWithTimeout(absl::Seconds(30));
      }
    }
  };
  backend_->Hold();
  constexpr int kGood = 3;
  GoodCall good[kGood];
  for (int i = 0; i < kGood; ++i) {
    good[i].request = MakeRotateRequest(2, 8, 2, 16, 64, i, 50 + i);
    SetDeadline(&good[i].context);
    stub_->async()->Rotate(&good[i].context, &good[i].request, &good[i].reply,
                           [&call = good[i]](grpc::Status status) {
                             call.status = std::move(status);
                             call.done.Notify();
                           });
  }
  ASSERT_TRUE(backend_->WaitForHeld(kGood, absl::Seconds(20)));

  v1::RotateRequest bad = MakeRotateRequest(1, 2, 1, 8);
  bad.mutable_q()->mutable_data()->resize(5);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), bad), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.data has 5 bytes"));
  v1::RotateRequest odd = MakeRotateRequest(1, 2, 1, 8);
  odd.mutable_config()->set_head_dim(3);
  EXPECT_TRUE(GrpcStatusIs(CallRotate(stub_.get(), odd), grpc::StatusCode::INVALID_ARGUMENT,
                           "config.head_dim is 3"));

  backend_->Release();
  for (int i = 0; i < kGood; ++i) {
    ASSERT_TRUE(good[i].done.WaitForNotificationWithTimeout(absl::Seconds(30))) << i;
    EXPECT_TRUE(GrpcStatusIs(good[i].status, grpc::StatusCode::OK, "")) << i;
    // Rotated, not echoed: every token but the one at position 0 changes.
    EXPECT_EQ(good[i].reply.q().data().size(), good[i].request.q().data().size());
    EXPECT_NE(good[i].reply.q().data(), good[i].request.q().data());
  }
}

}  // namespace
}  // namespace test
}  // namespace rope
