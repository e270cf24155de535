// Every RPC of rope.v1.RopeService against a real in-process server, checked
// against the independent double-precision reference of tests/unit.
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rope/bench/v1/echo.grpc.pb.h"
#include "core/backends/cpu/cpu_simd.h"
#include "tests/service/service_fixture.h"
#include "tests/support/wait_until.h"
#include "tests/unit/reference_rope.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

// |got - want| <= one storage ulp of want (the final rounding) plus float32
// arithmetic slack. Wrong pairing or angle errs by O(1) and fails.
void ExpectNear(DType dtype, const std::vector<double>& got, const std::vector<double>& want,
                double float_tolerance = 2e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = StorageUlp(dtype, want[i]) + float_tolerance * (1 + std::abs(want[i]));
    ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i;
  }
}

std::vector<int64_t> StartPositions(int64_t batch, int64_t seq, int64_t start) {
  std::vector<int64_t> positions;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) positions.push_back(start + s);
  }
  return positions;
}

// ---- Rotate: every dtype x layout x (full, partial) rotary_dim ---------------

using RotateCase = std::tuple<DType, v1::Layout, uint32_t /*rotary_dim*/>;

class RotateTest : public ServiceTest, public ::testing::WithParamInterface<RotateCase> {};

TEST_P(RotateTest, MatchesReferenceForQAndGqaK) {
  const auto [dtype, layout, rotary_dim] = GetParam();
  const int64_t batch = 2, seq = 5, q_heads = 4, k_heads = 2;
  const uint32_t head_dim = 16, max_len = 64;
  const int64_t start_pos = 7;
  std::mt19937 rng(42);
  const std::vector<double> q = RandomValues(dtype, batch * seq * q_heads * head_dim, &rng);
  const std::vector<double> k = RandomValues(dtype, batch * seq * k_heads * head_dim, &rng);

  v1::RotateRequest request;
  *request.mutable_config() = MakeConfig(head_dim, max_len, layout, rotary_dim);
  *request.mutable_q() = ToProto(Encode(dtype, {batch, seq, q_heads, head_dim}, q));
  *request.mutable_k() = ToProto(Encode(dtype, {batch, seq, k_heads, head_dim}, k));
  request.set_start_pos(start_pos);

  v1::RotateResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response), grpc::StatusCode::OK, ""));

  reference::Rope rope;
  rope.head_dim = head_dim;
  rope.rotary_dim = rotary_dim == 0 ? head_dim : rotary_dim;
  rope.interleaved = layout == v1::INTERLEAVED;
  const std::vector<int64_t> positions = StartPositions(batch, seq, start_pos);
  std::vector<double> want_q = q, want_k = k;
  reference::RotateTensor(rope, batch, seq, q_heads, positions, false, &want_q);
  reference::RotateTensor(rope, batch, seq, k_heads, positions, false, &want_k);

  EXPECT_EQ(response.q().dtype(), request.q().dtype());
  EXPECT_EQ(std::vector<int64_t>(response.q().shape().begin(), response.q().shape().end()),
            (std::vector<int64_t>{batch, seq, q_heads, head_dim}));
  EXPECT_EQ(std::vector<int64_t>(response.k().shape().begin(), response.k().shape().end()),
            (std::vector<int64_t>{batch, seq, k_heads, head_dim}));
  ExpectNear(dtype, Decode(FromProto(response.q())), want_q);
  ExpectNear(dtype, Decode(FromProto(response.k())), want_k);
}

std::string RotateCaseName(const ::testing::TestParamInfo<RotateCase>& info) {
  const auto [dtype, layout, rotary_dim] = info.param;
  const char* dtype_name = dtype == DType::kFloat32   ? "Float32"
                           : dtype == DType::kFloat16 ? "Float16"
                                                      : "BFloat16";
  return absl::StrCat(dtype_name, layout == v1::INTERLEAVED ? "Interleaved" : "Half",
                      rotary_dim == 0 ? "FullRotary" : "PartialRotary");
}

INSTANTIATE_TEST_SUITE_P(
    DTypesAndLayouts, RotateTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(v1::INTERLEAVED, v1::HALF), ::testing::Values(0u, 8u)),
    RotateCaseName);

// A small Rotate is answered on the gRPC thread that received it
// (ServerOptions::inline_rotate_max_bytes), a large one on a work thread:
// the replies are the same bytes either way, and with inlining off.
TEST_F(ServiceTest, RotateRepliesAreTheSameInlineAndOnTheWorkQueue) {
  std::mt19937 rng(11);
  std::vector<v1::RotateRequest> requests;
  for (int64_t seq : {int64_t{3}, int64_t{600}}) {  // 1.5 KiB and 300 KiB of q
    v1::RotateRequest request;
    *request.mutable_config() = MakeConfig(16, 1024, v1::HALF);
    *request.mutable_q() = ToProto(
        Encode(DType::kBFloat16, {1, seq, 16, 16}, RandomValues(DType::kBFloat16, seq * 256, &rng)));
    request.set_start_pos(5);
    requests.push_back(request);
  }
  ASSERT_LE(requests[0].ByteSizeLong(), static_cast<size_t>(DefaultOptions().inline_rotate_max_bytes));
  ASSERT_GT(requests[1].ByteSizeLong(), static_cast<size_t>(DefaultOptions().inline_rotate_max_bytes));
  auto rotate_all = [&] {
    std::vector<std::string> replies;
    for (const v1::RotateRequest& request : requests) {
      v1::RotateResponse response;
      grpc::ClientContext context;
      SetDeadline(&context);
      EXPECT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response), grpc::StatusCode::OK, ""));
      EXPECT_NE(response.q().data(), request.q().data());
      replies.push_back(response.q().data());
    }
    return replies;
  };
  const std::vector<std::string> inline_replies = rotate_all();
  TearDown();
  ServerOptions queued = DefaultOptions();
  queued.inline_rotate_max_bytes = 0;
  ASSERT_NO_FATAL_FAILURE(StartServer(queued));
  EXPECT_EQ(rotate_all(), inline_replies);
}

// Per-client shares send every call through the work queue's turns (a
// flooding client's small calls would otherwise be answered in arrival
// order on gRPC's threads, bench/results/fairness.md).
TEST(InlineRotateMaxBytesTest, IsOffWhilePerClientSharesAreOn) {
  ServerOptions options;
  options.inline_rotate_max_bytes = 4096;
  EXPECT_EQ(InlineRotateMaxBytes(options), 4096);
  options.max_calls_per_client = 4;
  EXPECT_EQ(InlineRotateMaxBytes(options), 0);
  options.max_calls_per_client = 0;
  options.inline_rotate_max_bytes = 0;
  EXPECT_EQ(InlineRotateMaxBytes(options), 0);
}

// --max_streams_per_connection is announced to clients (HTTP/2
// SETTINGS_MAX_CONCURRENT_STREAMS): a call past it waits in the client,
// never reaching the server, and goes through once a stream closes.
TEST_F(ServiceTest, CallsPastTheStreamCapWaitInTheClient) {
  TearDown();
  ServerOptions options = DefaultOptions();
  options.max_streams_per_connection = 2;
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  v1::RotateRequest small;
  *small.mutable_config() = MakeConfig(16, 64, v1::HALF);
  *small.mutable_q() = ToProto(Encode(DType::kFloat32, {1, 2, 1, 16}, std::vector<double>(32, 1.0)));
  {  // the first call on the connection learns the server's settings
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub_->Rotate(&context, small, &response).ok());
  }
  grpc::ClientContext held_context[2];
  std::unique_ptr<grpc::ClientReaderWriter<v1::RotateRequest, v1::RotateResponse>> held[2];
  for (int i = 0; i < 2; ++i) {
    SetDeadline(&held_context[i]);
    held[i] = stub_->RotateStream(&held_context[i]);
    // One round trip: the stream is open at the server (then idle, holding
    // no call slot, but still one of the connection's 2 streams).
    ASSERT_TRUE(held[i]->Write(small));
    v1::RotateResponse reply;
    ASSERT_TRUE(held[i]->Read(&reply));
  }
  {
    // A small Rotate the server would answer in microseconds: its deadline
    // passing shows that it waited in the client.
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context, absl::Milliseconds(500));
    const grpc::Status waited = stub_->Rotate(&context, small, &response);
    EXPECT_EQ(waited.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << waited.error_message();
  }
  // No call holds a slot: the waiting one never reached the server, and each
  // held stream's message gave its slot back once its reply was written
  // (OnWriteDone, which may run after the client read the reply).
  EXPECT_TRUE(WaitUntil([&] { return server_->gate().in_flight() == 0; }))
      << server_->gate().in_flight() << " calls in flight";
  held[0]->WritesDone();
  EXPECT_TRUE(held[0]->Finish().ok());
  {
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(stub_->Rotate(&context, small, &response).ok());
  }
  held[1]->WritesDone();
  EXPECT_TRUE(held[1]->Finish().ok());
}

TEST_F(ServiceTest, RotateUsesExplicitPerRowPositionsAndRank3) {
  const uint32_t head_dim = 8;
  std::mt19937 rng(3);
  // Rank 3 [S, H, D] is batch 1; positions are S values.
  const std::vector<double> q = RandomValues(DType::kFloat32, 3 * 2 * head_dim, &rng);
  v1::RotateRequest request;
  *request.mutable_config() = MakeConfig(head_dim, 100, v1::HALF);
  *request.mutable_q() = ToProto(Encode(DType::kFloat32, {3, 2, head_dim}, q));
  for (int64_t p : {90, 4, 57}) request.add_positions(p);

  v1::RotateResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &response), grpc::StatusCode::OK, ""));

  reference::Rope rope;
  rope.head_dim = rope.rotary_dim = head_dim;
  rope.interleaved = false;
  std::vector<double> want = q;
  reference::RotateTensor(rope, 1, 3, 2, {90, 4, 57}, false, &want);
  ExpectNear(DType::kFloat32, Decode(FromProto(response.q())), want);
}

TEST_F(ServiceTest, RotateInverseUndoesRotation) {
  v1::RotateRequest request = MakeRotateRequest(2, 4, 2, 32, 1000, 500, 9);
  const std::vector<double> original = Decode(FromProto(request.q()));
  v1::RotateResponse rotated;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &rotated), grpc::StatusCode::OK, ""));
  }
  *request.mutable_q() = rotated.q();
  request.set_inverse(true);
  v1::RotateResponse restored;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(stub_->Rotate(&context, request, &restored), grpc::StatusCode::OK, ""));
  EXPECT_NE(Decode(FromProto(rotated.q())), original);
  ExpectNear(DType::kFloat32, Decode(FromProto(restored.q())), original, 1e-5);
}

// ---- RotateStream -----------------------------------------------------------------

TEST_F(ServiceTest, RotateStreamAnswersEveryMessageInOrder) {
  constexpr int kMessages = 60;
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = stub_->RotateStream(&context);
  std::vector<v1::RotateRequest> sent;
  for (int i = 0; i < kMessages; ++i) {
    // Each message has its own positions and values, so a reply answered out
    // of order matches the wrong reference.
    sent.push_back(MakeRotateRequest(1, 3, 2, 8, 256, /*start_pos=*/i * 3, /*seed=*/100 + i));
    ASSERT_TRUE(stream->Write(sent.back())) << "message " << i;
  }
  ASSERT_TRUE(stream->WritesDone());
  reference::Rope rope;
  rope.head_dim = rope.rotary_dim = 8;
  v1::RotateResponse reply;
  int received = 0;
  while (received < kMessages + 1 && stream->Read(&reply)) {
    ASSERT_LT(received, kMessages);
    std::vector<double> want = Decode(FromProto(sent[received].q()));
    reference::RotateTensor(rope, 1, 3, 2, StartPositions(1, 3, received * 3), false, &want);
    ExpectNear(DType::kFloat32, Decode(FromProto(reply.q())), want);
    ++received;
  }
  EXPECT_EQ(received, kMessages);
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OK, ""));
}

TEST_F(ServiceTest, RotateStreamEndsWithTheFailingMessagesStatus) {
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = stub_->RotateStream(&context);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(stream->Write(MakeRotateRequest(1, 2, 1, 8, 64, i)));
  // Positions 63 and 64 of a 64-row table: the second is past the end.
  stream->Write(MakeRotateRequest(1, 2, 1, 8, 64, /*start_pos=*/63));
  // Never answered: the stream has ended. Writes after the end may fail.
  stream->Write(MakeRotateRequest(1, 2, 1, 8, 64, 0));
  stream->WritesDone();
  v1::RotateResponse reply;
  int received = 0;
  while (received < 10 && stream->Read(&reply)) ++received;
  EXPECT_EQ(received, 3);
  EXPECT_TRUE(GrpcStatusIs(stream->Finish(), grpc::StatusCode::OUT_OF_RANGE, "start_pos is 63"));
}

// ---- AttentionScores ---------------------------------------------------------------

// docs/design.md's self-check: theta 100, head_dim 4 gives inv_freq (1, 0.1);
// q = k = (1,0,1,0) at m = 5, n = 7 give q'.k' = cos 2 + cos 0.2.
TEST_F(ServiceTest, AttentionScoresMatchesTheDerivationSelfCheck) {
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(4, 16, v1::INTERLEAVED, 0, /*theta=*/100);
  *request.mutable_q() = ToProto(Encode(DType::kFloat32, {1, 1, 1, 4}, {1, 0, 1, 0}));
  *request.mutable_k() = ToProto(Encode(DType::kFloat32, {1, 1, 1, 4}, {1, 0, 1, 0}));
  request.set_q_start_pos(5);
  request.set_k_start_pos(7);
  request.set_scale(1.0);

  v1::AttentionScoresResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(
      GrpcStatusIs(stub_->AttentionScores(&context, request, &response), grpc::StatusCode::OK, ""));
  EXPECT_EQ(response.scores().dtype(), v1::FLOAT32);
  const std::vector<double> scores = Decode(FromProto(response.scores()));
  ASSERT_EQ(scores.size(), 1u);
  EXPECT_NEAR(scores[0], std::cos(2.0) + std::cos(0.2), 1e-6);
}

class AttentionTest : public ServiceTest, public ::testing::WithParamInterface<DType> {};

TEST_P(AttentionTest, CausalSoftmaxWithValuesMatchesReference) {
  const DType dtype = GetParam();
  reference::AttentionShape shape;
  shape.batch = 2;
  shape.q_seq = 3;
  shape.k_seq = 5;
  shape.q_heads = 4;
  shape.k_heads = 2;
  shape.v_dim = 6;
  const uint32_t head_dim = 8;
  std::mt19937 rng(11);
  const auto q = RandomValues(dtype, shape.batch * shape.q_seq * shape.q_heads * head_dim, &rng);
  const auto k = RandomValues(dtype, shape.batch * shape.k_seq * shape.k_heads * head_dim, &rng);
  const auto v = RandomValues(dtype, shape.batch * shape.k_seq * shape.k_heads * shape.v_dim, &rng);

  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(head_dim, 32, v1::HALF);
  *request.mutable_q() = ToProto(Encode(dtype, {2, 3, 4, head_dim}, q));
  *request.mutable_k() = ToProto(Encode(dtype, {2, 5, 2, head_dim}, k));
  *request.mutable_v() = ToProto(Encode(dtype, {2, 5, 2, 6}, v));
  request.set_q_start_pos(2);  // queries at 2..4, keys at 0..4: the first rows are masked
  request.set_causal(true);
  request.set_softmax(true);

  v1::AttentionScoresResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(
      GrpcStatusIs(stub_->AttentionScores(&context, request, &response), grpc::StatusCode::OK, ""));

  reference::Rope rope;
  rope.head_dim = rope.rotary_dim = head_dim;
  rope.interleaved = false;
  const reference::AttentionResult want =
      reference::Attention(rope, shape, q, k, &v, 2, 0, true, true, 1 / std::sqrt(8.0));
  EXPECT_EQ(
      std::vector<int64_t>(response.scores().shape().begin(), response.scores().shape().end()),
      (std::vector<int64_t>{2, 4, 3, 5}));
  EXPECT_EQ(
      std::vector<int64_t>(response.output().shape().begin(), response.output().shape().end()),
      (std::vector<int64_t>{2, 3, 4, 6}));
  ExpectNear(DType::kFloat32, Decode(FromProto(response.scores())), want.scores, 1e-5);
  ExpectNear(DType::kFloat32, Decode(FromProto(response.output())), want.output, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(DTypes, AttentionTest,
                         ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST_F(ServiceTest, AttentionScoresWithoutSoftmaxMasksWithMinusInfinity) {
  v1::AttentionScoresRequest request;
  *request.mutable_config() = MakeConfig(4, 16);
  std::mt19937 rng(5);
  *request.mutable_q() =
      ToProto(Encode(DType::kFloat32, {1, 2, 1, 4}, RandomValues(DType::kFloat32, 8, &rng)));
  *request.mutable_k() =
      ToProto(Encode(DType::kFloat32, {1, 2, 1, 4}, RandomValues(DType::kFloat32, 8, &rng)));
  request.set_causal(true);
  v1::AttentionScoresResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(
      GrpcStatusIs(stub_->AttentionScores(&context, request, &response), grpc::StatusCode::OK, ""));
  const std::vector<double> scores = Decode(FromProto(response.scores()));
  ASSERT_EQ(scores.size(), 4u);  // [1,1,2,2]: query 0 cannot see key 1
  EXPECT_TRUE(std::isinf(scores[1]) && scores[1] < 0) << scores[1];
  EXPECT_TRUE(std::isfinite(scores[0]) && std::isfinite(scores[2]) && std::isfinite(scores[3]));
  EXPECT_FALSE(response.has_output());
}

// ---- GetTable ----------------------------------------------------------------------

TEST_F(ServiceTest, GetTableReturnsCosSinRowsAndInvFreq) {
  v1::GetTableRequest request;
  *request.mutable_config() = MakeConfig(16, 4096, v1::INTERLEAVED, 12, 500000);
  request.set_start(4000);
  request.set_count(5);
  v1::GetTableResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(
      GrpcStatusIs(stub_->GetTable(&context, request, &response), grpc::StatusCode::OK, ""));

  const std::vector<double> inv_freq = reference::InvFreq(500000, 12);
  ASSERT_EQ(response.inv_freq_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(response.inv_freq(i), inv_freq[i], 1e-15 * inv_freq[i]);
  EXPECT_EQ(response.start(), 4000);
  EXPECT_EQ(response.attention_factor(), 1.0);
  EXPECT_EQ(std::vector<int64_t>(response.cos().shape().begin(), response.cos().shape().end()),
            (std::vector<int64_t>{5, 6}));
  const std::vector<double> cos = Decode(FromProto(response.cos()));
  const std::vector<double> sin = Decode(FromProto(response.sin()));
  ASSERT_EQ(cos.size(), 30u);
  ASSERT_EQ(sin.size(), 30u);
  for (int row = 0; row < 5; ++row) {
    for (int i = 0; i < 6; ++i) {
      const double angle = (4000.0 + row) * inv_freq[i];
      // float32 rounding of the double value: half an ulp of 1 at most.
      EXPECT_NEAR(cos[row * 6 + i], std::cos(angle), 6e-8) << row << "," << i;
      EXPECT_NEAR(sin[row * 6 + i], std::sin(angle), 6e-8) << row << "," << i;
    }
  }
}

TEST_F(ServiceTest, GetTableCountZeroMeansToTheEnd) {
  v1::GetTableRequest request;
  *request.mutable_config() = MakeConfig(8, 10);
  request.set_start(7);
  v1::GetTableResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(
      GrpcStatusIs(stub_->GetTable(&context, request, &response), grpc::StatusCode::OK, ""));
  EXPECT_EQ(std::vector<int64_t>(response.sin().shape().begin(), response.sin().shape().end()),
            (std::vector<int64_t>{3, 4}));
}

// ---- GetServerInfo -------------------------------------------------------------------

TEST_F(ServiceTest, GetServerInfoReportsVersionBackendLimitsAndCache) {
  {
    v1::RotateRequest request = MakeRotateRequest(1, 1, 1, 8, 128);
    v1::RotateResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(
        GrpcStatusIs(stub_->Rotate(&context, request, &response), grpc::StatusCode::OK, ""));
  }
  v1::ServerInfo info;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                           grpc::StatusCode::OK, ""));
  EXPECT_EQ(info.version(), ROPE_VERSION);
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_FALSE(info.device().empty());
  EXPECT_GT(info.threads(), 0);
  // The CPU backend's SIMD path: a compiled one this CPU runs.
  bool known_path = false;
  for (const CpuSimdPath& path : CompiledCpuSimdPaths()) {
    known_path |= path.supported && path.name == info.cpu_simd();
  }
  EXPECT_TRUE(known_path) << "cpu_simd \"" << info.cpu_simd() << "\"";
  const EngineLimits defaults;
  EXPECT_EQ(info.limits().max_message_bytes(), DefaultOptions().max_message_bytes);
  EXPECT_EQ(info.limits().max_len_cap(), defaults.max_len_cap);
  EXPECT_EQ(info.limits().max_elements_per_request(), defaults.max_elements_per_request);
  EXPECT_EQ(info.limits().max_concurrent_calls(), DefaultOptions().max_concurrent_calls);
  EXPECT_EQ(info.limits().table_cache_bytes(), defaults.table_cache_bytes);
  EXPECT_EQ(info.table_cache().misses(), 1);
  EXPECT_EQ(info.table_cache().entries(), 1);
  EXPECT_EQ(info.table_cache().bytes(), 128 * 4 * 2 * 4);  // max_len x half x (cos, sin) x float
  EXPECT_EQ(info.table_cache().budget_bytes(), defaults.table_cache_bytes);
  EXPECT_EQ(info.table_cache().blocks_built(), 1);  // 128 rows: one block
  EXPECT_EQ(info.table_cache().blocks_resident(), 1);
  EXPECT_EQ(info.table_cache().block_rows(), 4096);
  EXPECT_EQ(info.limits().max_table_blocks_per_call(), defaults.max_table_blocks_per_call);
  EXPECT_EQ(
      std::vector<std::string>(info.supported_scalings().begin(), info.supported_scalings().end()),
      (std::vector<std::string>{"none", "linear", "dynamic", "yarn", "llama3", "longrope",
                                "proportional", "dynamic_alpha", "ntk", "deepseek_yarn"}));
  EXPECT_EQ(
      std::vector<std::string>(info.supported_dtypes().begin(), info.supported_dtypes().end()),
      (std::vector<std::string>{"FLOAT32", "FLOAT16", "BFLOAT16"}));
  EXPECT_EQ(std::vector<std::string>(info.supported_output_dtypes().begin(),
                                     info.supported_output_dtypes().end()),
            (std::vector<std::string>{"FLOAT32", "FLOAT16", "BFLOAT16", "FLOAT8_E4M3FN",
                                      "FLOAT8_E5M2"}));
  // Every AttentionResult the wire defines but UNSPECIFIED (which is
  // refused), and the request's mask and transform fields by name.
  std::vector<std::string> wire_results;
  const google::protobuf::EnumDescriptor* results = v1::AttentionResult_descriptor();
  for (int i = 0; i < results->value_count(); ++i) {
    if (results->value(i)->number() != 0) wire_results.push_back(results->value(i)->name());
  }
  EXPECT_EQ(std::vector<std::string>(info.supported_attention_results().begin(),
                                     info.supported_attention_results().end()),
            wire_results);
  EXPECT_EQ(wire_results, (std::vector<std::string>{"SCORES", "OUTPUT", "LSE", "TOP_K",
                                                    "KEY_MASS", "SCORE_ROWS"}));
  EXPECT_EQ(std::vector<std::string>(info.supported_attention_masks().begin(),
                                     info.supported_attention_masks().end()),
            (std::vector<std::string>{"causal", "window_left", "window_right", "chunk_size"}));
  EXPECT_EQ(std::vector<std::string>(info.supported_attention_transforms().begin(),
                                     info.supported_attention_transforms().end()),
            (std::vector<std::string>{"softcap", "alibi_slopes", "sinks"}));
  // Each advertised name is a field of AttentionScoresRequest.
  const google::protobuf::Descriptor* request = v1::AttentionScoresRequest::descriptor();
  for (const std::string& name : info.supported_attention_masks()) {
    EXPECT_NE(request->FindFieldByName(name), nullptr) << name;
  }
  for (const std::string& name : info.supported_attention_transforms()) {
    EXPECT_NE(request->FindFieldByName(name), nullptr) << name;
  }
}

// ---- Echo (bench only) -------------------------------------------------------------------

TEST_F(ServiceTest, EchoReturnsThePayloadWhenEnabled) {
  auto echo = bench::v1::EchoService::NewStub(channel_);
  bench::v1::EchoRequest request;
  request.set_dtype(v1::FLOAT16);
  request.add_shape(3);
  request.set_data(std::string("\x01\x02\x03\x04\x05\x06", 6));
  bench::v1::EchoResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(GrpcStatusIs(echo->Echo(&context, request, &response), grpc::StatusCode::OK, ""));
  EXPECT_EQ(response.dtype(), v1::FLOAT16);
  EXPECT_EQ(response.shape_size(), 1);
  EXPECT_EQ(response.data(), request.data());
}

}  // namespace
}  // namespace test
}  // namespace rope
