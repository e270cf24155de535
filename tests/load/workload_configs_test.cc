// ropeload --configs=N: the request variants (payload x config), the config
// field appended to each payload's bytes on the wire, and its usage errors.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "client/flags/flag_set.h"
#include "client/load/load_flags.h"
#include "client/load/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace load {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

absl::StatusOr<Workload> Build(const std::vector<std::string>& args) {
  client::FlagSet flags;
  AddLoadFlags(&flags);
  absl::Status parsed = flags.Parse(ExpandShortFlags(args));
  if (!parsed.ok()) return parsed;
  return WorkloadFromFlags(flags);
}

// What request variant `v` of `w` puts on the wire, parsed as the server does.
template <typename Request>
Request OnTheWire(const Workload& w, int v) {
  Request parsed;
  const std::string bytes = w.payload(v).SerializeAsString() + std::string(w.config_field(v));
  EXPECT_TRUE(parsed.ParseFromString(bytes));
  return parsed;
}

const std::vector<std::string> kRotateFlags = {
    "--random_q_shape=1,2,2,16", "--random_k_shape=1,2,1,16", "--theta=500000",
    "--max_len=2048",            "--rope-scaling=linear",     "--factor=4",
    "--payloads=2"};

std::vector<std::string> With(std::vector<std::string> args, const std::string& extra) {
  args.push_back(extra);
  return args;
}

TEST(WorkloadConfigsTest, OneConfigByDefaultKeepsTheConfigInEachPayload) {
  absl::StatusOr<Workload> w = Build(kRotateFlags);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->config_fields.empty());
  EXPECT_EQ(w->variants(), 2);
  for (int v = 0; v < 2; ++v) {
    EXPECT_TRUE(MessageDifferencer::Equals(*w->Request(v), *w->requests[v])) << v;
    EXPECT_TRUE(w->config_field(v).empty());
  }
}

TEST(WorkloadConfigsTest, VariantVSendsPayloadVModPWithThetaPlusVDivP) {
  absl::StatusOr<Workload> one = Build(kRotateFlags);
  absl::StatusOr<Workload> w = Build(With(kRotateFlags, "--configs=3"));
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->config_fields.size(), 3u);
  ASSERT_EQ(w->variants(), 6);
  for (int v = 0; v < w->variants(); ++v) {
    // The one-config request of the same payload, with theta moved by v / P.
    v1::RotateRequest want = static_cast<const v1::RotateRequest&>(*one->requests[v % 2]);
    want.mutable_config()->set_theta(500000 + v / 2);
    std::string diff;
    MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differencer.Compare(OnTheWire<v1::RotateRequest>(*w, v), want))
        << "variant " << v << ": " << diff;
    EXPECT_TRUE(MessageDifferencer::Equals(*w->Request(v), want)) << "variant " << v;
  }
  // The payloads themselves carry no config (it travels in the field).
  EXPECT_FALSE(static_cast<const v1::RotateRequest&>(*w->requests[0]).has_config());
  EXPECT_EQ(w->request_bytes, static_cast<int64_t>(w->Request(0)->ByteSizeLong()));
  EXPECT_THAT(w->config_description, HasSubstr("3 configs: theta 500000 + j, j = 0..2"));
}

TEST(WorkloadConfigsTest, ThetaZeroCountsAsTheDefaultTenThousand) {
  absl::StatusOr<Workload> w = Build({"--random_q_shape=1,1,1,8", "--theta=0", "--configs=2"});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(OnTheWire<v1::RotateRequest>(*w, 0).config().theta(), 10000);
  EXPECT_EQ(OnTheWire<v1::RotateRequest>(*w, 1).config().theta(), 10001);
}

TEST(WorkloadConfigsTest, EveryRpcCarriesTheChurnedConfigAndKeepsItsOwnFields) {
  absl::StatusOr<Workload> scores =
      Build({"--workload=scores", "--random_q_shape=1,4,2,16", "--random_k_shape=1,4,2,16",
             "--causal", "--configs=4"});
  ASSERT_TRUE(scores.ok()) << scores.status();
  const auto s = OnTheWire<v1::AttentionScoresRequest>(*scores, 3);
  EXPECT_EQ(s.config().theta(), 10003);
  EXPECT_EQ(s.config().head_dim(), 16u);
  EXPECT_TRUE(s.causal());
  EXPECT_EQ(s.q().shape_size(), 4);
  EXPECT_EQ(s.results_size(), 0) << "without --results: today's request";

  absl::StatusOr<Workload> attend =
      Build({"--workload=scores", "--random_q_shape=1,4,2,16", "--random_k_shape=1,4,2,16",
             "--random_v_shape=1,4,2,8", "--results=output,LSE"});
  ASSERT_TRUE(attend.ok()) << attend.status();
  const auto a = OnTheWire<v1::AttentionScoresRequest>(*attend, 0);
  ASSERT_EQ(a.results_size(), 2);
  EXPECT_EQ(a.results(0), v1::OUTPUT);
  EXPECT_EQ(a.results(1), v1::LSE);
  EXPECT_FALSE(Build({"--workload=scores", "--random_q_shape=1,4,2,16",
                      "--random_k_shape=1,4,2,16", "--results=output,weights"})
                   .ok());

  absl::StatusOr<Workload> table =
      Build({"--workload=table", "--head_dim=32", "--table_start=5", "--configs=2"});
  ASSERT_TRUE(table.ok()) << table.status();
  const auto t = OnTheWire<v1::GetTableRequest>(*table, 1);
  EXPECT_EQ(t.config().theta(), 10001);
  EXPECT_EQ(t.config().head_dim(), 32u);
  EXPECT_EQ(t.start(), 5);
}

TEST(WorkloadConfigsTest, AConfigJsonTravelsInEveryRequestAndRefusesThetaChurn) {
  const std::string path = ::testing::TempDir() + "/ropeload-config.json";
  {
    std::ofstream out(path);
    out << R"({"rope_theta": 500000, "head_dim": 16, "rope_scaling": {"rope_type": "linear",
              "factor": 4.0}})";
  }
  absl::StatusOr<Workload> w =
      Build({"--random_q_shape=1,2,2,16", "--hf_config=" + path, "--hf_layer_type=full_attention",
             "--max_len=2048", "--payloads=2"});
  ASSERT_TRUE(w.ok()) << w.status();
  const auto r = OnTheWire<v1::RotateRequest>(*w, 1);
  EXPECT_THAT(r.config().hf_config_json(), HasSubstr("\"rope_theta\": 500000"));
  EXPECT_EQ(r.config().hf_layer_type(), "full_attention");
  EXPECT_EQ(r.config().theta(), 0);  // the JSON gives it
  EXPECT_EQ(r.config().head_dim(), 16u);
  EXPECT_EQ(r.config().max_len(), 2048u);
  absl::StatusOr<Workload> churn =
      Build({"--random_q_shape=1,2,2,16", "--hf_config=" + path, "--configs=2"});
  ASSERT_FALSE(churn.ok());
  EXPECT_TRUE(client::IsUsageError(churn.status()));
  EXPECT_THAT(std::string(churn.status().message()),
              HasSubstr("--configs above 1 does not go with --hf_config"));
}

TEST(WorkloadConfigsTest, AxialConfigsAndGridPositionsTravelInTheRotatePayload) {
  absl::StatusOr<Workload> w =
      Build({"--random_q_shape=1,9,2,128", "--theta=10000", "--axial_dims=16,56,56",
             "--grid=3x1x1/step=0,0,0;1x2x3"});
  ASSERT_TRUE(w.ok()) << w.status();
  const auto& rotate = static_cast<const v1::RotateRequest&>(*w->requests[0]);
  ASSERT_EQ(rotate.config().axial().axes_size(), 3);
  EXPECT_EQ(rotate.config().axial().axes(2).dim(), 56u);
  ASSERT_EQ(rotate.build_positions().grids_size(), 2);
  EXPECT_EQ(rotate.build_positions().grids(1).size(2), 3);
  EXPECT_THAT(w->config_description, HasSubstr("axial[16,56,56]"));
  absl::StatusOr<Workload> fractional =
      Build({"--random_q_shape=1,2,1,8", "--fractional_positions=0.5,1.5"});
  ASSERT_TRUE(fractional.ok()) << fractional.status();
  EXPECT_EQ(static_cast<const v1::RotateRequest&>(*fractional->requests[0])
                .fractional_positions(1),
            1.5);
  absl::StatusOr<Workload> both = Build({"--random_q_shape=1,2,1,8", "--grid=2", "--start_pos=3"});
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("--start_pos does not go with --grid"));
}

TEST(WorkloadConfigsTest, RefusesACountOutOfRangeNamingTheFlag) {
  for (const std::string value : {"0", "-3", "100001"}) {
    absl::StatusOr<Workload> w = Build({"--random_q_shape=1,1,1,8", "--configs=" + value});
    ASSERT_FALSE(w.ok()) << value;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(client::IsUsageError(w.status()));
    EXPECT_THAT(std::string(w.status().message()),
                HasSubstr("--configs=" + value + ": must be in [1, 100000]"));
  }
}

}  // namespace
}  // namespace load
}  // namespace rope
