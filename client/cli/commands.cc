#include "client/cli/commands.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/types/span.h"
#include "client/flags/common_flags.h"
#include "client/transport_errors.h"

namespace rope {
namespace client {
namespace {

const Command* const kCommands[] = {&kRotateCommand,  &kScoresCommand,    &kAttendCommand,
                                    &kTableCommand,   &kResolveCommand,   &kPositionsCommand,
                                    &kInfoCommand,    &kHealthCommand};

constexpr char kNpyAndExitHelp[] = R"(
Tensors and .npy files:
  Inputs are NumPy .npy files (format 1.0/2.0/3.0, little-endian, C order) or
  random tensors (--random_q_shape=B,S,H,D with --seed and --distribution).
  Outputs are written as .npy files. Supported .npy dtypes:
    '<f4'  float32
    '<f2'  float16
    '<u2'  bfloat16, as raw bits (also read: '<i2', e.g. torch's
           t.view(torch.int16).numpy(), with --dtype=bfloat16)
    '<f8'  float64, NumPy's default: read only, converted to --dtype
           (float32 unless given), rounding to nearest even
    '<i4'  int32: written only (attention's top-k key indices)
  NumPy has no bfloat16, so a bfloat16 tensor is written as '<u2' holding the
  upper 16 bits of each float32 value, and a '<u2' file is read back as
  bfloat16 only when --dtype=bfloat16 is given. In NumPy:
    to float32:  (bits.astype(np.uint32) << 16).view(np.float32)
    from float32 (round to nearest even, finite values):
      u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
      bits = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  Fortran-order, big-endian and other dtypes are rejected.
  Rank-3 tensors [S,H,D] mean batch 1.

Exit status:
  0  success (health: the server is SERVING)
  1  the call or a file operation failed, or health is not SERVING; one line
     on stderr names the gRPC status code and message, e.g.
     "ropectl rotate: INVALID_ARGUMENT: config.head_dim is 7: must be even"
  2  bad command line (unknown flag, malformed value, missing input)
Flag names take '-' or '_' alike (--random-q-shape = --random_q_shape).
)";

std::string TopLevelHelp() {
  std::string out =
      "ropectl: command-line client of ropeserve (rope.v1.RopeService), which\n"
      "applies rotary position embeddings (RoPE) to query/key tensors.\n\n"
      "Usage:\n"
      "  ropectl <command> [flags]\n"
      "  ropectl <command> --help    every flag of a command\n"
      "  ropectl help <command>      the same\n"
      "  ropectl --version           the version\n\n"
      "Commands:\n";
  for (const Command* command : kCommands) {
    absl::StrAppend(&out, absl::StrFormat("  %-8s %s\n", command->name, command->summary));
  }
  absl::StrAppend(
      &out,
      "\nFlags every command takes:\n"
      "  --target=<host:port | ipv4:a:p,b:p | dns:///host:port>  (default localhost:50051)\n"
      "  --deadline=<duration>  (default 30s)\n"
      "rotate, scores, table and resolve also take the RoPE config: --theta,\n"
      "--head_dim, --rotary_dim, --max_len, --layout=interleaved|half, or a model's\n"
      "--hf_config=config.json (with --hf_layer_type); rotate and scores take\n"
      "--dtype=float32|float16|bfloat16.\n\n"
      "Examples:\n"
      "  ropectl health --target=localhost:50051\n"
      "  ropectl rotate --random_q_shape=1,16,8,64 --random_k_shape=1,16,2,64 \\\n"
      "      --start_pos=100 --out_q=q_rot.npy --out_k=k_rot.npy\n"
      "  ropectl rotate --q=q.npy --k=k.npy --layout=half --theta=500000 \\\n"
      "      --positions=0,1,2,7 --out_q=q_rot.npy\n"
      "  ropectl scores --random_q_shape=1,8,4,64 --random_k_shape=1,8,4,64 \\\n"
      "      --causal --softmax --out=probs.npy\n"
      "  ropectl table --head_dim=64 --start=0 --count=16 --out_cos=cos.npy\n"
      "  ropectl resolve --hf_config=Llama-3.1-8B-Instruct/config.json --max_len=131072\n",
      kNpyAndExitHelp);
  return out;
}

std::string CommandHelp(const Command& command, const FlagSet& flags) {
  return absl::StrCat("ropectl ", command.name, ": ", command.summary, "\n\n",
                      command.description, "\n\nUsage: ropectl ", command.name, " [flags]\n",
                      flags.Help(), kNpyAndExitHelp);
}

const Command* FindCommand(const std::string& name) {
  for (const Command* command : kCommands) {
    if (name == command->name) return command;
  }
  return nullptr;
}

// One line: "ropectl rotate: INVALID_ARGUMENT: ..." (newlines in a server
// message folded to spaces).
void ReportError(absl::string_view where, const absl::Status& status, std::ostream& err) {
  std::string message = absl::StrCat(absl::StatusCodeToString(status.code()), ": ",
                                     status.message());
  message = absl::StrReplaceAll(message, {{"\r", " "}, {"\n", " "}});
  err << where << ": " << message << "\n";
}

}  // namespace

int RunRopectl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << TopLevelHelp();
    err << "ropectl: no command given\n";
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "--version" || first == "-version" || first == "version") {
    out << "ropectl " << ROPE_VERSION << "\n";
    return kExitOk;
  }
  if (first == "--help" || first == "-h" || first == "-help" || first == "help") {
    if (first == "help" && args.size() > 1) {
      const Command* command = FindCommand(args[1]);
      if (command == nullptr) {
        err << "ropectl: unknown command '" << args[1] << "' (see ropectl --help)\n";
        return kExitUsage;
      }
      FlagSet flags;
      command->add_flags(&flags);
      out << CommandHelp(*command, flags);
      return kExitOk;
    }
    out << TopLevelHelp();
    return kExitOk;
  }
  const Command* command = FindCommand(first);
  if (command == nullptr) {
    err << "ropectl: unknown command '" << first << "' (commands: rotate, scores, table, "
        << "resolve, info, health; see ropectl --help)\n";
    return kExitUsage;
  }
  FlagSet flags;
  command->add_flags(&flags);
  const std::string where = absl::StrCat("ropectl ", command->name);
  absl::Status status = flags.Parse(absl::MakeConstSpan(args).subspan(1));
  if (flags.help_requested()) {
    out << CommandHelp(*command, flags);
    return kExitOk;
  }
  if (status.ok()) status = command->run(flags, out);
  if (status.ok()) return kExitOk;
  if (IsUsageError(status)) {
    ReportError(where, absl::InvalidArgumentError(absl::StrCat(
                           status.message(), " (see ropectl ", command->name, " --help)")),
                err);
    return kExitUsage;
  }
  ReportError(where,
              ExplainTransportFailure(status, ChannelSecurityFromFlags(flags),
                                      flags.String("target")),
              err);
  return kExitFailure;
}

}  // namespace client
}  // namespace rope
