// ropectl resolve: RopeService.ResolveConfig.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/cli_parsing.h"
#include "client/cli/commands.h"
#include "client/cli/common_flags.h"
#include "client/cli/scaling_flags.h"
#include "client/cli/summary.h"

namespace rope {
namespace client {
namespace {

void AddResolveFlags(FlagSet* flags) {
  AddConnectionFlags(flags);
  AddRopeConfigFlags(flags);
}

absl::Status RunResolve(const FlagSet& flags, std::ostream& out) {
  std::string defaults_note;
  absl::StatusOr<v1::RopeConfig> config = RopeConfigFromFlags(flags, 0, &defaults_note);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<RopeClient>> client = ClientFromFlags(flags);
  if (!client.ok()) return client.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::ResolvedConfig> resolved = (*client)->ResolveConfig(*config);
  const absl::Duration elapsed = absl::Now() - start;
  if (!resolved.ok()) return resolved.status();

  const std::string source =
      flags.String("hf_config").empty() ? "flags" : flags.String("hf_config");
  out << "resolve  " << flags.String("target") << "  " << source;
  if (!flags.String("hf_layer_type").empty()) out << " (" << flags.String("hf_layer_type") << ")";
  out << "\n";
  if (!defaults_note.empty()) out << "  from the config.json: " << defaults_note << "\n";
  out << "  config: " << DescribeConfig(resolved->config()) << "\n";
  out << "  as flags: " << ConfigAsFlags(resolved->config()) << "\n";
  if (!flags.String("hf_config").empty()) {
    // What the config.json says beyond the rope: the layout its model's
    // code pairs features in, its length, the layer, NoPE, the MLA head.
    out << "  from config.json: layout=" << LayoutName(resolved->hf_layout())
        << " max_position_embeddings=" << resolved->max_position_embeddings()
        << " layer_type=" << resolved->layer_type();
    if (resolved->no_rope()) out << " no_rope (Rotate is the identity)";
    if (resolved->whole_head_dim() != 0) {
      out << " whole_head_dim=" << resolved->whole_head_dim() << " (its last "
          << resolved->config().rotary_dim() << " features rotate)";
    }
    out << "\n";
  }
  out << "  attention_factor=" << ExactDecimal(resolved->attention_factor()) << "\n";
  std::vector<std::string> inv_freq;
  for (double f : resolved->inv_freq()) inv_freq.push_back(ExactDecimal(f));
  out << "  inv_freq[" << resolved->inv_freq_size() << "]=[" << absl::StrJoin(inv_freq, ", ")
      << "]\n";
  out << "  table_key: " << resolved->table_key() << "\n";
  for (int a = 0; a < resolved->axis_table_keys_size(); ++a) {
    out << "  axis " << a << " table_key: " << resolved->axis_table_keys(a) << "\n";
  }
  out << "  elapsed " << FormatMillis(elapsed) << "\n";
  return absl::OkStatus();
}

}  // namespace

extern const Command kResolveCommand = {
    "resolve",
    "Show what a config (or a model's config.json) resolves to (RopeService.ResolveConfig)",
    "Sends the RoPE config of the flags, typically --hf_config=config.json, and\n"
    "prints the explicit config the server derives (also as ropectl flags, to\n"
    "send it without the JSON), the attention factor, every inverse frequency\n"
    "and the table-cache key. Nothing is rotated and no table is built.\n"
    "Example: ropectl resolve --hf_config=Qwen3-8B/config.json --max_len=32768",
    AddResolveFlags,
    RunResolve,
};

}  // namespace client
}  // namespace rope
