// Paged tables through a real server: a decode Rotate at position
// 10,000,000 with Llama 4 Scout's published config.json builds one 4096-row
// block (GetServerInfo and /metrics say so) and rotates exactly; positions
// scattered over more blocks than max_table_blocks_per_call are refused
// RESOURCE_EXHAUSTED naming the limit, and the server goes on serving.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/hf_fixtures.h"
#include "tests/service/service_fixture.h"
#include "tests/support/grpc_test_util.h"
#include "tests/unit/test_util.h"

namespace rope {
namespace test {
namespace {

constexpr int64_t kScoutPositions = 10485760;  // max_position_embeddings
constexpr uint32_t kHeadDim = 128;

class PagedTablesServiceTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServerOptions options = DefaultOptions();
    options.metrics_address = "127.0.0.1:0";
    EngineLimits limits;
    limits.table_cache_bytes = 64 << 20;
    StartServer(options, limits);
  }

  static v1::RopeConfig Scout() {
    v1::RopeConfig config;
    config.set_hf_config_json(HfConfigFixture("Llama-4-Scout-17B-16E-Instruct"));
    config.set_max_len(kScoutPositions);
    config.set_layout(v1::HALF);
    return config;
  }

  v1::ServerInfo Info() {
    v1::ServerInfo info;
    grpc::ClientContext context;
    SetDeadline(&context);
    EXPECT_TRUE(GrpcStatusIs(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                             grpc::StatusCode::OK, ""));
    return info;
  }
};

TEST_F(PagedTablesServiceTest, ColdDecodeAt10MillionBuildsOneBlockAndRotatesExactly) {
  v1::ResolvedConfig resolved;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(GrpcStatusIs(stub_->ResolveConfig(&context, Scout(), &resolved),
                             grpc::StatusCode::OK, ""));
  }
  ASSERT_EQ(resolved.inv_freq_size(), kHeadDim / 2);

  constexpr int64_t kPos = 10000000, kHeads = 8;
  v1::RotateRequest request = MakeRotateRequest(1, 1, kHeads, kHeadDim, kScoutPositions, kPos);
  *request.mutable_config() = Scout();
  v1::RotateResponse response;
  ASSERT_TRUE(GrpcStatusIs(Rotate(request, &response), grpc::StatusCode::OK, ""));

  // Independent of the table: each pair (i, i + 64) turned by pos * inv_freq[i]
  // in double (inv_freq as the server resolves Scout's llama3 scaling, which
  // the config tests check against transformers' formulas).
  const std::vector<double> in = Decode(FromProto(request.q()));
  const std::vector<double> out = Decode(FromProto(response.q()));
  const double factor = resolved.attention_factor();
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int i = 0; i < 64; ++i) {
      const double angle = static_cast<double>(kPos) * resolved.inv_freq(i);
      const double c = factor * std::cos(angle), s = factor * std::sin(angle);
      const double x0 = in[h * kHeadDim + i], x1 = in[h * kHeadDim + i + 64];
      EXPECT_NEAR(out[h * kHeadDim + i], x0 * c - x1 * s, 2e-5) << "head " << h << " pair " << i;
      EXPECT_NEAR(out[h * kHeadDim + i + 64], x0 * s + x1 * c, 2e-5)
          << "head " << h << " pair " << i;
    }
  }

  const v1::ServerInfo info = Info();
  EXPECT_EQ(info.limits().max_len_cap(), 1u << 24);
  EXPECT_EQ(info.limits().max_table_blocks_per_call(), 256);
  EXPECT_EQ(info.table_cache().block_rows(), 4096);
  EXPECT_EQ(info.table_cache().blocks_built(), 1);
  EXPECT_EQ(info.table_cache().blocks_resident(), 1);
  EXPECT_EQ(info.table_cache().blocks_evicted(), 0);
  EXPECT_EQ(info.table_cache().bytes(), 4096 * 64 * 2 * 4);  // 2 MiB, not the 5 GiB table

  const std::string page = HttpGetMetrics(server_->metrics_port());
  EXPECT_EQ(MetricValue(page, "rope_table_blocks_built_total"), 1.0);
  EXPECT_EQ(MetricValue(page, "rope_table_blocks_resident"), 1.0);
  EXPECT_EQ(MetricValue(page, "rope_table_blocks_evicted_total"), 0.0);
  EXPECT_EQ(MetricValue(page, "rope_table_cache_bytes"), 4096.0 * 64 * 2 * 4);
}

TEST_F(PagedTablesServiceTest, PositionsOverTooManyBlocksAreRefusedAndTheServerServesOn) {
  constexpr int64_t kSeq = 300;  // 300 positions, one per block: over the 256 allowed
  v1::RotateRequest request = MakeRotateRequest(1, kSeq, 1, kHeadDim, kScoutPositions);
  *request.mutable_config() = Scout();
  for (int64_t s = 0; s < kSeq; ++s) request.add_positions(s * 4096 * 8 + 5);
  v1::RotateResponse response;
  EXPECT_TRUE(GrpcStatusIs(Rotate(request, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "over the server's max_table_blocks_per_call limit of 256"));
  EXPECT_EQ(Info().table_cache().blocks_built(), 0);

  // 64 blocks fit the cap but not the 64 MiB budget (32 blocks of 2 MiB).
  v1::RotateRequest too_big = MakeRotateRequest(1, 64, 1, kHeadDim, kScoutPositions);
  *too_big.mutable_config() = Scout();
  for (int64_t s = 0; s < 64; ++s) too_big.add_positions(s * 4096 * 8 + 5);
  EXPECT_TRUE(GrpcStatusIs(Rotate(too_big, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "the 64 blocks of rows this call touches need 134217728 bytes: over "
                           "the table-cache budget of 67108864 bytes"));

  // Two calls of 24 blocks each: the second evicts 16 of the first's.
  for (int round = 0; round < 2; ++round) {
    v1::RotateRequest fits = MakeRotateRequest(1, 24, 1, kHeadDim, kScoutPositions);
    *fits.mutable_config() = Scout();
    for (int64_t s = 0; s < 24; ++s) fits.add_positions((s + 24 * round) * 4096 * 8 + 5);
    EXPECT_TRUE(GrpcStatusIs(Rotate(fits, &response), grpc::StatusCode::OK, ""))
        << "round " << round;
  }
  const v1::ServerInfo info = Info();
  EXPECT_EQ(info.table_cache().blocks_built(), 48);
  EXPECT_EQ(info.table_cache().blocks_resident(), 32);
  EXPECT_EQ(info.table_cache().blocks_evicted(), 16);
  EXPECT_LE(info.table_cache().bytes(), info.table_cache().budget_bytes());
}

}  // namespace
}  // namespace test
}  // namespace rope
