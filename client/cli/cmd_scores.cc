// ropectl scores: RopeService.AttentionScores on .npy or random q/k/v.
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli/cli_parsing.h"
#include "client/cli/commands.h"
#include "client/cli/common_flags.h"
#include "client/cli/summary.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

void AddScoresFlags(FlagSet* flags) {
  AddConnectionFlags(flags);
  AddRopeConfigFlags(flags);
  flags->BeginGroup("Inputs (unrotated: the server applies RoPE)");
  AddDTypeFlag(flags);
  flags->Add("q", FlagSet::Kind::kString, "", "Query .npy file, [B,Sq,Hq,D] or [Sq,Hq,D].");
  flags->Add("k", FlagSet::Kind::kString, "",
             "Key .npy file, [B,Sk,Hkv,D]; Hq must be a multiple of Hkv.");
  flags->Add("v", FlagSet::Kind::kString, "",
             "Optional value .npy file, [B,Sk,Hkv,Dv]: the reply then has output = P v.");
  flags->Add("random_q_shape", FlagSet::Kind::kString, "", "Random q of this shape instead of --q.",
             ValidateOptionalShape);
  flags->Add("random_k_shape", FlagSet::Kind::kString, "", "Random k of this shape instead of --k.",
             ValidateOptionalShape);
  flags->Add("random_v_shape", FlagSet::Kind::kString, "", "Random v of this shape instead of --v.",
             ValidateOptionalShape);
  AddRandomFlags(flags);
  flags->BeginGroup("Scores");
  flags->Add("q_start_pos", FlagSet::Kind::kInt, "0", "Query i sits at position q_start_pos + i.");
  flags->Add("k_start_pos", FlagSet::Kind::kInt, "0", "Key j sits at position k_start_pos + j.");
  flags->Add("causal", FlagSet::Kind::kBool, "false",
             "Mask (-inf) keys whose position is after the query's.");
  flags->Add("softmax", FlagSet::Kind::kBool, "false",
             "Return softmax over keys (probabilities) instead of scaled scores.");
  flags->Add("scale", FlagSet::Kind::kDouble, "0", "Score scale; 0 means 1/sqrt(head_dim).");
  flags->BeginGroup("Outputs");
  flags->Add("out", FlagSet::Kind::kString, "",
             "Write the scores, float32 [B,Hq,Sq,Sk], to this .npy file.");
  flags->Add("out_output", FlagSet::Kind::kString, "",
             "Write the output P v, float32 [B,Sq,Hq,Dv], to this .npy file (needs v).");
  AddSaveInputsFlag(flags);
}

// Bytes of the AttentionScores reply for q [B,Sq,Hq,D] and k [B,Sk,Hkv,D]
// (rank 3: B = 1), and v [B,Sk,Hkv,Dv]: float32 scores [B,Hq,Sq,Sk] and
// output [B,Sq,Hq,Dv]. 0 when a shape is not of rank 3 or 4 (the server
// names that).
int64_t ScoresReplyBytes(const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                         const std::vector<int64_t>& v) {
  if (q.size() < 3 || q.size() > 4 || k.size() != q.size()) return 0;
  const size_t off = q.size() - 3;
  const double batch = off == 1 ? static_cast<double>(q[0]) : 1.0;
  const double scores = batch * static_cast<double>(q[off + 1]) * static_cast<double>(q[off]) *
                        static_cast<double>(k[off]) * 4.0;
  const double output = v.size() == q.size() ? batch * static_cast<double>(q[off]) *
                                                   static_cast<double>(q[off + 1]) *
                                                   static_cast<double>(v[off + 2]) * 4.0
                                             : 0.0;
  const double total = scores + output;
  return total >= 9.0e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(total);
}

std::vector<int64_t> ShapeOfFlag(const FlagSet& flags, absl::string_view shape_flag) {
  absl::StatusOr<std::vector<int64_t>> shape = ParseShape(flags.String(shape_flag));
  return shape.ok() ? *shape : std::vector<int64_t>();
}

std::vector<int64_t> ShapeOf(const std::optional<InputTensor>& input) {
  if (!input.has_value()) return {};
  return std::vector<int64_t>(input->tensor.shape().begin(), input->tensor.shape().end());
}

absl::Status RunScores(const FlagSet& flags, std::ostream& out) {
  // Before any input is generated or any call made (random inputs of a
  // mistyped shape take long to make): outputs writable, request and reply
  // within one message.
  ROPE_RETURN_IF_ERROR(CheckOutputsWritable(flags, {"out", "out_output"}));
  ROPE_RETURN_IF_ERROR(CheckMessageFits("the AttentionScores request (q, k and v)",
                                        InputBytesBeforeLoading(flags, "q", "random_q_shape") +
                                            InputBytesBeforeLoading(flags, "k", "random_k_shape") +
                                            InputBytesBeforeLoading(flags, "v", "random_v_shape")));
  ROPE_RETURN_IF_ERROR(CheckMessageFits(
      "the AttentionScores reply (float32 scores [B,Hq,Sq,Sk] and output)",
      ScoresReplyBytes(ShapeOfFlag(flags, "random_q_shape"), ShapeOfFlag(flags, "random_k_shape"),
                       ShapeOfFlag(flags, "random_v_shape"))));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> q,
                        LoadInputTensor(flags, "q", "random_q_shape", 0));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> k,
                        LoadInputTensor(flags, "k", "random_k_shape", 1));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> v,
                        LoadInputTensor(flags, "v", "random_v_shape", 2));
  if (!q.has_value() || !k.has_value()) {
    return UsageError("scores needs q and k: --q / --random_q_shape and --k / --random_k_shape");
  }
  if (!v.has_value() && !flags.String("out_output").empty()) {
    return UsageError("--out_output given but there is no v (--v or --random_v_shape)");
  }
  ROPE_RETURN_IF_ERROR(CheckMessageFits(
      "the AttentionScores reply (float32 scores [B,Hq,Sq,Sk] and output)",
      ScoresReplyBytes(ShapeOf(q), ShapeOf(k), ShapeOf(v))));
  const v1::Tensor& q_tensor = q->tensor;
  std::string defaults_note;
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config,
                        RopeConfigFromFlags(flags, q_tensor.shape(q_tensor.shape_size() - 1),
                                            &defaults_note));

  v1::AttentionScoresRequest request;
  *request.mutable_config() = config;
  *request.mutable_q() = q_tensor;
  *request.mutable_k() = k->tensor;
  if (v.has_value()) *request.mutable_v() = v->tensor;
  request.set_q_start_pos(flags.Int("q_start_pos"));
  request.set_k_start_pos(flags.Int("k_start_pos"));
  request.set_causal(flags.Bool("causal"));
  request.set_softmax(flags.Bool("softmax"));
  request.set_scale(flags.Double("scale"));

  ROPE_RETURN_IF_ERROR(SaveInputsIfAsked(flags, q, k, v, out));
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client, ClientFromFlags(flags));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::AttentionScoresResponse> response = client->AttentionScores(request);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) {
    return ExplainHfHeadDimMismatch(response.status(), flags,
                                    q_tensor.shape(q_tensor.shape_size() - 1));
  }

  out << "scores  " << flags.String("target") << "  " << DescribeEffectiveConfig(*client, config)
      << "\n";
  if (!defaults_note.empty()) out << "  from the config.json: " << defaults_note << "\n";
  out << "  q_start_pos=" << request.q_start_pos() << " k_start_pos=" << request.k_start_pos()
      << " causal=" << (request.causal() ? "true" : "false")
      << " softmax=" << (request.softmax() ? "true" : "false") << " scale="
      << (request.scale() == 0 ? std::string("1/sqrt(head_dim)") : absl::StrCat(request.scale()))
      << "\n";
  out << "  q: " << ShapeAndDType(q_tensor) << "  from " << q->source << "\n";
  out << "  k: " << ShapeAndDType(k->tensor) << "  from " << k->source << "\n";
  if (v.has_value()) {
    out << "  v: " << ShapeAndDType(v->tensor) << "  from " << v->source << "\n";
  }
  absl::StatusOr<std::string> summary = SummarizeTensor(response->scores(), "reply scores");
  if (!summary.ok()) return summary.status();
  out << "  " << (request.softmax() ? "probs " : "scores") << ": " << *summary << "\n";
  if (v.has_value()) {
    summary = SummarizeTensor(response->output(), "reply output");
    if (!summary.ok()) return summary.status();
    out << "  output: " << *summary << "\n";
  }
  out << "  elapsed " << FormatMillis(elapsed) << "\n";
  ROPE_RETURN_IF_ERROR(WriteOutputIfAsked(flags, "out", response->scores(), out));
  if (v.has_value()) return WriteOutputIfAsked(flags, "out_output", response->output(), out);
  return absl::OkStatus();
}

}  // namespace

extern const Command kScoresCommand = {
    "scores",
    "Attention scores with RoPE applied inside (RopeService.AttentionScores)",
    "Sends unrotated q and k (and optionally v); the server rotates them and\n"
    "returns S[b,h,i,j] = (R q_i).(R k_j) * scale (+ causal mask), or its softmax\n"
    "over keys, float32 [B,Hq,Sq,Sk], and output = P v when v is given.",
    AddScoresFlags,
    RunScores,
};

}  // namespace client
}  // namespace rope
