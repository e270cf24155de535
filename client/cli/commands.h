// ropectl's subcommands and the dispatcher that runs one of them.
#ifndef ROPE_CLIENT_CLI_COMMANDS_H_
#define ROPE_CLIENT_CLI_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/flags/flag_set.h"

namespace rope {
namespace client {

struct Command {
  const char* name;
  const char* summary;      // one line for `ropectl --help`
  const char* description;  // the paragraph heading `ropectl <name> --help`
  void (*add_flags)(FlagSet* flags);
  // Runs with parsed flags, printing the readable summary on `out`. Returns
  // the failure to report: a usage error (IsUsageError) for a bad command
  // line, any other status for a failed call or file.
  absl::Status (*run)(const FlagSet& flags, std::ostream& out);
};

// Defined in cmd_rotate.cc, cmd_scores.cc, cmd_table.cc, cmd_resolve.cc,
// cmd_positions.cc, cmd_server.cc.
extern const Command kRotateCommand;
extern const Command kScoresCommand;
extern const Command kAttendCommand;
extern const Command kTableCommand;
extern const Command kResolveCommand;
extern const Command kPositionsCommand;
extern const Command kInfoCommand;
extern const Command kHealthCommand;

// Exit codes of ropectl.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // RPC or file error; health not SERVING
inline constexpr int kExitUsage = 2;    // bad command line

// Runs `ropectl args...` (args excludes argv[0]). Help and summaries go to
// `out`; errors go to `err` as one line "ropectl <cmd>: <CODE>: <message>".
// Returns the exit code.
int RunRopectl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_CLI_COMMANDS_H_
