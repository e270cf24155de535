// ropectl scores and ropectl attend: RopeService.AttentionScores on .npy or
// random q/k/v, with every mask, logit transform and result of the request,
// each result written to its own .npy file. `attend` is `scores` asking for
// output and log-sum-exp by default, which need no Sq x Sk memory.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/flags/cli_parsing.h"
#include "client/cli/commands.h"
#include "client/flags/common_flags.h"
#include "client/flags/summary.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

// Each result: its --results name, the enum, the reply field's name, the
// --out_* flag that writes it (top_k has two), and its shape for help.
struct ResultInfo {
  const char* name;
  v1::AttentionResult result;
};
constexpr ResultInfo kResults[] = {
    {"scores", v1::SCORES},   {"output", v1::OUTPUT},     {"lse", v1::LSE},
    {"top_k", v1::TOP_K},     {"key_mass", v1::KEY_MASS}, {"score_rows", v1::SCORE_ROWS},
};

// The reply tensor of each result and the flag that writes it.
struct ReplyOutput {
  v1::AttentionResult result;
  const char* flag;   // --out...
  const char* label;  // in the summary
  const v1::Tensor& (v1::AttentionScoresResponse::*tensor)() const;
};
const ReplyOutput kOutputs[] = {
    {v1::SCORES, "out", "scores", &v1::AttentionScoresResponse::scores},
    {v1::OUTPUT, "out_output", "output", &v1::AttentionScoresResponse::output},
    {v1::LSE, "out_lse", "lse", &v1::AttentionScoresResponse::lse},
    {v1::TOP_K, "out_top_k_indices", "top_k_indices",
     &v1::AttentionScoresResponse::top_k_indices},
    {v1::TOP_K, "out_top_k_probs", "top_k_probs", &v1::AttentionScoresResponse::top_k_probs},
    {v1::KEY_MASS, "out_key_mass", "key_mass", &v1::AttentionScoresResponse::key_mass},
    {v1::SCORE_ROWS, "out_score_rows", "score_rows", &v1::AttentionScoresResponse::score_rows},
};

std::string ResultNames() {
  std::vector<std::string> names;
  for (const ResultInfo& r : kResults) names.push_back(r.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::vector<v1::AttentionResult>> ParseResults(absl::string_view text) {
  return ParseAttentionResults(text);
}

absl::Status ValidateResults(absl::string_view text) { return ParseResults(text).status(); }
absl::Status ValidateIntList(absl::string_view text) { return ParseInt64List(text).status(); }
absl::Status ValidateDoubleList(absl::string_view text) { return ParseDoubleList(text).status(); }

void AddAttentionFlags(FlagSet* flags, const char* default_results) {
  AddConnectionFlags(flags);
  AddRopeConfigFlags(flags);
  flags->BeginGroup("Inputs (unrotated: the server applies RoPE)");
  AddDTypeFlag(flags);
  flags->Add("q", FlagSet::Kind::kString, "", "Query .npy file, [B,Sq,Hq,D] or [Sq,Hq,D].");
  flags->Add("k", FlagSet::Kind::kString, "",
             "Key .npy file, [B,Sk,Hkv,D]; Hq must be a multiple of Hkv.");
  flags->Add("v", FlagSet::Kind::kString, "",
             "Optional value .npy file, [B,Sk,Hkv,Dv]: needed for the output P v.");
  flags->Add("random_q_shape", FlagSet::Kind::kString, "", "Random q of this shape instead of --q.",
             ValidateOptionalShape);
  flags->Add("random_k_shape", FlagSet::Kind::kString, "", "Random k of this shape instead of --k.",
             ValidateOptionalShape);
  flags->Add("random_v_shape", FlagSet::Kind::kString, "", "Random v of this shape instead of --v.",
             ValidateOptionalShape);
  AddRandomFlags(flags);
  flags->BeginGroup("Positions, masks and logit transforms (FlashAttention's definitions)");
  flags->Add("q_start_pos", FlagSet::Kind::kInt, "0", "Query i sits at position q_start_pos + i.");
  flags->Add("k_start_pos", FlagSet::Kind::kInt, "0", "Key j sits at position k_start_pos + j.");
  flags->Add("q_positions", FlagSet::Kind::kString, "",
             "Explicit query positions instead of --q_start_pos: Sq values (shared by every "
             "batch row) or B*Sq, comma-separated.",
             ValidateIntList);
  flags->Add("k_positions", FlagSet::Kind::kString, "",
             "Explicit key positions instead of --k_start_pos: Sk or B*Sk values.",
             ValidateIntList);
  flags->Add("causal", FlagSet::Kind::kBool, "false",
             "Mask (-inf) keys whose position is after the query's.");
  flags->Add("window_left", FlagSet::Kind::kInt, "-1",
             "Sliding window: hide keys more than this many positions before the query "
             "(Mistral: sliding_window - 1); -1: no limit.");
  flags->Add("window_right", FlagSet::Kind::kInt, "-1",
             "Hide keys more than this many positions after the query; -1: no limit.");
  flags->Add("chunk_size", FlagSet::Kind::kInt, "0",
             "Chunked attention (Llama 4): a query sees only keys of its chunk; 0: none.");
  flags->Add("softcap", FlagSet::Kind::kDouble, "0",
             "Logit soft-capping softcap * tanh(s / softcap) (Gemma 2: 50); 0: none.");
  flags->Add("sinks", FlagSet::Kind::kString, "",
             "One learned sink logit per query head (gpt-oss), comma-separated; Hq values.",
             ValidateDoubleList);
  flags->Add("alibi_slopes", FlagSet::Kind::kString, "",
             "ALiBi slopes, one per query head, comma-separated; Hq values.", ValidateDoubleList);
  flags->Add("softmax", FlagSet::Kind::kBool, "false",
             "Scores (and score rows) hold softmax probabilities instead of logits.");
  flags->Add("scale", FlagSet::Kind::kDouble, "0",
             "Score scale; 0 means the model's (with --hf_config), else 1/sqrt(head_dim).");
  flags->BeginGroup("Results");
  flags->Add("results", FlagSet::Kind::kString, default_results,
             absl::StrCat("What to compute, comma-separated: some of ", ResultNames(),
                          ". Empty: scores, and output with v. Only scores and score_rows "
                          "hold Sq x Sk values."),
             ValidateResults);
  flags->Add("top_k", FlagSet::Kind::kInt, "0",
             "top_k: how many keys per query (1 .. Sk), by probability.");
  flags->Add("score_rows_start", FlagSet::Kind::kInt, "0",
             "score_rows: the first query row.");
  flags->Add("score_rows_count", FlagSet::Kind::kInt, "0",
             "score_rows: how many query rows; 0: to the last query.");
  flags->BeginGroup("Outputs (.npy; each result only when asked)");
  flags->Add("out", FlagSet::Kind::kString, "",
             "The scores, float32 [B,Hq,Sq,Sk].");
  flags->Add("out_output", FlagSet::Kind::kString, "",
             "The output P v, float32 [B,Sq,Hq,Dv] (needs v).");
  flags->Add("out_lse", FlagSet::Kind::kString, "", "The log-sum-exp, float32 [B,Hq,Sq].");
  flags->Add("out_top_k_indices", FlagSet::Kind::kString, "",
             "The top-k key indices, int32 ('<i4') [B,Hq,Sq,top_k]; -1 past the keys a query "
             "sees.");
  flags->Add("out_top_k_probs", FlagSet::Kind::kString, "",
             "The top-k probabilities, float32 [B,Hq,Sq,top_k].");
  flags->Add("out_key_mass", FlagSet::Kind::kString, "",
             "Each key's probability summed over the queries, float32 [B,Hq,Sk].");
  flags->Add("out_score_rows", FlagSet::Kind::kString, "",
             "The score rows, float32 [B,Hq,count,Sk].");
  AddSaveInputsFlag(flags);
}

void AddScoresFlags(FlagSet* flags) { AddAttentionFlags(flags, ""); }
void AddAttendFlags(FlagSet* flags) { AddAttentionFlags(flags, "output,lse"); }

// Which results a request computes: `results`, or the default set.
std::vector<v1::AttentionResult> Effective(const std::vector<v1::AttentionResult>& results,
                                           bool has_v) {
  if (!results.empty()) return results;
  if (has_v) return {v1::SCORES, v1::OUTPUT};
  return {v1::SCORES};
}

bool Has(const std::vector<v1::AttentionResult>& results, v1::AttentionResult r) {
  for (v1::AttentionResult x : results) {
    if (x == r) return true;
  }
  return false;
}

// Bytes of the reply for q [B,Sq,Hq,D], k [B,Sk,Hkv,D] (rank 3: B = 1) and
// v [B,Sk,Hkv,Dv]: 4 bytes per element of each result computed. 0 when a
// shape is not of rank 3 or 4 (the server names that).
int64_t ReplyBytes(const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                   const std::vector<int64_t>& v, const std::vector<v1::AttentionResult>& asked,
                   int64_t top_k, int64_t rows_start, int64_t rows_count) {
  if (q.size() < 3 || q.size() > 4 || k.size() != q.size()) return 0;
  const size_t off = q.size() - 3;
  const double batch = off == 1 ? static_cast<double>(q[0]) : 1.0;
  const double sq = static_cast<double>(q[off]), hq = static_cast<double>(q[off + 1]);
  const double sk = static_cast<double>(k[off]);
  const bool has_v = v.size() == q.size();
  const double dv = has_v ? static_cast<double>(v[off + 2]) : 0.0;
  const std::vector<v1::AttentionResult> results = Effective(asked, has_v);
  double elements = 0;
  for (v1::AttentionResult r : results) {
    switch (r) {
      case v1::SCORES: elements += batch * hq * sq * sk; break;
      case v1::OUTPUT: elements += batch * sq * hq * dv; break;
      case v1::LSE: elements += batch * hq * sq; break;
      case v1::TOP_K: elements += 2.0 * batch * hq * sq * static_cast<double>(top_k); break;
      case v1::KEY_MASS: elements += batch * hq * sk; break;
      case v1::SCORE_ROWS: {
        const double rows = rows_count > 0 ? static_cast<double>(rows_count)
                                           : std::max(0.0, sq - static_cast<double>(rows_start));
        elements += batch * hq * rows * sk;
        break;
      }
      default: break;
    }
  }
  const double total = elements * 4.0;
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

// The request's fields beyond the tensors and the config, from the flags.
absl::Status FillRequestFields(const FlagSet& flags, v1::AttentionScoresRequest* request) {
  if (flags.IsSet("q_positions") && flags.IsSet("q_start_pos")) {
    return UsageError("give --q_start_pos or --q_positions, not both");
  }
  if (flags.IsSet("k_positions") && flags.IsSet("k_start_pos")) {
    return UsageError("give --k_start_pos or --k_positions, not both");
  }
  request->set_q_start_pos(flags.Int("q_start_pos"));
  request->set_k_start_pos(flags.Int("k_start_pos"));
  // The validators accepted these lists already; a failure here is still a
  // usage error, never a crash.
  ROPE_ASSIGN_OR_RETURN(const std::vector<int64_t> q_positions,
                        ParseInt64List(flags.String("q_positions")));
  ROPE_ASSIGN_OR_RETURN(const std::vector<int64_t> k_positions,
                        ParseInt64List(flags.String("k_positions")));
  for (int64_t p : q_positions) request->add_q_positions(p);
  for (int64_t p : k_positions) request->add_k_positions(p);
  request->set_causal(flags.Bool("causal"));
  request->set_softmax(flags.Bool("softmax"));
  request->set_scale(flags.Double("scale"));
  // -1 (the default) leaves a window side unset; other negatives go to the
  // server, which names them.
  if (flags.Int("window_left") != -1) request->set_window_left(flags.Int("window_left"));
  if (flags.Int("window_right") != -1) request->set_window_right(flags.Int("window_right"));
  request->set_chunk_size(flags.Int("chunk_size"));
  request->set_softcap(flags.Double("softcap"));
  ROPE_ASSIGN_OR_RETURN(const std::vector<double> sinks, ParseDoubleList(flags.String("sinks")));
  ROPE_ASSIGN_OR_RETURN(const std::vector<double> slopes,
                        ParseDoubleList(flags.String("alibi_slopes")));
  for (double s : sinks) request->add_sinks(static_cast<float>(s));
  for (double s : slopes) request->add_alibi_slopes(static_cast<float>(s));
  const int64_t top_k = flags.Int("top_k");
  if (top_k < 0 || top_k > std::numeric_limits<uint32_t>::max()) {
    return UsageError(absl::StrCat("--top_k is ", top_k, ": must be in [0, 2^32)"));
  }
  request->set_top_k(static_cast<uint32_t>(top_k));
  request->set_score_rows_start(flags.Int("score_rows_start"));
  request->set_score_rows_count(flags.Int("score_rows_count"));
  ROPE_ASSIGN_OR_RETURN(const std::vector<v1::AttentionResult> results,
                        ParseResults(flags.String("results")));
  for (v1::AttentionResult r : results) request->add_results(r);
  return absl::OkStatus();
}

std::string Describe(const v1::AttentionScoresRequest& r) {
  std::string text = absl::StrCat(
      "  q_start_pos=", r.q_start_pos(), " k_start_pos=", r.k_start_pos(),
      " causal=", r.causal() ? "true" : "false", " softmax=", r.softmax() ? "true" : "false",
      " scale=", r.scale() == 0 ? std::string("default") : absl::StrCat(r.scale()));
  if (r.q_positions_size() > 0) absl::StrAppend(&text, " q_positions=", r.q_positions_size());
  if (r.k_positions_size() > 0) absl::StrAppend(&text, " k_positions=", r.k_positions_size());
  if (r.has_window_left()) absl::StrAppend(&text, " window_left=", r.window_left());
  if (r.has_window_right()) absl::StrAppend(&text, " window_right=", r.window_right());
  if (r.chunk_size() != 0) absl::StrAppend(&text, " chunk_size=", r.chunk_size());
  if (r.softcap() != 0) absl::StrAppend(&text, " softcap=", r.softcap());
  if (r.sinks_size() > 0) absl::StrAppend(&text, " sinks=", r.sinks_size());
  if (r.alibi_slopes_size() > 0) absl::StrAppend(&text, " alibi_slopes=", r.alibi_slopes_size());
  return text;
}

absl::Status RunAttention(const FlagSet& flags, std::ostream& out, const char* command) {
  // Before any input is generated or any call made (random inputs of a
  // mistyped shape take long to make): outputs writable, request and reply
  // within one message.
  for (const ReplyOutput& o : kOutputs) {
    ROPE_RETURN_IF_ERROR(CheckOutputsWritable(flags, {o.flag}));
  }
  absl::StatusOr<std::vector<v1::AttentionResult>> parsed = ParseResults(flags.String("results"));
  if (!parsed.ok()) return UsageError(absl::StrCat("--results: ", parsed.status().message()));
  const std::vector<v1::AttentionResult> asked = *std::move(parsed);
  const auto reply_bytes = [&](const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                               const std::vector<int64_t>& v) {
    return ReplyBytes(q, k, v, asked, flags.Int("top_k"), flags.Int("score_rows_start"),
                      flags.Int("score_rows_count"));
  };
  const std::string reply_what = absl::StrCat(
      "the AttentionScores reply (",
      asked.empty() ? std::string("float32 scores [B,Hq,Sq,Sk] and output")
                    : absl::StrCat("results ", flags.String("results")),
      Has(Effective(asked, true), v1::SCORES) || Has(asked, v1::SCORE_ROWS)
          ? "; --results=output,lse need no Sq x Sk values)"
          : ")");
  ROPE_RETURN_IF_ERROR(CheckMessageFits("the AttentionScores request (q, k and v)",
                                        InputBytesBeforeLoading(flags, "q", "random_q_shape") +
                                            InputBytesBeforeLoading(flags, "k", "random_k_shape") +
                                            InputBytesBeforeLoading(flags, "v", "random_v_shape")));
  ROPE_RETURN_IF_ERROR(CheckMessageFits(
      reply_what,
      reply_bytes(ShapeOfFlag(flags, "random_q_shape"), ShapeOfFlag(flags, "random_k_shape"),
                  ShapeOfFlag(flags, "random_v_shape"))));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> q,
                        LoadInputTensor(flags, "q", "random_q_shape", 0));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> k,
                        LoadInputTensor(flags, "k", "random_k_shape", 1));
  ROPE_ASSIGN_OR_RETURN(std::optional<InputTensor> v,
                        LoadInputTensor(flags, "v", "random_v_shape", 2));
  if (!q.has_value() || !k.has_value()) {
    return UsageError(absl::StrCat(command, " needs q and k: --q / --random_q_shape and --k / ",
                                   "--random_k_shape"));
  }
  const std::vector<v1::AttentionResult> results = Effective(asked, v.has_value());
  // An --out_* flag for a result not computed would write nothing: say so.
  for (const ReplyOutput& o : kOutputs) {
    if (!flags.String(o.flag).empty() && !Has(results, o.result)) {
      if (o.result == v1::OUTPUT && !v.has_value()) {
        return UsageError("--out_output given but there is no v (--v or --random_v_shape)");
      }
      return UsageError(absl::StrCat("--", o.flag, " given but --results does not ask for ",
                                     kResults[o.result - 1].name));
    }
  }
  ROPE_RETURN_IF_ERROR(CheckMessageFits(reply_what, reply_bytes(ShapeOf(q), ShapeOf(k), ShapeOf(v))));
  const v1::Tensor& q_tensor = q->tensor;
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config,
                        RopeConfigFromFlags(flags, q_tensor.shape(q_tensor.shape_size() - 1)));

  v1::AttentionScoresRequest request;
  *request.mutable_config() = config;
  *request.mutable_q() = q_tensor;
  *request.mutable_k() = k->tensor;
  if (v.has_value()) *request.mutable_v() = v->tensor;
  ROPE_RETURN_IF_ERROR(FillRequestFields(flags, &request));

  ROPE_RETURN_IF_ERROR(SaveInputsIfAsked(flags, q, k, v, out));
  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client, ClientFromFlags(flags));
  std::string defaults_note;
  if (absl::Status completed =
          CompleteHfConfigFromFlags(*client, flags, request.mutable_config(), &defaults_note);
      !completed.ok()) {
    return ExplainHfHeadDimMismatch(completed, flags, q_tensor.shape(q_tensor.shape_size() - 1));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::AttentionScoresResponse> response = client->AttentionScores(request);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) {
    return ExplainHfHeadDimMismatch(response.status(), flags,
                                    q_tensor.shape(q_tensor.shape_size() - 1));
  }

  out << command << "  " << flags.String("target") << "  "
      << DescribeEffectiveConfig(*client, request.config()) << "\n";
  if (!defaults_note.empty()) out << "  from the config.json: " << defaults_note << "\n";
  out << Describe(request) << "\n";
  out << "  q: " << ShapeAndDType(q_tensor) << "  from " << q->source << "\n";
  out << "  k: " << ShapeAndDType(k->tensor) << "  from " << k->source << "\n";
  if (v.has_value()) {
    out << "  v: " << ShapeAndDType(v->tensor) << "  from " << v->source << "\n";
  }
  for (const ReplyOutput& o : kOutputs) {
    if (!Has(results, o.result)) continue;
    const v1::Tensor& tensor = ((*response).*(o.tensor))();
    absl::StatusOr<std::string> summary =
        SummarizeTensor(tensor, absl::StrCat("reply ", o.label));
    if (!summary.ok()) return summary.status();
    // "probs " and "scores" align, as the summary has always printed them.
    const std::string label =
        o.result == v1::SCORES ? (request.softmax() ? "probs " : "scores") : o.label;
    out << "  " << label << ": " << *summary << "\n";
  }
  out << "  elapsed " << FormatMillis(elapsed) << "\n";
  for (const ReplyOutput& o : kOutputs) {
    if (!Has(results, o.result)) continue;
    ROPE_RETURN_IF_ERROR(WriteOutputIfAsked(flags, o.flag, ((*response).*(o.tensor))(), out));
  }
  return absl::OkStatus();
}

absl::Status RunScores(const FlagSet& flags, std::ostream& out) {
  return RunAttention(flags, out, "scores");
}
absl::Status RunAttend(const FlagSet& flags, std::ostream& out) {
  return RunAttention(flags, out, "attend");
}

}  // namespace

extern const Command kScoresCommand = {
    "scores",
    "Attention with RoPE applied inside (RopeService.AttentionScores)",
    "Sends unrotated q and k (and optionally v); the server rotates them and\n"
    "returns S[b,h,i,j] = (R q_i).(R k_j) * scale under the masks and transforms\n"
    "asked (causal, sliding window, chunks, soft-capping, ALiBi, sinks), or its\n"
    "softmax over keys, float32 [B,Hq,Sq,Sk], and output = P v when v is given.\n"
    "--results picks other results (output, lse, top_k, key_mass, score_rows),\n"
    "each written to its own .npy file by its --out_* flag.",
    AddScoresFlags,
    RunScores,
};

extern const Command kAttendCommand = {
    "attend",
    "Attention output and log-sum-exp without the Sq x Sk matrix (AttentionScores)",
    "scores with --results=output,lse by default: the output P v [B,Sq,Hq,Dv] and\n"
    "each row's log-sum-exp [B,Hq,Sq], computed tile by tile on the server, so\n"
    "long contexts need no Sq x Sk memory. Outputs over disjoint key ranges\n"
    "merge exactly from their output and lse (client/attention_merge.h).",
    AddAttendFlags,
    RunAttend,
};

}  // namespace client
}  // namespace rope
