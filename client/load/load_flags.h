// ropeload's command line: the flags it declares (ropectl's connection and
// RoPE config flags among them, from the same code) and the LoadSpec they
// make.
#ifndef ROPE_CLIENT_LOAD_LOAD_FLAGS_H_
#define ROPE_CLIENT_LOAD_LOAD_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/flags/flag_set.h"
#include "client/load/load_spec.h"

namespace rope {
namespace load {

// Every ropeload flag: connection (--target, --deadline, --connections),
// load shape, measurement, outputs, and the workload's (workload.h).
void AddLoadFlags(client::FlagSet* flags);

// The LoadSpec of parsed flags; a usage error (client::IsUsageError) naming
// the flag for a value out of range or a contradictory combination.
absl::StatusOr<LoadSpec> LoadSpecFromFlags(const client::FlagSet& flags);

// ghz's short forms: -c N (--concurrency), -n N (--requests),
// -z D (--duration), with a space or '='. Other words are kept as they are.
std::vector<std::string> ExpandShortFlags(const std::vector<std::string>& args);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_LOAD_FLAGS_H_
