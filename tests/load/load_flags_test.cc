// ropeload's command line: the LoadSpec it makes, the usage errors it
// refuses, and the payloads built from ropectl's own input and config flags.
#include <string>
#include <vector>

#include "client/flags/flag_set.h"
#include "client/load/load_flags.h"
#include "client/load/ropeload_command.h"
#include "client/load/workload.h"
#include "client/tensor_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace load {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  client::FlagSet flags;
  absl::Status parse;
};

std::unique_ptr<Parsed> Parse(const std::vector<std::string>& args) {
  auto p = std::make_unique<Parsed>();
  AddLoadFlags(&p->flags);
  p->parse = p->flags.Parse(ExpandShortFlags(args));
  return p;
}

absl::StatusOr<LoadSpec> Spec(const std::vector<std::string>& args) {
  std::unique_ptr<Parsed> p = Parse(args);
  if (!p->parse.ok()) return p->parse;
  return LoadSpecFromFlags(p->flags);
}

void ExpectUsageError(const std::vector<std::string>& args, const std::string& substring) {
  absl::StatusOr<LoadSpec> spec = Spec(args);
  ASSERT_FALSE(spec.ok()) << testing::PrintToString(args);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client::IsUsageError(spec.status()));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(substring));
}

TEST(LoadFlagsTest, DefaultIsOneClosedLoopWorkerForTenSeconds) {
  absl::StatusOr<LoadSpec> spec = Spec({});
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->steps.size(), 1u);
  EXPECT_EQ(spec->steps[0].concurrency, 1);
  EXPECT_FALSE(spec->steps[0].open_loop());
  EXPECT_EQ(spec->duration, absl::Seconds(10));
  EXPECT_EQ(spec->requests, 0);
  EXPECT_FALSE(spec->sweep);
}

TEST(LoadFlagsTest, GhzShortFormsAndDashedNamesWork) {
  EXPECT_THAT(ExpandShortFlags({"-c", "8", "-n=100", "-z", "3s", "--rps=1"}),
              ElementsAre("--concurrency", "8", "--requests=100", "--duration", "3s", "--rps=1"));
  absl::StatusOr<LoadSpec> spec = Spec({"-c", "8", "-z", "3s", "--max-p99=20ms"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->steps[0].concurrency, 8);
  EXPECT_EQ(spec->duration, absl::Seconds(3));
  EXPECT_EQ(spec->max_p99, absl::Milliseconds(20));
}

TEST(LoadFlagsTest, ConcurrencyRangeMakesASweep) {
  absl::StatusOr<LoadSpec> spec = Spec({"--concurrency-range=1:8:x2"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->sweep);
  std::vector<int> c;
  for (const StepPlan& s : spec->steps) c.push_back(s.concurrency);
  EXPECT_THAT(c, ElementsAre(1, 2, 4, 8));
}

TEST(LoadFlagsTest, RpsRangeMakesOpenLoopSteps) {
  absl::StatusOr<LoadSpec> spec = Spec({"--rps_range=100:300:100", "--poisson"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->steps.size(), 3u);
  EXPECT_TRUE(spec->steps[2].open_loop());
  EXPECT_EQ(spec->steps[2].rps, 300);
  EXPECT_TRUE(spec->poisson);
}

TEST(LoadFlagsTest, RefusesContradictoryOrOutOfRangeFlags) {
  ExpectUsageError({"-c", "4", "--rps=10"}, "give one of --concurrency");
  ExpectUsageError({"--rps=10", "--concurrency_range=1:4"}, "give one of");
  ExpectUsageError({"--poisson"}, "--poisson needs an open loop");
  ExpectUsageError({"-n", "10", "-z", "1s"}, "give --duration or --requests");
  ExpectUsageError({"--concurrency_range=1:3:0.5"}, "not an integer");
  ExpectUsageError({"--connections=0"}, "--connections=0");
  ExpectUsageError({"--duration=0s"}, "--duration=0");
  ExpectUsageError({"--rps=-1"}, "--rps=-1");
  ExpectUsageError({"--window=1ms"}, "--window=1ms");
  ExpectUsageError({"--concurrency-range=4:1"}, "range '4:1'");
  ExpectUsageError({"--requests=0"}, "--requests=0");
}

TEST(WorkloadTest, PayloadsUseRopectlSeedsAndDiffer) {
  std::unique_ptr<Parsed> p =
      Parse({"--random_q_shape=1,2,2,8", "--random_k_shape=1,2,1,8", "--seed=5", "--payloads=3"});
  ASSERT_TRUE(p->parse.ok()) << p->parse;
  absl::StatusOr<Workload> w = WorkloadFromFlags(p->flags);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->requests.size(), 3u);
  EXPECT_EQ(w->method, "/rope.v1.RopeService/Rotate");
  const auto& r0 = static_cast<const v1::RotateRequest&>(*w->requests[0]);
  const auto& r1 = static_cast<const v1::RotateRequest&>(*w->requests[1]);
  // Payload 0 is what ropectl sends with --seed=5: q from seed 5, k from 6.
  absl::StatusOr<v1::Tensor> q = client::RandomTensor({1, 2, 2, 8}, v1::FLOAT32, 5,
                                                      client::Distribution::kNormal);
  absl::StatusOr<v1::Tensor> k = client::RandomTensor({1, 2, 1, 8}, v1::FLOAT32, 6,
                                                      client::Distribution::kNormal);
  EXPECT_EQ(r0.q().data(), q->data());
  EXPECT_EQ(r0.k().data(), k->data());
  EXPECT_NE(r1.q().data(), r0.q().data());
  EXPECT_EQ(r0.config().head_dim(), 8u);
  EXPECT_GT(w->request_bytes, 0);
}

TEST(WorkloadTest, TakesEveryConfigFlagOfRopectlIncludingScaling) {
  std::unique_ptr<Parsed> p =
      Parse({"--workload=scores", "--random_q_shape=1,4,2,16", "--random_k_shape=1,4,2,16",
             "--theta=500000", "--rotary_dim=8", "--layout=half", "--max_len=1024",
             "--rope-scaling=linear", "--factor=4", "--causal"});
  ASSERT_TRUE(p->parse.ok()) << p->parse;
  absl::StatusOr<Workload> w = WorkloadFromFlags(p->flags);
  ASSERT_TRUE(w.ok()) << w.status();
  const auto& r = static_cast<const v1::AttentionScoresRequest&>(*w->requests[0]);
  EXPECT_EQ(r.config().theta(), 500000);
  EXPECT_EQ(r.config().rotary_dim(), 8u);
  EXPECT_EQ(r.config().max_len(), 1024u);
  EXPECT_EQ(r.config().layout(), v1::HALF);
  ASSERT_TRUE(r.config().has_linear());
  EXPECT_EQ(r.config().linear().factor(), 4);
  EXPECT_TRUE(r.causal());
  EXPECT_EQ(w->method, "/rope.v1.RopeService/AttentionScores");
}

TEST(WorkloadTest, RefusesMissingInputs) {
  std::unique_ptr<Parsed> p = Parse({"--workload=rotate"});
  absl::StatusOr<Workload> w = WorkloadFromFlags(p->flags);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(client::IsUsageError(w.status()));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("--random_q_shape"));
  p = Parse({"--workload=scores", "--random_q_shape=1,2,2,8"});
  w = WorkloadFromFlags(p->flags);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("needs q and k"));
  p = Parse({"--workload=table"});
  w = WorkloadFromFlags(p->flags);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("--head_dim is required"));
}

TEST(RopeloadCommandTest, BadCommandLineExitsTwoWithOneLine) {
  std::ostringstream out, err;
  EXPECT_EQ(RunRopeload({"--no_such_flag=1"}, out, err), kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("ropeload: INVALID_ARGUMENT: unknown flag --no_such_flag"));
  std::ostringstream out2, err2;
  EXPECT_EQ(RunRopeload({"--rps=5", "-c", "2", "--random_q_shape=1,1,1,8"}, out2, err2),
            kExitUsage);
  EXPECT_THAT(err2.str(), HasSubstr("give one of --concurrency"));
}

TEST(RopeloadCommandTest, HelpListsLoadAndConfigFlags) {
  std::ostringstream out, err;
  EXPECT_EQ(RunRopeload({"--help"}, out, err), kExitOk);
  EXPECT_THAT(out.str(), HasSubstr("--concurrency_range"));
  EXPECT_THAT(out.str(), HasSubstr("--head_dim"));
  EXPECT_THAT(out.str(), HasSubstr("--rope_scaling"));
  EXPECT_THAT(out.str(), HasSubstr("--html"));
}

TEST(RopeloadCommandTest, UnreachableServerExitsOne) {
  std::ostringstream out, err;
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  EXPECT_EQ(RunRopeload({"--target=127.0.0.1:1", "--random_q_shape=1,1,1,8", "-n", "1",
                         "--deadline=5s", "--noprogress"},
                        out, err),
            kExitFailure);
  EXPECT_THAT(err.str(), HasSubstr("ropeload: UNAVAILABLE: cannot use 127.0.0.1:1"));
}

}  // namespace
}  // namespace load
}  // namespace rope
