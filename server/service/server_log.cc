#include "server/service/server_log.h"

#include <grpc/support/log.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rope {
namespace {

extern "C" void DropGrpcLog(gpr_log_func_args* /*args*/) {}

// One write per line, so that lines of concurrent threads never interleave.
extern "C" void WriteGrpcLog(gpr_log_func_args* args) {
  const std::string line = absl::StrCat("ropeserve: grpc: ", gpr_log_severity_string(args->severity),
                                        " ", args->file, ":", args->line, ": ", args->message,
                                        "\n");
  std::fflush(stderr);
  const ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace

absl::Status SetUpServerLog(absl::string_view grpc_verbosity) {
  const std::string level = absl::AsciiStrToLower(grpc_verbosity);
  if (!level.empty() && level != "debug" && level != "info" && level != "error") {
    return absl::InvalidArgumentError(absl::StrCat("--grpc_verbosity is \"", grpc_verbosity,
                                                   "\": must be empty, debug, info or error"));
  }
  std::fflush(stdout);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (level.empty()) {
    if (std::getenv("GRPC_VERBOSITY") == nullptr && std::getenv("GRPC_TRACE") == nullptr) {
      gpr_set_log_function(DropGrpcLog);
    }
    return absl::OkStatus();
  }
  gpr_set_log_verbosity(level == "debug"  ? GPR_LOG_SEVERITY_DEBUG
                        : level == "info" ? GPR_LOG_SEVERITY_INFO
                                          : GPR_LOG_SEVERITY_ERROR);
  gpr_set_log_function(WriteGrpcLog);
  return absl::OkStatus();
}

}  // namespace rope
