#include "client/load/workload.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <google/protobuf/descriptor.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/flags/axial_flags.h"
#include "client/flags/cli_parsing.h"
#include "client/flags/common_flags.h"
#include "client/flags/summary.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace load {
namespace {

using client::FlagSet;
using client::InputTensor;
using client::UsageError;

constexpr int kMaxPayloads = 1024;
// payloads x configs stays far below INT_MAX (variants are ints).
constexpr int kMaxConfigs = 100000;
constexpr char kService[] = "/rope.v1.RopeService/";

absl::Status ValidateWorkloadName(absl::string_view value) {
  return ParseWorkloadKind(value).status();
}

absl::Status ValidatePositions(absl::string_view value) {
  return client::ParseInt64List(value).status();
}

std::string Describe(absl::string_view name, const InputTensor& input) {
  return absl::StrCat(name, " ", client::ShapeAndDType(input.tensor), " (", input.source, ")");
}

// The inputs of payload `index`: q, k, v from their file or random-shape
// flags (nullopt where neither is given).
struct Inputs {
  std::optional<InputTensor> q, k, v;
};

absl::StatusOr<Inputs> LoadInputs(const FlagSet& flags, int index, bool with_v) {
  const uint64_t base = 3 * static_cast<uint64_t>(index);
  Inputs inputs;
  absl::StatusOr<std::optional<InputTensor>> t =
      client::LoadInputTensor(flags, "q", "random_q_shape", base);
  if (!t.ok()) return t.status();
  inputs.q = *std::move(t);
  t = client::LoadInputTensor(flags, "k", "random_k_shape", base + 1);
  if (!t.ok()) return t.status();
  inputs.k = *std::move(t);
  if (with_v) {
    t = client::LoadInputTensor(flags, "v", "random_v_shape", base + 2);
    if (!t.ok()) return t.status();
    inputs.v = *std::move(t);
  }
  return inputs;
}

int64_t LastDim(const v1::Tensor& tensor) { return tensor.shape(tensor.shape_size() - 1); }

absl::Status BuildRotate(const FlagSet& flags, int index, Workload* workload) {
  ROPE_ASSIGN_OR_RETURN(Inputs inputs, LoadInputs(flags, index, /*with_v=*/false));
  if (!inputs.q.has_value()) {
    return UsageError(absl::StrCat(WorkloadRpcName(workload->kind),
                                   " needs q: give --random_q_shape=B,S,H,D or --q=file.npy"));
  }
  if (flags.IsSet("positions") && flags.IsSet("start_pos")) {
    return UsageError("give --start_pos or --positions, not both");
  }
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config,
                        client::RopeConfigFromFlags(flags, LastDim(inputs.q->tensor)));
  auto request = std::make_unique<v1::RotateRequest>();
  *request->mutable_config() = config;
  *request->mutable_q() = inputs.q->tensor;
  if (inputs.k.has_value()) *request->mutable_k() = inputs.k->tensor;
  request->set_start_pos(flags.Int("start_pos"));
  absl::StatusOr<std::vector<int64_t>> positions =
      client::ParseInt64List(flags.String("positions"));
  if (!positions.ok()) return UsageError(positions.status().message());
  for (int64_t p : *positions) request->add_positions(p);
  ROPE_RETURN_IF_ERROR(client::ApplyPositionSourceFlags(flags, request.get()));
  request->set_inverse(flags.Bool("inverse"));
  if (index == 0) {
    workload->config_description = client::DescribeConfig(config);
    workload->payload_description = Describe("q", *inputs.q);
    if (inputs.k.has_value()) {
      absl::StrAppend(&workload->payload_description, ", ", Describe("k", *inputs.k));
    }
    workload->reply_prototype = std::make_unique<v1::RotateResponse>();
  }
  workload->requests.push_back(std::move(request));
  return absl::OkStatus();
}

absl::Status BuildScores(const FlagSet& flags, int index, Workload* workload) {
  ROPE_ASSIGN_OR_RETURN(Inputs inputs, LoadInputs(flags, index, /*with_v=*/true));
  if (!inputs.q.has_value() || !inputs.k.has_value()) {
    return UsageError(
        "AttentionScores needs q and k: --random_q_shape / --q and --random_k_shape / --k");
  }
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config,
                        client::RopeConfigFromFlags(flags, LastDim(inputs.q->tensor)));
  auto request = std::make_unique<v1::AttentionScoresRequest>();
  *request->mutable_config() = config;
  *request->mutable_q() = inputs.q->tensor;
  *request->mutable_k() = inputs.k->tensor;
  if (inputs.v.has_value()) *request->mutable_v() = inputs.v->tensor;
  request->set_q_start_pos(flags.Int("q_start_pos"));
  request->set_k_start_pos(flags.Int("k_start_pos"));
  request->set_causal(flags.Bool("causal"));
  request->set_softmax(flags.Bool("softmax"));
  request->set_scale(flags.Double("scale"));
  // The validator accepted the list; empty: the request's default results.
  ROPE_ASSIGN_OR_RETURN(const std::vector<v1::AttentionResult> results,
                        client::ParseAttentionResults(flags.String("results")));
  for (v1::AttentionResult r : results) request->add_results(r);
  if (index == 0) {
    workload->config_description = client::DescribeConfig(config);
    workload->payload_description =
        absl::StrCat(Describe("q", *inputs.q), ", ", Describe("k", *inputs.k));
    if (inputs.v.has_value()) {
      absl::StrAppend(&workload->payload_description, ", ", Describe("v", *inputs.v));
    }
    workload->reply_prototype = std::make_unique<v1::AttentionScoresResponse>();
  }
  workload->requests.push_back(std::move(request));
  return absl::OkStatus();
}

absl::Status BuildTable(const FlagSet& flags, int index, Workload* workload) {
  for (absl::string_view name : {"q", "k", "v", "random_q_shape", "random_k_shape",
                                 "random_v_shape"}) {
    if (!flags.String(name).empty()) {
      return UsageError(absl::StrCat("--", name, " is not used by the GetTable workload"));
    }
  }
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config, client::RopeConfigFromFlags(flags, 0));
  auto request = std::make_unique<v1::GetTableRequest>();
  *request->mutable_config() = config;
  request->set_start(flags.Int("table_start"));
  request->set_count(flags.Int("table_count"));
  if (index == 0) {
    workload->config_description = client::DescribeConfig(config);
    workload->payload_description = absl::StrCat("rows ", request->start(), " + ",
                                                 request->count() == 0
                                                     ? std::string("to the end")
                                                     : absl::StrCat(request->count()));
    workload->reply_prototype = std::make_unique<v1::GetTableResponse>();
  }
  workload->requests.push_back(std::move(request));
  return absl::OkStatus();
}

const google::protobuf::FieldDescriptor& ConfigField(const google::protobuf::Message& request) {
  // Every request type of the workloads has `RopeConfig config = 1`.
  return *request.GetDescriptor()->FindFieldByName("config");
}

// --configs=N > 1: moves the payloads' (common) config out of them into N
// config fields with theta, theta + 1, ..., theta + N - 1 (see workload.h).
void SplitConfigs(int configs, Workload* workload) {
  const google::protobuf::FieldDescriptor& field = ConfigField(*workload->requests[0]);
  const google::protobuf::Reflection& reflection = *workload->requests[0]->GetReflection();
  v1::RopeConfig base;
  base.CopyFrom(reflection.GetMessage(*workload->requests[0], &field));
  const double theta = base.theta() == 0 ? kDefaultTheta : base.theta();
  std::unique_ptr<google::protobuf::Message> holder(workload->requests[0]->New());
  for (int j = 0; j < configs; ++j) {
    base.set_theta(theta + j);
    reflection.MutableMessage(holder.get(), &field)->CopyFrom(base);
    workload->config_fields.push_back(holder->SerializeAsString());
  }
  for (auto& request : workload->requests) reflection.ClearField(request.get(), &field);
  absl::StrAppend(&workload->config_description, "; ", configs, " configs: theta ", theta,
                  " + j, j = 0..", configs - 1);
}

}  // namespace

int Workload::variants() const {
  return static_cast<int>(requests.size()) *
         std::max(1, static_cast<int>(config_fields.size()));
}

const google::protobuf::Message& Workload::payload(int variant) const {
  return *requests[static_cast<size_t>(variant) % requests.size()];
}

absl::string_view Workload::config_field(int variant) const {
  if (config_fields.empty()) return {};
  return config_fields[static_cast<size_t>(variant) / requests.size()];
}

std::unique_ptr<google::protobuf::Message> Workload::Request(int variant) const {
  std::unique_ptr<google::protobuf::Message> request(payload(variant).New());
  request->CopyFrom(payload(variant));
  const absl::string_view field = config_field(variant);
  // The same merge the server's parser does with the appended bytes; the
  // bytes were made by SerializeAsString, so they parse.
  if (!field.empty()) request->MergeFromString(std::string(field));
  return request;
}

absl::StatusOr<WorkloadKind> ParseWorkloadKind(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "rotate") return WorkloadKind::kRotate;
  if (lower == "rotate_stream" || lower == "rotatestream" || lower == "stream") {
    return WorkloadKind::kRotateStream;
  }
  if (lower == "scores" || lower == "attentionscores" || lower == "attention_scores") {
    return WorkloadKind::kAttentionScores;
  }
  if (lower == "table" || lower == "gettable" || lower == "get_table") {
    return WorkloadKind::kGetTable;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "workload '", name, "': expected rotate, rotate_stream, scores or table"));
}

absl::string_view WorkloadRpcName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kRotate: return "Rotate";
    case WorkloadKind::kRotateStream: return "RotateStream";
    case WorkloadKind::kAttentionScores: return "AttentionScores";
    case WorkloadKind::kGetTable: return "GetTable";
  }
  return "?";
}

void AddWorkloadFlags(FlagSet* flags) {
  flags->BeginGroup("Workload");
  flags->Add("workload", FlagSet::Kind::kString, "rotate",
             "RPC to drive: rotate (Rotate), rotate_stream (RotateStream: one stream per "
             "worker, one message in flight on it), scores (AttentionScores), table "
             "(GetTable).",
             ValidateWorkloadName);
  flags->Add("payloads", FlagSet::Kind::kInt, "1",
             "Distinct random payloads, built once before the run and sent in turn "
             "(payload i uses seeds seed+3i, seed+3i+1, seed+3i+2 for q, k, v).");
  flags->Add("configs", FlagSet::Kind::kInt, "1",
             "Distinct RoPE configs to cycle through: config j is the config flags' with "
             "theta + j (j = 0..N-1), each its own server table-cache entry, for driving "
             "table builds and eviction. Request n sends payload n mod P with config "
             "(n div P) mod N (P = --payloads).");
  client::AddRopeConfigFlags(flags);
  flags->BeginGroup("Inputs (built once, before the run)");
  client::AddDTypeFlag(flags);
  flags->Add("q", FlagSet::Kind::kString, "", "Query .npy file, [B,S,Hq,D] or [S,Hq,D].");
  flags->Add("k", FlagSet::Kind::kString, "", "Key .npy file, [B,S,Hkv,D].");
  flags->Add("v", FlagSet::Kind::kString, "", "Value .npy file for scores, [B,Sk,Hkv,Dv].");
  flags->Add("random_q_shape", FlagSet::Kind::kString, "",
             "Random q of this shape, e.g. 1,1,32,128 (decode) or 1,2048,32,128 (prefill).",
             client::ValidateOptionalShape);
  flags->Add("random_k_shape", FlagSet::Kind::kString, "", "Random k of this shape.",
             client::ValidateOptionalShape);
  flags->Add("random_v_shape", FlagSet::Kind::kString, "",
             "Random v of this shape (scores only).", client::ValidateOptionalShape);
  client::AddRandomFlags(flags);
  flags->BeginGroup("Rotate / RotateStream fields");
  flags->Add("start_pos", FlagSet::Kind::kInt, "0",
             "Token s of every batch row sits at position start_pos + s.");
  flags->Add("positions", FlagSet::Kind::kString, "",
             "Explicit positions instead of --start_pos: S or B*S values (M-RoPE and axial: "
             "times the axes, [axis][b][s]).",
             ValidatePositions);
  client::AddPositionSourceFlags(flags);
  flags->Add("inverse", FlagSet::Kind::kBool, "false", "Rotate by -angle.");
  flags->BeginGroup("AttentionScores fields");
  flags->Add("q_start_pos", FlagSet::Kind::kInt, "0", "Query i sits at q_start_pos + i.");
  flags->Add("k_start_pos", FlagSet::Kind::kInt, "0", "Key j sits at k_start_pos + j.");
  flags->Add("causal", FlagSet::Kind::kBool, "false", "Mask keys after the query's position.");
  flags->Add("softmax", FlagSet::Kind::kBool, "false", "Softmax over keys.");
  flags->Add("scale", FlagSet::Kind::kDouble, "0", "Score scale; 0 means 1/sqrt(head_dim).");
  flags->Add("results", FlagSet::Kind::kString, "",
             "Results to compute, comma-separated (scores, output, lse, top_k, key_mass, "
             "score_rows); empty: scores, and output with v. output,lse: attention with no "
             "Sq x Sk memory.",
             [](absl::string_view v) { return client::ParseAttentionResults(v).status(); });
  flags->BeginGroup("GetTable fields");
  flags->Add("table_start", FlagSet::Kind::kInt, "0", "First row (position).");
  flags->Add("table_count", FlagSet::Kind::kInt, "64", "Rows per call; 0: to the end.");
}

absl::StatusOr<Workload> WorkloadFromFlags(const FlagSet& flags) {
  absl::StatusOr<WorkloadKind> kind = ParseWorkloadKind(flags.String("workload"));
  if (!kind.ok()) return UsageError(kind.status().message());
  const int64_t payloads = flags.Int("payloads");
  if (payloads < 1 || payloads > kMaxPayloads) {
    return UsageError(absl::StrCat("--payloads=", payloads, ": must be in [1, ", kMaxPayloads,
                                   "]"));
  }
  const int64_t configs = flags.Int("configs");
  if (configs < 1 || configs > kMaxConfigs) {
    return UsageError(absl::StrCat("--configs=", configs, ": must be in [1, ", kMaxConfigs, "]"));
  }
  // The configs differ in theta, which a config.json fixes.
  if (configs > 1 && !flags.String("hf_config").empty()) {
    return UsageError("--configs above 1 does not go with --hf_config (the configs differ in "
                      "theta, which the config.json gives)");
  }
  Workload workload;
  workload.kind = *kind;
  workload.method = absl::StrCat(kService, WorkloadRpcName(*kind));
  for (int i = 0; i < payloads; ++i) {
    absl::Status status;
    switch (*kind) {
      case WorkloadKind::kRotate:
      case WorkloadKind::kRotateStream: status = BuildRotate(flags, i, &workload); break;
      case WorkloadKind::kAttentionScores: status = BuildScores(flags, i, &workload); break;
      case WorkloadKind::kGetTable: status = BuildTable(flags, i, &workload); break;
    }
    if (!status.ok()) return status;
  }
  if (payloads > 1) {
    absl::StrAppend(&workload.payload_description, "; ", payloads, " payloads");
  }
  if (configs > 1) SplitConfigs(static_cast<int>(configs), &workload);
  workload.request_bytes = static_cast<int64_t>(workload.requests[0]->ByteSizeLong() +
                                                workload.config_field(0).size());
  return workload;
}

absl::Status CompleteHfConfigs(client::RopeClient& client, const FlagSet& flags,
                               Workload* workload, std::string* note) {
  if (flags.String("hf_config").empty() || workload->requests.empty()) return absl::OkStatus();
  // --configs above 1 is refused with --hf_config: every payload carries
  // the one config.
  const google::protobuf::FieldDescriptor& field = ConfigField(*workload->requests[0]);
  const google::protobuf::Reflection& reflection = *workload->requests[0]->GetReflection();
  auto* first =
      static_cast<v1::RopeConfig*>(reflection.MutableMessage(workload->requests[0].get(), &field));
  ROPE_RETURN_IF_ERROR(client::CompleteHfConfigFromFlags(client, flags, first, note));
  for (size_t i = 1; i < workload->requests.size(); ++i) {
    auto* config = static_cast<v1::RopeConfig*>(
        reflection.MutableMessage(workload->requests[i].get(), &field));
    config->set_layout(first->layout());
    config->set_max_len(first->max_len());
  }
  workload->request_bytes = static_cast<int64_t>(workload->requests[0]->ByteSizeLong());
  return absl::OkStatus();
}

}  // namespace load
}  // namespace rope
