// RopeClient against real ropeserve processes (CPU backend) on 127.0.0.1
// with ports chosen by the kernel: every RPC, error codes kept end to end,
// round_robin over two servers, and failover when one of them stops.
#include "client/rope_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/hf_config_defaults.h"
#include "client/shared_region.h"
#include "client/tensor_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.grpc.pb.h"
#include "tests/support/server_process.h"
#include "tests/support/wait_until.h"

namespace rope {
namespace client {
namespace {

using ::rope::test::ServerProcess;
using ::rope::test::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kStopTimeout = absl::Seconds(30);

// `host`: TwoServerTest's servers take 127.0.0.4: its client keeps
// reconnecting to the port of the server it stops, and a server of another
// test given that port by the kernel would answer it (and count calls that
// are not its own).
absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
    const std::string& host = "127.0.0.1") {
  return ServerProcess::Start(ROPESERVE_PATH,
                              {absl::StrCat("--listen=", host, ":0"), "--backend=cpu",
                               "--cpu_threads=1", "--work_threads=2",
                               "--shutdown_grace_period=5s"},
                              kStartTimeout);
}

ClientOptions TestOptions() {
  ClientOptions options;
  options.deadline = absl::Seconds(20);
  return options;
}

std::unique_ptr<RopeClient> MustCreate(const std::string& target) {
  absl::StatusOr<std::unique_ptr<RopeClient>> client = RopeClient::Create(target, TestOptions());
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

v1::RopeConfig Config(uint32_t head_dim, uint32_t rotary_dim, v1::Layout layout,
                      double theta = 10000, uint32_t max_len = 256) {
  v1::RopeConfig config;
  config.set_theta(theta);
  config.set_head_dim(head_dim);
  config.set_rotary_dim(rotary_dim);
  config.set_max_len(max_len);
  config.set_layout(layout);
  return config;
}

// RoPE in double precision, straight from the formulas in docs/design.md:
// x is [B,S,H,D] float32 values; token s sits at start_pos + s.
std::vector<double> ReferenceRotate(const std::vector<float>& x, int64_t batch, int64_t seq,
                                    int64_t heads, int64_t dim, const v1::RopeConfig& config,
                                    int64_t start_pos, bool inverse) {
  const int64_t r = config.rotary_dim() == 0 ? dim : config.rotary_dim();
  std::vector<double> out(x.begin(), x.end());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = ((b * seq + s) * heads + h) * dim;
        for (int64_t i = 0; i < r / 2; ++i) {
          const double inv_freq = std::pow(config.theta(), -2.0 * i / r);
          const double angle = (inverse ? -1.0 : 1.0) * (start_pos + s) * inv_freq;
          const bool interleaved = config.layout() != v1::HALF;
          const int64_t f0 = interleaved ? 2 * i : i;
          const int64_t f1 = interleaved ? 2 * i + 1 : i + r / 2;
          const double x0 = x[base + f0], x1 = x[base + f1];
          out[base + f0] = x0 * std::cos(angle) - x1 * std::sin(angle);
          out[base + f1] = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
      }
    }
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

// One server shared by the tests that need just one.
class RopeClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer();
    if (server.ok()) {
      server_ = server->release();
    } else {
      start_error_ = new std::string(server.status().ToString());
    }
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop(kStopTimeout);
      EXPECT_TRUE(code.ok()) << code.status();
      if (code.ok()) {
        EXPECT_EQ(*code, 0) << server_->Output();
      }
    }
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << (start_error_ != nullptr ? *start_error_ : "no server");
    client_ = MustCreate(server_->address());
    ASSERT_NE(client_, nullptr);
  }

  static ServerProcess* server_;
  static std::string* start_error_;
  std::unique_ptr<RopeClient> client_;
};

ServerProcess* RopeClientTest::server_ = nullptr;
std::string* RopeClientTest::start_error_ = nullptr;

TEST_F(RopeClientTest, HealthIsServing) {
  absl::StatusOr<RopeClient::ServingStatus> status = client_->Health();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(ServingStatusName(*status), "SERVING");
}

TEST_F(RopeClientTest, GetServerInfoDescribesCpuBackend) {
  absl::StatusOr<v1::ServerInfo> info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backend(), "cpu");
  EXPECT_FALSE(info->version().empty());
  EXPECT_GT(info->limits().max_message_bytes(), 0);
  EXPECT_GT(info->limits().max_len_cap(), 0u);
}

struct RotateCase {
  v1::Layout layout;
  uint32_t rotary_dim;
  v1::DType dtype;
};

TEST_F(RopeClientTest, RotateMatchesReferenceForLayoutsAndGqa) {
  const int64_t B = 2, S = 5, Hq = 4, Hkv = 2, D = 8;
  const std::vector<float> q = RandomFloats(B * S * Hq * D, 11, Distribution::kNormal);
  const std::vector<float> k = RandomFloats(B * S * Hkv * D, 12, Distribution::kNormal);
  for (const RotateCase& c : std::vector<RotateCase>{{v1::INTERLEAVED, 0, v1::FLOAT32},
                                                     {v1::HALF, 0, v1::FLOAT32},
                                                     {v1::HALF, 4, v1::FLOAT32}}) {
    SCOPED_TRACE(absl::StrCat("layout ", c.layout, " rotary_dim ", c.rotary_dim));
    v1::RotateRequest request;
    *request.mutable_config() = Config(D, c.rotary_dim, c.layout);
    *request.mutable_q() = *MakeTensor(q, {B, S, Hq, D}, c.dtype);
    *request.mutable_k() = *MakeTensor(k, {B, S, Hkv, D}, c.dtype);
    request.set_start_pos(7);
    absl::StatusOr<v1::RotateResponse> response = client_->Rotate(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->q().dtype(), c.dtype);
    EXPECT_THAT(response->q().shape(), ::testing::ElementsAre(B, S, Hq, D));
    EXPECT_THAT(response->k().shape(), ::testing::ElementsAre(B, S, Hkv, D));
    ExpectNear(*TensorToFloats(response->q()),
               ReferenceRotate(q, B, S, Hq, D, request.config(), 7, false), 1e-5);
    ExpectNear(*TensorToFloats(response->k()),
               ReferenceRotate(k, B, S, Hkv, D, request.config(), 7, false), 1e-5);
  }
}

TEST_F(RopeClientTest, RotateFloat16StaysWithinHalfPrecision) {
  const int64_t S = 6, H = 2, D = 16;
  const std::vector<float> q = RandomFloats(S * H * D, 3, Distribution::kUniform);
  v1::RotateRequest request;
  *request.mutable_config() = Config(D, 0, v1::INTERLEAVED);
  *request.mutable_q() = *MakeTensor(q, {S, H, D}, v1::FLOAT16);  // rank 3: B = 1
  request.set_start_pos(3);
  absl::StatusOr<v1::RotateResponse> response = client_->Rotate(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->q().dtype(), v1::FLOAT16);
  // The server rotates the float16-rounded inputs; |values| < 1.5, so the
  // float16 result is within a few 2^-11 of the reference.
  std::vector<float> rounded = *TensorToFloats(request.q());
  ExpectNear(*TensorToFloats(response->q()),
             ReferenceRotate(rounded, 1, S, H, D, request.config(), 3, false), 2e-3);
}

TEST_F(RopeClientTest, RotateWithExplicitPositionsAndInverseRoundTrips) {
  const int64_t S = 4, H = 1, D = 8;
  const std::vector<float> q = RandomFloats(S * H * D, 5, Distribution::kNormal);
  v1::RotateRequest request;
  *request.mutable_config() = Config(D, 0, v1::HALF);
  *request.mutable_q() = *MakeTensor(q, {1, S, H, D}, v1::FLOAT32);
  for (int64_t p : {0, 9, 3, 200}) request.add_positions(p);
  absl::StatusOr<v1::RotateResponse> forward = client_->Rotate(request);
  ASSERT_TRUE(forward.ok()) << forward.status();
  // Token 1 sits at position 9: compare one head against the reference.
  std::vector<float> token1(q.begin() + D, q.begin() + 2 * D);
  std::vector<double> want = ReferenceRotate(token1, 1, 1, 1, D, request.config(), 9, false);
  std::vector<float> got = *TensorToFloats(forward->q());
  ExpectNear(std::vector<float>(got.begin() + D, got.begin() + 2 * D), want, 1e-5);

  *request.mutable_q() = forward->q();
  request.set_inverse(true);
  absl::StatusOr<v1::RotateResponse> back = client_->Rotate(request);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectNear(*TensorToFloats(back->q()), std::vector<double>(q.begin(), q.end()), 1e-5);
}

TEST_F(RopeClientTest, RotateStreamRepliesInOrder) {
  std::vector<v1::RotateRequest> requests;
  for (int i = 0; i < 4; ++i) {
    v1::RotateRequest request;
    *request.mutable_config() = Config(8, 0, v1::INTERLEAVED);
    *request.mutable_q() =
        *MakeTensor(RandomFloats(2 * 3 * 8, 100 + i, Distribution::kNormal), {1, 2, 3, 8},
                    v1::FLOAT32);
    request.set_start_pos(10 * i);
    requests.push_back(request);
  }
  absl::StatusOr<std::vector<v1::RotateResponse>> replies = client_->RotateStream(requests);
  ASSERT_TRUE(replies.ok()) << replies.status();
  ASSERT_EQ(replies->size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<v1::RotateResponse> unary = client_->Rotate(requests[i]);
    ASSERT_TRUE(unary.ok()) << unary.status();
    EXPECT_EQ((*replies)[i].q().data(), unary->q().data()) << "reply " << i;
  }
}

TEST_F(RopeClientTest, RotateStreamEndsWithTheBadRequestsStatus) {
  std::vector<v1::RotateRequest> requests(3);
  for (v1::RotateRequest& request : requests) {
    *request.mutable_config() = Config(8, 0, v1::INTERLEAVED);
    *request.mutable_q() = *MakeTensor(std::vector<float>(8, 1.0f), {1, 1, 1, 8}, v1::FLOAT32);
  }
  requests[1].set_start_pos(1000);  // past max_len 256
  absl::StatusOr<std::vector<v1::RotateResponse>> replies = client_->RotateStream(requests);
  EXPECT_EQ(replies.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(replies.status().message()), HasSubstr("1000"));
}

TEST_F(RopeClientTest, GetTableMatchesFrequencies) {
  v1::GetTableRequest request;
  *request.mutable_config() = Config(8, 0, v1::INTERLEAVED, 10000, 64);
  request.set_start(5);
  request.set_count(3);
  absl::StatusOr<v1::GetTableResponse> table = client_->GetTable(request);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->start(), 5);
  EXPECT_THAT(table->cos().shape(), ::testing::ElementsAre(3, 4));
  EXPECT_THAT(table->sin().shape(), ::testing::ElementsAre(3, 4));
  ASSERT_EQ(table->inv_freq_size(), 4);
  const std::vector<float> cos = *TensorToFloats(table->cos());
  const std::vector<float> sin = *TensorToFloats(table->sin());
  for (int i = 0; i < 4; ++i) {
    const double inv_freq = std::pow(10000.0, -2.0 * i / 8);
    EXPECT_NEAR(table->inv_freq(i), inv_freq, 1e-15);
    for (int row = 0; row < 3; ++row) {
      EXPECT_NEAR(cos[row * 4 + i], std::cos((5 + row) * inv_freq), 1e-7);
      EXPECT_NEAR(sin[row * 4 + i], std::sin((5 + row) * inv_freq), 1e-7);
    }
  }
}

TEST_F(RopeClientTest, ResolveConfigDerivesAConfigJson) {
  v1::RopeConfig config;
  config.set_hf_config_json(R"({"rope_theta": 150000, "head_dim": 64,
      "max_position_embeddings": 131072,
      "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                       "original_max_position_embeddings": 4096, "rope_type": "yarn",
                       "truncate": false}})");
  config.set_max_len(4096);
  absl::StatusOr<v1::ResolvedConfig> resolved = client_->ResolveConfig(config);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->config().theta(), 150000);
  EXPECT_EQ(resolved->config().head_dim(), 64u);
  ASSERT_EQ(resolved->config().scaling_case(), v1::RopeConfig::kYarn);
  EXPECT_FALSE(resolved->config().yarn().truncate());
  EXPECT_EQ(resolved->inv_freq_size(), 32);
  EXPECT_NEAR(resolved->attention_factor(), 0.1 * std::log(32.0) + 1, 1e-15);
  EXPECT_THAT(resolved->table_key(), HasSubstr("truncate=false"));

  config.set_hf_config_json("{\"rope_theta\": \"big\"}");
  resolved = client_->ResolveConfig(config);
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(resolved.status().message()),
              HasSubstr("hf_config_json: rope_theta is \"big\": must be a number"));
}

TEST_F(RopeClientTest, RopectlResolvePrintsTheDerivedConfigAndItsFlags) {
  const std::string path = ::testing::TempDir() + "/gemma-like-config.json";
  {
    std::ofstream out(path);
    out << R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
        "hidden_size": 3840, "num_attention_heads": 16,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})";
  }
  std::ostringstream out, err;
  int code = RunRopectl({"resolve", "--target=" + server_->address(), "--hf_config=" + path,
                         "--max_len=8192"},
                        out, err);
  ASSERT_EQ(code, kExitOk) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("theta=1e+06 head_dim=256 rotary_dim=256 max_len=8192"));
  EXPECT_THAT(out.str(), HasSubstr("scaling=linear(factor=8)"));
  // Gemma rotates halves in transformers: the server's default layout.
  EXPECT_THAT(out.str(), HasSubstr("from the config.json: layout=half (the server's hf_layout "
                                   "for model_type gemma3) max_len=8192 (--max_len)"));
  EXPECT_THAT(out.str(), HasSubstr("as flags: --theta=1000000 --head_dim=256 --rotary_dim=256 "
                                   "--max_len=8192 --layout=half --rope_scaling=linear "
                                   "--factor=8"));
  EXPECT_THAT(out.str(), HasSubstr("inv_freq[128]=[0.125, "));
  EXPECT_THAT(out.str(), HasSubstr("table_key: theta=1000000 rotary_dim=256 max_len=8192 "
                                   "scaling=linear(factor=8)"));
  std::ostringstream sliding_out, sliding_err;
  code = RunRopectl({"resolve", "--target=" + server_->address(), "--hf_config=" + path,
                     "--hf_layer_type=sliding_attention"},
                    sliding_out, sliding_err);
  ASSERT_EQ(code, kExitOk) << sliding_err.str();
  EXPECT_THAT(sliding_out.str(), HasSubstr("as flags: --theta=10000 --head_dim=256"));
  EXPECT_THAT(sliding_out.str(), Not(HasSubstr("--rope_scaling")));
  // No max_position_embeddings in the file: the server gives
  // Gemma3TextConfig's 131072.
  EXPECT_THAT(sliding_out.str(),
              HasSubstr("max_len=131072 (the server's max_position_embeddings for model_type "
                        "gemma3)"));
}

TEST_F(RopeClientTest, RopectlTakesLayoutAndMaxLenFromTheConfigJsonUnlessGiven) {
  const std::string dir = ::testing::TempDir() + "/glm-like-model";
  ASSERT_TRUE(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "glm4", "rope_theta": 10000, "head_dim": 64,
             "partial_rotary_factor": 0.5, "max_position_embeddings": 2048})";
  const std::string target = "--target=" + server_->address();
  std::ostringstream out, err;
  ASSERT_EQ(RunRopectl({"rotate", target, "--hf_config=" + dir, "--random_q_shape=1,3,2,64",
                        "--start_pos=2040", "--save_inputs=" + dir + "/inputs"},
                       out, err),
            kExitOk)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("from the config.json: layout=interleaved (the server's "
                                   "hf_layout for model_type glm4) max_len=2048 (the server's "
                                   "max_position_embeddings for model_type glm4)"));
  EXPECT_THAT(out.str(), HasSubstr("saved q to " + dir + "/inputs/q.npy (<f4)"));
  // The saved input, sent again, gives the same reply; --layout overrides.
  std::ostringstream again, again_err;
  ASSERT_EQ(RunRopectl({"rotate", target, "--hf_config=" + dir, "--q=" + dir + "/inputs/q.npy",
                        "--start_pos=2040", "--layout=half"},
                       again, again_err),
            kExitOk)
      << again_err.str();
  EXPECT_THAT(again.str(), HasSubstr("layout=half (--layout) max_len=2048"));
  // q's last dim against the config.json's head_dim, said in ropectl's terms.
  std::ostringstream bad, bad_err;
  EXPECT_EQ(RunRopectl({"rotate", target, "--hf_config=" + dir, "--random_q_shape=1,3,2,32"},
                       bad, bad_err),
            kExitFailure);
  EXPECT_THAT(bad_err.str(), HasSubstr("q's last dimension is 32 but --hf_config=" + dir +
                                       " gives head_dim 64: send q (and k) with last dimension "
                                       "64"));
  EXPECT_THAT(bad_err.str(), Not(HasSubstr("leave config.head_dim 0")));
}

// ropectl takes layout and max_len from the server's ResolveConfig for
// published configs of each kind: plain (Llama), M-RoPE (Qwen2-VL),
// gpt-oss (YaRN), a NoPE layer (Llama 4's layer 3).
TEST_F(RopeClientTest, RopectlTakesTheServersDefaultsForPublishedConfigs) {
  struct Case {
    const char* fixture;
    std::vector<std::string> extra;
    const char* note;
  };
  const std::string dir = std::string(ROPE_SOURCE_DIR) + "/tests/fixtures/hf_configs/";
  for (const Case& c : std::vector<Case>{
           {"Llama-3.1-8B-Instruct", {},
            "layout=half (the server's hf_layout for model_type llama) max_len=131072 (the "
            "server's max_position_embeddings for model_type llama)"},
           {"Qwen2-VL-7B-Instruct", {},
            "layout=half (the server's hf_layout for model_type qwen2_vl) max_len=32768"},
           {"gpt-oss-20b", {},
            "layout=half (the server's hf_layout for model_type gpt_oss) max_len=131072"},
           {"Llama-4-Scout-17B-16E-Instruct", {"--hf_layer_index=3"},
            "layout=interleaved (the server's hf_layout for model_type llama4) "
            "max_len=10485760"}}) {
    std::vector<std::string> args = {"resolve", "--target=" + server_->address(),
                                     "--hf_config=" + dir + c.fixture + ".json"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    std::ostringstream out, err;
    ASSERT_EQ(RunRopectl(args, out, err), kExitOk) << c.fixture << ": " << err.str();
    EXPECT_THAT(out.str(), HasSubstr(absl::StrCat("from the config.json: ", c.note)))
        << c.fixture;
  }
  // The NoPE layer rotates nothing, with the defaults the server gave.
  std::ostringstream out, err;
  ASSERT_EQ(RunRopectl({"rotate", "--target=" + server_->address(),
                        "--hf_config=" + dir + "Llama-4-Scout-17B-16E-Instruct.json",
                        "--hf_layer_index=3", "--random_q_shape=1,2,1,128"},
                       out, err),
            kExitOk)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("layout=interleaved (the server's hf_layout"));
}

TEST_F(RopeClientTest, HfConfigWithoutMaxPositionEmbeddingsNeedsMaxLen) {
  const std::string path = ::testing::TempDir() + "/rope-keys-only.json";
  std::ofstream(path) << R"({"model_type": "llama", "rope_theta": 10000, "head_dim": 64})";
  std::ostringstream out, err;
  EXPECT_EQ(RunRopectl({"resolve", "--target=" + server_->address(), "--hf_config=" + path},
                       out, err),
            kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("has no max_position_embeddings: give --max_len"));
  // The library says it in its own terms.
  client::HfConfigOverrides overrides;
  absl::StatusOr<v1::RopeConfig> config =
      client::RopeConfigFromHfConfig(*client_, R"({"model_type": "llama", "rope_theta": 10000,
                                                  "head_dim": 64})",
                                     overrides);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("has no max_position_embeddings (the default table length): give max_len"));
  overrides.max_len = 64;
  config = client::RopeConfigFromHfConfig(
      *client_, R"({"model_type": "glm", "rope_theta": 10000, "head_dim": 64})", overrides);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->layout(), v1::INTERLEAVED);
  EXPECT_EQ(config->max_len(), 64u);
}

// A server older than ResolvedConfig.hf_layout leaves it unset: the client
// cannot know the layout and says how to go on.
TEST(HfConfigDefaultsTest, AReplyWithoutHfLayoutAsksForLayoutAndMaxLen) {
  v1::RopeConfig config;
  config.set_hf_config_json(R"({"model_type": "llama", "max_position_embeddings": 64})");
  absl::StatusOr<client::HfConfigDefaults> old =
      client::HfConfigDefaultsFromResolved(v1::ResolvedConfig(), config);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(old.status().message()),
              HasSubstr("has no hf_layout (a ropeserve older than ResolvedConfig.hf_layout)"));
  EXPECT_THAT(std::string(old.status().message()), HasSubstr("--layout and --max_len"));
  v1::ResolvedConfig reply;
  reply.set_hf_layout(v1::HALF);
  absl::StatusOr<client::HfConfigDefaults> current =
      client::HfConfigDefaultsFromResolved(reply, config);
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(current->layout, v1::HALF);
  EXPECT_FALSE(current->max_position_embeddings.has_value());  // the reply's 0
}

TEST_F(RopeClientTest, RopectlInfoShowsEveryLimit) {
  std::ostringstream out, err;
  ASSERT_EQ(RunRopectl({"info", "--target=" + server_->address()}, out, err), kExitOk) << err.str();
  const google::protobuf::Descriptor* limits = v1::ServerLimits::descriptor();
  for (int i = 0; i < limits->field_count(); ++i) {
    EXPECT_THAT(out.str(), HasSubstr(" " + limits->field(i)->name() + "=")) << out.str();
  }
}

TEST_F(RopeClientTest, AttentionScoresSelfCheckVector) {
  // docs/design.md: theta 100, head_dim 4 -> inv_freq (1, 0.1); q = k = (1,0,1,0)
  // at m = 5, n = 7 -> q'.k' = cos(2) + cos(0.2).
  v1::AttentionScoresRequest request;
  *request.mutable_config() = Config(4, 0, v1::INTERLEAVED, 100, 16);
  *request.mutable_q() = *MakeTensor({1, 0, 1, 0}, {1, 1, 1, 4}, v1::FLOAT32);
  *request.mutable_k() = *MakeTensor({1, 0, 1, 0}, {1, 1, 1, 4}, v1::FLOAT32);
  request.set_q_start_pos(5);
  request.set_k_start_pos(7);
  request.set_scale(1.0);
  absl::StatusOr<v1::AttentionScoresResponse> response = client_->AttentionScores(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->scores().shape(), ::testing::ElementsAre(1, 1, 1, 1));
  EXPECT_NEAR((*TensorToFloats(response->scores()))[0], std::cos(2.0) + std::cos(0.2), 1e-6);
}

TEST_F(RopeClientTest, AttentionScoresCausalSoftmaxRowsSumToOne) {
  const int64_t S = 4, Hq = 2, Hkv = 1, D = 8;
  v1::AttentionScoresRequest request;
  *request.mutable_config() = Config(D, 0, v1::HALF);
  *request.mutable_q() =
      *MakeTensor(RandomFloats(S * Hq * D, 21, Distribution::kNormal), {1, S, Hq, D}, v1::FLOAT32);
  *request.mutable_k() = *MakeTensor(RandomFloats(S * Hkv * D, 22, Distribution::kNormal),
                                     {1, S, Hkv, D}, v1::FLOAT32);
  request.set_causal(true);
  request.set_softmax(true);
  absl::StatusOr<v1::AttentionScoresResponse> response = client_->AttentionScores(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->scores().shape(), ::testing::ElementsAre(1, Hq, S, S));
  const std::vector<float> p = *TensorToFloats(response->scores());
  for (int64_t h = 0; h < Hq; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) {
        const float v = p[(h * S + i) * S + j];
        if (j > i) {
          EXPECT_EQ(v, 0.0f) << "masked key " << j << " of query " << i;
        }
        sum += v;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

TEST_F(RopeClientTest, ServerErrorsKeepTheirCodeAndMessage) {
  v1::RotateRequest odd;
  *odd.mutable_config() = Config(7, 0, v1::INTERLEAVED);
  *odd.mutable_q() = *MakeTensor(std::vector<float>(7, 1.0f), {1, 1, 1, 7}, v1::FLOAT32);
  absl::StatusOr<v1::RotateResponse> a = client_->Rotate(odd);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("head_dim"));

  v1::RotateRequest far;
  *far.mutable_config() = Config(8, 0, v1::INTERLEAVED);
  *far.mutable_q() = *MakeTensor(std::vector<float>(8, 1.0f), {1, 1, 1, 8}, v1::FLOAT32);
  far.set_start_pos(256);  // == max_len
  absl::StatusOr<v1::RotateResponse> b = client_->Rotate(far);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("256"));

  v1::GetTableRequest past;
  *past.mutable_config() = Config(8, 0, v1::INTERLEAVED, 10000, 64);
  past.set_start(60);
  past.set_count(10);
  absl::StatusOr<v1::GetTableResponse> c = client_->GetTable(past);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(RopeClientTest, CpuServerRefusesACudaRegion) {
  absl::StatusOr<v1::RegisterSharedMemoryRequest> request =
      CudaRegionRequest("cuda-kv", std::string(kCudaIpcHandleSize, '\x5a'), 0, 4096);
  ASSERT_TRUE(request.ok()) << request.status();
  absl::Status registered = client_->RegisterSharedMemory(*request);
  EXPECT_EQ(registered.code(), absl::StatusCode::kFailedPrecondition) << registered;
  EXPECT_THAT(std::string(registered.message()), HasSubstr("cuda_ipc_handle"));
  EXPECT_THAT(std::string(registered.message()), HasSubstr("--backend=cuda"));
  absl::StatusOr<v1::SharedMemoryStatusResponse> status = client_->SharedMemoryStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->regions_size(), 0);
}

TEST_F(RopeClientTest, DeadlineIsDeadlineExceeded) {
  // A peer that completes the TCP handshake (the kernel's listen backlog does)
  // but never speaks HTTP/2: the channel never becomes ready, so the call can
  // only end at the client's deadline. Deterministic, unlike a 1 ns deadline
  // racing a fast loopback reply.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0) << strerror(errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
      << strerror(errno);
  ASSERT_EQ(listen(listener, 4), 0) << strerror(errno);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ClientOptions options = TestOptions();
  options.deadline = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<RopeClient>> client =
      RopeClient::Create(absl::StrCat("127.0.0.1:", ntohs(address.sin_port)), options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::ServerInfo> info = (*client)->GetServerInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDeadlineExceeded) << info.status();
  close(listener);
}

// Table-cache lookups (hits + misses) a server has served: each GetTable
// call makes exactly one.
int64_t CacheLookups(RopeClient& direct) {
  absl::StatusOr<v1::ServerInfo> info = direct.GetServerInfo();
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->table_cache().hits() + info->table_cache().misses() : -1;
}

TEST(RopectlHealthTest, ReportsNotServingWhileTheServerDrains) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(
      ROPESERVE_PATH,
      {"--listen=127.0.0.1:0", "--backend=cpu", "--cpu_threads=1", "--shutdown_grace_period=30s"},
      kStartTimeout);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = "--target=" + (*server)->address();
  std::ostringstream out, err;
  ASSERT_EQ(RunRopectl({"health", target}, out, err), kExitOk) << err.str();
  EXPECT_EQ(out.str(), "SERVING\n");

  // An open stream keeps one call in flight, so the drain lasts until it ends.
  auto stub = v1::RopeService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto stream = stub->RotateStream(&context);
  v1::RotateRequest request;
  *request.mutable_config() = Config(8, 0, v1::INTERLEAVED);
  absl::StatusOr<v1::Tensor> q = MakeTensor(std::vector<float>(8, 1.0f), {1, 1, 1, 8}, v1::FLOAT32);
  ASSERT_TRUE(q.ok());
  *request.mutable_q() = *q;
  ASSERT_TRUE(stream->Write(request));
  v1::RotateResponse reply;
  ASSERT_TRUE(stream->Read(&reply));

  (*server)->Signal(SIGTERM);
  ASSERT_TRUE((*server)->WaitForLine("draining", absl::Seconds(30)).has_value());
  out.str("");
  err.str("");
  // The server's own answer, not the channel's "backend unhealthy".
  EXPECT_EQ(RunRopectl({"health", target}, out, err), kExitFailure);
  EXPECT_EQ(out.str(), "NOT_SERVING\n");
  EXPECT_THAT(err.str(), HasSubstr("reports NOT_SERVING"));

  stream->WritesDone();
  stream->Finish();
  absl::StatusOr<int> code = (*server)->Stop(kStopTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << (*server)->Output();
}

class TwoServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer("127.0.0.4");
      ASSERT_TRUE(server.ok()) << server.status();
      servers_[i] = *std::move(server);
      direct_[i] = MustCreate(servers_[i]->address());
      ASSERT_NE(direct_[i], nullptr);
    }
    const std::string target =
        absl::StrCat("ipv4:", servers_[0]->address(), ",", servers_[1]->address());
    balanced_ = MustCreate(target);
    ASSERT_NE(balanced_, nullptr);
  }

  absl::Status GetTable() {
    v1::GetTableRequest request;
    *request.mutable_config() = Config(8, 0, v1::INTERLEAVED, 10000, 32);
    request.set_count(1);
    return balanced_->GetTable(request).status();
  }

  std::unique_ptr<ServerProcess> servers_[2];
  std::unique_ptr<RopeClient> direct_[2];
  std::unique_ptr<RopeClient> balanced_;
};

TEST_F(TwoServerTest, RoundRobinSpreadsCallsOverBothServers) {
  // round_robin sends calls only to READY subchannels; the second one may
  // still be connecting during the first calls (for longer on a busy
  // machine). Warm up, bounded in time, until both servers have seen a
  // call, then measure a fixed batch.
  absl::Status warm_up;
  WaitUntil(
      [&] {
        warm_up = GetTable();
        return !warm_up.ok() || (CacheLookups(*direct_[0]) > 0 && CacheLookups(*direct_[1]) > 0);
      },
      ::rope::test::kSettleTimeout, absl::Milliseconds(1));
  ASSERT_TRUE(warm_up.ok()) << warm_up;
  const int64_t before0 = CacheLookups(*direct_[0]);
  const int64_t before1 = CacheLookups(*direct_[1]);
  ASSERT_GT(before0, 0) << "server 0 never got a call";
  ASSERT_GT(before1, 0) << "server 1 never got a call";
  constexpr int kCalls = 20;
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(GetTable().ok());
  const int64_t got0 = CacheLookups(*direct_[0]) - before0;
  const int64_t got1 = CacheLookups(*direct_[1]) - before1;
  EXPECT_EQ(got0 + got1, kCalls);
  // Round robin over two ready servers alternates; pick_first would give 20/0.
  EXPECT_GE(got0, kCalls / 4);
  EXPECT_GE(got1, kCalls / 4);
}

TEST_F(TwoServerTest, KeepsServingWhenOneServerStops) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(GetTable().ok());
  absl::StatusOr<int> code = servers_[0]->Stop(kStopTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << servers_[0]->Output();
  const int64_t before = CacheLookups(*direct_[1]);
  constexpr int kCalls = 10;
  for (int i = 0; i < kCalls; ++i) {
    absl::Status status = GetTable();
    EXPECT_TRUE(status.ok()) << "call " << i << ": " << status;
  }
  EXPECT_EQ(CacheLookups(*direct_[1]) - before, kCalls);
}

}  // namespace
}  // namespace client
}  // namespace rope
