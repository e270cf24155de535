// Requests parsed after admission, through a real server: what a request's
// parse allocates (ParsedSizeBound) is charged to --max_inflight_bytes before
// the parse, so a request whose packed varints parse to more than the budget
// is refused while its wire size fits; wire bytes that do not parse are
// INVALID_ARGUMENT naming the message type, on every raw method and on both
// streams' messages, and the server is unharmed.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/service/service_fixture.h"
#include "tests/support/wait_until.h"

namespace rope {
namespace test {
namespace {

// The admitted calls' half of max_inflight_bytes: 1 MiB.
constexpr int64_t kAdmittedBudget = int64_t{1} << 20;
// 256 Ki positions of value 0: one byte each on the wire (256 KiB, a
// quarter of the budget), eight each once parsed (2 MiB, twice the budget).
constexpr int kVarints = 256 << 10;

// A Rotate whose kVarints packed positions take one byte each on the wire
// and eight or more once parsed.
v1::RotateRequest VarintHeavyRotate() {
  v1::RotateRequest request = MakeRotateRequest(1, 4, 2, 8);
  for (int i = 0; i < kVarints; ++i) request.add_positions(0);
  return request;
}

// The same through a ModelInfer input's shape.
inference::ModelInferRequest VarintHeavyModelInfer() {
  inference::ModelInferRequest request;
  request.set_model_name("rotate");
  auto* input = request.add_inputs();
  input->set_name("q");
  input->set_datatype("FP32");
  for (int i = 0; i < kVarints; ++i) input->add_shape(1);
  request.add_raw_input_contents(std::string(4, '\0'));
  return request;
}

class RawParseTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.max_inflight_bytes = 2 * kAdmittedBudget;
    StartServer(options);
    kserve_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  // One call of `method` with `wire` as the request's bytes, as sent.
  grpc::Status RawCall(const std::string& method, const std::string& wire) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Slice slice(wire);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
      context.TryCancel();
      done.WaitForNotification();
    }
    return status;
  }

  // Waits (bounded) until no byte is charged.
  bool WaitForNoBytesInFlight() {
    return WaitUntil([&] { return server_->byte_budget().in_use_bytes() == 0; });
  }

  // The server still answers, and holds no byte.
  void ExpectUnharmed() {
    v1::RotateResponse reply;
    EXPECT_TRUE(
        GrpcStatusIs(Rotate(MakeRotateRequest(1, 4, 2, 8), &reply), grpc::StatusCode::OK, ""));
    EXPECT_TRUE(WaitForNoBytesInFlight());
  }

  // A stream of `method` that sends `wire` as its one message and
  // half-closes: its final status (its replies are not looked at).
  grpc::Status RawStream(const std::string& method, const std::string& wire) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext context;
    SetDeadline(&context);
    OneMessageStream stream(wire);
    generic.PrepareBidiStreamingCall(&context, method, grpc::StubOptions(), &stream);
    stream.Start();
    if (!stream.done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
      context.TryCancel();
      stream.done.WaitForNotification();
    }
    return stream.status;
  }

  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;

 private:
  class OneMessageStream : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit OneMessageStream(const std::string& wire) : slice_(wire), request_(&slice_, 1) {}

    void Start() {
      StartWriteLast(&request_, grpc::WriteOptions());
      StartRead(&reply_);
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&reply_);
    }
    void OnDone(const grpc::Status& s) override {
      status = s;
      done.Notify();
    }

    grpc::Status status;
    absl::Notification done;

   private:
    grpc::Slice slice_;
    grpc::ByteBuffer request_;
    grpc::ByteBuffer reply_;
  };
};

TEST_F(RawParseTest, ARotateWhosePositionsParseToMoreThanTheBudgetIsRefusedBeforeItsParse) {
  const v1::RotateRequest request = VarintHeavyRotate();
  ASSERT_LT(static_cast<int64_t>(request.ByteSizeLong()), kAdmittedBudget / 2);
  v1::RotateResponse reply;
  EXPECT_TRUE(GrpcStatusIs(Rotate(request, &reply), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "more than the server's whole max_inflight_bytes"));
  EXPECT_EQ(server_->byte_budget().refusals(), 1);
  ExpectUnharmed();
}

TEST_F(RawParseTest, AModelInferWhoseShapeParsesToMoreThanTheBudgetIsRefusedBeforeItsParse) {
  const inference::ModelInferRequest request = VarintHeavyModelInfer();
  ASSERT_LT(static_cast<int64_t>(request.ByteSizeLong()), kAdmittedBudget / 2);
  inference::ModelInferResponse reply;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_TRUE(GrpcStatusIs(kserve_->ModelInfer(&context, request, &reply),
                           grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "more than the server's whole max_inflight_bytes"));
  ExpectUnharmed();
}

// A stream's message is charged its parse as a unary request is: a
// RotateStream message past the budget ends the stream with the refusal.
TEST_F(RawParseTest, ARotateStreamMessageWhosePositionsParseToMoreThanTheBudgetEndsTheStream) {
  const v1::RotateRequest request = VarintHeavyRotate();
  ASSERT_LT(static_cast<int64_t>(request.ByteSizeLong()), kAdmittedBudget / 2);
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = stub_->RotateStream(&context);
  stream->Write(request);
  stream->WritesDone();
  v1::RotateResponse reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "more than the server's whole max_inflight_bytes"));
  EXPECT_EQ(server_->byte_budget().refusals(), 1);
  ExpectUnharmed();
}

// A ModelStreamInfer message past the budget is answered in band with the
// refusal, and the stream goes on (ends OK once the client half-closes).
TEST_F(RawParseTest, AModelStreamInferMessageWhoseShapeParsesToMoreThanTheBudgetIsAnsweredInBand) {
  const inference::ModelInferRequest request = VarintHeavyModelInfer();
  ASSERT_LT(static_cast<int64_t>(request.ByteSizeLong()), kAdmittedBudget / 2);
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = kserve_->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(request));
  inference::ModelStreamInferResponse reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_NE(reply.error_message().find("more than the server's whole max_inflight_bytes"),
            std::string::npos)
      << reply.error_message();
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));
  EXPECT_EQ(server_->byte_budget().refusals(), 1);
  ExpectUnharmed();
}

// Within the budget, the same kind of request is parsed and answered as
// before (here refused by validation: the positions do not match q).
TEST_F(RawParseTest, ARequestWhoseParseFitsIsParsedAndAnswered) {
  v1::RotateRequest request = MakeRotateRequest(1, 4, 2, 8);
  for (int i = 0; i < 1000; ++i) request.add_positions(0);
  v1::RotateResponse reply;
  EXPECT_TRUE(
      GrpcStatusIs(Rotate(request, &reply), grpc::StatusCode::INVALID_ARGUMENT, "positions"));
  EXPECT_EQ(server_->byte_budget().refusals(), 0);
  ExpectUnharmed();
}

struct RawMethod {
  const char* path;
  const char* type;
};

// Every method registered raw, with its request type.
const RawMethod kRawMethods[] = {
    {"/rope.v1.RopeService/Rotate", "rope.v1.RotateRequest"},
    {"/rope.v1.RopeService/AttentionScores", "rope.v1.AttentionScoresRequest"},
    {"/rope.v1.RopeService/GetTable", "rope.v1.GetTableRequest"},
    {"/rope.v1.RopeService/ResolveConfig", "rope.v1.RopeConfig"},
    {"/rope.v1.RopeService/BuildPositions", "rope.v1.BuildPositionsRequest"},
    {"/rope.v1.RopeService/RegisterSharedMemory", "rope.v1.RegisterSharedMemoryRequest"},
    {"/rope.v1.RopeService/UnregisterSharedMemory", "rope.v1.UnregisterSharedMemoryRequest"},
    {"/rope.v1.RopeService/SharedMemoryStatus", "rope.v1.SharedMemoryStatusRequest"},
    {"/inference.GRPCInferenceService/ModelInfer", "inference.ModelInferRequest"},
};

TEST_F(RawParseTest, MalformedWireBytesAreInvalidArgumentNamingTheTypeOnEveryRawMethod) {
  const std::vector<std::string> malformed = {
      std::string("\x0a\x80", 2),      // field 1, a length that never ends
      std::string("\x0a\x05\x01", 3),  // field 1, 5 bytes announced, 1 sent
      std::string("\x07", 1),          // wire type 7 does not exist
      std::string("\x00\x01", 2),      // field number 0
      std::string("\x0b\x10\x01", 3),  // a group that never ends
  };
  for (const RawMethod& method : kRawMethods) {
    for (const std::string& wire : malformed) {
      EXPECT_TRUE(GrpcStatusIs(RawCall(method.path, wire), grpc::StatusCode::INVALID_ARGUMENT,
                               std::string("request is not a valid ") + method.type))
          << method.path << " " << testing::PrintToString(wire);
    }
  }
  ExpectUnharmed();
}

// A stream's message that does not parse ends its stream INVALID_ARGUMENT
// naming the type, on both streams (a ModelStreamInfer message cannot be
// answered in band: it names no model or id).
TEST_F(RawParseTest, MalformedStreamMessagesEndTheStreamInvalidArgumentNamingTheType) {
  const RawMethod streams[] = {
      {"/rope.v1.RopeService/RotateStream", "rope.v1.RotateRequest"},
      {"/inference.GRPCInferenceService/ModelStreamInfer", "inference.ModelInferRequest"},
  };
  const std::vector<std::string> malformed = {
      std::string("\x0a\x80", 2),
      std::string("\x0a\x05\x01", 3),
      std::string("\x07", 1),
      std::string("\x00\x01", 2),
      std::string("\x0b\x10\x01", 3),
  };
  for (const RawMethod& method : streams) {
    for (const std::string& wire : malformed) {
      EXPECT_TRUE(GrpcStatusIs(RawStream(method.path, wire), grpc::StatusCode::INVALID_ARGUMENT,
                               std::string("request is not a valid ") + method.type))
          << method.path << " " << testing::PrintToString(wire);
    }
  }
  // ModelInferRequest.model_name (field 1, a string) of one byte 0xff: well
  // formed, refused by the parse.
  EXPECT_TRUE(GrpcStatusIs(
      RawStream("/inference.GRPCInferenceService/ModelStreamInfer", std::string("\x0a\x01\xff", 3)),
      grpc::StatusCode::INVALID_ARGUMENT,
      "request is not a valid inference.ModelInferRequest message"));
  ExpectUnharmed();
}

// Bytes well formed as a wire format but refused by the parse itself (a
// string field that is not UTF-8): INVALID_ARGUMENT naming the type too.
TEST_F(RawParseTest, BytesTheParseRefusesAreInvalidArgumentNamingTheType) {
  // SharedMemoryStatusRequest.name (field 1, a string) of one byte 0xff.
  EXPECT_TRUE(GrpcStatusIs(
      RawCall("/rope.v1.RopeService/SharedMemoryStatus", std::string("\x0a\x01\xff", 3)),
      grpc::StatusCode::INVALID_ARGUMENT,
      "request is not a valid rope.v1.SharedMemoryStatusRequest message"));
  ExpectUnharmed();
}

// An empty request is a valid message of every type: parsed (to defaults)
// and answered by the call's own validation.
TEST_F(RawParseTest, AnEmptyRequestIsParsedAndValidated) {
  EXPECT_TRUE(GrpcStatusIs(RawCall("/rope.v1.RopeService/Rotate", ""),
                           grpc::StatusCode::INVALID_ARGUMENT, ""));
  ExpectUnharmed();
}

}  // namespace
}  // namespace test
}  // namespace rope
