// Which SIMD path the CPU backend runs. One binary carries every path it was
// compiled for (cpu_kernels.h); by default it runs the best one this CPU
// supports, and an operator can force a lower one (ropeserve --cpu_simd, or
// the ROPE_CPU_SIMD environment variable) to compare paths or to avoid one.
//
// Path names, best first: "avx512_bf16" (avx512, and bfloat16 narrowed by
// AVX-512 BF16's instruction), "avx512" (AVX-512 F/BW/DQ/VL), "avx2" (AVX2, FMA,
// F16C), "sse4" (SSE4.2), "sse2" (baseline x86-64); "neon", "sve", ... on
// Arm. Thread-safe.
#ifndef ROPE_BACKENDS_CPU_CPU_SIMD_H_
#define ROPE_BACKENDS_CPU_CPU_SIMD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/backends/cpu/cpu_kernels.h"

namespace rope {

// The environment variable that forces a path when no flag does.
inline constexpr char kCpuSimdEnv[] = "ROPE_CPU_SIMD";

struct CpuSimdPath {
  std::string name;
  bool supported = false;  // this CPU can run it
};

// Every compiled path, best first.
std::vector<CpuSimdPath> CompiledCpuSimdPaths();

// The kernels for `request`: "" or "auto" picks the best path this CPU
// supports; a path name picks that path. `origin` names where the request
// came from (e.g. "--cpu_simd") for error messages.
// INVALID_ARGUMENT: not a compiled path's name (the message lists them).
// FAILED_PRECONDITION: a compiled path this CPU cannot run (the message lists
// the ones it can).
absl::StatusOr<const cpu::CpuKernels*> SelectCpuKernels(absl::string_view request,
                                                       absl::string_view origin);

// The path requested by ROPE_CPU_SIMD, or "" when it is unset or empty.
std::string CpuSimdFromEnvironment();

}  // namespace rope

#endif  // ROPE_BACKENDS_CPU_CPU_SIMD_H_
