// ropectl positions: RopeService.BuildPositions.
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli/axial_flags.h"
#include "client/cli/cli_parsing.h"
#include "client/cli/commands.h"
#include "client/cli/common_flags.h"
#include "client/cli/scaling_flags.h"
#include "client/cli/summary.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

// Values printed per axis before "..." (the reply can be large).
constexpr int kShownValues = 64;

absl::Status ValidateInts(absl::string_view text) { return ParseInt64List(text).status(); }

// --rope_index_layout's words and their wire values.
absl::StatusOr<v1::RopeIndexLayout> LayoutOf(absl::string_view text) {
  if (text == "default") return v1::ROPE_INDEX_LAYOUT_DEFAULT;
  if (text == "transformers_4") return v1::ROPE_INDEX_LAYOUT_TRANSFORMERS_4;
  if (text == "transformers_5") return v1::ROPE_INDEX_LAYOUT_TRANSFORMERS_5;
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text, "' is not a layout: default, transformers_4 or transformers_5"));
}

absl::Status ValidateLayout(absl::string_view text) { return LayoutOf(text).status(); }

void AddPositionsFlags(FlagSet* flags) {
  AddConnectionFlags(flags);
  flags->BeginGroup("Qwen2-VL / Qwen2.5-VL / Qwen3-VL token sequences");
  flags->Add("hf_config", FlagSet::Kind::kString, "",
             "The model's config.json: its model_type, token ids, spatial_merge_size and "
             "tokens_per_second.");
  flags->Add("input_ids", FlagSet::Kind::kString, "", "Token ids, B*S values row-major.",
             ValidateInts);
  flags->Add("batch", FlagSet::Kind::kInt, "1", "B: the batch rows input_ids holds.");
  flags->Add("attention_mask", FlagSet::Kind::kString, "",
             "0 / 1 per input_ids value (padding 0); empty: every token.", ValidateInts);
  flags->Add("image_grid_thw", FlagSet::Kind::kString, "",
             "t,h,w of each image in patches, one after the other.", ValidateInts);
  flags->Add("video_grid_thw", FlagSet::Kind::kString, "",
             "t,h,w of each video in patches, one after the other.", ValidateInts);
  flags->Add("second_per_grid_ts", FlagSet::Kind::kString, "",
             "Qwen2.5-VL: seconds per temporal patch of each video (default 1).");
  flags->Add("rope_deltas", FlagSet::Kind::kString, "",
             "Decode instead: each row's rope_delta (a prefill's reply); input_ids then only "
             "counts the new tokens.",
             ValidateInts);
  flags->Add("cache_position", FlagSet::Kind::kInt, "0",
             "Decode: tokens already in the cache (the first new token's index).");
  flags->Add("rope_index_layout", FlagSet::Kind::kString, "default",
             "Which transformers release's get_rope_index: default (= transformers_4, the 4.5x "
             "form), transformers_4 or transformers_5.",
             ValidateLayout);
  flags->BeginGroup("Axial grids");
  flags->Add("grid", FlagSet::Kind::kString, "",
             "Grids of tokens instead: joined by ';', each SIZE[/start=..][/step=..][/rope_axis=..], "
             "e.g. '512x1x1/step=0,0,0;1x64x64' (Flux's text then image ids).");
}

absl::Status AddInts(const FlagSet& flags, const char* name,
                     google::protobuf::RepeatedField<int64_t>* out) {
  absl::StatusOr<std::vector<int64_t>> values = ParseInt64List(flags.String(name));
  if (!values.ok()) return UsageError(absl::StrCat("--", name, ": ", values.status().message()));
  out->Add(values->begin(), values->end());
  return absl::OkStatus();
}

absl::Status RunPositions(const FlagSet& flags, std::ostream& out) {
  v1::BuildPositionsRequest request;
  if (!flags.String("grid").empty()) {
    absl::StatusOr<std::vector<v1::PositionGrid>> grids = ParseGrids(flags.String("grid"));
    if (!grids.ok()) return UsageError(grids.status().message());
    for (v1::PositionGrid& g : *grids) *request.add_grids() = std::move(g);
  }
  if (!flags.String("hf_config").empty()) {
    // The config.json is read as RopeConfigFromFlags reads it.
    FlagSet config_flags;
    AddRopeConfigFlags(&config_flags);
    const std::vector<std::string> args = {"--hf_config=" + flags.String("hf_config"),
                                           "--head_dim=0"};
    ROPE_RETURN_IF_ERROR(config_flags.Parse(args));
    ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config, RopeConfigFromFlags(config_flags, 0));
    request.set_hf_config_json(config.hf_config_json());
  }
  ROPE_RETURN_IF_ERROR(AddInts(flags, "input_ids", request.mutable_input_ids()));
  ROPE_RETURN_IF_ERROR(AddInts(flags, "attention_mask", request.mutable_attention_mask()));
  ROPE_RETURN_IF_ERROR(AddInts(flags, "image_grid_thw", request.mutable_image_grid_thw()));
  ROPE_RETURN_IF_ERROR(AddInts(flags, "video_grid_thw", request.mutable_video_grid_thw()));
  ROPE_RETURN_IF_ERROR(AddInts(flags, "rope_deltas", request.mutable_rope_deltas()));
  for (absl::string_view item : absl::StrSplit(flags.String("second_per_grid_ts"), ',',
                                               absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(item, &v)) {
      return UsageError(absl::StrCat("--second_per_grid_ts: '", item, "' is not a number"));
    }
    request.add_second_per_grid_ts(v);
  }
  request.set_batch(flags.Int("batch"));
  request.set_cache_position(flags.Int("cache_position"));
  ROPE_ASSIGN_OR_RETURN(const v1::RopeIndexLayout layout, LayoutOf(flags.String("rope_index_layout")));
  request.set_rope_index_layout(layout);

  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client, ClientFromFlags(flags));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::BuildPositionsResponse> reply = client->BuildPositions(request);
  const absl::Duration elapsed = absl::Now() - start;
  if (!reply.ok()) return reply.status();

  const bool fractional = reply->fractional_positions_size() > 0;
  const int64_t values = fractional ? reply->fractional_positions_size() : reply->positions_size();
  const int64_t rows = reply->axes() == 0 ? 0 : values / reply->axes();
  out << "positions  " << flags.String("target") << "  "
      << (request.grids_size() > 0 ? "grids " + flags.String("grid")
                                   : "token sequence, batch " + absl::StrCat(flags.Int("batch")))
      << "\n";
  out << "  " << reply->axes() << " axes x " << rows << " rows ([axis][b][s])"
      << (fractional ? ", fractional" : "") << "\n";
  for (uint32_t a = 0; a < reply->axes(); ++a) {
    std::vector<std::string> shown;
    for (int64_t r = 0; r < rows && r < kShownValues; ++r) {
      shown.push_back(fractional ? ExactDecimal(reply->fractional_positions(a * rows + r))
                                 : absl::StrCat(reply->positions(a * rows + r)));
    }
    out << "  axis " << a << ": " << absl::StrJoin(shown, ",") << (rows > kShownValues ? ",..." : "")
        << "\n";
  }
  if (reply->rope_deltas_size() > 0) {
    out << "  rope_deltas: " << absl::StrJoin(reply->rope_deltas(), ",") << "\n";
  }
  out << "  elapsed " << FormatMillis(elapsed) << "\n";
  return absl::OkStatus();
}

}  // namespace

extern const Command kPositionsCommand = {
    "positions",
    "Build positions from a token sequence or grids (RopeService.BuildPositions)",
    "Asks the server for the positions of a Qwen2-VL / Qwen2.5-VL / Qwen3-VL token\n"
    "sequence (transformers' get_rope_index: --hf_config, --input_ids and the image /\n"
    "video grids; or the decode positions after it with --rope_deltas), or of axial\n"
    "grids (--grid), and prints them per axis with the rope_deltas. `ropectl rotate\n"
    "--grid=...` rotates by grid positions without fetching them.\n"
    "Example: ropectl positions --grid='512x1x1/step=0,0,0;1x64x64'",
    AddPositionsFlags,
    RunPositions,
};

}  // namespace client
}  // namespace rope
