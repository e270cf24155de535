#include "core/backends/cpu/cpu_simd.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rope {
namespace {

std::string JoinNames(bool only_supported) {
  std::vector<std::string> names;
  for (const CpuSimdPath& path : CompiledCpuSimdPaths()) {
    if (!only_supported || path.supported) names.push_back(path.name);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

std::vector<CpuSimdPath> CompiledCpuSimdPaths() {
  std::vector<CpuSimdPath> paths;
  for (const cpu::CompiledKernels& compiled : cpu::AllCompiledKernels()) {
    paths.push_back({compiled.kernels->name, compiled.supported});
  }
  return paths;
}

absl::StatusOr<const cpu::CpuKernels*> SelectCpuKernels(absl::string_view request,
                                                       absl::string_view origin) {
  if (request.empty() || request == "auto") return &cpu::BestCpuKernels();
  for (const cpu::CompiledKernels& compiled : cpu::AllCompiledKernels()) {
    if (request != compiled.kernels->name) continue;
    if (!compiled.supported) {
      return absl::FailedPreconditionError(
          absl::StrCat(origin, " is \"", request, "\": this CPU cannot run that SIMD path; it can "
                       "run ", JoinNames(true), " (or auto)"));
    }
    return compiled.kernels;
  }
  return absl::InvalidArgumentError(absl::StrCat(origin, " is \"", request,
                                                 "\": must be auto or a SIMD path this binary "
                                                 "was built with: ",
                                                 JoinNames(false)));
}

std::string CpuSimdFromEnvironment() {
  const char* value = std::getenv(kCpuSimdEnv);
  return value == nullptr ? "" : value;
}

}  // namespace rope
