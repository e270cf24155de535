// --rope_scaling and the parameters of each variant, shared by every tool
// that builds a rope.v1.RopeConfig from flags (ropectl, ropeload). Names
// follow Hugging Face's rope_scaling keys; dashes and underscores are
// interchangeable on the command line (--rope-scaling=llama3 --factor=8).
#ifndef ROPE_CLIENT_FLAGS_SCALING_FLAGS_H_
#define ROPE_CLIENT_FLAGS_SCALING_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/flags/flag_set.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// --rope_scaling, --factor, --original_max_position_embeddings, --beta_fast,
// --beta_slow, --mscale, --mscale_all_dim, --attention_factor, --truncate,
// --low_freq_factor, --high_freq_factor, --short_factor, --long_factor,
// --max_position_embeddings.
void AddScalingFlags(FlagSet* flags);

// The names of the flags AddScalingFlags declares.
std::vector<std::string> ScalingFlagNames();

// Sets config's scaling oneof from the flags. A usage error for a parameter
// the chosen variant does not take (e.g. --beta_fast with --rope_scaling=linear)
// or a malformed list; values are checked by the server.
absl::Status ApplyScalingFlags(const FlagSet& flags, v1::RopeConfig* config);

// "llama3(factor=8 low_freq_factor=1 ...)" or "none".
std::string DescribeScaling(const v1::RopeConfig& config);

// The shortest decimal that reads back as exactly `v`.
std::string ExactDecimal(double v);

// The scaling flags that give `config`'s scaling exactly ("" for none):
// "--rope_scaling=llama3 --factor=8 --low_freq_factor=1 ...".
std::string ScalingAsFlags(const v1::RopeConfig& config);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_FLAGS_SCALING_FLAGS_H_
