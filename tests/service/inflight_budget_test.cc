// The budget of request and reply bytes in flight (--max_inflight_bytes)
// through a real server: refusals at once, waiting for room, the wait limit,
// streams, and what GetServerInfo and /metrics report. Calls are kept in
// flight deterministically by holding the FaultBackend.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "core/proto_engine/parsed_size.h"
#include "core/proto_engine/rope_calls.h"
#include "tests/service/service_fixture.h"
#include "tests/support/wait_until.h"

namespace rope {
namespace test {
namespace {

// One unary Rotate issued with the callback client API.
struct PendingRotate {
  v1::RotateRequest request;
  v1::RotateResponse response;
  grpc::ClientContext context;
  grpc::Status status;
  absl::Notification done;
  bool started = false;

  void Start(v1::RopeService::Stub* stub, const v1::RotateRequest& what) {
    request = what;
    SetDeadline(&context);
    stub->async()->Rotate(&context, &request, &response, [this](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    started = true;
  }
  ~PendingRotate() {
    if (started && !done.HasBeenNotified()) {
      context.TryCancel();
      done.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
  }
  ::testing::AssertionResult FinishedWith(grpc::StatusCode code, const std::string& substr) {
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return ::testing::AssertionFailure() << "call did not finish";
    }
    return GrpcStatusIs(status, code, substr);
  }
};

// 64 KiB of q: a call is charged its request (~64 KiB) plus its reply's
// serialized copy (64 KiB). The admitted calls' half of max_inflight_bytes
// fits one call and a half: a second call's request fits beside the first,
// its reply does not.
class InflightBudgetTest : public ServiceTest {
 protected:
  static v1::RotateRequest Request(unsigned seed = 1) {
    return MakeRotateRequest(1, 64, 4, 64, 64, 0, seed);
  }
  static int64_t CallBytes() {
    const v1::RotateRequest request = Request();
    return static_cast<int64_t>(request.ByteSizeLong() + request.q().data().size());
  }
  virtual absl::Duration MaxWait() const { return absl::Seconds(30); }
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    budget_ = CallBytes() * 8 / 5;
    options.max_inflight_bytes = 2 * budget_;
    options.max_inflight_wait = MaxWait();
    // The budget alone: every call here comes from one client.
    options.max_inflight_bytes_per_client = 0;
    StartServer(options);
  }
  // Waits (bounded) until `count` calls wait for room.
  bool WaitForWaiters(int64_t count) {
    return WaitUntil([&] { return server_->byte_budget().waiters() == count; });
  }
  // Bytes return once gRPC is done with each call (OnDone), just after the
  // client saw its status: wait for that, bounded.
  bool WaitForNoBytesInFlight() {
    return WaitUntil([&] { return server_->byte_budget().in_use_bytes() == 0; });
  }
  grpc::Status Rotate(const v1::RotateRequest& request) {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    return stub_->Rotate(&context, request, &response);
  }

  // What refusals name: the flag, then the admitted calls' half.
  std::string BudgetText() const {
    return "max_inflight_bytes " + std::to_string(2 * budget_) + " (" + std::to_string(budget_) +
           " for admitted calls)";
  }

  int64_t budget_ = 0;  // the admitted calls' half of max_inflight_bytes
};

// Validation before budget: a GetTable whose rows lie past the table's end
// asks for more bytes than the budget holds, but it is wrong before it is
// large: OUT_OF_RANGE naming the rows, not RESOURCE_EXHAUSTED.
TEST_F(InflightBudgetTest, GetTablePastTheTableIsOutOfRangeNotOverBudget) {
  v1::GetTableRequest request;
  request.mutable_config()->set_head_dim(128);
  request.mutable_config()->set_max_len(1 << 20);
  request.set_start((1 << 20) + 5);
  request.set_count(1 << 20);  // 512 MiB of cos/sin, far over the budget
  v1::GetTableResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(stub_->GetTable(&context, request, &response),
                           grpc::StatusCode::OUT_OF_RANGE, "start is 1048581"));
  request.set_start(1000);
  request.set_count((1 << 20) - 999);
  grpc::ClientContext past_end;
  SetDeadline(&past_end);
  EXPECT_TRUE(GrpcStatusIs(stub_->GetTable(&past_end, request, &response),
                           grpc::StatusCode::OUT_OF_RANGE, "is past config.max_len 1048576"));
}

TEST_F(InflightBudgetTest, CallsWithinTheBudgetRunAndReturnTheirBytes) {
  for (unsigned seed = 1; seed <= 3; ++seed) {
    EXPECT_TRUE(GrpcStatusIs(Rotate(Request(seed)), grpc::StatusCode::OK, ""));
  }
  EXPECT_TRUE(WaitForNoBytesInFlight());
  EXPECT_EQ(server_->byte_budget().refusals(), 0);
}

TEST_F(InflightBudgetTest, RefusesARequestLargerThanTheWholeBudgetAtOnce) {
  backend_->Hold();  // nothing may reach the backend
  EXPECT_TRUE(GrpcStatusIs(Rotate(MakeRotateRequest(1, 64, 8, 64)),
                           grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "more than the server's whole " + BudgetText()));
  backend_->Release();
  EXPECT_EQ(server_->byte_budget().refusals(), 1);
}

TEST_F(InflightBudgetTest, ACallWhoseReplyDoesNotFitWaitsThenRunsWhenRoomIsReturned) {
  backend_->Hold();
  PendingRotate first, second;
  first.Start(stub_.get(), Request(1));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(20)));
  second.Start(stub_.get(), Request(2));
  ASSERT_TRUE(WaitForWaiters(1));
  EXPECT_FALSE(second.done.HasBeenNotified());
  backend_->Release();
  EXPECT_TRUE(first.FinishedWith(grpc::StatusCode::OK, ""));
  EXPECT_TRUE(second.FinishedWith(grpc::StatusCode::OK, ""));
  EXPECT_EQ(second.response.q().data().size(), second.request.q().data().size());
  EXPECT_TRUE(WaitForNoBytesInFlight());
  EXPECT_EQ(server_->byte_budget().refusals(), 0);
}

TEST_F(InflightBudgetTest, ACallWhoseRequestDoesNotFitBesideTheOthersIsRefusedAtOnce) {
  backend_->Hold();
  PendingRotate first, second;
  first.Start(stub_.get(), Request(1));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(20)));
  second.Start(stub_.get(), Request(2));
  ASSERT_TRUE(WaitForWaiters(1));
  EXPECT_TRUE(GrpcStatusIs(Rotate(Request(3)), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "of the server's " + BudgetText() + " are in use; retry later"));
  backend_->Release();
  EXPECT_TRUE(first.FinishedWith(grpc::StatusCode::OK, ""));
  EXPECT_TRUE(second.FinishedWith(grpc::StatusCode::OK, ""));
}

TEST_F(InflightBudgetTest, AStreamMessageLargerThanTheBudgetEndsTheStream) {
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = stub_->RotateStream(&context);
  ASSERT_TRUE(stream->Write(Request(1)));
  v1::RotateResponse reply;
  ASSERT_TRUE(stream->Read(&reply));
  stream->Write(MakeRotateRequest(1, 64, 8, 64));
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(
      GrpcStatusIs(stream->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED, "RotateStream needs"));
  EXPECT_TRUE(WaitForNoBytesInFlight());
}

TEST_F(InflightBudgetTest, GetServerInfoReportsTheBudgetAndWhatIsInFlight) {
  backend_->Hold();
  PendingRotate first;
  first.Start(stub_.get(), Request(1));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(20)));
  v1::ServerInfo info;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                           grpc::StatusCode::OK, ""));
  EXPECT_EQ(info.limits().max_inflight_bytes(), 2 * budget_);
  EXPECT_EQ(info.limits().max_inflight_bytes_per_client(), 0);  // turned off here
  EXPECT_EQ(info.inflight_bytes().budget_bytes(), budget_);
  // The request is charged at its parsed size (ParsedSizeBound, its wire
  // bytes returned once parsed), its reply at the tensor bytes again.
  const std::string wire = Request(1).SerializeAsString();
  const absl::StatusOr<int64_t> parsed =
      ParsedSizeBound(*v1::RotateRequest::descriptor(), absl::string_view(wire));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(info.inflight_bytes().bytes(),
            *parsed + static_cast<int64_t>(Request(1).q().data().size()));
  EXPECT_EQ(info.inflight_bytes().waiters(), 0);
  backend_->Release();
  EXPECT_TRUE(first.FinishedWith(grpc::StatusCode::OK, ""));
}

class InflightWaitLimitTest : public InflightBudgetTest {
 protected:
  absl::Duration MaxWait() const override { return absl::Milliseconds(100); }
};

TEST_F(InflightWaitLimitTest, AWaiterIsRefusedAtTheWaitLimitNamingTheBudget) {
  backend_->Hold();
  PendingRotate first;
  first.Start(stub_.get(), Request(1));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(20)));
  EXPECT_TRUE(GrpcStatusIs(Rotate(Request(2)), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "for room in the server's " + BudgetText()));
  backend_->Release();
  EXPECT_TRUE(first.FinishedWith(grpc::StatusCode::OK, ""));
  EXPECT_EQ(server_->byte_budget().refusals(), 1);
}

// One client's share (--max_inflight_bytes_per_client, here the default:
// half of the admitted calls' budget, less than one call): a client's one
// call may use the budget while it has nothing else in flight; its second
// call waits for its share even though the budget itself would have room
// for its request, and is refused at the wait limit naming the share.
class InflightShareTest : public InflightBudgetTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    budget_ = CallBytes() * 5 / 2;  // two calls fit the budget
    options.max_inflight_bytes = 2 * budget_;
    options.max_inflight_wait = absl::Milliseconds(200);
    StartServer(options);
  }
};

TEST_F(InflightShareTest, AClientsSecondCallWaitsForItsShareNotTheBudget) {
  backend_->Hold();
  PendingRotate first;
  first.Start(stub_.get(), Request(1));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(20)));
  EXPECT_EQ(server_->byte_budget().per_client_bytes(), budget_ / 2);
  const grpc::Status second = Rotate(Request(2));
  EXPECT_TRUE(GrpcStatusIs(second, grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "for room in its client's share: client peer:ipv4:127.0.0.1 has "));
  // Beside it: the first call's whole charge (its request, parsed, and reply).
  EXPECT_TRUE(GrpcStatusIs(
      second, grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat(server_->byte_budget().client_bytes("peer:ipv4:127.0.0.1"),
                   " bytes in flight beside it: its share is max_inflight_bytes_per_client ",
                   budget_ / 2)));
  backend_->Release();
  EXPECT_TRUE(first.FinishedWith(grpc::StatusCode::OK, ""));
  // Alone again, the client's calls run.
  EXPECT_TRUE(WaitForNoBytesInFlight());
  EXPECT_TRUE(GrpcStatusIs(Rotate(Request(3)), grpc::StatusCode::OK, ""));
}

class InflightMetricsTest : public InflightBudgetTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    budget_ = CallBytes() * 8 / 5;
    options.max_inflight_bytes = 2 * budget_;
    options.max_inflight_bytes_per_client = 0;
    options.metrics_address = "127.0.0.1:0";
    StartServer(options);
  }
};

TEST_F(InflightMetricsTest, MetricsReportTheBudgetAndItsRefusals) {
  EXPECT_TRUE(GrpcStatusIs(Rotate(MakeRotateRequest(1, 64, 8, 64)),
                           grpc::StatusCode::RESOURCE_EXHAUSTED, "max_inflight_bytes"));
  const std::string page = HttpGetMetrics(server_->metrics_port());
  EXPECT_EQ(MetricValue(page, "rope_inflight_budget_bytes"), static_cast<double>(budget_));
  EXPECT_EQ(MetricValue(page, "rope_inflight_refusals_total"), 1.0);
  EXPECT_EQ(MetricValue(page, "rope_inflight_waiters"), 0.0);
  EXPECT_GE(MetricValue(page, "rope_inflight_bytes"), 0.0);
}

// What an AttentionScores costs the budget comes from its shapes, whether
// its inputs come as bytes or by shared-memory reference (whose data fields
// are empty): results into the reply twice (and the serialized copy),
// results into shared memory not at all, the engine's float32 working
// copies of q and k once.
v1::Tensor ZeroFloat32Tensor(std::vector<int64_t> shape) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::FLOAT32);
  int64_t elements = 1;
  for (int64_t d : shape) {
    tensor.add_shape(d);
    elements *= d;
  }
  tensor.mutable_data()->assign(elements * sizeof(float), '\0');
  return tensor;
}

TEST(CallEstimateTest, AttentionCountsItsResultsByShapeAndNotThoseWrittenToRegions) {
  v1::AttentionScoresRequest by_value;
  *by_value.mutable_q() = ZeroFloat32Tensor({1, 4, 2, 8});
  *by_value.mutable_k() = ZeroFloat32Tensor({1, 6, 1, 8});
  *by_value.mutable_v() = ZeroFloat32Tensor({1, 6, 1, 3});
  v1::AttentionScoresRequest by_reference = by_value;
  for (v1::Tensor* t :
       {by_reference.mutable_q(), by_reference.mutable_k(), by_reference.mutable_v()}) {
    const uint64_t bytes = t->data().size();
    t->clear_data();
    t->mutable_shm()->set_region("r");
    t->mutable_shm()->set_byte_size(bytes);
  }
  // scores 1x2x4x6 and output 1x4x2x3 (twice), working copies of q (64) and
  // k (48): floats.
  const int64_t want = (2 * (48 + 24) + 64 + 48) * 4;
  EXPECT_EQ(EstimateAttentionScores(by_value).more_bytes, want);
  EXPECT_EQ(EstimateAttentionScores(by_reference).more_bytes, want);
  // Results written to regions take no server memory.
  by_reference.mutable_scores_out()->set_region("r");
  EXPECT_EQ(EstimateAttentionScores(by_reference).more_bytes, (2 * 24 + 64 + 48) * 4);
  by_reference.mutable_output_out()->set_region("r");
  EXPECT_EQ(EstimateAttentionScores(by_reference).more_bytes, (64 + 48) * 4);
  // A reference whose size does not match its shape is left to validation.
  by_reference.mutable_q()->mutable_shm()->set_byte_size(4);
  EXPECT_EQ(EstimateAttentionScores(by_reference).more_bytes, 0);
}

TEST(CallEstimateTest, RotateChargesTheSerializedCopyAndRunsInlineOnlyWithoutReferences) {
  const v1::RotateRequest request = MakeRotateRequest(1, 4, 2, 8);
  CallEstimate estimate = EstimateRotate(request);
  EXPECT_EQ(estimate.more_bytes, static_cast<int64_t>(request.q().data().size()));
  EXPECT_TRUE(estimate.may_run_inline);
  v1::RotateRequest to_region = request;
  to_region.mutable_q_out()->set_region("r");
  estimate = EstimateRotate(to_region);
  EXPECT_EQ(estimate.more_bytes, 0);
  EXPECT_FALSE(estimate.may_run_inline);
  v1::RotateRequest long_table = request;
  long_table.mutable_config()->set_max_len(kInlineMaxLen + 1);
  EXPECT_FALSE(EstimateRotate(long_table).may_run_inline);
  v1::RotateRequest from_json = request;
  from_json.mutable_config()->set_hf_config_json("{}");
  EXPECT_FALSE(EstimateRotate(from_json).may_run_inline);
}

}  // namespace
}  // namespace test
}  // namespace rope
