// ropeload: the load generator of ropeserve (see README.md, "ropeload").
#ifndef ROPE_CLIENT_LOAD_ROPELOAD_COMMAND_H_
#define ROPE_CLIENT_LOAD_ROPELOAD_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace rope {
namespace load {

// Exit codes.
inline constexpr int kExitOk = 0;       // the run finished (RPC errors are reported, not fatal)
inline constexpr int kExitFailure = 1;  // no server, a report not written, a --verify mismatch
inline constexpr int kExitUsage = 2;
// The run finished but more calls failed than --max_error_rate allows.
inline constexpr int kExitErrorRate = 3;    // bad command line

// Runs `ropeload args...` (args excludes argv[0]): the summary goes to
// `out`, errors to `err` as one line "ropeload: <CODE>: <message>", and the
// progress bar to stderr when it is a terminal. Returns the exit code.
int RunRopeload(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_ROPELOAD_COMMAND_H_
