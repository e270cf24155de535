// ropectl table: RopeService.GetTable.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/commands.h"
#include "client/cli/common_flags.h"
#include "client/cli/summary.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

constexpr int kInvFreqShown = 4;

void AddTableFlags(FlagSet* flags) {
  AddConnectionFlags(flags);
  AddRopeConfigFlags(flags);
  flags->BeginGroup("Rows");
  flags->Add("start", FlagSet::Kind::kInt, "0", "First row (position).");
  flags->Add("count", FlagSet::Kind::kInt, "0", "Rows to fetch; 0 means to the end of the table.");
  flags->BeginGroup("Outputs");
  flags->Add("out_cos", FlagSet::Kind::kString, "",
             "Write cos, float32 [count, rotary_dim/2], to this .npy file.");
  flags->Add("out_sin", FlagSet::Kind::kString, "",
             "Write sin, float32 [count, rotary_dim/2], to this .npy file.");
}

absl::Status RunTable(const FlagSet& flags, std::ostream& out) {
  std::string defaults_note;
  ROPE_ASSIGN_OR_RETURN(v1::RopeConfig config, RopeConfigFromFlags(flags, 0, &defaults_note));
  v1::GetTableRequest request;
  *request.mutable_config() = config;
  request.set_start(flags.Int("start"));
  request.set_count(flags.Int("count"));

  ROPE_ASSIGN_OR_RETURN(std::unique_ptr<RopeClient> client, ClientFromFlags(flags));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::GetTableResponse> response = client->GetTable(request);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) return response.status();

  out << "table  " << flags.String("target") << "  " << DescribeEffectiveConfig(*client, config)
      << "\n";
  std::vector<std::string> inv_freq;
  const int shown = std::min(response->inv_freq_size(), kInvFreqShown);
  for (int i = 0; i < shown; ++i) {
    inv_freq.push_back(absl::StrFormat("%.9g", response->inv_freq(i)));
  }
  if (shown < response->inv_freq_size()) inv_freq.push_back("...");
  if (!defaults_note.empty()) out << "  from the config.json: " << defaults_note << "\n";
  out << "  rows from " << response->start() << "  attention_factor="
      << absl::StrFormat("%g", response->attention_factor()) << "  inv_freq["
      << response->inv_freq_size() << "]=[" << absl::StrJoin(inv_freq, ", ") << "]\n";
  absl::StatusOr<std::string> summary = SummarizeTensor(response->cos(), "reply cos");
  if (!summary.ok()) return summary.status();
  out << "  cos: " << *summary << "\n";
  summary = SummarizeTensor(response->sin(), "reply sin");
  if (!summary.ok()) return summary.status();
  out << "  sin: " << *summary << "\n";
  out << "  elapsed " << FormatMillis(elapsed) << "\n";
  ROPE_RETURN_IF_ERROR(WriteOutputIfAsked(flags, "out_cos", response->cos(), out));
  return WriteOutputIfAsked(flags, "out_sin", response->sin(), out);
}

}  // namespace

extern const Command kTableCommand = {
    "table",
    "Fetch rows of the cos/sin table of a config (RopeService.GetTable)",
    "Prints inv_freq, the attention factor and statistics of the cos and sin\n"
    "rows [start, start+count) of the server's table for the config\n"
    "(--head_dim is required), and writes them as .npy when asked.",
    AddTableFlags,
    RunTable,
};

}  // namespace client
}  // namespace rope
