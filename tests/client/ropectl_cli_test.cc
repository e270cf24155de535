// ropectl's command line, without a server: flag parsing, value parsers,
// help text, usage errors and their exit codes.
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/flags/axial_flags.h"
#include "client/flags/cli_parsing.h"
#include "client/flags/common_flags.h"
#include "client/cli/commands.h"
#include "client/flags/flag_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rope {
namespace client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

FlagSet ExampleFlags() {
  FlagSet flags;
  flags.BeginGroup("Group A");
  flags.Add("name", FlagSet::Kind::kString, "x", "A string.");
  flags.Add("count", FlagSet::Kind::kInt, "3", "An int.");
  flags.Add("ratio", FlagSet::Kind::kDouble, "0.5", "A number.");
  flags.Add("on", FlagSet::Kind::kBool, "false", "A bool.");
  flags.Add("wait", FlagSet::Kind::kDuration, "10s", "A duration.");
  flags.Add("layout", FlagSet::Kind::kString, "half", "Checked.",
            [](absl::string_view v) { return ParseLayout(v).status(); });
  return flags;
}

TEST(FlagSetTest, DefaultsApplyWhenNotGiven) {
  FlagSet flags = ExampleFlags();
  ASSERT_TRUE(flags.Parse({}).ok());
  EXPECT_EQ(flags.String("name"), "x");
  EXPECT_EQ(flags.Int("count"), 3);
  EXPECT_EQ(flags.Double("ratio"), 0.5);
  EXPECT_FALSE(flags.Bool("on"));
  EXPECT_EQ(flags.Duration("wait"), absl::Seconds(10));
  EXPECT_FALSE(flags.IsSet("count"));
}

TEST(FlagSetTest, ParsesEveryForm) {
  FlagSet flags = ExampleFlags();
  const std::vector<std::string> args = {"--name=y", "--count", "-7", "-ratio=2.5", "--on",
                                         "--wait=250ms", "--layout=interleaved"};
  absl::Status status = flags.Parse(args);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(flags.String("name"), "y");
  EXPECT_EQ(flags.Int("count"), -7);
  EXPECT_EQ(flags.Double("ratio"), 2.5);
  EXPECT_TRUE(flags.Bool("on"));
  EXPECT_EQ(flags.Duration("wait"), absl::Milliseconds(250));
  EXPECT_TRUE(flags.IsSet("count"));
}

TEST(FlagSetTest, NegatedBool) {
  FlagSet flags = ExampleFlags();
  const std::vector<std::string> args = {"--on", "--noon"};
  ASSERT_TRUE(flags.Parse(args).ok());
  EXPECT_FALSE(flags.Bool("on"));
}

TEST(FlagSetTest, RejectsUnknownFlagAsUsageError) {
  FlagSet flags = ExampleFlags();
  const std::vector<std::string> args = {"--nmae=y"};
  absl::Status status = flags.Parse(args);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsUsageError(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("unknown flag --nmae"));
}

TEST(FlagSetTest, RejectsMalformedValues) {
  struct Case {
    std::string arg;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{{"--count=3x", "--count=3x: not an integer"},
                                         {"--ratio=abc", "not a number"},
                                         {"--on=maybe", "not true or false"},
                                         {"--wait=10", "not a duration"},
                                         {"--layout=diagonal", "'diagonal' is not one of"}}) {
    FlagSet flags = ExampleFlags();
    const std::vector<std::string> args = {c.arg};
    absl::Status status = flags.Parse(args);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.arg;
    EXPECT_TRUE(IsUsageError(status)) << c.arg;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
}

TEST(FlagSetTest, RejectsPositionalAndMissingValue) {
  FlagSet flags = ExampleFlags();
  std::vector<std::string> args = {"stray"};
  EXPECT_THAT(std::string(flags.Parse(args).message()), HasSubstr("unexpected argument 'stray'"));
  FlagSet flags2 = ExampleFlags();
  args = {"--count"};
  EXPECT_THAT(std::string(flags2.Parse(args).message()), HasSubstr("--count needs a value"));
}

TEST(FlagSetTest, HelpListsGroupsFlagsAndDefaults) {
  const std::string help = ExampleFlags().Help();
  EXPECT_THAT(help, HasSubstr("Group A:"));
  EXPECT_THAT(help, HasSubstr("--count=<int>  (default: 3)"));
  EXPECT_THAT(help, HasSubstr("--on  (default: false)"));
  EXPECT_THAT(help, HasSubstr("A duration."));
}

TEST(CliParsingTest, Int64List) {
  EXPECT_EQ(*ParseInt64List("1, 2,3"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(ParseInt64List("")->empty());
  absl::StatusOr<std::vector<int64_t>> bad = ParseInt64List("1,,2");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("item 1"));
}

TEST(CliParsingTest, Shape) {
  EXPECT_EQ(*ParseShape("1,16,8,64"), (std::vector<int64_t>{1, 16, 8, 64}));
  absl::StatusOr<std::vector<int64_t>> zero = ParseShape("1,0,8");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("dim 1 is 0"));
  EXPECT_EQ(ParseShape("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CliParsingTest, Layout) {
  EXPECT_EQ(*ParseLayout("half"), v1::HALF);
  EXPECT_EQ(*ParseLayout("NeoX"), v1::HALF);
  EXPECT_EQ(*ParseLayout("interleaved"), v1::INTERLEAVED);
  EXPECT_EQ(LayoutName(v1::LAYOUT_UNSPECIFIED), "interleaved");
}

struct RunResult {
  int code;
  std::string out;
  std::string err;
};

RunResult RunCtl(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunRopectl(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(RopectlTest, TopLevelHelpListsCommandsAndNpyNotes) {
  RunResult r = RunCtl({"--help"});
  EXPECT_EQ(r.code, kExitOk);
  for (const char* text : {"rotate", "scores", "table", "info", "health", "'<u2'", "bfloat16",
                           "Exit status", "--target"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

TEST(RopectlTest, CommandHelpListsItsFlagsOnly) {
  RunResult rotate = RunCtl({"rotate", "--help"});
  EXPECT_EQ(rotate.code, kExitOk);
  for (const char* flag : {"--target", "--deadline", "--theta", "--head_dim", "--rotary_dim",
                           "--max_len", "--layout", "--dtype", "--q=", "--k=", "--random_q_shape",
                           "--random_k_shape", "--seed", "--start_pos", "--positions",
                           "--inverse", "--out_q", "--out_k"}) {
    EXPECT_THAT(rotate.out, HasSubstr(flag));
  }
  EXPECT_THAT(rotate.out, Not(HasSubstr("--softmax")));

  RunResult scores = RunCtl({"help", "scores"});
  EXPECT_EQ(scores.code, kExitOk);
  for (const char* flag : {"--q_start_pos", "--k_start_pos", "--causal", "--softmax", "--scale",
                           "--out=", "--out_output", "--random_v_shape"}) {
    EXPECT_THAT(scores.out, HasSubstr(flag));
  }
  RunResult table = RunCtl({"table", "-h"});
  for (const char* flag : {"--start", "--count", "--out_cos", "--out_sin"}) {
    EXPECT_THAT(table.out, HasSubstr(flag));
  }
  EXPECT_THAT(RunCtl({"health", "--help"}).out, HasSubstr("exit 0 only if SERVING"));
}

TEST(RopectlTest, UnknownCommandIsUsageError) {
  RunResult r = RunCtl({"rotat"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'rotat'"));
}

TEST(RopectlTest, NoCommandIsUsageError) {
  EXPECT_EQ(RunCtl({}).code, kExitUsage);
}

TEST(RopectlTest, BadFlagValueIsOneLineUsageError) {
  RunResult r = RunCtl({"rotate", "--random_q_shape=1,x,2,8"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("ropectl rotate: INVALID_ARGUMENT: --random_q_shape=1,x,2,8"));
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1);
}

TEST(RopectlTest, RotateWithoutQIsUsageError) {
  RunResult r = RunCtl({"rotate", "--target=127.0.0.1:1"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--random_q_shape"));
}

TEST(RopectlTest, FileAndRandomTogetherIsUsageError) {
  RunResult r = RunCtl({"rotate", "--q=q.npy", "--random_q_shape=1,2,2,4"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("not both"));
}

TEST(RopectlTest, MissingInputFileIsFailureWithCode) {
  RunResult r = RunCtl({"rotate", "--q=/nonexistent/q.npy"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("ropectl rotate: NOT_FOUND: cannot open /nonexistent/q.npy"));
}

TEST(RopectlTest, TableNeedsHeadDim) {
  RunResult r = RunCtl({"table"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--head_dim is required"));
}

TEST(RopectlTest, ResolveHelpListsTheConfigJsonFlags) {
  RunResult r = RunCtl({"resolve", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  for (const char* flag : {"--hf_config", "--hf_layer_type", "--max_len", "--layout", "--target"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_THAT(RunCtl({"--help"}).out, HasSubstr("resolve"));
  for (const char* command : {"rotate", "scores", "table"}) {
    RunResult help = RunCtl({command, "--help"});
    for (const char* flag : {"--hf_config", "--hf_layer_type", "--mrope_section",
                             "--mrope_interleaved", "--truncate", "--max_position_embeddings"}) {
      EXPECT_THAT(help.out, HasSubstr(flag)) << command;
    }
  }
}

TEST(RopectlTest, HfConfigExcludesTheFieldsItGives) {
  for (const char* flag : {"--theta=500000", "--rotary_dim=64", "--rope_scaling=linear",
                           "--factor=2", "--mrope_section=16,24,24"}) {
    RunResult r = RunCtl({"resolve", "--hf_config=/nonexistent.json", flag});
    EXPECT_EQ(r.code, kExitUsage) << flag;
    EXPECT_THAT(r.err, HasSubstr("does not go with --hf_config (the config.json gives it)"));
  }
  RunResult layer = RunCtl({"table", "--head_dim=64", "--hf_layer_type=sliding_attention"});
  EXPECT_EQ(layer.code, kExitUsage);
  EXPECT_THAT(layer.err, HasSubstr("--hf_layer_type needs --hf_config"));
  RunResult missing = RunCtl({"resolve", "--hf_config=/nonexistent/config.json"});
  EXPECT_EQ(missing.code, kExitFailure);
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND: --hf_config=/nonexistent/config.json: no such "
                                     "file or directory"));
  // A model directory is read as its config.json; without one, named as such.
  const std::string dir = ::testing::TempDir() + "/empty-model-dir";
  ASSERT_EQ(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, true);
  RunResult no_config = RunCtl({"resolve", "--hf_config=" + dir});
  EXPECT_EQ(no_config.code, kExitFailure);
  EXPECT_THAT(no_config.err, HasSubstr("is a directory without a config.json"));
}

TEST(RopectlTest, ChecksOutputsAndMessageSizesBeforeGeneratingInputs) {
  RunResult out_dir = RunCtl({"rotate", "--random_q_shape=1,2,2,8", "--out_q=/nonexistent/q.npy"});
  EXPECT_EQ(out_dir.code, kExitUsage);
  EXPECT_THAT(out_dir.err, HasSubstr("--out_q=/nonexistent/q.npy: the directory /nonexistent "
                                     "does not exist"));
  // Refused at once, before any value is made.
  RunResult huge = RunCtl({"scores", "--random_q_shape=1,65536,32,128",
                           "--random_k_shape=1,65536,8,128", "--dtype=bfloat16"});
  EXPECT_EQ(huge.code, kExitFailure);
  EXPECT_THAT(huge.err, HasSubstr("RESOURCE_EXHAUSTED: the AttentionScores request (q, k and v) "
                                  "would be 671088640 bytes, over the 536870912 bytes"));
  RunResult reply = RunCtl({"scores", "--random_q_shape=1,8192,32,8", "--random_k_shape=1,8192,8,8"});
  EXPECT_EQ(reply.code, kExitFailure);
  EXPECT_THAT(reply.err, HasSubstr("the AttentionScores reply (float32 scores [B,Hq,Sq,Sk] and "
                                   "output; --results=output,lse need no Sq x Sk values) would be "
                                   "8589934592 bytes"));
  // Only the results asked count: top-k of 8192 x 8192 keys is 16 MiB, and
  // score rows of a few queries are small, so those pass the reply check
  // (and fail later, at the unreachable server: UNAVAILABLE or its deadline).
  for (const char* results : {"--results=lse,top_k", "--results=score_rows"}) {
    RunResult small = RunCtl({"attend", "--target=127.0.0.1:1", "--deadline=300ms",
                              "--random_q_shape=1,8192,32,8", "--random_k_shape=1,8192,8,8",
                              results, "--top_k=16", "--score_rows_start=8190"});
    EXPECT_EQ(small.code, kExitFailure) << results;
    EXPECT_THAT(small.err, Not(HasSubstr("RESOURCE_EXHAUSTED"))) << results;
    EXPECT_THAT(small.err, HasSubstr("ropectl attend: ")) << results;
  }
}

TEST(RopectlTest, AttentionResultFlagsAreCheckedBeforeAnyCall) {
  RunResult attend = RunCtl({"help", "attend"});
  EXPECT_EQ(attend.code, kExitOk);
  for (const char* flag : {"--results", "output,lse", "--window_left", "--window_right",
                           "--chunk_size", "--q_positions", "--k_positions", "--softcap",
                           "--sinks", "--alibi_slopes", "--top_k", "--score_rows_start",
                           "--score_rows_count", "--out_lse", "--out_top_k_indices",
                           "--out_top_k_probs", "--out_key_mass", "--out_score_rows"}) {
    EXPECT_THAT(attend.out, HasSubstr(flag));
  }
  EXPECT_THAT(RunCtl({"--help"}).out, HasSubstr("'<i4'  int32"));
  RunResult unknown = RunCtl({"scores", "--results=output,lse,weights"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_THAT(unknown.err, HasSubstr("'weights' is not a result: expected some of scores, output"));
  RunResult twice = RunCtl({"scores", "--results=lse,LSE"});
  EXPECT_EQ(twice.code, kExitUsage);
  EXPECT_THAT(twice.err, HasSubstr("'lse' is listed twice"));
  RunResult sinks = RunCtl({"scores", "--sinks=0.5,x"});
  EXPECT_EQ(sinks.code, kExitUsage);
  EXPECT_THAT(sinks.err, HasSubstr("item 1 ('x') is not a finite number"));
  RunResult not_asked = RunCtl({"attend", "--random_q_shape=1,2,2,8", "--random_k_shape=1,2,2,8",
                                "--random_v_shape=1,2,2,8", "--out_key_mass=/tmp/m.npy"});
  EXPECT_EQ(not_asked.code, kExitUsage);
  EXPECT_THAT(not_asked.err, HasSubstr("--out_key_mass given but --results does not ask for "
                                       "key_mass"));
  RunResult both = RunCtl({"scores", "--random_q_shape=1,2,2,8", "--random_k_shape=1,2,2,8",
                           "--q_start_pos=1", "--q_positions=1,2"});
  EXPECT_EQ(both.code, kExitUsage);
  EXPECT_THAT(both.err, HasSubstr("give --q_start_pos or --q_positions, not both"));
}

TEST(RopectlTest, ScalingAndMropeFlagsOnlyWhereTheyApply) {
  RunResult truncate = RunCtl({"table", "--head_dim=64", "--rope_scaling=linear", "--factor=2",
                               "--truncate=false"});
  EXPECT_EQ(truncate.code, kExitUsage);
  EXPECT_THAT(truncate.err, HasSubstr("--truncate does not apply to --rope_scaling=linear"));
  RunResult interleaved = RunCtl({"table", "--head_dim=64", "--mrope_interleaved"});
  EXPECT_EQ(interleaved.code, kExitUsage);
  EXPECT_THAT(interleaved.err, HasSubstr("--mrope_interleaved needs --mrope_section"));
}

TEST(AxialFlagsTest, ConfigFromFlags) {
  FlagSet flags;
  AddRopeConfigFlags(&flags);
  const std::vector<std::string> args = {"--theta=256", "--head_dim=128", "--axial_dims=16,56,56",
                                         "--axial_theta_rescale=0,2,0",
                                         "--axial_interpolation=1,1,0.5"};
  ASSERT_TRUE(flags.Parse(args).ok());
  absl::StatusOr<v1::RopeConfig> config = RopeConfigFromFlags(flags, 0);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->axial().axes_size(), 3);
  EXPECT_EQ(config->axial().axes(1).dim(), 56u);
  EXPECT_EQ(config->axial().axes(1).theta_rescale(), 2.0);
  EXPECT_EQ(config->axial().axes(2).interpolation(), 0.5);
  EXPECT_EQ(DescribeConfig(*config),
            "theta=256 head_dim=128 rotary_dim=128 max_len=4096 layout=interleaved "
            "axial[16,56(theta_rescale=2),56(interpolation=0.5)]");
  EXPECT_THAT(ConfigAsFlags(*config),
              HasSubstr("--axial_dims=16,56,56 --axial_theta_rescale=0,2,0 "
                        "--axial_interpolation=1,1,0.5"));
}

TEST(AxialFlagsTest, GridsParseAndMalformedOnesAreUsageErrors) {
  absl::StatusOr<std::vector<v1::PositionGrid>> grids =
      ParseGrids("512x1x1/step=0,0,0;1x64x64/start=1,0,0;4x4/rope_axis=1,0");
  ASSERT_TRUE(grids.ok()) << grids.status();
  ASSERT_EQ(grids->size(), 3u);
  EXPECT_EQ((*grids)[0].size(0), 512);
  EXPECT_EQ((*grids)[0].step_size(), 3);
  EXPECT_EQ((*grids)[1].start(0), 1.0);
  EXPECT_EQ((*grids)[2].rope_axis(0), 1u);
  EXPECT_THAT(std::string(ParseGrids("1xAx3").status().message()),
              HasSubstr("the size '1xAx3' is not like 1x64x64"));
  EXPECT_THAT(std::string(ParseGrids("2x2/steps=1,1").status().message()),
              HasSubstr("'steps=1,1' is not start=..., step=... or rope_axis=..."));
  RunResult both = RunCtl({"rotate", "--random_q_shape=1,2,1,8", "--grid=2", "--positions=0,1"});
  EXPECT_EQ(both.code, kExitUsage);
  EXPECT_THAT(both.err, HasSubstr("--positions does not go with --grid"));
  RunResult per_axis = RunCtl({"table", "--head_dim=8", "--axial_dims=4,4", "--axial_theta=2"});
  EXPECT_EQ(per_axis.code, kExitUsage);
  EXPECT_THAT(per_axis.err, HasSubstr("--axial_theta has 1 values: give one per --axial_dims entry"));
  RunResult orphan = RunCtl({"table", "--head_dim=8", "--axial_interpolation=2"});
  EXPECT_EQ(orphan.code, kExitUsage);
  EXPECT_THAT(orphan.err, HasSubstr("--axial_interpolation needs --axial_dims"));
}

TEST(RopectlTest, UnreachableServerReportsUnavailable) {
  // Port 1 on loopback: nothing listens there, so the connection is refused.
  RunResult r = RunCtl({"health", "--target=127.0.0.1:1", "--deadline=5s"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("ropectl health: UNAVAILABLE"));
}

}  // namespace
}  // namespace client
}  // namespace rope
